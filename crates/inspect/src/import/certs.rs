//! Which ACM certificates become Certs, and as what: a pure decision over what ACM said of each
//! (its description and tags), so that every rule is a unit test.
//!
//! A certificate Blockwork can take over is one it could have requested itself: issued by ACM
//! (public, validated through DNS) or by an ACM Private CA, issued or still pending. An imported
//! certificate cannot be renewed by anyone but whoever imported it; an expired, revoked, failed
//! or timed-out one has nothing left to manage; an e-mail validated one renews through e-mail,
//! which Blockwork never answers; a public exportable one needs `spec.export`, whose Secret only
//! its user can name. Each of those is skipped with the reason, never printed half right.

use blockwork_aws::mask_accounts;
use blockwork_cert::api::AdoptSpec;
use blockwork_cert::decisions::{TAG_MANAGED_BY, TAG_OWNER, tag};
use blockwork_cert::{Cert, CertSpec};
use serde_json::{Value, json};

use super::names::{Names, is_label, name_from_domain};

/// What ACM says of one certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundCertificate {
    pub arn: String,
    pub domain: String,
    /// As ACM lists them: the primary domain included.
    pub sans: Vec<String>,
    /// ACM's status (`ISSUED`, `PENDING_VALIDATION`, `EXPIRED`…).
    pub status: String,
    /// ACM's type: `AMAZON_ISSUED`, `PRIVATE` or `IMPORTED`.
    pub kind: String,
    /// Whether any of its names is validated by e-mail.
    pub email_validated: bool,
    /// Requested with `Options.Export` (a public certificate).
    pub exportable: bool,
    /// The ACM Private CA of a private certificate.
    pub authority: Option<String>,
    pub tags: Vec<(String, String)>,
}

/// Where a Cert's required `serviceName` and `environment` come from: a tag of the certificate
/// when it has it, else the value given for all; never made up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    pub service_name: Option<String>,
    pub service_name_tag: Option<String>,
    pub environment: Option<String>,
    pub environment_tag: Option<String>,
}

/// The value of one label for `certificate`, or why there is none.
fn label(certificate: &FoundCertificate, from_tag: Option<&str>, given: Option<&str>, field: &str, flag: &str) -> Result<String, String> {
    let tagged = from_tag.and_then(|key| tag(&certificate.tags, key).map(|value| (value, format!("its tag {key}"))));
    let Some((value, source)) = tagged.or_else(|| given.map(|value| (value, format!("--{flag}")))) else {
        return Err(format!("no {field}: tag the certificate and pass --{flag}-tag KEY, or pass --{flag} VALUE"));
    };
    match is_label(value) {
        true => Ok(value.to_owned()),
        false => Err(format!("{field} {value:?} (from {source}) is not an RFC 1123 label (lowercase letters, digits, '-', at most 63)")),
    }
}

/// Why a certificate cannot be adopted, if it cannot.
fn unmanageable(certificate: &FoundCertificate) -> Option<String> {
    match certificate.kind.as_str() {
        "IMPORTED" => return Some("imported into ACM: only whoever imported it can renew it; keep managing it there".to_owned()),
        "AMAZON_ISSUED" | "PRIVATE" => {}
        other => return Some(format!("of type {other}, which Blockwork does not request")),
    }
    if !matches!(certificate.status.as_str(), "ISSUED" | "PENDING_VALIDATION") {
        return Some(format!("{}: nothing left to manage (delete it in ACM when nothing uses it)", certificate.status));
    }
    if certificate.authority.is_none() && certificate.email_validated {
        return Some("validated by e-mail: Blockwork validates through DNS; request a DNS-validated one with a Cert instead".to_owned());
    }
    if certificate.authority.is_none() && certificate.exportable {
        return Some(
            "exportable: a Cert adopting it needs spec.export, whose Secret only you can name; write its manifest by hand".to_owned(),
        );
    }
    None
}

/// The Cert for `certificate` (named `name`), with adoption and the keep-on-removal knob set.
fn manifest(certificate: &FoundCertificate, name: &str, namespace: &str, labels: (String, String)) -> Result<Value, String> {
    let domain = blockwork_aws::dns_name::normalize(&certificate.domain);
    let mut sans: Vec<String> = certificate.sans.iter().map(|s| blockwork_aws::dns_name::normalize(s)).filter(|s| *s != domain).collect();
    sans.sort();
    sans.dedup();
    let (service_name, environment) = labels;
    let spec = CertSpec {
        service_name,
        environment,
        domain_name: Some(domain),
        subject_alternative_names: sans,
        delete_on_removal: false,
        certificate_authority_arn: certificate.authority.clone(),
        adopt: Some(AdoptSpec { certificate_arn: certificate.arn.clone() }),
        ..CertSpec::default()
    };
    let mut cert = Cert::new(name, spec);
    cert.metadata.namespace = Some(namespace.to_owned());
    let mut value = serde_json::to_value(&cert).map_err(|e| format!("cannot be written as YAML: {e}"))?;
    // `deleteOnRemoval: false` is the default; written out so that the manifest says it keeps
    // the certificate (the contract of issue 31).
    value["spec"]["deleteOnRemoval"] = json!(false);
    Ok(value)
}

