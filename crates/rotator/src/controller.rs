//! The Kubernetes side: two watches of Secrets per scope, routed to one reconcile per source;
//! each reconcile takes the source and its target from the [`Cache`] (or reads them when the
//! cache cannot tell), [`plan`]s, writes at most once (the commit point), then reports through
//! events and metrics; the events wait in the [`Outbox`] until the rotator is idle.
//!
//! Memory and speed: `kubernetes.io/tls` Secrets — every source cert-manager writes, every
//! target — come in full through one watch, and the cache keeps the few the rotator works
//! with; every other Secret comes through a metadata-only watch (the API server never sends
//! its data) and is dropped once it has streamed past. A rotation is then one write with the
//! cached target's resourceVersion as precondition, and no read; a 409 Conflict (the cache was
//! behind) falls back to reading the source and the target. A source of another type is read
//! each time. A source's trigger goes to a waiting worker at once through the rotator's own
//! work queue ([`crate::queue`], client-go's semantics), not kube-runtime's `Controller`, whose
//! scheduler put a timer tick between the watch event and the reconcile (ADR 0010).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{FutureExt as _, StreamExt as _};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use blockwork_runtime::ErrorClass;
use blockwork_runtime::events::Publisher;
use blockwork_runtime::namespaces::{self, Namespaces};
use blockwork_runtime::policy::AnnotationError;

use crate::cache::{Cache, Key, Scope};
use crate::config::{Config, Keys};
use crate::failure;
use crate::metrics::Metrics;
use crate::outbox::{LONGEST_WAIT, Next, Outbox};
use crate::plan::{self, Action, Blocked, Input, Plan, TLS_TYPE};
use crate::queue::Queue;

type Meta = PartialObjectMeta<Secret>;

/// How often a source is looked at without any change (a safety net for missed watch events).
const RESYNC: Duration = Duration::from_secs(3600);
/// Longest retry delay after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Field manager of the rotator's writes.
const FIELD_MANAGER: &str = crate::config::CONTROLLER_NAME;
/// Secrets per page of a watch's (re)list. The rotator keeps almost none of them, so a page is
/// garbage once routed; small pages keep the heap that a start-up leaves behind small (500,
/// client-go's and kube's default, left 5.5 MiB of a 10,000-Secret list in the allocator).
const LIST_PAGE_SIZE: u32 = 100;

/// Why a reconcile failed; it is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write lost a race: the object changed since it was read. Nothing was written.
    #[error("the Secret {0} changed since it was read; retrying")]
    Conflict(String),
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("the watched object has no {0}")]
    MissingMetadata(&'static str),
}

impl Error {
    /// The class of the failure, for its event (see [`failure`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Conflict(_) => ErrorClass::Retryable,
            Self::Kube(kube::Error::Api(status)) => failure::class_of_status(Some(status.code)),
            Self::Kube(_) => failure::class_of_status(None),
            Self::MissingMetadata(_) => ErrorClass::Terminal,
        }
    }

    /// The `reason` label of `errors_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::Kube(_) | Self::MissingMetadata(_) => "api",
        }
    }
}

fn conflict_or(error: kube::Error, name: &str) -> Error {
    match &error {
        kube::Error::Api(status) if status.code == 409 => Error::Conflict(name.to_owned()),
        _ => Error::Kube(error),
    }
}

/// What one reconcile read (from the API server or the cache).
#[derive(Clone, Debug)]
pub struct Observation {
    pub source: Arc<Secret>,
    pub target: Option<Arc<Secret>>,
    /// See [`plan::Input::other_claim_active`].
    pub other_claim_active: bool,
}

/// What one reconcile did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub plan: Plan,
    /// The target as the API server returned it after the write, if there was one.
    pub written: Option<Secret>,
}

