//! The runtime's state machine against a real kube-apiserver, driven through the Widget test
//! resource whose backend each test scripts.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use blockwork_runtime::policy::{
    ACCESS_ANNOTATION, DELETION_POLICY_ANNOTATION, DRIFT_POLICY_ANNOTATION, DeletionPolicy, PAUSED_ANNOTATION,
    RECONCILE_REQUESTED_ANNOTATION,
};
use blockwork_runtime::{ErrorClass, ExternalError, ReconcileState, VerifyOutcome};
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::harness::{TIMEOUT, eventually};
use blockwork_testenv::kube_proxy::{ApiFault, KubeProxy, Requests};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
    // The backend's scripts are shared: the parent must not take the child's, so Succeeded
    // objects are looked at only when the test pokes them.
    let h = Harness::start_slow("events", &[ReconcileState::Succeeded]).await;
    // Pending: waiting for a dependency.
    let mut child = widget("a", 1);
    child.spec.depends_on = vec!["parent".into()];
    h.create(child).await;
    h.wait_for_state("a", ReconcileState::Pending).await;
    // Creating, then Verifying (asynchronous creates: the parent's, then the child's), then
    // Succeeded. The child creates only once the parent is ready, so the scripts go in order.
    h.backend.script("create", Script::Async);
    h.backend.script("create", Script::Async);
    h.create(widget("parent", 1)).await;
    h.wait_for_state("parent", ReconcileState::Verifying).await;
    h.backend.complete();
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    let created = h.wait_for_state("a", ReconcileState::Verifying).await;
    h.backend.complete();
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    // Updating: an update that fails once and is retried.
    h.backend.script("update", Script::Fail(ExternalError::retryable("ServiceUnavailable", "try again")));
    h.merge("a", json!({"spec": {"size": 2}})).await;
    h.wait_for("a", "updated", |w| {
        w.status.as_ref().is_some_and(|s| s.last_applied_spec.as_deref() == Some(r#"{"size":2,"dependsOn":["parent"]}"#))
    })
    .await;
    // Recreating: an asynchronous delete of a broken widget.
    h.backend.script("delete", Script::Async);
    h.backend.break_widget(&token(&created));
    h.poke("a", "1").await;
    h.wait_for_state("a", ReconcileState::Recreating).await;
    h.backend.complete();
    h.wait_for("a", "recreated", |w| {
        w.status.as_ref().is_some_and(|s| s.state() == ReconcileState::Succeeded) && h.backend.calls("create") == 3
    })
    .await;
    // Failed: a terminal verify error (the next retry recovers).
    h.backend.script("verify", Script::Fail(ExternalError::terminal("BuildFailed", "the widget failed")));
    h.poke("a", "2").await;
    h.wait_for_event("a", "Failed").await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    // Terminating, then Deleted.
    h.backend.script("delete", Script::Async);
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    h.wait_for_state("a", ReconcileState::Terminating).await;
    h.backend.complete();
    h.wait_gone("a").await;

    for reason in ["Pending", "Creating", "Verifying", "Succeeded", "Updating", "Recreating", "Failed", "Terminating", "Deleted"] {
        h.wait_for_event("a", reason).await;
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
    eventually("create to be called", TIMEOUT, async || h.backend.widgets().pop().ok_or("no widget".to_owned())).await;
    h.controller.crash();
    let w = h.api().get("a").await.unwrap();
    let status = w.status.as_ref().unwrap();
    assert_eq!(status.reconcile_state, Some(ReconcileState::Creating), "the crash left the object mid-create");
    assert_eq!(status.create_pending.as_ref().map(|m| m.token.clone()), Some(token(&created)));

    h.start_controller(DeletionPolicy::Delete);
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(h.backend.widgets().len(), 1, "exactly one external widget after the restart");
    assert_eq!(h.backend.calls("create"), 1, "the restarted controller adopted the widget instead of creating again");
    let status = w.status.as_ref().unwrap();
    assert!(status.create_pending.is_none(), "adopting the widget clears the create marker: {:?}", status.create_pending);
    assert_eq!(condition(&w, "Ready"), Some(("True".into(), "Available".into())));
}

#[tokio::test]
async fn a_spec_change_after_the_create_marker_marks_again_before_creating() {
    // Creating waits an hour: only the test's own changes move the object on.
    let h = Harness::start_slow("remark", &[ReconcileState::Creating]).await;
    h.create(widget("a", 1)).await;
    let marked = |w: &Widget, size: i32| {
        w.status.as_ref().and_then(|s| s.create_pending.as_ref()).and_then(|m| m.spec.clone()) == Some(format!(r#"{{"size":{size}}}"#))
    };
    h.wait_for("a", "marked for size 1", |w| marked(w, 1)).await;
    h.merge("a", json!({"spec": {"size": 2}})).await;
    h.wait_for("a", "marked for size 2", |w| marked(w, 2)).await;
    assert_eq!(h.backend.calls("create"), 0, "nothing is created under a marker written for another spec");

    h.annotate("a", "test/touch", Some("1")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let creates = h.backend.call_log("create");
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert_eq!(creates[0].marked_spec.as_deref(), Some(creates[0].spec.as_str()), "the create was for the spec its marker names");
    assert_eq!(h.backend.widgets().iter().map(|w| w.size).collect::<Vec<_>>(), [2]);
}

#[tokio::test]
async fn spec_change_updates_the_external_resource() {
    let h = Harness::start("update").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.merge("a", json!({"spec": {"size": 5}})).await;
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
    h.merge("a", json!({"spec": {"size": 2}})).await;
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
    h.backend.wait_for_size(&token(&created), 3, "the drift to be repaired").await;
    assert!(h.backend.calls("update") >= 1);
}

#[tokio::test]
async fn a_woken_object_is_reconciled_before_its_requeue() {
    // Succeeded is requeued after an hour: only the wake can bring the drift to light sooner.
    let h = Harness::start_slow("wake", &[ReconcileState::Succeeded]).await;
    let created = h.create(widget("a", 3)).await;
    let ready = h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.backend.widget(&token(&created)).unwrap().size, 9, "nothing looks without a wake");
    h.context.as_ref().unwrap().wake(&kube::runtime::reflector::ObjectRef::from_obj(&ready));
    h.backend.wait_for_size(&token(&created), 3, "the woken object to be reconciled").await;
}

/// kube-runtime's `Controller` backs off all its triggers together (the reliability campaign
/// found it through the Cache controller, issue 15, seed 6191853475873919598): while the
/// runtime's main watch kept failing, its errors paused the dependency changes and wake-ups as
/// well. Here only the Widget watch fails: after six failures the shared backoff would wait at
/// least 25.6 s (up to a minute) before reading any trigger; a wake must be reconciled well before.
#[tokio::test]
async fn a_failing_watch_does_not_hold_back_the_wakes_of_a_runtime_controller() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    // Succeeded is requeued after an hour: only the wake brings the drift to light.
    let h = Harness::start_slow_through("watch-failing", &[ReconcileState::Succeeded], proxy.client().await.unwrap()).await;
    let created = h.create(widget("a", 3)).await;
    let ready = h.wait_for_state("a", ReconcileState::Succeeded).await;

    proxy.inject_on_path(Requests::Watches, "/widgets", ApiFault::ServerError(500), usize::MAX);
    proxy.cut_watches();
    let failed = || proxy.injected().get("ServerError(500)").copied().unwrap_or(0);
    eventually("six failed Widget watches", Duration::from_secs(120), async || {
        if failed() >= 6 { Ok(()) } else { Err(format!("{} so far", failed())) }
    })
    .await;

    h.backend.tamper(&token(&created), 9);
    h.context.as_ref().unwrap().wake(&kube::runtime::reflector::ObjectRef::from_obj(&ready));
    eventually("the woken object reconciled while its watch fails", Duration::from_secs(15), async || {
        match h.backend.widget(&token(&created)).map(|w| w.size) {
            Some(3) => Ok(()),
            size => Err(format!("size {size:?}")),
        }
    })
    .await;
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
    eventually("the widget to be recreated", TIMEOUT, async || h.backend.widget(&token(&created)).ok_or("gone".to_owned())).await;
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
    assert_eq!(h.backend.widgets().len(), 1);
    let creates = h.backend.call_log("create");
    assert_eq!(creates.len(), 3);
    for call in &creates {
        assert_eq!(call.state, Some(ReconcileState::Creating), "every attempt starts from Creating: {creates:?}");
        assert!(call.create_pending, "the marker stays across retryable errors: {creates:?}");
    }
    // After the retryable error: the error backoff (100 ms × 2 here, capped at 400 ms). After
    // throttling: never sooner than the 1 s throttle floor, less 10 % jitter.
    let after_retryable = creates[1].at - creates[0].at;
    let after_throttled = creates[2].at - creates[1].at;
    assert!(after_throttled >= Duration::from_millis(900), "throttled retry came after {after_throttled:?}");
    assert!(after_retryable < Duration::from_millis(900), "retryable retry came after {after_retryable:?}");
}

#[tokio::test]
async fn a_failure_in_a_row_is_recorded_with_its_class_attempts_and_next_retry_then_cleared() {
    let h = Harness::start("last-error").await;
    for _ in 0..3 {
        h.backend.script("verify", Script::Fail(ExternalError::throttled("Throttling", "slow down")));
    }
    h.create(widget("a", 1)).await;
    let seen = h
        .wait_for("a", "two throttled attempts", |w| w.status.as_ref().and_then(|s| s.last_error.as_ref()).is_some_and(|e| e.attempts >= 2))
        .await;
    let error = seen.status.as_ref().and_then(|s| s.last_error.clone()).unwrap();
    assert_eq!((error.class, error.reason.as_str(), error.message.as_str()), (ErrorClass::Throttled, "Throttling", "slow down"));
    // The throttle floor is 1 s (±10 %): the retry is planned that far after the attempt.
    let planned = error.retry_at.0.duration_since(jiff::Timestamp::now());
    assert!(planned <= jiff::SignedDuration::from_millis(1100), "retry planned {planned:?} ahead");
    assert!(error.since.0 <= error.retry_at.0, "{error:?}");
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    let status = w.status.as_ref().unwrap();
    assert!(status.last_error.is_none(), "a reconcile that does not fail clears it: {:?}", status.last_error);
    assert!(status.reconcile_state_since.is_some(), "the state's start is recorded");
}

#[tokio::test]
async fn a_retry_request_reconciles_a_failed_object_at_once_and_is_recorded_as_handled() {
    // Failed objects come back only after an hour here: only the request can bring this one back.
    let h = Harness::start_slow("retry-request", &[ReconcileState::Failed]).await;
    h.backend.script("create", Script::Fail(ExternalError::terminal("AccessDenied", "not allowed to create widgets")));
    h.create(widget("a", 1)).await;
    let failed = h.wait_for_state("a", ReconcileState::Failed).await;
    let error = failed.status.as_ref().and_then(|s| s.last_error.clone()).unwrap();
    assert_eq!((error.class, error.reason.as_str(), error.attempts), (ErrorClass::Terminal, "AccessDenied", 1));
    assert!(error.retry_at.0.duration_since(jiff::Timestamp::now()) > jiff::SignedDuration::from_secs(3000), "{error:?}");

    let requested = "2026-01-01T00:00:00Z";
    h.annotate("a", RECONCILE_REQUESTED_ANNOTATION, Some(requested)).await;
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    let status = w.status.as_ref().unwrap();
    assert_eq!(status.last_handled_reconcile_at.as_deref(), Some(requested));
    assert!(status.last_error.is_none());
    assert_eq!(condition(&w, "Synced"), Some(("True".into(), "ReconcileSuccess".into())), "the annotation is a valid one");
}

#[tokio::test]
async fn each_reconcile_writes_the_object_at_most_once() {
    // No periodic reconciles once Succeeded: every reconcile below is one the test caused.
    let h = Harness::start_slow("one-write", &[ReconcileState::Succeeded]).await;
    let versions = h.count_versions("a").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.merge("a", json!({"spec": {"size": 2}})).await;
    h.wait_for("a", "updated", |w| w.status.as_ref().is_some_and(|s| s.last_applied_spec.as_deref() == Some(r#"{"size":2}"#))).await;
    h.delete_and_wait("a").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The test wrote three versions (create, spec patch, delete). The controller's reconciles
    // are the one that adds the finalizer (no verify) and one per verify call; each may write
    // once: marker, create result, update result, finalizer removal.
    let reconciles_with_verify = h.backend.calls("verify");
    let written = versions.load(Ordering::SeqCst);
    assert_eq!(h.backend.calls("create") + h.backend.calls("update") + h.backend.calls("delete"), 3);
    assert!(
        written <= 3 + 1 + reconciles_with_verify,
        "{written} versions for {reconciles_with_verify} reconciles with a verify call (+1 finalizer, +3 by the test)"
    );
    assert!(written >= 3 + 1 + 4, "the controller wrote the finalizer, the marker, two results and the release: {written}");
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
    // Only the dependency watch can wake the waiting object: its requeues are an hour apart.
    let h = Harness::start_slow("deps", &[ReconcileState::Pending, ReconcileState::Succeeded]).await;
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
    // Succeeded objects are requeued only after an hour: only the watch notices the deletion.
    let h = Harness::start_slow("deps-gone", &[ReconcileState::Succeeded]).await;
    h.create(widget("parent", 1)).await;
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    let mut dependent = widget("child", 1);
    dependent.spec.depends_on = vec!["parent".into()];
    h.create(dependent).await;
    h.wait_for_state("child", ReconcileState::Succeeded).await;
    h.api().delete("parent", &DeleteParams::default()).await.unwrap();
    let w = h.wait_for_state("child", ReconcileState::Pending).await;
    assert_eq!(condition(&w, "Ready"), Some(("False".into(), "DependenciesNotReady".into())));
}

#[tokio::test]
async fn dependency_that_stops_being_ready_sends_the_object_back_to_pending() {
    let h = Harness::start_slow("deps-unready", &[ReconcileState::Succeeded]).await;
    let parent = h.create(widget("parent", 1)).await;
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    let mut dependent = widget("child", 1);
    dependent.spec.depends_on = vec!["parent".into()];
    h.create(dependent).await;
    h.wait_for_state("child", ReconcileState::Succeeded).await;
    // The parent's widget is being rebuilt: the parent leaves Ready, so must the child.
    h.backend.script("delete", Script::Async);
    h.backend.break_widget(&token(&parent));
    h.merge("parent", json!({"spec": {"size": 2}})).await;
    h.wait_for_state("child", ReconcileState::Pending).await;
    h.backend.complete();
    h.wait_for_state("parent", ReconcileState::Succeeded).await;
    h.wait_for_state("child", ReconcileState::Succeeded).await;
}

#[tokio::test]
async fn cluster_scoped_dependency_is_found_and_watched() {
    let h = Harness::start_slow("deps-cluster", &[ReconcileState::Pending, ReconcileState::Succeeded]).await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    let node_name = format!("{}-node", h.namespace);
    let mut dependent = widget("child", 1);
    dependent.spec.depends_on_nodes = vec![node_name.clone()];
    h.create(dependent).await;
    let w = h.wait_for_state("child", ReconcileState::Pending).await;
    assert!(w.status.as_ref().unwrap().message.as_deref().unwrap().contains(&node_name));

    let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let w = h
        .wait_for("child", "waiting for the node to be Ready", |w| {
            w.status.as_ref().and_then(|s| s.message.as_deref()).is_some_and(|m| m.contains("to be Ready"))
        })
        .await;
    assert_eq!(w.status.as_ref().unwrap().state(), ReconcileState::Pending);
    assert!(h.backend.widgets().is_empty());

    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}]}});
    nodes.patch_status(&node_name, &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    h.wait_for_state("child", ReconcileState::Succeeded).await;

    nodes.delete(&node_name, &DeleteParams::default()).await.unwrap();
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
    h.merge("a", json!({"spec": {"size": 4}})).await;
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    assert_eq!(condition(&w, "Ready").map(|c| c.1), Some("UpdateNotPermitted".into()));
    assert_eq!(h.backend.calls("update"), 0);
}

#[tokio::test]
async fn deleting_the_object_deletes_the_resource_under_delete_policy() {
    let h = Harness::start("delete").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.delete_and_wait("a").await;
    assert!(h.backend.widgets().is_empty());
}

#[tokio::test]
async fn orphan_policy_keeps_the_resource() {
    let h = Harness::start("orphan").await;
    h.create(with_annotation(widget("a", 1), DELETION_POLICY_ANNOTATION, "Orphan")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.widgets().len(), 1);
    assert_eq!(h.backend.calls("delete"), 0);
}

#[tokio::test]
async fn operator_default_orphan_applies_without_annotation() {
    let h = Harness::start_with("orphan-default", DeletionPolicy::Orphan).await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.delete_and_wait("a").await;
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
    // No periodic reconcile may notice the removal (and recreate the widget) before the delete.
    let h = Harness::start_slow("delete-404", &[ReconcileState::Succeeded]).await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    // verify keeps seeing the widget (a stale read), but it is gone: delete answers NotFound,
    // and only treating that as success releases the object at the first attempt.
    for _ in 0..5 {
        h.backend.script("verify", Script::Observe(VerifyOutcome::Ready));
    }
    h.backend.remove(&token(&created));
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.calls("delete"), 1, "delete was called once and its 404 released the object");
    assert_eq!(h.backend.calls("create"), 1);
    h.wait_for_event("a", "Deleted").await;
}

#[tokio::test]
async fn nothing_to_delete_releases_without_claiming_a_deletion() {
    // No periodic reconcile may notice the removal (and recreate the widget) before the delete.
    let h = Harness::start_slow("delete-nothing", &[ReconcileState::Succeeded]).await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.remove(&token(&created));
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.calls("delete"), 0, "verify found nothing, so nothing was deleted");
    let events = h.wait_for_event("a", "Released").await;
    assert!(events.iter().all(|e| e.note.contains("nothing to delete")), "{events:?}");
    assert!(!h.events("a").await.iter().any(|e| e.reason == "Deleted"), "no Deleted event");
}

