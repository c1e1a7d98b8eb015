//! Wakes the Certs whose AWS side changed outside their reconciles, so that a Ready Cert needs
//! no AWS call of its own to notice a change within a sweep:
//!
//! - the certificate listing's sweeps tell which certificates changed (issued, revoked,
//!   expired, renewing…): their Certs are reconciled at once, and so are the Certs waiting on a
//!   call they share (a failing listing, their account's backoff), since a sweep is told after
//!   a failing listing recovers even when nothing changed — and when a hosted zone's listing
//!   that failed answers again;
//! - the zones' background batches tell which validation records were written: the Certs
//!   waiting for them go on to `Validated`;
//! - a Cert whose status lists validation records of its own that this process has not queued
//!   for writing yet is looked at again once its status shows them (checked every
//!   [`LISTED_CHECK`]). A look lists the records and only the next look queues them (which
//!   records are ours must be in the status before any is written), and nothing else brings that
//!   look sooner than the Cert's verify interval (a minute) — not even the listing's wake for a
//!   certificate issued while its create was still running (issue 15's fault soak, seed
//!   12447780977098908883: the create's calls slowed by faults, the sweep saw the certificate
//!   issued before the Cert's status held it, and the records waited past the suite's budget).
//! - a Cert whose ownership check is due ([`crate::ownership_checks`]) is looked at (checked
//!   every [`LISTED_CHECK`] too), so that a Ready Cert, requeued hourly, reads its certificate's
//!   tags on time at any `--ownership-check-interval`, and an adoption's tags are read back
//!   within a second of their write rather than at the Cert's verify interval.
//!
//! Which Cert holds what comes from the controller's own cache of Certs (their statuses), so
//! nothing is kept beside them. A reconcile woken by a sweep or a batch links to its span, so its
//! trace tells what woke it (the sweep's ListCertificates, the batch's ChangeResourceRecordSets);
//! one woken for records listed but not queued, or for its ownership check, links to the Cert's
//! last reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockwork_aws::dns_name;
use blockwork_aws::route53::Records;
use blockwork_runtime::Context;
use blockwork_runtime::trace::{SpanContext, Traced};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast::error::RecvError;
use tracing::debug;

use crate::account::Accounts;
use crate::api::Cert;
use crate::external::CertManager;

/// How often the cached Certs are checked for validation records listed but not yet queued, and
/// for ownership checks due: a scan of the controller's cache, no call.
const LISTED_CHECK: Duration = Duration::from_secs(1);

