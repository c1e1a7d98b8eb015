//! Adopting an existing ACM certificate (`spec.adopt.certificateArn`) and what ownership means
//! for a Cert (ADR 0017): the pure checks before anything is written — where the certificate
//! is, how it differs from the spec — and the words of the conditions. The claim decision
//! itself is `blockwork_aws::ownership`, shared with the tenant.

use blockwork_aws::acm::{AcmStatus, Certificate};
use blockwork_aws::mask_accounts;
use blockwork_aws::ownership::{self, Owner};
use blockwork_aws::principal::account_of_arn;

use crate::api::CertSpec;
use crate::decisions::{Desired, TAG_MANAGED_BY, issuance_differs};
use crate::zones::normalize;

/// The region and account of an ACM certificate ARN
/// (`arn:<partition>:acm:<region>:<account>:certificate/<id>`); `None` for any other ARN.
pub fn location(arn: &str) -> Option<(&str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(_partition), Some("acm"), Some(region), Some(_account), Some(resource)) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    // The account as every other ARN's is read: twelve digits, or none.
    let account = account_of_arn(arn)?;
    resource.starts_with("certificate/").then_some((region, account))
}

/// Why the certificate may not be adopted where the namespace acts: another region than the
/// namespace's ACM, or another account than its identity's (`None` while the account could not
/// be told: the describe as the namespace's principal then decides, as ACM refuses another
/// account's certificate). Account ids are never named.
pub fn misplaced(arn: &str, region: Option<&str>, account: Option<&str>) -> Option<String> {
    let Some((arn_region, arn_account)) = location(arn) else {
        return Some("spec.adopt.certificateArn is not an ACM certificate ARN".to_owned());
    };
    if let Some(region) = region.filter(|region| *region != arn_region) {
        return Some(format!(
            "the certificate to adopt is in region {arn_region}, and this namespace's certificates are in {region}: ACM certificates are regional; request one here or adopt one of this region"
        ));
    }
    if account.is_some_and(|account| account != arn_account) {
        return Some(
            "the certificate to adopt is in another AWS account than the one this namespace acts in (its AwsIdentity): a namespace adopts only in the account it is granted"
                .to_owned(),
        );
    }
    None
}

/// The admission webhook's refusal of `spec.adopt`: a certificate of another region than ACM's
/// (`--aws-region`), or of another account than the namespace's role is in, as far as admission
/// knows them (the controller checks again, with the account it acts in, before any write).
pub fn admission_problem(spec: &CertSpec, region: Option<&str>, account: Option<&str>) -> Option<String> {
    let adopt = spec.adopt.as_ref()?;
    misplaced(&adopt.certificate_arn, region, account).map(|problem| format!("spec.adopt.certificateArn: {problem}"))
}

/// Every way the certificate differs from the spec (empty: it matches): the primary name, the
/// alternative names missing or extra, and how it was issued (public or private CA,
/// exportable).
pub fn differences(certificate: &Certificate, desired: &Desired) -> Vec<String> {
    let mut differences = Vec::new();
    if normalize(&certificate.domain) != desired.domain {
        differences.push(format!("its primary name is {}, the spec asks for {}", certificate.domain, desired.domain));
    }
    let have: Vec<String> = certificate.sans.iter().map(|s| normalize(s)).filter(|s| *s != normalize(&certificate.domain)).collect();
    let wanted = |name: &String| *name != normalize(&certificate.domain) && !have.contains(name);
    let missing: Vec<&str> = desired.sans.iter().filter(|name| wanted(name)).map(String::as_str).collect();
    if !missing.is_empty() {
        differences.push(format!("it lacks the alternative names the spec asks for: {}", missing.join(", ")));
    }
    let mut extra: Vec<&str> =
        have.iter().filter(|name| **name != desired.domain && !desired.sans.contains(name)).map(String::as_str).collect();
    extra.sort_unstable();
    extra.dedup();
    if !extra.is_empty() {
        differences.push(format!("it has alternative names the spec does not list: {}", extra.join(", ")));
    }
    differences.extend(issuance_differs(certificate, desired));
    differences
}

