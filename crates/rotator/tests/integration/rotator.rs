//! The rotator against a real kube-apiserver: every behaviour of `docs/rotator.md`, each in its
//! own test and namespace.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use blockwork_rotator::{Action, Config, RotatorArgs};
use blockwork_testenv::harness::{TIMEOUT, eventually};
use blockwork_testenv::kube_proxy::KubeProxy;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn first_sight_creates_the_target_with_the_source_in_next() {
    let h = Harness::start("first-sight").await;
    let source = h.create_source("source", "target", "cert", "key").await;
    let target = h.wait_for("target", "created", |_| true).await;

    assert_eq!(target.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(text(&target, "next-tls.crt"), "cert");
    assert_eq!(text(&target, "next-tls.key"), "key");
    assert_eq!(text(&target, "next-tls.kid"), "558ba4da-9628-5cb4-b244-ef833e84a53c", "the original's kid for \"cert\"");
    for key in ["tls.crt", "tls.key", "tls.kid", "prev-tls.crt", "prev-tls.key", "prev-tls.kid"] {
        assert!(target.data.as_ref().unwrap().contains_key(key), "{key} present");
        assert_eq!(text(&target, key), "", "{key} empty");
    }
    assert!(target.owner_references().is_empty(), "no owner reference: deleting the source never deletes the target");
    assert_eq!(annotation(&target, &h.keys.source_name).as_deref(), Some("source"));
    assert_eq!(annotation(&target, &h.keys.source_resource_version), source.resource_version());
    assert_eq!(
        annotation(&target, &h.keys.next_cert_sha256).as_deref(),
        Some("06298432e8066b29e2223bcc23aa9504b56ae508fabf3435508869b9c3190e22")
    );
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("0"));
    let at: Timestamp = annotation(&target, &h.keys.last_rotation_time).unwrap().parse().unwrap();
    assert!((Timestamp::now() - at).get_seconds().abs() < 120);
    assert_eq!(target.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("blockwork"));

    let note = h.wait_for_event("target", "Created").await;
    assert!(note.contains("558ba4da-9628-5cb4-b244-ef833e84a53c") && note.contains("source"), "{note}");
    h.wait_for_sample(r#"rotator_rotations_total{result="created"}"#, 0.0).await;
}

#[tokio::test]
async fn every_change_of_the_source_rotates_the_three_slots_once() {
    let h = Harness::start("rotate").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;

    let expected = [
        ["", "cert", "cert-rotation-1"],
        ["cert", "cert-rotation-1", "cert-rotation-2"],
        ["cert-rotation-1", "cert-rotation-2", "cert-rotation-3"],
    ];
    for (i, slots_after) in expected.iter().enumerate() {
        let n = i + 1;
        let source = h.renew("source", &format!("cert-rotation-{n}"), &format!("key-rotation-{n}")).await;
        let target = h.wait_for_next("target", &format!("cert-rotation-{n}")).await;
        assert_eq!(slots(&target), *slots_after);
        assert_eq!(text(&target, "next-tls.key"), format!("key-rotation-{n}"));
        assert_eq!(text(&target, "tls.key"), if n == 1 { "key".to_owned() } else { format!("key-rotation-{}", n - 1) });
        for (slot, crt) in ["prev-tls.kid", "tls.kid", "next-tls.kid"].iter().zip(slots_after) {
            assert_eq!(text(&target, slot), if crt.is_empty() { String::new() } else { kid(crt) }, "{slot}");
        }
        assert_eq!(annotation(&target, &h.keys.rotations), Some(n.to_string()));
        assert_eq!(annotation(&target, &h.keys.source_resource_version), source.resource_version());
    }
    let note = h.wait_for_event("target", "Rotated").await;
    assert!(note.contains("from source source"), "{note}");
    let on_source = h.events("source").await;
    assert!(on_source.is_empty(), "what was written is told on the target only: {on_source:?}");
    h.wait_for_sample(r#"rotator_rotations_total{result="rotated"}"#, 2.0).await;
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(&format!(r#"rotator_target_last_rotation_timestamp_seconds{{namespace="{}",target="target"}}"#, h.namespace)),
        "{metrics}"
    );
}

#[tokio::test]
async fn no_rotation_when_the_source_certificate_equals_next() {
    let h = Harness::start("equal").await;
    h.create_source("source", "target", "cert", "key").await;
    let before = h.wait_for_next("target", "cert").await;
    let unchanged = h.sample(r#"rotator_rotations_total{result="unchanged"}"#);

    h.annotate("source", "some-new-annotation", Some("some-new-value")).await;
    h.wait_for_sample(r#"rotator_rotations_total{result="unchanged"}"#, unchanged).await;
    let after = h.get("target").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version(), "the target is not touched");
    assert!(after.annotations().get("some-new-annotation").is_none());
}

#[tokio::test]
async fn deleting_the_source_keeps_the_target_as_it_is() {
    let h = Harness::start("source-deleted").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    let before = h.wait_for_next("target", "cert-1").await;

    h.delete("source").await;
    let note = h.wait_for_event("target", "SourceDeleted").await;
    assert!(note.contains("kept"), "{note}");
    let after = h.get("target").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(slots(&after), ["", "cert", "cert-1"]);
    assert!(after.owner_references().is_empty(), "nothing for a garbage collector to act on");
    let metrics = h.metrics_text();
    assert!(!metrics.contains(r#"target="target""#), "the target's series is dropped: {metrics}");

    // A new source of the same name continues the rotation.
    h.create_source("source", "target", "cert-2", "key-2").await;
    let target = h.wait_for_next("target", "cert-2").await;
    assert_eq!(slots(&target), ["cert", "cert-1", "cert-2"]);
}

#[tokio::test]
async fn a_source_without_usable_tls_fields_creates_nothing_until_it_has_them() {
    let h = Harness::start("invalid-source").await;
    h.create_source("empty", "target-empty", "", "").await;
    h.create_source("no-key", "target-no-key", "cert", "").await;
    let mut other = h.source("other", "target-other", "x", "y");
    other.type_ = Some("Opaque".into());
    other.data = Some(BTreeMap::from([("other-key".into(), ByteString(b"other-val".to_vec()))]));
    h.create(&other).await;

    let note = h.wait_for_event("empty", "InvalidSource").await;
    assert!(note.contains("tls.crt and tls.key missing or empty"), "{note}");
    let note = h.wait_for_event("no-key", "InvalidSource").await;
    assert!(note.contains("tls.key missing or empty"), "{note}");
    h.wait_for_event("other", "InvalidSource").await;
    for target in ["target-empty", "target-no-key", "target-other"] {
        assert!(h.get(target).await.is_none(), "no {target}");
    }
    assert!(h.sample(r#"rotator_errors_total{reason="invalid_source"}"#) >= 3.0);

    h.renew("no-key", "cert", "key").await;
    h.wait_for_next("target-no-key", "cert").await;
}

#[tokio::test]
async fn a_secret_without_the_annotations_is_ignored() {
    let h = Harness::start("unannotated").await;
    let mut plain = h.source("plain", "target-plain", "cert", "key");
    plain.metadata.annotations = None;
    h.create(&plain).await;
    let mut not_a_source = h.source("not-a-source", "target-not-a-source", "cert", "key");
    not_a_source.annotations_mut().insert(h.keys.source.clone(), "false".into());
    h.create(&not_a_source).await;
    // A later source proves the watch has seen both.
    h.create_source("marker", "target-marker", "cert", "key").await;
    h.wait_for_next("target-marker", "cert").await;
    assert!(h.get("target-plain").await.is_none());
    assert!(h.get("target-not-a-source").await.is_none());
    assert!(h.events("plain").await.is_empty());
    assert!(h.events("not-a-source").await.is_empty(), "false is a documented value");
}

#[tokio::test]
async fn a_source_flag_in_any_case_marks_a_source_and_any_other_value_is_a_warning() {
    let h = Harness::start("source-flag").await;
    let mut capitalised = h.source("capitalised", "target-capitalised", "cert", "key");
    capitalised.annotations_mut().insert(h.keys.source.clone(), "True".into());
    h.create(&capitalised).await;
    h.wait_for_next("target-capitalised", "cert").await;

    let mut yes = h.source("yes", "target-yes", "cert", "key");
    yes.annotations_mut().insert(h.keys.source.clone(), "yes".into());
    h.create(&yes).await;
    let note = h.wait_for_event("yes", "InvalidAnnotation").await;
    assert!(note.contains(&h.keys.source) && note.contains("\"yes\"") && note.contains("expected true or false"), "{note}");
    assert!(h.get("target-yes").await.is_none(), "not a source until the value is one");
    h.wait_for_sample(r#"rotator_errors_total{reason="invalid_annotation"}"#, 0.0).await;

    h.annotate("yes", &h.keys.source.clone(), Some("true")).await;
    h.wait_for_next("target-yes", "cert").await;
}

#[tokio::test]
async fn a_misspelt_rotator_annotation_is_a_warning_on_the_secret() {
    let h = Harness::start("annotation-typo").await;
    let mut typo = h.source("typo", "target-typo", "cert", "key");
    let misspelt = h.keys.source.replace("source-secret", "source-secrets");
    typo.annotations_mut().remove(&h.keys.source);
    typo.annotations_mut().insert(misspelt.clone(), "true".into());
    h.create(&typo).await;
    let note = h.wait_for_event("typo", "InvalidAnnotation").await;
    assert!(note.contains(&misspelt) && note.contains(&h.keys.source), "names the key and the accepted ones: {note}");

    // On a source, the reconcile blocks it and says so.
    let mut jwks = h.source("jwks", "target-jwks", "cert", "key");
    jwks.annotations_mut().insert(h.keys.jwks.clone(), "on".into());
    h.create(&jwks).await;
    let note = h.wait_for_event("jwks", "InvalidAnnotation").await;
    assert!(note.contains(&h.keys.jwks) && note.contains("nothing is written"), "{note}");
    assert!(h.get("target-jwks").await.is_none());
}

#[tokio::test]
async fn a_bad_destination_is_reported_on_the_source() {
    let h = Harness::start("bad-destination").await;
    h.create_source("self", "self", "cert", "key").await;
    h.create_source("bad-name", "Not_A_Name", "cert", "key").await;
    let note = h.wait_for_event("self", "InvalidDestination").await;
    assert!(note.contains("itself"), "{note}");
    let self_secret = h.get("self").await.unwrap();
    assert_eq!(text(&self_secret, "tls.crt"), "cert", "the source is never overwritten");
    h.wait_for_event("bad-name", "InvalidDestination").await;
}

#[tokio::test]
async fn an_existing_target_not_made_by_the_rotator_is_left_alone_until_handed_over() {
    let h = Harness::start("foreign-target").await;
    let mut foreign = h.source("target", "unused", "their-cert", "their-key");
    foreign.metadata.annotations = None;
    let foreign = h.create(&foreign).await;
    h.create_source("source", "target", "cert", "key").await;

    let note = h.wait_for_event("source", "TargetNotManaged").await;
    assert!(note.contains(&h.keys.adopt), "the event says how to hand it over: {note}");
    assert_eq!(h.get("target").await.unwrap().resource_version(), foreign.resource_version());
    assert!(h.sample(r#"rotator_errors_total{reason="target_not_managed"}"#) >= 1.0);

    h.annotate("target", &h.keys.adopt.clone(), Some("true")).await;
    let target = h.wait_for_next("target", "cert").await;
    assert_eq!(slots(&target), ["their-cert", "", "cert"], "an adopted target rotates like any other");
    assert_eq!(annotation(&target, &h.keys.source_name).as_deref(), Some("source"));
}

#[tokio::test]
async fn a_target_of_the_original_operator_is_adopted_and_its_finalizer_released() {
    let mut h = Harness::new("legacy").await;
    let mut source = h.source("source", "target", "cert-1", "key-1");
    source.metadata.finalizers = Some(vec![h.keys.legacy_finalizer.clone()]);
    let source = h.create(&source).await;
    // The target as the original operator leaves it after one rotation.
    let legacy = Secret {
        metadata: ObjectMeta {
            name: Some("target".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: "source".into(),
                uid: source.uid().unwrap(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("prev-tls.crt", ""),
                ("prev-tls.key", ""),
                ("prev-tls.kid", ""),
                ("tls.crt", "cert"),
                ("tls.key", "key"),
                ("tls.kid", &kid("cert")),
                ("next-tls.crt", "cert-1"),
                ("next-tls.key", "key-1"),
                ("next-tls.kid", &kid("cert-1")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Secret::default()
    };
    h.create(&legacy).await;

    h.start_controller();
    let target = h.wait_for("target", "adopted", |t| annotation(t, &h.keys.source_name).is_some()).await;
    assert_eq!(slots(&target), ["", "cert", "cert-1"], "no rotation: the source is already next");
    assert!(target.owner_references().is_empty(), "the owner reference is gone");
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("0"));
    h.wait_for("source", "finalizer released", |s| s.finalizers().is_empty()).await;
    let note = h.wait_for_event("target", "Updated").await;
    assert!(note.contains("original operator"), "{note}");

    h.renew("source", "cert-2", "key-2").await;
    let target = h.wait_for_next("target", "cert-2").await;
    assert_eq!(slots(&target), ["cert", "cert-1", "cert-2"]);
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"));

    h.delete("source").await;
    h.wait_for_event("target", "SourceDeleted").await;
    assert!(h.get("source").await.is_none(), "deleting the source is not blocked");
}

#[tokio::test]
async fn two_sources_naming_one_target_first_claim_wins_until_it_lets_go() {
    let h = Harness::start("two-sources").await;
    h.create_source("first", "target", "first-cert", "first-key").await;
    h.wait_for_next("target", "first-cert").await;
    h.create_source("second", "target", "second-cert", "second-key").await;

    let note = h.wait_for_event("second", "TargetConflict").await;
    assert!(note.contains("first"), "{note}");
    h.renew("second", "second-cert-2", "second-key-2").await;
    h.renew("first", "first-cert-2", "first-key-2").await;
    let target = h.wait_for_next("target", "first-cert-2").await;
    assert_eq!(slots(&target), ["", "first-cert", "first-cert-2"], "only the first source rotates the target");
    assert!(h.sample(r#"rotator_errors_total{reason="target_conflict"}"#) >= 1.0);

    // The first source goes away: the second takes over at its next look and keeps rotating.
    h.delete("first").await;
    let target = h.wait_for_next("target", "second-cert-2").await;
    assert_eq!(slots(&target), ["first-cert", "first-cert-2", "second-cert-2"]);
    assert_eq!(annotation(&target, &h.keys.source_name).as_deref(), Some("second"));
    let note = h.wait_for_event("target", "Rotated").await;
    assert!(!note.is_empty());
}

#[tokio::test]
async fn hand_edits_of_the_target_are_repaired_without_rotating() {
    let h = Harness::start("hand-edit").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    h.wait_for_next("target", "cert-1").await;

    // Someone overwrites next-tls: the source has not changed, so no rotation; next is restored.
    let patch = json!({ "data": { "next-tls.crt": b64("tampered") } });
    h.api().patch("target", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(slots(&target), ["", "cert", "cert-1"]);
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"), "not a rotation");
    let note = h.wait_for_event("target", "Updated").await;
    assert!(note.contains("changed by hand"), "{note}");

    // A wrong kid is recomputed; a key of someone else's stays.
    let patch = json!({ "data": { "tls.kid": b64("bogus"), "ca.crt": b64("ca") } });
    h.api().patch("target", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let target = h.wait_for("target", "kid repaired", |t| text(t, "tls.kid") == kid("cert")).await;
    assert_eq!(text(&target, "ca.crt"), "ca");
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"));

    // Removing the rotator's annotations by hand: they are written again.
    let patch = json!({ "metadata": { "annotations": { h.keys.next_cert_sha256.clone(): null } } });
    h.api().patch("target", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    h.wait_for("target", "annotation restored", |t| annotation(t, &h.keys.next_cert_sha256).is_some()).await;
}

#[tokio::test]
async fn a_target_deleted_by_hand_is_created_again_from_the_source() {
    let h = Harness::start("target-deleted").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    let first = h.wait_for_next("target", "cert-1").await;

    h.delete("target").await;
    let again = h.wait_for("target", "recreated", |t| t.uid() != first.uid()).await;
    assert_eq!(slots(&again), ["", "", "cert-1"], "as on first sight: the source is next");
    assert_eq!(annotation(&again, &h.keys.rotations).as_deref(), Some("0"));
}

#[tokio::test]
async fn a_first_sight_and_a_rotation_are_one_write_each_and_no_read() {
    let mut h = Harness::new("one-write").await;
    let proxy = KubeProxy::start(h.plane).await.unwrap();
    proxy.record_requests();
    h.start_controller_with(proxy.client().await.unwrap());
    // Reconciles start once both watches have listed: the first source below is then an event.
    h.create_source("other", "other-target", "x", "y").await;
    h.wait_for_next("other-target", "x").await;
    proxy.take_requests();

    h.create_source("source", "target", "cert-0", "key-0").await;
    h.wait_for_next("target", "cert-0").await;
    let secrets = format!("/api/v1/namespaces/{}/secrets", h.namespace);
    assert_eq!(secret_requests(proxy.take_requests()), [format!("POST {secrets}")], "first sight");

    proxy.take_requests();
    h.renew("source", "cert-1", "key-1").await;
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(secret_requests(proxy.take_requests()), [format!("PUT {secrets}/target")], "a rotation");
    assert_eq!(slots(&target), ["", "cert-0", "cert-1"]);
}

#[tokio::test]
async fn a_write_from_a_stale_cache_is_refused_and_made_again_from_a_fresh_read() {
    let mut h = Harness::new("stale-cache").await;
    let proxy = KubeProxy::start(h.plane).await.unwrap();
    proxy.record_requests();
    h.start_controller_with(proxy.client().await.unwrap());
    h.create_source("source", "target", "cert-0", "key-0").await;
    h.wait_for_next("target", "cert-0").await;

    let (arrived, release) = proxy.hold(format!("PUT /api/v1/namespaces/{}/secrets/target", h.namespace));
    h.renew("source", "cert-1", "key-1").await;
    arrived.await.unwrap();
    // While the rotation planned from the cache is in flight, someone else changes the target.
    let patch = json!({ "data": { "ca.crt": b64("ca") } });
    h.api().patch("target", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    release.send(()).unwrap();

    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(slots(&target), ["", "cert-0", "cert-1"]);
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"), "rotated once");
    assert_eq!(text(&target, "ca.crt"), "ca", "planned again from the target as it is now");
    let reads: Vec<String> = secret_requests(proxy.take_requests()).into_iter().filter(|r| r.starts_with("GET")).collect();
    assert!(reads.iter().any(|r| r.contains("/secrets/target")) && reads.iter().any(|r| r.contains("/secrets/source")), "{reads:?}");
}

#[tokio::test]
async fn a_source_of_another_type_than_tls_is_read_and_rotated_like_any_other() {
    let h = Harness::start("opaque-source").await;
    let mut source = h.source("source", "target", "cert-0", "key-0");
    source.type_ = Some("Opaque".into());
    h.create(&source).await;
    h.wait_for_next("target", "cert-0").await;
    h.renew("source", "cert-1", "key-1").await;
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(slots(&target), ["", "cert-0", "cert-1"]);
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"));
}

#[tokio::test]
async fn a_crash_before_the_write_loses_nothing() {
    let h = Harness::new("crash-before-write").await;
    let rotator = h.rotator();
    h.create_source("source", "target", "cert", "key").await;
    rotator.reconcile(&h.namespace, "source").await.unwrap();
    h.renew("source", "cert-1", "key-1").await;

    // Read and plan, then "crash" before the write.
    let observation = rotator.observe(&h.namespace, "source").await.unwrap().unwrap();
    let plan = rotator.plan(&observation, Timestamp::now());
    assert_eq!(plan.action, Action::Rotate);
    drop((observation, plan));
    assert_eq!(text(&h.get("target").await.unwrap(), "next-tls.crt"), "cert");

    // The restarted rotator does it, once.
    let mut h = h;
    h.start_controller();
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(slots(&target), ["", "cert", "cert-1"]);
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"));
}

#[tokio::test]
async fn a_crash_after_the_write_does_not_rotate_twice() {
    let h = Harness::new("crash-after-write").await;
    let rotator = h.rotator();
    h.create_source("source", "target", "cert", "key").await;
    rotator.reconcile(&h.namespace, "source").await.unwrap();
    h.renew("source", "cert-1", "key-1").await;

    // Read, plan and write, then "crash" before events and metrics.
    let observation = rotator.observe(&h.namespace, "source").await.unwrap().unwrap();
    let plan = rotator.plan(&observation, Timestamp::now());
    let written = rotator.apply(&observation, &plan).await.unwrap().unwrap();
    assert_eq!(slots(&written), ["", "cert", "cert-1"]);

    // The same stale view written again (a retry of the lost response, a second replica): the
    // API server refuses it, nothing changes.
    let again = rotator.apply(&observation, &plan).await;
    assert!(matches!(again, Err(blockwork_rotator::Error::Conflict(_))), "{again:?}");
    assert_eq!(h.get("target").await.unwrap().resource_version(), written.resource_version());

    // The restarted rotator sees the source already in next-tls.
    let outcome = rotator.reconcile(&h.namespace, "source").await.unwrap().unwrap();
    assert_eq!(outcome.plan.action, Action::Unchanged);
    let target = h.get("target").await.unwrap();
    assert_eq!(target.resource_version(), written.resource_version());
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("1"));
}

#[tokio::test]
async fn concurrent_reconciles_of_one_change_rotate_once() {
    let h = Harness::new("concurrent").await;
    let replicas: Vec<_> = (0..4).map(|_| h.rotator()).collect();
    h.create_source("source", "target", "cert-0", "key-0").await;
    replicas[0].reconcile(&h.namespace, "source").await.unwrap();
    for n in 1..=5 {
        h.renew("source", &format!("cert-{n}"), &format!("key-{n}")).await;
        // Every replica reads the same state and races to write; retries re-read.
        let runs = replicas.iter().map(|r| async {
            loop {
                match r.reconcile(&h.namespace, "source").await {
                    Ok(outcome) => return outcome.unwrap().plan.action,
                    Err(blockwork_rotator::Error::Conflict(_)) => continue,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let actions = futures::future::join_all(runs).await;
        assert_eq!(actions.iter().filter(|a| **a == Action::Rotate).count(), 1, "{actions:?}");
        let target = h.get("target").await.unwrap();
        assert_eq!(annotation(&target, &h.keys.rotations), Some(n.to_string()));
        assert_eq!(text(&target, "next-tls.crt"), format!("cert-{n}"));
        assert_eq!(text(&target, "tls.crt"), format!("cert-{}", n - 1));
    }
}

#[tokio::test]
async fn killing_the_rotator_at_random_points_never_loses_or_repeats_a_rotation() {
    let mut h = Harness::new("kill").await;
    h.start_controller();
    h.create_source("source", "target", "cert-0", "key-0").await;
    h.wait_for_next("target", "cert-0").await;

    // Record every version of the target from here on.
    let history = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Secret>::new()));
    let recorder = {
        use futures::StreamExt as _;
        use kube::runtime::{WatchStreamExt as _, watcher};
        let history = std::sync::Arc::clone(&history);
        let config = watcher::Config::default().fields("metadata.name=target");
        let stream = watcher::watcher(h.api(), config).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(secret)) = stream.next().await {
                history.lock().unwrap().push(secret);
            }
        })
    };

    let changes = 12;
    for n in 1..=changes {
        h.renew("source", &format!("cert-{n}"), &format!("key-{n}")).await;
        // Kill it somewhere between "not yet seen" and "written".
        tokio::time::sleep(Duration::from_millis((n * 7) % 40)).await;
        h.controller.crash();
        h.start_controller();
        let target = h.wait_for_next("target", &format!("cert-{n}")).await;
        assert_eq!(text(&target, "tls.crt"), format!("cert-{}", n - 1), "change {n}");
        assert_eq!(annotation(&target, &h.keys.rotations), Some(n.to_string()), "change {n}: exactly one rotation each");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    recorder.abort();

    let history = history.lock().unwrap();
    let mut rotations: Vec<u64> = history.iter().filter_map(|t| annotation(t, &h.keys.rotations)?.parse().ok()).collect();
    rotations.dedup();
    assert_eq!(rotations, (0..=changes).collect::<Vec<u64>>(), "every rotation seen once, in order, none skipped");
    for version in history.iter() {
        let [prev, current, next] = slots(version);
        assert!(next != current && (prev.is_empty() || prev != current), "no slot duplicated: {}", summary(version));
    }
}

#[tokio::test]
async fn the_rotator_stops_at_shutdown_and_a_restart_rotates_what_changed_meanwhile() {
    let mut h = Harness::new("shutdown").await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = blockwork_rotator::run(h.plane.client(), h.config.clone(), std::sync::Arc::clone(&h.metrics), async {
        let _ = stopped.await;
    });
    let running = tokio::spawn(run);
    h.create_source("source", "target", "cert-0", "key-0").await;
    h.wait_for_next("target", "cert-0").await;
    // A change the running rotator may or may not take before it stops, then the signal.
    h.renew("source", "cert-1", "key-1").await;
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(TIMEOUT, running).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "run returns once its workers have stopped: {ended:?}");

    h.start_controller();
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(text(&target, "tls.crt"), "cert-0");
    assert_eq!(annotation(&target, &h.keys.rotations), Some("1".to_owned()), "rotated once, by one of the two");
}

#[tokio::test]
async fn a_namespaced_rotator_touches_only_its_namespaces() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let watched = plane.namespace("watched").await.unwrap();
    let also = plane.namespace("also-watched").await.unwrap();
    let other = plane.namespace("not-watched").await.unwrap();
    let args = RotatorArgs { namespaces: vec![watched.clone(), also.clone()], ..RotatorArgs::default() };
    let config = Config::new(&args, std::slice::from_ref(&other), 2).unwrap();
    assert_eq!(config.namespaces, Some(vec![watched.clone(), also.clone()]), "ROTATOR_NAMESPACES wins over --namespaces");
    let mut h = Harness::with_config(&watched, config).await;
    h.start_controller();

    let client = plane.client();
    let keys = h.keys.clone();
    let api = |ns: &str| kube::Api::<Secret>::namespaced(client.clone(), ns);
    api(&other).create(&PostParams::default(), &source_in(&keys, &other, "source", "target", "cert", "key")).await.unwrap();
    api(&watched).create(&PostParams::default(), &source_in(&keys, &watched, "source", "target", "cert", "key")).await.unwrap();
    api(&also).create(&PostParams::default(), &source_in(&keys, &also, "source", "target", "cert", "key")).await.unwrap();
    h.wait_for_next("target", "cert").await;
    let written = async || api(&also).get_opt("target").await.unwrap().ok_or("no target".to_owned());
    eventually("the second namespace to be watched too", TIMEOUT, written).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(api(&other).get_opt("target").await.unwrap().is_none(), "the unwatched namespace is untouched");
}

#[tokio::test]
async fn a_cluster_wide_rotator_serves_every_namespace() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let first = plane.namespace("cluster-a").await.unwrap();
    let second = plane.namespace("cluster-b").await.unwrap();
    // Its own annotation prefix keeps it away from the other tests' sources.
    let args = RotatorArgs { annotation_prefix: "clusterwide.rotator.test".into(), ..RotatorArgs::default() };
    let config = Config::new(&args, &[], 2).unwrap();
    assert_eq!(config.namespaces, None, "all namespaces when neither is set");
    let mut h = Harness::with_config(&first, config).await;
    h.start_controller();
    let client = plane.client();
    for ns in [&first, &second] {
        let api = kube::Api::<Secret>::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &source_in(&h.keys, ns, "source", "target", "cert", "key")).await.unwrap();
    }
    h.wait_for_next("target", "cert").await;
    let other = Harness::with_config(&second, h.config.clone()).await;
    let target = other.wait_for_next("target", "cert").await;
    assert_eq!(annotation(&target, "clusterwide.rotator.test/source").as_deref(), Some("source"));
}

#[tokio::test]
async fn jwks_output_follows_the_opt_in_and_verifies_tokens_of_the_current_key() {
    let h = Harness::start("jwks").await;
    let certs: Vec<(String, String)> = (0..3).map(|_| rsa_cert()).collect();
    let mut source = h.source("source", "target", &certs[0].0, &certs[0].1);
    source.annotations_mut().insert(h.keys.jwks.clone(), "true".into());
    h.create(&source).await;
    let target = h.wait_for_next("target", &certs[0].0).await;
    assert_eq!(jwks(&target).keys.len(), 1);

    h.renew("source", &certs[1].0, &certs[1].1).await;
    h.wait_for_next("target", &certs[1].0).await;
    h.renew("source", &certs[2].0, &certs[2].1).await;
    let target = h.wait_for_next("target", &certs[2].0).await;
    let set = jwks(&target);
    let kids: Vec<_> = set.keys.iter().map(|k| k.common.key_id.clone().unwrap()).collect();
    assert_eq!(kids, [text(&target, "prev-tls.kid"), text(&target, "tls.kid"), text(&target, "next-tls.kid")]);

    // Sign with the current key as an authorization server would; verify with the served set.
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(text(&target, "tls.key").as_bytes()).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(text(&target, "tls.kid"));
    let claims = json!({ "sub": "client", "exp": 4_000_000_000_u64 });
    let token = jsonwebtoken::encode(&header, &claims, &key).unwrap();
    let jwk = set.find(&text(&target, "tls.kid")).unwrap();
    let validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    jsonwebtoken::decode::<serde_json::Value>(&token, &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(), &validation).unwrap();

    h.annotate("source", &h.keys.jwks.clone(), None).await;
    let target = h.wait_for("target", "jwks.json removed", |t| !t.data.as_ref().unwrap().contains_key("jwks.json")).await;
    assert_eq!(text(&target, "next-tls.crt"), certs[2].0, "no rotation for the opt-out");
}

#[tokio::test]
async fn the_cert_manager_example_works_as_written() {
    let h = Harness::start("cert-manager").await;
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/rotator/samples/cert-manager-certificate.yaml"))
            .unwrap();
    let certificate: serde_json::Value = serde_saphyr::from_str(&example).unwrap();
    assert_eq!(certificate["kind"], "Certificate");
    let spec = &certificate["spec"];
    let secret_name = spec["secretName"].as_str().unwrap();
    let annotations: BTreeMap<String, String> = serde_json::from_value(spec["secretTemplate"]["annotations"].clone()).unwrap();
    let destination = annotations[&h.keys.destination].clone();
    assert_eq!(spec["privateKey"]["algorithm"], "RSA");

    // The Secret as cert-manager writes it: template annotations plus its own, PEM chain, PKCS#8.
    let issue = |(crt, key): (String, String), revision: &str| {
        let mut all = annotations.clone();
        all.insert("cert-manager.io/certificate-name".into(), certificate["metadata"]["name"].as_str().unwrap().into());
        all.insert("cert-manager.io/issuer-name".into(), "your-issuer".into());
        all.insert("cert-manager.io/certificate-revision".into(), revision.into());
        Secret {
            metadata: ObjectMeta { name: Some(secret_name.into()), annotations: Some(all), ..ObjectMeta::default() },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                ("tls.crt".into(), ByteString(crt.into_bytes())),
                ("tls.key".into(), ByteString(key.into_bytes())),
                ("ca.crt".into(), ByteString(b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n".to_vec())),
            ])),
            ..Secret::default()
        }
    };
    let first = rsa_cert();
    h.create(&issue(first.clone(), "1")).await;
    let target = h.wait_for_next(&destination, &first.0).await;
    assert_eq!(text(&target, "next-tls.key"), first.1);

    // Renewal with rotationPolicy: Always: new key, new certificate, same Secret.
    let second = rsa_cert();
    let mut renewed = issue(second.clone(), "2");
    let current = h.get(secret_name).await.unwrap();
    renewed.metadata.resource_version = current.resource_version();
    h.api().replace(secret_name, &PostParams::default(), &renewed).await.unwrap();
    let target = h.wait_for_next(&destination, &second.0).await;
    assert_eq!(slots(&target), [String::new(), first.0, second.0]);
}

fn rsa_cert() -> (String, String) {
    let key = rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["stargate.example".to_owned()]).unwrap().self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn jwks(target: &Secret) -> jsonwebtoken::jwk::JwkSet {
    serde_json::from_str(&text(target, "jwks.json")).unwrap()
}

#[tokio::test]
async fn the_samples_use_the_rotators_annotations() {
    let h = Harness::start("samples").await;
    let sample =
        |name: &str| std::fs::read_to_string(format!("{}/../../config/rotator/samples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();

    // The seed's dummy source, applied as it is (stringData included).
    let mut source: Secret = serde_saphyr::from_str(&sample("source-secret.yaml")).unwrap();
    source.metadata.namespace = Some(h.namespace.clone());
    h.create(&source).await;
    let target = h.wait_for_next("my-rotated-keys", "test-cert-data").await;
    assert_eq!(text(&target, "next-tls.key"), "test-key-data");
    assert_eq!(text(&target, "next-tls.kid"), kid("test-cert-data"));

    let jwks: serde_json::Value = serde_saphyr::from_str(&sample("cert-manager-certificate-jwks.yaml")).unwrap();
    let annotations = &jwks["spec"]["secretTemplate"]["annotations"];
    for key in [&h.keys.source, &h.keys.destination] {
        assert!(annotations.get(key.as_str()).is_some(), "{key}");
    }
    assert_eq!(annotations[h.keys.jwks.as_str()], "true");
}

/// A source that names another target frees the old target's metric series, so targets no
/// source rotates any more never crowd live ones out of the bounded set.
#[tokio::test]
async fn retargeting_a_source_drops_the_old_targets_series() {
    let h = Harness::start("retarget").await;
    let series =
        |target: &str| format!(r#"rotator_target_last_rotation_timestamp_seconds{{namespace="{}",target="{target}"}}"#, h.namespace);
    h.create_source("source", "old-target", "cert", "key").await;
    h.wait_for_sample(&series("old-target"), 0.0).await;

    h.annotate("source", &h.keys.destination, Some("new-target")).await;
    h.wait_for_next("new-target", "cert").await;
    h.wait_for_sample(&series("new-target"), 0.0).await;
    let dropped = async || if h.metrics_text().contains(&series("old-target")) { Err(h.metrics_text()) } else { Ok(()) };
    eventually("old-target's series to go", TIMEOUT, dropped).await;
}

/// A source emptied after its target exists (a failed re-issue, say) never rotates an empty key
/// in: the target keeps its three key pairs until the source has both fields again.
#[tokio::test]
async fn an_emptied_source_leaves_its_existing_target_alone() {
    let h = Harness::start("emptied").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    let before = h.wait_for_next("target", "cert-1").await;

    h.renew("source", "", "").await;
    let note = h.wait_for_event("source", "InvalidSource").await;
    assert!(note.contains("tls.crt and tls.key missing or empty"), "{note}");
    let after = h.get("target").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version(), "the target is not touched");

    h.renew("source", "cert-2", "key-2").await;
    let target = h.wait_for_next("target", "cert-2").await;
    assert_eq!(slots(&target), ["cert", "cert-1", "cert-2"], "the next change rotates as usual");
}

/// The history slots belong to whoever edits them (e.g. to drop a compromised previous key):
/// the rotator keeps a hand edit of `prev-tls.*` and rotates from it.
#[tokio::test]
async fn hand_edits_of_the_history_are_kept_and_rotated_from() {
    let h = Harness::start("history-edit").await;
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    h.wait_for_next("target", "cert-1").await;
    h.renew("source", "cert-2", "key-2").await;
    h.wait_for_next("target", "cert-2").await;

    // Drop the compromised previous key pair by hand.
    let patch = json!({ "data": { "prev-tls.crt": b64(""), "prev-tls.key": b64("") } });
    h.api().patch("target", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let target = h.wait_for("target", "prev-tls.kid recomputed", |t| text(t, "prev-tls.kid").is_empty()).await;
    assert_eq!(slots(&target), ["", "cert-1", "cert-2"], "the edit stays");
    assert_eq!(annotation(&target, &h.keys.rotations).as_deref(), Some("2"), "not a rotation");

    h.renew("source", "cert-3", "key-3").await;
    let target = h.wait_for_next("target", "cert-3").await;
    assert_eq!(slots(&target), ["cert-1", "cert-2", "cert-3"]);
}

#[tokio::test]
async fn events_still_waiting_at_shutdown_are_published_before_the_rotator_stops() {
    let h = Harness::new("shutdown-events").await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let rotator = tokio::spawn(blockwork_rotator::run(h.client.clone(), h.config.clone(), std::sync::Arc::clone(&h.metrics), shutdown));
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    // At once: the event waits for 50 ms without a reconcile before it goes on its own.
    stop.send(()).expect("the rotator runs");
    rotator.await.expect("the rotator's task").expect("the rotator stops cleanly");
    let told = h.events("target").await;
    assert!(told.iter().any(|e| e.reason == "Created"), "published before `run` returned: {told:?}");
}
