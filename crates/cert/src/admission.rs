//! The Cert's admission rules as pure functions: what the validating webhook refuses before an
//! object is stored, and what the controller refuses again before ACM is asked (for objects
//! stored without the webhook, or while it failed open), in the same sentences. Each names the
//! field; DNS names follow the rule every Blockwork CRD shares (`blockwork_aws::dns_name`): a
//! name a public CA would refuse, or one domain listed twice, never reaches ACM.

use std::collections::HashMap;

use blockwork_aws::dns_name;

use crate::api::{CertSpec, MAX_SANS};
use crate::decisions::{Desired, desired};
use crate::zones::{ZoneError, ZoneRegistry, normalize};

/// The rules that need the spec and the operator's zones: every violation as a sentence naming
/// the field, or what the spec asks ACM for. The webhook and the controller both apply them.
pub fn admissible(spec: &CertSpec, registry: &ZoneRegistry) -> Result<Desired, Vec<String>> {
    let mut violations = Vec::new();
    for (field, value) in [("serviceName", &spec.service_name), ("environment", &spec.environment)] {
        if !dns_name::is_label(value) {
            violations.push(format!(
                "spec.{field} {value:?} must be an RFC 1123 label: lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit"
            ));
        }
    }
    if let Some(Err(invalid)) = spec.domain_name.as_deref().map(|name| dns_name::parse_field("spec.domainName", name)) {
        violations.push(invalid.to_string());
    }
    if spec.subject_alternative_names.len() > MAX_SANS {
        violations.push(format!(
            "spec.subjectAlternativeNames has {} names; ACM allows at most {MAX_SANS}",
            spec.subject_alternative_names.len()
        ));
    }
    if let Err(problems) = dns_name::parse_list("spec.subjectAlternativeNames", spec.subject_alternative_names.iter().map(String::as_str)) {
        violations.extend(problems.iter().map(ToString::to_string));
    }
    if !violations.is_empty() {
        return Err(violations);
    }
    let desired = desired(spec, registry).map_err(|error| vec![zone_refusal(spec, &error)])?;
    if spec.domain_name.is_none()
        && let Err(invalid) = dns_name::parse(&desired.domain)
    {
        return Err(vec![format!(
            "spec.serviceName and spec.environment make the domain {}, which is refused: {invalid}; set spec.domainName or change them",
            desired.domain
        )]);
    }
    Ok(desired)
}

/// A zone refusal as a sentence naming the field it is about, as the DistributionTenant's name
/// `spec.domains`: the domain named by `spec.domainName`, by a `spec.subjectAlternativeNames[i]`
/// (the first that names it, whatever its case or trailing dot), or the zone `spec.dnsZone`
/// names; none when no zone at all is granted to the namespace.
pub fn zone_refusal(spec: &CertSpec, error: &ZoneError) -> String {
    let field = match error {
        ZoneError::UnknownZone(_) => Some("spec.dnsZone".to_owned()),
        ZoneError::NotInZone { domain, .. } | ZoneError::NoZoneFor(domain) | ZoneError::NotGranted { domain, .. } => {
            let named = |name: &str| normalize(name) == normalize(domain);
            if spec.domain_name.as_deref().is_some_and(named) {
                Some("spec.domainName".to_owned())
            } else {
                spec.subject_alternative_names.iter().position(|san| named(san)).map(|i| format!("spec.subjectAlternativeNames[{i}]"))
            }
        }
        ZoneError::NoZones | ZoneError::InvalidEntry(_) | ZoneError::Duplicate(_) => None,
    };
    match field {
        Some(field) => format!("{field}: {error}"),
        None => error.to_string(),
    }
}

/// The webhook's rules for a Cert spec: [`admissible`], and no other object (not `uid`) asking
/// for the same FQDN. Empty: admitted.
pub fn validate(spec: &CertSpec, registry: &ZoneRegistry, uid: Option<&str>, index: &FqdnIndex) -> Vec<String> {
    match admissible(spec, registry) {
        Err(violations) => violations,
        Ok(desired) => index
            .other_holder(&desired.domain, uid)
            .map(|holder| format!("a certificate for {} already exists: {}/{}", desired.domain, holder.namespace, holder.name))
            .into_iter()
            .collect(),
    }
}

/// Who already holds a certificate for an FQDN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Certs by the FQDN their spec resolves to (not their status, so a Cert still pending counts).
#[derive(Clone, Debug, Default)]
pub struct FqdnIndex {
    by_fqdn: HashMap<String, Vec<Holder>>,
}

impl FqdnIndex {
    pub fn insert(&mut self, fqdn: &str, holder: Holder) {
        self.by_fqdn.entry(normalize(fqdn)).or_default().push(holder);
    }

