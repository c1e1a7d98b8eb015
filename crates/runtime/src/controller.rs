//! Controller wiring: the [`Context`] every reconcile of one controller shares, and [`run`], which
//! watches the objects (and, through `dependencies.rs`, what they depend on) and hands each
//! change to `reconcile.rs`.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{FutureExt as _, StreamExt};
use kube::core::object::HasStatus;
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::Predicate;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{debug, warn};

use crate::dependencies::Dependencies;
use crate::events::Publisher;
use crate::metrics::RuntimeMetrics;
use crate::outcome::ErrorClass;
use crate::reconcile::reconcile;
use crate::resource::ExternalResource;
use crate::status::ManagedStatus;
use crate::timing::{Attempts, Requeue, requeue_delay};

/// Names one controller: metric label, event reporter, finalizer and field manager.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Short name, e.g. `cert`.
    pub name: &'static str,
    /// e.g. `acm.blockwork.dev/finalizer`.
    pub finalizer: String,
    /// The server-side-apply field manager for status.
    pub field_manager: String,
}

impl ControllerConfig {
    pub fn new(name: &'static str, group: &str) -> Self {
        Self { name, finalizer: format!("{group}/finalizer"), field_manager: format!("blockwork-{name}") }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object has no {0}")]
    MissingMetadata(&'static str),
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize the object: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

impl Error {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingMetadata(_) => "invalid_object",
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kubernetes",
            Self::Serialize(_) => "serialization",
            Self::Panicked(_) => "panicked",
        }
    }
}

/// Everything a reconcile needs, shared by all reconciles of one controller.
pub struct Context<M: ExternalResource> {
    pub client: Client,
    pub manager: M,
    pub config: ControllerConfig,
    pub metrics: Arc<RuntimeMetrics>,
    pub(crate) events: Publisher,
    pub(crate) attempts: Attempts,
    pub(crate) dependencies: Dependencies<M::Object>,
    /// The caches of the watches [`run`] keeps, one per `Api` it was started with.
    stores: Mutex<Vec<reflector::Store<M::Object>>>,
    /// Per watch [`run`] keeps: its cache, and where [`Context::wake`] sends the objects in it.
    wakers: Mutex<Vec<Waker<M::Object>>>,
}

/// A watch's cache, and the channel that makes its reconciler look at an object again.
type Waker<K> = (reflector::Store<K>, UnboundedSender<ObjectRef<K>>);

impl<M: ExternalResource> Context<M> {
    pub fn new(client: Client, manager: M, config: ControllerConfig, metrics: Arc<RuntimeMetrics>) -> Arc<Self> {
        Arc::new(Self {
            events: Publisher::new(client.clone(), config.field_manager.clone()),
            client,
            manager,
            config,
            metrics,
            attempts: Attempts::default(),
            dependencies: Dependencies::default(),
            stores: Mutex::default(),
            wakers: Mutex::default(),
        })
    }

    /// Reconciles `object` soon, whatever its requeue: for an operator that learns of a change
    /// of the external resource elsewhere than in a reconcile (a shared listing of many
    /// resources, a write done in the background). An object no watch holds is ignored.
    pub fn wake(&self, object: &ObjectRef<M::Object>) {
        let wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        for (store, waker) in wakers.iter() {
            if store.get(object).is_some() {
                // A closed channel: that watch has stopped; nothing to wake.
                let _ = waker.unbounded_send(object.clone());
            }
        }
    }

    /// Every object the controller's watches hold now, from their caches: for metrics computed
    /// at scrape time without a watch of their own.
    pub fn cached(&self) -> Vec<Arc<M::Object>> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner).iter().flat_map(reflector::Store::state).collect()
    }

    /// The object is gone: its backoff, dependencies and state gauge go with it.
    pub(crate) fn forget(&self, uid: &str, object: &ObjectRef<M::Object>) {
        self.attempts.reset(uid);
        self.dependencies.forget(object);
        self.metrics.object_state(self.config.name, uid, None);
    }
}

/// Runs the controller for `M` over the objects `api` sees, until `shutdown` completes.
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
    let name = context.config.name;
    // Changes of dependencies, from watches started as reconciles discover them.
    let (dependency_triggers, dependency_changes) = unbounded();
    context.dependencies.start(dependency_triggers);
    let (waker, woken) = unbounded();
    context.wakers.lock().unwrap_or_else(PoisonError::into_inner).push((reader.clone(), waker));
    let shutdown = shutdown.boxed().shared();
    // Its own backoff (above) paces the watch; its errors stay out of the controller's shared
    // backoff, which would hold back the dependency changes and wake-ups too (`watches.rs`).
    let triggers = crate::watches::on_its_own(name, M::Object::kind(&()).into_owned(), triggers);
    let controller = Controller::for_stream(triggers, reader.clone())
        .reconcile_on(dependency_changes)
        .reconcile_on(woken)
        .with_config(RunConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile::<M>, error_policy::<M>, Arc::clone(&context))
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(controller = name, %object, "reconciled"),
                Err(error) => warn!(controller = name, %error, "reconcile failed"),
            }
        });
    crate::shutdown::drive_until_shutdown(controller, shutdown, reader).await;
    context.dependencies.stop();
}

fn error_policy<M: ExternalResource>(object: Arc<M::Object>, error: &Error, context: Arc<Context<M>>) -> Action {
    warn!(controller = context.config.name, object = %ObjectRef::from_obj(&*object), %error, "reconcile error");
    let uid = object.uid().unwrap_or_default();
    let state = object.status().map(ManagedStatus::state).unwrap_or_default();
    let attempt = context.attempts.next(&uid, state);
    // A failed Kubernetes request (a 409 on a stale copy, an unreachable API server) is
    // transient: the operator's error backoff applies, like any retryable external error.
    Action::requeue(requeue_delay(&context.manager.timing(), Requeue::AfterError(ErrorClass::Retryable), state, attempt))
}