/// Whether the same manifest's certificate elsewhere stops this Cert from requesting one
/// (OwnedElsewhere): only one that serves or will (issued, or pending validation). An expired,
/// revoked or failed one would only be adopted to fail: a new one is requested instead.
pub fn stands_in_the_way(certificate: &Certificate) -> bool {
    matches!(certificate.status, AcmStatus::Issued | AcmStatus::PendingValidation)
}

/// The AdoptionMismatch message: the certificate (account masked) and every difference.
pub fn mismatch(arn: &str, differences: &[String]) -> String {
    format!(
        "the certificate {} does not match this Cert's spec, so it is not adopted (nothing was written): {}; change the spec to match it, or adopt another certificate",
        mask_accounts(arn),
        differences.join("; ")
    )
}

/// The tags an adopted certificate gets: the ownership tags, and the managed-by tag the
/// operator's IAM policy lets it delete by (deleteOnRemoval). No request token: it was not
/// requested by this Cert.
pub fn adoption_tags(owner: &Owner<'_>) -> Vec<(String, String)> {
    let mut tags = owner.tags();
    tags.push((TAG_MANAGED_BY.to_owned(), "blockwork-cert".to_owned()));
    tags
}

/// The OwnershipLost message.
pub fn lost(arn: &str, by: Option<&str>) -> String {
    format!(
        "the certificate {} was taken over by {}: this Cert no longer acts on it (no record change, no delete; deleting this Cert deletes nothing in AWS). To manage it here again, delete this Cert and apply it with spec.adopt.certificateArn naming the certificate",
        mask_accounts(arn),
        ownership::taken_by(by)
    )
}

