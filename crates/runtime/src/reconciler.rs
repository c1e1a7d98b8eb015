//! The generic reconcile loop: Kubernetes on one side, an [`ExternalResource`] on the other.
//!
//! Each reconcile writes the object at most once (a finalizer patch or a status apply), handles
//! deletion before anything but pause, and records enough in status (state, create-pending marker,
//! last applied spec) to be safe to crash at any line.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::object::{HasSpec, HasStatus};
use kube::discovery::Scope;
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::Predicate;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::events::Publisher;
use crate::machine::{self, DeletePlan, Next, Plan};
use crate::manager::{DependencyRef, ExternalResource, Request};
use crate::metrics::RuntimeMetrics;
use crate::outcome::{DeleteOutcome, ErrorClass, ExternalError, MutateOutcome, Operation, VerifyOutcome};
use crate::policy::{self, AnnotationError, DriftPolicy, Policies};
use crate::status::{CreatePending, LastError, ManagedStatus, READY, ReconcileState, SYNCED, condition, set_condition};

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
    events: Publisher,
    /// Attempts made in the current state per object UID: the backoff exponent. Kept in memory
    /// on purpose: persisting it would cost a write per wait, and a restart merely resets it.
    attempts: Mutex<HashMap<String, (ReconcileState, u32)>>,
    /// Discovery results per (apiVersion, kind) of a dependency.
    api_resources: Mutex<HashMap<(String, String), DependencyKind>>,
    /// Shared with the dependency watch tasks, which look up whom a change concerns.
    dependencies: Arc<Mutex<DependencyIndex<M::Object>>>,
    /// The caches of the watches [`run`] keeps, one per `Api` it was started with.
    stores: Mutex<Vec<reflector::Store<M::Object>>>,
    /// Per watch [`run`] keeps: its cache, and where [`Context::wake`] sends the objects in it.
    wakers: Mutex<Vec<Waker<M::Object>>>,
}

/// A watch's cache, and the channel that makes its reconciler look at an object again.
type Waker<K> = (reflector::Store<K>, UnboundedSender<ObjectRef<K>>);

#[derive(Clone, Debug)]
struct DependencyKind {
    resource: ApiResource,
    cluster_scoped: bool,
}

/// One dependency object, independent of the API version it was named with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DependencyKey {
    group: String,
    kind: String,
    /// `None` for cluster-scoped kinds.
    namespace: Option<String>,
    name: String,
}

/// What one dependency watch covers: a kind in one namespace (so that a controller limited to
/// some namespaces needs no cluster-wide RBAC on its dependencies), or a cluster-scoped kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    group: String,
    kind: String,
    namespace: Option<String>,
}

/// Which objects wait for which dependency, and the watches that report a dependency's changes
/// to the controller: without them a dependency deleted after its dependents became Ready would
/// go unnoticed until their next requeue, an hour later.
struct DependencyIndex<K: Resource<DynamicType = ()>> {
    dependents: HashMap<DependencyKey, HashSet<ObjectRef<K>>>,
    /// The reverse map, to drop an object's old entries when its dependencies change.
    of_object: HashMap<ObjectRef<K>, HashSet<DependencyKey>>,
    watches: HashMap<WatchKey, tokio::task::JoinHandle<()>>,
    /// Feeds the controller's `reconcile_on` stream; `None` outside [`run`] (a test driving
    /// [`reconcile`] directly), where no watch is started.
    triggers: Option<UnboundedSender<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for DependencyIndex<K> {
    fn default() -> Self {
        Self { dependents: HashMap::new(), of_object: HashMap::new(), watches: HashMap::new(), triggers: None }
    }
}

impl<K: Resource<DynamicType = ()>> DependencyIndex<K> {
    fn register(&mut self, object: ObjectRef<K>, keys: HashSet<DependencyKey>) {
        self.unregister(&object);
        for key in &keys {
            self.dependents.entry(key.clone()).or_default().insert(object.clone());
        }
        if !keys.is_empty() {
            self.of_object.insert(object, keys);
        }
    }

    fn unregister(&mut self, object: &ObjectRef<K>) {
        for key in self.of_object.remove(object).unwrap_or_default() {
            if let Some(dependents) = self.dependents.get_mut(&key) {
                dependents.remove(object);
                if dependents.is_empty() {
                    self.dependents.remove(&key);
                }
            }
        }
    }