/// The rotator's shared state: client, configuration, events, metrics.
pub struct Rotator {
    client: Client,
    keys: Keys,
    events: Publisher,
    /// Events waiting for the rotator to be idle, and the reconciles running.
    outbox: Mutex<Outbox<Pending>>,
    /// Wakes the publisher: an event came, a reconcile ended, or the outbox closed.
    outbox_changed: Notify,
    metrics: Arc<Metrics>,
    conflict_requeue: Duration,
    error_requeue: Duration,
    /// resourceVersion of each target as the rotator last wrote it: the watch event of the
    /// rotator's own write triggers no reconcile.
    written: Mutex<HashMap<(String, String), String>>,
    /// Consecutive failures per source, for the retry backoff.
    failures: Mutex<HashMap<(String, String), u32>>,
    /// Sources and targets in full, kept by [`run`]'s watches (empty without them).
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Rotator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotator").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl Rotator {
    pub fn new(client: Client, config: &Config, metrics: Arc<Metrics>) -> Self {
        Self {
            events: Publisher::new(client.clone(), config.reporter.clone()),
            outbox: Mutex::default(),
            outbox_changed: Notify::new(),
            client,
            keys: config.keys.clone(),
            metrics,
            conflict_requeue: config.conflict_requeue,
            error_requeue: config.error_requeue,
            written: Mutex::default(),
            failures: Mutex::default(),
            cache: Mutex::default(),
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn api(&self, namespace: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Reads the source (full) and, if it names a valid target, the target, and whether another
    /// source's claim on the target is live. `None` if the source is gone or no longer a source.
    pub async fn observe(&self, namespace: &str, source_name: &str) -> Result<Option<Observation>, Error> {
        let api = self.api(namespace);
        let Some(source) = api.get_opt(source_name).await? else {
            return Ok(None);
        };
        if !self.keys.is_source(source.annotations()) {
            return Ok(None);
        }
        let target_name = self.destination(&source);
        let target = match &target_name {
            Some(name) => api.get_opt(name).await?,
            None => None,
        };
        let other_claim_active = match target.as_ref().and_then(|t| plan::claimant(&self.keys, t)) {
            Some(claim) if claim.source() != source_name => {
                api.get_opt(claim.source()).await?.is_some_and(|other| self.claims(&other, target_name.as_deref()))
            }
            _ => false,
        };
        Ok(Some(Observation { source: Arc::new(source), target: target.map(Arc::new), other_claim_active }))
    }

    /// The same observation from the cache alone, when the cache can give it: its view of the
    /// namespace is consistent and holds the source. A target it does not hold is taken as
    /// absent (a create then fails with 409 if it exists after all). `None`: read instead.
    pub fn observe_cached(&self, namespace: &str, source_name: &str) -> Option<Observation> {
        let cache = self.cache();
        if !cache.is_consistent(namespace) {
            return None;
        }
        let source = cache.get(namespace, source_name).filter(|s| self.keys.is_source(s.annotations()))?;
        let target_name = self.destination(&source);
        let target = target_name.as_deref().and_then(|name| cache.get(namespace, name));
        let other_claim_active = match target.as_deref().and_then(|t| plan::claimant(&self.keys, t)) {
            // A competing source the cache does not hold (gone, or not a TLS Secret): read.
            Some(claim) if claim.source() != source_name => self.claims(&*cache.get(namespace, claim.source())?, target_name.as_deref()),
            _ => false,
        };
        Some(Observation { source, target, other_claim_active })
    }

    /// The source's destination if it is a usable Secret name other than the source's own.
    fn destination(&self, source: &Secret) -> Option<String> {
        source
            .annotations()
            .get(&self.keys.destination)
            .map(|d| d.trim().to_owned())
            .filter(|d| crate::config::is_dns_subdomain(d) && *d != source.name_any())
    }

    /// Whether `other` is a source naming `target` and is not being deleted.
    fn claims(&self, other: &Secret, target: Option<&str>) -> bool {
        self.keys.is_source(other.annotations())
            && other.metadata.deletion_timestamp.is_none()
            && self.destination(other).as_deref() == target
    }

    /// The pure decision (see [`plan::plan`]).
    pub fn plan(&self, observation: &Observation, now: Timestamp) -> Plan {
        plan::plan(&Input {
            keys: &self.keys,
            source: &observation.source,
            target: observation.target.as_deref(),
            other_claim_active: observation.other_claim_active,
            now,
        })
    }

    /// Writes what `plan` says to the target: a create, or a replace with the read
    /// resourceVersion as precondition. A lost race is [`Error::Conflict`] with nothing written.
    pub async fn apply(&self, observation: &Observation, plan: &Plan) -> Result<Option<Secret>, Error> {
        let namespace = observation.source.namespace().ok_or(Error::MissingMetadata("namespace"))?;
        let api = self.api(&namespace);
        let params = PostParams { dry_run: false, field_manager: Some(FIELD_MANAGER.to_owned()) };
        let written = match (&plan.action, &plan.write, &plan.target_name) {
            (Action::Create, Some(secret), Some(name)) => Some(api.create(&params, secret).await.map_err(|e| conflict_or(e, name))?),
            (Action::Rotate | Action::Update, Some(secret), Some(name)) => {
                Some(api.replace(name, &params, secret).await.map_err(|e| conflict_or(e, name))?)
            }
            _ => None,
        };
        if let (Some(secret), Some(name)) = (&written, &plan.target_name)
            && let Some(rv) = secret.resource_version()
        {
            self.written.lock().unwrap_or_else(PoisonError::into_inner).insert((namespace.clone(), name.clone()), rv);
        }
        Ok(written)
    }

    /// Removes the original operator's finalizer from the source (when the plan says so, after
    /// the target no longer has an owner reference to it), on the source's resourceVersion.
    pub async fn release_legacy_finalizer(&self, observation: &Observation, plan: &Plan) -> Result<(), Error> {
        if !plan.remove_legacy_finalizer {
            return Ok(());
        }
        let source = &observation.source;
        let api = self.api(&source.namespace().ok_or(Error::MissingMetadata("namespace"))?);
        let remaining: Vec<&String> = source.finalizers().iter().filter(|f| **f != self.keys.legacy_finalizer).collect();
        let patch = json!({ "metadata": { "finalizers": remaining, "resourceVersion": source.resource_version() } });
        let name = source.name_any();
        api.patch(&name, &PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() }, &Patch::Merge(&patch))
            .await
            .map_err(|e| conflict_or(e, &name))?;
        info!(source = %name, finalizer = %self.keys.legacy_finalizer, "removed the original operator's finalizer");
        Ok(())
    }

    /// Logs, metrics and events for an outcome: what was written is told on the target (one
    /// event per write, the source named in it), what blocks on the source. Events go to the
    /// outbox, best effort: a lost event is logged, never retried.
    pub fn report(&self, observation: &Observation, outcome: &Outcome) {
        let plan = &outcome.plan;
        let source = &observation.source;
        let namespace = source.namespace().unwrap_or_default();
        let source_name = source.name_any();
        let target_name = plan.target_name.clone().unwrap_or_default();
        let target_ref = outcome.written.as_ref().or(observation.target.as_deref()).map(|t| t.object_ref(&()));
        let source_ref = source.object_ref(&());
        let rv = source.resource_version().unwrap_or_default();
        let now = Timestamp::now().as_duration().as_secs_f64();
        self.metrics.reconciled(plan.action.result());
        match &plan.action {
            Action::Create => {
                info!(namespace, source = %source_name, target = %target_name, next_kid = %plan.kids.next, "created target");
                self.metrics.rotated(&namespace, &target_name, now);
                if let Some(target_ref) = &target_ref {
                    let note = format!("Created from source {source_name} (resourceVersion {rv}); next-tls.kid {}", plan.kids.next);
                    self.event(target_ref, EventType::Normal, "Created", "Create", note);
                }
            }
            Action::Rotate => {
                info!(namespace, source = %source_name, target = %target_name, next_kid = %plan.kids.next, current_kid = %plan.kids.current, "rotated target");
                self.metrics.rotated(&namespace, &target_name, now);
                let kids = format!(
                    "next-tls.kid {}, tls.kid {}, prev-tls.kid {}",
                    plan.kids.next,
                    or_none(&plan.kids.current),
                    or_none(&plan.kids.prev)
                );
                let extra = if plan.reasons.is_empty() { String::new() } else { format!("; {}", plan.reasons.join("; ")) };
                if let Some(target_ref) = &target_ref {
                    let note = format!("Rotated from source {source_name} (resourceVersion {rv}): {kids}{extra}");
                    self.event(target_ref, EventType::Normal, "Rotated", "Rotate", note);
                }
            }
            Action::Update => {
                let reasons = plan.reasons.join("; ");
                info!(namespace, source = %source_name, target = %target_name, %reasons, "updated target without rotating");
                if let Some(target_ref) = &target_ref {
                    let note = format!("Updated from source {source_name} without rotating: {reasons}");
                    self.event(target_ref, EventType::Normal, "Updated", "Update", note);
                }
                self.observe_recorded(&namespace, &target_name, outcome.written.as_ref());
            }
            Action::Unchanged => {
                debug!(namespace, source = %source_name, target = %target_name, "target up to date");
                self.observe_recorded(&namespace, &target_name, observation.target.as_deref());
            }
            Action::Blocked(blocked) => {
                warn!(namespace, source = %source_name, target = %target_name, reason = blocked.event_reason(), "{blocked}");
                self.metrics.error(blocked.metric_reason());
                // Needs a person; looked at again when the source or the target changes, else then.
                let retry = failure::Retry { class: ErrorClass::Terminal, after: self.blocked_requeue(blocked) };
                let note = failure::note(retry, &blocked.to_string());
                self.event(&source_ref, EventType::Warning, blocked.event_reason(), "Rotate", note);
            }
        }
        if !plan.warnings.is_empty() {
            self.metrics.error("jwks_key_skipped");
            let note = format!("Left out of {}: {}", crate::jwks::JWKS_KEY, plan.warnings.join("; "));
            self.event(&source_ref, EventType::Warning, "JwksKeySkipped", "RenderJwks", note);
        }
    }

    /// The target's recorded last rotation time into the per-target gauge (after a restart).
    fn observe_recorded(&self, namespace: &str, target: &str, secret: Option<&Secret>) {
        let recorded = secret.and_then(|s| s.annotations().get(&self.keys.last_rotation_time)).and_then(|t| t.parse::<Timestamp>().ok());
        if let Some(at) = recorded {
            self.metrics.observe(namespace, target, at.as_duration().as_secs_f64());
        }
    }

    /// Puts an event in the outbox, which [`Rotator::publish_events`] publishes once the rotator
    /// is idle: neither this reconcile nor the next rotation waits for the API server to take it.
    fn event(&self, reference: &ObjectReference, type_: EventType, reason: &str, action: &str, note: String) {
        let pending = Pending { reference: reference.clone(), type_, reason: reason.to_owned(), action: action.to_owned(), note };
        self.outbox().push(Instant::now(), pending);
        self.outbox_changed.notify_one();
    }

    /// Publishes the outbox's events when it says so, until it is closed
    /// ([`Rotator::close_events`]) and done.
    pub async fn publish_events(&self) {
        loop {
            let changed = self.outbox_changed.notified();
            let next = self.outbox().next(Instant::now());
            match next {
                Next::Publish(events) => {
                    // Bounded: an API server that does not answer must not hold the rest (or
                    // the shutdown) for ever.
                    let publish = futures::future::join_all(
                        events.iter().map(|e| self.events.publish(&e.reference, e.type_, &e.reason, &e.action, &e.note)),
                    );
                    if tokio::time::timeout(LONGEST_WAIT, publish).await.is_err() {
                        warn!(events = events.len(), "events not published within {LONGEST_WAIT:?}; given up");
                    }
                }
                Next::WaitUntil(deadline) => {
                    let _ =
                        futures::future::select(std::pin::pin!(changed), std::pin::pin!(tokio::time::sleep_until(deadline.into()))).await;
                }
                Next::Wait => changed.await,
                Next::Done { given_up } => {
                    if given_up > 0 {
                        warn!(events = given_up, "shutting down: events not published");
                    }
                    return;
                }
            }
        }
    }

    /// Shutdown: the outbox publishes what waits at once, then [`Rotator::publish_events`] ends.
    pub fn close_events(&self) {
        self.outbox().close(Instant::now());
        self.outbox_changed.notify_one();
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox<Pending>> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One reconcile of a source: observe (from the cache if it can tell, else by reading),
    /// plan, apply, report, release the original's finalizer. `None` if it is no source (any
    /// more). A plan from the cache whose write is refused with 409 (the cache was behind) is
    /// made again from a fresh read; nothing was written, so there is still at most one write.
    pub async fn reconcile(&self, namespace: &str, source_name: &str) -> Result<Option<Outcome>, Error> {
        let _running = Running::new(self);
        let cached = self.observe_cached(namespace, source_name);
        let from_cache = cached.is_some();
        let observation = match cached {
            Some(observation) => observation,
            None => match self.observe(namespace, source_name).await? {
                Some(observation) => observation,
                None => return Ok(None),
            },
        };
        let (observation, plan, written) = match self.plan_and_apply(observation).await {
            Err(Error::Conflict(name)) if from_cache => {
                debug!(namespace, source = source_name, target = %name, "the cache was behind; reading");
                let Some(observation) = self.observe(namespace, source_name).await? else {
                    return Ok(None);
                };
                self.plan_and_apply(observation).await?
            }
            result => result?,
        };
        let outcome = Outcome { plan, written };
        self.report(&observation, &outcome);
        // After the report: a failure here is retried without losing the write's events.
        self.release_legacy_finalizer(&observation, &outcome.plan).await?;
        Ok(Some(outcome))
    }

    /// A Secret that is no source carries an annotation under the prefix that the rotator cannot
    /// act on (a misspelt key, or `source-secret: "yes"`): say so on it, since nothing else will.
    fn invalid_annotation(&self, secret: &Secret, invalid: &AnnotationError) {
        warn!(namespace = secret.namespace().unwrap_or_default(), secret = %secret.name_any(), %invalid, "invalid rotator annotation");
        self.metrics.error("invalid_annotation");
        let note = format!("{invalid}; the rotator acts on this Secret's annotations once it is fixed");
        self.event(&secret.object_ref(&()), EventType::Warning, "InvalidAnnotation", "Read", note);
    }

    async fn plan_and_apply(&self, observation: Observation) -> Result<(Observation, Plan, Option<Secret>), Error> {
        let plan = self.plan(&observation, Timestamp::now());
        match self.apply(&observation, &plan).await {
            Ok(written) => Ok((observation, plan, written)),
            Err(error) => {
                if !matches!(error, Error::Conflict(_)) {
                    let source = &observation.source;
                    // The delay the error policy's `backoff` decides for this failure.
                    let after = self.next_backoff(&(source.namespace().unwrap_or_default(), source.name_any()), false);
                    let retry = failure::Retry { class: error.class(), after };
                    let message = format!("Could not write target {}: {error}", plan.target_name.as_deref().unwrap_or("?"));
                    self.event(&source.object_ref(&()), EventType::Warning, "WriteFailed", "Rotate", failure::note(retry, &message));
                }
                Err(error)
            }
        }
    }

    /// A source was deleted: its target stays as it is; say so on the target, drop its series.
    async fn source_deleted(&self, meta: &Meta) {
        let (Some(namespace), Some(target_name)) =
            (meta.namespace(), meta.annotations().get(&self.keys.destination).map(|d| d.trim().to_owned()))
        else {
            return;
        };
        let source_name = meta.name_any();
        self.succeeded(&(namespace.clone(), source_name.clone()));
        self.forget_written(&namespace, &target_name);
        match self.api(&namespace).get_opt(&target_name).await {
            Ok(Some(target)) if self.keys.claimed_by(target.annotations()) == Some(source_name.as_str()) => {
                info!(namespace, source = %source_name, target = %target_name, "source deleted; target kept");
                self.metrics.forget(&namespace, &target_name);
                let note = format!("Source {source_name} was deleted; this Secret is kept as it is and no longer rotates");
                self.event(&target.object_ref(&()), EventType::Normal, "SourceDeleted", "Release", note);
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, namespace, target = %target_name, "could not read the target of a deleted source"),
        }
    }

    /// The retry delay after one more failure of the source `key`, counted.
    fn backoff(&self, key: (String, String), conflict: bool) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        self.backoff_after(*count, conflict)
    }

    /// What [`Rotator::backoff`] will decide at the source's next failure, not counted: for the
    /// failure's event, written before the error policy counts it.
    fn next_backoff(&self, key: &(String, String), conflict: bool) -> Duration {
        let count = self.failures.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied().unwrap_or(0);
        self.backoff_after(count.saturating_add(1), conflict)
    }

    /// `failures` in a row: the base delay doubled for each after the first, at most [`MAX_BACKOFF`].
    fn backoff_after(&self, failures: u32, conflict: bool) -> Duration {
        let base = if conflict { Duration::from_millis(100) } else { self.error_requeue };
        base.saturating_mul(2_u32.saturating_pow(failures.saturating_sub(1).min(12))).min(MAX_BACKOFF)
    }

    /// When a blocked source is looked at again without a change of it or its target: a
    /// conflict on the conflict requeue (the other source may go), the rest at the resync.
    fn blocked_requeue(&self, blocked: &Blocked) -> Duration {
        if matches!(blocked, Blocked::Conflict { .. }) { self.conflict_requeue } else { RESYNC }
    }

    fn succeeded(&self, key: &(String, String)) {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    /// Whether a target event was caused by the rotator's own last write.
    fn is_own_write(&self, namespace: &str, name: &str, resource_version: Option<&str>) -> bool {
        let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        resource_version.is_some_and(|rv| written.get(&(namespace.to_owned(), name.to_owned())).is_some_and(|w| w == rv))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn forget_written(&self, namespace: &str, name: &str) {
        self.written.lock().unwrap_or_else(PoisonError::into_inner).remove(&(namespace.to_owned(), name.to_owned()));
    }
}

/// An event waiting in the outbox.
#[derive(Debug)]
struct Pending {
    reference: ObjectReference,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
}

/// A reconcile running, for the outbox: events wait while any runs. Ends when dropped, however
/// the reconcile ends (returned, failed, or cancelled at shutdown).
struct Running<'a>(&'a Rotator);

impl<'a> Running<'a> {
    fn new(rotator: &'a Rotator) -> Self {
        rotator.outbox().started();
        Self(rotator)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.outbox().ended(Instant::now());
        self.0.outbox_changed.notify_one();
    }
}

fn or_none(kid: &str) -> &str {
    if kid.is_empty() { "(empty)" } else { kid }
}

/// Which sources name which destination, per namespace: a change of any Secret that some source
/// names (a target, or a Secret in the way of one) triggers those sources. Bounded by the number
/// of sources.
#[derive(Debug, Default)]
struct Destinations {
    of_source: HashMap<(String, String), String>,
    sources: HashMap<(String, String), BTreeSet<String>>,
}

impl Destinations {
    /// Records `source`'s destination (`None`: not a source any more); returns the previous one.
    fn set(&mut self, namespace: &str, source: &str, destination: Option<String>) -> Option<String> {
        let key = (namespace.to_owned(), source.to_owned());
        let previous = match &destination {
            Some(d) => self.of_source.insert(key, d.clone()),
            None => self.of_source.remove(&key),
        };
        if let Some(old) = &previous {
            let old_key = (namespace.to_owned(), old.clone());
            if let Some(set) = self.sources.get_mut(&old_key) {
                set.remove(source);
                if set.is_empty() {
                    self.sources.remove(&old_key);
                }
            }
        }
        if let Some(d) = destination {
            self.sources.entry((namespace.to_owned(), d)).or_default().insert(source.to_owned());
        }
        previous
    }

    fn naming(&self, namespace: &str, destination: &str) -> Vec<String> {
        self.sources.get(&(namespace.to_owned(), destination.to_owned())).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    fn clear(&mut self) {
        self.of_source.clear();
        self.sources.clear();
    }
}

/// Which of a scope's two watches an event comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `kubernetes.io/tls` Secrets, in full.
    Tls,
    /// Every other Secret, metadata only.
    Other,
}

impl Kind {
    const BOTH: [Kind; 2] = [Kind::Tls, Kind::Other];

    fn index(self) -> usize {
        self as usize
    }
}

/// A (re)list in progress on one watch.
#[derive(Debug, Default)]
struct Listing {
    /// The watch's sources before it: those not listed again are gone.
    before: HashSet<Key>,
    /// What it put into the cache: the rest of the scope's entries are gone.
    kept: HashSet<Key>,
}

/// Routes a scope's two watches, one event at a time: the TLS Secrets the rotator works with
/// into the [`Cache`]; sources into the store of sources the workers reconcile (stripped to
/// their identity); a change of a source, or of a Secret that sources name, to the work queue
/// (a reconcile of those sources); deletions of sources to [`Rotator::source_deleted`] and to the other sources naming the same
/// target (which may take it over). Reconciles wait while the TLS watch (re)lists, so that they
/// never plan from a half-listed cache; the metadata watch's list does not hold them up (what it
/// brings is read, never cached).
struct Router {
    rotator: Arc<Rotator>,
    scope: Scope,
    /// Per watch ([`Kind::index`]): its sources, and which destination each names.
    sources: [HashSet<Key>; 2],
    destinations: [Destinations; 2],
    listings: [Option<Listing>; 2],
    /// Whether the TLS watch has listed once.
    tls_listed: bool,
    /// Sources to reconcile once the TLS watch has listed.
    held: BTreeSet<Key>,
    store: Writer<Meta>,
    work: Arc<Work>,
    deleted: mpsc::UnboundedSender<Meta>,
}

impl Router {
    fn new(rotator: Arc<Rotator>, scope: Scope, store: Writer<Meta>, work: Arc<Work>, deleted: mpsc::UnboundedSender<Meta>) -> Self {
        Self {
            rotator,
            scope,
            sources: Default::default(),
            destinations: Default::default(),
            listings: Default::default(),
            tls_listed: false,
            held: BTreeSet::new(),
            store,
            work,
            deleted,
        }
    }

    fn route(&mut self, kind: Kind, event: Event<Secret>) {
        match event {
            Event::Init => self.list_started(kind),
            Event::InitApply(secret) | Event::Apply(secret) => self.applied(kind, secret),
            Event::InitDone => self.list_done(kind),
            Event::Delete(secret) => self.deleted(kind, secret),
        }
    }

    fn applied(&mut self, kind: Kind, secret: Secret) {
        let Some(namespace) = secret.namespace() else {
            return;
        };
        let key = (namespace, secret.name_any());
        let is_source = self.rotator.keys.is_source(secret.annotations());
        let destination = self.destination(&secret, is_source);
        let previous = self.destinations[kind.index()].set(&key.0, &key.1, destination.clone());
        let identity = identity(&secret.metadata);
        let resource_version = secret.resource_version();
        if !is_source && let Err(invalid) = self.rotator.keys.check(secret.annotations()) {
            // A source's annotations are checked by its reconcile, which blocks it.
            self.rotator.invalid_annotation(&secret, &invalid);
        }
        // The cache first: the reconciles triggered below read this version.
        if kind == Kind::Tls {
            if is_source || self.is_named(&key) || plan::labelled_as_target(secret.labels()) {
                if let Some(listing) = &mut self.listings[Kind::Tls.index()] {
                    listing.kept.insert(key.clone());
                }
                self.rotator.cache().put(secret);
            } else {
                self.rotator.cache().remove(&key);
            }
        }
        if is_source {
            self.sources[kind.index()].insert(key.clone());
            self.store.apply_watcher_event(&Event::Apply(identity));
        } else if self.sources[kind.index()].remove(&key) {
            // A Secret that stops being a source leaves the store like a deleted one.
            self.forget_source(kind, identity);
        }
        self.released(&key.0, previous, destination.as_ref());
        self.named_secret_changed(&key, resource_version.as_deref(), false);
        if is_source {
            self.trigger(key);
        }
    }

    fn deleted(&mut self, kind: Kind, secret: Secret) {
        let Some(namespace) = secret.namespace() else {
            return;
        };
        let key = (namespace, secret.name_any());
        self.named_secret_changed(&key, None, true);
        let previous = self.destinations[kind.index()].set(&key.0, &key.1, None);
        self.released(&key.0, previous, None);
        if kind == Kind::Tls {
            self.rotator.cache().remove(&key);
        }
        if self.sources[kind.index()].remove(&key) || self.rotator.keys.is_source(secret.annotations()) {
            self.forget_source(kind, identity(&secret.metadata));
            let _ = self.deleted.unbounded_send(Meta { metadata: secret.metadata, ..Meta::default() });
        }
    }

    fn list_started(&mut self, kind: Kind) {
        let before = std::mem::take(&mut self.sources[kind.index()]);
        self.listings[kind.index()] = Some(Listing { before, kept: HashSet::new() });
        self.destinations[kind.index()].clear();
        if kind == Kind::Tls {
            self.rotator.cache().listing(&self.scope);
        }
    }

    fn list_done(&mut self, kind: Kind) {
        let Some(listing) = self.listings[kind.index()].take() else {
            return;
        };
        let gone: Vec<Key> = listing.before.difference(&self.sources[kind.index()]).cloned().collect();
        for (namespace, name) in gone {
            let metadata = ObjectMeta { name: Some(name), namespace: Some(namespace), ..ObjectMeta::default() };
            self.forget_source(kind, Meta { metadata, ..Meta::default() });
        }
        if kind == Kind::Tls {
            self.rotator.cache().listed(self.scope.clone(), &listing.kept);
            self.tls_listed = true;
        }
        if self.reconciles_may_run() {
            for key in std::mem::take(&mut self.held) {
                self.trigger(key);
            }
        }
    }

    /// Removes a source from the store of sources, unless the other watch has a source of
    /// that name (deleted and created again with another type).
    fn forget_source(&mut self, kind: Kind, identity: Meta) {
        let other = Kind::BOTH[1 - kind.index()];
        let key = (identity.namespace().unwrap_or_default(), identity.name_any());
        if !self.sources[other.index()].contains(&key) {
            self.store.apply_watcher_event(&Event::Delete(identity));
        }
    }

    /// The destination a source names (trimmed, non-empty).
    fn destination(&self, secret: &Secret, is_source: bool) -> Option<String> {
        if !is_source {
            return None;
        }
        secret.annotations().get(&self.rotator.keys.destination).map(|d| d.trim().to_owned()).filter(|d| !d.is_empty())
    }

    fn naming(&self, (namespace, name): &Key) -> Vec<String> {
        let mut sources = self.destinations[0].naming(namespace, name);
        sources.extend(self.destinations[1].naming(namespace, name));
        sources
    }

    fn is_named(&self, key: &Key) -> bool {
        !self.naming(key).is_empty()
    }

    /// A source let go of `previous` (it names another destination, or none): whoever else
    /// names it may take it over now.
    fn released(&mut self, namespace: &str, previous: Option<String>, now: Option<&String>) {
        let Some(old) = previous.filter(|old| Some(old) != now) else {
            return;
        };
        let key = (namespace.to_owned(), old);
        let others = self.naming(&key);
        if others.is_empty() {
            // No source rotates that target any more: free its metric series for live ones.
            self.rotator.metrics.forget(&key.0, &key.1);
        }
        for other in others {
            self.trigger((key.0.clone(), other));
        }
    }

    /// A Secret changed that sources name as their target: reconcile them (unless the change is
    /// the rotator's own last write).
    fn named_secret_changed(&mut self, key: &Key, resource_version: Option<&str>, deleted: bool) {
        let sources = self.naming(key);
        if sources.is_empty() {
            return;
        }
        if deleted {
            self.rotator.forget_written(&key.0, &key.1);
        } else if self.rotator.is_own_write(&key.0, &key.1, resource_version) {
            return;
        }
        for source in sources {
            self.trigger((key.0.clone(), source));
        }
    }

    fn reconciles_may_run(&self) -> bool {
        self.tls_listed && self.listings[Kind::Tls.index()].is_none()
    }

    fn trigger(&mut self, key: Key) {
        if self.reconciles_may_run() {
            self.work.add(key);
        } else {
            self.held.insert(key);
        }
    }
}

/// What the store of sources keeps of a source.
fn identity(metadata: &ObjectMeta) -> Meta {
    Meta {
        metadata: ObjectMeta {
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            resource_version: metadata.resource_version.clone(),
            ..ObjectMeta::default()
        },
        ..Meta::default()
    }
}

/// A metadata-only event as a Secret event (with metadata only), to route both watches alike.
fn with_metadata_only(event: Event<Meta>) -> Event<Secret> {
    let secret = |meta: Meta| Secret { metadata: meta.metadata, ..Secret::default() };
    match event {
        Event::Apply(meta) => Event::Apply(secret(meta)),
        Event::Delete(meta) => Event::Delete(secret(meta)),
        Event::Init => Event::Init,
        Event::InitApply(meta) => Event::InitApply(secret(meta)),
        Event::InitDone => Event::InitDone,
    }
}

/// One scope's [`Queue`] of sources, and the wakers of its workers and its clock. Triggers are
/// handed to a waiting worker at once, without a timer in between (ADR 0010).
#[derive(Debug, Default)]
struct Work {
    queue: Mutex<Queue<Key>>,
    /// A key was queued: wakes a worker.
    queued: Notify,
    /// The earliest timer changed: wakes the clock.
    rearmed: Notify,
}

impl Work {
    fn queue(&self) -> MutexGuard<'_, Queue<Key>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, key: Key) {
        if self.queue().add(key) {
            self.queued.notify_one();
        }
    }

    /// The next source to reconcile, once there is one.
    async fn next(&self) -> Key {
        loop {
            let queued = self.queued.notified();
            let mut queued = std::pin::pin!(queued);
            queued.as_mut().enable();
            if let Some(key) = self.queue().next() {
                return key;
            }
            queued.await;
        }
    }

    /// The reconcile of `key` ended; `requeue`: when to look at it again (`None`: it is no
    /// source, forget it).
    fn done(&self, key: &Key, requeue: Option<Duration>) {
        let mut queue = self.queue();
        let rearm = match requeue {
            Some(delay) => queue.add_at(key.clone(), Instant::now() + delay),
            None => {
                queue.forget_timer(key);
                false
            }
        };
        let queued = queue.done(key);
        drop(queue);
        if rearm {
            self.rearmed.notify_one();
        }
        if queued {
            self.queued.notify_one();
        }
    }

    /// Triggers each source when its timer is due; runs until dropped.
    async fn clock(&self) {
        loop {
            let rearmed = self.rearmed.notified();
            let mut rearmed = std::pin::pin!(rearmed);
            rearmed.as_mut().enable();
            let deadline = self.queue().next_deadline();
            match deadline {
                Some(deadline) => {
                    let _ = futures::future::select(rearmed, std::pin::pin!(tokio::time::sleep_until(deadline.into()))).await;
                }
                None => rearmed.await,
            }
            let due = self.queue().fire(Instant::now());
            for _ in 0..due {
                self.queued.notify_one();
            }
        }
    }

    /// A worker: reconciles one source at a time until `shutdown`, which lets the reconcile in
    /// progress finish and starts no other (what is queued is listed again at the next start).
    async fn worker(&self, rotator: &Rotator, sources: &reflector::Store<Meta>, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let key = tokio::select! {
                biased;
                () = &mut shutdown => return,
                key = self.next() => key,
            };
            let is_source = sources.get(&ObjectRef::new(&key.1).within(&key.0)).is_some();
            let requeue = if is_source { Some(reconcile(rotator, &key).await) } else { None };
            self.done(&key, requeue);
        }
    }
}

/// Reconciles a source; when to look at it again: the resync interval, or sooner after a
/// conflict or a failure ([`Rotator::backoff`]).
async fn reconcile(rotator: &Rotator, key: &Key) -> Duration {
    let (namespace, name) = key;
    match rotator.reconcile(namespace, name).await {
        Ok(outcome) => {
            rotator.succeeded(key);
            let blocked = outcome.as_ref().and_then(|o| match &o.plan.action {
                Action::Blocked(blocked) => Some(rotator.blocked_requeue(blocked)),
                _ => None,
            });
            blocked.unwrap_or(RESYNC)
        }
        Err(error) => {
            rotator.metrics.reconciled("failed");
            rotator.metrics.error(error.metric_reason());
            let delay = rotator.backoff(key.clone(), matches!(error, Error::Conflict(_)));
            if matches!(error, Error::Conflict(_)) {
                debug!(namespace, source = name, ?delay, "{error}");
            } else {
                warn!(namespace, source = name, ?delay, error = %error, "reconcile failed");
            }
            delay
        }
    }
}

/// Runs the rotator until `shutdown` completes, then lets running reconciles finish.
///
/// Two watches per namespace of `config.namespaces`, or two cluster-wide: one of
/// `kubernetes.io/tls` Secrets in full, one of every other Secret's metadata.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    metrics.set_max_tracked_targets(config.max_tracked_targets);
    let rotator = Arc::new(Rotator::new(client.clone(), &config, metrics));
    let shutdown = shutdown.boxed().shared();
    let namespaces = Namespaces::from_list(config.namespaces.clone().unwrap_or_default());
    info!(
        namespaces = ?config.namespaces.as_deref().unwrap_or(&["(all)".to_owned()]),
        prefix = %config.keys.prefix,
        concurrency = config.concurrency,
        "starting the rotator"
    );
    let rotating = async {
        namespaces::run_in(&namespaces, |scope| watch(&client, scope, Arc::clone(&rotator), config.concurrency, shutdown.clone())).await;
        rotator.close_events();
    };
    futures::join!(rotating, rotator.publish_events());
    info!("rotator stopped");
    Ok(())
}

