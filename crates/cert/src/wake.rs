//! Wakes the Certs whose AWS side changed outside their reconciles, so that a Ready Cert needs
//! no AWS call of its own to notice a change within a sweep:
//!
//! - the certificate listing's sweeps tell which certificates changed (issued, revoked,
//!   expired, renewing…): their Certs are reconciled at once;
//! - the zones' background batches tell which validation records were written: the Certs
//!   waiting for them go on to `Validated`.
//!
//! Which Cert holds what comes from the controller's own cache of Certs (their statuses), so
//! nothing is kept beside them.

use std::collections::HashSet;
use std::sync::Arc;

use blockwork_aws::acm::Acm;
use blockwork_aws::dns_name;
use blockwork_aws::route53::Records;
use blockwork_runtime::Context;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast::error::RecvError;
use tracing::debug;

use crate::api::Cert;
use crate::external::CertManager;

/// Follows the listing's and the records' changes until they end (the process stops).
pub async fn follow(context: Arc<Context<CertManager>>, acm: Arc<Acm>, records: Arc<Records>) {
    let mut certificates = acm.changes();
    let mut written = records.completions();
    loop {
        tokio::select! {
            changed = certificates.recv() => match changed {
                Ok(arns) => {
                    let arns: HashSet<String> = arns.into_iter().collect();
                    wake(&context, |cert| holds_certificate(cert, &arns));
                }
                Err(RecvError::Lagged(missed)) => debug!(missed, "certificate changes were missed; the Certs' requeues cover them"),
                Err(RecvError::Closed) => return,
            },
            done = written.recv() => match done {
                Ok(records) => {
                    let records: HashSet<(String, String)> = records.into_iter().collect();
                    wake(&context, |cert| waits_for_records(cert, &records));
                }
                Err(RecvError::Lagged(missed)) => debug!(missed, "record writes were missed; the Certs' requeues cover them"),
                Err(RecvError::Closed) => return,
            },
        }
    }
}

fn wake(context: &Context<CertManager>, concerned: impl Fn(&Cert) -> bool) {
    for cert in context.cached() {
        if concerned(&cert) {
            context.wake(&ObjectRef::from_obj(cert.as_ref()));
        }
    }
}

/// Whether the Cert holds one of `arns` (its certificate, or one it replaced).
fn holds_certificate(cert: &Cert, arns: &HashSet<String>) -> bool {
    cert.status.as_ref().is_some_and(|status| {
        let observation = &status.observation;
        observation.certificate_arn.iter().chain(&observation.previous_certificate_arns).any(|arn| arns.contains(arn))
    })
}

/// Whether the Cert waits for one of `records` (zone id, normalized name) to be written.
fn waits_for_records(cert: &Cert, records: &HashSet<(String, String)>) -> bool {
    cert.status.as_ref().is_some_and(|status| {
        status
            .observation
            .validation_records
            .iter()
            .any(|r| r.pending && records.contains(&(r.zone_id.clone(), dns_name::from_route53(&r.name))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CertObservation, CertSpec, CertStatus, ValidationRecordStatus};

    fn cert(observation: CertObservation) -> Cert {
        let mut cert = Cert::new("a", CertSpec::default());
        cert.status = Some(CertStatus { observation, ..CertStatus::default() });
        cert
    }

    #[test]
    fn a_cert_is_concerned_by_its_certificate_and_the_ones_it_replaced() {
        let holding = cert(CertObservation {
            certificate_arn: Some("arn:new".into()),
            previous_certificate_arns: vec!["arn:old".into()],
            ..CertObservation::default()
        });
        for arn in ["arn:new", "arn:old"] {
            assert!(holds_certificate(&holding, &HashSet::from([arn.to_owned()])), "{arn}");
        }
        assert!(!holds_certificate(&holding, &HashSet::from(["arn:other".to_owned()])));
        assert!(!holds_certificate(&Cert::new("b", CertSpec::default()), &HashSet::from(["arn:new".to_owned()])));
    }

    #[test]
    fn a_cert_waits_only_for_its_pending_records() {
        let record = |pending| ValidationRecordStatus {
            zone_id: "Z1".into(),
            name: "_a.Example.com.".into(),
            value: "v".into(),
            owned: true,
            pending,
        };
        let written = HashSet::from([("Z1".to_owned(), "_a.example.com".to_owned())]);
        assert!(waits_for_records(
            &cert(CertObservation { validation_records: vec![record(true)], ..CertObservation::default() }),
            &written
        ));
        assert!(!waits_for_records(
            &cert(CertObservation { validation_records: vec![record(false)], ..CertObservation::default() }),
            &written
        ));
    }
}
