//! The quota model: which token buckets AWS throttles a call by, as AWS documents them, and the
//! share of them this process uses. Pure data and arithmetic; [`crate::limiter`] turns it into
//! governor buckets and the fault proxy (`blockwork_testenv::throttle`) enforces AWS's own
//! values against the same shape.
//!
//! Every bucket is per **account** (the operator's own, or the account of an assumed role), and
//! for regional services also per **region**:
//!
//! - an optional **account-level** bucket every call of the service draws from (Route 53's);
//! - a bucket **per API operation**, with a default for operations AWS does not list;
//! - Route 53's **change-throughput** bucket, counted in record changes, not requests.
//!
//! A call waits until every bucket it draws from has a token (the change bucket: one token per
//! record change). The buckets hold AWS's published value times [`DEFAULT_SAFETY_FACTOR`]: other
//! tools share the account's quota (external-dns, the console, CI pipelines), and requests leave
//! the process in a slightly different rhythm than they were admitted.
//!
//! Sources (the values below, with the page each comes from):
//!
//! - ACM: "Quotas" (AWS Certificate Manager User Guide), API rate quotas per account and region.
//!   ACM publishes a rate per second and no burst; the bucket holds one second's worth.
//! - Route 53: "Throttling for Amazon Route 53 API requests" (Route 53 Developer Guide,
//!   <https://docs.aws.amazon.com/Route53/latest/DeveloperGuide/throttling-api-requests.html>):
//!   an account-level bucket (capacity 50, refill 10/s), per-operation buckets (default 50/10;
//!   CreateHostedZone 40/2, DeleteHostedZone 40/5 and others listed there) and the
//!   change-throughput bucket, counted in record changes. The request-rate values were checked
//!   against the page's table again for issue 17 (as was AWS's post "Introducing change-based
//!   throttling for Amazon Route 53 APIs": 10 requests per second since July 30, 2026). Every
//!   stored copy of the page and the post reachable here ends before the change-throughput
//!   table, so [`ROUTE53_CHANGES`] is still an assumption (see its doc); set the real value with
//!   `--aws-quota route53.changes=RATE/BURST`.
//! - CloudFront: "Quotas" (Amazon CloudFront Developer Guide,
//!   <https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/cloudfront-limits.html>)
//!   lists quotas on entities and on viewer traffic (e.g. 250,000 requests per second per
//!   distribution), none on control-plane API calls; CloudFront throttles them without
//!   publishing a rate. [`CLOUDFRONT_OPERATION`] is a conservative assumption (10/s per
//!   operation), overridable like any other.
//! - STS: AssumeRole is called once per role and hour; [`STS_OPERATION`] is a conservative
//!   assumption.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The share of AWS's quotas the process uses by default.
pub const DEFAULT_SAFETY_FACTOR: f64 = 0.8;

/// An AWS service the layer calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    Acm,
    Route53,
    CloudFront,
    Sts,
    /// AWS Private CA (`acm-pca`).
    AcmPca,
}

impl Service {
    pub const ALL: [Self; 5] = [Self::Acm, Self::Route53, Self::CloudFront, Self::Sts, Self::AcmPca];

    /// The metric label and the name in `--aws-quota`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acm => "acm",
            Self::Route53 => "route53",
            Self::CloudFront => "cloudfront",
            Self::Sts => "sts",
            Self::AcmPca => "acm-pca",
        }
    }

    /// Whether AWS throttles it per region as well as per account. Route 53, CloudFront and
    /// IAM's STS endpoint used here are global.
    pub fn regional(self) -> bool {
        matches!(self, Self::Acm | Self::AcmPca)
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Service {
    type Err = QuotaError;

    fn from_str(text: &str) -> Result<Self, QuotaError> {
        Self::ALL
            .into_iter()
            .find(|service| service.as_str().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| QuotaError(format!("unknown service {text:?}: expected acm, route53, cloudfront, sts or acm-pca")))
    }
}

/// A token bucket: `burst` tokens at most, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub per_second: f64,
    pub burst: u32,
}

impl Bucket {
    pub const fn new(per_second: f64, burst: u32) -> Self {
        Self { per_second, burst }
    }

    /// This share of the bucket: both the rate and the capacity scaled, the capacity rounded
    /// down but at least one token.
    pub fn scaled(self, factor: f64) -> Self {
        let burst = (f64::from(self.burst) * factor).floor();
        // Saturating float-to-int conversion; at least one token.
        Self { per_second: self.per_second * factor, burst: (burst as u32).max(1) }
    }

