//! Spec validation the schema cannot express: the certificate's region, the certificate's
//! coverage of every domain, and what a create needs. Pure, so every rule has a unit test.

use crate::api::DistributionTenantSpec;

/// CloudFront only uses ACM certificates from this region.
pub const CERTIFICATE_REGION: &str = "us-east-1";

/// Why a spec cannot be sent to CloudFront. Shown to the user as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "tenant name {0:?} is invalid: CloudFront tenant names have 3-128 characters, lowercase letters, digits, dots and hyphens, and start and end with a letter or digit"
    )]
    Name(String),
    #[error("certificate {0:?} is not an ACM certificate ARN")]
    CertificateArn(String),
    #[error("certificate is in region {0}, but CloudFront only uses certificates from {CERTIFICATE_REGION}")]
    CertificateRegion(String),
    #[error("the certificate does not cover the domains {}", .0.join(", "))]
    CertificateSanMismatch(Vec<String>),
    #[error("spec.{0} must not be empty")]
    Missing(&'static str),
    #[error("parameter {0:?} is given more than once")]
    DuplicateParameter(String),
    #[error("customizations.webAcl.arn is required with action override")]
    WebAclArnMissing,
}

impl SpecError {
    /// The condition reason: seed 001 names the SAN mismatch on its own.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::CertificateSanMismatch(_) => "CertificateSANMismatch",
            _ => "InvalidSpec",
        }
    }
}

/// Everything checked before a create or update, given the tenant name (`metadata.name`).
pub fn validate(name: &str, spec: &DistributionTenantSpec) -> Result<(), SpecError> {
    validate_name(name)?;
    if spec.distribution_id.trim().is_empty() {
        return Err(SpecError::Missing("distributionId"));
    }
    if spec.domains.is_empty() {
        return Err(SpecError::Missing("domains"));
    }
    let mut names: Vec<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(SpecError::DuplicateParameter(pair[0].to_owned()));
    }
    let customizations = spec.customizations.as_ref();
    if let Some(web_acl) = customizations.and_then(|c| c.web_acl.as_ref())
        && web_acl.action == crate::api::WebAclAction::Override
        && web_acl.arn.as_deref().is_none_or(str::is_empty)
    {
        return Err(SpecError::WebAclArnMissing);
    }
    if let Some(certificate) = customizations.and_then(|c| c.certificate.as_ref()) {
        validate_certificate_region(&certificate.arn)?;
    }
    Ok(())
}

/// CloudFront's tenant name rules (also a CEL rule on the CRD; checked here for objects created
/// before the rule, and because a wrong name costs a failed AWS call).
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = (3..=128).contains(&name.len())
        && name.chars().all(allowed)
        && alphanumeric(name.chars().next())
        && alphanumeric(name.chars().next_back());
    if valid { Ok(()) } else { Err(SpecError::Name(name.to_owned())) }
}

/// `arn:PARTITION:acm:REGION:ACCOUNT:certificate/ID`, and REGION must be us-east-1.
pub fn validate_certificate_region(arn: &str) -> Result<(), SpecError> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", _, "acm", region, _, resource] if resource.starts_with("certificate/") => {
            if *region == CERTIFICATE_REGION {
                Ok(())
            } else {
                Err(SpecError::CertificateRegion((*region).to_owned()))
            }
        }
        _ => Err(SpecError::CertificateArn(arn.to_owned())),
    }
}

/// The domains no name of the certificate covers, in the order given. A wildcard name
/// `*.example.com` covers exactly one label (`a.example.com`, not `example.com` nor
/// `a.b.example.com`); a wildcard domain is covered only by the same wildcard. Case and a
/// trailing dot do not matter (DNS names are case-insensitive and may be written absolute).
pub fn uncovered_domains<'a>(domains: impl IntoIterator<Item = &'a str>, sans: &[String]) -> Vec<String> {
    let sans: Vec<String> = sans.iter().map(|s| normalize(s)).collect();
    domains.into_iter().filter(|domain| !sans.iter().any(|san| covers(san, &normalize(domain)))).map(str::to_owned).collect()
}

