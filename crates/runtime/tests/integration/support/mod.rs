//! A test-only external resource, `Widget`, whose backend lets each test choose every outcome:
//! synchronous or asynchronous, each error class, a crash after create.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use blockwork_runtime::policy::DeletionPolicy;
use blockwork_runtime::status::condition as new_condition;
use blockwork_runtime::{
    Asks, Conditions, Context, ControllerConfig, DeleteOutcome, DependencyRef, ExternalError, ExternalResource, ManagedStatus,
    MutateOutcome, Observed, ReconcileState, Request, RequeuePolicy, RuntimeMetrics, Timing, VerifyOutcome, WithConditions,
};
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually};
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use prometheus_client::registry::Registry;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "testing.blockwork.dev";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "testing.blockwork.dev", version = "v1alpha1", kind = "Widget", namespaced, status = "WidgetStatus")]
#[kube(printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.reconcileState"}"#)]
#[serde(rename_all = "camelCase")]
pub struct WidgetSpec {
    pub size: i32,
    /// Names of Widgets in the same namespace this one waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Names of Nodes this one waits for: a cluster-scoped dependency of a built-in kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on_nodes: Vec<String>,
    /// The widget's own drift policy (the `drift_policy` hook): enforce, report or suspend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<String>,
    /// Asks the manager to record the widget's external id in `recordedId` (`verify`'s spec patch).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_id: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_id: Option<String>,
}

pub type WidgetStatus = ManagedStatus<WidgetObservation>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetObservation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

/// One widget in the fake cloud, keyed by idempotency token.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudWidget {
    pub id: String,
    pub size: i32,
    pub ready: bool,
    pub deleting: bool,
    /// Changed in a way only delete and create can fix.
    pub broken: bool,
}

#[derive(Clone, Debug)]
pub enum Script {
    Fail(ExternalError),
    /// `verify` reports this, whatever the cloud holds.
    Observe(VerifyOutcome),
    /// Accept the call, finish only when the test calls `complete`.
    Async,
    /// Create the widget, then never return: the test kills the controller here.
    HangAfterCreate,
}

/// One call to the backend, with the object as the reconcile that made it saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub operation: &'static str,
    pub at: Instant,
    pub state: Option<ReconcileState>,
    pub create_pending: bool,
    /// The spec the create-pending marker was written for, as JSON.
    pub marked_spec: Option<String>,
    /// The object's spec, as JSON.
    pub spec: String,
    pub resource_version: Option<String>,
}

#[derive(Default)]
struct Cloud {
    widgets: HashMap<String, CloudWidget>,
    scripts: HashMap<&'static str, VecDeque<Script>>,
    calls: Vec<Call>,
    next_id: u32,
}

/// The backend, shared between the manager and the test.
#[derive(Clone, Default)]
pub struct Backend(Arc<Mutex<Cloud>>);

impl Backend {
    pub fn script(&self, operation: &'static str, script: Script) {
        self.0.lock().unwrap().scripts.entry(operation).or_default().push_back(script);
    }
    /// Drops what is still scripted for `operation`: its next calls do what the cloud does.
    pub fn unscript(&self, operation: &'static str) {
        self.0.lock().unwrap().scripts.remove(operation);
    }
    pub fn calls(&self, operation: &'static str) -> usize {
        self.0.lock().unwrap().calls.iter().filter(|c| c.operation == operation).count()
    }
    /// Every call to `operation`, in order.
    pub fn call_log(&self, operation: &'static str) -> Vec<Call> {
        self.0.lock().unwrap().calls.iter().filter(|c| c.operation == operation).cloned().collect()
    }
    /// Puts a ready widget in the cloud, as if made outside Kubernetes.
    pub fn insert(&self, token: &str, size: i32) {
        let mut cloud = self.0.lock().unwrap();
        cloud.next_id += 1;
        let widget = CloudWidget { id: format!("w-{}", cloud.next_id), size, ready: true, deleting: false, broken: false };
        cloud.widgets.insert(token.to_owned(), widget);
    }
    /// Starts deleting a widget outside Kubernetes; `complete` finishes it.
    pub fn start_deleting(&self, token: &str) {
        if let Some(widget) = self.0.lock().unwrap().widgets.get_mut(token) {
            widget.deleting = true;
        }
    }
    pub fn widgets(&self) -> Vec<CloudWidget> {
        self.0.lock().unwrap().widgets.values().cloned().collect()
    }
    pub fn widget(&self, token: &str) -> Option<CloudWidget> {
        self.0.lock().unwrap().widgets.get(token).cloned()
    }
    /// Waits for `what`: the widget of `token` having `size`.
    pub async fn wait_for_size(&self, token: &str, size: i32, what: &str) {
        eventually(what, TIMEOUT, async || self.widget(token).filter(|w| w.size == size).ok_or(format!("{:?}", self.widget(token)))).await;
    }
    /// Finishes asynchronous creates, updates and deletes.
    pub fn complete(&self) {
        let mut cloud = self.0.lock().unwrap();
        cloud.widgets.retain(|_, w| !w.deleting);
        for widget in cloud.widgets.values_mut() {
            widget.ready = true;
        }
    }
    /// Changes a widget behind the operator's back.
    pub fn tamper(&self, token: &str, size: i32) {
        if let Some(widget) = self.0.lock().unwrap().widgets.get_mut(token) {
            widget.size = size;
        }
    }
    /// Breaks a widget so that only a recreate repairs it.
    pub fn break_widget(&self, token: &str) {
        if let Some(widget) = self.0.lock().unwrap().widgets.get_mut(token) {
            widget.broken = true;
        }
    }
    pub fn remove(&self, token: &str) {
        self.0.lock().unwrap().widgets.remove(token);
    }
    fn next(&self, operation: &'static str, object: &Widget) -> Option<Script> {
        let mut cloud = self.0.lock().unwrap();
        cloud.calls.push(Call {
            operation,
            at: Instant::now(),
            state: object.status.as_ref().and_then(|s| s.reconcile_state),
            create_pending: object.status.as_ref().is_some_and(|s| s.create_pending.is_some()),
            marked_spec: object.status.as_ref().and_then(|s| s.create_pending.as_ref()).and_then(|m| m.spec.clone()),
            spec: serde_json::to_string(&object.spec).unwrap(),
            resource_version: object.resource_version(),
        });
        cloud.scripts.get_mut(operation).and_then(VecDeque::pop_front)
    }
}

