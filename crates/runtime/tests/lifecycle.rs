//! The runtime's state machine against a real kube-apiserver, driven through the Widget test
//! resource whose backend each test scripts.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use blockwork_runtime::policy::{
    ACCESS_ANNOTATION, DELETION_POLICY_ANNOTATION, DRIFT_POLICY_ANNOTATION, DeletionPolicy, PAUSED_ANNOTATION,
};
use blockwork_runtime::{ExternalError, ReconcileState};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use std::time::Duration;
use support::*;

#[tokio::test]
async fn synchronous_create_reaches_succeeded_with_ready_and_synced() {
    let h = Harness::start("sync-create").await;
    h.create(widget("a", 1)).await;
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    let status = w.status.as_ref().unwrap();
    assert_eq!(condition(&w, "Ready"), Some(("True".into(), "Available".into())));
    assert_eq!(condition(&w, "Synced"), Some(("True".into(), "ReconcileSuccess".into())));
    assert_eq!(status.observed_generation, w.metadata.generation);
    assert_eq!(status.observation.external_id.as_deref(), Some(h.backend.widget(&token(&w)).unwrap().id.as_str()));
    assert!(status.create_pending.is_none(), "the create marker is cleared with the result");
    assert_eq!(status.last_applied_spec.as_deref(), Some(r#"{"size":1}"#));
    assert!(w.finalizers().contains(&format!("{GROUP}/finalizer")));
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn each_transition_is_recorded_as_an_event() {
    let h = Harness::start("events").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let reasons = h.event_reasons("a").await;
        if reasons.contains(&"Creating".to_owned()) && reasons.contains(&"Succeeded".to_owned()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "events seen: {reasons:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn asynchronous_create_waits_in_verifying_until_ready() {
    let h = Harness::start("async-create").await;
    h.backend.script("create", Script::Async);
    h.create(widget("a", 1)).await;
    let w = h.wait_for_state("a", ReconcileState::Verifying).await;
    assert_eq!(condition(&w, "Ready").map(|c| c.0), Some("False".into()), "not Ready while the create is in progress");
    assert_eq!(h.backend.widgets().len(), 1);
    h.backend.complete();
    h.wait_for_state("a", ReconcileState::Succeeded).await;
}

#[tokio::test]
async fn crash_between_create_and_status_write_makes_no_duplicate() {
    let mut h = Harness::start("crash").await;
    h.backend.script("create", Script::HangAfterCreate);
    let created = h.create(widget("a", 1)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while h.backend.widgets().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "create was never called");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.crash_controller();
    let w = h.api().get("a").await.unwrap();
    let status = w.status.as_ref().unwrap();
    assert_eq!(status.reconcile_state, Some(ReconcileState::Creating), "the crash left the object mid-create");
    assert_eq!(status.create_pending.as_ref().map(|m| m.token.clone()), Some(token(&created)));

    h.start_controller(DeletionPolicy::Delete);
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(h.backend.widgets().len(), 1, "exactly one external widget after the restart");
    assert_eq!(h.backend.calls("create"), 1, "the restarted controller adopted the widget instead of creating again");
}

#[tokio::test]
async fn spec_change_updates_the_external_resource() {
    let h = Harness::start("update").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.api().patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 5}}))).await.unwrap();
    let w =
        h.wait_for("a", "updated", |w| w.status.as_ref().is_some_and(|s| s.last_applied_spec.as_deref() == Some(r#"{"size":5}"#))).await;
    assert_eq!(h.backend.widget(&token(&created)).unwrap().size, 5);
    assert_eq!(w.status.as_ref().unwrap().observed_generation, Some(2));
    assert_eq!(h.backend.calls("update"), 1);
}

#[tokio::test]
async fn asynchronous_update_goes_through_verifying() {
    let h = Harness::start("async-update").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.script("update", Script::Async);
    h.api().patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 2}}))).await.unwrap();
    h.wait_for_state("a", ReconcileState::Verifying).await;
    h.backend.complete();
    h.wait_for("a", "Succeeded at generation 2", |w| {
        w.status.as_ref().is_some_and(|s| s.state() == ReconcileState::Succeeded && s.observed_generation == Some(2))
    })
    .await;
}

