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

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::channel::mpsc;
use futures::{FutureExt as _, StreamExt as _};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::EventType;
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use blockwork_runtime::ErrorClass;
use blockwork_runtime::events::Publisher;
use blockwork_runtime::namespaces::{self, Namespaces};

use crate::cache::{Cache, Scope};
use crate::config::{Config, Keys};
use crate::failure;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::plan::{self, Action, Blocked, Input, Plan, TLS_TYPE};

mod report;
mod router;
mod work;

use report::{Pending, Running};
use router::{Kind, Router, with_metadata_only};
use work::Work;

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
