//! Every write a reconcile makes to Kubernetes, each the reconcile's one write: the status apply
//! (with the events it announces), the finalizer added or removed, the operator's spec patch.
//! Each carries a precondition, so that a write computed from a stale copy fails (409) instead
//! of overwriting a newer one.

use kube::api::{Patch, PatchParams};
use kube::core::object::HasSpec;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::conclusion::Conclusion;
use crate::context::Context;
use crate::error::Error;
use crate::resource::ExternalResource;
use crate::status::ManagedStatus;
use crate::status::ReconcileState;
use crate::timing::requeue_delay;
use crate::trace::{self, Cause};

/// Applies `conclusion` to `next`, writes the status if it changed (the reconcile's one write),
/// publishes events, and returns when to look again. Without `uid` (an object that is only
/// held, paused or misannotated) the object waits for a change.
pub(crate) async fn write_status<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    current: &ManagedStatus<M::Observation>,
    next: ManagedStatus<M::Observation>,
    conclusion: Conclusion,
    uid: Option<&str>,
) -> Result<Action, Error> {
    // When to look again, decided before the write so that a failure's retry time is in it.
    let delay = uid.map(|uid| {
        let attempt = context.attempts.next(uid, conclusion.state);
        requeue_delay(&context.config.timing, conclusion.requeue, conclusion.state, attempt)
    });
    let mut next = conclusion.status(current, next, object.meta().generation, jiff::Timestamp::now(), delay);

    // Compared as written: fields an observation does not serialize never cause a write.
    if serde_json::to_value(&next)? != serde_json::to_value(current)? {
        // The trace of this write, never a write of its own.
        next.last_trace_id = trace::current_trace_id();
        let mut patch = json!({
            "apiVersion": M::Object::api_version(&()),
            "kind": M::Object::kind(&()),
            "status": next,
        });
        // A precondition on the resourceVersion we read: a status computed from a stale copy
        // is rejected (409) instead of overwriting a newer one.
        if let Some(version) = object.resource_version() {
            patch["metadata"] = json!({ "resourceVersion": version });
        }
        let params = PatchParams::apply(&context.config.field_manager).force();
        let name = object.name_any();
        trace::kubernetes_write("apply", "status", &M::Object::kind(&()), api.patch_status(&name, &params, &Patch::Apply(&patch))).await?;
    }
    settle(object, context, &conclusion);
    for (type_, reason, note) in conclusion.events(current.reconcile_state, current.last_error.as_ref()) {
        record_event(context, object, type_, &reason, &note).await;
    }

    let span = tracing::Span::current();
    trace::outcome(
        &span,
        &conclusion.state.to_string(),
        conclusion.error_class.and(conclusion.warning.as_ref()).map(|(_, note)| note.as_str()),
    );
    let (Some(uid), Some(delay)) = (uid, delay) else {
        return Ok(Action::await_change());
    };
    context.metrics.object_state(context.config.name, uid, Some(conclusion.state));
    trace::requeue(&span, delay);
    context.triggers.note_after(&ObjectRef::from_obj(object), Cause::Requeued, delay);
    Ok(Action::requeue(delay))
}

/// An object Ready, or failed for good, has settled for its `traceparent`: its later reconciles
/// are traces of their own (`trace::join`).
fn settle<M: ExternalResource>(object: &M::Object, context: &Context<M>, conclusion: &Conclusion) {
    if !matches!(conclusion.state, ReconcileState::Succeeded | ReconcileState::Failed) {
        return;
    }
    if let Some(traceparent) = object.annotations().get(trace::TRACEPARENT_ANNOTATION) {
        context.triggers.settle(&ObjectRef::from_obj(object), traceparent);
    }
}