pub struct WidgetManager {
    pub backend: Backend,
}

/// Quick, except `slow_states` (requeued only after an hour: a test that uses them passes only if
/// something other than the requeue, a watch, triggers the reconcile); the throttle floor well
/// above the error backoff's cap, so a test can tell a throttled retry from another.
pub fn widget_timing(slow_states: &[ReconcileState]) -> Timing {
    let quick = RequeuePolicy::exponential(Duration::from_millis(100), Duration::from_millis(400));
    let settled = RequeuePolicy::fixed(Duration::from_millis(500));
    let slow = |state: ReconcileState, policy: RequeuePolicy| {
        if slow_states.contains(&state) { RequeuePolicy::fixed(Duration::from_secs(3600)) } else { policy }
    };
    Timing {
        pending: slow(ReconcileState::Pending, quick),
        creating: slow(ReconcileState::Creating, quick),
        verifying: slow(ReconcileState::Verifying, quick),
        ready: slow(ReconcileState::Succeeded, settled),
        failed: slow(ReconcileState::Failed, settled),
        terminating: slow(ReconcileState::Terminating, quick),
        error_backoff: quick,
        throttle_floor: Duration::from_secs(1),
        deletion_blocked_after: Duration::from_secs(2),
    }
}

/// `Large` while the size is above 10, removed otherwise; also tries to take over `Ready`.
fn widget_conditions(object: &Widget) -> Conditions {
    let mut conditions = Conditions::default();
    if object.spec.size <= 10 {
        conditions.remove("Large");
        return conditions;
    }
    let generation = object.metadata.generation;
    conditions.set(new_condition("Large", true, "SizeAboveTen", &format!("size {}", object.spec.size), generation));
    conditions.set(new_condition("Ready", false, "NotTheOperatorsToSet", "", generation));
    conditions
}

impl WidgetManager {
    fn observe(&self, request: &Request<'_, Widget>) -> VerifyOutcome {
        match self.backend.next("verify", request.object) {
            Some(Script::Fail(error)) => return VerifyOutcome::Error(error),
            Some(Script::Observe(outcome)) => return outcome,
            _ => {}
        }
        match self.backend.widget(request.idempotency_token) {
            None => VerifyOutcome::Missing,
            Some(w) if w.deleting => VerifyOutcome::Deleting,
            Some(w) if !w.ready => VerifyOutcome::InProgress("the widget is being built".into()),
            Some(w) if w.broken => VerifyOutcome::RecreateRequired("the widget is broken".into()),
            Some(w) if w.size != request.object.spec.size => {
                VerifyOutcome::UpdateRequired(format!("size is {} instead of {}", w.size, request.object.spec.size))
            }
            Some(_) => VerifyOutcome::Ready,
        }
    }
}

impl ExternalResource for WidgetManager {
    type Object = Widget;
    type Observation = WidgetObservation;
    type Upkeep = std::convert::Infallible;
    type Derived = ();

