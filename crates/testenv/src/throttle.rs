//! AWS's throttling, as the fault proxy enforces it in front of the emulators (moto and
//! MiniStack throttle nothing): the token buckets AWS documents, with AWS's values
//! ([`blockwork_aws::quota::Quotas::aws`], unscaled), so that a client drawing faster than AWS
//! allows — a bucket per hosted zone where AWS has one per account, a cache whose misses all
//! call at once, a controller outside the layer — is answered `Throttling` here as it would be
//! in production.
//!
//! The rules, from "Throttling for Amazon Route 53 API requests" (Route 53 Developer Guide),
//! which also describes the other services' buckets' behaviour: a bucket holds at most its
//! capacity, refills at a fixed rate (tokens arriving at a full bucket are discarded), and a
//! request is throttled when any bucket it draws from lacks tokens — then it takes none. Each
//! request takes a token from its operation's bucket and its service's account-level bucket;
//! a ChangeResourceRecordSets also takes one token per `Change` from Route 53's change bucket.
//!
//! Buckets are kept per account and, for ACM, per region, as AWS keys them: the fault proxy
//! passes the account of an assumed role's key when an AssumeRole answer told it
//! ([`crate::accounts`]), and the key itself otherwise (the operator's own credentials: one
//! key, one account).

use std::collections::HashMap;
use std::time::Instant;

use blockwork_aws::quota::{Bucket, Quotas, Service};

/// One of AWS's buckets, as AWS describes them.
#[derive(Clone, Debug)]
struct TokenBucket {
    bucket: Bucket,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    fn full(bucket: Bucket, now: Instant) -> Self {
        Self { bucket, tokens: f64::from(bucket.burst), at: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.bucket.per_second).min(f64::from(self.bucket.burst));
        self.at = now;
    }
}

/// Who a request's quota belongs to: the account (or, when unknown, the signing key), the
/// service, the region.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub identity: String,
    pub service: Service,
    /// Only for regional services.
    pub region: Option<String>,
}

/// The buckets AWS would keep for the requests seen so far.
#[derive(Debug)]
pub struct Throttle {
    quotas: Quotas,
    buckets: HashMap<(Caller, String), TokenBucket>,
}

impl Throttle {
    pub fn new(quotas: Quotas) -> Self {
        Self { quotas, buckets: HashMap::new() }
    }

    /// Whether AWS would answer a request for `operation` making `changes` record changes:
    /// `true` takes its tokens, `false` (throttled) takes none.
    pub fn admit(&mut self, caller: &Caller, operation: &str, changes: u32, now: Instant) -> bool {
        let quota = self.quotas.service(caller.service);
        let mut draws: Vec<(String, Bucket, f64)> = vec![(format!("operation:{operation}"), quota.operation(operation), 1.0)];
        if let Some(account) = quota.account {
            draws.push(("account".to_owned(), account, 1.0));
        }
        if let (Some(bucket), true) = (quota.changes, changes > 0) {
            draws.push(("changes".to_owned(), bucket, f64::from(changes)));
        }
        let admitted = draws.iter().all(|(name, bucket, cost)| {
            let state = self.buckets.entry((caller.clone(), name.clone())).or_insert_with(|| TokenBucket::full(*bucket, now));
            state.refill(now);
            state.tokens >= *cost
        });
        if admitted {
            for (name, _, cost) in &draws {
                if let Some(state) = self.buckets.get_mut(&(caller.clone(), name.clone())) {
                    state.tokens -= cost;
                }
            }
        }
        admitted
    }
}

/// The service, region and signing identity of a request, from its SigV4 `Authorization`
/// header (`Credential=AKID/20260101/us-east-1/acm/aws4_request`); `None` when unsigned or for
/// a service the layer does not call.
pub fn caller(authorization: &str) -> Option<Caller> {
    let credential = authorization.split("Credential=").nth(1)?.split([',', ' ']).next()?;
    let mut parts = credential.split('/');
    let identity = parts.next()?.to_owned();
    let region = parts.nth(1)?.to_owned();
    let service = match parts.next()? {
        "acm" => Service::Acm,
        "route53" => Service::Route53,
        "cloudfront" => Service::CloudFront,
        "sts" => Service::Sts,
        _ => return None,
    };
    let region = service.regional().then_some(region);
    Some(Caller { identity, service, region })
}

/// The `Change` elements of a ChangeResourceRecordSets body.
pub fn changes(body: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(body);
    u32::try_from(text.matches("<Change>").count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn route53() -> Caller {
        Caller { identity: "AKID".to_owned(), service: Service::Route53, region: None }
    }

    #[test]
    fn the_account_bucket_throttles_every_operation_once_empty_and_refills_at_its_rate() {
        let mut throttle = Throttle::new(Quotas::aws());
        let now = Instant::now();
        // Route 53: account bucket 50, refill 10/s; operation buckets 50 each.
        for i in 0..50 {
            let operation = if i % 2 == 0 { "ListResourceRecordSets" } else { "GetChange" };
            assert!(throttle.admit(&route53(), operation, 0, now), "call {i}");
        }
        assert!(!throttle.admit(&route53(), "ChangeResourceRecordSets", 0, now), "the account bucket is empty");
        assert!(throttle.admit(&route53(), "ChangeResourceRecordSets", 0, now + Duration::from_millis(100)), "one token after 0.1 s");
    }

    #[test]
    fn an_operation_bucket_throttles_only_its_operation() {
        let mut throttle = Throttle::new(Quotas::aws());
        let acm = Caller { identity: "AKID".to_owned(), service: Service::Acm, region: Some("us-east-1".to_owned()) };
        let now = Instant::now();
        assert!(throttle.admit(&acm, "ListCertificates", 0, now));
        assert!(!throttle.admit(&acm, "ListCertificates", 0, now), "ListCertificates: 1/s, capacity 1");
        assert!(throttle.admit(&acm, "DescribeCertificate", 0, now));
        let other_region = Caller { region: Some("eu-west-1".to_owned()), ..acm };
        assert!(throttle.admit(&other_region, "ListCertificates", 0, now), "ACM's quotas are per region");
    }

    #[test]
    fn record_changes_draw_from_the_change_bucket_and_a_throttled_request_takes_nothing() {
        let overrides = ["route53.changes=10/10".parse().unwrap()];
        let mut throttle = Throttle::new(Quotas::aws().with(&overrides));
        let now = Instant::now();
        assert!(throttle.admit(&route53(), "ChangeResourceRecordSets", 8, now));
        assert!(!throttle.admit(&route53(), "ChangeResourceRecordSets", 3, now), "two change tokens left");
        assert!(throttle.admit(&route53(), "ChangeResourceRecordSets", 2, now), "the refused request took none");
    }

    #[test]
    fn the_caller_comes_from_the_signature() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/eu-west-1/acm/aws4_request, SignedHeaders=host, Signature=x";
        assert_eq!(
            caller(header),
            Some(Caller { identity: "AKIDEXAMPLE".into(), service: Service::Acm, region: Some("eu-west-1".into()) })
        );
        let global = caller("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/route53/aws4_request, SignedHeaders=host").unwrap();
        assert_eq!(global.region, None, "Route 53 is global");
        assert_eq!(caller("none"), None);
        let body = b"<ChangeBatch><Changes><Change><Action>UPSERT</Action></Change><Change><Action>DELETE</Action></Change></Changes></ChangeBatch>";
        assert_eq!(changes(body), 2);
    }
}