    /// The seconds `calls` tokens take from a full bucket: the burst at once, the rest at the
    /// refill rate.
    pub fn seconds_for(self, calls: u64) -> f64 {
        (calls.saturating_sub(u64::from(self.burst)) as f64) / self.per_second
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s burst {}", self.per_second, self.burst)
    }
}

/// The buckets of one service.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceQuota {
    /// Shared by every operation of the service; `None` where AWS documents none.
    pub account: Option<Bucket>,
    /// For operations without an entry in `operations`.
    pub per_operation: Bucket,
    pub operations: BTreeMap<String, Bucket>,
    /// Record changes (Route 53's change throughput); `None` for other services.
    pub changes: Option<Bucket>,
}

impl ServiceQuota {
    fn new(account: Option<Bucket>, per_operation: Bucket, operations: &[(&str, Bucket)], changes: Option<Bucket>) -> Self {
        let operations = operations.iter().map(|(name, bucket)| ((*name).to_owned(), *bucket)).collect();
        Self { account, per_operation, operations, changes }
    }

    /// The bucket of `operation`.
    pub fn operation(&self, operation: &str) -> Bucket {
        self.operations.get(operation).copied().unwrap_or(self.per_operation)
    }

    fn scaled(&self, factor: f64) -> Self {
        Self {
            account: self.account.map(|b| b.scaled(factor)),
            per_operation: self.per_operation.scaled(factor),
            operations: self.operations.iter().map(|(name, bucket)| (name.clone(), bucket.scaled(factor))).collect(),
            changes: self.changes.map(|b| b.scaled(factor)),
        }
    }
}

/// ACM's per-operation rates ("Quotas", AWS Certificate Manager User Guide: "Requests-per-second
/// quota for each ACM API operation"). Some copies of the page list ListCertificates at 8/s;
/// 1/s is the lower, current one.
pub const ACM_OPERATIONS: [(&str, Bucket); 10] = [
    ("AddTagsToCertificate", Bucket::new(5.0, 5)),
    ("DeleteCertificate", Bucket::new(10.0, 10)),
    ("DescribeCertificate", Bucket::new(10.0, 10)),
    ("ExportCertificate", Bucket::new(5.0, 5)),
    ("GetCertificate", Bucket::new(10.0, 10)),
    ("ListCertificates", Bucket::new(1.0, 1)),
    ("ListTagsForCertificate", Bucket::new(10.0, 10)),
    ("RemoveTagsFromCertificate", Bucket::new(5.0, 5)),
    ("RenewCertificate", Bucket::new(5.0, 5)),
    ("RequestCertificate", Bucket::new(5.0, 5)),
];
/// ACM operations not on the page's list.
pub const ACM_OPERATION: Bucket = Bucket::new(5.0, 5);

/// Route 53's account-level bucket ("Throttling for Amazon Route 53 API requests").
pub const ROUTE53_ACCOUNT: Bucket = Bucket::new(10.0, 50);
/// Route 53's default per-operation bucket (the same page).
pub const ROUTE53_OPERATION: Bucket = Bucket::new(10.0, 50);
/// The operations the page lists with lower values, of those Blockwork could call.
pub const ROUTE53_OPERATIONS: [(&str, Bucket); 2] =
    [("CreateHostedZone", Bucket::new(2.0, 40)), ("DeleteHostedZone", Bucket::new(5.0, 40))];
/// Route 53's change-throughput bucket, in record changes. **An assumption**: the page names the
/// bucket but the copy read for this did not include its values. 100 changes per second with a
/// capacity of 1,000 is what the limit it replaced allowed (five requests per second of up to
/// 100 changes each, counted once per UPSERT half) rounded down; set the real value with
/// `--aws-quota route53.changes=RATE/BURST`.
pub const ROUTE53_CHANGES: Bucket = Bucket::new(100.0, 1000);

/// CloudFront's control-plane API: no published rates ("Quotas", Amazon CloudFront Developer
/// Guide, lists none). **An assumption**, per operation.
pub const CLOUDFRONT_OPERATION: Bucket = Bucket::new(10.0, 10);

