//! `blockwork explain` on key rotator Secrets against the real kube-apiserver: a source blocked
//! by a foreign target names the target and how to hand it over; once adopted, the source is in
//! sync and the target shows each slot's key id and certificate expiry.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::support::*;
use blockwork_inspect::actions::Retried;
use blockwork_inspect::read::{self, KindArg};
use blockwork_inspect::render::{self, Explanation, Row};
use blockwork_inspect::report::Report;
use jiff::Timestamp;

/// A self-signed certificate valid until 2030-01-02, as PEM text.
fn certificate(name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.not_after = rcgen::date_time_ymd(2030, 1, 2);
    params.self_signed(&key).unwrap().pem()
}

async fn report(h: &Harness, name: &str) -> Report {
    read::report(&h.client, &h.namespace, KindArg::Secret, name, &h.keys, Timestamp::now()).await.unwrap()
}

fn text(report: Report) -> String {
    let now = Timestamp::now();
    render::explain(&Explanation::of(report, now), now)
}

#[tokio::test]
async fn a_source_blocked_by_a_foreign_target_says_how_to_hand_it_over_and_the_target_shows_its_keys_once_adopted() {
    let h = Harness::start("explain-foreign").await;
    let theirs = certificate("their.example");
    let mut foreign = h.source("target", "unused", &theirs, "their-key");
    foreign.metadata.annotations = None;
    h.create(&foreign).await;
    let crt = certificate("stargate.example");
    h.create_source("source", "target", &crt, "key").await;
    h.wait_for_event("source", "TargetNotManaged").await;

    let blocked = report(&h, "source").await;
    assert_eq!((blocked.state.as_str(), blocked.ready), ("Blocked", Some(false)));
    let explanation = Explanation::of(blocked.clone(), Timestamp::now());
    let first = &explanation.diagnosis.hints[0];
    assert_eq!(first.reason, "TargetNotManaged");
    assert!(first.fix.contains("<prefix>/adopt=true"), "{first:?}");
    // Needs a person; looked at again when the source or target changes, else at the resync.
    let error = blocked.last_error.clone().expect("the blocking warning is the last error");
    assert_eq!((error.reason.as_str(), error.class.as_deref()), ("TargetNotManaged", Some("Terminal")));
    assert_eq!(error.retry_at, error.since.map(|seen| seen + Duration::from_secs(3600)), "{error:?}");
    assert!(!error.message.starts_with('['), "the retry is read off the message: {}", error.message);
    let row = Row::of(&blocked, Timestamp::now());
    assert!(row.next_retry.is_some() && row.last_error.as_deref().is_some_and(|e| e.starts_with("TargetNotManaged")), "{row:?}");
    let blocked_text = text(blocked);
    eprintln!("{blocked_text}");
    assert!(blocked_text.contains("  class     Terminal") && blocked_text.contains("  retry     in 59m"), "{blocked_text}");
    assert!(blocked_text.contains("target            target  [NOT OK] exists and is not managed by a rotator"), "{blocked_text}");
    assert!(blocked_text.contains(&h.keys.adopt), "the event names the annotation: {blocked_text}");

    h.annotate("target", &h.keys.adopt.clone(), Some("true")).await;
    h.wait_for_next("target", &crt).await;
    h.wait_for_event("target", "Rotated").await;
    let in_sync = report(&h, "source").await;
    assert_eq!((in_sync.state.as_str(), in_sync.ready), ("InSync", Some(true)));
    assert!(
        in_sync.events.iter().any(|e| e.reason == "Rotated") && in_sync.events.iter().any(|e| e.reason == "TargetNotManaged"),
        "the source's story has its warning and the write on its target: {:?}",
        in_sync.events
    );
    let target = report(&h, "target").await;
    assert_eq!(target.state, "Managed");
    let target_text = text(target);
    eprintln!("{target_text}");
    let kid = blockwork_rotator::kid::kid(crt.as_bytes());
    assert!(target_text.contains(&format!("next-tls              kid {kid}, expires 2030-01-02 00:00 UTC (in ")), "{target_text}");
    let their_kid = blockwork_rotator::kid::kid(theirs.as_bytes());
    assert!(
        target_text.contains(&format!("prev-tls              kid {their_kid}, expires 2030-01-02")),
        "adopting kept theirs as prev-tls: {target_text}"
    );
    assert!(target_text.contains("tls                   (empty)"), "{target_text}");
    assert!(target_text.contains("source            source  [ok] rotates this target"), "{target_text}");
    assert!(target_text.contains("rotations             1"), "adoption rotated the foreign certificate to tls: {target_text}");
}