/// The OwnedElsewhere message: a certificate for exactly this spec is owned by the object of
/// this namespace and name elsewhere (another cluster), so none is requested.
pub fn owned_elsewhere(arn: &str, by: &str) -> String {
    format!(
        "the certificate {} for exactly these names is owned by another Blockwork object named {by} (this manifest in another cluster, or an earlier Cert of this name); no second certificate is requested. To manage it from this cluster, set spec.adopt.certificateArn to it (the other object then stops acting on it); see docs/adopting.md",
        mask_accounts(arn)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::zones::Zone;

    const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/0b8c1a4e-1111-2222-3333-444455556666";

    fn desired(domain: &str, sans: &[&str]) -> Desired {
        let zone = Zone { name: "example.com".into(), id: "Z1".into(), domains: Vec::new() };
        Desired {
            domain: domain.into(),
            sans: sans.iter().map(|s| (*s).to_owned()).collect(),
            zones: Vec::new(),
            zone,
            exportable: false,
            authority: None,
        }
    }

    fn certificate(domain: &str, sans: &[&str]) -> Certificate {
        Certificate {
            arn: ARN.into(),
            domain: domain.into(),
            sans: std::iter::once(domain).chain(sans.iter().copied()).map(str::to_owned).collect(),
            status: AcmStatus::Issued,
            created_at: None,
            not_after: None,
            in_use_by: Vec::new(),
            renewal_status: None,
            failure_reason: None,
            validations: Vec::new(),
            serial: None,
            exportable: false,
            authority: None,
        }
    }

    #[test]
    fn a_certificate_arn_tells_its_region_and_account_and_other_arns_tell_nothing() {
        assert_eq!(location(ARN), Some(("us-east-1", "123456789012")));
        assert_eq!(location("arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/x"), None);
        assert_eq!(location("arn:aws:cloudfront::123456789012:distribution/E1"), None);
    }

    #[test]
    fn a_certificate_of_another_account_or_region_is_refused_without_naming_the_account() {
        let account = misplaced(ARN, Some("us-east-1"), Some("210987654321")).unwrap();
        assert!(account.contains("another AWS account"), "{account}");
        assert!(!account.contains("123456789012") && !account.contains("210987654321"), "{account}");
        let region = misplaced(ARN, Some("eu-west-1"), Some("123456789012")).unwrap();
        assert!(region.contains("us-east-1") && region.contains("eu-west-1"), "{region}");
        assert_eq!(misplaced(ARN, Some("us-east-1"), Some("123456789012")), None);
        assert_eq!(misplaced(ARN, Some("us-east-1"), None), None);
    }

    #[test]
    fn admission_refuses_adopting_in_another_region_or_account_naming_the_field_and_leaves_other_certs_alone() {
        let adopting = CertSpec { adopt: Some(crate::api::AdoptSpec { certificate_arn: ARN.into() }), ..CertSpec::default() };
        let region = admission_problem(&adopting, Some("eu-west-1"), None).unwrap();
        assert!(region.starts_with("spec.adopt.certificateArn:") && region.contains("us-east-1"), "{region}");
        assert!(admission_problem(&adopting, Some("us-east-1"), Some("210987654321")).is_some());
        assert_eq!(admission_problem(&adopting, Some("us-east-1"), None), None, "the operator's own account is the controller's to check");
        assert_eq!(admission_problem(&CertSpec::default(), Some("eu-west-1"), None), None);
    }

    #[test]
    fn a_matching_certificate_has_no_difference_whatever_the_order_and_case_of_its_names() {
        let found = certificate("API.example.com", &["b.example.com", "a.example.com."]);
        assert!(differences(&found, &desired("api.example.com", &["a.example.com", "b.example.com"])).is_empty());
    }

    #[test]
    fn every_difference_is_named_the_primary_the_missing_and_the_extra_names() {
        let found = certificate("web.example.com", &["old.example.com"]);
        let named = differences(&found, &desired("api.example.com", &["new.example.com"]));
        assert_eq!(named.len(), 3, "{named:?}");
        assert!(named[0].contains("web.example.com") && named[0].contains("api.example.com"));
        assert!(named[1].contains("new.example.com"));
        assert!(named[2].contains("old.example.com"));
    }

    #[test]
    fn a_private_certificate_differs_from_a_spec_for_a_public_one() {
        let found = Certificate {
            authority: Some("arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/x".into()),
            ..certificate("api.example.com", &[])
        };
        let named = differences(&found, &desired("api.example.com", &[]));
        assert_eq!(named.len(), 1, "{named:?}");
        assert!(named[0].contains("private CA"));
    }

    #[test]
    fn only_a_certificate_that_serves_or_will_stops_a_new_request() {
        let with = |status| Certificate { status, ..certificate("api.example.com", &[]) };
        assert!(stands_in_the_way(&with(AcmStatus::Issued)));
        assert!(stands_in_the_way(&with(AcmStatus::PendingValidation)));
        for status in [AcmStatus::Expired, AcmStatus::Revoked, AcmStatus::Failed, AcmStatus::ValidationTimedOut, AcmStatus::Inactive] {
            assert!(!stands_in_the_way(&with(status.clone())), "{status:?}");
        }
    }

    #[test]
    fn the_mismatch_message_masks_the_account_and_lists_every_difference() {
        let message = mismatch(ARN, &["one".to_owned(), "two".to_owned()]);
        assert!(!message.contains("123456789012"), "{message}");
        assert!(message.contains("one; two"), "{message}");
    }

    #[test]
    fn an_adopted_certificate_is_tagged_with_its_owner_and_as_managed_but_without_a_request_token() {
        let tags = adoption_tags(&Owner { uid: "u1", namespace: "team", name: "api" });
        assert!(tags.contains(&(ownership::TAG_OWNER_UID.to_owned(), "u1".to_owned())));
        assert!(tags.contains(&(TAG_MANAGED_BY.to_owned(), "blockwork-cert".to_owned())));
        assert!(!tags.iter().any(|(k, _)| k == crate::decisions::TAG_TOKEN));
    }

    #[test]
    fn the_lost_and_owned_elsewhere_messages_tell_how_to_act_without_an_account() {
        let lost = lost(ARN, Some("team/api"));
        assert!(lost.contains("team/api") && lost.contains("spec.adopt.certificateArn") && !lost.contains("123456789012"));
        let elsewhere = owned_elsewhere(ARN, "team/api");
        assert!(elsewhere.contains("spec.adopt.certificateArn") && !elsewhere.contains("123456789012"));
    }
}
