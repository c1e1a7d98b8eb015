#![allow(clippy::unwrap_used, clippy::panic)]
//! The hostile-input corpus (`tests/hostile/*.yaml`, see its README): every manifest there is
//! applied, as a user would with `kubectl apply --server-side`, to a real kube-apiserver with
//! Blockwork's CRDs, its conversion and admission webhooks and every controller running (`blockwork
//! run` against moto and MiniStack), and must be refused at the layer the case names — schema or
//! CEL, conversion, admission webhook, a status condition or a Warning event — with the field and
//! the reason in the message. At the end the operator must still be running: no input crashed it.
//! Own test binary: the webhook registration is cluster-wide.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::pinned_kind;
use kube::{Client, ResourceExt as _};
use serde::Deserialize;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile");
/// The zones the Cert controller and its webhook are configured with.
const ZONES: &str = "k8s.example.com:Z0000000000000000001";
/// How long a condition or an event may take to appear.
const SETTLE: Duration = Duration::from_secs(60);
/// Cases run at once.
const CONCURRENCY: usize = 6;

/// One file of the corpus.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// Why the input is hostile: what it would do if it got through.
    about: String,
    expect: Expect,
    /// Objects created first, in order (a Secret the manifest refers to, say).
    #[serde(default)]
    setup: Vec<Value>,
    /// Makes part of the manifest too big to write by hand.
    #[serde(default)]
    grow: Option<Grow>,
    /// The hostile manifest.
    object: Value,
}

/// `times` copies of `text` (a string), or a list of `times` copies of `item` with `{i}` in its
/// strings replaced by the copy's index, put at `pointer` (a JSON pointer) in the manifest.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Grow {
    pointer: String,
    times: usize,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    item: Option<Value>,
}

impl Grow {
    fn value(&self) -> Value {
        match (&self.text, &self.item) {
            (Some(text), None) => Value::String(text.repeat(self.times)),
            (None, Some(item)) => Value::Array((0..self.times).map(|i| numbered(item, i)).collect()),
            _ => panic!("grow at {} names either text or item", self.pointer),
        }
    }
}