/// AWS Private CA's per-operation rates ("AWS Private CA quotas", AWS General Reference): **an
/// assumption**, the copies read for this pointed at the table without its values. Blockwork
/// calls only DescribeCertificateAuthority, before requesting a private certificate.
pub const ACM_PCA_OPERATION: Bucket = Bucket::new(10.0, 10);

/// STS AssumeRole: **an assumption**; it is called once per role and credential lifetime.
pub const STS_OPERATION: Bucket = Bucket::new(10.0, 10);

/// Every service's buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct Quotas {
    services: BTreeMap<Service, ServiceQuota>,
}

impl Quotas {
    /// AWS's published (or, where marked above, assumed) default quotas, unscaled: what AWS
    /// enforces on an account without quota increases, and what the fault proxy enforces.
    pub fn aws() -> Self {
        let mut services = BTreeMap::new();
        services.insert(Service::Acm, ServiceQuota::new(None, ACM_OPERATION, &ACM_OPERATIONS, None));
        services.insert(
            Service::Route53,
            ServiceQuota::new(Some(ROUTE53_ACCOUNT), ROUTE53_OPERATION, &ROUTE53_OPERATIONS, Some(ROUTE53_CHANGES)),
        );
        services.insert(Service::CloudFront, ServiceQuota::new(None, CLOUDFRONT_OPERATION, &[], None));
        services.insert(Service::Sts, ServiceQuota::new(None, STS_OPERATION, &[], None));
        services.insert(Service::AcmPca, ServiceQuota::new(None, ACM_PCA_OPERATION, &[], None));
        Self { services }
    }

    /// The process's share: every bucket scaled by `factor` (0 < factor ≤ 1).
    pub fn scaled(&self, factor: f64) -> Result<Self, QuotaError> {
        if !factor.is_finite() || factor <= 0.0 || factor > 1.0 {
            return Err(QuotaError(format!("the safety factor must be in (0, 1], not {factor}")));
        }
        Ok(Self { services: self.services.iter().map(|(service, quota)| (*service, quota.scaled(factor))).collect() })
    }

    /// The quotas with `overrides` applied (before scaling: an override states the account's
    /// quota, e.g. after a quota increase).
    pub fn with(mut self, overrides: &[Override]) -> Self {
        for change in overrides {
            let quota = self.service_mut(change.service);
            match &change.target {
                Target::Account => quota.account = Some(change.bucket),
                Target::EveryOperation => quota.per_operation = change.bucket,
                Target::Operation(name) => {
                    quota.operations.insert(name.clone(), change.bucket);
                }
                Target::Changes => quota.changes = Some(change.bucket),
            }
        }
        self
    }

    pub fn service(&self, service: Service) -> &ServiceQuota {
        // Every service has an entry from `aws()`; the fallback only satisfies the type.
        self.services.get(&service).unwrap_or(&FALLBACK)
    }

    fn service_mut(&mut self, service: Service) -> &mut ServiceQuota {
        self.services.entry(service).or_insert_with(|| FALLBACK.clone())
    }
}

static FALLBACK: ServiceQuota =
    ServiceQuota { account: None, per_operation: Bucket::new(1.0, 1), operations: BTreeMap::new(), changes: None };

/// Which bucket an [`Override`] sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `SERVICE`: the account-level bucket.
    Account,
    /// `SERVICE.*`: the default for operations without their own.
    EveryOperation,
    /// `SERVICE.OPERATION`.
    Operation(String),
    /// `route53.changes`: the change-throughput bucket.
    Changes,
}

/// One entry of `--aws-quota`: `SERVICE[.OPERATION]=RATE[/BURST]`; without a burst, one
/// second's worth (at least one token).
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub service: Service,
    pub target: Target,
    pub bucket: Bucket,
}

impl FromStr for Override {
    type Err = QuotaError;

