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
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{Instrument as _, info, warn};

use blockwork_runtime::events::Publisher;
use blockwork_runtime::labels::managed_by_selector;
use blockwork_runtime::namespaces::api as child_api;
use blockwork_runtime::outcome::ErrorClass;
use blockwork_runtime::status::condition;
use blockwork_runtime::trace::{self, Cause};
use blockwork_runtime::watches::on_its_own;

use crate::access;
use crate::api::{Cache, GROUP, Phase};
use crate::build;
use crate::children::{self, FIELD_MANAGER};
use crate::metrics::CacheMetrics;
use crate::refs::{self, Hold};
use crate::sentinel;
use crate::settings::Settings;
use crate::shape;
use crate::startup::{self, Stuck};
use crate::status::{self, ErrorUpdate, PrimaryUpdate, READY, RESOLVED_REFS, RESYNC, Report, SYNCED};
use crate::traced::{self, CacheTriggers};

/// Deletion cleans up for at most this long, then lets the object go.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// What the platform set at install for every Cache's pods.
    settings: Arc<Settings>,
    /// Every Cache's pods and the StatefulSets' `FailedCreate` events, as the watches see them:
    /// what tells why pods do not start ([`startup`]). `None` (a reconcile called without
    /// [`run`]) says nothing of them.
    pods: Option<Store<Pod>>,
    failed_creates: Option<Store<Event>>,
    metrics: Arc<CacheMetrics>,
    /// Why each Cache's next reconcile runs, for its span (only while traces are exported).
    triggers: CacheTriggers,
}

impl Context {
    pub fn new(client: Client, settings: Settings, metrics: Arc<CacheMetrics>) -> Arc<Self> {
        Arc::new(Self {
            events: Publisher::new(client.clone(), FIELD_MANAGER),
            client,
            disruption_budgets: None,
            settings: Arc::new(settings),
            pods: None,
            failed_creates: None,
            metrics,
            triggers: CacheTriggers::default(),
        })
    }

