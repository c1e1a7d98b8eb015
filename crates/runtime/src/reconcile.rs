//! The reconcile flow of one object: read → plan → call → conclude, for the live path and the
//! deleting path. The decisions are `machine.rs`'s; the status they lead to is
//! `conclusion.rs`'s; the writes are `writes.rs`'s. Each reconcile writes the object at most once
//! (a finalizer patch, a spec patch or a status apply), handles deletion before anything but
//! pause, and records enough in status (state, create-pending marker, last applied spec) to be
//! safe to crash at any line.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::FutureExt as _;
use kube::core::object::{HasSpec, HasStatus};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tracing::{Instrument as _, debug, info, warn};

use crate::conclusion::Conclusion;
use crate::context::Context;
use crate::error::Error;
use crate::machine::{self, AfterCall, DeletePlan, Plan};
use crate::outcome::{
    Conditions, DeleteOutcome, ErrorClass, ExternalError, MutateOutcome, Observed, Operation, Upkeep, VerifyOutcome, WithConditions,
};
use crate::policy::{self, AccessPermissions, AnnotationError, DeletionPolicy, DriftPolicy, Policies};
use crate::resource::{ExternalResource, Phase, Report, Request, SpecChange};
use crate::status::{ManagedStatus, ReconcileState, SYNCED};
use crate::timing::Requeue;
use crate::trace;
use crate::writes::{add_finalizer, patch_spec, release, write_status};

/// One reconcile of one object, in a span of its own (`trace::reconcile`). Public so tests can
/// drive it directly.
pub async fn reconcile<M: ExternalResource>(object: Arc<M::Object>, context: Arc<Context<M>>) -> Result<Action, Error> {
    let started = Instant::now();
    let span = reconcile_span(object.as_ref(), &context);
    let calls = Calls::default();
    let result = contained(reconcile_object(object.as_ref(), &context, &calls)).instrument(span.clone()).await;
    let label = match &result {
        Ok(_) => "success",
        Err(error) => {
            trace::outcome(&span, error.category(), Some(&error.to_string()));
            // Within the span: the line carries the reconcile's trace id.
            span.in_scope(
                || warn!(controller = context.config.name, object = %ObjectRef::from_obj(object.as_ref()), %error, "reconcile error"),
            );
            error.category()
        }
    };
    let duration = started.elapsed();
    let calls = calls.0.into_inner().unwrap_or_else(PoisonError::into_inner);
    // Within the span: the duration histograms name its trace as their exemplar.
    span.in_scope(|| {
        context.metrics.reconciled(context.config.name, label, duration);
        context.manager.reconciled(&Report { object: object.as_ref(), calls: &calls, kubernetes_succeeded: result.is_ok(), duration });
    });
    result
}

/// The span of a reconcile of `object` starting now: its trigger taken from the ledger, joined
/// to the object's `traceparent` (`trace::join`).
fn reconcile_span<M: ExternalResource>(object: &M::Object, context: &Context<M>) -> tracing::Span {
    if !trace::enabled() {
        return tracing::Span::none();
    }
    let key = ObjectRef::from_obj(object);
    let trigger = context.triggers.take(&key);
    let join = trace::join(object.annotations(), context.triggers.settled(&key).as_deref());
    let kind = M::Object::kind(&());
    let span = trace::reconcile(context.config.name, &kind, &object.namespace().unwrap_or_default(), &object.name_any(), &trigger, &join);
    context.triggers.started(&key, trace::span_context(&span));
    span
}

/// A panic in a reconcile (a dependency's `expect` meeting input nobody foresaw) becomes that
/// reconcile's error, retried with backoff like any other, instead of ending the controller:
/// kube-runtime runs each reconcile on a task and unwraps its outcome, so one object's panic
/// would stop every object's reconciles, and `blockwork run` with them. (controller-runtime
/// recovers reconcile panics the same way.) The panic hook has already logged where it happened.
async fn contained<T>(reconcile: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    match std::panic::AssertUnwindSafe(reconcile).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic.downcast_ref::<&str>().map(|m| (*m).to_owned()).or_else(|| panic.downcast_ref::<String>().cloned());
            Err(Error::Panicked(message.unwrap_or_else(|| "no message".to_owned())))
        }
    }
}