/// Checks [`uncovered_domains`] for the spec's domains.
pub fn check_certificate_coverage(spec: &DistributionTenantSpec, sans: &[String]) -> Result<(), SpecError> {
    let missing = uncovered_domains(spec.domains.iter().map(|d| d.domain.as_str()), sans);
    if missing.is_empty() { Ok(()) } else { Err(SpecError::CertificateSanMismatch(missing)) }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn covers(san: &str, domain: &str) -> bool {
    if san == domain {
        return true;
    }
    match (san.strip_prefix("*."), domain.split_once('.')) {
        (Some(parent), Some((label, rest))) => !label.is_empty() && label != "*" && rest == parent,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CertificateRef, Customizations, DomainName, Parameter, WebAclAction, WebAclCustomization};

    fn spec(domains: &[&str]) -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: "E1ABC".to_owned(),
            domains: domains.iter().map(|d| DomainName { domain: (*d).to_owned() }).collect(),
            ..DistributionTenantSpec::default()
        }
    }

    fn sans(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn names_of_three_to_128_lowercase_characters_are_valid() {
        for name in ["abc", "tenant-1.example", &"a".repeat(128)] {
            assert_eq!(validate_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn names_breaking_cloudfront_rules_are_rejected() {
        for name in ["ab", &"a".repeat(129), "Tenant", "-abc", "abc.", "a_bc", "ab c"] {
            assert!(validate_name(name).is_err(), "{name}");
        }
    }

    #[test]
    fn certificate_outside_us_east_1_is_rejected() {
        let arn = "arn:aws:acm:eu-west-1:123456789012:certificate/abc";
        assert_eq!(validate_certificate_region(arn), Err(SpecError::CertificateRegion("eu-west-1".to_owned())));
    }

    #[test]
    fn certificate_in_us_east_1_is_accepted() {
        assert_eq!(validate_certificate_region("arn:aws:acm:us-east-1:123456789012:certificate/abc"), Ok(()));
    }

    #[test]
    fn arn_of_another_service_is_not_a_certificate() {
        assert!(matches!(validate_certificate_region("arn:aws:iam::123456789012:role/x"), Err(SpecError::CertificateArn(_))));
    }

    #[test]
    fn spec_with_certificate_in_another_region_fails_validation() {
        let mut spec = spec(&["a.example.com"]);
        spec.customizations = Some(Customizations {
            certificate: Some(CertificateRef { arn: "arn:aws:acm:eu-central-1:123456789012:certificate/x".to_owned() }),
            ..Customizations::default()
        });
        assert_eq!(validate("tenant", &spec), Err(SpecError::CertificateRegion("eu-central-1".to_owned())));
    }

    #[test]
    fn duplicate_parameter_names_are_rejected() {
        let mut spec = spec(&["a.example.com"]);
        spec.parameters = vec![
            Parameter { name: "origin".to_owned(), value: "a".to_owned() },
            Parameter { name: "origin".to_owned(), value: "b".to_owned() },
        ];
        assert_eq!(validate("tenant", &spec), Err(SpecError::DuplicateParameter("origin".to_owned())));
    }

    #[test]
    fn web_acl_override_needs_an_arn() {
        let mut spec = spec(&["a.example.com"]);
        spec.customizations = Some(Customizations {
            web_acl: Some(WebAclCustomization { action: WebAclAction::Override, arn: None }),
            ..Customizations::default()
        });
        assert_eq!(validate("tenant", &spec), Err(SpecError::WebAclArnMissing));
    }

    #[test]
    fn spec_without_domains_is_rejected() {
        assert_eq!(validate("tenant", &spec(&[])), Err(SpecError::Missing("domains")));
    }

    #[test]
    fn exact_san_covers_its_domain_only() {
        assert_eq!(uncovered_domains(["a.example.com", "b.example.com"], &sans(&["a.example.com"])), ["b.example.com"]);
    }

    #[test]
    fn wildcard_san_covers_one_label_below_its_parent() {
        let wildcard = sans(&["*.example.com"]);
        assert!(uncovered_domains(["www.example.com"], &wildcard).is_empty());
        assert_eq!(uncovered_domains(["example.com"], &wildcard), ["example.com"]);
        assert_eq!(uncovered_domains(["a.b.example.com"], &wildcard), ["a.b.example.com"]);
    }

    #[test]
    fn wildcard_domain_needs_the_same_wildcard_san() {
        assert!(uncovered_domains(["*.example.com"], &sans(&["*.example.com"])).is_empty());
        assert_eq!(uncovered_domains(["*.example.com"], &sans(&["www.example.com"])), ["*.example.com"]);
    }

    #[test]
    fn coverage_ignores_case_and_trailing_dots() {
        assert!(uncovered_domains(["www.example.com"], &sans(&["*.Example.COM."])).is_empty());
    }

    #[test]
    fn uncovered_domains_are_a_san_mismatch() {
        let error = check_certificate_coverage(&spec(&["a.example.com", "b.other.org"]), &sans(&["*.example.com"]))
            .expect_err("b.other.org is not covered");
        assert_eq!(error, SpecError::CertificateSanMismatch(vec!["b.other.org".to_owned()]));
        assert_eq!(error.reason(), "CertificateSANMismatch");
    }
}
