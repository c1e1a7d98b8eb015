//! The Kubernetes side: a metadata-only watch of Secrets, routed to one reconcile per source;
//! each reconcile reads the source and its target, [`plan`]s, writes at most once (the commit
//! point), then reports through events and metrics.
//!
//! Memory: the watch asks the API server for metadata only, and the reflector store keeps only
//! sources (name, namespace, uid, resourceVersion), so unrelated Secrets cost nothing once they
//! have streamed past. Sources and targets are read in full only when a reconcile needs them.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::channel::mpsc;
use futures::{FutureExt as _, StreamExt as _};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{Action as Requeue, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tracing::{debug, info, warn};

use blockwork_runtime::policy::AnnotationError;

use crate::config::{Config, Keys};
use crate::metrics::Metrics;
use crate::plan::{self, Action, Blocked, Input, Plan};

type Meta = PartialObjectMeta<Secret>;

/// How often a source is looked at without any change (a safety net for missed watch events).
const RESYNC: Duration = Duration::from_secs(3600);
/// Longest retry delay after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Field manager of the rotator's writes.
const FIELD_MANAGER: &str = "blockwork-rotator";

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

/// What one reconcile read.
#[derive(Clone, Debug)]
pub struct Observation {
    pub source: Secret,
    pub target: Option<Secret>,
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
    recorder: Recorder,
    metrics: Arc<Metrics>,
    conflict_requeue: Duration,
    error_requeue: Duration,
    /// resourceVersion of each target as the rotator last wrote it: the watch event of the
    /// rotator's own write triggers no reconcile.
    written: Mutex<HashMap<(String, String), String>>,
    /// Consecutive failures per source, for the retry backoff.
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl std::fmt::Debug for Rotator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotator").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl Rotator {
    pub fn new(client: Client, config: &Config, metrics: Arc<Metrics>) -> Self {
        let instance = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).ok().filter(|s| !s.is_empty());
        let reporter = Reporter { controller: config.reporter.clone(), instance };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            keys: config.keys.clone(),
            metrics,
            conflict_requeue: config.conflict_requeue,
            error_requeue: config.error_requeue,
            written: Mutex::default(),
            failures: Mutex::default(),
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
            Some(claim) if claim.source() != source_name => self.claim_active(&api, claim.source(), target_name.as_deref()).await?,
            _ => false,
        };
        Ok(Some(Observation { source, target, other_claim_active }))
    }

    /// The source's destination if it is a usable Secret name other than the source's own.
    fn destination(&self, source: &Secret) -> Option<String> {
        source
            .annotations()
            .get(&self.keys.destination)
            .map(|d| d.trim().to_owned())
            .filter(|d| crate::config::is_dns_subdomain(d) && *d != source.name_any())
    }

    /// Whether `other` still exists as a source naming `target` and is not being deleted.
    async fn claim_active(&self, api: &Api<Secret>, other: &str, target: Option<&str>) -> Result<bool, Error> {
        Ok(api.get_opt(other).await?.is_some_and(|s| {
            self.keys.is_source(s.annotations()) && s.metadata.deletion_timestamp.is_none() && self.destination(&s).as_deref() == target
        }))
    }

    /// The pure decision (see [`plan::plan`]).
    pub fn plan(&self, observation: &Observation, now: Timestamp) -> Plan {
        plan::plan(&Input {
            keys: &self.keys,
            source: &observation.source,
            target: observation.target.as_ref(),
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

    /// Events and metrics for an outcome. Best effort: a lost event is logged, never retried.
    pub async fn report(&self, observation: &Observation, outcome: &Outcome) {
        let plan = &outcome.plan;
        let source = &observation.source;
        let namespace = source.namespace().unwrap_or_default();
        let source_name = source.name_any();
        let target_name = plan.target_name.clone().unwrap_or_default();
        let target_ref = outcome.written.as_ref().or(observation.target.as_ref()).map(|t| t.object_ref(&()));
        let source_ref = source.object_ref(&());
        let rv = source.resource_version().unwrap_or_default();
        let now = Timestamp::now().as_duration().as_secs_f64();
        self.metrics.reconciled(plan.action.result());
        match &plan.action {
            Action::Create => {
                info!(namespace, source = %source_name, target = %target_name, next_kid = %plan.kids.next, "created target");
                self.metrics.rotated(&namespace, &target_name, now);
                let note = format!("Created target {target_name} with the source's certificate as next-tls (kid {})", plan.kids.next);
                self.event(&source_ref, EventType::Normal, "TargetCreated", "Create", note).await;
                if let Some(target_ref) = &target_ref {
                    let note = format!("Created from source {source_name} (resourceVersion {rv}); next-tls.kid {}", plan.kids.next);
                    self.event(target_ref, EventType::Normal, "Created", "Create", note).await;
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
                self.event(&source_ref, EventType::Normal, "Rotated", "Rotate", format!("Rotated target {target_name}: {kids}{extra}"))
                    .await;
                if let Some(target_ref) = &target_ref {
                    let note = format!("Rotated from source {source_name} (resourceVersion {rv}): {kids}{extra}");
                    self.event(target_ref, EventType::Normal, "Rotated", "Rotate", note).await;
                }
            }
            Action::Update => {
                let reasons = plan.reasons.join("; ");
                info!(namespace, source = %source_name, target = %target_name, %reasons, "updated target without rotating");
                self.event(
                    &source_ref,
                    EventType::Normal,
                    "TargetUpdated",
                    "Update",
                    format!("Updated target {target_name} without rotating: {reasons}"),
                )
                .await;
                if let Some(target_ref) = &target_ref {
                    self.event(target_ref, EventType::Normal, "Updated", "Update", format!("Updated without rotating: {reasons}")).await;
                }
                self.observe_recorded(&namespace, &target_name, outcome.written.as_ref());
            }
            Action::Unchanged => {
                debug!(namespace, source = %source_name, target = %target_name, "target up to date");
                self.observe_recorded(&namespace, &target_name, observation.target.as_ref());
            }
            Action::Blocked(blocked) => {
                warn!(namespace, source = %source_name, target = %target_name, reason = blocked.event_reason(), "{blocked}");
                self.metrics.error(blocked.metric_reason());
                self.event(&source_ref, EventType::Warning, blocked.event_reason(), "Rotate", blocked.to_string()).await;
            }
        }
        if !plan.warnings.is_empty() {
            self.metrics.error("jwks_key_skipped");
            let note = format!("Left out of {}: {}", crate::jwks::JWKS_KEY, plan.warnings.join("; "));
            self.event(&source_ref, EventType::Warning, "JwksKeySkipped", "RenderJwks", note).await;
        }
    }

    /// The target's recorded last rotation time into the per-target gauge (after a restart).
    fn observe_recorded(&self, namespace: &str, target: &str, secret: Option<&Secret>) {
        let recorded = secret.and_then(|s| s.annotations().get(&self.keys.last_rotation_time)).and_then(|t| t.parse::<Timestamp>().ok());
        if let Some(at) = recorded {
            self.metrics.observe(namespace, target, at.as_duration().as_secs_f64());
        }
    }

    async fn event(&self, reference: &ObjectReference, type_: EventType, reason: &str, action: &str, note: String) {
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 997;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let event = KubeEvent { type_, reason: reason.to_owned(), note: Some(note), action: action.to_owned(), secondary: None };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            warn!(error = %e, reason, object = ?reference.name, "could not publish an event");
        }
    }

    /// One reconcile of a source: observe, plan, apply, report, release the original's
    /// finalizer. `None` if it is no source (any more).
    pub async fn reconcile(&self, namespace: &str, source_name: &str) -> Result<Option<Outcome>, Error> {
        let Some(observation) = self.observe(namespace, source_name).await? else {
            return Ok(None);
        };
        let plan = self.plan(&observation, Timestamp::now());
        let written = match self.apply(&observation, &plan).await {
            Ok(written) => written,
            Err(error) => {
                if !matches!(error, Error::Conflict(_)) {
                    let note = format!("Could not write target {}: {error}", plan.target_name.as_deref().unwrap_or("?"));
                    self.event(&observation.source.object_ref(&()), EventType::Warning, "WriteFailed", "Rotate", note).await;
                }
                return Err(error);
            }
        };
        let outcome = Outcome { plan, written };
        self.report(&observation, &outcome).await;
        // After the report: a failure here is retried without losing the write's events.
        self.release_legacy_finalizer(&observation, &outcome.plan).await?;
        Ok(Some(outcome))
    }

    /// A Secret that is no source carries an annotation under the prefix that the rotator cannot
    /// act on (a misspelt key, or `source-secret: "yes"`): say so on it, since nothing else will.
    async fn invalid_annotation(&self, meta: &Meta, invalid: &AnnotationError) {
        let (namespace, name) = (meta.namespace().unwrap_or_default(), meta.name_any());
        warn!(namespace, secret = %name, %invalid, "invalid rotator annotation");
        self.metrics.error("invalid_annotation");
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some(name),
            namespace: Some(namespace),
            uid: meta.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let note = format!("{invalid}; the rotator acts on this Secret's annotations once it is fixed");
        self.event(&reference, EventType::Warning, "InvalidAnnotation", "Read", note).await;
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
                self.event(&target.object_ref(&()), EventType::Normal, "SourceDeleted", "Release", note).await;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, namespace, target = %target_name, "could not read the target of a deleted source"),
        }
    }

    fn backoff(&self, key: (String, String), conflict: bool) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        let base = if conflict { Duration::from_millis(100) } else { self.error_requeue };
        base.saturating_mul(2_u32.saturating_pow(count.saturating_sub(1).min(12))).min(MAX_BACKOFF)
    }

    fn succeeded(&self, key: &(String, String)) {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    /// Whether a target event was caused by the rotator's own last write.
    fn is_own_write(&self, namespace: &str, name: &str, resource_version: Option<&str>) -> bool {
        let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        resource_version.is_some_and(|rv| written.get(&(namespace.to_owned(), name.to_owned())).is_some_and(|w| w == rv))
    }

    fn forget_written(&self, namespace: &str, name: &str) {
        self.written.lock().unwrap_or_else(PoisonError::into_inner).remove(&(namespace.to_owned(), name.to_owned()));
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

/// Routes the metadata watch: sources into the store (stripped to their identity); a change of
/// a Secret that sources name to a reconcile of those sources; deletions of sources to
/// [`Rotator::source_deleted`] and to the other sources naming the same target (which may take
/// it over).
struct Router {
    rotator: Arc<Rotator>,
    destinations: Destinations,
    triggers: mpsc::UnboundedSender<ObjectRef<Meta>>,
    deleted: mpsc::UnboundedSender<Meta>,
    /// Secrets that are no source, with an annotation under the prefix the rotator cannot act on.
    invalid: mpsc::UnboundedSender<(Meta, AnnotationError)>,
}

impl Router {
    fn route(&mut self, event: watcher::Result<Event<Meta>>) -> Option<watcher::Result<Event<Meta>>> {
        let event = match event {
            Ok(event) => event,
            Err(error) => return Some(Err(error)),
        };
        Some(Ok(match event {
            Event::Init => {
                self.destinations.clear();
                Event::Init
            }
            Event::InitDone => Event::InitDone,
            Event::InitApply(object) => {
                self.named_secret_changed(&object, false);
                if !self.track(&object, false) {
                    self.check_annotations(&object);
                    return None;
                }
                Event::InitApply(identity(&object))
            }
            Event::Apply(object) => {
                self.named_secret_changed(&object, false);
                self.check_annotations(&object);
                // A Secret that stops being a source leaves the store like a deleted one.
                if self.track(&object, false) { Event::Apply(identity(&object)) } else { Event::Delete(identity(&object)) }
            }
            Event::Delete(object) => {
                self.named_secret_changed(&object, true);
                if self.track(&object, true) {
                    let _ = self.deleted.unbounded_send(object.clone());
                }
                Event::Delete(identity(&object))
            }
        }))
    }

    /// Reports a Secret that is no source and has an annotation the rotator cannot act on (a
    /// source's annotations are checked by its reconcile, which blocks it).
    fn check_annotations(&self, object: &Meta) {
        let keys = &self.rotator.keys;
        if keys.is_source(object.annotations()) {
            return;
        }
        if let Err(invalid) = keys.check(object.annotations()) {
            let _ = self.invalid.unbounded_send((object.clone(), invalid));
        }
    }

    /// Updates the index for `object`; whether it is (or, when deleted, was) a source.
    fn track(&mut self, object: &Meta, deleted: bool) -> bool {
        let Some(namespace) = object.namespace() else {
            return false;
        };
        let name = object.name_any();
        let is_source = self.rotator.keys.is_source(object.annotations());
        let destination = if is_source && !deleted {
            object.annotations().get(&self.rotator.keys.destination).map(|d| d.trim().to_owned()).filter(|d| !d.is_empty())
        } else {
            None
        };
        let previous = self.destinations.set(&namespace, &name, destination.clone());
        // Whoever else names a destination this source lets go of may take it over now.
        if let Some(old) = previous.filter(|old| Some(old) != destination.as_ref()) {
            let others = self.destinations.naming(&namespace, &old);
            if others.is_empty() {
                // No source rotates that target any more: free its metric series for live ones.
                self.rotator.metrics.forget(&namespace, &old);
            }
            for other in others {
                let _ = self.triggers.unbounded_send(ObjectRef::new(&other).within(&namespace));
            }
        }
        is_source
    }

    /// A Secret changed that sources name as their target: reconcile them (unless the change is
    /// the rotator's own last write).
    fn named_secret_changed(&self, object: &Meta, deleted: bool) {
        let Some(namespace) = object.namespace() else {
            return;
        };
        let name = object.name_any();
        let sources = self.destinations.naming(&namespace, &name);
        if sources.is_empty() {
            return;
        }
        if deleted {
            self.rotator.forget_written(&namespace, &name);
        } else if self.rotator.is_own_write(&namespace, &name, object.resource_version().as_deref()) {
            return;
        }
        for source in sources {
            let _ = self.triggers.unbounded_send(ObjectRef::new(&source).within(&namespace));
        }
    }
}

/// What the store keeps of a source.
fn identity(object: &Meta) -> Meta {
    let mut slim = PartialObjectMeta::<Secret>::default();
    slim.types.clone_from(&object.types);
    slim.metadata = ObjectMeta {
        name: object.metadata.name.clone(),
        namespace: object.metadata.namespace.clone(),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        ..ObjectMeta::default()
    };
    slim
}

async fn reconcile(meta: Arc<Meta>, rotator: Arc<Rotator>) -> Result<Requeue, Error> {
    let namespace = meta.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let name = meta.name_any();
    match rotator.reconcile(&namespace, &name).await {
        Ok(outcome) => {
            rotator.succeeded(&(namespace, name));
            let conflict = outcome.as_ref().is_some_and(|o| matches!(o.plan.action, Action::Blocked(Blocked::Conflict { .. })));
            Ok(if conflict { Requeue::requeue(rotator.conflict_requeue) } else { Requeue::requeue(RESYNC) })
        }
        Err(error) => {
            rotator.metrics.reconciled("failed");
            rotator.metrics.error(error.metric_reason());
            Err(error)
        }
    }
}

fn error_policy(meta: Arc<Meta>, error: &Error, rotator: Arc<Rotator>) -> Requeue {
    let key = (meta.namespace().unwrap_or_default(), meta.name_any());
    let delay = rotator.backoff(key.clone(), matches!(error, Error::Conflict(_)));
    if matches!(error, Error::Conflict(_)) {
        debug!(namespace = %key.0, source = %key.1, ?delay, "{error}");
    } else {
        warn!(namespace = %key.0, source = %key.1, ?delay, error = %error, "reconcile failed");
    }
    Requeue::requeue(delay)
}

/// Runs the rotator until `shutdown` completes, then lets running reconciles finish.
///
/// One metadata watch per namespace of `config.namespaces`, or one cluster-wide watch.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    metrics.set_max_tracked_targets(config.max_tracked_targets);
    let rotator = Arc::new(Rotator::new(client.clone(), &config, metrics));
    let shutdown = shutdown.boxed().shared();
    let apis: Vec<Api<Meta>> = match &config.namespaces {
        None => vec![Api::all(client)],
        Some(namespaces) => namespaces.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect(),
    };
    info!(
        namespaces = ?config.namespaces.as_deref().unwrap_or(&["(all)".to_owned()]),
        prefix = %config.keys.prefix,
        concurrency = config.concurrency,
        "starting the rotator"
    );
    let watches = apis.into_iter().map(|api| watch(api, Arc::clone(&rotator), config.concurrency, shutdown.clone()));
    futures::future::join_all(watches).await;
    info!("rotator stopped");
    Ok(())
}

async fn watch(api: Api<Meta>, rotator: Arc<Rotator>, concurrency: u16, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (reader, writer) = reflector::store::<Meta>();
    let (triggers, trigger_rx) = mpsc::unbounded();
    let (deleted, mut deleted_rx) = mpsc::unbounded::<Meta>();
    let (invalid, mut invalid_rx) = mpsc::unbounded::<(Meta, AnnotationError)>();
    let mut router = Router { rotator: Arc::clone(&rotator), destinations: Destinations::default(), triggers, deleted, invalid };
    let sources = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| std::future::ready(router.route(event)))
        .reflect(writer)
        .applied_objects();
    let shutdown = shutdown.boxed().shared();
    let controller = Controller::for_stream(sources, reader.clone())
        .reconcile_on(trigger_rx)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy, Arc::clone(&rotator))
        .for_each(|result| {
            match result {
                Ok(_) => {}
                Err(kube::runtime::controller::Error::ReconcilerFailed(..) | kube::runtime::controller::Error::ObjectNotFound(_)) => {}
                Err(error) => warn!(error = %error, "rotator watch"),
            }
            std::future::ready(())
        });
    // Both end when the controller has stopped and dropped the router.
    let releases = async {
        while let Some(meta) = deleted_rx.next().await {
            rotator.source_deleted(&meta).await;
        }
    };
    let warnings = async {
        while let Some((meta, error)) = invalid_rx.next().await {
            rotator.invalid_annotation(&meta, &error).await;
        }
    };
    futures::join!(blockwork_runtime::shutdown::drive_until_shutdown(controller, shutdown, reader), releases, warnings);
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
}