/// Pause, then deletion, then the policies and the finalizer, then dependencies: each may end
/// the reconcile before the operator is called.
async fn reconcile_object<M: ExternalResource>(object: &M::Object, context: &Context<M>, calls: &Calls) -> Result<Action, Error> {
    let uid = object.uid().ok_or(Error::MissingMetadata("uid"))?;
    let namespace = object.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let api: Api<M::Object> = Api::namespaced(context.client.clone(), &namespace);
    let current = object.status().cloned().unwrap_or_default();
    let manager = &context.manager;

    // Pause holds deletion too (as in Crossplane): a paused object keeps its finalizer until
    // unpaused, so pausing is a way to stop a deletion of the external resource. A pause value
    // that is neither true nor false holds the object the same way, and says so.
    match policy::paused(object.annotations()) {
        Ok(false) => {}
        Ok(true) => {
            let message = format!("reconciling is paused by the annotation {}", policy::PAUSED_ANNOTATION);
            let conclusion = Conclusion::paused(current.state(), message);
            write_status(object, &api, context, &current, current.clone(), conclusion, None).await?;
            return Ok(Action::await_change());
        }
        Err(invalid) => {
            let message = format!("{invalid}; the object is held as if paused until the value is one of these");
            let conclusion = Conclusion::invalid_annotation(current.state(), message);
            write_status(object, &api, context, &current, current.clone(), conclusion, None).await?;
            return Ok(Action::await_change());
        }
    }
    let asks = manager.asks(object);
    let default_drift = asks.drift_policy.unwrap_or(context.config.default_drift);
    if object.meta().deletion_timestamp.is_some() {
        let deletes = policy::deletes_on_delete(object.annotations(), context.config.default_deletion);
        return reconcile_deleting(object, &api, context, calls, &current, deletes, default_drift, &uid).await;
    }
    let policies = match Policies::from_annotations(object.annotations(), context.config.default_deletion, default_drift) {
        Ok(policies) => policies,
        Err(invalid) => {
            // Acting on a misspelt policy could delete what the user meant to keep: stop, say why.
            let message = format!("{invalid}; nothing is done until it is fixed");
            let conclusion = Conclusion::invalid_annotation(current.state(), message);
            write_status(object, &api, context, &current, current.clone(), conclusion, None).await?;
            return Ok(Action::await_change());
        }
    };
    if !object.finalizers().contains(&context.config.finalizer) {
        add_finalizer(object, &api, &context.config.finalizer).await?;
        // The finalizer change comes back as a watch event and triggers the next step.
        return Ok(Action::await_change());
    }
    let next = handle_retry_request(object, context, &current, &uid);

    let dependencies =
        match context.dependencies.resolve(&context.client, context.config.name, object, asks.dependencies, &namespace).await? {
            Ok(dependencies) => dependencies,
            Err(waiting_for) => {
                let conclusion = Conclusion::waiting(ReconcileState::Pending, "DependenciesNotReady", waiting_for);
                return write_status(object, &api, context, &current, next, conclusion, Some(&uid)).await;
            }
        };
    reconcile_live(object, &api, context, calls, &current, next, &policies, &dependencies, &uid).await
}