    fn stop(&mut self) {
        self.triggers = None;
        for (_, watch) in self.watches.drain() {
            watch.abort();
        }
    }
}

impl<M: ExternalResource> Context<M> {
    pub fn new(client: Client, manager: M, config: ControllerConfig, metrics: Arc<RuntimeMetrics>) -> Arc<Self> {
        Arc::new(Self {
            events: Publisher::new(client.clone(), config.field_manager.clone()),
            client,
            manager,
            config,
            metrics,
            attempts: Mutex::default(),
            api_resources: Mutex::default(),
            stores: Mutex::default(),
            wakers: Mutex::default(),
            dependencies: Arc::default(),
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

    /// Counts an attempt in `state`; the count restarts when the state changes.
    fn next_attempt(&self, uid: &str, state: ReconcileState) -> u32 {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = attempts.entry(uid.to_owned()).or_insert((state, 0));
        if entry.0 == state {
            entry.1 = entry.1.saturating_add(1);
        } else {
            *entry = (state, 1);
        }
        entry.1 - 1
    }

    /// A retry was requested (`blockwork.dev/reconcile-requested-at`): the backoff starts over.
    fn clear_backoff(&self, uid: &str) {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }

    /// Every object the controller's watches hold now, from their caches: for metrics computed
    /// at scrape time without a watch of their own.
    pub fn cached(&self) -> Vec<Arc<M::Object>> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner).iter().flat_map(reflector::Store::state).collect()
    }

    fn forget(&self, uid: &str, object: &ObjectRef<M::Object>) {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
        self.dependencies.lock().unwrap_or_else(PoisonError::into_inner).unregister(object);
        self.metrics.object_state(self.config.name, uid, None);
    }

    /// Starts watching the dependency's kind (in its namespace) unless already watched.
    fn watch_dependency(&self, kind: &DependencyKind, namespace: Option<&str>) {
        let mut index = self.dependencies.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(triggers) = index.triggers.clone() else {
            return;
        };
        let key =
            WatchKey { group: kind.resource.group.clone(), kind: kind.resource.kind.clone(), namespace: namespace.map(str::to_owned) };
        if index.watches.contains_key(&key) {
            return;
        }
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &kind.resource),
            None => Api::all_with(self.client.clone(), &kind.resource),
        };
        debug!(controller = self.config.name, kind = %kind.resource.kind, ?namespace, "watching dependencies");
        let task = tokio::spawn(watch_dependencies(api, key.clone(), Arc::clone(&self.dependencies), triggers));
        index.watches.insert(key, task);
    }

    async fn timed<T>(&self, operation: Operation, call: impl Future<Output = T>, result_of: impl Fn(&T) -> &'static str) -> T {
        let started = Instant::now();
        let output = call.await;
        self.metrics.external_call(self.config.name, &operation.to_string(), result_of(&output), started.elapsed());
        output
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
    context.dependencies.lock().unwrap_or_else(PoisonError::into_inner).triggers = Some(dependency_triggers);
    let (waker, woken) = unbounded();
    context.wakers.lock().unwrap_or_else(PoisonError::into_inner).push((reader.clone(), waker));
    let shutdown = shutdown.boxed().shared();
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
    context.dependencies.lock().unwrap_or_else(PoisonError::into_inner).stop();
}

/// Reports every change of a watched dependency (created, changed, deleted) to the objects
/// that depend on it. Ends when the controller stops listening.
async fn watch_dependencies<K: Resource<DynamicType = ()>>(
    api: Api<DynamicObject>,
    key: WatchKey,
    index: Arc<Mutex<DependencyIndex<K>>>,
    triggers: UnboundedSender<ObjectRef<K>>,
) {
    let changes = watcher(api, watcher::Config::default()).default_backoff().touched_objects();
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        let changed = match change {
            Ok(changed) => changed,
            // The backoff retries the watch; the dependents' own requeues cover the gap.
            Err(error) => {
                warn!(kind = %key.kind, %error, "dependency watch failed");
                continue;
            }
        };
        let dependency = DependencyKey {
            group: key.group.clone(),
            kind: key.kind.clone(),
            namespace: key.namespace.as_ref().and(changed.metadata.namespace.clone()),
            name: changed.name_any(),
        };
        let dependents: Vec<ObjectRef<K>> = index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dependents
            .get(&dependency)
            .map(|dependents| dependents.iter().cloned().collect())
            .unwrap_or_default();
        for dependent in dependents {
            if triggers.unbounded_send(dependent).is_err() {
                return;
            }
        }
    }
}

