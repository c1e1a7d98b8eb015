//! A DistributionTenant's report: the runtime's status, the tenant in CloudFront, its DNS and
//! managed certificate, and the Cert its certificate comes from.

use blockwork_aws::mask_accounts;
use blockwork_cert::Cert;
use blockwork_tenant::DistributionTenant;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;

use crate::kinds::cert::cert_reference;
use crate::kinds::deletion::left_to_delete;
use crate::report::{self, ConditionView, Field, Kind, Reference, Report};
use crate::text::ago_or_in;

/// A DistributionTenant: the runtime's status, the tenant in CloudFront, its DNS and managed
/// certificate. `certs` are the Certs of its namespace as read: the one whose ACM certificate the
/// tenant names, if any, is a dependency, shown with its state.
pub fn tenant(tenant: &DistributionTenant, events: &[Event], certs: &[Cert], now: Timestamp) -> Report {
    let mut report = Report::new(Kind::DistributionTenant, &tenant.namespace().unwrap_or_default(), &tenant.name_any());
    report.deleting = tenant.metadata.deletion_timestamp.is_some();
    report::runtime_status(&mut report, tenant.status.as_ref(), tenant.metadata.generation);
    report.set_events(events);
    let spec = &tenant.spec;
    let spec_drift = spec.drift_policy.map(|p| ("spec.driftPolicy", blockwork_runtime::DriftPolicy::from(p).to_string()));
    report.policies = report::runtime_policies(
        tenant.annotations(),
        spec_drift,
        ("enforce", "the controller's --drift-policy (enforce unless set)"),
        "Delete",
    );
    let conditions = report.conditions.clone();
    let condition = |type_: &str| conditions.iter().find(|c| c.type_ == type_).cloned();
    report.references.push(Reference {
        what: "distribution".into(),
        name: spec.distribution_id.clone(),
        state: match report.last_error.as_ref().map(|e| e.reason.as_str()) {
            Some("DistributionNotFound") => "not found".into(),
            _ => "named in spec.distributionId".into(),
        },
        ok: report.last_error.as_ref().is_none_or(|e| e.reason != "DistributionNotFound"),
    });
    if let Some(group) = &spec.connection_group_id {
        let missing = report.last_error.as_ref().is_some_and(|e| e.reason == "ConnectionGroupNotFound");
        report.references.push(Reference {
            what: "connection group".into(),
            name: group.clone(),
            state: if missing { "not found".into() } else { "named in spec.connectionGroupId".into() },
            ok: !missing,
        });
    }
    if let Some(name) = spec.cert_ref() {
        let named = certs.iter().find(|c| c.name_any() == name);
        report.references.push(match named {
            Some(cert) => cert_reference(cert, now),
            None => Reference {
                what: "Cert".into(),
                name: name.to_owned(),
                state: "does not exist in this namespace: the tenant waits for it".into(),
                ok: false,
            },
        });
        if named.is_some_and(|cert| cert.metadata.deletion_timestamp.is_some()) {
            report.notes.push(format!(
                "Cert {name} is being deleted: it and its certificate are held while this tenant uses them. Two ways out: remove spec.customizations.certificate.certRef (or name another Cert), or delete this tenant."
            ));
        }
    } else if let Some(arn) = spec.certificate_arn() {
        let certificate_ready = condition(blockwork_tenant::api::CERTIFICATE_READY);
        report.references.push(Reference {
            what: "certificate".into(),
            name: mask_accounts(arn),
            state: certificate_ready.as_ref().map(|c| c.reason.clone()).unwrap_or_else(|| "named in the spec".into()),
            ok: certificate_ready.as_ref().is_none_or(ConditionView::is_true),
        });
        let issuing = certs.iter().find(|c| c.status.as_ref().and_then(|s| s.observation.certificate_arn.as_deref()) == Some(arn));
        if let Some(issuing) = issuing {
            report.references.push(cert_reference(issuing, now));
        }
    }
    if let Some(dns) = &spec.dns {
        let dns_ready = condition(blockwork_tenant::api::DNS_READY);
        report.references.push(Reference {
            what: "hosted zone".into(),
            name: dns.hosted_zone_id.clone(),
            state: dns_ready.as_ref().map(|c| format!("{} ({})", c.reason, c.message)).unwrap_or_else(|| "not written yet".into()),
            ok: dns_ready.as_ref().is_some_and(ConditionView::is_true),
        });
    }
    report.observed.push(Field::new("domains", spec.domains.iter().map(|d| d.domain.as_str()).collect::<Vec<_>>().join(", ")));
    let Some(status) = tenant.status.as_ref() else { return report };
    let observation = &status.observation;
    if let Some(id) = &observation.id {
        report.observed.push(Field::new("tenant id", id));
    }
    if let Some(arn) = &observation.arn {
        report.observed.push(Field::new("ARN", mask_accounts(arn)));
    }
    if let Some(aws_status) = &observation.distribution_tenant_status {
        report.observed.push(Field::new("CloudFront status", aws_status));
    }
    if let Some(target) = &observation.dns_target {
        report.observed.push(Field::new("DNS target", target));
    }
    if !observation.dns_records.is_empty() {
        report.observed.push(Field::new("DNS records (CNAME, made by Blockwork)", observation.dns_records.join(", ")));
    }
    if let Some(change) = &observation.dns_change_id {
        report.observed.push(Field::new("last Route53 change", change));
    }
    if let Some(certificate_status) = &observation.managed_certificate_status {
        report.observed.push(Field::new("managed certificate", certificate_status));
    }
    if let Some(arn) = &observation.certificate_arn {
        report.observed.push(Field::new("managed certificate ARN", mask_accounts(arn)));
    }
    if let Some(arn) = &observation.certificate_in_use {
        report.observed.push(Field::new("certificate served", mask_accounts(arn)));
    }
    if let Some(dns) =
        condition(blockwork_tenant::api::DNS_READY).filter(|c| c.reason == "DNSPropagating" || c.reason == "DNSRecordCreating")
    {
        report.notes.push(format!(
            "DNS change {} submitted to zone {} {} and not INSYNC yet; Route53 usually takes under a minute.",
            observation.dns_change_id.as_deref().unwrap_or("(unknown)"),
            spec.dns.as_ref().map(|d| d.hosted_zone_id.as_str()).unwrap_or("?"),
            ago_or_in(dns.since, now)
        ));
    }
    if observation.distribution_tenant_status.as_deref() == Some("InProgress") {
        report.notes.push("CloudFront is deploying the tenant's last change (InProgress, usually a few minutes).".to_owned());
    }
    if report.deleting {
        report.notes.push(deletion_note(tenant));
    }
    report
}