/// The live path: verify, plan, call at most one of create/update/delete, conclude.
#[allow(clippy::too_many_arguments)]
async fn reconcile_live<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    calls: &Calls,
    current: &ManagedStatus<M::Observation>,
    mut next: ManagedStatus<M::Observation>,
    policies: &Policies,
    dependencies: &[kube::api::DynamicObject],
    uid: &str,
) -> Result<Action, Error> {
    let manager = &context.manager;
    let token = idempotency_token(uid);
    let (spec, spec_change) = spec_change::<M>(object, current)?;
    let request = Request {
        object,
        phase: Phase::Live,
        policies,
        spec_change: &spec_change,
        dependencies,
        idempotency_token: &token,
        create_pending: current.create_pending.as_ref(),
        derived: &(),
    };
    let marked = current.create_pending.as_ref().is_some_and(|marker| marker.spec.as_deref() == Some(spec.as_str()));
    let mut observation = current.observation.clone();
    let state = current.state();

    let observed = calls.timed(context, Operation::Verify, manager.verify(&request, &mut observation), verify_error).await;
    let Observed { outcome, upkeep, mut conditions, spec_patch, derived } = observed;
    let request = request.with_derived(&derived);
    if let Some(patch) = &spec_patch
        && patch_spec(object, api, context, patch).await?
    {
        // The new generation comes back as a watch event and triggers the next reconcile.
        return Ok(Action::await_change());
    }
    let mut plan = machine::plan(state, outcome, policies, spec_change.changed, marked);
    debug!(controller = context.config.name, object = %ObjectRef::from_obj(object), ?state, ?plan, "planned");
    let upkeep = upkeep.into_iter().filter(|u| machine::upkeep_runs(&plan, u.purpose, &policies.access));
    if let Err(error) = maintain(context, calls, &request, &mut observation, &mut conditions, upkeep).await {
        plan = Plan::Error(error);
    }

    let mut conclusion = match plan {
        Plan::Wait { state, reason, message } => Conclusion::waiting(state, reason, message),
        Plan::Ready => Conclusion::ready_with(&spec),
        Plan::MarkCreating => Conclusion::mark_creating(&token, &spec),
        Plan::Create => {
            let done = calls.timed(context, Operation::Create, manager.create(&request, &mut observation), mutate_error).await;
            Conclusion::after_call(machine::after_create(conditions.after(done)), &token, &spec, true)
        }
        Plan::Update { .. } => {
            let done = calls.timed(context, Operation::Update, manager.update(&request, &mut observation), mutate_error).await;
            Conclusion::after_call(machine::after_update(conditions.after(done)), &token, &spec, false)
        }
        Plan::Recreate { .. } => {
            let done = calls.timed(context, Operation::Delete, manager.delete(&request, &mut observation), delete_error).await;
            match machine::after_recreate_delete(conditions.after(done)) {
                AfterCall::MoveTo(state) => {
                    Conclusion::waiting(state, "Recreating", "waiting for the old external resource to be deleted".to_owned())
                }
                other => Conclusion::after_call(other, &token, &spec, false),
            }
        }
        Plan::LeaveDrift { policy, message } => Conclusion::drifted(state, policy, message),
        Plan::LeaveMissing { policy } => Conclusion::missing(state, policy),
        Plan::Fail { reason, message } => Conclusion::failed(reason, message),
        Plan::Error(error) => Conclusion::error(state, error),
    };

    if conclusion.state == ReconcileState::Succeeded {
        let hook = calls.timed(context, Operation::SuccessHook, manager.on_success(&request, &observation, &context.client), |r| {
            r.as_ref().err().map(|e| e.class)
        });
        if let Err(error) = hook.await {
            conclusion.hook_failed(error);
        }
    }

    conclusion.operator_conditions = conditions;
    next.observation = observation;
    if let Some(last_applied) = conclusion.last_applied.take() {
        next.last_applied_spec = Some(last_applied);
    }
    write_status(object, api, context, current, next, conclusion, Some(uid)).await
}