/// One reconcile of one object. Public so tests can drive it directly.
pub async fn reconcile<M: ExternalResource>(object: Arc<M::Object>, context: Arc<Context<M>>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = contained(reconcile_object(object.as_ref(), &context)).await;
    let label = match &result {
        Ok(_) => "success",
        Err(error) => error.category(),
    };
    context.metrics.reconciled(context.config.name, label, started.elapsed());
    context.manager.reconciled(object.as_ref(), result.is_ok(), started.elapsed());
    result
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

fn error_policy<M: ExternalResource>(object: Arc<M::Object>, error: &Error, context: Arc<Context<M>>) -> Action {
    warn!(controller = context.config.name, object = %ObjectRef::from_obj(&*object), %error, "reconcile error");
    let uid = object.uid().unwrap_or_default();
    let state = object.status().map(ManagedStatus::state).unwrap_or_default();
    let attempt = context.next_attempt(&uid, state);
    // A failed Kubernetes request (a 409 on a stale copy, an unreachable API server) is
    // transient: the operator's error backoff applies, like any retryable external error.
    Action::requeue(requeue_delay(&context.manager, Requeue::AfterError(ErrorClass::Retryable), state, attempt))
}

/// Every requeue goes through here, so that each follows the operator's policies and carries
/// their jitter: per state for waits, the error backoff after errors, and after throttling the
/// error backoff raised to the throttle floor, jittered after the clamp so that objects
/// throttled together do not all return at the same instant.
fn requeue_delay<M: ExternalResource>(manager: &M, requeue: Requeue, state: ReconcileState, attempt: u32) -> Duration {
    let rng = &mut rand::rng();
    match requeue {
        Requeue::InState => manager.requeue_policy(state).delay(attempt, rng),
        Requeue::AfterError(ErrorClass::Throttled) => manager.error_backoff().delay_at_least(attempt, manager.throttle_floor(), rng),
        Requeue::AfterError(_) => manager.error_backoff().delay(attempt, rng),
    }
}

/// Where one reconcile ends: the status to write and when to look again.
struct Settled {
    state: ReconcileState,
    message: Option<String>,
    ready: Option<(bool, String, String)>,
    synced: (bool, String, String),
    marker: Marker,
    last_applied: Option<String>,
    drift_detected: Option<bool>,
    requeue: Requeue,
    warning: Option<(String, String)>,
    /// Set when the reconcile failed: the warning is then the error, recorded in
    /// `status.lastError` with this class.
    error_class: Option<ErrorClass>,
}

enum Marker {
    Keep,
    /// For the spec (as JSON) the create will be for.
    Set {
        token: String,
        spec: String,
    },
    Clear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requeue {
    InState,
    AfterError(ErrorClass),
}

impl Settled {
    fn new(state: ReconcileState) -> Self {
        Self {
            state,
            message: None,
            ready: None,
            synced: (true, "ReconcileSuccess".to_owned(), String::new()),
            marker: Marker::Keep,
            last_applied: None,
            drift_detected: None,
            requeue: Requeue::InState,
            warning: None,
            error_class: None,
        }
    }

    fn waiting(state: ReconcileState, reason: &str, message: String) -> Self {
        Self { ready: Some((false, reason.to_owned(), message.clone())), message: Some(message), ..Self::new(state) }
    }

    fn failed(reason: &str, message: String) -> Self {
        Self {
            ready: Some((false, reason.to_owned(), message.clone())),
            synced: (false, reason.to_owned(), message.clone()),
            warning: Some((reason.to_owned(), message.clone())),
            message: Some(message),
            marker: Marker::Clear,
            error_class: Some(ErrorClass::Terminal),
            ..Self::new(ReconcileState::Failed)
        }
    }

    /// A failed call: terminal errors fail the object, others keep `state` and back off.
    fn error(state: ReconcileState, error: ExternalError) -> Self {
        if error.class == ErrorClass::Terminal {
            return Self::failed(&error.reason, error.message);
        }
        Self {
            synced: (false, error.reason.clone(), error.message.clone()),
            warning: Some((error.reason, error.message.clone())),
            message: Some(error.message),
            requeue: Requeue::AfterError(error.class),
            error_class: Some(error.class),
            ..Self::new(state)
        }
    }
}

async fn reconcile_object<M: ExternalResource>(object: &M::Object, context: &Context<M>) -> Result<Action, Error> {
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
            let settled = Settled { synced: (false, "ReconcilePaused".to_owned(), message), ..Settled::new(current.state()) };
            write_status(object, &api, context, &current, settled, None).await?;
            return Ok(Action::await_change());
        }
        Err(invalid) => {
            let message = format!("{invalid}; the object is held as if paused until the value is one of these");
            write_status(object, &api, context, &current, invalid_annotation(current.state(), message), None).await?;
            return Ok(Action::await_change());
        }
    }
    if object.meta().deletion_timestamp.is_some() {
        let deletes = policy::deletes_on_delete(object.annotations(), manager.default_deletion_policy());
        return finalize(object, &api, context, &current, deletes, &uid).await;
    }
    let default_drift = manager.drift_policy(object).unwrap_or_else(|| manager.default_drift_policy());
    let policies = match Policies::from_annotations(object.annotations(), manager.default_deletion_policy(), default_drift) {
        Ok(policies) => policies,
        Err(invalid) => {
            // Acting on a misspelt policy could delete what the user meant to keep: stop, say why.
            let message = format!("{invalid}; nothing is done until it is fixed");
            write_status(object, &api, context, &current, invalid_annotation(current.state(), message), None).await?;
            return Ok(Action::await_change());
        }
    };
    if !object.finalizers().contains(&context.config.finalizer) {
        add_finalizer(object, &api, &context.config.finalizer).await?;
        // The finalizer change comes back as a watch event and triggers the next step.
        return Ok(Action::await_change());
    }
    let base = handle_retry_request(object, context, &current, &uid);

    let dependencies = match resolve_dependencies(object, context, &namespace).await? {
        Ok(dependencies) => dependencies,
        Err(waiting_for) => {
            let settled = Settled::waiting(ReconcileState::Pending, "DependenciesNotReady", waiting_for);
            return write_status_from(object, &api, context, &current, base, settled, Some(&uid)).await;
        }
    };

    let token = idempotency_token(&uid);
    let spec = serde_json::to_string(object.spec())?;
    let request = Request {
        object,
        dependencies: &dependencies,
        idempotency_token: &token,
        last_applied_spec: current.last_applied_spec.as_deref(),
        create_pending: current.create_pending.as_ref(),
    };
    let spec_changed = current.last_applied_spec.as_deref() != Some(spec.as_str());
    let marked = current.create_pending.as_ref().is_some_and(|marker| marker.spec.as_deref() == Some(spec.as_str()));
    let mut observation = current.observation.clone();
    let state = current.state();

    let verified = context.timed(Operation::Verify, manager.verify(&request, &mut observation), verify_label).await;
    if let Some(patch) = manager.spec_patch(&request, &observation)
        && patch_spec(object, &api, context, &patch).await?
    {
        // The new generation comes back as a watch event and triggers the next reconcile.
        return Ok(Action::await_change());
    }
    let plan = machine::plan(state, verified, &policies, spec_changed, marked);
    debug!(controller = context.config.name, object = %ObjectRef::from_obj(object), ?state, ?plan, "planned");

    let mut settled = match plan {
        Plan::Wait { state, reason, message } => Settled::waiting(state, reason, message),
        Plan::Ready => Settled { last_applied: Some(spec.clone()), ..ready() },
        Plan::MarkCreating => mark_creating(&token, &spec),
        Plan::Create => {
            let outcome = context.timed(Operation::Create, manager.create(&request, &mut observation), mutate_label).await;
            settle_next(machine::after_create(outcome), &token, &spec, true)
        }
        Plan::Update { .. } => {
            let outcome = context.timed(Operation::Update, manager.update(&request, &mut observation), mutate_label).await;
            settle_next(machine::after_update(outcome), &token, &spec, false)
        }
        Plan::Recreate { .. } => {
            let outcome = context.timed(Operation::Delete, manager.delete(&request, &mut observation), delete_label).await;
            match machine::after_recreate_delete(outcome) {
                Next::To(state) => Settled::waiting(state, "Recreating", "waiting for the old external resource to be deleted".to_owned()),
                other => settle_next(other, &token, &spec, false),
            }
        }
        Plan::Drift { policy, message } => drifted(state, policy, message),
        Plan::Missing { policy } => {
            let message = "the external resource no longer exists".to_owned();
            Settled {
                ready: Some((false, "ExternalResourceMissing".to_owned(), message.clone())),
                warning: Some(("ExternalResourceMissing".to_owned(), format!("{message} (drift-policy {policy}: not recreated)"))),
                ..drifted(state, policy, message)
            }
        }
        Plan::Fail { reason, message } => Settled::failed(reason, message),
        Plan::Error(error) => Settled::error(state, error),
    };

    if settled.state == ReconcileState::Succeeded {
        let hook = context.timed(Operation::SuccessHook, manager.on_success(&request, &observation, &context.client), |r| match r {
            Ok(()) => "success",
            Err(e) => e.class.as_str(),
        });
        if let Err(error) = hook.await {
            settled.synced = (false, "SuccessHookFailed".to_owned(), error.message.clone());
            settled.warning = Some(("SuccessHookFailed".to_owned(), error.message));
            settled.requeue = Requeue::AfterError(error.class);
            settled.error_class = Some(error.class);
        }
    }

    let mut next = base;
    next.observation = observation;
    if let Some(last_applied) = settled.last_applied.take() {
        next.last_applied_spec = Some(last_applied);
    }
    write_status_from(object, &api, context, &current, next, settled, Some(&uid)).await
}