#[tokio::test]
async fn drift_is_repaired_under_enforce() {
    let h = Harness::start("drift-enforce").await;
    let created = h.create(widget("a", 3)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while h.backend.widget(&token(&created)).unwrap().size != 3 {
        assert!(tokio::time::Instant::now() < deadline, "drift was not repaired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(h.backend.calls("update") >= 1);
}

#[tokio::test]
async fn drift_is_reported_under_report_without_touching_the_resource() {
    let h = Harness::start("drift-report").await;
    let created = h.create(with_annotation(widget("a", 3), DRIFT_POLICY_ANNOTATION, "report")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    let w =
        h.wait_for("a", "Synced=False DriftDetected", |w| condition(w, "Synced") == Some(("False".into(), "DriftDetected".into()))).await;
    assert_eq!(w.status.as_ref().unwrap().drift_detected, Some(true));
    assert_eq!(h.backend.widget(&token(&created)).unwrap().size, 9, "report must not change the resource");
    assert_eq!(h.backend.calls("update"), 0);
}

#[tokio::test]
async fn drift_is_only_recorded_under_suspend() {
    let h = Harness::start("drift-suspend").await;
    let created = h.create(with_annotation(widget("a", 3), DRIFT_POLICY_ANNOTATION, "suspend")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    let w = h.wait_for("a", "driftDetected", |w| w.status.as_ref().is_some_and(|s| s.drift_detected == Some(true))).await;
    assert_eq!(condition(&w, "Synced").map(|c| c.0), Some("True".into()));
    assert_eq!(h.backend.calls("update"), 0);
}

#[tokio::test]
async fn externally_deleted_resource_is_recreated_under_enforce() {
    let h = Harness::start("external-delete").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.remove(&token(&created));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while h.backend.widget(&token(&created)).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the widget was not recreated");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(h.backend.calls("create"), 2);
}

#[tokio::test]
async fn terminal_error_fails_the_object_with_the_message() {
    let h = Harness::start("terminal").await;
    h.backend.script("create", Script::Fail(ExternalError::terminal("AccessDenied", "not allowed to create widgets")));
    h.create(widget("a", 1)).await;
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    let status = w.status.as_ref().unwrap();
    assert_eq!(status.message.as_deref(), Some("not allowed to create widgets"));
    assert_eq!(condition(&w, "Ready"), Some(("False".into(), "AccessDenied".into())));
    assert!(status.create_pending.is_none(), "a terminal create error clears the marker");
}

#[tokio::test]
async fn failed_object_is_retried_and_recovers() {
    let h = Harness::start("recover").await;
    h.backend.script("create", Script::Fail(ExternalError::terminal("AccessDenied", "not allowed")));
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Failed).await;
    // The script is used up: the next retry of the Failed object succeeds.
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn retryable_error_keeps_the_state_and_retries() {
    let h = Harness::start("retryable").await;
    h.backend.script("create", Script::Fail(ExternalError::retryable("ServiceUnavailable", "try again")));
    h.backend.script("create", Script::Fail(ExternalError::throttled("Throttling", "slow down")));
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(h.backend.calls("create"), 3);
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn retryable_error_is_shown_in_synced_without_failing() {
    let h = Harness::start("synced-false").await;
    for _ in 0..50 {
        h.backend.script("verify", Script::Fail(ExternalError::retryable("ServiceUnavailable", "the widget API is down")));
    }
    h.create(widget("a", 1)).await;
    let w = h.wait_for("a", "Synced=False", |w| condition(w, "Synced") == Some(("False".into(), "ServiceUnavailable".into()))).await;
    assert_ne!(w.status.as_ref().unwrap().state(), ReconcileState::Failed);
}

#[tokio::test]
async fn waits_in_pending_until_dependencies_are_ready() {
    let h = Harness::start("deps").await;
    let mut dependent = widget("child", 1);
    dependent.spec.depends_on = vec!["parent".into()];
    h.create(dependent).await;
    let w = h.wait_for_state("child", ReconcileState::Pending).await;
    assert_eq!(condition(&w, "Ready"), Some(("False".into(), "DependenciesNotReady".into())));
    assert!(w.status.as_ref().unwrap().message.as_deref().unwrap().contains("parent"));
    assert!(h.backend.widgets().is_empty(), "nothing is created while waiting");

    h.create(widget("parent", 1)).await;
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    h.wait_for_state("child", ReconcileState::Succeeded).await;
}

#[tokio::test]
async fn dependency_that_goes_away_sends_the_object_back_to_pending() {
    let h = Harness::start("deps-gone").await;
    h.create(widget("parent", 1)).await;
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    let mut dependent = widget("child", 1);
    dependent.spec.depends_on = vec!["parent".into()];
    h.create(dependent).await;
    h.wait_for_state("child", ReconcileState::Succeeded).await;
    h.api().delete("parent", &DeleteParams::default()).await.unwrap();
    h.wait_for_state("child", ReconcileState::Pending).await;
}

#[tokio::test]
async fn read_only_object_fails_when_the_resource_is_missing() {
    let h = Harness::start("read-only").await;
    h.create(with_annotation(widget("a", 1), ACCESS_ANNOTATION, "none")).await;
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    assert_eq!(condition(&w, "Ready").map(|c| c.1), Some("CreateNotPermitted".into()));
    assert_eq!(h.backend.calls("create"), 0);
}

#[tokio::test]
async fn update_without_permission_fails_instead_of_updating() {
    let h = Harness::start("no-update").await;
    h.create(with_annotation(widget("a", 1), ACCESS_ANNOTATION, "CD")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.api().patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}}))).await.unwrap();
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    assert_eq!(condition(&w, "Ready").map(|c| c.1), Some("UpdateNotPermitted".into()));
    assert_eq!(h.backend.calls("update"), 0);
}

#[tokio::test]
async fn deleting_the_object_deletes_the_resource_under_delete_policy() {
    let h = Harness::start("delete").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_gone("a").await;
    assert!(h.backend.widgets().is_empty());
}

#[tokio::test]
async fn orphan_policy_keeps_the_resource() {
    let h = Harness::start("orphan").await;
    h.create(with_annotation(widget("a", 1), DELETION_POLICY_ANNOTATION, "Orphan")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_gone("a").await;
    assert_eq!(h.backend.widgets().len(), 1);
    assert_eq!(h.backend.calls("delete"), 0);
}

#[tokio::test]
async fn operator_default_orphan_applies_without_annotation() {
    let h = Harness::start_with("orphan-default", DeletionPolicy::Orphan).await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_gone("a").await;
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn asynchronous_delete_waits_in_terminating() {
    let h = Harness::start("async-delete").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.script("delete", Script::Async);
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_for_state("a", ReconcileState::Terminating).await;
    h.backend.complete();
    h.wait_gone("a").await;
    assert!(h.backend.widgets().is_empty());
}

#[tokio::test]
async fn resource_already_gone_on_delete_is_not_an_error() {
    let h = Harness::start("delete-404").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.remove(&token(&created));
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_gone("a").await;
}

#[tokio::test]
async fn failing_delete_keeps_the_object_and_says_how_to_release_it() {
    let h = Harness::start("delete-fails").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    for _ in 0..100 {
        h.backend.script("delete", Script::Fail(ExternalError::terminal("ResourceInUse", "the widget is in use")));
    }
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    let w = h.wait_for_state("a", ReconcileState::Terminating).await;
    let message = w.status.as_ref().unwrap().message.clone().unwrap();
    assert!(message.contains("the widget is in use") && message.contains(DELETION_POLICY_ANNOTATION), "{message}");

    h.api()
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {DELETION_POLICY_ANNOTATION: "Orphan"}}})))
        .await
        .unwrap();
    h.wait_gone("a").await;
    assert_eq!(h.backend.widgets().len(), 1, "the orphaned widget stays");
}