/// Lets the object go: the finalizer is removed, an event says what became of the external
/// resource, and the controller forgets the object.
pub(crate) async fn release<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    uid: &str,
    event: (EventType, &str, &str),
) -> Result<Action, Error> {
    let (type_, reason, note) = event;
    remove_finalizer(object, api, &context.config.finalizer).await?;
    record_event(context, object, type_, reason, note).await;
    context.forget(uid, &ObjectRef::from_obj(object));
    Ok(Action::await_change())
}

/// Writes the operator's merge patch of the spec, unless it would change nothing. `Ok(true)`
/// when written: the reconcile's one write.
pub(crate) async fn patch_spec<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    patch: &serde_json::Value,
) -> Result<bool, Error> {
    let current = serde_json::to_value(object.spec())?;
    let mut patched = current.clone();
    json_patch::merge(&mut patched, patch);
    if patched == current {
        return Ok(false);
    }
    let mut body = json!({ "spec": patch });
    // The spec computed from a stale copy is rejected (409) rather than written.
    if let Some(version) = object.resource_version() {
        body["metadata"] = json!({ "resourceVersion": version });
    }
    let params = PatchParams { field_manager: Some(context.config.field_manager.clone()), ..PatchParams::default() };
    let name = object.name_any();
    trace::kubernetes_write("patch", "spec", &M::Object::kind(&()), api.patch(&name, &params, &Patch::Merge(&body))).await?;
    info!(controller = context.config.name, object = %ObjectRef::from_obj(object), "spec updated by the operator");
    let note = format!("the operator set {} (the values are in the spec)", patched_fields(patch).join(", "));
    record_event(context, object, EventType::Normal, "SpecUpdated", &note).await;
    Ok(true)
}

/// The fields a merge patch of the spec sets, as paths (`spec.customizations.certificate.arn`),
/// for the event that reports it. Paths, not values: a value the operator writes can be an
/// identifier users must not read in events (an ARN with its account id); the spec shows it to
/// those who may read the object.
fn patched_fields(patch: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match value.as_object() {
            Some(fields) if !fields.is_empty() => {
                for (name, value) in fields {
                    walk(value, format!("{path}.{name}"), out);
                }
            }
            _ => out.push(path),
        }
    }
    let mut out = Vec::new();
    walk(patch, "spec".to_owned(), &mut out);
    out
}

/// Publishes a Kubernetes Event about the object; a failure is logged, never the reconcile's.
async fn record_event<M: ExternalResource>(context: &Context<M>, object: &M::Object, type_: EventType, reason: &str, note: &str) {
    context.events.publish(&object.object_ref(&()), type_, reason, "Reconcile", note).await;
}

pub(crate) async fn add_finalizer<K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug>(
    object: &K,
    api: &Api<K>,
    finalizer: &str,
) -> Result<(), Error> {
    // The `test` operations make a concurrent change to the list fail instead of being lost.
    let patch = if object.finalizers().is_empty() {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": null },
            { "op": "add", "path": "/metadata/finalizers", "value": [finalizer] },
        ])
    } else {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": object.finalizers() },
            { "op": "add", "path": "/metadata/finalizers/-", "value": finalizer },
        ])
    };
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    let name = object.name_any();
    trace::kubernetes_write("patch", "finalizer", &K::kind(&()), api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch)))
        .await?;
    Ok(())
}

async fn remove_finalizer<K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug>(
    object: &K,
    api: &Api<K>,
    finalizer: &str,
) -> Result<(), Error> {
    let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": path, "value": finalizer },
        { "op": "remove", "path": path },
    ]))?;
    let name = object.name_any();
    match trace::kubernetes_write("patch", "finalizer", &K::kind(&()), api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch)))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_updated_event_names_the_fields_set_and_not_their_values() {
        let patch =
            json!({ "customizations": { "certificate": { "arn": "arn:aws:acm:us-east-1:123456789012:certificate/c" } }, "enabled": true });
        assert_eq!(patched_fields(&patch), ["spec.customizations.certificate.arn", "spec.enabled"]);
    }
}