/// The name a certificate's Cert gets: the object Blockwork made it for (its
/// `blockwork.dev/owner` tag, `<namespace>/<name>`) when Blockwork made it, else from its domain.
fn preferred_name(certificate: &FoundCertificate) -> String {
    let made_by_blockwork = tag(&certificate.tags, TAG_MANAGED_BY) == Some("blockwork-cert");
    let owner = tag(&certificate.tags, TAG_OWNER).and_then(|owner| owner.split_once('/')).map(|(_, name)| name);
    match owner {
        Some(name) if made_by_blockwork && super::names::is_object_name(name) => name.to_owned(),
        _ => name_from_domain(&certificate.domain),
    }
}

/// What `blockwork import` makes of the certificates: Certs, and a line for each skipped.
#[derive(Debug, Default)]
pub struct Planned {
    pub manifests: Vec<Value>,
    pub notes: Vec<String>,
}

/// Certs for the certificates that can be adopted, in the order of their names; a note (on
/// stderr, accounts masked) for each that cannot.
pub fn plan(mut certificates: Vec<FoundCertificate>, namespace: &str, labels: &Labels, names: &mut Names) -> Planned {
    certificates.sort_by(|a, b| (preferred_name(a), &a.arn).cmp(&(preferred_name(b), &b.arn)));
    let mut planned = Planned::default();
    for certificate in &certificates {
        let about = format!("certificate {} ({})", certificate.domain, mask_accounts(&certificate.arn));
        if let Some(reason) = unmanageable(certificate) {
            planned.notes.push(format!("skipped {about}: {reason}"));
            continue;
        }
        let service_name =
            label(certificate, labels.service_name_tag.as_deref(), labels.service_name.as_deref(), "serviceName", "service-name");
        let environment =
            label(certificate, labels.environment_tag.as_deref(), labels.environment.as_deref(), "environment", "environment");
        let (service_name, environment) = match (service_name, environment) {
            (Ok(service_name), Ok(environment)) => (service_name, environment),
            (Err(reason), _) | (_, Err(reason)) => {
                planned.notes.push(format!("skipped {about}: {reason}"));
                continue;
            }
        };
        let preferred = preferred_name(certificate);
        let name = names.claim("Cert", &preferred);
        if name != preferred {
            planned.notes.push(format!(
                "{about} is printed as Cert {name}: another certificate is {preferred} (two certificates for the same names: keep one)"
            ));
        }
        match manifest(certificate, &name, namespace, (service_name, environment)) {
            Ok(value) => planned.manifests.push(value),
            Err(reason) => planned.notes.push(format!("skipped {about}: {reason}")),
        }
    }
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/0f3b1c2d-aaaa-bbbb-cccc-0123456789ab";

    fn issued(domain: &str) -> FoundCertificate {
        FoundCertificate {
            arn: ARN.to_owned(),
            domain: domain.to_owned(),
            sans: vec![domain.to_owned()],
            status: "ISSUED".to_owned(),
            kind: "AMAZON_ISSUED".to_owned(),
            ..FoundCertificate::default()
        }
    }

    fn labels() -> Labels {
        Labels { service_name: Some("shop".into()), environment: Some("prod".into()), ..Labels::default() }
    }

    fn plan_one(certificate: FoundCertificate, labels: &Labels) -> Planned {
        plan(vec![certificate], "team-a", labels, &mut Names::default())
    }

    #[test]
    fn an_issued_certificate_becomes_a_cert_that_adopts_it_and_keeps_it_on_removal() {
        let mut certificate = issued("shop.example.com");
        certificate.sans.push("www.shop.example.com".into());
        let planned = plan_one(certificate, &labels());
        assert!(planned.notes.is_empty(), "{:?}", planned.notes);
        let cert = &planned.manifests[0];
        assert_eq!(cert["apiVersion"], "acm.blockwork.dev/v1");
        assert_eq!(cert["kind"], "Cert");
        assert_eq!(cert["metadata"]["namespace"], "team-a");
        assert_eq!(cert["metadata"]["name"], "shop-example-com");
        assert_eq!(cert["spec"]["domainName"], "shop.example.com");
        assert_eq!(cert["spec"]["subjectAlternativeNames"], json!(["www.shop.example.com"]));
        assert_eq!(cert["spec"]["deleteOnRemoval"], json!(false));
        assert_eq!(cert["spec"]["adopt"]["certificateArn"], ARN);
        assert_eq!((&cert["spec"]["serviceName"], &cert["spec"]["environment"]), (&json!("shop"), &json!("prod")));
    }

    #[test]
    fn a_certificate_blockwork_made_keeps_the_name_of_the_object_it_was_made_for() {
        let mut certificate = issued("api.example.com");
        certificate.tags = vec![(TAG_MANAGED_BY.into(), "blockwork-cert".into()), (TAG_OWNER.into(), "old-ns/api-prod".into())];
        assert_eq!(plan_one(certificate, &labels()).manifests[0]["metadata"]["name"], "api-prod");
    }

    #[test]
    fn an_owner_tag_without_blockworks_managed_by_tag_is_not_trusted_for_the_name() {
        let mut certificate = issued("api.example.com");
        certificate.tags = vec![(TAG_OWNER.into(), "x/chosen".into())];
        assert_eq!(plan_one(certificate, &labels()).manifests[0]["metadata"]["name"], "api-example-com");
    }

    #[test]
    fn labels_come_from_the_certificates_tags_before_the_values_given_for_all() {
        let mut certificate = issued("api.example.com");
        certificate.tags = vec![("service".into(), "api".into())];
        let labels = Labels { service_name_tag: Some("service".into()), environment_tag: Some("env".into()), ..labels() };
        let cert = &plan_one(certificate, &labels).manifests[0];
        assert_eq!((&cert["spec"]["serviceName"], &cert["spec"]["environment"]), (&json!("api"), &json!("prod")));
    }

    #[test]
    fn a_certificate_without_a_service_name_is_skipped_naming_the_flags_never_invented() {
        let planned = plan_one(issued("api.example.com"), &Labels { environment: Some("prod".into()), ..Labels::default() });
        assert!(planned.manifests.is_empty());
        assert!(planned.notes[0].contains("no serviceName") && planned.notes[0].contains("--service-name"), "{:?}", planned.notes);
    }

    #[test]
    fn a_tag_value_that_is_no_label_is_skipped_naming_the_tag() {
        let mut certificate = issued("api.example.com");
        certificate.tags = vec![("env".into(), "Prod EU".into())];
        let planned = plan_one(certificate, &Labels { environment_tag: Some("env".into()), ..labels() });
        assert!(planned.manifests.is_empty());
        assert!(planned.notes[0].contains("its tag env"), "{:?}", planned.notes);
    }

    #[test]
    fn imported_expired_email_validated_and_exportable_certificates_are_skipped_with_the_reason() {
        let imported = FoundCertificate { kind: "IMPORTED".into(), ..issued("a.example.com") };
        let expired = FoundCertificate { status: "EXPIRED".into(), ..issued("b.example.com") };
        let email = FoundCertificate { email_validated: true, ..issued("c.example.com") };
        let exportable = FoundCertificate { exportable: true, ..issued("d.example.com") };
        let planned = plan(vec![imported, expired, email, exportable], "team-a", &labels(), &mut Names::default());
        assert!(planned.manifests.is_empty(), "{:?}", planned.manifests);
        let notes = planned.notes.join("\n");
        for reason in ["imported into ACM", "EXPIRED", "validated by e-mail", "spec.export"] {
            assert!(notes.contains(reason), "{reason}: {notes}");
        }
    }

    #[test]
    fn notes_mask_the_account_of_the_arn() {
        let planned = plan_one(FoundCertificate { kind: "IMPORTED".into(), ..issued("a.example.com") }, &labels());
        assert!(!planned.notes[0].contains("123456789012"), "{:?}", planned.notes);
    }

    #[test]
    fn a_private_certificate_names_its_certificate_authority() {
        let authority = "arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/11111111-2222-3333-4444-555555555555";
        let private = FoundCertificate {
            kind: "PRIVATE".into(),
            exportable: true,
            authority: Some(authority.into()),
            ..issued("a.internal.example.com")
        };
        let planned = plan_one(private, &labels());
        assert_eq!(planned.manifests[0]["spec"]["certificateAuthorityArn"], authority);
    }

    #[test]
    fn two_certificates_for_the_same_domain_get_two_names_and_a_note() {
        let second = FoundCertificate { arn: format!("{ARN}2"), ..issued("shop.example.com") };
        let planned = plan(vec![issued("shop.example.com"), second], "team-a", &labels(), &mut Names::default());
        let names: Vec<&Value> = planned.manifests.iter().map(|m| &m["metadata"]["name"]).collect();
        assert_eq!(names, [&json!("shop-example-com"), &json!("shop-example-com-2")]);
        assert!(planned.notes[0].contains("keep one"), "{:?}", planned.notes);
    }
}