#[tokio::test]
async fn paused_object_is_left_alone_until_unpaused() {
    let h = Harness::start("pause").await;
    h.create(with_annotation(widget("a", 1), PAUSED_ANNOTATION, "true")).await;
    let w = h.wait_for("a", "paused", |w| condition(w, "Synced") == Some(("False".into(), "ReconcilePaused".into()))).await;
    assert!(w.finalizers().is_empty(), "a paused object is not touched, not even by the finalizer");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.backend.calls("verify"), 0);
    assert_eq!(h.backend.calls("create"), 0);

    h.api()
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {PAUSED_ANNOTATION: "false"}}})))
        .await
        .unwrap();
    h.wait_for_state("a", ReconcileState::Succeeded).await;
}

#[tokio::test]
async fn invalid_policy_annotation_is_reported_and_nothing_is_done() {
    let h = Harness::start("invalid-policy").await;
    h.create(with_annotation(widget("a", 1), DELETION_POLICY_ANNOTATION, "Orpahn")).await;
    let w = h.wait_for("a", "InvalidAnnotation", |w| condition(w, "Synced").map(|c| c.1) == Some("InvalidAnnotation".into())).await;
    let message = w.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Synced").unwrap().message.clone();
    assert!(message.contains("Orpahn") && message.contains("Delete or Orphan"), "{message}");
    assert_eq!(h.backend.calls("create"), 0);
}

