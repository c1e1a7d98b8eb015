//! The reconcile loop: apply the built objects with server-side apply, derive status from the
//! StatefulSet, clean up on deletion without ever blocking it.
//!
//! Nothing goes wrong silently: annotations the controller cannot act on hold the Cache (see
//! [`refs::hold`]), a TLS Secret that is missing or incomplete is the `ResolvedRefs` condition
//! (the Secrets are watched, so it clears when the Secret appears), and an owned object the API
//! server refuses is `Synced=False` with reason `ApplyFailed`. Each comes with a Warning event.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, Stream, StreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use blockwork_runtime::events::Publisher;
use blockwork_runtime::labels::managed_by_selector;
use blockwork_runtime::namespaces::api as child_api;
use blockwork_runtime::outcome::{ErrorClass, Existence};
use blockwork_runtime::status::{LastError, condition, set_condition};
use blockwork_runtime::watches::on_its_own;

use crate::api::{Cache, CacheStatus, GROUP, Phase};
use crate::applied;
use crate::build::{self, Desired, Topology};
use crate::refs::{self, Hold};
use crate::sentinel;

pub const FIELD_MANAGER: &str = "blockwork-cache";
/// Whether the replicas are ready (reasons `AllReplicasAvailable`, `ReplicasNotReady`, or the
/// reason that keeps them from starting).
pub const READY: &str = "Ready";
/// Whether the last reconcile applied every owned object.
pub const SYNCED: &str = "Synced";
/// Whether every object the Cache references (its TLS Secret) exists with the keys it needs.
pub const RESOLVED_REFS: &str = "ResolvedRefs";
/// Deletion cleans up for at most this long, then lets the object go.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const RESYNC: Duration = Duration::from_secs(300);

pub fn finalizer_name() -> String {
    format!("{GROUP}/finalizer")
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

/// How long a reconcile waits for the disruption budgets' first list before deleting blindly.
const BUDGETS_LISTED_WITHIN: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Context {
    pub client: Client,
    events: Publisher,
    /// The disruption budgets the controller's watch has seen, so a single-replica Cache deletes
    /// its budget only when there is one: a blind DELETE on every reconcile is a write request
    /// while nothing changed. `None` (a reconcile called without [`run`]) deletes blindly.
    disruption_budgets: Option<Store<PodDisruptionBudget>>,
}

impl Context {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self { events: Publisher::new(client.clone(), FIELD_MANAGER), client, disruption_budgets: None })
    }

    /// Whether the Cache's disruption budget `name` may exist: known from the watch once it has
    /// listed (waiting a few seconds for its first list), assumed otherwise.
    async fn may_have_disruption_budget(&self, namespace: &str, name: &str) -> bool {
        let Some(store) = &self.disruption_budgets else { return true };
        match tokio::time::timeout(BUDGETS_LISTED_WITHIN, store.wait_until_ready()).await {
            Ok(Ok(())) => store.get(&ObjectRef::new(name).within(namespace)).is_some(),
            _ => true,
        }
    }
}

/// Runs the controller over the Caches `api` sees (children watched in `namespace`, or all
/// namespaces for `None`), until `shutdown`.
pub async fn run(
    context: Arc<Context>,
    api: Api<Cache>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let children = watcher::Config::default().labels(&managed_by_selector());
    let client = context.client.clone();
    let shutdown = shutdown.boxed().shared();
    let (store, writer) = reflector::store();
    let caches = watcher(api, watcher::Config::default().any_semantic()).default_backoff().reflect(writer).applied_objects();
    let namespace = namespace.as_deref();
    // Metadata only: a Secret's data never passes through the watch.
    let secrets = changes_of::<PartialObjectMeta<Secret>>(&client, namespace, &watcher::Config::default());
    let referenced = store.clone();
    let (disruption_budgets, budgets_writer) = reflector::store();
    let budgets = watcher(child_api::<PodDisruptionBudget>(&client, namespace), children.clone())
        .default_backoff()
        .reflect(budgets_writer)
        .touched_objects();
    let context = Arc::new(Context { disruption_budgets: Some(disruption_budgets), ..(*context).clone() });
    let run = Controller::for_stream(on_its_own("cache", "Cache", caches), store.clone())
        .owns_stream(on_its_own("cache", "StatefulSet", changes_of::<StatefulSet>(&client, namespace, &children)))
        .owns_stream(on_its_own("cache", "Service", changes_of::<Service>(&client, namespace, &children)))
        .owns_stream(on_its_own("cache", "ConfigMap", changes_of::<ConfigMap>(&client, namespace, &children)))
        .owns_stream(on_its_own("cache", "PodDisruptionBudget", budgets))
        .watches_stream(on_its_own("cache", "Secret", secrets), move |secret| referencing(&referenced, &secret))
        .with_config(RunConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "cache reconcile failed");
            }
        });
    blockwork_runtime::shutdown::drive_until_shutdown(run, shutdown, store).await;
}