/// `item` with `{i}` in its strings replaced by `i`.
fn numbered(item: &Value, i: usize) -> Value {
    match item {
        Value::String(text) => Value::String(text.replace("{i}", &i.to_string())),
        Value::Array(items) => Value::Array(items.iter().map(|v| numbered(v, i)).collect()),
        Value::Object(fields) => Value::Object(fields.iter().map(|(k, v)| (k.clone(), numbered(v, i))).collect()),
        other => other.clone(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    layer: Layer,
    /// The field or annotation the message names.
    field: String,
    /// Part of the message that says what is wrong.
    message: String,
    /// `condition`: the condition type that turns False.
    #[serde(default)]
    condition: Option<String>,
    /// `condition` and `event`: the condition's or event's reason.
    #[serde(default)]
    reason: Option<String>,
}

/// Where the input is stopped, earliest first.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Layer {
    /// The CRD's OpenAPI schema or a CEL rule: 422 Invalid, nothing stored.
    Schema,
    /// The conversion webhook refuses to store what a version's rules forbid: nothing stored.
    Conversion,
    /// A validating admission webhook denies the request: nothing stored.
    Webhook,
    /// Stored; the controller sets a condition to False with the reason.
    Condition,
    /// Stored (a Secret, which has no status); the controller publishes a Warning event.
    Event,
}

#[tokio::test]
async fn every_hostile_manifest_is_refused_at_its_layer_naming_the_field() {
    let cases = corpus();
    assert!(!cases.is_empty(), "no cases in {CORPUS}");
    let mut operator = Operator::start().await;
    let client = operator.client.clone();
    let results: Vec<(String, Result<(), String>)> = futures::stream::iter(cases)
        .map(|(name, case)| {
            let client = client.clone();
            async move {
                let outcome = tokio::time::timeout(SETTLE * 2, run(&client, &name, &case)).await;
                let outcome = outcome.unwrap_or_else(|_| Err("hung: no outcome within two minutes".into()));
                (name, outcome.map_err(|why| format!("{why}\n    (the case: {})", case.about.trim())))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut failures = Vec::new();
    for (name, result) in &results {
        match result {
            Ok(()) => println!("refused as expected: {name}"),
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    assert!(operator.child.try_wait().unwrap().is_none(), "blockwork run exited during the corpus\n{}", operator.logs());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}\n\noperator log:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n"),
        operator.logs()
    );
}

/// Every `*.yaml` of the corpus, by file name.
fn corpus() -> Vec<(String, Case)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let mut case: Case = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: not a corpus case: {e}", path.display()));
            if let Some(grow) = &case.grow {
                let value = grow.value();
                let slot = case.object.pointer_mut(&grow.pointer).unwrap_or_else(|| panic!("{name}: no {} in the manifest", grow.pointer));
                *slot = value;
            }
            if matches!(case.expect.layer, Layer::Condition) {
                assert!(
                    case.expect.condition.is_some() && case.expect.reason.is_some(),
                    "{name}: a condition case names the condition and reason"
                );
            }
            if matches!(case.expect.layer, Layer::Event) {
                assert!(case.expect.reason.is_some(), "{name}: an event case names the reason");
            }
            (name, case)
        })
        .collect()
}

/// One case in a namespace of its own.
async fn run(client: &Client, name: &str, case: &Case) -> Result<(), String> {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let namespace = plane.namespace(&format!("hostile-{name}")).await.unwrap();
    for object in &case.setup {
        apply(client, &namespace, object).await.map_err(|e| format!("setup object refused: {e}"))?;
    }
    let expect = &case.expect;
    let mentions = |text: &str| -> Result<(), String> {
        if text.contains(&expect.field) && text.contains(&expect.message) {
            Ok(())
        } else {
            Err(format!("the message does not name {:?} and say {:?}: {text}", expect.field, expect.message))
        }
    };
    let outcome = apply(client, &namespace, &case.object).await;
    match expect.layer {
        Layer::Schema | Layer::Conversion | Layer::Webhook => {
            let status = match outcome {
                Ok(_) => return Err(format!("admitted; expected a refusal by the {:?} layer", expect.layer)),
                Err(kube::Error::Api(status)) => status,
                Err(other) => return Err(format!("not an API error: {other}")),
            };
            let layer = if status.message.contains("conversion webhook") {
                Layer::Conversion
            } else if status.message.contains("admission webhook") && status.message.contains("denied the request") {
                Layer::Webhook
            } else if status.code == 422 && status.reason == "Invalid" {
                Layer::Schema
            } else if status.message.contains("failed to create typed patch object") {
                // Server-side apply checks the schema's list maps and sets (duplicate keys) while
                // building the typed object, and the API server answers that with a 500, not 422.
                Layer::Schema
            } else {
                return Err(format!("refused by no known layer ({} {}): {}", status.code, status.reason, status.message));
            };
            if layer != expect.layer {
                return Err(format!("refused by the {layer:?} layer, expected {:?}: {}", expect.layer, status.message));
            }
            mentions(&status.message)?;
            if get(client, &namespace, &case.object).await?.is_some() {
                return Err("refused, yet stored".into());
            }
            Ok(())
        }
        Layer::Condition => {
            outcome.map_err(|e| format!("refused, but the case expects a condition: {e}"))?;
            let (type_, reason) = (expect.condition.as_deref().unwrap_or_default(), expect.reason.as_deref().unwrap_or_default());
            let mut last = None;
            let deadline = tokio::time::Instant::now() + SETTLE;
            while tokio::time::Instant::now() < deadline {
                let object = get(client, &namespace, &case.object).await?.ok_or("the object is gone")?;
                let conditions = object.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
                if let Some(found) = conditions.iter().find(|c| c["type"] == type_ && c["status"] == "False" && c["reason"] == reason) {
                    return mentions(found["message"].as_str().unwrap_or_default());
                }
                last = Some(conditions);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(format!("no {type_}=False with reason {reason}; conditions: {last:?}"))
        }
        Layer::Event => {
            outcome.map_err(|e| format!("refused, but the case expects an event: {e}"))?;
            let reason = expect.reason.as_deref().unwrap_or_default();
            let name = case.object["metadata"]["name"].as_str().unwrap_or_default();
            let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
            let mut seen = Vec::new();
            let deadline = tokio::time::Instant::now() + SETTLE;
            while tokio::time::Instant::now() < deadline {
                seen = events
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                    .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
                    .collect();
                if let Some((_, _, note)) = seen.iter().find(|(type_, r, _)| type_ == "Warning" && r == reason) {
                    return mentions(note);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(format!("no Warning event {reason} about {name}; events: {seen:?}"))
        }
    }
}

fn api_for(client: &Client, namespace: &str, resource: &kube::discovery::ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, resource)
}

async fn resource_of(client: &Client, object: &Value) -> Result<kube::discovery::ApiResource, String> {
    let api_version = object["apiVersion"].as_str().ok_or("the manifest has no apiVersion")?;
    let kind = object["kind"].as_str().ok_or("the manifest has no kind")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (resource, _) =
        pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await.map_err(|e| format!("{api_version} {kind}: {e}"))?;
    Ok(resource)
}

/// `kubectl apply --server-side` of `object` in `namespace`.
async fn apply(client: &Client, namespace: &str, object: &Value) -> Result<DynamicObject, kube::Error> {
    let resource = resource_of(client, object).await.unwrap_or_else(|e| panic!("{e}"));
    let name = object["metadata"]["name"].as_str().unwrap_or_else(|| panic!("a manifest without a name: {object}"));
    let params = PatchParams::apply("hostile-corpus").force();
    api_for(client, namespace, &resource).patch(name, &params, &Patch::Apply(object)).await
}

async fn get(client: &Client, namespace: &str, object: &Value) -> Result<Option<DynamicObject>, String> {
    let resource = resource_of(client, object).await?;
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    api_for(client, namespace, &resource).get_opt(name).await.map_err(|e| e.to_string())
}

/// `blockwork run` with every controller, its webhook server on a free port, the CRDs and the
/// admission webhooks registered as `blockwork crds` and `blockwork webhooks` print them.
struct Operator {
    client: Client,
    child: tokio::process::Child,
    dir: tempfile::TempDir,
}

impl Operator {
    async fn start() -> Self {
        let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
        let (moto, ministack) =
            (blockwork_testenv::emulators::moto().await.unwrap(), blockwork_testenv::emulators::ministack().await.unwrap());
        let dir = tempfile::tempdir().unwrap();
        let tls = blockwork_webhook::TlsMaterial::self_signed(&["127.0.0.1"]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), &tls.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &tls.key_pem).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &tls.ca_pem).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("https://127.0.0.1:{port}");
        let ca_file = dir.path().join("ca.crt");
        let location = |command: &str| {
            let output =
                std::process::Command::new(BIN).args([command, "--webhook-url", &url, "--webhook-ca-file"]).arg(&ca_file).output().unwrap();
            assert!(output.status.success(), "blockwork {command}: {}", String::from_utf8_lossy(&output.stderr));
            String::from_utf8(output.stdout).unwrap()
        };
        let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&location("crds")).unwrap();
        plane.install_crds(&crds).await.unwrap();

        let child = tokio::process::Command::new(BIN)
            .args(["run", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"])
            .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
            .arg("--webhook-cert-dir")
            .arg(dir.path())
            .args(["--dns-zones", ZONES, "--aws-region", "us-east-1", "--aws-endpoint-url", &moto.endpoint()])
            .args(["--tenant-aws-endpoint-url", &ministack.endpoint(), "--tenant-route53-endpoint-url", &moto.endpoint()])
            .args(["--tenant-aws-region", "us-east-1"])
            .env("KUBECONFIG", plane.kubeconfig_path())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let operator = Self { client: plane.client(), child, dir };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the webhook server never listened\n{}", operator.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let configuration: ValidatingWebhookConfiguration = serde_saphyr::from_str(&location("webhooks")).unwrap();
        Api::<ValidatingWebhookConfiguration>::all(operator.client.clone())
            .patch("blockwork", &PatchParams::apply("hostile-corpus").force(), &Patch::Apply(&configuration))
            .await
            .unwrap();
        operator.await_admission(plane).await;
        operator
    }

    /// Until the API server calls the admission webhook (its configuration reaches the API
    /// server's informers a moment after it is written) and the webhook has its index of Certs.
    async fn await_admission(&self, plane: &blockwork_testenv::control_plane::ControlPlane) {
        let namespace = plane.namespace("hostile-probe").await.unwrap();
        let probe = serde_json::json!({
            "apiVersion": "acm.blockwork.dev/v1", "kind": "Cert", "metadata": {"name": "probe"},
            "spec": {"serviceName": "probe", "environment": "dev", "domainName": "probe.outside.example.org"}
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match apply(&self.client, &namespace, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("denied the request") => return,
                Ok(admitted) => {
                    let resource = resource_of(&self.client, &probe).await.unwrap();
                    api_for(&self.client, &namespace, &resource).delete(&admitted.name_any(), &Default::default()).await.unwrap();
                }
                Err(_) => {}
            }
            assert!(tokio::time::Instant::now() < deadline, "the admission webhook never answered\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[test]
fn every_case_of_the_corpus_parses_and_names_its_layer() {
    let cases = corpus();
    assert!(cases.len() >= 99, "the corpus has {} cases; it never shrinks below the 99 of issues 18 and 15", cases.len());
    for (name, case) in &cases {
        assert!(!case.expect.field.is_empty() && !case.expect.message.is_empty(), "{name}: the field and the reason are asserted");
        assert!(case.object["metadata"]["name"].is_string(), "{name}: the manifest has a name");
        assert!(!case.about.trim().is_empty(), "{name}: says why the input is hostile");
    }
}
