//! The reconcile loop: apply the built objects with server-side apply, derive status from the
//! StatefulSet, clean up on deletion without ever blocking it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use blockwork_runtime::status::{condition, set_condition};

use crate::api::{Cache, CacheStatus, GROUP, Phase};
use crate::applied;
use crate::build::{self, Desired, MANAGED_BY};

pub const FIELD_MANAGER: &str = "blockwork-cache";
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
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

pub struct Context {
    pub client: Client,
    recorder: Recorder,
}

impl Context {
    pub fn new(client: Client) -> Arc<Self> {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        Arc::new(Self { recorder: Recorder::new(client.clone(), reporter), client })
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
    let children = watcher::Config::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let client = context.client.clone();
    let shutdown = shutdown.boxed().shared();
    let controller = Controller::new(api, watcher::Config::default().any_semantic());
    let store = controller.store();
    let run = controller
        .owns(child_api::<StatefulSet>(&client, namespace.as_deref()), children.clone())
        .owns(child_api::<Service>(&client, namespace.as_deref()), children.clone())
        .owns(child_api::<ConfigMap>(&client, namespace.as_deref()), children.clone())
        .owns(child_api::<PodDisruptionBudget>(&client, namespace.as_deref()), children)
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

fn child_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
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

async fn apply(cache: &Cache, context: &Context) -> Result<Action, Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let desired = match build::desired(cache) {
        Ok(desired) => desired,
        Err(invalid) => {
            let message = invalid.to_string();
            write_status(cache, context, Phase::Failed, 0, false, "InvalidSpec", &message).await?;
            publish(context, cache, EventType::Warning, "InvalidSpec", &message).await;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let Desired { config_map, stateful_set, service, headless_service, pdb } = desired;
    ssa(&context.client, &namespace, &config_map).await?;
    ssa(&context.client, &namespace, &service).await?;
    ssa(&context.client, &namespace, &headless_service).await?;
    let stateful_set = ssa(&context.client, &namespace, &stateful_set).await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(context.client.clone(), &namespace);
    match pdb {
        Some(pdb) => {
            ssa(&context.client, &namespace, &pdb).await?;
        }
        None => match pdbs.delete(&build::resource_name(cache), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        },
    }

    let status = stateful_set.status.unwrap_or_default();
    let (ready, created) = (status.ready_replicas.unwrap_or(0), status.replicas);
    let (phase, message) = build::phase(cache.spec.replicas, created, ready);
    let reason = if phase == Phase::Ready { "AllReplicasAvailable" } else { "ReplicasNotReady" };
    write_status(cache, context, phase, ready, phase == Phase::Ready, reason, &message).await?;
    Ok(Action::requeue(RESYNC))
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
        results
            .into_iter()
            .filter_map(Result::err)
            .filter(|e| !matches!(e, kube::Error::Api(r) if r.code == 404))
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

async fn ssa<K>(client: &Client, namespace: &str, object: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let mut body = serde_json::to_value(object).map_err(Error::Serialize)?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    applied::stamp(&mut body);
    // Nothing to change: no write (see `applied`).
    if let Some(live) = api.get_opt(&object.name_any()).await?
        && applied::holds(&serde_json::to_value(&live).map_err(Error::Serialize)?, &body)
    {
        return Ok(live);
    }
    Ok(api.patch(&object.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await?)
}

async fn write_status(
    cache: &Cache,
    context: &Context,
    phase: Phase,
    ready: i32,
    is_ready: bool,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let current = cache.status.clone().unwrap_or_default();
    let generation = cache.metadata.generation;
    let mut next = CacheStatus {
        phase: Some(phase),
        ready_replicas: ready,
        endpoint: Some(build::endpoint(cache)),
        conditions: current.conditions.clone(),
        observed_generation: generation,
    };
    set_condition(&mut next.conditions, condition("Ready", is_ready, reason, message, generation));
    if next == current {
        return Ok(());
    }
    let api: Api<Cache> = Api::namespaced(context.client.clone(), &cache.namespace().unwrap_or_default());
    let patch = json!({"apiVersion": Cache::api_version(&()), "kind": "Cache", "status": next});
    api.patch_status(&cache.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
    if current.phase != Some(phase) {
        publish(context, cache, EventType::Normal, &format!("{phase:?}"), message).await;
    }
    Ok(())
}

async fn publish(context: &Context, cache: &Cache, type_: EventType, reason: &str, note: &str) {
    let event = Event { type_, reason: reason.into(), note: Some(note.into()), action: "Reconcile".into(), secondary: None };
    if let Err(error) = context.recorder.publish(&event, &cache.object_ref(&())).await {
        warn!(%error, "could not publish event");
    }
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