/// The objects of kind `K` selected by `config` as they change: a watch with its own backoff
/// (see `blockwork_runtime::watches`).
fn changes_of<K>(
    client: &Client,
    namespace: Option<&str>,
    config: &watcher::Config,
) -> impl Stream<Item = watcher::Result<K>> + Send + 'static
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(child_api::<K>(client, namespace), config.clone()).default_backoff().touched_objects()
}

/// The Caches whose TLS Secret `secret` is.
fn referencing(caches: &Store<Cache>, secret: &PartialObjectMeta<Secret>) -> Vec<ObjectRef<Cache>> {
    caches
        .state()
        .iter()
        .filter(|cache| cache.namespace() == secret.namespace() && refs::tls_secret_name(cache) == secret.metadata.name.as_deref())
        .map(|cache| ObjectRef::from_obj(&**cache))
        .collect()
}

/// One reconcile; a panic inside is caught, reported as an event, and retried like an error.
pub async fn reconcile(cache: Arc<Cache>, context: Arc<Context>) -> Result<Action, Error> {
    match catch_panic(reconcile_guarded(Arc::clone(&cache), Arc::clone(&context))).await {
        Ok(result) => result,
        Err(message) => {
            publish(&context, &cache, EventType::Warning, "ReconcilePanicked", &message).await;
            Err(Error::Panicked(message))
        }
    }
}

