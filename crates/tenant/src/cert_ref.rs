//! A tenant's certificate from a Cert of its namespace (`spec.customizations.certificate.certRef`,
//! ADR 0022). The Cert is a dependency of the runtime's (seed 003): the tenant waits while it is
//! not Ready, is woken by a watch when it changes, and takes its certificate's ARN into the spec
//! the calls act on ([`resolve`]), so that a Cert that replaces its certificate (a name added) is
//! followed with one update. What CloudFront would refuse of a Cert is refused first, naming the
//! field, by the webhook (with what is known of the Cert then) and again here before any write:
//! a certificate outside us-east-1, names that do not cover every domain. Another namespace's Cert
//! cannot be named: the reference is a name only.

use blockwork_cert::Cert;
use blockwork_runtime::{DependencyRef, ExternalError};
use kube::Resource as _;
use kube::api::DynamicObject;

use crate::api::DistributionTenantSpec;
use crate::validate::{CERTIFICATE_REGION, SpecError, region_of, uncovered_domains};

/// The field that names the Cert.
pub const FIELD: &str = "spec.customizations.certificate.certRef";

/// The Cert the spec names, as the runtime waits for it.
pub fn dependency(spec: &DistributionTenantSpec) -> Option<DependencyRef> {
    spec.cert_ref().map(|name| DependencyRef {
        api_version: Cert::api_version(&()).into_owned(),
        kind: Cert::kind(&()).into_owned(),
        name: name.to_owned(),
        namespace: None,
    })
}

/// What a Cert offers a tenant, as far as it is known: its certificate's ARN once issued, and the
/// names it is for (its primary domain is known once the Cert resolved it, or when its spec gives
/// it; its alternative names are its spec's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offered {
    pub name: String,
    pub arn: Option<String>,
    pub domain: Option<String>,
    pub alternative_names: Vec<String>,
}

impl Offered {
    pub fn of(cert: &Cert) -> Self {
        let observation = cert.status.as_ref().map(|s| &s.observation);
        Self {
            name: cert.metadata.name.clone().unwrap_or_default(),
            arn: observation.and_then(|o| o.certificate_arn.clone()),
            domain: observation.and_then(|o| o.domain_name.clone()).or_else(|| cert.spec.domain_name.clone()),
            alternative_names: cert.spec.subject_alternative_names.clone(),
        }
    }
}

/// CloudFront's rules for the Cert's certificate, as far as `offered` tells: in us-east-1 (its
/// ARN's region, else `region`, where the installation requests certificates, when known), and
/// names covering every domain of the tenant (once its primary domain is known: before, a domain
/// may still be covered by it).
pub fn check(spec: &DistributionTenantSpec, offered: &Offered, region: Option<&str>) -> Result<(), SpecError> {
    let region = offered.arn.as_deref().and_then(region_of).or(region);
    if let Some(region) = region.filter(|r| *r != CERTIFICATE_REGION) {
        return Err(SpecError::CertRegion { cert: offered.name.clone(), region: region.to_owned() });
    }
    let Some(domain) = &offered.domain else { return Ok(()) };
    let names: Vec<String> = std::iter::once(domain.clone()).chain(offered.alternative_names.iter().cloned()).collect();
    let uncovered = uncovered_domains(spec.domains.iter().map(|d| d.domain.as_str()), &names);
    if uncovered.is_empty() { Ok(()) } else { Err(SpecError::CertNotCovering { cert: offered.name.clone(), domains: uncovered }) }
}

/// What a tenant reads of a Cert ([`Offered`]): its certificate's ARN and its names.
pub fn view(cert: &DynamicObject) -> serde_json::Value {
    let data = &cert.data;
    serde_json::json!([
        data["status"]["certificateArn"],
        data["status"]["domainName"],
        data["spec"]["domainName"],
        data["spec"]["subjectAlternativeNames"],
    ])
}

