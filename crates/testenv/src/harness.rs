//! What every controller's integration tests share: a namespace of the test's own (deleted when
//! dropped), the controller as a task the test starts, crashes and starts again, and waits that
//! poll the real API server until a condition holds or fail the test with what they last saw.
//! Each crate's `tests/integration/support` keeps only its own fixtures on top of these.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::control_plane::{ControlPlane, control_plane};

/// How long a wait polls before it fails the test: a bound for a loaded machine, not a timing
/// assertion.
pub const TIMEOUT: Duration = Duration::from_secs(40);
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Ok`; after `timeout`, fails the test with `what` and the last
/// `Err` (what was seen instead).
pub async fn eventually<T>(what: &str, timeout: Duration, check: impl AsyncFnMut() -> Result<T, String>) -> T {
    poll(timeout, check).await.unwrap_or_else(|seen| fail(format!("timed out waiting for {what}; last seen: {seen}")))
}

/// Polls `check` until it returns `Ok`; after `timeout`, the last `Err`.
pub(crate) async fn poll<T>(timeout: Duration, mut check: impl AsyncFnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(seen) if tokio::time::Instant::now() >= deadline => return Err(seen),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Failing the test is a test helper's job.
#[allow(clippy::panic)]
pub(crate) fn fail(message: String) -> ! {
    panic!("{message}")
}

/// What a test expects of the API server: a failure is the test's.
fn expect<T>(what: &str, result: Result<T, kube::Error>) -> T {
    result.unwrap_or_else(|e| fail(format!("{what}: {e}")))
}

/// A namespace of the test's own on the shared control plane, where it keeps objects of kind
/// `K`; deleted when dropped.
pub struct TestNamespace<K> {
    pub plane: &'static ControlPlane,
    pub client: Client,
    pub namespace: String,
    kind: std::marker::PhantomData<K>,
}

impl<K> TestNamespace<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    /// Starts the control plane (once per test binary) and creates `<prefix>-<random>`.
    pub async fn new(prefix: &str) -> Self {
        let plane = control_plane().await.unwrap_or_else(|e| fail(format!("the control plane starts: {e}")));
        let namespace = plane.namespace(prefix).await.unwrap_or_else(|e| fail(format!("the namespace is created: {e}")));
        Self { plane, client: plane.client(), namespace, kind: std::marker::PhantomData }
    }

    /// `namespace`, made by the test (say, before the configuration that names it), from now
    /// on deleted when this is dropped.
    pub async fn adopt(namespace: &str) -> Self {
        let plane = control_plane().await.unwrap_or_else(|e| fail(format!("the control plane starts: {e}")));
        Self { plane, client: plane.client(), namespace: namespace.to_owned(), kind: std::marker::PhantomData }
    }

    pub fn api(&self) -> Api<K> {
        self.api_of()
    }

    /// The API of another kind in this namespace (the objects a controller makes, say).
    pub fn api_of<O: Resource<Scope = NamespaceResourceScope, DynamicType = ()>>(&self) -> Api<O> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub async fn get(&self, name: &str) -> Option<K> {
        expect(&format!("get {name}"), self.api().get_opt(name).await)
    }

    pub async fn create(&self, object: &K) -> K {
        expect("create", self.api().create(&PostParams::default(), object).await)
    }

    /// What the API server says refusing to create `object` (its schema, CEL rules or a
    /// webhook); fails the test if it is admitted.
    pub async fn refusal(&self, object: &K) -> String {
        match self.api().create(&PostParams::default(), object).await {
            Ok(admitted) => fail(format!("the API server admitted {}", status_of(&admitted))),
            Err(kube::Error::Api(status)) => status.message,
            Err(other) => fail(format!("create: {other}")),
        }
    }

    /// Applies a JSON merge patch to `name` (`kubectl patch --type merge`).
    pub async fn merge(&self, name: &str, patch: serde_json::Value) -> K {
        expect(&format!("patch {name}"), self.api().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await)
    }

    /// Sets the annotation `key` of `name` to `value`, or removes it (`None`).
    pub async fn annotate(&self, name: &str, key: &str, value: Option<&str>) -> K {
        self.merge(name, serde_json::json!({"metadata": {"annotations": {key: value}}})).await
    }

    /// Deletes `name` and waits until it is gone (its finalizers done).
    pub async fn delete_and_wait(&self, name: &str) {
        expect(&format!("delete {name}"), self.api().delete(name, &DeleteParams::default()).await);
        self.wait_gone(name).await;
    }

    /// Waits until `name` exists and `check` holds for it; returns it. Fails the test with its
    /// last status (or the whole object, for a kind without one).
    pub async fn wait_for(&self, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K {
        eventually(&format!("{name} to be {what}"), TIMEOUT, async || match self.get(name).await {
            Some(object) if check(&object) => Ok(object),
            Some(object) => Err(status_of(&object)),
            None => Err("it does not exist".into()),
        })
        .await
    }

    pub async fn wait_gone(&self, name: &str) {
        eventually(&format!("{name} to be deleted"), TIMEOUT, async || match self.get(name).await {
            Some(object) => Err(status_of(&object)),
            None => Ok(()),
        })
        .await
    }

    /// The events about `name` in this namespace, oldest first.
    pub async fn events(&self, name: &str) -> Vec<Told> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut events: Vec<Event> = expect("list events", api.list(&Default::default()).await)
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        events.into_iter().map(Told::from).collect()
    }

    /// Waits for at least one event with `reason` about `name`; returns every such event.
    pub async fn wait_for_event(&self, name: &str, reason: &str) -> Vec<Told> {
        eventually(&format!("a {reason} event about {name}"), TIMEOUT, async || {
            let events = self.events(name).await;
            let found: Vec<Told> = events.iter().filter(|e| e.reason == reason).cloned().collect();
            if found.is_empty() { Err(format!("{events:?}")) } else { Ok(found) }
        })
        .await
    }
}

fn status_of(object: &impl Serialize) -> String {
    let json = serde_json::to_value(object).unwrap_or_default();
    let shown = json.get("status").unwrap_or(&json);
    serde_json::to_string_pretty(shown).unwrap_or_default()
}

impl<K> Drop for TestNamespace<K> {
    /// Deletes the namespace from a thread of its own: the test's runtime is ending, and the
    /// client's connections belong to it.
    fn drop(&mut self) {
        let (config, namespace) = (self.plane.kube_config(), self.namespace.clone());
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let client = Client::try_from(config).ok()?;
                Api::<Namespace>::all(client).delete(&namespace, &DeleteParams::background()).await.ok()
            })
        });
        // Best effort: a test that already failed must not fail again here.
        let _ = deleted.join();
    }
}

/// An event as a test reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Told {
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    pub note: String,
}

impl From<Event> for Told {
    fn from(event: Event) -> Self {
        Self { type_: event.type_.unwrap_or_default(), reason: event.reason.unwrap_or_default(), note: event.note.unwrap_or_default() }
    }
}

/// The controller under test as a task: started as a new process would start it, and crashed
/// (aborted wherever it is, its in-flight requests dropped). A restart is a crash and a start.
#[derive(Default)]
pub struct ControllerTask(Option<JoinHandle<()>>);

impl ControllerTask {
    /// Starts `run`; a controller must not be running already.
    pub fn start(&mut self, run: impl Future<Output = ()> + Send + 'static) {
        if self.0.is_some() {
            fail("a controller is already running: crash it first".into());
        }
        self.0 = Some(tokio::spawn(run));
    }

    pub fn crash(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

impl Drop for ControllerTask {
    fn drop(&mut self) {
        self.crash();
    }
}

/// The text exposition of `registry`.
pub fn metrics_text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap_or_else(|e| fail(format!("metrics encode: {e}")));
    text
}

/// The values of `name`'s samples in a text exposition that carry every label of `labels`.
pub fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    text.lines()
        .filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter(|line| labels.iter().all(|(key, value)| line.contains(&format!("{key}=\"{value}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// The sum of [`samples`].
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, name, labels).iter().sum()
}