/// Runs `future`, turning a panic into its message (seed 002's RecoverPanic).
async fn catch_panic<T>(future: impl std::future::Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(future).catch_unwind().await.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

fn error_policy(cache: Arc<Cache>, error: &Error, _context: Arc<Context>) -> Action {
    warn!(cache = %cache.name_any(), %error, "cache reconcile error");
    Action::requeue(Duration::from_secs(10))
}

async fn reconcile_guarded(cache: Arc<Cache>, context: Arc<Context>) -> Result<Action, Error> {
    // Before the finalizer: a held Cache is not touched, its deletion included (as the runtime
    // holds a paused object).
    if let Some(hold) = refs::hold(cache.annotations()) {
        return held(&cache, &context, hold).await;
    }
    let namespace = cache.namespace().unwrap_or_default();
    let api: Api<Cache> = Api::namespaced(context.client.clone(), &namespace);
    finalizer(&api, &finalizer_name(), cache, |event| async {
        match event {
            FinalizerEvent::Apply(cache) => apply(&cache, &context).await,
            FinalizerEvent::Cleanup(cache) => cleanup(&cache, &context).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// What a reconcile found, for the status: `None` keeps what the status says.
#[derive(Default)]
struct Report {
    phase: Option<Phase>,
    ready_replicas: Option<i32>,
    primary: PrimaryUpdate,
    conditions: Vec<Condition>,
    /// Condition types that no longer apply.
    dropped_conditions: &'static [&'static str],
    /// A Warning event: reason and note.
    warning: Option<(String, String)>,
    last_error: ErrorUpdate,
}

/// What the status's `lastError` becomes.
#[derive(Default)]
enum ErrorUpdate {
    /// As it is (a held Cache is not reconciled, so nothing failed or succeeded).
    #[default]
    Keep,
    /// Nothing stands in the way any more.
    Clear,
    /// The reconcile ended waiting on this: class, reason, message.
    Failed(ErrorClass, &'static str, String),
}

/// What the status's primary and last failover become.
#[derive(Default)]
enum PrimaryUpdate {
    /// As they are (nothing asked, or no Sentinel answered).
    #[default]
    Keep,
    /// None: the Cache has no Sentinel.
    Clear,
    /// What a Sentinel reported at that time.
    Seen(sentinel::Report, jiff::Timestamp),
}

async fn held(cache: &Cache, context: &Context, hold: Hold) -> Result<Action, Error> {
    let generation = cache.metadata.generation;
    let report = match hold {
        Hold::Paused => {
            let message = format!("reconciling is paused by the annotation {}", blockwork_runtime::policy::PAUSED_ANNOTATION);
            Report { conditions: vec![condition(SYNCED, false, "ReconcilePaused", &message, generation)], ..Report::default() }
        }
        Hold::InvalidAnnotation(invalid) => {
            let message = format!("{invalid}; the Cache is held as if paused until it is fixed");
            Report {
                conditions: vec![condition(SYNCED, false, "InvalidAnnotation", &message, generation)],
                warning: Some(("InvalidAnnotation".into(), message)),
                ..Report::default()
            }
        }
    };
    write_status(cache, context, report).await?;
    Ok(Action::await_change())
}

async fn apply(cache: &Cache, context: &Context) -> Result<Action, Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let generation = cache.metadata.generation;
    let desired = match build::desired(cache) {
        Ok(desired) => desired,
        Err(invalid) => {
            let message = invalid.to_string();
            let report = Report {
                phase: Some(Phase::Failed),
                ready_replicas: Some(0),
                conditions: vec![
                    condition(READY, false, "InvalidSpec", &message, generation),
                    condition(SYNCED, false, "InvalidSpec", &message, generation),
                ],
                last_error: ErrorUpdate::Failed(ErrorClass::Terminal, "InvalidSpec", message.clone()),
                warning: Some(("InvalidSpec".into(), message)),
                ..Report::default()
            };
            write_status(cache, context, report).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let secret = match refs::tls_secret_name(cache) {
        Some(name) => Api::<Secret>::namespaced(context.client.clone(), &namespace).get_opt(name).await?,
        None => None,
    };
    let unresolved = refs::check_tls_secret(cache, secret.as_ref()).err();
    let stateful_set = match apply_children(context, &namespace, cache, desired).await {
        Ok(stateful_set) => stateful_set,
        // Anything but a refusal (a 500, a 429, a lost connection) is the API server's passing
        // trouble: retried, and not written to the status, which would flap with every fault
        // (the reliability campaign's API server suite found that: issue 15).
        Err(failed) if !failed.is_refusal() => return Err(Error::Kube(failed.error)),
        Err(refused) => {
            // The API server's refusal stands until the spec changes.
            let message = refused.to_string();
            let report = Report {
                conditions: vec![condition(SYNCED, false, "ApplyFailed", &message, generation)],
                last_error: ErrorUpdate::Failed(ErrorClass::Terminal, "ApplyFailed", message.clone()),
                warning: Some(("ApplyFailed".into(), message)),
                ..Report::default()
            };
            write_status(cache, context, report).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };

    let status = stateful_set.status.unwrap_or_default();
    let (ready, created) = (status.ready_replicas.unwrap_or(0), status.replicas);
    let (phase, message) = build::phase(cache.spec.replicas, created, ready);
    let (ready_reason, ready_message) = match (&unresolved, phase) {
        (_, Phase::Ready) => ("AllReplicasAvailable", message),
        // The replicas wait for the reference: say that, not only that they wait.
        (Some(unresolved), _) => (unresolved.reason(), format!("{message}: {unresolved}")),
        (None, _) => ("ReplicasNotReady", message),
    };
    let resolved = match &unresolved {
        None => condition(RESOLVED_REFS, true, "ResolvedRefs", "every referenced Secret exists with the keys it needs", generation),
        Some(unresolved) => condition(RESOLVED_REFS, false, unresolved.reason(), &unresolved.to_string(), generation),
    };
    let mut conditions = vec![
        condition(READY, phase == Phase::Ready, ready_reason, &ready_message, generation),
        condition(SYNCED, true, "ReconcileSuccess", "every object of the Cache is applied", generation),
        resolved,
    ];
    let (primary, dropped_conditions, next) = if build::topology(cache) == (Topology::Replicated { sentinel: true }) {
        let (update, known, next) = primary(cache, ready).await;
        conditions.push(known);
        (update, &[][..], next)
    } else {
        (PrimaryUpdate::Clear, &[sentinel::PRIMARY_KNOWN][..], RESYNC)
    };
    let last_error = match &unresolved {
        None => ErrorUpdate::Clear,
        Some(unresolved @ refs::Unresolved::SecretNotFound(_)) => {
            ErrorUpdate::Failed(ErrorClass::NotFound, unresolved.reason(), unresolved.to_string())
        }
        Some(unresolved) => ErrorUpdate::Failed(ErrorClass::Terminal, unresolved.reason(), unresolved.to_string()),
    };
    let report = Report {
        phase: Some(phase),
        ready_replicas: Some(ready),
        primary,
        conditions,
        dropped_conditions,
        warning: unresolved.map(|unresolved| (unresolved.reason().to_owned(), unresolved.to_string())),
        last_error,
    };
    write_status(cache, context, report).await?;
    Ok(Action::requeue(next))
}

/// Asks the Sentinels of `cache` (which has `ready` pods ready) for the primary: what the status
/// says of it, the `PrimaryKnown` condition, and when to look again. No answer keeps what the
/// status says, under `PrimaryKnown=False`.
async fn primary(cache: &Cache, ready: i32) -> (PrimaryUpdate, Condition, Duration) {
    let generation = cache.metadata.generation;
    if ready == 0 {
        let message = "no pod is ready: there is no Sentinel to ask yet";
        return (PrimaryUpdate::Keep, condition(sentinel::PRIMARY_KNOWN, false, "NoSentinelReady", message, generation), sentinel::POLL);
    }
    let hosts: Vec<String> = (0..cache.spec.replicas).map(|ordinal| build::pod_host(cache, ordinal)).collect();
    let (reports, errors) = sentinel::ask(&hosts, build::SENTINEL_PORT as u16, &cache.name_any()).await;
    match sentinel::latest(reports) {
        Some(report) => {
            // A pod not ready may be the primary, before Sentinel notices (5 s): look again soon.
            let unsettled = report.failing_over() || ready < cache.spec.replicas;
            let next = if unsettled { sentinel::POLL_FAILING_OVER } else { sentinel::POLL };
            let known = sentinel::condition(Some(&report), &hosts, generation);
            (PrimaryUpdate::Seen(report, jiff::Timestamp::now()), known, next)
        }
        None => {
            warn!(cache = %cache.name_any(), errors = ?errors, "no Sentinel answered");
            (PrimaryUpdate::Keep, sentinel::condition(None, &hosts, generation), sentinel::POLL)
        }
    }
}

/// An owned object the API server did not take.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind} {name}: {}", describe(.error))]
struct ApplyFailed {
    action: &'static str,
    kind: String,
    name: String,
    error: kube::Error,
}

impl ApplyFailed {
    /// A 4xx other than a conflict, an expired resourceVersion (`410 Gone`) or throttling: the
    /// object as built is refused, and retrying the same object cannot help.
    fn is_refusal(&self) -> bool {
        matches!(&self.error, kube::Error::Api(status) if (400..500).contains(&status.code) && ![409, 410, 429].contains(&status.code))
    }
}

/// The API server's own message for its errors, which names the field; the error otherwise.
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Applies every owned object (and removes the PodDisruptionBudget a single replica does not
/// get); the StatefulSet as the API server returned it.
async fn apply_children(context: &Context, namespace: &str, cache: &Cache, desired: Desired) -> Result<StatefulSet, ApplyFailed> {
    let client = &context.client;
    let Desired { config_map, stateful_set, service, headless_service, pdb } = desired;
    ssa(client, namespace, &config_map).await?;
    ssa(client, namespace, &service).await?;
    ssa(client, namespace, &headless_service).await?;
    let stateful_set = ssa(client, namespace, &stateful_set).await?;
    match pdb {
        Some(pdb) => {
            ssa(client, namespace, &pdb).await?;
        }
        None => {
            let name = build::resource_name(cache);
            if !context.may_have_disruption_budget(namespace, &name).await {
                return Ok(stateful_set);
            }
            match Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace).delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(error) if Existence::of_kube(&error) == Existence::Gone => {}
                Err(error) => return Err(ApplyFailed { action: "deleting", kind: "PodDisruptionBudget".into(), name, error }),
            }
        }
    }
    Ok(stateful_set)
}

/// Deletes the children (there may be no garbage collector to do it) within a time bound;
/// failures are reported, never returned, so deletion is never blocked.
async fn cleanup(cache: &Cache, context: &Context) -> Result<Action, Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let name = build::resource_name(cache);
    let client = &context.client;
    let work = async {
        let params = DeleteParams::background();
        let results = [
            Api::<StatefulSet>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
            Api::<Service>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
            Api::<Service>::namespaced(client.clone(), &namespace).delete(&build::headless_name(cache), &params).await.map(|_| ()),
            Api::<ConfigMap>::namespaced(client.clone(), &namespace).delete(&format!("{name}-config"), &params).await.map(|_| ()),
            Api::<PodDisruptionBudget>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
        ];
        // A child already gone is deleted; any other failure is told, never waited on.
        results
            .into_iter()
            .filter_map(Result::err)
            .filter(|e| Existence::of_kube(e) != Existence::Gone)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    };
    match tokio::time::timeout(CLEANUP_TIMEOUT, work).await {
        Ok(errors) if errors.is_empty() => info!(cache = %cache.name_any(), "cleaned up"),
        Ok(errors) => publish(context, cache, EventType::Warning, "CleanupIncomplete", &errors.join("; ")).await,
        Err(_) => {
            publish(context, cache, EventType::Warning, "CleanupTimedOut", "cleanup took too long; the object is released anyway").await
        }
    }
    Ok(Action::await_change())
}

async fn ssa<K>(client: &Client, namespace: &str, object: &K) -> Result<K, ApplyFailed>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let failed = |error| ApplyFailed { action: "applying", kind: K::kind(&()).into_owned(), name: object.name_any(), error };
    let mut body = serde_json::to_value(object).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    applied::stamp(&mut body);
    // Nothing to change: no write (see `applied`).
    let live = api.get_opt(&object.name_any()).await.map_err(failed)?;
    if let Some(live) = live
        && applied::holds(&serde_json::to_value(&live).map_err(|e| failed(kube::Error::SerdeError(e)))?, &body)
    {
        return Ok(live);
    }
    api.patch(&object.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await.map_err(failed)
}

/// Writes `report` over the current status when it changes anything, and publishes its events:
/// a Normal event on a phase change, and the report's warning.
async fn write_status(cache: &Cache, context: &Context, report: Report) -> Result<(), Error> {
    let mut current = cache.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let mut next = next_status(cache, &current, &report, now);
    if next != current {
        // The Cache as the watch delivered it can be older than the stored one: a relist after a
        // `410 Gone` is answered from the API server's watch cache, which may lag. Decide on the
        // stored status, so that an old view is never written back (seen looking into issue 15's
        // API server suite).
        let api: Api<Cache> = Api::namespaced(context.client.clone(), &cache.namespace().unwrap_or_default());
        let stored = api.get(&cache.name_any()).await?;
        if stored.metadata.generation != cache.metadata.generation {
            // A newer spec is on its way through the watch, and its own reconcile writes.
            return Ok(());
        }
        current = stored.status.unwrap_or_default();
        next = next_status(cache, &current, &report, now);
        if next != current {
            let patch = json!({"apiVersion": Cache::api_version(&()), "kind": "Cache", "status": next});
            api.patch_status(&cache.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
        }
    }
    if let Some(phase) = next.phase.filter(|phase| current.phase != Some(*phase)) {
        let message = next.conditions.iter().find(|c| c.type_ == READY).map(|c| c.message.clone()).unwrap_or_default();
        let type_ = if phase == Phase::Failed { EventType::Warning } else { EventType::Normal };
        publish(context, cache, type_, &format!("{phase:?}"), &message).await;
    }
    if let Some((reason, note)) = report.warning {
        publish(context, cache, EventType::Warning, &reason, &note).await;
    }
    Ok(())
}

/// The `lastError` after a reconcile that ended waiting on `class`/`reason`. The same error
/// keeps its record until its `retryAt` (the resync, the latest the controller looks again; a
/// change of the spec or the Secret comes sooner): a Cache polled every few seconds for its
/// Sentinel does not rewrite its status each time.
fn next_last_error(previous: Option<&LastError>, class: ErrorClass, reason: &str, message: &str, now: jiff::Timestamp) -> LastError {
    match previous {
        Some(previous) if previous.class == class && previous.reason == reason && previous.retry_at.0 > now => {
            LastError { message: message.to_owned(), ..previous.clone() }
        }
        _ => {
            let resync = jiff::SignedDuration::try_from(RESYNC).unwrap_or(jiff::SignedDuration::from_secs(300));
            LastError::after(previous, class, reason, message, now, now.saturating_add(resync).unwrap_or(now))
        }
    }
}

/// The status `report` makes of `current`.
fn next_status(cache: &Cache, current: &CacheStatus, report: &Report, now: jiff::Timestamp) -> CacheStatus {
    let (primary, last_failover) = match &report.primary {
        PrimaryUpdate::Keep => (current.primary.clone(), current.last_failover.clone()),
        PrimaryUpdate::Clear => (None, None),
        PrimaryUpdate::Seen(seen, at) => {
            (Some(seen.primary.clone()), sentinel::observe(current.primary.as_deref(), current.last_failover.as_ref(), seen, *at))
        }
    };
    let mut next = CacheStatus {
        phase: report.phase.or(current.phase),
        primary,
        last_failover,
        ready_replicas: report.ready_replicas.unwrap_or(current.ready_replicas),
        endpoint: Some(build::endpoint(cache)),
        conditions: current.conditions.clone(),
        observed_generation: cache.metadata.generation,
        // Every reconcile acts on the annotation's value: the change of it triggered this one.
        last_handled_reconcile_at: cache
            .annotations()
            .get(blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION)
            .cloned()
            .or(current.last_handled_reconcile_at.clone()),
        last_error: match &report.last_error {
            ErrorUpdate::Keep => current.last_error.clone(),
            ErrorUpdate::Clear => None,
            ErrorUpdate::Failed(class, reason, message) => Some(next_last_error(current.last_error.as_ref(), *class, reason, message, now)),
        },
    };
    next.conditions.retain(|condition| !report.dropped_conditions.contains(&condition.type_.as_str()));
    for condition in &report.conditions {
        set_condition(&mut next.conditions, condition.clone());
    }
    next
}

async fn publish(context: &Context, cache: &Cache, type_: EventType, reason: &str, note: &str) {
    context.events.publish(&cache.object_ref(&()), type_, reason, "Reconcile", note).await;
}

#[cfg(test)]
mod tests {
    use super::{ErrorClass, catch_panic, next_last_error};

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(second).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_error_is_retried_at_the_latest_on_the_resync() {
        let error = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        assert_eq!((error.class, error.attempts, error.since.0, error.retry_at.0), (ErrorClass::NotFound, 1, at(1_000), at(1_300)));
    }

    #[test]
    fn the_same_error_before_its_retry_time_keeps_its_record() {
        let first = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        let polled = next_last_error(Some(&first), ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_005));
        assert_eq!(polled, first, "a Sentinel poll 5 s later writes nothing");
        let resynced = next_last_error(Some(&first), ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_300));
        assert_eq!((resynced.attempts, resynced.since.0, resynced.retry_at.0), (2, at(1_000), at(1_600)));
    }

    #[test]
    fn another_error_starts_its_own_record() {
        let first = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        let next = next_last_error(Some(&first), ErrorClass::Terminal, "TLSSecretIncomplete", "no tls.key", at(1_010));
        assert_eq!((next.class, next.attempts, next.since.0), (ErrorClass::Terminal, 1, at(1_010)));
    }

    #[tokio::test]
    async fn a_panic_becomes_an_error_with_its_message() {
        #[allow(clippy::panic)]
        let result = catch_panic(async { panic!("boom at {}", 42) }).await;
        assert_eq!(result, Err::<(), _>("boom at 42".to_owned()));
    }

    #[tokio::test]
    async fn a_normal_result_passes_through() {
        assert_eq!(catch_panic(async { 7 }).await, Ok(7));
    }
}