/// The spec with the Cert's certificate ARN in `customizations.certificate.arn`: what the
/// tenant's calls act on. `certs` are the dependencies the runtime resolved, all Ready.
pub fn resolve(spec: &DistributionTenantSpec, certs: &[DynamicObject]) -> Result<DistributionTenantSpec, ExternalError> {
    let Some(name) = spec.cert_ref() else { return Ok(spec.clone()) };
    let found = certs.iter().find(|c| c.metadata.name.as_deref() == Some(name));
    let cert: Cert = found
        .and_then(|c| serde_json::to_value(c).ok())
        .and_then(|value| serde_json::from_value(value).ok())
        .ok_or_else(|| ExternalError::retryable("CertUnreadable", format!("{FIELD}: Cert {name} could not be read")))?;
    let offered = Offered::of(&cert);
    check(spec, &offered, None).map_err(|refused| ExternalError::terminal(refused.reason(), refused.to_string()))?;
    let Some(arn) = offered.arn else {
        // Ready without an ARN is no Cert this controller knows: wait for it as for any change.
        return Err(ExternalError::retryable(
            "CertWithoutCertificate",
            format!("{FIELD}: Cert {name} is Ready but has no certificate ARN"),
        ));
    };
    let mut resolved = spec.clone();
    if let Some(certificate) = resolved.customizations.as_mut().and_then(|c| c.certificate.as_mut()) {
        certificate.arn = Some(arn);
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CertRef, CertificateRef, Customizations, DomainName};
    use blockwork_cert::{CertObservation, CertSpec, CertStatus};

    const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0000-4000-8000-000000000001";

    fn tenant(domains: &[&str]) -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: "E1".into(),
            domains: domains.iter().map(|d| DomainName { domain: (*d).to_owned() }).collect(),
            customizations: Some(Customizations {
                certificate: Some(CertificateRef { arn: None, cert_ref: Some(CertRef { name: "shop".into() }) }),
                ..Customizations::default()
            }),
            ..DistributionTenantSpec::default()
        }
    }

    fn cert(arn: Option<&str>, domain: &str, sans: &[&str]) -> Cert {
        let spec = CertSpec {
            service_name: "shop".into(),
            environment: "prod".into(),
            subject_alternative_names: sans.iter().map(|s| (*s).to_owned()).collect(),
            ..CertSpec::default()
        };
        let mut cert = Cert::new("shop", spec);
        let observation =
            CertObservation { certificate_arn: arn.map(str::to_owned), domain_name: Some(domain.to_owned()), ..CertObservation::default() };
        cert.status = Some(CertStatus { observation, ..CertStatus::default() });
        cert
    }

    fn dynamic(cert: &Cert) -> DynamicObject {
        serde_json::from_value(serde_json::to_value(cert).expect("serializes")).expect("an object")
    }

    #[test]
    fn the_cert_s_certificate_arn_is_written_into_the_spec_the_calls_act_on() {
        let spec = tenant(&["www.shop.example.com"]);
        let resolved = resolve(&spec, &[dynamic(&cert(Some(ARN), "*.shop.example.com", &[]))]).expect("resolved");
        assert_eq!(resolved.certificate_arn(), Some(ARN));
        assert_eq!(resolved.cert_ref(), Some("shop"), "the reference stays: the recorded spec says where the ARN came from");
        let unnamed = DistributionTenantSpec::default();
        assert_eq!(resolve(&unnamed, &[]).ok(), Some(unnamed), "no Cert named: the spec as it is");
    }

    #[test]
    fn a_tenant_reads_of_its_cert_only_what_it_offers() {
        let issued = cert(Some(ARN), "*.shop.example.com", &[]);
        let mut recorded = issued.clone();
        if let Some(status) = recorded.status.as_mut() {
            status.observation.validation_records = vec![blockwork_cert::ValidationRecordStatus::default()];
            status.reconcile_state_since = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        }
        assert_eq!(view(&dynamic(&issued)), view(&dynamic(&recorded)), "its own work is not the tenant's concern");
        let replaced = cert(Some(&ARN.replace("0001", "0002")), "*.shop.example.com", &[]);
        assert_ne!(view(&dynamic(&issued)), view(&dynamic(&replaced)));
        assert_ne!(view(&dynamic(&issued)), view(&dynamic(&cert(Some(ARN), "*.shop.example.com", &["shop.example.com"]))));
    }

    #[test]
    fn a_cert_outside_us_east_1_is_refused_naming_the_field() {
        let elsewhere = ARN.replace("us-east-1", "eu-west-1");
        let refused = resolve(&tenant(&["www.shop.example.com"]), &[dynamic(&cert(Some(&elsewhere), "*.shop.example.com", &[]))])
            .expect_err("refused");
        assert_eq!(refused.reason, "InvalidSpec");
        assert_eq!(refused.class, blockwork_runtime::ErrorClass::Terminal);
        assert!(
            refused.message.starts_with("spec.customizations.certificate.certRef: Cert shop's certificate is in eu-west-1"),
            "{}",
            refused.message
        );
        let unissued = Offered { name: "shop".into(), ..Offered::default() };
        assert!(check(&tenant(&["a.example.com"]), &unissued, Some("eu-west-1")).is_err(), "the installation's region, before issuance");
        assert!(check(&tenant(&["a.example.com"]), &unissued, None).is_ok(), "nothing known yet: nothing refused");
    }

    #[test]
    fn names_cover_domains_as_cloudfront_matches_wildcards() {
        let wildcard = Offered { name: "shop".into(), domain: Some("*.a.com".into()), ..Offered::default() };
        assert!(check(&tenant(&["x.a.com"]), &wildcard, None).is_ok());
        for uncovered in ["a.com", "x.y.a.com"] {
            let refused = check(&tenant(&[uncovered]), &wildcard, None).expect_err(uncovered);
            assert_eq!(refused.reason(), "CertificateSANMismatch");
            assert_eq!(
                refused.to_string(),
                format!("spec.customizations.certificate.certRef: Cert shop's names do not cover the domains {uncovered}")
            );
        }
        let with_sans = Offered { alternative_names: vec!["a.com".into()], ..wildcard };
        assert!(check(&tenant(&["a.com", "x.a.com"]), &with_sans, None).is_ok(), "the alternative names count too");
        let unresolved = Offered { name: "shop".into(), alternative_names: vec!["b.com".into()], ..Offered::default() };
        assert!(check(&tenant(&["a.com"]), &unresolved, None).is_ok(), "the primary domain may still cover it");
    }
}