#[tokio::test]
async fn retry_of_a_target_reconciles_its_source_which_the_request_does_not_block() {
    let h = Harness::start("explain-retry").await;
    let crt = certificate("stargate.example");
    h.create_source("source", "target", &crt, "key").await;
    h.wait_for_next("target", &crt).await;
    let unchanged = r#"rotator_rotations_total{result="unchanged"}"#;
    let blocked = r#"rotator_rotations_total{result="blocked"}"#;
    let (unchanged_before, blocked_before) = (h.sample(unchanged), h.sample(blocked));

    let retried =
        blockwork_inspect::actions::retry(&h.client, &h.namespace, KindArg::Secret, "target", &h.keys, Duration::ZERO).await.unwrap();
    assert_eq!(retried, Retried::Source { name: "source".into() });
    let source = h.get("source").await.unwrap();
    let requested = annotation(&source, blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION);
    assert!(requested.is_some_and(|at| at.parse::<Timestamp>().is_ok()), "the source carries the request: {source:?}");
    h.wait_for_sample(unchanged, unchanged_before).await;
    assert_eq!(h.sample(blocked), blocked_before, "the request annotation is not one the rotator refuses");
    assert_eq!(report(&h, "source").await.state, "InSync");
}

#[tokio::test]
async fn a_write_the_api_server_refuses_shows_its_class_and_the_backoff_s_next_retry() {
    let mut h = Harness::new("explain-refused").await;
    h.config.error_requeue = Duration::from_secs(40);
    // A quota of one Secret, the source: the API server refuses the target (403, exceeded quota).
    let quotas: kube::Api<ResourceQuota> = kube::Api::namespaced(h.client.clone(), &h.namespace);
    let hard = std::collections::BTreeMap::from([("count/secrets".to_owned(), Quantity("1".into()))]);
    let quota = ResourceQuota {
        metadata: kube::api::ObjectMeta { name: Some("secrets".into()), ..Default::default() },
        spec: Some(ResourceQuotaSpec { hard: Some(hard.clone()), ..Default::default() }),
        ..Default::default()
    };
    quotas.create(&kube::api::PostParams::default(), &quota).await.unwrap();
    // No quota controller runs beside this API server: the status it would write, so admission counts.
    let used = std::collections::BTreeMap::from([("count/secrets".to_owned(), Quantity("0".into()))]);
    let status = serde_json::json!({ "status": { "hard": hard, "used": used } });
    quotas.patch_status("secrets", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.unwrap();
    h.create_source("source", "target", &certificate("stargate.example"), "key").await;
    h.start_controller();
    let note = h.wait_for_event("source", "WriteFailed").await;
    assert!(note.starts_with("[Terminal, retry in 40s] Could not write target target: "), "{note}");

    let report = report(&h, "source").await;
    let error = report.last_error.clone().expect("the write failure is the last error");
    assert_eq!((error.reason.as_str(), error.class.as_deref()), ("WriteFailed", Some("Terminal")));
    assert!(error.message.contains("exceeded quota"), "{}", error.message);
    assert_eq!(error.retry_at, error.since.map(|seen| seen + Duration::from_secs(40)), "the first failure: the backoff's base");
    let rendered = text(report.clone());
    eprintln!("{rendered}");
    assert!(rendered.contains("  class     Terminal") && rendered.contains("  retry     in "), "{rendered}");
    let row = Row::of(&report, Timestamp::now());
    assert_eq!((row.state.as_str(), row.ready), ("Blocked", Some(false)));
    assert!(row.next_retry.is_some(), "{row:?}");
}