/// The deleting path. Deletion comes before everything else, and ends with the finalizer removed
/// in every case but an external delete that failed (the status then says how to release the
/// object).
#[allow(clippy::too_many_arguments)]
async fn reconcile_deleting<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    calls: &Calls,
    current: &ManagedStatus<M::Observation>,
    deletes: Result<bool, AnnotationError>,
    default_drift: DriftPolicy,
    uid: &str,
) -> Result<Action, Error> {
    let finalizer = &context.config.finalizer;
    if !object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(Action::await_change());
    }
    match deletes {
        Ok(true) => {}
        Ok(false) => {
            info!(controller = context.config.name, object = %ObjectRef::from_obj(object), "orphaning the external resource");
            let note = "the external resource was kept (deletion policy Orphan)";
            return release(object, api, context, uid, (EventType::Normal, "Orphaned", note)).await;
        }
        // Unsure whether we may delete: keep the external resource (the safe choice), and let
        // the object go rather than hold it until someone fixes an annotation on a dying object.
        Err(invalid) => {
            warn!(controller = context.config.name, object = %ObjectRef::from_obj(object), %invalid, "orphaning the external resource");
            let note = format!("{invalid}; the external resource was kept (treated as deletion policy Orphan)");
            return release(object, api, context, uid, (EventType::Warning, "InvalidAnnotation", &note)).await;
        }
    }
    let token = idempotency_token(uid);
    let (_, spec_change) = spec_change::<M>(object, current)?;
    let manager = &context.manager;
    // The deletion policy and the access permissions read (they delete); only the drift policy
    // can be invalid here, and drift does not matter to a deletion.
    let policies = Policies::from_annotations(object.annotations(), DeletionPolicy::Delete, default_drift).unwrap_or(Policies {
        paused: false,
        access: AccessPermissions { create: false, update: false, delete: true },
        deletion: DeletionPolicy::Delete,
        drift: default_drift,
    });
    let request = Request {
        object,
        phase: Phase::Deleting,
        policies: &policies,
        spec_change: &spec_change,
        dependencies: &[],
        idempotency_token: &token,
        create_pending: current.create_pending.as_ref(),
        derived: &(),
    };
    let mut observation = current.observation.clone();
    let observed = calls.timed(context, Operation::Verify, manager.verify(&request, &mut observation), verify_error).await;
    let Observed { outcome, upkeep, mut conditions, derived, .. } = observed;
    let request = request.with_derived(&derived);
    // Terminating: an earlier reconcile of this deletion called delete (or saw it under way).
    let mut deleted = current.state() == ReconcileState::Terminating;
    let plan = match machine::plan_delete(outcome) {
        DeletePlan::Release => {
            let upkeep = upkeep.into_iter().filter(|u| machine::upkeep_runs_deleting(&DeletePlan::Release, u.purpose, &policies.access));
            match maintain(context, calls, &request, &mut observation, &mut conditions, upkeep).await {
                Ok(()) => DeletePlan::Release,
                Err(error) => DeletePlan::Error(error),
            }
        }
        DeletePlan::Delete => {
            let done = calls.timed(context, Operation::Delete, manager.delete(&request, &mut observation), delete_error).await;
            deleted = true;
            machine::after_delete(conditions.after(done))
        }
        other => other,
    };
    let mut conclusion = match plan {
        // Only a delete call deletes: when verify finds nothing at once (gone already, or
        // nothing the operator deletes, like a Cert without deleteOnRemoval), the event must not
        // say so.
        DeletePlan::Release if deleted => {
            return release(object, api, context, uid, (EventType::Normal, "Deleted", "the external resource was deleted")).await;
        }
        DeletePlan::Release => {
            let note = "nothing to delete: the external resource is gone, or the operator keeps it";
            return release(object, api, context, uid, (EventType::Normal, "Released", note)).await;
        }
        DeletePlan::Delete | DeletePlan::Wait => {
            Conclusion::waiting(ReconcileState::Terminating, "Deleting", "waiting for the external resource to be deleted".to_owned())
        }
        DeletePlan::Error(error) => {
            let now = jiff::Timestamp::now();
            let unsynced_since = current.condition(SYNCED).filter(|c| c.status == "False").map(|c| c.last_transition_time.0);
            let deleted_at = object.meta().deletion_timestamp.as_ref().map_or(now, |t| t.0);
            let blocked_for = machine::blocked_for(unsynced_since, deleted_at, now);
            let error = machine::deletion_failed(error, blocked_for, context.config.timing.deletion_blocked_after);
            // Terminal or not, a deletion is retried: on the Terminating state's interval when
            // it needs a person (who may fix it at any time), else on the error backoff.
            let terminal = error.class == ErrorClass::Terminal;
            let class = if terminal { ErrorClass::Retryable } else { error.class };
            let mut conclusion = Conclusion::error(ReconcileState::Terminating, ExternalError { class, ..error });
            if terminal {
                conclusion.requeue = Requeue::InState;
            }
            conclusion
        }
    };
    conclusion.operator_conditions = conditions;
    let mut next = handle_retry_request(object, context, current, uid);
    next.observation = observation;
    write_status(object, api, context, current, next, conclusion, Some(uid)).await
}

/// Hands each upkeep the machine allowed to `maintain`, in the order `verify` gave them; the
/// first failure ends it and is the reconcile's error.
async fn maintain<M: ExternalResource>(
    context: &Context<M>,
    calls: &Calls,
    request: &Request<'_, M::Object, M::Derived>,
    observation: &mut M::Observation,
    conditions: &mut Conditions,
    upkeep: impl Iterator<Item = Upkeep<M::Upkeep>>,
) -> Result<(), ExternalError> {
    for Upkeep { work, .. } in upkeep {
        let done = context.manager.maintain(request, observation, work);
        let done = calls.timed(context, Operation::Upkeep, done, |done| done.outcome.as_ref().err().map(|e| e.class)).await;
        conditions.after(done)?;
    }
    Ok(())
}