/// An annotation the runtime cannot act on: `Synced=False` and a Warning event, both naming the
/// accepted values; the state is kept.
fn invalid_annotation(state: ReconcileState, message: String) -> Settled {
    Settled {
        synced: (false, "InvalidAnnotation".to_owned(), message.clone()),
        warning: Some(("InvalidAnnotation".to_owned(), message)),
        ..Settled::new(state)
    }
}

/// The resource exists and is ready. The create-pending marker goes with it in every case,
/// including an adoption after a crash between create and status write: the marker only guards
/// a create that may be in flight, and this one is known to have landed.
fn ready() -> Settled {
    Settled {
        ready: Some((true, "Available".to_owned(), "the external resource is ready".to_owned())),
        drift_detected: Some(false),
        marker: Marker::Clear,
        ..Settled::new(ReconcileState::Succeeded)
    }
}

/// The create call follows on the next reconcile, after the Creating state's first (short)
/// requeue: the status write that carries the marker does not trigger a reconcile itself.
fn mark_creating(token: &str, spec: &str) -> Settled {
    Settled {
        marker: Marker::Set { token: token.to_owned(), spec: spec.to_owned() },
        ..Settled::waiting(ReconcileState::Creating, "Creating", "creating the external resource".to_owned())
    }
}

fn settle_next(next: Next, token: &str, spec: &str, creating: bool) -> Settled {
    match next {
        Next::To(ReconcileState::Succeeded) => Settled { last_applied: Some(spec.to_owned()), ..ready() },
        Next::To(state) => Settled {
            marker: Marker::Clear,
            last_applied: Some(spec.to_owned()),
            ..Settled::waiting(state, "Verifying", "waiting for the external resource to become ready".to_owned())
        },
        Next::MarkCreating => mark_creating(token, spec),
        // A failed create keeps its marker (unless terminal): the retry reuses the token.
        Next::Error { retry_in, error } => {
            let mut settled = Settled::error(retry_in, error);
            if creating && settled.state == ReconcileState::Creating {
                settled.marker = Marker::Keep;
            }
            settled
        }
    }
}

