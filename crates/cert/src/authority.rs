//! Private certificates (issue 30): a Cert naming an ACM Private CA (`spec.certificateAuthorityArn`)
//! gets a certificate that CA signs — no DNS validation, no Route 53 record, always exportable.
//! Which CAs Certs may name is the installation's choice (`--certificate-authorities`): a CA the
//! operator's role can use is not necessarily one every namespace should issue from; the CA is
//! read (and the certificate requested) as the Cert's namespace's identity (ADR 0014). The rules
//! here are pure; the admission webhook applies them first, `create` again before asking ACM
//! (and then the CA's state, which only AWS knows).

use blockwork_aws::pca::{Authority, AuthorityStatus, region_of};

/// Why a Cert cannot issue from a CA, as a condition reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

fn refusal(reason: &'static str, message: String) -> Refusal {
    Refusal { reason, message }
}

/// Whether a Cert may name `arn`: one of `allowed`, in `region` (ACM's; `None`: not known here).
/// ARNs carry an account id, which messages leave out.
pub fn check(arn: &str, allowed: &[String], region: Option<&str>) -> Result<(), Refusal> {
    if !allowed.iter().any(|a| a == arn) {
        let message = match allowed.len() {
            0 => "this installation issues no private certificates (blockwork run --certificate-authorities, the chart's controllers.cert.certificateAuthorities)".to_owned(),
            n => format!("spec.certificateAuthorityArn is not one of the {n} private CAs this installation issues from (--certificate-authorities)"),
        };
        return Err(refusal("CertificateAuthorityNotAllowed", message));
    }
    match (region_of(arn), region) {
        (Some(theirs), Some(ours)) if theirs != ours => Err(refusal(
            "CertificateAuthorityInOtherRegion",
            format!("the private CA is in {theirs}; ACM issues private certificates only from a CA in its own region ({ours})"),
        )),
        _ => Ok(()),
    }
}

/// Why a CA in this state cannot issue now; `None` when it can (`ACTIVE`).
pub fn state_problem(authority: &Authority) -> Option<Refusal> {
    let status = authority.status.as_str();
    let fix = match &authority.status {
        AuthorityStatus::Active => return None,
        AuthorityStatus::Disabled => "enable it (aws acm-pca update-certificate-authority --status ACTIVE)",
        AuthorityStatus::PendingCertificate => "install its CA certificate",
        AuthorityStatus::Creating => "wait until it is created, then install its CA certificate",
        AuthorityStatus::Expired => "install a new CA certificate",
        AuthorityStatus::Deleted => "restore it (within its restoration period) or name another CA",
        AuthorityStatus::Failed | AuthorityStatus::Other(_) => "see the CA in AWS Private CA, or name another CA",
    };
    Some(refusal("CertificateAuthorityNotActive", format!("the private CA is {status}, so it issues no certificate: {fix}")))
}

/// The CA does not exist (deleted for good, or a wrong ARN).
pub fn not_found() -> Refusal {
    refusal(
        "CertificateAuthorityNotFound",
        "the private CA does not exist, or the namespace's AWS identity cannot see it (deleted, a wrong ARN, or not shared with its account): name another CA, or share it with the account".to_owned(),
    )
}

/// What ACM's failure reason of a private certificate means (ACM User Guide, "Handling
/// exceptions", private certificates); `None` for reasons that are not the CA's.
pub fn failure(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "PCA_INVALID_STATE" => "the private CA was not ACTIVE (disabled, expired, deleted, or without its CA certificate)",
        "PCA_RESOURCE_NOT_FOUND" => "the private CA does not exist",
        "PCA_ACCESS_DENIED" => {
            "the private CA does not let ACM issue (grant acm.amazonaws.com IssueCertificate, GetCertificate and ListPermissions)"
        }
        "PCA_INVALID_DURATION" => "the certificate would outlive the private CA's own certificate",
        "PCA_LIMIT_EXCEEDED" => "the private CA reached its issuance quota",
        "PCA_NAME_CONSTRAINTS_VALIDATION" => "the names are outside the private CA's name constraints",
        "PCA_REQUEST_FAILED" | "PCA_INVALID_ARGS" | "PCA_INVALID_ARN" => "the private CA refused the request",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CA: &str = "arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/11111111-2222-3333-4444-555555555555";

    #[test]
    fn a_ca_the_installation_does_not_issue_from_is_refused_without_its_account() {
        let refused = check(CA, &[], Some("us-east-1")).unwrap_err();
        assert_eq!(refused.reason, "CertificateAuthorityNotAllowed");
        assert!(refused.message.contains("--certificate-authorities") && !refused.message.contains("123456789012"));
        let other = check(CA, &["arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/x".to_owned()], None).unwrap_err();
        assert!(other.message.contains("not one of the 1"), "{}", other.message);
        assert_eq!(check(CA, &[CA.to_owned()], Some("us-east-1")), Ok(()));
    }

    #[test]
    fn a_ca_in_another_region_is_refused_when_the_region_is_known() {
        let refused = check(CA, &[CA.to_owned()], Some("eu-west-1")).unwrap_err();
        assert_eq!(refused.reason, "CertificateAuthorityInOtherRegion");
        assert!(refused.message.contains("us-east-1") && refused.message.contains("eu-west-1"));
        assert_eq!(check(CA, &[CA.to_owned()], None), Ok(()), "the webhook may not know the region: create checks again");
    }

    #[test]
    fn only_an_active_ca_issues_and_every_other_state_says_what_to_do() {
        let at = |status| Authority { arn: CA.into(), status, not_after: None };
        assert_eq!(state_problem(&at(AuthorityStatus::Active)), None);
        let disabled = state_problem(&at(AuthorityStatus::Disabled)).unwrap();
        assert_eq!(disabled.reason, "CertificateAuthorityNotActive");
        assert!(disabled.message.contains("DISABLED") && disabled.message.contains("enable it"));
        for status in [AuthorityStatus::Deleted, AuthorityStatus::Expired, AuthorityStatus::PendingCertificate, AuthorityStatus::Creating] {
            assert!(state_problem(&at(status.clone())).is_some(), "{status:?}");
        }
    }

    #[test]
    fn acm_s_private_ca_failure_reasons_are_explained() {
        assert!(failure("PCA_INVALID_STATE").unwrap().contains("not ACTIVE"));
        assert_eq!(failure("CAA_ERROR"), None);
    }
}
