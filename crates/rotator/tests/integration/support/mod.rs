//! A rotator running in-process against the test control plane, one namespace per test.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use blockwork_rotator::{Config, Keys, Metrics, Rotator, RotatorArgs};
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually, metrics_text};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::json;

pub struct Harness {
    /// Crashed before the namespace goes (fields drop in order).
    pub controller: ControllerTask,
    test_namespace: TestNamespace<Secret>,
    pub keys: Keys,
    pub config: Config,
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
}

impl Deref for Harness {
    type Target = TestNamespace<Secret>;

    fn deref(&self) -> &TestNamespace<Secret> {
        &self.test_namespace
    }
}

impl Harness {
    /// A fresh namespace and a rotator watching only it, not yet started.
    pub async fn new(prefix: &str) -> Self {
        let test_namespace = TestNamespace::new(prefix).await;
        let mut config = Config::new(&RotatorArgs::default(), std::slice::from_ref(&test_namespace.namespace), 4).unwrap();
        config.error_requeue = Duration::from_millis(200);
        config.conflict_requeue = Duration::from_secs(1);
        Self::with(test_namespace, config)
    }

    /// A rotator configured by `config`, not yet started; `namespace` is the test's.
    pub async fn with_config(namespace: &str, config: Config) -> Self {
        Self::with(TestNamespace::adopt(namespace).await, config)
    }

    fn with(test_namespace: TestNamespace<Secret>, config: Config) -> Self {
        init_tracing();
        let mut registry = Registry::with_prefix("rotator");
        let metrics = Metrics::register(&mut registry);
        Self { test_namespace, keys: config.keys.clone(), config, registry, metrics, controller: ControllerTask::default() }
    }

    /// A fresh namespace and a running rotator watching only it.
    pub async fn start(prefix: &str) -> Self {
        let mut h = Self::new(prefix).await;
        h.start_controller();
        h
    }

    pub fn start_controller(&mut self) {
        self.start_controller_with(self.plane.client());
    }

    pub fn start_controller_with(&mut self, client: Client) {
        let run = blockwork_rotator::run(client, self.config.clone(), Arc::clone(&self.metrics), std::future::pending());
        self.controller.start(async move { run.await.expect("the rotator runs") });
    }

    /// The reconcile pipeline itself, with its own client and metrics (a second "replica").
    pub fn rotator(&self) -> Rotator {
        let mut registry = Registry::default();
        Rotator::new(self.plane.client(), &self.config, Metrics::register(&mut registry))
    }

    pub fn source(&self, name: &str, target: &str, crt: &str, key: &str) -> Secret {
        source_in(&self.keys, &self.namespace, name, target, crt, key)
    }

    pub async fn create_source(&self, name: &str, target: &str, crt: &str, key: &str) -> Secret {
        self.create(&self.source(name, target, crt, key)).await
    }

    /// Replaces the source's certificate and key (as cert-manager does on renewal).
    pub async fn renew(&self, name: &str, crt: &str, key: &str) -> Secret {
        let patch = json!({ "data": { "tls.crt": b64(crt), "tls.key": b64(key) } });
        self.api().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap()
    }

    pub async fn annotate(&self, name: &str, key: &str, value: Option<&str>) -> Secret {
        let patch = json!({ "metadata": { "annotations": { key: value } } });
        self.api().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap()
    }

    pub async fn delete(&self, name: &str) {
        self.api().delete(name, &DeleteParams::default()).await.unwrap();
    }

    /// Waits until the target's next-tls.crt is `crt`.
    pub async fn wait_for_next(&self, target: &str, crt: &str) -> Secret {
        self.wait_for(target, &format!("next-tls.crt = {crt}"), |s| text(s, "next-tls.crt") == crt).await
    }

    /// Waits for an event with `reason` about `name`; returns the note of the first.
    pub async fn wait_for_event(&self, name: &str, reason: &str) -> String {
        self.test_namespace.wait_for_event(name, reason).await.swap_remove(0).note
    }

    pub fn metrics_text(&self) -> String {
        metrics_text(&self.registry)
    }

    /// The value of one sample (0 if absent), e.g. `rotator_rotations_total{result="unchanged"}`.
    pub fn sample(&self, series: &str) -> f64 {
        self.metrics_text()
            .lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).map(|v| v.trim().parse().unwrap()))
            .unwrap_or(0.0)
    }

    /// Waits until `series` exceeds `above`.
    pub async fn wait_for_sample(&self, series: &str, above: f64) {
        let what = format!("{series} above {above}");
        eventually(&what, TIMEOUT, async || if self.sample(series) > above { Ok(()) } else { Err(self.metrics_text()) }).await
    }
}

/// The Secret requests among `lines` (`METHOD /path`, query and watches left out).
pub fn secret_requests(lines: Vec<String>) -> Vec<String> {
    let requests = lines.into_iter().filter(|r| r.contains("/secrets") && !r.contains("watch="));
    requests.map(|r| r.split('?').next().unwrap_or_default().to_owned()).collect()
}

pub fn source_in(keys: &Keys, namespace: &str, name: &str, target: &str, crt: &str, key: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            annotations: Some(BTreeMap::from([(keys.source.clone(), "true".into()), (keys.destination.clone(), target.into())])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), ByteString(crt.as_bytes().to_vec())),
            ("tls.key".into(), ByteString(key.as_bytes().to_vec())),
        ])),
        ..Secret::default()
    }
}

pub fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

pub fn text(secret: &Secret, key: &str) -> String {
    secret.data.as_ref().and_then(|d| d.get(key)).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default()
}

pub fn slots(secret: &Secret) -> [String; 3] {
    [text(secret, "prev-tls.crt"), text(secret, "tls.crt"), text(secret, "next-tls.crt")]
}

pub fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.annotations().get(key).cloned()
}

pub fn summary(secret: &Secret) -> String {
    format!("rv {:?} slots {:?} annotations {:?}", secret.metadata.resource_version, slots(secret), secret.metadata.annotations)
}

pub fn kid(crt: &str) -> String {
    blockwork_rotator::kid::kid(crt.as_bytes())
}

fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ =
                tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
        }
    });
}