fn drifted(state: ReconcileState, policy: DriftPolicy, difference: String) -> Settled {
    let message = format!("the external resource drifted from the spec: {difference} (drift-policy {policy})");
    let synced = match policy {
        DriftPolicy::Report => (false, "DriftDetected".to_owned(), message.clone()),
        DriftPolicy::Enforce | DriftPolicy::Suspend => (true, "DriftIgnored".to_owned(), message.clone()),
    };
    Settled { synced, drift_detected: Some(true), message: Some(message), ..Settled::new(state) }
}

/// Deletion comes before everything else, and ends with the finalizer removed in every case
/// but an external delete that failed (the status then says how to release the object).
async fn finalize<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    current: &ManagedStatus<M::Observation>,
    deletes: Result<bool, AnnotationError>,
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
            return release(object, api, context, uid, EventType::Normal, "Orphaned", note).await;
        }
        // Unsure whether we may delete: keep the external resource (the safe choice), and let
        // the object go rather than hold it until someone fixes an annotation on a dying object.
        Err(invalid) => {
            warn!(controller = context.config.name, object = %ObjectRef::from_obj(object), %invalid, "orphaning the external resource");
            let note = format!("{invalid}; the external resource was kept (treated as deletion policy Orphan)");
            return release(object, api, context, uid, EventType::Warning, "InvalidAnnotation", &note).await;
        }
    }
    let token = idempotency_token(uid);
    let request = Request {
        object,
        dependencies: &[],
        idempotency_token: &token,
        last_applied_spec: current.last_applied_spec.as_deref(),
        create_pending: current.create_pending.as_ref(),
    };
    let mut observation = current.observation.clone();
    let manager = &context.manager;
    let verified = context.timed(Operation::Verify, manager.verify(&request, &mut observation), verify_label).await;
    // Terminating: an earlier reconcile of this deletion called delete (or saw it under way).
    let mut deleted = current.state() == ReconcileState::Terminating;
    let plan = match machine::plan_delete(verified) {
        DeletePlan::Delete => {
            let outcome = context.timed(Operation::Delete, manager.delete(&request, &mut observation), delete_label).await;
            deleted = true;
            machine::after_delete(outcome)
        }
        other => other,
    };
    let settled = match plan {
        // Only a delete call deletes: when verify finds nothing at once (gone already, or
        // nothing the operator deletes, like a Cert without deleteOnRemoval), the event must not
        // say so.
        DeletePlan::Release if deleted => {
            return release(object, api, context, uid, EventType::Normal, "Deleted", "the external resource was deleted").await;
        }
        DeletePlan::Release => {
            let note = "nothing to delete: the external resource is gone, or the operator keeps it";
            return release(object, api, context, uid, EventType::Normal, "Released", note).await;
        }
        DeletePlan::Delete | DeletePlan::Wait => {
            Settled::waiting(ReconcileState::Terminating, "Deleting", "waiting for the external resource to be deleted".to_owned())
        }
        DeletePlan::Error(error) => {
            let message = format!(
                "deleting the external resource failed: {}; to delete the object and keep the external resource, annotate it {}=Orphan",
                error.message,
                crate::policy::DELETION_POLICY_ANNOTATION
            );
            let class = if error.class == ErrorClass::Terminal { ErrorClass::Retryable } else { error.class };
            let mut settled = Settled::error(ReconcileState::Terminating, ExternalError::new(class, error.reason, message));
            if error.class == ErrorClass::Terminal {
                settled.requeue = Requeue::InState;
            }
            settled
        }
    };
    let mut next = handle_retry_request(object, context, current, uid);
    next.observation = observation;
    write_status_from(object, api, context, current, next, settled, Some(uid)).await
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
        context.clear_backoff(uid);
        next.last_handled_reconcile_at = Some(requested.clone());
    }
    next
}

async fn release<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    uid: &str,
    type_: EventType,
    reason: &str,
    note: &str,
) -> Result<Action, Error> {
    remove_finalizer(object, api, &context.config.finalizer).await?;
    publish(context, object, type_, reason, note).await;
    context.forget(uid, &ObjectRef::from_obj(object));
    Ok(Action::await_change())
}

async fn write_status<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    current: &ManagedStatus<M::Observation>,
    settled: Settled,
    uid: Option<&str>,
) -> Result<Action, Error> {
    write_status_from(object, api, context, current, current.clone(), settled, uid).await
}