/// What the deletion of a tenant still deletes, in the order it goes.
fn deletion_note(tenant: &DistributionTenant) -> String {
    let observation = tenant.status.as_ref().map(|s| &s.observation);
    let mut left = Vec::new();
    if let Some(id) = observation.and_then(|o| o.id.as_deref()) {
        left.push(format!("the tenant {id} (disabled, then deleted once Deployed)"));
    }
    if let (Some(dns), Some(records)) = (&tenant.spec.dns, observation.map(|o| &o.dns_records).filter(|r| !r.is_empty())) {
        left.push(format!("the CNAME records of {} in hosted zone {}", records.join(", "), dns.hosted_zone_id));
    }
    left_to_delete(&left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::fixtures::{at, validating_cert};

    #[test]
    fn a_tenant_being_deleted_says_what_is_left_to_delete_in_order() {
        let dns = serde_json::json!({"provider": "route53", "hostedZoneId": "Z0TYPO"});
        let mut shop = DistributionTenant::new(
            "shop",
            blockwork_tenant::api::DistributionTenantSpec {
                distribution_id: "E123".into(),
                dns: Some(serde_json::from_value(dns).expect("a DNS config")),
                ..Default::default()
            },
        );
        shop.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)));
        let mut status = blockwork_tenant::DistributionTenantStatus::default();
        status.observation.dns_records = vec!["www.example.com".into()];
        shop.status = Some(status);
        let note = tenant(&shop, &[], &[], at(60)).notes.pop().expect("a note");
        assert!(
            note.starts_with("Being deleted: left to delete, in this order: the CNAME records of www.example.com in hosted zone Z0TYPO."),
            "{note}"
        );
        assert!(note.contains("a hosted zone that does not exist) counts as deleted") && note.contains("DeletionBlocked"), "{note}");
    }

    fn naming(cert: &str) -> DistributionTenant {
        DistributionTenant::new(
            "shop",
            blockwork_tenant::api::DistributionTenantSpec {
                distribution_id: "E123".into(),
                customizations: Some(blockwork_tenant::api::Customizations {
                    certificate: Some(blockwork_tenant::api::CertificateRef {
                        arn: None,
                        cert_ref: Some(blockwork_tenant::api::CertRef { name: cert.into() }),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_tenant_depends_on_the_cert_it_names_and_says_when_it_does_not_exist() {
        let report = tenant(&naming("api"), &[], &[validating_cert(false)], at(43 * 60));
        let cert = report.references.iter().find(|r| r.what == "Cert").expect("the named Cert");
        assert_eq!((cert.name.as_str(), cert.ok), ("api", false));
        assert!(cert.state.starts_with("Verifying for 43m, not Ready"), "{}", cert.state);
        let missing = tenant(&naming("web"), &[], &[validating_cert(false)], at(0));
        let cert = missing.references.iter().find(|r| r.what == "Cert").expect("the named Cert");
        assert_eq!(cert.state, "does not exist in this namespace: the tenant waits for it");
    }

    #[test]
    fn a_tenant_whose_cert_is_being_deleted_is_told_the_two_ways_out() {
        let mut deleting = validating_cert(false);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)));
        let report = tenant(&naming("api"), &[], &[deleting], at(60));
        let note = report.notes.iter().find(|n| n.starts_with("Cert api is being deleted")).expect("a note");
        assert!(note.contains("remove spec.customizations.certificate.certRef") && note.contains("delete this tenant"), "{note}");
    }

    #[test]
    fn a_tenant_names_the_cert_its_certificate_comes_from_and_that_cert_s_wait() {
        const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/abc";
        let mut issuing = validating_cert(false);
        if let Some(status) = issuing.status.as_mut() {
            status.observation.certificate_arn = Some(ARN.into());
        }
        let mut other = validating_cert(false);
        other.metadata.name = Some("web".into());
        let shop = DistributionTenant::new(
            "shop",
            blockwork_tenant::api::DistributionTenantSpec {
                distribution_id: "E123".into(),
                customizations: Some(blockwork_tenant::api::Customizations {
                    certificate: Some(blockwork_tenant::api::CertificateRef { arn: Some(ARN.into()), cert_ref: None }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let report = tenant(&shop, &[], &[other, issuing], at(43 * 60));
        let cert = report.references.iter().find(|r| r.what == "Cert").expect("the Cert is a dependency");
        assert_eq!(cert.name, "api");
        assert_eq!(cert.state, "Verifying for 43m, not Ready (`blockwork explain cert/api`)");
        assert!(!cert.ok);
        let unrelated = tenant(&shop, &[], &[validating_cert(false)], at(0));
        assert!(unrelated.references.iter().all(|r| r.what != "Cert"), "a Cert of another certificate is no dependency");
    }
}