    fn from_str(text: &str) -> Result<Self, QuotaError> {
        let invalid = |why: &str| {
            QuotaError(format!(
                "invalid --aws-quota entry {text:?}: {why} (expected SERVICE[.OPERATION]=RATE[/BURST], e.g. acm.ListCertificates=1/1)"
            ))
        };
        let (name, value) = text.split_once('=').ok_or_else(|| invalid("no '='"))?;
        let (service, target) = match name.trim().split_once('.') {
            None => (name, Target::Account),
            Some((service, "*")) => (service, Target::EveryOperation),
            Some((service, "changes")) => (service, Target::Changes),
            Some((service, operation)) if !operation.is_empty() && operation.chars().all(|c| c.is_ascii_alphanumeric()) => {
                (service, Target::Operation(operation.to_owned()))
            }
            Some(_) => return Err(invalid("the operation is not an AWS operation name")),
        };
        let service: Service = service.parse()?;
        if target == Target::Changes && service != Service::Route53 {
            return Err(invalid("only route53 has a change-throughput bucket"));
        }
        let (rate, burst) = match value.split_once('/') {
            Some((rate, burst)) => (rate, Some(burst)),
            None => (value, None),
        };
        let per_second: f64 = rate.trim().parse().map_err(|_| invalid("the rate is not a number"))?;
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(invalid("the rate must be positive"));
        }
        let burst = match burst {
            Some(burst) => burst
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|b| *b > 0)
                .ok_or_else(|| invalid("the burst must be a whole number of at least 1"))?,
            // Saturating float-to-int conversion; at least one token.
            None => (per_second.ceil() as u32).max(1),
        };
        Ok(Self { service, target, bucket: Bucket::new(per_second, burst) })
    }
}

/// A quota that makes no sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuotaError(pub String);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn route53_is_throttled_per_account_and_per_operation_and_counts_changes() {
        let route53 = Quotas::aws().service(Service::Route53).clone();
        assert_eq!(route53.account, Some(Bucket::new(10.0, 50)));
        assert_eq!(route53.operation("ChangeResourceRecordSets"), Bucket::new(10.0, 50));
        assert_eq!(route53.operation("CreateHostedZone"), Bucket::new(2.0, 40));
        assert!(route53.changes.is_some());
    }

    #[test]
    fn acm_has_a_bucket_per_operation_and_none_for_the_account() {
        let acm = Quotas::aws().service(Service::Acm).clone();
        assert_eq!(acm.account, None);
        assert_eq!(acm.operation("RequestCertificate"), Bucket::new(5.0, 5));
        assert_eq!(acm.operation("DescribeCertificate"), Bucket::new(10.0, 10));
        assert_eq!(acm.operation("ListCertificates"), Bucket::new(1.0, 1));
    }

    #[test]
    fn the_safety_factor_scales_rates_and_capacities_keeping_one_token() {
        let scaled = Quotas::aws().scaled(0.8).unwrap();
        assert_eq!(scaled.service(Service::Acm).operation("RequestCertificate"), Bucket::new(4.0, 4));
        assert_eq!(scaled.service(Service::Route53).account, Some(Bucket::new(8.0, 40)));
        assert_eq!(scaled.service(Service::Acm).operation("ListCertificates"), Bucket::new(0.8, 1));
        assert!(Quotas::aws().scaled(0.0).is_err());
        assert!(Quotas::aws().scaled(1.5).is_err());
        assert!(Quotas::aws().scaled(f64::NAN).is_err());
    }

    #[test]
    fn overrides_name_a_service_an_operation_every_operation_or_the_changes() {
        let parsed: Vec<Override> = ["acm.ListCertificates=8/8", "route53=20", "cloudfront.*=2/4", "route53.changes=50/500"]
            .iter()
            .map(|entry| entry.parse().unwrap())
            .collect();
        let quotas = Quotas::aws().with(&parsed);
        assert_eq!(quotas.service(Service::Acm).operation("ListCertificates"), Bucket::new(8.0, 8));
        assert_eq!(quotas.service(Service::Route53).account, Some(Bucket::new(20.0, 20)));
        assert_eq!(quotas.service(Service::CloudFront).operation("GetDistributionTenant"), Bucket::new(2.0, 4));
        assert_eq!(quotas.service(Service::Route53).changes, Some(Bucket::new(50.0, 500)));
    }

    #[test]
    fn invalid_overrides_say_what_is_expected() {
        for entry in ["acm", "s3=1", "acm=0", "acm=-1/2", "acm=1/0", "acm.changes=1", "acm.List-Certs=1", "acm=x"] {
            let error = entry.parse::<Override>().expect_err(entry);
            assert!(error.to_string().contains("SERVICE") || error.to_string().contains("unknown service"), "{error}");
        }
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_refills_at_its_rate() {
        assert_eq!(Bucket::new(4.0, 4).seconds_for(1000), 249.0);
        assert_eq!(Bucket::new(4.0, 4).seconds_for(3), 0.0);
    }
}