    /// The index of `certs` by the FQDN each spec resolves to with its namespace's zones
    /// (`zones_of`); specs that do not resolve (no zone, no grant) are left out.
    pub fn from_certs(certs: &[crate::api::Cert], zones_of: impl Fn(&str) -> Option<ZoneRegistry>) -> Self {
        let mut index = Self::default();
        let mut registries: HashMap<String, Option<ZoneRegistry>> = HashMap::new();
        for cert in certs {
            let namespace = cert.metadata.namespace.clone().unwrap_or_default();
            let registry = registries.entry(namespace.clone()).or_insert_with(|| zones_of(&namespace));
            if let Some(Ok(desired)) = registry.as_ref().map(|registry| desired(&cert.spec, registry)) {
                let holder = Holder {
                    namespace: cert.metadata.namespace.clone().unwrap_or_default(),
                    name: cert.metadata.name.clone().unwrap_or_default(),
                    uid: cert.metadata.uid.clone().unwrap_or_default(),
                };
                index.insert(&desired.domain, holder);
            }
        }
        index
    }

    /// Another object (not `uid`) holding `fqdn`.
    pub fn other_holder(&self, fqdn: &str, uid: Option<&str>) -> Option<&Holder> {
        self.by_fqdn.get(&normalize(fqdn))?.iter().find(|h| Some(h.uid.as_str()) != uid)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn zones() -> ZoneRegistry {
        "example.com:Z1,staging.example.com:Z2,other.org:Z3".parse().unwrap()
    }

    fn spec(service: &str, env: &str) -> CertSpec {
        CertSpec { service_name: service.into(), environment: env.into(), ..CertSpec::default() }
    }

    #[test]
    fn a_san_with_an_undecodable_a_label_is_refused_naming_the_label() {
        let index = FqdnIndex::default();
        let spec = CertSpec { subject_alternative_names: vec!["xn--zz.k8s.example.com".into()], ..spec("api", "prod") };
        let violations = validate(&spec, &zones(), None, &index);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].starts_with("spec.subjectAlternativeNames[0]: label \"xn--zz\""), "{violations:?}");
    }

    #[test]
    fn names_a_public_ca_refuses_are_refused_naming_the_field_and_the_label() {
        let reserved = CertSpec { domain_name: Some("zz--shop.example.com".into()), ..spec("api", "prod") };
        let symbol = CertSpec { subject_alternative_names: vec!["xn--n3h.example.com".into()], ..spec("api", "prod") };
        for (spec, start, rule) in [
            (reserved, "spec.domainName: label \"zz--shop\"", "reserved for IDNA A-labels"),
            (symbol, "spec.subjectAlternativeNames[0]: label \"xn--n3h\"", "IDNA2008 disallows"),
        ] {
            let violations = validate(&spec, &zones(), None, &FqdnIndex::default());
            assert_eq!(violations.len(), 1, "{violations:?}");
            assert!(violations[0].starts_with(start) && violations[0].contains(rule), "{violations:?}");
        }
    }

    #[test]
    fn a_san_listed_with_and_without_its_trailing_dot_is_refused_naming_both_fields() {
        let twice =
            CertSpec { subject_alternative_names: vec!["api.example.org".into(), "api.example.org.".into()], ..spec("api", "prod") };
        let violations = validate(&twice, &"example.org:Z1".parse().unwrap(), None, &FqdnIndex::default());
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].starts_with("spec.subjectAlternativeNames[1]: \"api.example.org.\" names api.example.org a second time (as spec.subjectAlternativeNames[0] does"), "{violations:?}");
    }

    #[test]
    fn a_san_that_repeats_the_primary_domain_is_admitted_and_requested_once() {
        let repeated = CertSpec {
            domain_name: Some("shop.example.com".into()),
            subject_alternative_names: vec!["shop.example.com.".into(), "www.shop.example.com".into()],
            ..spec("api", "prod")
        };
        assert_eq!(admissible(&repeated, &zones()).map(|d| d.sans), Ok(vec!["www.shop.example.com".to_owned()]));
    }

    #[test]
    fn internationalized_names_a_ca_accepts_are_admitted() {
        let idn = CertSpec {
            domain_name: Some("xn--bcher-kva.example.com".into()),
            subject_alternative_names: vec!["www.xn--mnchen-3ya.example.com".into()],
            ..spec("api", "prod")
        };
        assert!(validate(&idn, &zones(), None, &FqdnIndex::default()).is_empty());
    }

    #[test]
    fn a_generated_domain_a_ca_would_refuse_is_refused_naming_the_fields_that_make_it() {
        let violations = admissible(&spec("zz--shop", "prod"), &zones()).expect_err("zz--shop-prod is reserved");
        assert_eq!(violations.len(), 1, "{violations:?}");
        let message = &violations[0];
        assert!(message.starts_with("spec.serviceName and spec.environment make the domain zz--shop-prod.example.com"), "{message}");
        assert!(message.contains("label \"zz--shop-prod\"") && message.contains("set spec.domainName"), "{message}");
    }

    #[test]
    fn webhook_rules_report_each_violation() {
        let index = FqdnIndex::default();
        assert!(validate(&spec("api", "prod"), &zones(), None, &index).is_empty());
        let bad = CertSpec {
            domain_name: Some("not a domain".into()),
            subject_alternative_names: vec!["ok.example.com".into(), "bad_san".into()],
            ..spec("Api", "prod-")
        };
        let violations = validate(&bad, &zones(), None, &index);
        assert_eq!(violations.len(), 4, "{violations:?}");
        let too_many =
            CertSpec { subject_alternative_names: (0..101).map(|i| format!("s{i}.example.com")).collect(), ..spec("api", "prod") };
        assert!(validate(&too_many, &zones(), None, &index)[0].contains("at most 100"));
        let hundred =
            CertSpec { subject_alternative_names: (0..100).map(|i| format!("s{i}.example.com")).collect(), ..spec("api", "prod") };
        assert!(validate(&hundred, &zones(), None, &index).is_empty());
    }

    #[test]
    fn webhook_rejects_domains_outside_the_zones_naming_the_field() {
        let outside = CertSpec { domain_name: Some("a.nowhere.net".into()), ..spec("api", "prod") };
        let refused = &validate(&outside, &zones(), None, &FqdnIndex::default())[0];
        assert!(refused.starts_with("spec.domainName: a.nowhere.net"), "{refused}");
        let san_outside =
            CertSpec { subject_alternative_names: vec!["ok.example.com".into(), "a.nowhere.net.".into()], ..spec("api", "prod") };
        let refused = &validate(&san_outside, &zones(), None, &FqdnIndex::default())[0];
        assert!(refused.starts_with("spec.subjectAlternativeNames[1]: a.nowhere.net is in none of the hosted zones"), "{refused}");
        let unknown_zone =
            CertSpec { dns_zone: Some(crate::api::DnsZoneRef { id: None, name: Some("other.net".into()) }), ..spec("api", "prod") };
        let refused = &validate(&unknown_zone, &zones(), None, &FqdnIndex::default())[0];
        assert!(refused.starts_with("spec.dnsZone: "), "{refused}");
    }

    /// Issue 37: a name outside the namespace's grant of a zone is refused naming the field, as
    /// the DistributionTenant's refusals name `spec.domains`.
    #[test]
    fn a_name_outside_the_namespace_s_grant_is_refused_naming_its_field() {
        let granted = ZoneRegistry::new(vec![crate::zones::Zone {
            name: "example.com".into(),
            id: "Z1".into(),
            domains: vec!["shop.example.com".into()],
        }]);
        let primary = CertSpec { domain_name: Some("www.example.com".into()), ..spec("api", "prod") };
        let refused = &validate(&primary, &granted, None, &FqdnIndex::default())[0];
        assert_eq!(
            refused,
            "spec.domainName: www.example.com is in the zone example.com, where this namespace is granted only shop.example.com"
        );
        let san = CertSpec {
            domain_name: Some("shop.example.com".into()),
            subject_alternative_names: vec!["cdn.shop.example.com".into(), "www.example.com".into()],
            ..spec("api", "prod")
        };
        let refused = &validate(&san, &granted, None, &FqdnIndex::default())[0];
        assert!(refused.starts_with("spec.subjectAlternativeNames[1]: www.example.com is in the zone example.com"), "{refused}");
    }

    #[test]
    fn the_fqdn_index_is_built_from_specs() {
        let mut first = crate::api::Cert::new("first", spec("api", "prod"));
        first.metadata.namespace = Some("team".into());
        first.metadata.uid = Some("u1".into());
        let explicit = crate::api::Cert::new("other", CertSpec { domain_name: Some("www.other.org".into()), ..spec("x", "y") });
        let index = FqdnIndex::from_certs(&[first, explicit], |_| Some(zones()));
        assert_eq!(index.other_holder("api-prod.example.com", Some("u2")).map(|h| h.name.as_str()), Some("first"));
        assert!(index.other_holder("API-prod.example.com.", Some("u1")).is_none());
        assert!(index.other_holder("www.other.org", None).is_some());
    }

    #[test]
    fn webhook_rejects_a_duplicate_fqdn_but_not_the_object_itself() {
        let mut index = FqdnIndex::default();
        index.insert("api-prod.example.com", Holder { namespace: "team".into(), name: "first".into(), uid: "u1".into() });
        let violations = validate(&spec("api", "prod"), &zones(), Some("u2"), &index);
        assert_eq!(violations, ["a certificate for api-prod.example.com already exists: team/first"]);
        assert!(validate(&spec("api", "prod"), &zones(), Some("u1"), &index).is_empty(), "an update of the holder itself");
        assert_eq!(validate(&spec("api", "prod"), &zones(), None, &index).len(), 1, "a create has no uid yet");
    }
}
