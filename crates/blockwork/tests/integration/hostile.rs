#![allow(clippy::unwrap_used, clippy::panic)]
//! The hostile-input corpus (`tests/hostile/*.yaml`, see its README): every manifest there is
//! applied, as a user would with `kubectl apply --server-side`, to a real kube-apiserver with
//! Blockwork's CRDs, its conversion and admission webhooks and every controller running (`blockwork
//! run` against moto and MiniStack), and must be refused at the layer the case names — schema or
//! CEL, conversion, admission webhook, a status condition or a Warning event — with the field and
//! the reason in the message. At the end the operator must still be running: no input crashed it.
//! A control plane of its own (`control_plane::of`): the webhook registration is cluster-wide.

use std::path::{Path, PathBuf};
use std::time::Duration;

use blockwork_testenv::operator::Operator;
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
    let operator = start_operator().await;
    let client = blockwork_testenv::control_plane::of("hostile").await.unwrap().client();
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
    operator.check_running().unwrap_or_else(|e| panic!("blockwork run exited during the corpus: {e}"));
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
    let plane = blockwork_testenv::control_plane::of("hostile").await.unwrap();
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
async fn start_operator() -> Operator {
    let plane = blockwork_testenv::control_plane::of("hostile").await.unwrap();
    let (moto, ministack) = (blockwork_testenv::emulators::moto().await.unwrap(), blockwork_testenv::emulators::ministack().await.unwrap());
    let operator = Operator::new(Path::new(BIN), plane.kubeconfig_path()).unwrap();
    let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&operator.manifests("crds", &[]).unwrap()).unwrap();
    plane.install_crds(&crds).await.unwrap();
    let mut operator = operator
        .args(["--dns-zones", ZONES, "--aws-region", "us-east-1", "--aws-endpoint-url", &moto.endpoint()])
        .args(["--tenant-aws-endpoint-url", &ministack.endpoint(), "--tenant-route53-endpoint-url", &moto.endpoint()])
        .args(["--tenant-aws-region", "us-east-1"])
        .start()
        .unwrap();
    operator.wait_listening(Duration::from_secs(60)).await.unwrap();
    let configuration: ValidatingWebhookConfiguration = serde_saphyr::from_str(&operator.manifests("webhooks", &[]).unwrap()).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(plane.client())
        .patch("blockwork", &PatchParams::apply("hostile-corpus").force(), &Patch::Apply(&configuration))
        .await
        .unwrap();
    await_admission(&plane.client(), &operator).await;
    operator
}

/// Until the API server calls the admission webhook (its configuration reaches the API server's
/// informers a moment after it is written) and the webhook has its index of Certs.
async fn await_admission(client: &Client, operator: &Operator) {
    let plane = blockwork_testenv::control_plane::of("hostile").await.unwrap();
    let namespace = plane.namespace("hostile-probe").await.unwrap();
    let probe = serde_json::json!({
        "apiVersion": "acm.blockwork.dev/v1", "kind": "Cert", "metadata": {"name": "probe"},
        "spec": {"serviceName": "probe", "environment": "dev", "domainName": "probe.outside.example.org"}
    });
    operator
        .eventually("the admission webhook to answer", Duration::from_secs(60), async || match apply(client, &namespace, &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("denied the request") => Ok(()),
            Ok(admitted) => {
                let resource = resource_of(client, &probe).await?;
                api_for(client, &namespace, &resource)
                    .delete(&admitted.name_any(), &Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                Err("admitted".to_owned())
            }
            Err(other) => Err(other.to_string()),
        })
        .await;
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