#[tokio::test]
async fn retryable_delete_error_stays_terminating_then_releases() {
    let h = Harness::start("delete-retry").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.script("delete", Script::Fail(ExternalError::retryable("ServiceUnavailable", "try again")));
    h.delete_and_wait("a").await;
    let deletes = h.backend.call_log("delete");
    assert_eq!(deletes.len(), 2, "{deletes:?}");
    assert_eq!(deletes[1].state, Some(ReconcileState::Terminating), "the retry starts from Terminating");
    assert!(h.backend.widgets().is_empty());
}

#[tokio::test]
async fn invalid_deletion_annotation_on_delete_orphans_with_a_warning() {
    let h = Harness::start("delete-invalid").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.annotate("a", DELETION_POLICY_ANNOTATION, Some("Delte")).await;
    h.wait_for("a", "InvalidAnnotation", |w| condition(w, "Synced").map(|c| c.1) == Some("InvalidAnnotation".into())).await;
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.calls("delete"), 0, "not sure we may delete: we do not");
    assert_eq!(h.backend.widgets().len(), 1);
    let events = h.wait_for_event("a", "InvalidAnnotation").await;
    assert!(events.iter().any(|e| e.type_ == "Warning" && e.note.contains("Delte") && e.note.contains("Orphan")), "{events:?}");
}