    async fn verify(&self, request: &Request<'_, Widget>, observation: &mut WidgetObservation) -> Observed<Self::Upkeep> {
        let spec = &request.object.spec;
        let unrecorded = observation.external_id.as_ref().filter(|id| spec.record_id && spec.recorded_id.as_ref() != Some(*id));
        Observed {
            spec_patch: unrecorded.map(|id| serde_json::json!({ "recordedId": id })),
            conditions: widget_conditions(request.object),
            ..self.observe(request).into()
        }
    }

    async fn create(&self, request: &Request<'_, Widget>, observation: &mut WidgetObservation) -> WithConditions<MutateOutcome> {
        let script = self.backend.next("create", request.object);
        if let Some(Script::Fail(error)) = script {
            return MutateOutcome::Error(error).into();
        }
        let ready = !matches!(script, Some(Script::Async));
        let id = {
            let mut cloud = self.backend.0.lock().unwrap();
            cloud.next_id += 1;
            let id = format!("w-{}", cloud.next_id);
            // Idempotent on the token, as the contract demands.
            let widget = cloud.widgets.entry(request.idempotency_token.to_owned()).or_insert(CloudWidget {
                id,
                size: request.object.spec.size,
                ready,
                deleting: false,
                broken: false,
            });
            widget.id.clone()
        };
        if matches!(script, Some(Script::HangAfterCreate)) {
            std::future::pending::<()>().await;
        }
        observation.external_id = Some(id);
        if ready { MutateOutcome::Succeeded } else { MutateOutcome::AwaitingVerification }.into()
    }

    async fn update(&self, request: &Request<'_, Widget>, _observation: &mut WidgetObservation) -> WithConditions<MutateOutcome> {
        let script = self.backend.next("update", request.object);
        if let Some(Script::Fail(error)) = script {
            return MutateOutcome::Error(error).into();
        }
        let ready = !matches!(script, Some(Script::Async));
        let mut cloud = self.backend.0.lock().unwrap();
        match cloud.widgets.get_mut(request.idempotency_token) {
            Some(widget) => {
                widget.size = request.object.spec.size;
                widget.ready = ready;
                if ready { MutateOutcome::Succeeded } else { MutateOutcome::AwaitingVerification }
            }
            None => MutateOutcome::Error(ExternalError::not_found("NotFound", "no such widget")),
        }
        .into()
    }

    async fn delete(&self, request: &Request<'_, Widget>, _observation: &mut WidgetObservation) -> WithConditions<DeleteOutcome> {
        let script = self.backend.next("delete", request.object);
        if let Some(Script::Fail(error)) = script {
            return DeleteOutcome::Error(error).into();
        }
        let mut cloud = self.backend.0.lock().unwrap();
        if matches!(script, Some(Script::Async)) {
            return match cloud.widgets.get_mut(request.idempotency_token) {
                Some(widget) => {
                    widget.deleting = true;
                    DeleteOutcome::AwaitingVerification
                }
                None => DeleteOutcome::Error(ExternalError::not_found("NotFound", "no such widget")),
            }
            .into();
        }
        match cloud.widgets.remove(request.idempotency_token) {
            Some(_) => DeleteOutcome::Succeeded,
            None => DeleteOutcome::Error(ExternalError::not_found("NotFound", "no such widget")),
        }
        .into()
    }

    async fn on_success(
        &self,
        request: &Request<'_, Widget>,
        _observation: &WidgetObservation,
        _client: &Client,
    ) -> Result<(), ExternalError> {
        match self.backend.next("hook", request.object) {
            Some(Script::Fail(error)) => Err(error),
            _ => Ok(()),
        }
    }

    fn asks(&self, object: &Widget) -> Asks {
        let widgets = object.spec.depends_on.iter().map(|name| DependencyRef {
            api_version: format!("{GROUP}/v1alpha1"),
            kind: "Widget".into(),
            name: name.clone(),
            namespace: None,
        });
        let nodes = object.spec.depends_on_nodes.iter().map(|name| DependencyRef {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: name.clone(),
            namespace: None,
        });
        Asks {
            drift_policy: object.spec.drift_policy.as_deref().and_then(|p| p.parse().ok()),
            dependencies: widgets.chain(nodes).collect(),
        }
    }
}

/// A namespace and a Widget controller watching only that namespace.
pub struct Harness {
    /// Crashed before the namespace goes (fields drop in order).
    pub controller: ControllerTask,
    test_namespace: TestNamespace<Widget>,
    pub backend: Backend,
    pub registry: Registry,
    /// The running controller's context.
    pub context: Option<Arc<Context<WidgetManager>>>,
    slow_states: Vec<ReconcileState>,
    /// The controller's client: the control plane's, or one through a proxy.
    controller_client: Client,
}

impl Deref for Harness {
    type Target = TestNamespace<Widget>;

    fn deref(&self) -> &TestNamespace<Widget> {
        &self.test_namespace
    }
}

