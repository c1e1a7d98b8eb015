//! The process's token buckets (governor), built from the [`Quotas`] and keyed as AWS keys
//! them: per account, per region for regional services, then per service (account-level,
//! per-operation and change buckets). Every controller of the process draws from the same ones.
//!
//! A call takes its tokens slowest bucket first (the operation's, then the account's, then one
//! per record change) and is sent right after the last: a token taken long before the request
//! leaves would let requests bunch up that the buckets spaced out.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::middleware::{StateInformationMiddleware, StateSnapshot};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::metrics::AwsMetrics;
use crate::quota::{Bucket, Quotas, Service};

type Governor = DefaultDirectRateLimiter<StateInformationMiddleware>;

/// Whose quota a call draws from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Account {
    /// The operator's own identity (its pod's role).
    Own,
    /// The account of an assumed role: its 12-digit id, from the role's ARN. Roles of one account
    /// share its quota. (A role in the operator's own account is counted apart from it: the
    /// operator does not know its own account id without asking STS.)
    Other(String),
}

impl Account {
    /// The account a role ARN (`arn:aws:iam::210987654321:role/dns`) belongs to.
    pub fn of_role(role_arn: &str) -> Self {
        let account = role_arn.split(':').nth(4).unwrap_or_default();
        Self::Other(account.to_owned())
    }
}

/// Where a call's quota lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    pub account: Account,
    pub service: Service,
    /// For regional services only.
    pub region: Option<String>,
}

impl Scope {
    pub fn new(account: Account, service: Service, region: Option<&str>) -> Self {
        let region = service.regional().then(|| region.unwrap_or_default().to_owned());
        Self { account, service, region }
    }
}

/// The buckets of one scope.
struct Buckets {
    account: Option<(Bucket, Governor)>,
    operations: Mutex<HashMap<String, Arc<(Bucket, Governor)>>>,
    changes: Option<(Bucket, Governor)>,
}

pub struct Limiter {
    quotas: Quotas,
    scopes: Mutex<HashMap<Scope, Arc<Buckets>>>,
    metrics: Arc<AwsMetrics>,
}

fn governor(bucket: Bucket) -> Governor {
    let period = Duration::from_secs_f64(1.0 / bucket.per_second.max(f64::MIN_POSITIVE));
    // `Quotas` only holds positive rates and bursts; the fallbacks only satisfy the types.
    let quota = Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN));
    RateLimiter::direct(quota.allow_burst(NonZeroU32::new(bucket.burst).unwrap_or(NonZeroU32::MIN))).with_middleware()
}

impl Limiter {
    /// `quotas`: the process's share (already scaled).
    pub fn new(quotas: Quotas, metrics: Arc<AwsMetrics>) -> Self {
        Self { quotas, scopes: Mutex::default(), metrics }
    }

    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    fn buckets(&self, scope: &Scope) -> Arc<Buckets> {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let buckets = scopes.entry(scope.clone()).or_insert_with(|| {
            let quota = self.quotas.service(scope.service);
            Arc::new(Buckets {
                account: quota.account.map(|b| (b, governor(b))),
                operations: Mutex::default(),
                changes: quota.changes.map(|b| (b, governor(b))),
            })
        });
        Arc::clone(buckets)
    }

    /// Waits until a call of `operation` making `changes` record changes may be sent; returns
    /// how long it waited.
    pub async fn acquire(&self, scope: &Scope, operation: &str, changes: u32) -> Duration {
        let started = Instant::now();
        let buckets = self.buckets(scope);
        let operation_bucket = {
            let mut operations = buckets.operations.lock().unwrap_or_else(PoisonError::into_inner);
            let bucket = operations.entry(operation.to_owned()).or_insert_with(|| {
                let bucket = self.quotas.service(scope.service).operation(operation);
                Arc::new((bucket, governor(bucket)))
            });
            Arc::clone(bucket)
        };
        let snapshot = operation_bucket.1.until_ready().await;
        self.report(scope.service, operation, &snapshot);
        if let Some((_, account)) = &buckets.account {
            let snapshot = account.until_ready().await;
            self.report(scope.service, "account", &snapshot);
        }
        if let (Some((bucket, governor)), Some(changes)) = (&buckets.changes, NonZeroU32::new(changes)) {
            // A batch never holds more changes than the bucket (see `route53`); clamped anyway.
            let cost = changes.min(NonZeroU32::new(bucket.burst).unwrap_or(NonZeroU32::MIN));
            if let Ok(snapshot) = governor.until_n_ready(cost).await {
                self.report(scope.service, "changes", &snapshot);
            }
        }
        started.elapsed()
    }