    /// Why the pods of `cache` (whose StatefulSet is `stateful_set`) do not start, if the
    /// watches have seen a reason.
    fn stuck(&self, cache: &Cache, stateful_set: &StatefulSet) -> Option<Stuck> {
        let namespace = cache.namespace();
        let name = cache.name_any();
        let pods: Vec<Arc<Pod>> = self.pods.as_ref().map(Store::state).unwrap_or_default();
        let pods: Vec<&Pod> = pods
            .iter()
            .filter(|pod| pod.namespace() == namespace && pod.labels().get(shape::INSTANCE_LABEL) == Some(&name))
            .map(|pod| &**pod)
            .collect();
        let events: Vec<Arc<Event>> = self.failed_creates.as_ref().map(Store::state).unwrap_or_default();
        let uid = stateful_set.metadata.uid.as_deref();
        let latest =
            events.iter().filter(|event| uid.is_some() && event.involved_object.uid.as_deref() == uid).max_by_key(|event| last_seen(event));
        let created = stateful_set.status.as_ref().map_or(0, |status| status.replicas);
        startup::diagnose(cache.spec.replicas, created, &pods, latest.map(|event| &**event))
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

/// When an event was last seen: its series', its `lastTimestamp`, or when it was made.
fn last_seen(event: &Event) -> Option<jiff::Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|series| series.last_observed_time.as_ref())
        .map(|time| time.0)
        .or_else(|| event.last_timestamp.as_ref().map(|time| time.0))
        .or_else(|| event.event_time.as_ref().map(|time| time.0))
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
    let caches = traced::own(Arc::clone(&context.triggers), caches);
    let namespace = namespace.as_deref();
    // Metadata only: a Secret's data never passes through the watch.
    let secrets = changes_of::<PartialObjectMeta<Secret>>(&client, namespace, &watcher::Config::default());
    let referenced = store.clone();
    let (disruption_budgets, budgets_writer) = reflector::store();
    let budgets = watcher(child_api::<PodDisruptionBudget>(&client, namespace), children.clone())
        .default_backoff()
        .reflect(budgets_writer)
        .touched_objects();
    // The pods carry the Cache's labels; their owner is the StatefulSet, so they are mapped to
    // their Cache by name.
    let (pods, pods_writer) = reflector::store();
    let pod_changes = watcher(child_api::<Pod>(&client, namespace), watcher::Config::default().labels(&pod_selector()))
        .default_backoff()
        .reflect(pods_writer)
        .touched_objects();
    // The StatefulSet controller says only in events that it could not create a pod.
    let (failed_creates, events_writer) = reflector::store();
    let failed_create_changes = watcher(
        child_api::<Event>(&client, namespace),
        watcher::Config::default().fields("involvedObject.kind=StatefulSet,reason=FailedCreate"),
    )
    .default_backoff()
    .reflect(events_writer)
    .touched_objects();
    let context = Arc::new(Context {
        disruption_budgets: Some(disruption_budgets),
        pods: Some(pods),
        failed_creates: Some(failed_creates),
        ..(*context).clone()
    });
    let triggers = Arc::clone(&context.triggers);
    let (pod_triggers, event_triggers) = (Arc::clone(&triggers), Arc::clone(&triggers));
    let controller = Controller::for_stream(on_its_own("cache", "Cache", caches), store.clone());
    // Without NetworkPolicies the operator may not watch them (nothing grants it).
    let controller = match context.settings.network_policies {
        Some(_) => controller.owns_stream(on_its_own(
            "cache",
            "NetworkPolicy",
            traced::children(Arc::clone(&triggers), changes_of::<NetworkPolicy>(&client, namespace, &children)),
        )),
        None => controller,
    };
    let run = controller
        .owns_stream(on_its_own(
            "cache",
            "StatefulSet",
            traced::children(Arc::clone(&triggers), changes_of::<StatefulSet>(&client, namespace, &children)),
        ))
        .owns_stream(on_its_own(
            "cache",
            "Service",
            traced::children(Arc::clone(&triggers), changes_of::<Service>(&client, namespace, &children)),
        ))
        .owns_stream(on_its_own(
            "cache",
            "ConfigMap",
            traced::children(Arc::clone(&triggers), changes_of::<ConfigMap>(&client, namespace, &children)),
        ))
        .owns_stream(on_its_own("cache", "PodDisruptionBudget", traced::children(Arc::clone(&triggers), budgets)))
        .watches_stream(on_its_own("cache", "Secret", secrets), move |secret| {
            let caches = referencing(&referenced, &secret);
            caches.iter().for_each(|cache| triggers.note(cache, Cause::Related));
            caches
        })
        .watches_stream(on_its_own("cache", "Pod", pod_changes), move |pod: Pod| {
            let cache = pod.labels().get(shape::INSTANCE_LABEL).cloned();
            let cache = cache.map(|name| ObjectRef::new(&name).within(&pod.namespace().unwrap_or_default()));
            cache.inspect(|cache| pod_triggers.note(cache, Cause::Related))
        })
        .watches_stream(on_its_own("cache", "Event", failed_create_changes), move |event: Event| {
            let cache = event.involved_object.name.as_deref().and_then(|name| name.strip_suffix("-cache")).map(str::to_owned);
            let cache = cache.map(|name| ObjectRef::new(&name).within(&event.namespace().unwrap_or_default()));
            cache.inspect(|cache| event_triggers.note(cache, Cause::Related))
        })
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

/// What selects every Cache's pods, and only them.
fn pod_selector() -> String {
    format!("{}=cache,{}", shape::NAME_LABEL, managed_by_selector())
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

/// One reconcile, in a span of its own; a panic inside is caught, reported as an event, and
/// retried like an error.
pub async fn reconcile(cache: Arc<Cache>, context: Arc<Context>) -> Result<Action, Error> {
    let span = traced::span(&context.triggers, &cache);
    let result = async {
        match catch_panic(reconcile_guarded(Arc::clone(&cache), Arc::clone(&context))).await {
            Ok(result) => result,
            Err(message) => {
                publish(&context, &cache, EventType::Warning, "ReconcilePanicked", &message).await;
                Err(Error::Panicked(message))
            }
        }
    }
    .instrument(span.clone())
    .await;
    match &result {
        Ok(_) => trace::outcome(&span, "reconciled", None),
        Err(error) => trace::outcome(&span, "failed", Some(&error.to_string())),
    }
    result
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

fn error_policy(cache: Arc<Cache>, error: &Error, context: Arc<Context>) -> Action {
    warn!(cache = %cache.name_any(), %error, "cache reconcile error");
    traced::requeue(&context.triggers, &cache, Duration::from_secs(10), Cause::RetryAfterError)
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
    status::write(cache, &context.client, &context.events, report).await?;
    Ok(Action::await_change())
}

async fn apply(cache: &Cache, context: &Context) -> Result<Action, Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let generation = cache.metadata.generation;
    let desired = match build::desired(cache, &context.settings) {
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
            status::write(cache, &context.client, &context.events, report).await?;
            return Ok(traced::requeue(&context.triggers, cache, RESYNC, Cause::Requeued));
        }
    };
    let secret = match refs::tls_secret_name(cache) {
        Some(name) => Api::<Secret>::namespaced(context.client.clone(), &namespace).get_opt(name).await?,
        None => None,
    };
    let unresolved = refs::check_tls_secret(cache, secret.as_ref()).err();
    let budget_may_exist = desired.pdb.is_none() && context.may_have_disruption_budget(&namespace, &shape::resource_name(cache)).await;
    let stateful_set = match children::apply(&context.client, &namespace, cache, desired, budget_may_exist).await {
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
            status::write(cache, &context.client, &context.events, report).await?;
            return Ok(traced::requeue(&context.triggers, cache, RESYNC, Cause::Requeued));
        }
    };