/// Follows the listing's and the records' changes until they end (the process stops).
pub async fn follow(context: Arc<Context<CertManager>>, accounts: Arc<Accounts>, records: Arc<Records>) {
    let mut certificates = accounts.changes();
    let mut written = records.completions();
    let mut recovered = records.recoveries();
    let mut check = tokio::time::interval(LISTED_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The (UID, resourceVersion) of each Cert woken for its listed records: woken once per
    // status, so a look that does not queue them (read-only access, a failed call: its own
    // requeue retries) is not repeated every second.
    let mut woken: HashSet<(String, String)> = HashSet::new();
    // The due time of each Cert woken for its ownership check: woken once per check, so a look
    // that does not check (paused, a failed call: its own requeue retries) is not repeated.
    let mut woken_to_check: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = check.tick() => (woken, woken_to_check) = look_over(&context, &records, &woken, &woken_to_check),
            changed = certificates.recv() => match changed {
                Ok(Traced { value: arns, span }) => {
                    let arns: HashSet<String> = arns.into_iter().collect();
                    wake(&context, span, |cert| holds_certificate(cert, &arns) || waits_on_a_shared_call(cert));
                }
                Err(RecvError::Lagged(missed)) => debug!(missed, "certificate changes were missed; the Certs' requeues cover them"),
                Err(RecvError::Closed) => return,
            },
            listed = recovered.recv() => match listed {
                Ok(Traced { span, .. }) => wake(&context, span, waits_on_a_shared_call),
                Err(RecvError::Lagged(_)) => wake(&context, None, waits_on_a_shared_call),
                Err(RecvError::Closed) => return,
            },
            done = written.recv() => match done {
                Ok(Traced { value: records, span }) => {
                    let records: HashSet<(String, String)> = records.into_iter().collect();
                    wake(&context, span, |cert| waits_for_records(cert, &records));
                }
                Err(RecvError::Lagged(missed)) => debug!(missed, "record writes were missed; the Certs' requeues cover them"),
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// Wakes, each time a user of Certs changes (`crate::users`: a tenant or an Ingress, by its
/// namespace), the Certs of that namespace that wait for their users, until the users' watches
/// end (the process stops).
pub async fn follow_users(context: Arc<Context<CertManager>>, mut changed: tokio::sync::mpsc::UnboundedReceiver<String>) {
    while let Some(namespace) = changed.recv().await {
        wake(&context, None, |cert| cert.namespace().as_deref() == Some(namespace.as_str()) && waits_for_users(cert));
    }
}

/// Whether what the Cert does next depends on its users: it is being deleted, or keeps
/// certificates it replaced.
fn waits_for_users(cert: &Cert) -> bool {
    cert.metadata.deletion_timestamp.is_some()
        || cert.status.as_ref().is_some_and(|status| !status.observation.previous_certificate_arns.is_empty())
}

/// One scan of the cached Certs: wakes those whose status lists records not queued yet (unless
/// woken for that status already: `woken`), and those whose ownership check is due (unless woken
/// for that check already: `woken_to_check`); returns what is woken now, for the next scan.
fn look_over(
    context: &Context<CertManager>,
    records: &Records,
    woken: &HashSet<(String, String)>,
    woken_to_check: &HashMap<String, Instant>,
) -> (HashSet<(String, String)>, HashMap<String, Instant>) {
    let mut listed = HashSet::new();
    let mut due = HashMap::new();
    let now = Instant::now();
    for cert in context.cached() {
        if lists_unqueued_records(&cert, |zone_id, name| records.written(zone_id, name).is_some()) {
            let version = (cert.uid().unwrap_or_default(), cert.resource_version().unwrap_or_default());
            if !woken.contains(&version) {
                // The look that listed them asked for this one: its trace links there.
                context.wake_again(&ObjectRef::from_obj(cert.as_ref()));
            }
            listed.insert(version);
        }
        let Some(uid) = checks_its_owner(&cert) else { continue };
        let at = context.manager.ownership().due_at(uid);
        if at <= now {
            if woken_to_check.get(uid) != Some(&at) {
                // Nothing else woke it: its trace links to its last look, as a requeue's does.
                context.wake_again(&ObjectRef::from_obj(cert.as_ref()));
            }
            due.insert(uid.to_owned(), at);
        }
    }
    (listed, due)
}

/// Wakes the Certs `concerned` by the work done in `span` (a sweep, a batch), their trigger
/// linked to it.
fn wake(context: &Context<CertManager>, span: Option<SpanContext>, concerned: impl Fn(&Cert) -> bool) {
    for cert in context.cached() {
        if concerned(&cert) {
            context.wake_from(&ObjectRef::from_obj(cert.as_ref()), span.clone());
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

/// Whether the Cert's status says it waits on a call it shares with others
/// (`blockwork_aws::shared`): a listing that failed, its account's throttling backoff.
fn waits_on_a_shared_call(cert: &Cert) -> bool {
    let synced = cert.status.as_ref().and_then(|status| status.condition(blockwork_runtime::status::SYNCED));
    synced.is_some_and(|c| c.status == "False" && blockwork_aws::shared::is_shared_wait(Some(&c.reason)))
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

/// The UID of a live Cert holding a certificate it has not lost: one whose tags its verify reads
/// when the check is due.
fn checks_its_owner(cert: &Cert) -> Option<&str> {
    let holds = cert.status.as_ref().is_some_and(|s| s.observation.certificate_arn.is_some() && s.observation.ownership_lost.is_none());
    (holds && cert.metadata.deletion_timestamp.is_none()).then_some(cert.metadata.uid.as_deref()).flatten()
}

/// Whether a live Cert's status lists a record still to be written (always its own) that this
/// process has not queued (`queued`: by zone id and name, whatever came of it).
fn lists_unqueued_records(cert: &Cert, queued: impl Fn(&str, &str) -> bool) -> bool {
    cert.metadata.deletion_timestamp.is_none()
        && cert
            .status
            .as_ref()
            .is_some_and(|status| status.observation.validation_records.iter().any(|r| r.pending && !queued(&r.zone_id, &r.name)))
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
    fn only_a_cert_being_deleted_or_keeping_replaced_certificates_waits_for_its_users() {
        let keeping = cert(CertObservation { previous_certificate_arns: vec!["arn:old".into()], ..CertObservation::default() });
        assert!(waits_for_users(&keeping));
        let mut deleting = cert(CertObservation::default());
        assert!(!waits_for_users(&deleting), "a Ready Cert's users change nothing of it");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        assert!(waits_for_users(&deleting));
    }

    #[test]
    fn a_cert_waiting_on_a_shared_call_is_woken_when_a_listing_is_told() {
        let waiting = |reason: &str, status: bool| {
            let mut cert = Cert::new("a", CertSpec::default());
            let synced = blockwork_runtime::status::condition("Synced", status, reason, "waiting for the listing", None);
            cert.status = Some(CertStatus { conditions: vec![synced], ..CertStatus::default() });
            cert
        };
        assert!(waits_on_a_shared_call(&waiting("SharedCallFailing", false)));
        assert!(waits_on_a_shared_call(&waiting("AccountBackingOff", false)));
        assert!(!waits_on_a_shared_call(&waiting("ServiceUnavailable", false)), "its own call failed: its backoff retries it");
        assert!(!waits_on_a_shared_call(&waiting("ReconcileSuccess", true)));
    }

    #[test]
    fn a_cert_waits_only_for_its_pending_records() {
        let record = |pending| ValidationRecordStatus {
            zone_id: "Z1".into(),
            name: "_a.Example.com.".into(),
            value: "v".into(),
            owned: true,
            pending,
            change_id: None,
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

    #[test]
    fn only_a_live_cert_holding_a_certificate_it_has_not_lost_checks_its_owner() {
        let holding = |lost: Option<&str>| {
            let mut cert = cert(CertObservation {
                certificate_arn: Some("arn:c".into()),
                ownership_lost: lost.map(str::to_owned),
                ..CertObservation::default()
            });
            cert.metadata.uid = Some("uid".into());
            cert
        };
        assert_eq!(checks_its_owner(&holding(None)), Some("uid"));
        assert_eq!(checks_its_owner(&holding(Some("arn:c"))), None, "lost: no look reads its tags");
        let mut deleting = holding(None);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        assert_eq!(checks_its_owner(&deleting), None, "a deletion reads the tags itself");
        let mut empty = cert(CertObservation::default());
        empty.metadata.uid = Some("uid".into());
        assert_eq!(checks_its_owner(&empty), None, "nothing held");
    }

    #[test]
    fn a_cert_listing_records_not_yet_queued_is_looked_at_again() {
        let record = |pending| ValidationRecordStatus {
            zone_id: "Z1".into(),
            name: "_a.example.com.".into(),
            value: "v".into(),
            owned: true,
            pending,
            change_id: None,
        };
        let listing = |records| cert(CertObservation { validation_records: records, ..CertObservation::default() });
        let (nothing_queued, all_queued) = (|_: &str, _: &str| false, |_: &str, _: &str| true);
        assert!(lists_unqueued_records(&listing(vec![record(true)]), nothing_queued));
        assert!(!lists_unqueued_records(&listing(vec![record(true)]), all_queued), "queued: its completion wakes it");
        assert!(!lists_unqueued_records(&listing(vec![record(false)]), nothing_queued), "written already");
        let mut deleting = listing(vec![record(true)]);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        assert!(!lists_unqueued_records(&deleting, nothing_queued), "a Cert being deleted writes no records");
    }
}