/// Applies `settled` to `next`, writes the status if it changed (the reconcile's one write),
/// publishes events, and returns when to look again.
async fn write_status_from<M: ExternalResource>(
    object: &M::Object,
    api: &Api<M::Object>,
    context: &Context<M>,
    current: &ManagedStatus<M::Observation>,
    mut next: ManagedStatus<M::Observation>,
    settled: Settled,
    uid: Option<&str>,
) -> Result<Action, Error> {
    let generation = object.meta().generation;
    let now = jiff::Timestamp::now();
    // When to look again, decided before the write so that a failure's retry time is in it.
    let delay = uid.map(|uid| {
        let attempt = context.next_attempt(uid, settled.state);
        requeue_delay(&context.manager, settled.requeue, settled.state, attempt)
    });
    if current.reconcile_state != Some(settled.state) {
        next.reconcile_state_since = Some(Time(now));
    }
    next.reconcile_state = Some(settled.state);
    next.message = settled.message.clone();
    next.observed_generation = generation;
    next.last_error = match (settled.error_class, &settled.warning, delay) {
        (Some(class), Some((reason, message)), Some(delay)) => {
            let retry_at = now.checked_add(delay).unwrap_or(now);
            Some(LastError::after(current.last_error.as_ref(), class, reason, message, now, retry_at))
        }
        _ => None,
    };
    match &settled.marker {
        Marker::Keep => {}
        Marker::Set { token, spec } => {
            next.create_pending =
                Some(CreatePending { token: token.clone(), since: Time(jiff::Timestamp::now()), spec: Some(spec.clone()) });
        }
        Marker::Clear => next.create_pending = None,
    }
    if let Some(drift) = settled.drift_detected {
        next.drift_detected = drift.then_some(true);
    }
    if let Some((status, reason, message)) = &settled.ready {
        set_condition(&mut next.conditions, condition(READY, *status, reason, message, generation));
    } else if next.condition(READY).is_none() {
        set_condition(&mut next.conditions, condition(READY, false, settled.state.as_str(), "", generation));
    }
    let (synced, reason, message) = &settled.synced;
    set_condition(&mut next.conditions, condition(SYNCED, *synced, reason, message, generation));
    merge_operator_conditions(&mut next.conditions, context.manager.conditions(object, &next.observation));
    keep_marker_time(current, &mut next);

    // Compared as written: fields an observation does not serialize never cause a write.
    if serde_json::to_value(&next)? != serde_json::to_value(current)? {
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
        api.patch_status(&object.name_any(), &params, &Patch::Apply(&patch)).await?;
    }

    let state_changed = current.reconcile_state != Some(settled.state);
    if state_changed {
        let note = settled.message.clone().unwrap_or_else(|| format!("state is now {}", settled.state));
        let kind = if settled.state == ReconcileState::Failed { EventType::Warning } else { EventType::Normal };
        publish(context, object, kind, settled.state.as_str(), &note).await;
    }
    // The Failed state's own event carries the failure when the object just failed.
    let failure_announced = state_changed && settled.state == ReconcileState::Failed;
    if let Some((reason, note)) = &settled.warning
        && !failure_announced
    {
        publish(context, object, EventType::Warning, reason, note).await;
    }

    let (Some(uid), Some(delay)) = (uid, delay) else {
        return Ok(Action::await_change());
    };
    context.metrics.object_state(context.config.name, uid, Some(settled.state));
    Ok(Action::requeue(delay))
}

/// The operator's conditions replace the previous ones (see [`ExternalResource::conditions`]);
/// `Ready` and `Synced` stay the runtime's.
fn merge_operator_conditions(conditions: &mut Vec<Condition>, operator: Vec<Condition>) {
    let runtime_owned = |type_: &str| type_ == READY || type_ == SYNCED;
    let operator: Vec<Condition> = operator.into_iter().filter(|c| !runtime_owned(&c.type_)).collect();
    conditions.retain(|c| runtime_owned(&c.type_) || operator.iter().any(|o| o.type_ == c.type_));
    for condition in operator {
        set_condition(conditions, condition);
    }
}

