//! AWS Private CA through the layer: the state of a private CA a certificate is requested from.
//! ACM requests a private certificate whatever the CA's state and then fails it
//! (`PCA_INVALID_STATE`, `PCA_RESOURCE_NOT_FOUND`); asked first, the operator says why without
//! leaving a failed certificate behind. Read once a minute per CA at most: many Certs share a
//! few CAs.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_acmpca::types::CertificateAuthorityStatus;

use crate::cache::Cached;
use crate::edge::{Aws, Call};
use crate::error::{AwsError, ErrorClass, classify_sdk_error};
use crate::limiter::Scope;
use crate::principal::Principal;
use crate::quota::Service;

/// The `cache` label of described CAs.
pub const DESCRIBE_CACHE: &str = "acm-pca-describe";
/// How long a CA's description is reused.
const DESCRIBE_TTL: Duration = Duration::from_secs(60);

/// A private CA's status (AWS Private CA's `CertificateAuthorityStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorityStatus {
    Active,
    Creating,
    PendingCertificate,
    Disabled,
    Deleted,
    Expired,
    Failed,
    Other(String),
}

impl AuthorityStatus {
    fn from_sdk(status: Option<&CertificateAuthorityStatus>) -> Self {
        match status {
            Some(CertificateAuthorityStatus::Active) => Self::Active,
            Some(CertificateAuthorityStatus::Creating) => Self::Creating,
            Some(CertificateAuthorityStatus::PendingCertificate) => Self::PendingCertificate,
            Some(CertificateAuthorityStatus::Disabled) => Self::Disabled,
            Some(CertificateAuthorityStatus::Deleted) => Self::Deleted,
            Some(CertificateAuthorityStatus::Expired) => Self::Expired,
            Some(CertificateAuthorityStatus::Failed) => Self::Failed,
            Some(other) => Self::Other(other.as_str().to_owned()),
            None => Self::Other("unknown".to_owned()),
        }
    }

    /// As AWS names it (`ACTIVE`, `DISABLED`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Active => "ACTIVE",
            Self::Creating => "CREATING",
            Self::PendingCertificate => "PENDING_CERTIFICATE",
            Self::Disabled => "DISABLED",
            Self::Deleted => "DELETED",
            Self::Expired => "EXPIRED",
            Self::Failed => "FAILED",
            Self::Other(status) => status,
        }
    }
}

/// A private CA as DescribeCertificateAuthority tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    pub arn: String,
    pub status: AuthorityStatus,
    /// When the CA's own certificate expires.
    pub not_after: Option<jiff::Timestamp>,
}

/// AWS Private CA for one controller, as whichever principal a namespace acts as: a CA is
/// described with the namespace's credentials (a CA in another account is not the operator's to
/// read), and a description is reused only by the principal that read it.
pub struct Pca {
    aws: Arc<Aws>,
    caller: &'static str,
    described: Cached<(Principal, String), Authority>,
}

impl Pca {
    pub fn new(aws: &Arc<Aws>, caller: &'static str) -> Self {
        Self { aws: Arc::clone(aws), caller, described: Cached::new(aws.metrics(), caller, DESCRIBE_CACHE, DESCRIBE_TTL, 100) }
    }

    /// DescribeCertificateAuthority of `arn` as `principal`, in the CA's own region (from the
    /// ARN), reused for a minute by that principal. A CA that does not exist (or that the
    /// principal cannot see) is an error of class `NotFound`.
    pub async fn describe(&self, principal: &Principal, arn: &str) -> Result<Authority, AwsError> {
        let key = (principal.clone(), arn.to_owned());
        self.described.get_or_load(&key, self.describe_now(principal, arn)).await
    }

    async fn describe_now(&self, principal: &Principal, arn: &str) -> Result<Authority, AwsError> {
        const OP: &str = "DescribeCertificateAuthority";
        let region = region_of(arn);
        // A client with the principal's current credentials (an assumed role's are renewed before
        // they expire, so a client is not kept).
        let client = self.aws.acm_pca(self.caller, region, principal).await?;
        let call = Call {
            callers: &[self.caller],
            identity: principal.identity(),
            scope: Scope::new(principal.account(), Service::AcmPca, region),
            operation: OP,
            changes: 0,
        };
        let output = self
            .aws
            .call(call, || async {
                client.describe_certificate_authority().certificate_authority_arn(arn).send().await.map_err(|e| classify_sdk_error(OP, &e))
            })
            .await?;
        let authority = output.certificate_authority().ok_or_else(|| AwsError {
            operation: OP,
            code: Some("ResourceNotFoundException".to_owned()),
            class: ErrorClass::NotFound,
            message: "no certificate authority in the response".to_owned(),
        })?;
        Ok(Authority {
            arn: authority.arn().unwrap_or(arn).to_owned(),
            status: AuthorityStatus::from_sdk(authority.status()),
            not_after: authority.not_after().and_then(|t| jiff::Timestamp::from_second(t.secs()).ok()),
        })
    }
}

/// The region of an ARN (`arn:aws:acm-pca:REGION:...`), if it names one.
pub fn region_of(arn: &str) -> Option<&str> {
    arn.split(':').nth(3).filter(|region| !region.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_is_the_arn_s_fourth_field() {
        assert_eq!(region_of("arn:aws:acm-pca:eu-west-1:123456789012:certificate-authority/x"), Some("eu-west-1"));
        assert_eq!(region_of("not-an-arn"), None);
    }

    #[test]
    fn statuses_read_as_aws_names_them() {
        assert_eq!(AuthorityStatus::from_sdk(Some(&CertificateAuthorityStatus::Disabled)).as_str(), "DISABLED");
        assert_eq!(AuthorityStatus::from_sdk(None).as_str(), "unknown");
    }
}