impl Harness {
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, DeletionPolicy::Delete).await
    }

    /// With hour-long requeues in `slow_states`.
    pub async fn start_slow(prefix: &str, slow_states: &[ReconcileState]) -> Self {
        Self::start_configured(prefix, DeletionPolicy::Delete, slow_states, None).await
    }

    pub async fn start_with(prefix: &str, default_deletion: DeletionPolicy) -> Self {
        Self::start_configured(prefix, default_deletion, &[], None).await
    }

    /// With hour-long requeues in `slow_states`, the controller reaching the API server with
    /// `client` (e.g. through a `KubeProxy`); the test's own requests go direct.
    pub async fn start_slow_through(prefix: &str, slow_states: &[ReconcileState], client: Client) -> Self {
        Self::start_configured(prefix, DeletionPolicy::Delete, slow_states, Some(client)).await
    }

    async fn start_configured(
        prefix: &str,
        default_deletion: DeletionPolicy,
        slow_states: &[ReconcileState],
        controller_client: Option<Client>,
    ) -> Self {
        let test_namespace = TestNamespace::new(prefix).await;
        let controller_client = controller_client.unwrap_or_else(|| test_namespace.plane.client());
        test_namespace.plane.install_crds(&[Widget::crd()]).await.expect("Widget CRD installs");
        let mut harness = Self {
            test_namespace,
            backend: Backend::default(),
            registry: Registry::with_prefix("blockwork"),
            controller: ControllerTask::default(),
            context: None,
            slow_states: slow_states.to_vec(),
            controller_client,
        };
        harness.start_controller(default_deletion);
        harness
    }

    /// Starts a controller (again): a new process, as far as the object is concerned.
    pub fn start_controller(&mut self, default_deletion: DeletionPolicy) {
        let metrics = RuntimeMetrics::register(&mut self.registry);
        let manager = WidgetManager { backend: self.backend.clone() };
        let client = self.controller_client.clone();
        let config =
            ControllerConfig::new("widget", GROUP).with_timing(widget_timing(&self.slow_states)).with_default_deletion(default_deletion);
        let context = Context::new(client.clone(), manager, config, metrics);
        self.context = Some(Arc::clone(&context));
        let api: Api<Widget> = Api::namespaced(client, &self.namespace);
        self.controller.start(blockwork_runtime::run(api, context, 4, std::future::pending()));
    }

    pub async fn create(&self, widget: Widget) -> Widget {
        self.test_namespace.create(&widget).await
    }

    pub async fn wait_for_state(&self, name: &str, state: ReconcileState) -> Widget {
        self.wait_for(name, state.as_str(), |w| {
            w.status.as_ref().map(ManagedStatus::state) == Some(state) && w.status.as_ref().and_then(|s| s.reconcile_state).is_some()
        })
        .await
    }

    /// Counts every new version of the object `name` from now on (its creation included).
    pub async fn count_versions(&self, name: &str) -> Arc<AtomicUsize> {
        let versions = Arc::new(AtomicUsize::new(0));
        let mut events = self.watch_from_now(name).await;
        let counter = Arc::clone(&versions);
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) = event {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        versions
    }

    /// Records every new version of the object `name` from now on, in order.
    pub async fn watch_versions(&self, name: &str) -> Arc<Mutex<Vec<Widget>>> {
        let versions = Arc::new(Mutex::new(Vec::new()));
        let mut events = self.watch_from_now(name).await;
        let recorded = Arc::clone(&versions);
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(widget)) = event {
                    recorded.lock().unwrap().push(widget);
                }
            }
        });
        versions
    }

    /// A watch of the object `name` past its (empty) initial list, so nothing written later is
    /// missed.
    async fn watch_from_now(&self, name: &str) -> BoxStream<'static, watcher::Result<watcher::Event<Widget>>> {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(self.api(), config).boxed();
        while let Some(event) = events.next().await {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                break;
            }
        }
        events
    }

    /// Triggers a reconcile of `name` by changing an annotation (`value` must differ each time).
    pub async fn poke(&self, name: &str, value: &str) {
        self.annotate(name, "testing.blockwork.dev/poke", Some(value)).await;
    }
}

pub fn widget(name: &str, size: i32) -> Widget {
    let mut widget = Widget::new(name, WidgetSpec { size, ..WidgetSpec::default() });
    widget.metadata.annotations = Some(Default::default());
    widget
}

pub fn with_annotation(mut widget: Widget, key: &str, value: &str) -> Widget {
    widget.annotations_mut().insert(key.to_owned(), value.to_owned());
    widget
}

pub fn condition(widget: &Widget, type_: &str) -> Option<(String, String)> {
    widget.status.as_ref()?.condition(type_).map(|c| (c.status.clone(), c.reason.clone()))
}

pub fn token(widget: &Widget) -> String {
    blockwork_runtime::idempotency_token(&widget.uid().expect("created widgets have a uid"))
}