/// A retry request not acted on yet (`blockwork.dev/reconcile-requested-at`): this reconcile is
/// it — the annotation change triggered it — so the object's backoff starts over, and the status
/// to write records the request as handled.
fn handle_retry_request<M: ExternalResource>(
    object: &M::Object,
    context: &Context<M>,
    current: &ManagedStatus<M::Observation>,
    uid: &str,
) -> ManagedStatus<M::Observation> {
    let mut next = current.clone();
    if let Some(requested) = object.annotations().get(policy::RECONCILE_REQUESTED_ANNOTATION)
        && current.last_handled_reconcile_at.as_ref() != Some(requested)
    {
        context.attempts.reset(uid);
        next.last_handled_reconcile_at = Some(requested.clone());
        trace::retriggered(&tracing::Span::current(), trace::Cause::RetryRequested);
    }
    next
}

/// 32 hex characters from the UID: fits ACM's IdempotencyToken (`\w{1,32}`) and similar fields.
pub fn idempotency_token(uid: &str) -> String {
    let digest = Sha256::digest(uid.as_bytes());
    hex::encode(&digest[..16])
}

/// The operator's spec type.
type SpecOf<M> = <<M as ExternalResource>::Object as HasSpec>::Spec;

/// The spec as JSON (what `status.lastAppliedSpec` records) and how it stands against the last
/// applied one.
fn spec_change<M: ExternalResource>(
    object: &M::Object,
    current: &ManagedStatus<M::Observation>,
) -> Result<(String, SpecChange<SpecOf<M>>), Error> {
    let spec = serde_json::to_string(object.spec())?;
    let last = current.last_applied_spec.as_deref();
    let change = SpecChange { changed: last != Some(spec.as_str()), last_applied: last.and_then(|json| serde_json::from_str(json).ok()) };
    Ok((spec, change))
}

/// The calls one reconcile made to the operator and how each ended, for its report; each is
/// also counted in `external_calls`.
#[derive(Default)]
struct Calls(Mutex<Vec<(Operation, Option<ErrorClass>)>>);

impl Calls {
    async fn timed<M: ExternalResource, T>(
        &self,
        context: &Context<M>,
        operation: Operation,
        call: impl Future<Output = T>,
        error_of: impl Fn(&T) -> Option<ErrorClass>,
    ) -> T {
        let started = Instant::now();
        let output = call.await;
        let error = error_of(&output);
        let result = error.map_or("success", ErrorClass::as_str);
        context.metrics.external_call(context.config.name, &operation.to_string(), result, started.elapsed());
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((operation, error));
        output
    }
}

fn verify_error<U, D>(observed: &Observed<U, D>) -> Option<ErrorClass> {
    match &observed.outcome {
        VerifyOutcome::Error(e) => Some(e.class),
        _ => None,
    }
}

fn mutate_error(done: &WithConditions<MutateOutcome>) -> Option<ErrorClass> {
    match &done.outcome {
        MutateOutcome::Error(e) => Some(e.class),
        _ => None,
    }
}

fn delete_error(done: &WithConditions<DeleteOutcome>) -> Option<ErrorClass> {
    match &done.outcome {
        DeleteOutcome::Error(e) => Some(e.class),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the reliability campaign's hostile corpus (issue 15): the AWS SDK panicked on a
    /// DistributionTenant's 100,000-character distributionId, and the panic stopped `blockwork
    /// run`. A panicking reconcile is now that reconcile's error.
    #[tokio::test]
    async fn a_panicking_reconcile_is_an_error_not_the_end_of_the_controller() {
        #[allow(clippy::panic)]
        let result: Result<(), Error> = contained(async { panic!("valid request: InvalidUri(TooLong)") }).await;
        match result {
            Err(Error::Panicked(message)) => assert!(message.contains("InvalidUri"), "{message}"),
            other => unreachable!("{other:?}"),
        }
        assert_eq!(contained(async { Ok::<_, Error>(7) }).await.ok(), Some(7), "an ordinary reconcile is untouched");
    }

    #[test]
    fn idempotency_token_is_stable_and_fits_acm() {
        let token = idempotency_token("6b1c9a40-2f4e-4c55-9b7e-0d0f7d1c2a11");
        assert_eq!(token, idempotency_token("6b1c9a40-2f4e-4c55-9b7e-0d0f7d1c2a11"));
        assert_eq!(token.len(), 32);
        assert!(token.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(token, idempotency_token("another-uid"));
    }
}
