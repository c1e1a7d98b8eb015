//! `blockwork explain` on key rotator Secrets against the real kube-apiserver: a source blocked
//! by a foreign target names the target and how to hand it over; once adopted, the source is in
//! sync and the target shows each slot's key id and certificate expiry.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::time::Duration;

use blockwork_inspect::actions::Retried;
use blockwork_inspect::read::{self, KindArg};
use blockwork_inspect::render::{self, Explanation};
use blockwork_inspect::report::Report;
use jiff::Timestamp;
use support::*;

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
    let blocked_text = text(blocked);
    eprintln!("{blocked_text}");
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
