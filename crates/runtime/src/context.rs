//! What every reconcile of one controller shares: its name ([`ControllerConfig`]), the
//! [`Context`] (client, operator, metrics, backoff, dependencies, the watches' caches).
//! Below the wiring (`controller.rs`) and the reconcile flow, which both take it, so neither
//! imports the other for it.

use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc::UnboundedSender;
use kube::Client;
use kube::runtime::reflector::{self, ObjectRef};
use opentelemetry::trace::SpanContext;

use crate::dependencies::Dependencies;
use crate::events::Publisher;
use crate::metrics::RuntimeMetrics;
use crate::policy::{DeletionPolicy, DriftPolicy};
use crate::resource::ExternalResource;
use crate::timing::{Attempts, Timing};
use crate::trace::{Cause, Triggers};

/// One controller as it registers: its names (metric label, event reporter, finalizer, field
/// manager) and the operator's constants, given as data once rather than asked of the operator
/// on every reconcile (they are the same for every object).
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Short name, e.g. `cert`.
    pub name: &'static str,
    /// e.g. `acm.blockwork.dev/finalizer`.
    pub finalizer: String,
    /// The server-side-apply field manager for status.
    pub field_manager: String,
    /// How long to wait in each state, after errors and after throttling (seed 000's by default).
    pub timing: Timing,
    /// The deletion policy of an object without the `blockwork.dev/deletion-policy` annotation
    /// (`Delete` by default; operators of resources whose deletion is dangerous choose `Orphan`).
    pub default_deletion: DeletionPolicy,
    /// The drift policy of an object without the `blockwork.dev/drift-policy` annotation and
    /// without one of its own ([`crate::resource::Asks::drift_policy`]): typically the operator's
    /// flag (`Enforce` by default).
    pub default_drift: DriftPolicy,
}

impl ControllerConfig {
    pub fn new(name: &'static str, group: &str) -> Self {
        Self {
            name,
            finalizer: format!("{group}/finalizer"),
            field_manager: format!("blockwork-{name}"),
            timing: Timing::default(),
            default_deletion: DeletionPolicy::Delete,
            default_drift: DriftPolicy::Enforce,
        }
    }

    pub fn with_timing(self, timing: Timing) -> Self {
        Self { timing, ..self }
    }

    pub fn with_default_deletion(self, default_deletion: DeletionPolicy) -> Self {
        Self { default_deletion, ..self }
    }

    pub fn with_default_drift(self, default_drift: DriftPolicy) -> Self {
        Self { default_drift, ..self }
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
    /// The caches of the watches [`crate::run`] keeps, one per `Api` it was started with.
    pub(crate) stores: Mutex<Vec<reflector::Store<M::Object>>>,
    /// Per watch [`crate::run`] keeps: its cache, and where [`Context::wake`] sends the objects in it.
    pub(crate) wakers: Mutex<Vec<Waker<M::Object>>>,
    /// Why each object's next reconcile runs, for its span (only while traces are exported).
    pub(crate) triggers: Triggers<ObjectRef<M::Object>>,
}

/// A watch's cache, and the channel that makes its reconciler look at an object again.
pub(crate) type Waker<K> = (reflector::Store<K>, UnboundedSender<ObjectRef<K>>);

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
            triggers: Triggers::default(),
        })
    }

    /// Reconciles `object` soon, whatever its requeue: for an operator that learns of a change
    /// of the external resource elsewhere than in a reconcile (a shared listing of many
    /// resources, a write done in the background). An object no watch holds is ignored.
    pub fn wake(&self, object: &ObjectRef<M::Object>) {
        self.wake_from(object, crate::trace::span_context(&tracing::Span::current()));
    }

    /// [`Context::wake`] for work done in `span` (a sweep, a batch), which the reconcile's trace
    /// links to: for work told through a channel ([`crate::trace::Traced`]), not running in the
    /// span that wakes.
    pub fn wake_from(&self, object: &ObjectRef<M::Object>, span: Option<SpanContext>) {
        self.queue(object, || self.triggers.note_from(object, Cause::Woken, span.clone()));
    }

    /// [`Context::wake`] for work the object's last reconcile left (it recorded something the
    /// next look acts on, which nothing else brings sooner): the reconcile's trace links to that
    /// last reconcile, as a requeue's does.
    pub fn wake_again(&self, object: &ObjectRef<M::Object>) {
        self.queue(object, || self.triggers.note_following(object, Cause::Woken));
    }

    /// Reconciles `object` soon because another object it depends on or is named by changed (an
    /// AwsIdentity mapping, a Secret it wrote), seen by a watch of the operator's own: its trace
    /// says `related object changed`, like a dependency's change.
    pub fn related_changed(&self, object: &ObjectRef<M::Object>) {
        self.queue(object, || self.triggers.note(object, Cause::Related));
    }

    /// Hands `object` to each watch's reconciler that holds it, noting its trigger first.
    fn queue(&self, object: &ObjectRef<M::Object>, note: impl Fn()) {
        let wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        for (store, waker) in wakers.iter() {
            if store.get(object).is_some() {
                note();
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
        self.triggers.forget(object);
        self.metrics.object_state(self.config.name, uid, None);
    }
}
