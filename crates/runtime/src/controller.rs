//! Controller wiring: [`run`], which
//! watches the objects (and, through `dependencies.rs`, what they depend on) and hands each
//! change to `reconcile.rs`.

use std::future::Future;
use std::sync::{Arc, PoisonError};

use futures::channel::mpsc::unbounded;
use futures::{FutureExt as _, StreamExt};
use kube::core::object::HasStatus;
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::Predicate;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, warn};

use crate::context::Context;
use crate::error::Error;
use crate::outcome::ErrorClass;
use crate::reconcile::reconcile;
use crate::resource::ExternalResource;
use crate::shares::Shares;
use crate::status::ManagedStatus;
use crate::timing::{Requeue, requeue_delay};
use crate::trace::Cause;

/// Runs the controller for `M` over the objects `api` sees, until `shutdown` completes, with
/// `concurrency` reconciles in flight per share of its objects ([`Shares`]).
pub async fn run<M: ExternalResource>(
    api: Api<M::Object>,
    context: Arc<Context<M>>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (reader, writer) = reflector::store();
    context.stores.lock().unwrap_or_else(PoisonError::into_inner).push(reader.clone());
    // Our own status writes must not trigger reconciles (the requeue decides when to look
    // again), but spec, annotation (policies, pause) and finalizer changes must.
    let triggers = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|object| object.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            (predicates::generation as fn(&M::Object) -> Option<u64>)
                .combine(predicates::annotations as fn(&M::Object) -> Option<u64>)
                .combine(predicates::finalizers as fn(&M::Object) -> Option<u64>),
            Default::default(),
        );
    // Each trigger noted as it goes to the queue, for the reconcile's span (`trace::Triggers`).
    let noting = Arc::clone(&context);
    let triggers = triggers.inspect(move |change| {
        if let Ok(object) = change {
            noting.triggers.note(&ObjectRef::from_obj(object), Cause::Changed);
        }
    });
    let name = context.config.name;
    // Changes of dependencies, from watches started as reconciles discover them.
    let (dependency_triggers, dependency_changes) = unbounded();
    context.dependencies.start(dependency_triggers);
    let (waker, woken) = unbounded();
    context.wakers.lock().unwrap_or_else(PoisonError::into_inner).push((reader.clone(), waker));
    let shutdown = shutdown.boxed().shared();
    let shares = Arc::new(Shares::new(concurrency));
    let stopping = shutdown.clone();
    // kube-runtime's own limit stays off (0: unbounded): the shares are the limit.
    let reconcile_in_share = move |object: Arc<M::Object>, context: Arc<Context<M>>| {
        let (shares, stopping) = (Arc::clone(&shares), stopping.clone());
        async move {
            let share = context.manager.share(&object).await;
            match shares.enter(&share, stopping).await {
                // On the heap: the reconcile's state machine is large, and held inline here it
                // would be copied through every poll frame above it.
                Some(_place) => Box::pin(reconcile(object, context)).await,
                // Stopping: nothing was done; the next process looks at the object again.
                None => Ok(Action::await_change()),
            }
        }
    };
    // Its own backoff (above) paces the watch; its errors stay out of the controller's shared
    // backoff, which would hold back the dependency changes and wake-ups too (`watches.rs`).
    let triggers = crate::watches::on_its_own(name, M::Object::kind(&()).into_owned(), triggers);
    let noting = Arc::clone(&context);
    let dependency_changes = dependency_changes.inspect(move |object| noting.triggers.note(object, Cause::Related));
    let failed_in = Arc::clone(&context);
    let controller = Controller::for_stream(triggers, reader.clone())
        .reconcile_on(dependency_changes)
        .reconcile_on(woken)
        .with_config(RunConfig::default().concurrency(0))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_in_share, error_policy::<M>, Arc::clone(&context))
        .for_each(|result| {
            let context = Arc::clone(&failed_in);
            async move {
                match result {
                    Ok((object, _)) => debug!(controller = name, %object, "reconciled"),
                    Err(error) => {
                        let trace_id = failed_trace(&context, &error);
                        warn!(controller = name, %error, trace_id = trace_id.as_deref(), "reconcile failed");
                    }
                }
            }
        });
    crate::shutdown::drive_until_shutdown(controller, shutdown, reader).await;
    context.dependencies.stop();
}

/// The trace id of the reconcile a controller error is about (its object's last reconcile), when
/// traces are exported: the reconcile's own line ("reconcile error") carries it from its span.
fn failed_trace<M: ExternalResource, Q: std::error::Error>(
    context: &Context<M>,
    error: &kube::runtime::controller::Error<Error, Q>,
) -> Option<String> {
    let kube::runtime::controller::Error::ReconcilerFailed(_, object) = error else { return None };
    let mut key = ObjectRef::<M::Object>::new(&object.name);
    if let Some(namespace) = &object.namespace {
        key = key.within(namespace);
    }
    context.triggers.last(&key).map(|span| span.trace_id().to_string())
}

/// Logged within the reconcile's span already ("reconcile error", `reconcile.rs`); here the
/// retry is scheduled.
fn error_policy<M: ExternalResource>(object: Arc<M::Object>, _error: &Error, context: Arc<Context<M>>) -> Action {
    let uid = object.uid().unwrap_or_default();
    let state = object.status().map(ManagedStatus::state).unwrap_or_default();
    let attempt = context.attempts.next(&uid, state);
    // A failed Kubernetes request (a 409 on a stale copy, an unreachable API server) is
    // transient: the operator's error backoff applies, like any retryable external error.
    let delay = requeue_delay(&context.config.timing, Requeue::AfterError(ErrorClass::Retryable), state, attempt);
    context.triggers.note_after(&ObjectRef::from_obj(&*object), Cause::RetryAfterError, delay);
    Action::requeue(delay)
}
