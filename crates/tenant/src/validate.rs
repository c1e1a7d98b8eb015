//! Spec validation the schema cannot express, in two parts. [`validate`] needs the spec alone:
//! the admission webhook runs it before the object is stored, and the controller again before
//! any call (for objects stored without the webhook). [`validate_against`] needs the
//! distribution the tenant joins (its certificate, its tenant parameters), and
//! [`check_certificate_coverage`] the certificate's names: the controller checks them before any
//! write. Pure, so every rule has a unit test.

use std::collections::BTreeSet;

use blockwork_aws::dns_name::{self, FieldError};
use blockwork_aws::mask_accounts;

use crate::api::{
    DistributionTenantSpec, MAX_ARN_LENGTH, MAX_DOMAINS, MAX_ID_LENGTH, MAX_PARAMETER_NAME, MAX_PARAMETER_VALUE, MAX_PARAMETERS,
};

/// CloudFront only uses ACM certificates from this region.
pub const CERTIFICATE_REGION: &str = "us-east-1";

/// Why a spec cannot be sent to CloudFront. Shown to the user as it is: every message names the
/// field, and none carries an account id (ARNs are shown with the account masked).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "tenant name {0:?} is invalid: CloudFront tenant names have 3-128 characters, lowercase letters, digits, dots and hyphens, and start and end with a letter or digit"
    )]
    Name(String),
    #[error("spec.customizations.certificate.arn {0} is not an ACM certificate ARN")]
    CertificateArn(String),
    #[error("spec.customizations.certificate.arn is in region {0}, but CloudFront only uses certificates from {CERTIFICATE_REGION}")]
    CertificateRegion(String),
    #[error("the certificate does not cover the domains {}", .0.join(", "))]
    CertificateSanMismatch(Vec<String>),
    #[error(
        "{}: Cert {cert}'s certificate is in {region}, but CloudFront only uses certificates from {CERTIFICATE_REGION}",
        crate::cert_ref::FIELD
    )]
    CertRegion { cert: String, region: String },
    #[error("{}: Cert {cert}'s names do not cover the domains {}", crate::cert_ref::FIELD, .domains.join(", "))]
    CertNotCovering { cert: String, domains: Vec<String> },
    #[error("spec.{0} must not be empty")]
    Missing(&'static str),
    #[error("spec.{field} is too long: at most {max} characters")]
    TooLong { field: String, max: usize },
    #[error("spec.{field} has too many items: at most {max}")]
    TooMany { field: &'static str, max: usize },
    /// Every domain a public CA would refuse, and every domain listed twice.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Domains(Vec<FieldError>),
    #[error("{0}")]
    PrimaryDomainName(FieldError),
    #[error("spec.managedCertificateRequest.primaryDomainName {0} is not one of spec.domains")]
    PrimaryDomainNotADomain(String),
    #[error("spec.parameters: parameter {0:?} is given more than once")]
    DuplicateParameter(String),
    #[error("spec.customizations.webAcl.arn is required with action override")]
    WebAclArnMissing,
    #[error("spec.customizations.geoRestrictions.locations: {0:?} is not an ISO 3166-1 alpha-2 country code (two capitals, e.g. DE)")]
    GeoLocation(String),
    #[error("spec.dns.assumeRoleArn {0} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)")]
    AssumeRoleArn(String),
    #[error(
        "distribution {0} is not a multi-tenant distribution (connection mode tenant-only); only those take tenants: check spec.distributionId"
    )]
    NotMultiTenant(String),
    #[error(
        "distribution {0} uses CloudFront's default certificate, which cannot serve the tenant's domains: set spec.customizations.certificate.arn (an ACM certificate in us-east-1) or spec.managedCertificateRequest"
    )]
    CertificateRequired(String),
    #[error("spec.parameters lacks {}, which the distribution requires and gives no default", quoted(.0))]
    MissingParameters(Vec<String>),
    #[error("spec.parameters has {}, which the distribution does not declare (it declares: {})", quoted(.unknown), quoted_or_none(.declared))]
    UnknownParameters { unknown: Vec<String>, declared: Vec<String> },
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

fn quoted_or_none(names: &[String]) -> String {
    if names.is_empty() { "none".to_owned() } else { quoted(names) }
}

impl SpecError {
    /// The condition reason: seed 001 names the SAN mismatch on its own.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::CertificateSanMismatch(_) | Self::CertNotCovering { .. } => "CertificateSANMismatch",
            _ => "InvalidSpec",
        }
    }
}

