//! The AWS side of the Cert operator: what it needs from ACM and Route53 as two small traits,
//! the SDK implementation, and decorators composed at start-up (seed 000 part 4):
//!
//! ```text
//! Cached (moka: by ARN and by FQDN)  →  Retrying (backon: throttling, 5xx)  →  RateLimited
//! (governor: ACM; Route53 per hosted zone)  →  Sdk (aws-sdk-acm, aws-sdk-route53)
//! ```
//!
//! Each retry passes the rate limiter again, and a cache hit costs no token at all.

mod cache;
mod ratelimit;
mod retry;
mod sdk;

use std::future::Future;

pub use blockwork_aws::{AwsError, ErrorClass};
pub use cache::{CacheConfig, Cached};
pub use ratelimit::{RateLimitConfig, RateLimitError, RateLimited};
pub use retry::{RetryConfig, Retrying};
pub use sdk::Sdk;

/// ACM's certificate status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcmStatus {
    PendingValidation,
    Issued,
    Inactive,
    Expired,
    ValidationTimedOut,
    Revoked,
    Failed,
    /// A status this operator does not know.
    Other(String),
}

impl AcmStatus {
    pub fn parse(status: &str) -> Self {
        match status {
            "PENDING_VALIDATION" => Self::PendingValidation,
            "ISSUED" => Self::Issued,
            "INACTIVE" => Self::Inactive,
            "EXPIRED" => Self::Expired,
            "VALIDATION_TIMED_OUT" => Self::ValidationTimedOut,
            "REVOKED" => Self::Revoked,
            "FAILED" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A CNAME record (name and value as ACM gives them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DnsRecord {
    pub name: String,
    pub value: String,
}

/// One domain of a certificate and its DNS validation record, once ACM has published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainValidation {
    pub domain: String,
    /// PENDING_VALIDATION, SUCCESS or FAILED.
    pub status: Option<String>,
    pub record: Option<DnsRecord>,
}

/// What the operator reads of an ACM certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    pub arn: String,
    pub domain: String,
    /// As ACM lists them: the primary domain included.
    pub sans: Vec<String>,
    pub status: AcmStatus,
    pub created_at: Option<jiff::Timestamp>,
    pub not_after: Option<jiff::Timestamp>,
    /// ARNs of the AWS resources using the certificate (load balancers, distributions).
    pub in_use_by: Vec<String>,
    /// ACM's managed renewal status, while or after it renews.
    pub renewal_status: Option<String>,
    pub failure_reason: Option<String>,
    pub validations: Vec<DomainValidation>,
}

/// How current a certificate listing must be. Chosen by the caller, where it knows why it lists:
/// a cache may serve a recent listing, never one that misses a certificate whose absence the
/// caller is about to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// A listing a few seconds old will do: looking for a certificate requested long ago (an
    /// adoption), or one a repeated request would return anyway.
    Recent,
    /// Read now: the caller concludes from the listing that a certificate does not exist (before
    /// releasing a deleted Cert, or replacing the record of a create that may have made one).
    Current,
}

/// What RequestCertificate sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateRequest {
    pub domain: String,
    pub sans: Vec<String>,
    /// ACM's IdempotencyToken (`\w{1,32}`).
    pub token: String,
    pub tags: Vec<(String, String)>,
}

/// The ACM calls the operator makes.
pub trait CertificateApi: Send + Sync + 'static {
    /// DescribeCertificate. A missing certificate is an error of class `NotFound`.
    fn describe(&self, arn: &str) -> impl Future<Output = Result<Certificate, AwsError>> + Send;
    /// ListCertificates (pending, issued and failed ones): `(domain, ARN)` of every
    /// certificate of the account and region, the index by FQDN that lookups by tag start from.
    fn list_certificates(&self, freshness: Freshness) -> impl Future<Output = Result<Vec<(String, String)>, AwsError>> + Send;
    /// ListTagsForCertificate.
    fn list_tags(&self, arn: &str) -> impl Future<Output = Result<Vec<(String, String)>, AwsError>> + Send;
    /// RequestCertificate with DNS validation; returns the ARN. Idempotent under the token.
    fn request(&self, request: &CertificateRequest) -> impl Future<Output = Result<String, AwsError>> + Send;
    /// DeleteCertificate. A certificate in use fails with `ResourceInUseException`.
    fn delete(&self, arn: &str) -> impl Future<Output = Result<(), AwsError>> + Send;
    /// Forgets anything remembered about `arn` (the next describe asks AWS).
    fn invalidate(&self, _arn: &str) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The Route53 calls the operator makes; every call names its hosted zone.
pub trait DnsApi: Send + Sync + 'static {
    /// The value of the CNAME `name` in the zone, if there is one.
    fn lookup_cname(&self, zone_id: &str, name: &str) -> impl Future<Output = Result<Option<String>, AwsError>> + Send;
    /// UPSERTs the CNAMEs in one change batch.
    fn upsert_cnames(&self, zone_id: &str, records: &[DnsRecord]) -> impl Future<Output = Result<(), AwsError>> + Send;
    /// DELETEs the CNAME if it still has this value; `false` when there was nothing to delete
    /// (gone, or changed by someone else: then it is not ours to delete).
    fn delete_cname(&self, zone_id: &str, record: &DnsRecord) -> impl Future<Output = Result<bool, AwsError>> + Send;
}