    fn report(&self, service: Service, bucket: &str, snapshot: &StateSnapshot) {
        self.metrics.limiter_tokens(service, bucket, f64::from(snapshot.remaining_burst_capacity()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::quota::Override;

    /// "At once": well under the shortest wait for a token these tests set up (500 ms), and over
    /// the scheduling delays of a loaded 2-core machine (a 100 ms bound failed under CI's load).
    const AT_ONCE: Duration = Duration::from_millis(400);

    fn limiter(overrides: &[&str]) -> Limiter {
        let overrides: Vec<Override> = overrides.iter().map(|o| o.parse().unwrap()).collect();
        Limiter::new(Quotas::aws().with(&overrides), Arc::new(AwsMetrics::unregistered()))
    }

    #[tokio::test]
    async fn every_operation_draws_from_the_account_bucket() {
        let limiter = limiter(&["route53=1/2", "route53.*=100/100"]);
        let scope = Scope::new(Account::Own, Service::Route53, None);
        let started = Instant::now();
        limiter.acquire(&scope, "ListResourceRecordSets", 0).await;
        limiter.acquire(&scope, "GetChange", 0).await;
        assert!(started.elapsed() < AT_ONCE, "the account's burst of two passes at once");
        limiter.acquire(&scope, "ChangeResourceRecordSets", 0).await;
        assert!(started.elapsed() >= Duration::from_millis(900), "a third operation waits for the account bucket: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn each_operation_has_its_own_bucket() {
        let limiter = limiter(&["acm.ListCertificates=1/1", "acm.DescribeCertificate=100/100"]);
        let scope = Scope::new(Account::Own, Service::Acm, Some("us-east-1"));
        limiter.acquire(&scope, "ListCertificates", 0).await;
        let started = Instant::now();
        for _ in 0..10 {
            limiter.acquire(&scope, "DescribeCertificate", 0).await;
        }
        assert!(started.elapsed() < AT_ONCE, "describes are not slowed by the listing's empty bucket");
    }

    #[tokio::test]
    async fn accounts_and_regions_have_their_own_buckets() {
        let limiter = limiter(&["acm.RequestCertificate=1/1", "route53=1/1"]);
        let started = Instant::now();
        for region in ["us-east-1", "eu-west-1"] {
            limiter.acquire(&Scope::new(Account::Own, Service::Acm, Some(region)), "RequestCertificate", 0).await;
        }
        for account in [Account::Own, Account::of_role("arn:aws:iam::210987654321:role/dns")] {
            limiter.acquire(&Scope::new(account, Service::Route53, None), "GetChange", 0).await;
        }
        assert!(started.elapsed() < AT_ONCE);
    }

    #[tokio::test]
    async fn record_changes_draw_from_the_change_bucket_one_token_each() {
        let limiter = limiter(&["route53.changes=10/20", "route53=100/100", "route53.*=100/100"]);
        let scope = Scope::new(Account::Own, Service::Route53, None);
        let started = Instant::now();
        limiter.acquire(&scope, "ChangeResourceRecordSets", 20).await;
        assert!(started.elapsed() < AT_ONCE, "a full bucket takes a batch of its size");
        limiter.acquire(&scope, "ChangeResourceRecordSets", 5).await;
        assert!(started.elapsed() >= Duration::from_millis(450), "five more changes wait for five tokens: {:?}", started.elapsed());
    }

    #[test]
    fn a_role_s_account_is_the_one_in_its_arn() {
        assert_eq!(Account::of_role("arn:aws:iam::210987654321:role/dns"), Account::Other("210987654321".to_owned()));
        assert_eq!(Scope::new(Account::Own, Service::Route53, Some("eu-west-1")).region, None, "Route 53 is global");
    }
}