/// What the multi-tenant distribution asks of its tenants, as read from `GetDistribution`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DistributionRules {
    pub id: String,
    /// Connection mode `tenant-only`.
    pub multi_tenant: bool,
    /// The distribution serves CloudFront's default certificate (`*.cloudfront.net`): a tenant
    /// must bring its own or have CloudFront manage one.
    pub default_certificate: bool,
    /// The tenant parameters the distribution declares.
    pub parameters: Vec<ParameterDefinition>,
}

/// One of the distribution's `TenantConfig.ParameterDefinitions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParameterDefinition {
    pub name: String,
    pub required: bool,
    pub default_value: Option<String>,
}

/// Everything checked before a create or update that needs only the spec and the tenant name
/// (`metadata.name`): also what the admission webhook refuses.
pub fn validate(name: &str, spec: &DistributionTenantSpec) -> Result<(), SpecError> {
    validate_name(name)?;
    validate_bounds(spec)?;
    if spec.distribution_id.trim().is_empty() {
        return Err(SpecError::Missing("distributionId"));
    }
    if spec.domains.is_empty() {
        return Err(SpecError::Missing("domains"));
    }
    let domains = dns_name::parse_list("spec.domains", spec.domains.iter().map(|d| d.domain.as_str())).map_err(SpecError::Domains)?;
    if let Some(primary) = spec.managed_certificate_request.as_ref().and_then(|r| r.primary_domain_name.as_deref()) {
        let normal =
            dns_name::parse_field("spec.managedCertificateRequest.primaryDomainName", primary).map_err(SpecError::PrimaryDomainName)?;
        if !domains.contains(&normal) {
            return Err(SpecError::PrimaryDomainNotADomain(normal));
        }
    }
    if let Some(name) = first_duplicate(spec.parameters.iter().map(|p| p.name.as_str())) {
        return Err(SpecError::DuplicateParameter(name.to_owned()));
    }
    let customizations = spec.customizations.as_ref();
    if let Some(web_acl) = customizations.and_then(|c| c.web_acl.as_ref())
        && web_acl.action == crate::api::WebAclAction::Override
        && web_acl.arn.as_deref().is_none_or(str::is_empty)
    {
        return Err(SpecError::WebAclArnMissing);
    }
    if let Some(arn) = spec.certificate_arn() {
        validate_certificate_region(arn)?;
    }
    // Any case here: objects stored before the CRD's enum (which takes capitals only) may have
    // lowercase codes, which are sent in capitals; what is no code at all stops them.
    if let Some(location) = customizations
        .and_then(|c| c.geo_restrictions.as_ref())
        .and_then(|g| g.locations.iter().find(|l| isocountry::CountryCode::for_alpha2_caseless(l).is_err()))
    {
        return Err(SpecError::GeoLocation(location.clone()));
    }
    if let Some(role) = spec.dns.as_ref().and_then(|d| d.assume_role_arn.as_deref())
        && !is_role_arn(role)
    {
        return Err(SpecError::AssumeRoleArn(mask_accounts(role)));
    }
    Ok(())
}

/// The CRD's bounds on every string and list ([`crate::api::MAX_ID_LENGTH`] and the others),
/// for objects stored before them: an identifier too long for a URI made the AWS SDK panic.
pub fn validate_bounds(spec: &DistributionTenantSpec) -> Result<(), SpecError> {
    let too_long = |field: &str, value: &str, max: usize| {
        if value.chars().count() > max { Err(SpecError::TooLong { field: field.to_owned(), max }) } else { Ok(()) }
    };
    if spec.domains.len() > MAX_DOMAINS {
        return Err(SpecError::TooMany { field: "domains", max: MAX_DOMAINS });
    }
    if spec.parameters.len() > MAX_PARAMETERS {
        return Err(SpecError::TooMany { field: "parameters", max: MAX_PARAMETERS });
    }
    too_long("distributionId", &spec.distribution_id, MAX_ID_LENGTH)?;
    too_long("connectionGroupId", spec.connection_group_id.as_deref().unwrap_or_default(), MAX_ID_LENGTH)?;
    for (index, parameter) in spec.parameters.iter().enumerate() {
        too_long(&format!("parameters[{index}].name"), &parameter.name, MAX_PARAMETER_NAME)?;
        too_long(&format!("parameters[{index}].value"), &parameter.value, MAX_PARAMETER_VALUE)?;
    }
    let customizations = spec.customizations.as_ref();
    too_long("customizations.certificate.arn", spec.certificate_arn().unwrap_or_default(), MAX_ARN_LENGTH)?;
    too_long(
        "customizations.webAcl.arn",
        customizations.and_then(|c| c.web_acl.as_ref()).and_then(|w| w.arn.as_deref()).unwrap_or_default(),
        MAX_ARN_LENGTH,
    )?;
    too_long("dns.hostedZoneId", spec.dns.as_ref().map_or("", |d| d.hosted_zone_id.as_str()), MAX_ID_LENGTH)?;
    Ok(())
}