/// TTL of the validation records: ACM only reads them at validation and renewal.
pub const VALIDATION_RECORD_TTL: i64 = 300;

/// The AWS error as the runtime reports it: class, code as reason, sanitized message.
pub fn external_error(error: &AwsError) -> blockwork_runtime::ExternalError {
    let class = match error.class {
        ErrorClass::Terminal => blockwork_runtime::ErrorClass::Terminal,
        ErrorClass::Retryable => blockwork_runtime::ErrorClass::Retryable,
        ErrorClass::Throttled => blockwork_runtime::ErrorClass::Throttled,
        ErrorClass::NotFound => blockwork_runtime::ErrorClass::NotFound,
    };
    let reason = error.code.clone().unwrap_or_else(|| "AwsError".to_owned());
    blockwork_runtime::ExternalError::new(class, reason, blockwork_aws::sanitize(&error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_errors_keep_their_class_and_code_and_lose_account_ids() {
        let error = AwsError {
            operation: "DeleteCertificate",
            code: Some("AccessDeniedException".into()),
            class: ErrorClass::Terminal,
            message: "User: arn:aws:iam::123456789012:user/x is not authorized".into(),
        };
        let external = external_error(&error);
        assert_eq!(external.class, blockwork_runtime::ErrorClass::Terminal);
        assert_eq!(external.reason, "AccessDeniedException");
        assert_eq!(external.message, "DeleteCertificate: User: [ARN] is not authorized");
        let throttled = AwsError { code: None, class: ErrorClass::Throttled, ..error };
        assert_eq!(external_error(&throttled).class, blockwork_runtime::ErrorClass::Throttled);
        assert_eq!(external_error(&throttled).reason, "AwsError");
    }

    #[test]
    fn acm_statuses_parse() {
        assert_eq!(AcmStatus::parse("ISSUED"), AcmStatus::Issued);
        assert_eq!(AcmStatus::parse("PENDING_VALIDATION"), AcmStatus::PendingValidation);
        assert_eq!(AcmStatus::parse("REVOKED"), AcmStatus::Revoked);
        assert_eq!(AcmStatus::parse("NEW_THING"), AcmStatus::Other("NEW_THING".into()));
    }
}

/// A scripted in-memory ACM for the decorators' unit tests (the operator's behaviour is tested
/// against moto in `tests/`).
#[cfg(test)]
pub(crate) mod fake {
    #![allow(clippy::unwrap_used)]
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    pub struct Fake {
        pub certificate: Mutex<Option<Certificate>>,
        pub failures: Mutex<VecDeque<ErrorClass>>,
        pub calls: Mutex<Vec<&'static str>>,
    }

    impl Fake {
        pub fn with(status: AcmStatus) -> Self {
            let certificate = Certificate {
                arn: "arn:1".into(),
                domain: "a.example.com".into(),
                sans: Vec::new(),
                status,
                created_at: None,
                not_after: None,
                in_use_by: Vec::new(),
                renewal_status: None,
                failure_reason: None,
                validations: Vec::new(),
            };
            Self { certificate: Mutex::new(Some(certificate)), ..Self::default() }
        }

        pub fn fail(&self, classes: &[ErrorClass]) {
            self.failures.lock().unwrap().extend(classes.iter().copied());
        }

        pub fn count(&self, operation: &str) -> usize {
            self.calls.lock().unwrap().iter().filter(|c| **c == operation).count()
        }

        fn call(&self, operation: &'static str) -> Result<(), AwsError> {
            self.calls.lock().unwrap().push(operation);
            match self.failures.lock().unwrap().pop_front() {
                Some(class) => Err(AwsError { operation, code: Some(format!("{class:?}")), class, message: "scripted".into() }),
                None => Ok(()),
            }
        }
    }

    impl CertificateApi for Fake {
        async fn describe(&self, _arn: &str) -> Result<Certificate, AwsError> {
            self.call("describe")?;
            self.certificate.lock().unwrap().clone().ok_or(AwsError {
                operation: "describe",
                code: None,
                class: ErrorClass::NotFound,
                message: "gone".into(),
            })
        }
        async fn list_certificates(&self, _freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
            self.call("list_certificates")?;
            Ok(self.certificate.lock().unwrap().iter().map(|c| (c.domain.clone(), c.arn.clone())).collect())
        }
        async fn list_tags(&self, _arn: &str) -> Result<Vec<(String, String)>, AwsError> {
            self.call("list_tags")?;
            Ok(Vec::new())
        }
        async fn request(&self, _request: &CertificateRequest) -> Result<String, AwsError> {
            self.call("request")?;
            Ok("arn:1".into())
        }
        async fn delete(&self, _arn: &str) -> Result<(), AwsError> {
            self.call("delete")?;
            *self.certificate.lock().unwrap() = None;
            Ok(())
        }
    }
}