#[tokio::test]
async fn invalid_access_annotation_on_delete_orphans() {
    let h = Harness::start("delete-invalid-access").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.annotate("a", ACCESS_ANNOTATION, Some("CUDX")).await;
    h.wait_for("a", "InvalidAnnotation", |w| condition(w, "Synced").map(|c| c.1) == Some("InvalidAnnotation".into())).await;
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.calls("delete"), 0);
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn paused_object_being_deleted_waits_until_unpaused() {
    let h = Harness::start("pause-delete").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.annotate("a", PAUSED_ANNOTATION, Some("true")).await;
    h.wait_for("a", "paused", |w| condition(w, "Synced").map(|c| c.1) == Some("ReconcilePaused".into())).await;
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = h.api().get("a").await.expect("a paused object is not released");
    assert!(w.finalizers().contains(&format!("{GROUP}/finalizer")));
    assert_eq!(h.backend.calls("delete"), 0);

    h.annotate("a", PAUSED_ANNOTATION, Some("false")).await;
    h.wait_gone("a").await;
    assert!(h.backend.widgets().is_empty(), "once unpaused, the deletion proceeds");
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

    h.annotate("a", DELETION_POLICY_ANNOTATION, Some("Orphan")).await;
    h.wait_gone("a").await;
    assert_eq!(h.backend.widgets().len(), 1, "the orphaned widget stays");
}