/// Writes the operator's merge patch of the spec, unless it would change nothing. `Ok(true)`
/// when written: the reconcile's one write.
async fn patch_spec<M: ExternalResource>(
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
    api.patch(&object.name_any(), &params, &Patch::Merge(&body)).await?;
    info!(controller = context.config.name, object = %ObjectRef::from_obj(object), "spec updated by the operator");
    let note = format!("the operator set {} (the values are in the spec)", patched_fields(patch).join(", "));
    publish(context, object, EventType::Normal, "SpecUpdated", &note).await;
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

/// The marker's timestamp is when it was first written for this spec, not when it was last
/// re-set: operators may tie a create to it (one create, however often it is retried).
fn keep_marker_time<O>(current: &ManagedStatus<O>, next: &mut ManagedStatus<O>) {
    if let (Some(old), Some(new)) = (&current.create_pending, &mut next.create_pending)
        && old.token == new.token
        && old.spec == new.spec
    {
        new.since = old.since.clone();
    }
}

async fn publish<M: ExternalResource>(context: &Context<M>, object: &M::Object, type_: EventType, reason: &str, note: &str) {
    context.events.publish(&object.object_ref(&()), type_, reason, "Reconcile", note).await;
}

async fn add_finalizer<K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug>(
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
    api.patch(&object.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await?;
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
    match api.patch(&object.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// `Ok(Ok(objects))` when every dependency is Ready, `Ok(Err(message))` when waiting.
///
/// Each dependency is registered, and its kind watched, before it is read: a change after the
/// read then triggers this object again, and one before it is in what was read.
async fn resolve_dependencies<M: ExternalResource>(
    object: &M::Object,
    context: &Context<M>,
    namespace: &str,
) -> Result<Result<Vec<DynamicObject>, String>, Error> {
    let mut lookups = Vec::new();
    let mut keys = HashSet::new();
    let mut unserved = None;
    for dependency in context.manager.dependencies(object) {
        let Some(kind) = api_resource(context, &dependency).await? else {
            // Nothing to watch yet: the Pending requeue looks again.
            unserved.get_or_insert_with(|| format!("waiting for {dependency}: its kind is not served by the API server"));
            continue;
        };
        let dependency_namespace = (!kind.cluster_scoped).then(|| dependency.namespace.clone().unwrap_or_else(|| namespace.to_owned()));
        context.watch_dependency(&kind, dependency_namespace.as_deref());
        keys.insert(DependencyKey {
            group: kind.resource.group.clone(),
            kind: kind.resource.kind.clone(),
            namespace: dependency_namespace.clone(),
            name: dependency.name.clone(),
        });
        lookups.push((dependency, kind, dependency_namespace));
    }
    context.dependencies.lock().unwrap_or_else(PoisonError::into_inner).register(ObjectRef::from_obj(object), keys);
    if let Some(waiting) = unserved {
        return Ok(Err(waiting));
    }
    let mut resolved = Vec::new();
    for (dependency, kind, dependency_namespace) in lookups {
        let api: Api<DynamicObject> = match &dependency_namespace {
            Some(dependency_namespace) => Api::namespaced_with(context.client.clone(), dependency_namespace, &kind.resource),
            None => Api::all_with(context.client.clone(), &kind.resource),
        };
        match api.get_opt(&dependency.name).await? {
            None => return Ok(Err(format!("waiting for {dependency}: not found"))),
            Some(found) if !is_ready(&found) => return Ok(Err(format!("waiting for {dependency} to be Ready"))),
            Some(found) => resolved.push(found),
        }
    }
    Ok(Ok(resolved))
}

async fn api_resource<M: ExternalResource>(context: &Context<M>, dependency: &DependencyRef) -> Result<Option<DependencyKind>, Error> {
    let key = (dependency.api_version.clone(), dependency.kind.clone());
    if let Some(found) = context.api_resources.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return Ok(Some(found.clone()));
    }
    let (group, version) = match dependency.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", dependency.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &dependency.kind);
    match kube::discovery::pinned_kind(&context.client, &gvk).await {
        Ok((resource, capabilities)) => {
            let kind = DependencyKind { resource, cluster_scoped: capabilities.scope == Scope::Cluster };
            context.api_resources.lock().unwrap_or_else(PoisonError::into_inner).insert(key, kind.clone());
            Ok(Some(kind))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == READY && c["status"] == "True"))
}

/// 32 hex characters from the UID: fits ACM's IdempotencyToken (`\w{1,32}`) and similar fields.
pub fn idempotency_token(uid: &str) -> String {
    let digest = Sha256::digest(uid.as_bytes());
    hex::encode(&digest[..16])
}

fn verify_label(outcome: &VerifyOutcome) -> &'static str {
    match outcome {
        VerifyOutcome::Error(e) => e.class.as_str(),
        _ => "success",
    }
}

fn mutate_label(outcome: &MutateOutcome) -> &'static str {
    match outcome {
        MutateOutcome::Error(e) => e.class.as_str(),
        _ => "success",
    }
}

fn delete_label(outcome: &DeleteOutcome) -> &'static str {
    match outcome {
        DeleteOutcome::Error(e) => e.class.as_str(),
        _ => "success",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "testing.blockwork.dev", version = "v1", kind = "Thing", namespaced, status = "ManagedStatus<()>")]
    struct ThingSpec {}

    /// Only the requeue policies matter here; no call is ever made.
    struct Defaults;

    impl ExternalResource for Defaults {
        type Object = Thing;
        type Observation = ();

        async fn verify(&self, _: &Request<'_, Thing>, _: &mut ()) -> VerifyOutcome {
            VerifyOutcome::Ready
        }
        async fn create(&self, _: &Request<'_, Thing>, _: &mut ()) -> MutateOutcome {
            MutateOutcome::Succeeded
        }
        async fn update(&self, _: &Request<'_, Thing>, _: &mut ()) -> MutateOutcome {
            MutateOutcome::Succeeded
        }
        async fn delete(&self, _: &Request<'_, Thing>, _: &mut ()) -> DeleteOutcome {
            DeleteOutcome::Succeeded
        }
    }

    fn delays(requeue: Requeue, state: ReconcileState, attempt: u32) -> (Duration, Duration) {
        let delays: Vec<Duration> = (0..500).map(|_| requeue_delay(&Defaults, requeue, state, attempt)).collect();
        let min = delays.iter().min().copied().unwrap_or_default();
        let max = delays.iter().max().copied().unwrap_or_default();
        assert_ne!(min, max, "every requeue is jittered");
        (min, max)
    }

    fn within_ten_percent((min, max): (Duration, Duration), interval: Duration) -> bool {
        min >= interval.mul_f64(0.9) && max <= interval.mul_f64(1.1)
    }

    fn key(name: &str) -> DependencyKey {
        DependencyKey { group: "testing.blockwork.dev".into(), kind: "Thing".into(), namespace: Some("ns".into()), name: name.into() }
    }

    fn dependents(index: &DependencyIndex<Thing>, name: &str) -> Vec<String> {
        let mut names: Vec<String> = index.dependents.get(&key(name)).into_iter().flatten().map(|r| r.name.clone()).collect();
        names.sort();
        names
    }

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
    fn dependency_index_follows_each_objects_current_dependencies() {
        let mut index = DependencyIndex::<Thing>::default();
        let a = ObjectRef::new("a").within("ns");
        let b = ObjectRef::new("b").within("ns");
        index.register(a.clone(), HashSet::from([key("db"), key("net")]));
        index.register(b.clone(), HashSet::from([key("db")]));
        assert_eq!(dependents(&index, "db"), ["a", "b"]);
        // a no longer depends on net: a change of net must not wake it.
        index.register(a.clone(), HashSet::from([key("db")]));
        assert!(dependents(&index, "net").is_empty());
        assert!(!index.dependents.contains_key(&key("net")), "empty entries are dropped");
        // A deleted object is forgotten entirely.
        index.unregister(&a);
        index.register(b, HashSet::new());
        assert!(index.dependents.is_empty() && index.of_object.is_empty());
    }

    #[test]
    fn waits_follow_the_state_policy_with_jitter() {
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Succeeded, 0), Duration::from_secs(3600)));
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Pending, 1), Duration::from_secs(60)));
        // The first look after writing the create marker is the Creating state's first interval.
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Creating, 0), Duration::from_secs(1)));
    }

    #[test]
    fn retryable_errors_follow_the_error_backoff_with_jitter() {
        let state = ReconcileState::Creating;
        assert!(within_ten_percent(delays(Requeue::AfterError(ErrorClass::Retryable), state, 0), Duration::from_secs(5)));
        assert!(within_ten_percent(delays(Requeue::AfterError(ErrorClass::Retryable), state, 2), Duration::from_secs(20)));
    }

    #[test]
    fn throttling_waits_at_least_the_floor_with_jitter_around_it() {
        let (min, max) = delays(Requeue::AfterError(ErrorClass::Throttled), ReconcileState::Creating, 0);
        assert!(within_ten_percent((min, max), Duration::from_secs(60)), "{min:?}..{max:?}");
        assert!(min < Duration::from_secs(60) && max > Duration::from_secs(60), "jitter applies after the clamp: {min:?}..{max:?}");
        // Past the floor the backoff grows on: 5 s × 2^5 = 160 s.
        assert!(within_ten_percent(
            delays(Requeue::AfterError(ErrorClass::Throttled), ReconcileState::Creating, 5),
            Duration::from_secs(160)
        ));
    }

    #[test]
    fn operator_conditions_replace_the_previous_ones_and_leave_ready_and_synced() {
        let mut conditions = vec![
            condition(READY, true, "Available", "", Some(1)),
            condition(SYNCED, true, "ReconcileSuccess", "", Some(1)),
            condition("DNSReady", false, "DNSPropagating", "", Some(1)),
            condition("CertificateReady", true, "CertificateAttached", "", Some(1)),
        ];
        let dns_since = conditions[2].last_transition_time.clone();
        merge_operator_conditions(
            &mut conditions,
            vec![condition("DNSReady", false, "DNSRecordCreating", "", Some(2)), condition(READY, false, "Hijacked", "", Some(2))],
        );
        let seen: Vec<(&str, &str)> = conditions.iter().map(|c| (c.type_.as_str(), c.reason.as_str())).collect();
        assert_eq!(seen, [(READY, "Available"), (SYNCED, "ReconcileSuccess"), ("DNSReady", "DNSRecordCreating")]);
        assert_eq!(conditions[2].last_transition_time, dns_since, "same status: the transition time stays");
    }

    #[test]
    fn spec_updated_event_names_the_fields_set_and_not_their_values() {
        let patch =
            json!({ "customizations": { "certificate": { "arn": "arn:aws:acm:us-east-1:123456789012:certificate/c" } }, "enabled": true });
        assert_eq!(patched_fields(&patch), ["spec.customizations.certificate.arn", "spec.enabled"]);
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