#[tokio::test]
async fn metrics_count_reconciles_external_calls_and_states() {
    let h = Harness::start("metrics").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &h.registry).unwrap();
    assert!(text.contains(r#"blockwork_reconciles_total{controller="widget",result="success"}"#), "{text}");
    assert!(text.contains(r#"blockwork_external_calls_total{controller="widget",operation="create",result="success"} 1"#), "{text}");
    assert!(text.contains(r#"blockwork_managed_objects{controller="widget",state="Succeeded"} 1"#), "{text}");
}

#[tokio::test]
async fn resource_that_needs_recreating_is_deleted_and_created_again() {
    let h = Harness::start("recreate").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let first_id = h.backend.widget(&token(&created)).unwrap().id;
    h.backend.script("delete", Script::Async);
    h.backend.break_widget(&token(&created));
    h.wait_for_state("a", ReconcileState::Recreating).await;
    h.backend.complete();
    let w = h
        .wait_for("a", "Succeeded with a new widget", |w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.state() == ReconcileState::Succeeded && s.observation.external_id.as_deref() != Some(first_id.as_str()))
        })
        .await;
    let replacement = h.backend.widget(&token(&w)).unwrap();
    assert_ne!(replacement.id, first_id);
    assert!(!replacement.broken);
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn success_hook_runs_after_create_and_its_failure_is_retried() {
    let h = Harness::start("hook").await;
    h.backend.script("hook", Script::Fail(ExternalError::retryable("SecretWriteFailed", "could not publish the widget's secret")));
    h.create(widget("a", 1)).await;
    let w = h.wait_for("a", "SuccessHookFailed", |w| condition(w, "Synced").map(|c| c.1) == Some("SuccessHookFailed".into())).await;
    assert_eq!(w.status.as_ref().unwrap().state(), ReconcileState::Succeeded, "the resource itself is ready");
    h.wait_for("a", "Synced again", |w| condition(w, "Synced") == Some(("True".into(), "ReconcileSuccess".into()))).await;
    assert!(h.backend.calls("hook") >= 2);
}