/// Issue 26: an answer that leaves the resource's existence unknown keeps the finalizer, and
/// after `Timing::deletion_blocked_after` (2 s here) the object says so plainly, in `Synced` and
/// an event; once the answer changes, the deletion finishes on its own.
#[tokio::test]
async fn a_deletion_blocked_on_an_unknown_answer_says_so_with_both_ways_out_and_finishes_once_allowed() {
    let h = Harness::start("delete-blocked").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    for _ in 0..1000 {
        h.backend.script("delete", Script::Fail(ExternalError::terminal("AccessDenied", "deleting widget w-1: not authorized")));
    }
    h.api().delete("a", &DeleteParams::default()).await.unwrap();
    let w = h.wait_for("a", "DeletionBlocked", |w| condition(w, "Synced").is_some_and(|c| c.1 == "DeletionBlocked")).await;
    let message = w.status.as_ref().and_then(|s| s.condition("Synced")).map(|c| c.message.clone()).unwrap();
    assert!(message.starts_with("the deletion has been blocked for "), "{message}");
    assert!(message.contains("(deleting widget w-1: not authorized)"), "names what is unknown: {message}");
    assert!(message.contains("grant it") && message.contains(&format!("{DELETION_POLICY_ANNOTATION}=Orphan")), "{message}");
    let events = h.wait_for_event("a", "DeletionBlocked").await;
    assert!(
        events.iter().any(|e| e.type_ == "Warning" && e.note.contains("blocked for") && e.note.contains("w-1: not authorized")),
        "{events:?}"
    );
    h.backend.unscript("delete");
    h.wait_gone("a").await;
    assert!(h.backend.widgets().is_empty(), "deleted once allowed");
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

    h.annotate("a", PAUSED_ANNOTATION, Some("false")).await;
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
async fn invalid_policy_annotation_is_a_warning_event_naming_the_accepted_values() {
    let h = Harness::start("invalid-policy-event").await;
    h.create(with_annotation(widget("a", 1), DRIFT_POLICY_ANNOTATION, "sometimes")).await;
    let events = h.wait_for_event("a", "InvalidAnnotation").await;
    assert!(
        events.iter().any(|e| e.type_ == "Warning" && e.note.contains("sometimes") && e.note.contains("enforce, report or suspend")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_pause_value_other_than_true_or_false_holds_the_object_and_says_so() {
    let h = Harness::start("pause-invalid").await;
    h.create(with_annotation(widget("a", 1), PAUSED_ANNOTATION, "yes")).await;
    let w = h.wait_for("a", "InvalidAnnotation", |w| condition(w, "Synced").map(|c| c.1) == Some("InvalidAnnotation".into())).await;
    let message = w.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Synced").unwrap().message.clone();
    assert!(message.contains("\"yes\"") && message.contains("true or false") && message.contains("held as if paused"), "{message}");
    let events = h.wait_for_event("a", "InvalidAnnotation").await;
    assert!(events.iter().any(|e| e.type_ == "Warning"), "{events:?}");
    assert_eq!(h.backend.calls("create"), 0, "held, as a pause would");

    h.annotate("a", PAUSED_ANNOTATION, Some("False")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
}

#[tokio::test]
async fn a_misspelt_blockwork_annotation_is_reported_and_nothing_is_done() {
    let h = Harness::start("annotation-typo").await;
    h.create(with_annotation(widget("a", 1), "blockwork.dev/deletion-polcy", "Orphan")).await;
    let w = h.wait_for("a", "InvalidAnnotation", |w| condition(w, "Synced").map(|c| c.1) == Some("InvalidAnnotation".into())).await;
    let message = w.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Synced").unwrap().message.clone();
    assert!(message.contains("blockwork.dev/deletion-polcy") && message.contains(DELETION_POLICY_ANNOTATION), "{message}");
    assert_eq!(h.backend.calls("create"), 0);
}

#[tokio::test]
async fn metrics_count_reconciles_external_calls_and_states() {
    let h = Harness::start("metrics").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    // The metrics are updated just after the status write the test has seen: poll briefly.
    let succeeded = r#"blockwork_managed_objects{controller="widget",state="Succeeded"} 1"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut text = String::new();
    while !text.contains(succeeded) && tokio::time::Instant::now() < deadline {
        text.clear();
        prometheus_client::encoding::text::encode(&mut text, &h.registry).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

#[tokio::test]
async fn missing_resource_under_report_or_suspend_is_not_ready() {
    let h = Harness::start("missing-drift").await;
    let report = h.create(with_annotation(widget("report", 1), DRIFT_POLICY_ANNOTATION, "report")).await;
    let suspend = h.create(with_annotation(widget("suspend", 1), DRIFT_POLICY_ANNOTATION, "suspend")).await;
    h.wait_for_state("report", ReconcileState::Succeeded).await;
    h.wait_for_state("suspend", ReconcileState::Succeeded).await;
    h.backend.remove(&token(&report));
    h.backend.remove(&token(&suspend));

    let not_ready = |w: &Widget| condition(w, "Ready") == Some(("False".into(), "ExternalResourceMissing".into()));
    let w = h.wait_for("report", "Ready=False ExternalResourceMissing", not_ready).await;
    assert_eq!(condition(&w, "Synced"), Some(("False".into(), "DriftDetected".into())));
    assert_eq!(w.status.as_ref().unwrap().drift_detected, Some(true));
    let w = h.wait_for("suspend", "Ready=False ExternalResourceMissing", not_ready).await;
    assert_eq!(condition(&w, "Synced"), Some(("True".into(), "DriftIgnored".into())));
    assert_eq!(w.status.as_ref().unwrap().drift_detected, Some(true));
    assert_eq!(h.backend.calls("create"), 2, "neither policy recreates the resource");
    h.wait_for_event("report", "ExternalResourceMissing").await;
}

#[tokio::test]
async fn failed_update_waits_in_updating_then_succeeds() {
    let h = Harness::start("updating").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.script("update", Script::Fail(ExternalError::retryable("ServiceUnavailable", "try again")));
    h.merge("a", json!({"spec": {"size": 3}})).await;
    h.wait_for("a", "Succeeded with size 3", |w| {
        w.status.as_ref().is_some_and(|s| s.state() == ReconcileState::Succeeded && s.last_applied_spec.as_deref() == Some(r#"{"size":3}"#))
    })
    .await;
    let updates = h.backend.call_log("update");
    assert_eq!(updates.len(), 2, "{updates:?}");
    assert_eq!(updates[1].state, Some(ReconcileState::Updating), "the retry starts from Updating");
    assert_eq!(h.backend.widget(&token(&created)).unwrap().size, 3);
    h.wait_for_event("a", "Updating").await;
}

#[tokio::test]
async fn verifying_object_fails_on_a_terminal_verify_error() {
    let h = Harness::start_slow("verify-fails", &[ReconcileState::Failed]).await;
    h.backend.script("create", Script::Async);
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Verifying).await;
    h.backend.script("verify", Script::Fail(ExternalError::terminal("BuildFailed", "the widget could not be built")));
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    assert_eq!(condition(&w, "Ready"), Some(("False".into(), "BuildFailed".into())));
    assert_eq!(w.status.as_ref().unwrap().message.as_deref(), Some("the widget could not be built"));
    let verifies = h.backend.call_log("verify");
    assert_eq!(verifies.last().unwrap().state, Some(ReconcileState::Verifying), "it failed from Verifying");
}

#[tokio::test]
async fn recreate_with_a_synchronous_delete_creates_a_new_resource() {
    let h = Harness::start("recreate-sync").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let first_id = h.backend.widget(&token(&created)).unwrap().id;
    h.backend.break_widget(&token(&created));
    h.wait_for("a", "Succeeded with a new widget", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.state() == ReconcileState::Succeeded && s.observation.external_id.as_deref() != Some(first_id.as_str()))
    })
    .await;
    assert_eq!((h.backend.calls("delete"), h.backend.calls("create")), (1, 2));
    let replacement = h.backend.widget(&token(&created)).unwrap();
    assert!(!replacement.broken && replacement.id != first_id);
    // The synchronous delete goes straight to creating again, through the create marker.
    assert!(h.backend.call_log("create")[1].create_pending);
}

#[tokio::test]
async fn recreate_without_delete_permission_fails() {
    let h = Harness::start("recreate-denied").await;
    let created = h.create(with_annotation(widget("a", 1), ACCESS_ANNOTATION, "CU")).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.break_widget(&token(&created));
    let w = h.wait_for_state("a", ReconcileState::Failed).await;
    assert_eq!(condition(&w, "Ready").map(|c| c.1), Some("RecreateNotPermitted".into()));
    assert_eq!((h.backend.calls("delete"), h.backend.calls("create")), (0, 1));
}

#[tokio::test]
async fn resource_deleted_outside_kubernetes_is_waited_for_then_recreated() {
    let h = Harness::start("verify-deleting").await;
    let created = h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.start_deleting(&token(&created));
    let w = h.wait_for("a", "Ready=False Deleting", |w| condition(w, "Ready") == Some(("False".into(), "Deleting".into()))).await;
    assert_eq!(h.backend.calls("create"), 1, "nothing is created while the old resource is being deleted");
    assert!(w.status.as_ref().unwrap().message.as_deref().unwrap().contains("being deleted"));
    h.backend.complete();
    h.wait_for("a", "recreated", |w| condition(w, "Ready") == Some(("True".into(), "Available".into())) && h.backend.calls("create") == 2)
        .await;
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn failed_object_is_retried_when_its_spec_changes() {
    // Failed objects are requeued only after an hour here: only the spec change retries it.
    let h = Harness::start_slow("failed-spec", &[ReconcileState::Failed]).await;
    h.backend.script("create", Script::Fail(ExternalError::terminal("InvalidSize", "size 1 is not offered")));
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Failed).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.backend.calls("create"), 1, "no retry without a change");
    h.merge("a", json!({"spec": {"size": 2}})).await;
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(w.status.as_ref().unwrap().observed_generation, Some(2));
    assert_eq!(h.backend.calls("create"), 2);
}

#[tokio::test]
async fn read_only_object_whose_resource_exists_reaches_succeeded() {
    let h = Harness::start("read-only-exists").await;
    let created = h.create(with_annotation(widget("a", 1), ACCESS_ANNOTATION, "none")).await;
    h.backend.insert(&token(&created), 1);
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(condition(&w, "Ready"), Some(("True".into(), "Available".into())));
    assert_eq!(h.backend.calls("create"), 0);
    h.delete_and_wait("a").await;
    assert_eq!(h.backend.calls("delete"), 0, "a read-only object never deletes its resource");
    assert_eq!(h.backend.widgets().len(), 1);
}

#[tokio::test]
async fn drift_policy_of_the_object_beats_the_operator_default() {
    let h = Harness::start("drift-hook").await;
    let mut reported = widget("a", 3);
    reported.spec.drift_policy = Some("report".into());
    let created = h.create(reported).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    h.wait_for("a", "Synced=False DriftDetected", |w| condition(w, "Synced") == Some(("False".into(), "DriftDetected".into()))).await;
    assert_eq!(h.backend.widget(&token(&created)).unwrap().size, 9, "the object's report beats the operator's enforce");
    assert_eq!(h.backend.calls("update"), 0);
}

#[tokio::test]
async fn drift_policy_annotation_beats_the_objects_own_policy() {
    let h = Harness::start("drift-hook-annotation").await;
    let mut suspended = with_annotation(widget("a", 3), DRIFT_POLICY_ANNOTATION, "enforce");
    suspended.spec.drift_policy = Some("suspend".into());
    let created = h.create(suspended).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    h.backend.tamper(&token(&created), 9);
    h.backend.wait_for_size(&token(&created), 3, "the annotation's enforce to repair the drift").await;
}

#[tokio::test]
async fn operator_conditions_are_merged_beside_ready_and_synced_and_removed_when_no_longer_returned() {
    let h = Harness::start("conditions-hook").await;
    h.create(widget("a", 20)).await;
    let w = h.wait_for("a", "Large", |w| condition(w, "Large").is_some()).await;
    assert_eq!(condition(&w, "Large"), Some(("True".into(), "SizeAboveTen".into())));
    let w = h.wait_for_state("a", ReconcileState::Succeeded).await;
    assert_eq!(condition(&w, "Ready"), Some(("True".into(), "Available".into())), "Ready stays the runtime's");
    let types: Vec<&str> = w.status.as_ref().unwrap().conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types.len(), 3, "one of each type: {types:?}");
    h.merge("a", json!({"spec": {"size": 5}})).await;
    let w = h.wait_for("a", "without Large", |w| condition(w, "Large").is_none()).await;
    assert!(condition(&w, "Synced").is_some() && condition(&w, "Ready").is_some());
}

#[tokio::test]
async fn spec_patch_is_the_reconciles_only_write_and_the_next_reconcile_applies_it() {
    let h = Harness::start("spec-patch").await;
    let versions = h.watch_versions("a").await;
    let mut recording = widget("a", 1);
    recording.spec.record_id = true;
    h.create(recording).await;
    let w = h
        .wait_for("a", "recorded and applied", |w| {
            w.spec.recorded_id.is_some()
                && w.status.as_ref().is_some_and(|s| s.observed_generation == Some(2) && s.state() == ReconcileState::Succeeded)
        })
        .await;
    assert_eq!(w.spec.recorded_id, w.status.as_ref().unwrap().observation.external_id, "the external id went into the spec");
    assert_eq!(w.metadata.generation, Some(2), "exactly one spec write");
    assert!(w.status.as_ref().unwrap().last_applied_spec.as_deref().is_some_and(|s| s.contains("recordedId")), "applied next");
    let versions = versions.lock().unwrap().clone();
    let first = versions.iter().position(|v| v.metadata.generation == Some(2)).expect("a version at generation 2");
    let (before, patched) = (&versions[first - 1], &versions[first]);
    assert_eq!(before.status, patched.status, "the spec write carried no status change");
    assert!(h.events("a").await.iter().any(|e| e.reason == "SpecUpdated"));
}

#[tokio::test]
async fn the_controllers_cache_is_shared_with_the_operator() {
    let h = Harness::start("cached").await;
    h.create(widget("a", 1)).await;
    h.wait_for_state("a", ReconcileState::Succeeded).await;
    let context = h.context.clone().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // The cache follows the watch: the status write lands there shortly after the API server.
    while !context
        .cached()
        .iter()
        .any(|w| w.name_any() == "a" && w.status.as_ref().is_some_and(|s| s.reconcile_state == Some(ReconcileState::Succeeded)))
    {
        assert!(tokio::time::Instant::now() < deadline, "the cache never shows the Succeeded widget");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(context.cached().len(), 1, "only this test's namespace is watched");
}