/// The spec against the distribution it names (seed 001: "certificate coverage, required
/// parameters"): a tenant of a distribution on CloudFront's default certificate brings a
/// certificate; every parameter the distribution requires without a default is given; no
/// parameter the distribution does not declare is.
pub fn validate_against(spec: &DistributionTenantSpec, distribution: &DistributionRules) -> Result<(), SpecError> {
    if !distribution.multi_tenant {
        return Err(SpecError::NotMultiTenant(distribution.id.clone()));
    }
    let brings_certificate =
        spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()).is_some() || spec.managed_certificate_request.is_some();
    if distribution.default_certificate && !brings_certificate {
        return Err(SpecError::CertificateRequired(distribution.id.clone()));
    }
    let given: BTreeSet<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    let missing: Vec<String> = distribution
        .parameters
        .iter()
        .filter(|d| d.required && d.default_value.is_none() && !given.contains(d.name.as_str()))
        .map(|d| d.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(SpecError::MissingParameters(missing));
    }
    let declared: Vec<String> = distribution.parameters.iter().map(|d| d.name.clone()).collect();
    let unknown: Vec<String> = given.iter().filter(|name| !declared.iter().any(|d| d == *name)).map(|name| (*name).to_owned()).collect();
    if !unknown.is_empty() {
        return Err(SpecError::UnknownParameters { unknown, declared });
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
    match region_of(arn) {
        Some(CERTIFICATE_REGION) => Ok(()),
        Some(region) => Err(SpecError::CertificateRegion(region.to_owned())),
        None => Err(SpecError::CertificateArn(mask_accounts(arn))),
    }
}

/// The region of an ACM certificate's ARN, `None` for what is no certificate ARN.
pub fn region_of(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", _, "acm", region, _, resource] if resource.starts_with("certificate/") => Some(*region),
        _ => None,
    }
}

/// `arn:PARTITION:iam::ACCOUNT:role/PATH/NAME` (the CRD's CEL rule, for objects stored before it).
fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", partition, "iam", "", account, resource] => {
            partition.starts_with("aws")
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty())
        }
        _ => false,
    }
}

fn first_duplicate<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = BTreeSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

/// The domains no name of the certificate covers, in the order given. A wildcard name
/// `*.example.com` covers exactly one label (`a.example.com`, not `example.com` nor
/// `a.b.example.com`); a wildcard domain is covered only by the same wildcard. Case and a
/// trailing dot do not matter (DNS names are case-insensitive and may be written absolute).
pub fn uncovered_domains<'a>(domains: impl IntoIterator<Item = &'a str>, sans: &[String]) -> Vec<String> {
    let sans: Vec<String> = sans.iter().map(|s| dns_name::normalize(s)).collect();
    domains.into_iter().filter(|domain| !sans.iter().any(|san| covers(san, &dns_name::normalize(domain)))).map(str::to_owned).collect()
}