    let status = stateful_set.status.clone().unwrap_or_default();
    let (ready, created) = (status.ready_replicas.unwrap_or(0), status.replicas);
    let (phase, message) = build::phase(cache.spec.replicas, created, ready);
    let stuck = if phase == Phase::Ready { None } else { context.stuck(cache, &stateful_set) };
    let (ready_reason, ready_message) = match (&unresolved, &stuck, phase) {
        (_, _, Phase::Ready) => ("AllReplicasAvailable", message),
        // The replicas wait for the reference: say that, not only that they wait.
        (Some(unresolved), _, _) => (unresolved.reason(), format!("{message}: {unresolved}")),
        // Kubernetes says why the pods do not start: say it on the Cache.
        (None, Some(stuck), _) => (stuck.reason(), format!("{message}: {stuck}")),
        (None, None, _) => ("ReplicasNotReady", message),
    };
    // Told once when it starts, not at every reconcile while it lasts.
    let newly_stuck = stuck.as_ref().filter(|stuck| {
        let told = cache.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == READY)).map(|c| c.reason.as_str());
        unresolved.is_none() && told != Some(stuck.reason())
    });
    let resolved = match &unresolved {
        None => condition(RESOLVED_REFS, true, "ResolvedRefs", "every referenced Secret exists with the keys it needs", generation),
        Some(unresolved) => condition(RESOLVED_REFS, false, unresolved.reason(), &unresolved.to_string(), generation),
    };
    let mut conditions = vec![
        condition(READY, phase == Phase::Ready, ready_reason, &ready_message, generation),
        condition(SYNCED, true, "ReconcileSuccess", "every object of the Cache is applied", generation),
        resolved,
        access::condition(cache, context.settings.network_policies.is_some()),
    ];
    let (primary, dropped_conditions, next) = if shape::has_sentinel(cache) {
        let (update, known, next) = primary(cache, ready).await;
        conditions.push(known);
        (update, &[][..], next)
    } else {
        (PrimaryUpdate::Clear, &[sentinel::PRIMARY_KNOWN][..], RESYNC)
    };
    let last_error = match (&unresolved, &stuck) {
        (None, None) => ErrorUpdate::Clear,
        (None, Some(stuck)) => ErrorUpdate::Failed(ErrorClass::Terminal, stuck.reason(), stuck.to_string()),
        (Some(unresolved), _) => match unresolved {
            refs::Unresolved::SecretNotFound(_) => ErrorUpdate::Failed(ErrorClass::NotFound, unresolved.reason(), unresolved.to_string()),
            refs::Unresolved::SecretIncomplete { .. } => {
                ErrorUpdate::Failed(ErrorClass::Terminal, unresolved.reason(), unresolved.to_string())
            }
        },
    };
    let report = Report {
        phase: Some(phase),
        ready_replicas: Some(ready),
        primary,
        conditions,
        dropped_conditions,
        warning: unresolved
            .map(|unresolved| (unresolved.reason().to_owned(), unresolved.to_string()))
            .or_else(|| newly_stuck.map(|stuck| (stuck.reason().to_owned(), stuck.to_string()))),
        last_error,
    };
    if status::write(cache, &context.client, &context.events, report).await? {
        context.metrics.failover(&namespace, &cache.name_any());
    }
    if phase == Phase::Ready {
        traced::settled(&context.triggers, cache);
    }
    Ok(traced::requeue(&context.triggers, cache, next, Cause::Requeued))
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
    let hosts: Vec<String> = (0..cache.spec.replicas).map(|ordinal| shape::pod_host(cache, ordinal)).collect();
    let (reports, errors) = sentinel::ask(&hosts, shape::SENTINEL_PORT as u16, &cache.name_any()).await;
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

/// Deletes the children (there may be no garbage collector to do it) within a time bound;
/// failures are reported, never returned, so deletion is never blocked.
async fn cleanup(cache: &Cache, context: &Context) -> Result<Action, Error> {
    match tokio::time::timeout(CLEANUP_TIMEOUT, children::delete(&context.client, cache, context.settings.network_policies.is_some())).await
    {
        Ok(errors) if errors.is_empty() => info!(cache = %cache.name_any(), "cleaned up"),
        Ok(errors) => publish(context, cache, EventType::Warning, "CleanupIncomplete", &errors.join("; ")).await,
        Err(_) => {
            publish(context, cache, EventType::Warning, "CleanupTimedOut", "cleanup took too long; the object is released anyway").await
        }
    }
    Ok(Action::await_change())
}

async fn publish(context: &Context, cache: &Cache, type_: EventType, reason: &str, note: &str) {
    status::publish(&context.events, cache, type_, reason, note).await;
}

#[cfg(test)]
mod tests {
    use super::catch_panic;

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