async fn watch(
    client: &Client,
    scope: Scope,
    rotator: Arc<Rotator>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let (tls_api, other_api): (Api<Secret>, Api<Meta>) =
        (namespaces::api(client, scope.as_deref()), namespaces::api(client, scope.as_deref()));
    let tls = watcher::watcher(tls_api, watcher::Config::default().fields(&format!("type={TLS_TYPE}")).page_size(LIST_PAGE_SIZE))
        .default_backoff()
        .map(|event| (Kind::Tls, event));
    let other = watcher::watcher(other_api, watcher::Config::default().fields(&format!("type!={TLS_TYPE}")).page_size(LIST_PAGE_SIZE))
        .default_backoff()
        .map(|event| (Kind::Other, event.map(with_metadata_only)));
    let (sources, writer) = reflector::store::<Meta>();
    let work = Arc::new(Work::default());
    let (deleted, mut deleted_rx) = mpsc::unbounded::<Meta>();
    let mut router = Router::new(Arc::clone(&rotator), scope, writer, Arc::clone(&work), deleted);
    // Ends at shutdown, dropping the router (which ends `releases`).
    let routing = futures::stream::select(tls, other).take_until(shutdown.clone()).for_each(move |(kind, event)| {
        match event {
            Ok(event) => router.route(kind, event),
            Err(error) => warn!(error = %error, "rotator watch"),
        }
        std::future::ready(())
    });
    let workers = futures::future::join_all((0..concurrency).map(|_| work.worker(&rotator, &sources, shutdown.clone())));
    let clock = async {
        tokio::select! {
            () = work.clock() => {}
            () = shutdown => {}
        }
    };
    let releases = async {
        while let Some(meta) = deleted_rx.next().await {
            rotator.source_deleted(&meta).await;
        }
    };
    futures::join!(routing, workers, clock, releases);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_follow_sources_and_forget_them() {
        let mut index = Destinations::default();
        assert_eq!(index.set("ns", "a", Some("t".into())), None);
        index.set("ns", "b", Some("t".into()));
        index.set("other", "c", Some("t".into()));
        assert_eq!(index.naming("ns", "t"), ["a", "b"]);
        assert_eq!(index.set("ns", "a", Some("u".into())).as_deref(), Some("t"));
        assert_eq!(index.naming("ns", "t"), ["b"]);
        assert_eq!(index.naming("ns", "u"), ["a"]);
        index.set("ns", "b", None);
        assert!(index.naming("ns", "t").is_empty());
        assert!(!index.sources.contains_key(&("ns".to_owned(), "t".to_owned())), "no empty sets left behind");
        index.clear();
        assert!(index.naming("other", "t").is_empty());
    }

    /// A router of the namespace `ns` whose rotator has a client that is never called.
    struct Routed {
        router: Router,
        rotator: Arc<Rotator>,
        work: Arc<Work>,
        store: reflector::Store<Meta>,
    }

    impl Routed {
        fn new() -> Self {
            let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))).expect("a client");
            let config = Config::new(&crate::RotatorArgs::default(), &[], 1).expect("valid");
            let mut registry = prometheus_client::registry::Registry::default();
            let rotator = Arc::new(Rotator::new(client, &config, Metrics::register(&mut registry)));
            let (store, writer) = reflector::store::<Meta>();
            let work = Arc::new(Work::default());
            let (deleted, _) = mpsc::unbounded();
            Self { router: Router::new(Arc::clone(&rotator), Some("ns".into()), writer, Arc::clone(&work), deleted), rotator, work, store }
        }

        fn list(&mut self, kind: Kind, secrets: Vec<Secret>) {
            self.router.route(kind, Event::Init);
            for secret in secrets {
                self.router.route(kind, Event::InitApply(secret));
            }
            self.router.route(kind, Event::InitDone);
        }

        /// The sources queued, each then reconciled (so that the next trigger queues it again).
        fn triggered(&mut self) -> Vec<String> {
            let mut queue = self.work.queue();
            let keys: Vec<Key> = std::iter::from_fn(|| queue.next()).collect();
            keys.into_iter()
                .map(|key| {
                    queue.done(&key);
                    key.1
                })
                .collect()
        }

        fn cached(&self, name: &str) -> bool {
            self.rotator.cache().get("ns", name).is_some()
        }

        fn in_store(&self, name: &str) -> bool {
            self.store.get(&ObjectRef::new(name).within("ns")).is_some()
        }
    }

    fn secret(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Secret {
        let map = |pairs: &[(&str, &str)]| Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some("1".into()),
                annotations: map(annotations),
                labels: map(labels),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    fn source(name: &str, target: &str) -> Secret {
        let keys = Keys::default();
        secret(name, &[(&keys.source, "true"), (&keys.destination, target)], &[])
    }

    #[tokio::test]
    async fn reconciles_wait_until_the_tls_watch_has_listed() {
        let mut routed = Routed::new();
        routed.router.route(Kind::Tls, Event::Init);
        routed.router.route(Kind::Tls, Event::InitApply(source("a", "t")));
        routed.router.route(Kind::Other, Event::Init);
        routed.router.route(Kind::Other, Event::InitApply(source("b", "u")));
        assert!(routed.triggered().is_empty(), "the cache is half listed");
        assert!(routed.in_store("a") && routed.in_store("b"));
        assert!(!routed.rotator.cache().is_consistent("ns"));
        routed.router.route(Kind::Tls, Event::InitDone);
        assert_eq!(routed.triggered(), ["a", "b"]);
        assert!(routed.rotator.cache().is_consistent("ns"));
        routed.router.route(Kind::Other, Event::InitApply(source("c", "v")));
        assert_eq!(routed.triggered(), ["c"], "the metadata watch's list holds nothing up");
        routed.router.route(Kind::Other, Event::InitDone);
        routed.router.route(Kind::Tls, Event::Apply(source("a", "t")));
        assert_eq!(routed.triggered(), ["a"], "afterwards each change at once");
    }

    #[tokio::test]
    async fn the_cache_keeps_sources_the_secrets_they_name_and_the_rotators_targets_only() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        let managed = [(plan::MANAGED_BY_LABEL, blockwork_runtime::MANAGED_BY)];
        routed.list(Kind::Tls, vec![source("a", "t"), secret("t", &[], &[]), secret("orphan", &[], &managed), secret("web", &[], &[])]);
        assert!(routed.cached("a") && routed.cached("t") && routed.cached("orphan"));
        assert!(!routed.cached("web"), "an unrelated TLS Secret streams past");

        // The source names another target: the old one is dropped at its next event.
        routed.router.route(Kind::Tls, Event::Apply(source("a", "t2")));
        routed.router.route(Kind::Tls, Event::Apply(secret("t", &[], &[])));
        assert!(!routed.cached("t"));
        routed.router.route(Kind::Tls, Event::Delete(secret("orphan", &[], &managed)));
        assert!(!routed.cached("orphan"));
    }

    #[tokio::test]
    async fn a_relist_forgets_what_it_no_longer_lists_and_holds_reconciles_until_it_is_done() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        routed.list(Kind::Tls, vec![source("a", "t"), source("b", "u"), secret("u", &[], &[])]);
        routed.triggered();

        routed.router.route(Kind::Tls, Event::Init);
        routed.router.route(Kind::Tls, Event::InitApply(source("a", "t")));
        assert!(!routed.rotator.cache().is_consistent("ns"), "half listed");
        assert!(routed.triggered().is_empty(), "held while listing");
        routed.router.route(Kind::Tls, Event::InitDone);
        assert_eq!(routed.triggered(), ["a"]);
        assert!(routed.in_store("a") && !routed.in_store("b"), "b was deleted while the watch was away");
        assert!(!routed.cached("b") && !routed.cached("u"));
        assert!(routed.rotator.cache().is_consistent("ns"));
    }

    #[tokio::test]
    async fn a_change_of_a_named_secret_reconciles_its_sources_unless_it_is_the_rotators_own_write() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        routed.list(Kind::Tls, vec![source("a", "t"), source("b", "t")]);
        routed.triggered();
        routed.router.route(Kind::Other, Event::Apply(secret("t", &[], &[])));
        assert_eq!(routed.triggered(), ["a", "b"], "a Secret in the way, of any type");

        routed.rotator.written.lock().expect("not poisoned").insert(("ns".into(), "t".into()), "1".into());
        routed.router.route(Kind::Tls, Event::Apply(secret("t", &[], &[])));
        assert!(routed.triggered().is_empty(), "the rotator's own write");
    }
}