/// Checks [`uncovered_domains`] for the spec's domains.
pub fn check_certificate_coverage(spec: &DistributionTenantSpec, sans: &[String]) -> Result<(), SpecError> {
    let missing = uncovered_domains(spec.domains.iter().map(|d| d.domain.as_str()), sans);
    if missing.is_empty() { Ok(()) } else { Err(SpecError::CertificateSanMismatch(missing)) }
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
    use crate::api::{
        CertificateRef, Customizations, DnsConfig, DnsProvider, DomainName, GeoRestrictionType, GeoRestrictions, ManagedCertificateRequest,
        Parameter, WebAclAction, WebAclCustomization,
    };

    fn parameter(name: &str) -> Parameter {
        Parameter { name: name.to_owned(), value: "v".to_owned() }
    }

    fn definition(name: &str, required: bool, default_value: Option<&str>) -> ParameterDefinition {
        ParameterDefinition { name: name.to_owned(), required, default_value: default_value.map(str::to_owned) }
    }

    /// A multi-tenant distribution with its own certificate and the given parameters.
    fn distribution(parameters: Vec<ParameterDefinition>) -> DistributionRules {
        DistributionRules { id: "E1ABC".to_owned(), multi_tenant: true, default_certificate: false, parameters }
    }

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

    /// Found by the reliability campaign's hostile corpus (issue 15): a DistributionTenant with a
    /// 100,000-character distributionId was stored, and the AWS SDK panicked building its
    /// GetDistribution URI, which stopped `blockwork run`.
    #[test]
    fn a_distribution_id_too_long_for_a_uri_is_refused_before_any_call() {
        let mut long = spec(&["www.example.com"]);
        long.distribution_id = "E".repeat(100_000);
        assert_eq!(validate("shop", &long), Err(SpecError::TooLong { field: "distributionId".to_owned(), max: MAX_ID_LENGTH }));
        let message = validate("shop", &long).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.starts_with("spec.distributionId is too long"), "{message}");
    }

    #[test]
    fn every_string_and_list_of_the_spec_is_bounded() {
        let mut many = spec(&["www.example.com"]);
        many.domains = (0..=MAX_DOMAINS).map(|i| DomainName { domain: format!("d{i}.example.com") }).collect();
        assert_eq!(validate_bounds(&many), Err(SpecError::TooMany { field: "domains", max: MAX_DOMAINS }));
        let mut value = spec(&["www.example.com"]);
        value.parameters = vec![Parameter { name: "origin".to_owned(), value: "x".repeat(MAX_PARAMETER_VALUE + 1) }];
        assert_eq!(validate_bounds(&value), Err(SpecError::TooLong { field: "parameters[0].value".to_owned(), max: MAX_PARAMETER_VALUE }));
        let mut zone = spec(&["www.example.com"]);
        zone.dns = Some(DnsConfig {
            provider: DnsProvider::Route53,
            hosted_zone_id: "Z".repeat(MAX_ID_LENGTH + 1),
            assume_role_arn: None,
            ttl: 300,
        });
        assert!(matches!(validate_bounds(&zone), Err(SpecError::TooLong { field, .. }) if field == "dns.hostedZoneId"));
        assert_eq!(validate_bounds(&spec(&["www.example.com"])), Ok(()));
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
    fn arn_of_another_service_is_not_a_certificate_and_is_shown_without_its_account() {
        let error = validate_certificate_region("arn:aws:iam::123456789012:role/x").expect_err("a role");
        assert_eq!(error, SpecError::CertificateArn("arn:aws:iam::[ACCOUNT_ID]:role/x".to_owned()));
    }

    #[test]
    fn spec_with_certificate_in_another_region_fails_validation() {
        let mut spec = spec(&["a.example.com"]);
        spec.customizations = Some(Customizations {
            certificate: Some(CertificateRef {
                arn: Some("arn:aws:acm:eu-central-1:123456789012:certificate/x".to_owned()),
                cert_ref: None,
            }),
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
    fn a_trailing_dot_names_the_same_domain_so_both_forms_are_a_duplicate() {
        let error = validate("tenant", &spec(&["www.example.com", "www.example.com."])).expect_err("one domain twice");
        assert!(
            matches!(&error, SpecError::Domains(problems) if matches!(problems.as_slice(), [FieldError::Duplicate { .. }])),
            "{error:?}"
        );
        assert!(error.to_string().starts_with("spec.domains[1]: \"www.example.com.\" names www.example.com a second time"), "{error}");
        assert_eq!(validate("tenant", &spec(&["www.example.com."])), Ok(()));
    }

    #[test]
    fn a_domain_with_an_undecodable_a_label_is_refused_naming_the_label() {
        let error = validate("tenant", &spec(&["xn--zz.example.com"])).expect_err("xn--zz does not decode");
        assert!(error.to_string().starts_with("spec.domains[0]: label \"xn--zz\""), "{error}");
    }

    #[test]
    fn domains_a_public_ca_would_refuse_are_all_refused_naming_the_field_and_the_label() {
        let error =
            validate("tenant", &spec(&["zz--shop.example.com", "www.example.com", "xn--n3h.example.com"])).expect_err("two refused");
        let message = error.to_string();
        assert!(message.starts_with("spec.domains[0]: label \"zz--shop\""), "{message}");
        assert!(message.contains("; spec.domains[2]: label \"xn--n3h\"") && message.contains("U+2603"), "{message}");
        assert_eq!(validate("tenant", &spec(&["xn--bcher-kva.example.com"])), Ok(()), "a valid IDN");
    }

    #[test]
    fn primary_domain_of_a_managed_certificate_is_one_of_the_domains() {
        let mut spec = spec(&["www.example.com", "api.example.com"]);
        let request = |primary: &str| ManagedCertificateRequest {
            primary_domain_name: Some(primary.to_owned()),
            ..ManagedCertificateRequest::default()
        };
        spec.managed_certificate_request = Some(request("api.example.com."));
        assert_eq!(validate("tenant", &spec), Ok(()));
        spec.managed_certificate_request = Some(request("shop.example.com"));
        assert_eq!(validate("tenant", &spec), Err(SpecError::PrimaryDomainNotADomain("shop.example.com".to_owned())));
        spec.managed_certificate_request = Some(request("xn--zz.example.com"));
        let error = validate("tenant", &spec).expect_err("xn--zz does not decode");
        assert!(error.to_string().starts_with("spec.managedCertificateRequest.primaryDomainName: label \"xn--zz\""), "{error}");
    }

    #[test]
    fn geo_locations_must_be_iso_3166_alpha_2_codes() {
        let mut spec = spec(&["a.example.com"]);
        let geo = |codes: &[&str]| GeoRestrictions {
            restriction_type: GeoRestrictionType::Whitelist,
            locations: codes.iter().map(|c| (*c).to_owned()).collect(),
        };
        spec.customizations = Some(Customizations { geo_restrictions: Some(geo(&["DE", "fr"])), ..Customizations::default() });
        assert_eq!(validate("tenant", &spec), Ok(()), "stored before the CRD took capitals only");
        spec.customizations = Some(Customizations { geo_restrictions: Some(geo(&["DE", "UK"])), ..Customizations::default() });
        assert_eq!(validate("tenant", &spec), Err(SpecError::GeoLocation("UK".to_owned())));
    }

    #[test]
    fn assume_role_arn_must_name_an_iam_role_and_is_shown_without_its_account() {
        let mut spec = spec(&["a.example.com"]);
        let dns = |role: &str| DnsConfig {
            provider: DnsProvider::Route53,
            hosted_zone_id: "Z1".to_owned(),
            assume_role_arn: Some(role.to_owned()),
            ttl: crate::api::DEFAULT_TTL,
        };
        spec.dns = Some(dns("arn:aws:iam::123456789012:role/dns/blockwork"));
        assert_eq!(validate("tenant", &spec), Ok(()));
        spec.dns = Some(dns("arn:aws:iam::123456789012:user/blockwork"));
        let error = validate("tenant", &spec).expect_err("a user is not a role");
        assert_eq!(error, SpecError::AssumeRoleArn("arn:aws:iam::[ACCOUNT_ID]:user/blockwork".to_owned()));
    }

    #[test]
    fn default_certificate_distribution_needs_a_tenant_certificate_naming_both_fields() {
        let rules = DistributionRules { default_certificate: true, ..distribution(vec![]) };
        let error = validate_against(&spec(&["a.example.com"]), &rules).expect_err("no certificate");
        let message = error.to_string();
        assert!(message.contains("spec.customizations.certificate.arn") && message.contains("spec.managedCertificateRequest"), "{message}");
        let mut managed = spec(&["a.example.com"]);
        managed.managed_certificate_request = Some(ManagedCertificateRequest::default());
        assert_eq!(validate_against(&managed, &rules), Ok(()));
    }

    #[test]
    fn required_parameter_without_default_must_be_given() {
        let rules = distribution(vec![definition("origin", true, None), definition("path", true, Some("/"))]);
        let error = validate_against(&spec(&["a.example.com"]), &rules).expect_err("origin is missing");
        assert_eq!(error, SpecError::MissingParameters(vec!["origin".to_owned()]));
        assert!(error.to_string().contains("\"origin\""), "{error}");
        let mut given = spec(&["a.example.com"]);
        given.parameters = vec![parameter("origin")];
        assert_eq!(validate_against(&given, &rules), Ok(()), "a parameter with a default is not required");
    }

    #[test]
    fn parameters_the_distribution_does_not_declare_are_refused_naming_them() {
        let mut given = spec(&["a.example.com"]);
        given.parameters = vec![parameter("origin"), parameter("colour")];
        let error = validate_against(&given, &distribution(vec![definition("origin", false, None)])).expect_err("colour is unknown");
        assert_eq!(error.to_string(), "spec.parameters has \"colour\", which the distribution does not declare (it declares: \"origin\")");
    }

    #[test]
    fn a_distribution_that_is_not_multi_tenant_takes_no_tenant() {
        let rules = DistributionRules { multi_tenant: false, ..distribution(vec![]) };
        assert_eq!(validate_against(&spec(&["a.example.com"]), &rules), Err(SpecError::NotMultiTenant("E1ABC".to_owned())));
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
