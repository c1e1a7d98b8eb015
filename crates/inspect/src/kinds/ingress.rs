//! An Ingress that names Certs: what it asks for (its annotations), each Cert named and whether
//! it is Ready, what the load balancer's annotation holds and who wrote it, and the Cert made from
//! its hosts. The decisions are the Ingress controller's own (`blockwork_cert::ingress`), applied to
//! what was read, so `explain` tells what the controller does next.

use blockwork_aws::mask_accounts;
use blockwork_cert::Cert;
use blockwork_cert::ingress::annotations::{self, ALB_CERTIFICATE_ARN};
use blockwork_cert::ingress::plan::{self, Annotation, Offer};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;

use crate::kinds::cert::cert;
use crate::report::{ErrorView, Field, Kind, Owned, Reference, Report};

/// Whether Blockwork has anything to do with `ingress`: it asks for Certs (validly or not), or
/// holds what Blockwork wrote.
pub fn concerns_blockwork(ingress: &Ingress) -> bool {
    annotations::read(ingress.annotations()).map_or(true, |asked| asked.any()) || blockwork_cert::ingress::written(ingress).is_some()
}

/// An Ingress: `certs` are the Certs of its namespace as read.
pub fn ingress(ingress: &Ingress, certs: &[Cert], events: &[Event], now: Timestamp) -> Report {
    let mut report = Report::new(Kind::Ingress, &ingress.namespace().unwrap_or_default(), &ingress.name_any());
    report.deleting = ingress.metadata.deletion_timestamp.is_some();
    report.set_events(events);
    let written = blockwork_cert::ingress::written(ingress);
    match ingress.annotations().get(ALB_CERTIFICATE_ARN) {
        Some(value) => {
            let arns: Vec<String> = annotations::arns(value).iter().map(|arn| mask_accounts(arn)).collect();
            let by = if written.is_some() { "written by Blockwork" } else { "set by someone else: Blockwork never overwrites it" };
            report.observed.push(Field::new(ALB_CERTIFICATE_ARN, format!("{} ({by})", arns.join(", "))));
        }
        None => report.observed.push(Field::new(ALB_CERTIFICATE_ARN, "not set")),
    }
    let asked = match annotations::read(ingress.annotations()) {
        Ok(asked) => asked,
        Err(problems) => {
            let message = problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            report.state = "InvalidAnnotation".to_owned();
            report.ready = Some(false);
            report.last_error =
                Some(ErrorView { reason: "InvalidAnnotation".into(), message, class: None, since: None, attempts: None, retry_at: None });
            return report;
        }
    };
    let made = certs.iter().find(|c| blockwork_cert::ingress::made_for(c, ingress));
    if let Some(made) = made {
        let made_report = cert(made, &[], &[], now);
        report.owned.push(Owned {
            kind: "Cert".into(),
            name: made.name_any(),
            state: format!(
                "made from the TLS hosts: {} (`blockwork explain cert/{}`)",
                if made_report.ready == Some(true) { "Ready" } else { "not Ready" },
                made.name_any()
            ),
            ready: made_report.ready == Some(true),
        });
    } else if asked.from_hosts {
        report.notes.push(format!(
            "{} asks for a Cert from the TLS hosts and none is made: the CertificateNotMade event says why.",
            annotations::FROM_HOSTS
        ));
    }
    let names =
        blockwork_cert::ingress::names(&asked, made.filter(|_| asked.from_hosts).map(|c| c.metadata.name.as_deref().unwrap_or_default()));
    let named: Vec<(String, Offer)> =
        names.iter().map(|name| (name.clone(), plan::offer(certs.iter().find(|c| c.name_any() == *name)))).collect();
    for (name, offer) in &named {
        let (state, ok) = match offer {
            Offer::Ready(arn) => (format!("Ready, certificate {}", mask_accounts(arn)), true),
            Offer::NotReady(why) => (format!("not Ready: {why} (`blockwork explain cert/{name}`)"), false),
            Offer::Missing => ("does not exist in this namespace".to_owned(), false),
        };
        report.references.push(Reference { what: "Cert".into(), name: name.clone(), state, ok });
    }
    let (state, ready) = match plan::annotation(&named, written.as_deref()) {
        Annotation::Keep if named.is_empty() => ("NothingNamed", None),
        Annotation::Keep => ("Written", Some(true)),
        Annotation::Write(_) => ("Writing", Some(false)),
        Annotation::Remove => ("Removing", Some(false)),
        Annotation::Wait(waiting) => {
            report.notes.push(format!("{ALB_CERTIFICATE_ARN} is written once every Cert named is Ready: {}.", waiting.join("; ")));
            ("WaitingForCerts", Some(false))
        }
    };
    report.state = state.to_owned();
    report.ready = ready;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::fixtures::{at, validating_cert};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn web(annotations: &[(&str, &str)], by_blockwork: bool) -> Ingress {
        let mut ingress = Ingress::default();
        ingress.metadata.name = Some("web".into());
        ingress.metadata.namespace = Some("team-a".into());
        ingress.metadata.annotations = Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        if by_blockwork {
            let fields = serde_json::json!({"f:metadata": {"f:annotations": {format!("f:{ALB_CERTIFICATE_ARN}"): {}}}});
            ingress.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
                manager: Some(blockwork_cert::ingress::FIELD_MANAGER.into()),
                fields_v1: Some(FieldsV1(fields)),
                ..ManagedFieldsEntry::default()
            }]);
        }
        ingress
    }

    #[test]
    fn an_ingress_waiting_for_a_cert_names_it_and_keeps_what_was_written() {
        let arn = "arn:aws:acm:us-east-1:123456789012:certificate/abc";
        let report =
            ingress(&web(&[(annotations::CERTIFICATES, "api"), (ALB_CERTIFICATE_ARN, arn)], true), &[validating_cert(false)], &[], at(60));
        assert_eq!((report.state.as_str(), report.ready), ("WaitingForCerts", Some(false)));
        let cert = &report.references[0];
        assert_eq!((cert.what.as_str(), cert.name.as_str(), cert.ok), ("Cert", "api", false));
        let written = &report.observed[0];
        assert_eq!(written.value, "arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/abc (written by Blockwork)");
    }

    #[test]
    fn a_value_someone_else_set_is_said_to_be_theirs() {
        let report = ingress(&web(&[(ALB_CERTIFICATE_ARN, "arn:x")], false), &[], &[], at(0));
        assert!(report.observed[0].value.contains("set by someone else"), "{:?}", report.observed);
        assert!(!concerns_blockwork(&web(&[(ALB_CERTIFICATE_ARN, "arn:x")], false)), "nothing of Blockwork's");
    }

    #[test]
    fn an_invalid_annotation_is_the_ingress_s_error() {
        let bad = web(&[(annotations::FROM_HOSTS, "yes")], false);
        assert!(concerns_blockwork(&bad));
        let report = ingress(&bad, &[], &[], at(0));
        assert_eq!(report.last_error.map(|e| e.reason), Some("InvalidAnnotation".to_owned()));
    }
}
