//! The pods of a Cache against a real kube-apiserver: its own Pod Security admission takes the
//! pod template of every engine and topology in a namespace that enforces the `restricted`
//! standard (no node needed: each template is created as a Pod, dry run); and when pods cannot
//! start, the Cache says why. No StatefulSet controller or kubelet runs here: what they would
//! write (the refusal event with the API server's own refusal, a pod's waiting reason) is
//! written as they write it; the e2e suite sees the real ones on a node.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;

use blockwork_cache::api::{Cache, CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};
use blockwork_cache::settings::{CacheArgs, Settings};
use blockwork_cache::{build, controller};
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Namespace, ObjectReference, Pod, ResourceQuota};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

fn cache(engine: Engine, replicas: i32) -> Cache {
    let mut cache = Cache::new(
        "c",
        CacheSpec {
            engine,
            memory: "64Mi".into(),
            replicas,
            eviction_policy: EvictionPolicy::AllkeysLru,
            access: None,
            tls: None,
            high_availability: None,
        },
    );
    cache.metadata.uid = Some("0a1b2c3d-0000-4000-8000-000000000000".into());
    cache
}

/// A namespace of the test's own that enforces the restricted Pod Security Standard.
async fn restricted_namespace(prefix: &str) -> String {
    let plane = control_plane().await.unwrap();
    let name = plane.namespace(prefix).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(plane.client());
    let mut namespace = namespaces.get(&name).await.unwrap();
    let labels: BTreeMap<String, String> = [
        ("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned()),
        ("pod-security.kubernetes.io/enforce-version".to_owned(), "latest".to_owned()),
    ]
    .into();
    namespace.metadata.labels.get_or_insert_default().extend(labels);
    namespaces.replace(&name, &PostParams::default(), &namespace).await.unwrap();
    name
}

/// The StatefulSet's pod template of `cache` as a Pod, created (dry run) in `namespace`: the
/// API server's refusal, if any.
async fn admit(namespace: &str, cache: &Cache, settings: &Settings) -> Result<(), String> {
    let mut cache = cache.clone();
    cache.metadata.namespace = Some(namespace.to_owned());
    let template = build::desired(&cache, settings).unwrap().stateful_set.spec.unwrap().template;
    let pod = Pod {
        metadata: ObjectMeta { name: Some("c-cache-0".into()), ..template.metadata.unwrap_or_default() },
        spec: template.spec,
        ..Pod::default()
    };
    let pods: Api<Pod> = Api::namespaced(control_plane().await.unwrap().client(), namespace);
    pods.create(&PostParams { dry_run: true, ..PostParams::default() }, &pod).await.map(drop).map_err(|e| e.to_string())
}

/// Every shape a Cache's pod takes: each engine, standalone and replicated with and without
/// Sentinel, with TLS, with the exporter and with the settings a platform may choose.
fn every_shape() -> Vec<(String, Cache)> {
    let mut shapes = Vec::new();
    for engine in [Engine::Redis, Engine::Valkey, Engine::Memcached] {
        shapes.push((format!("{engine:?} standalone"), cache(engine, 1)));
        let mut tls = cache(engine, 2);
        tls.spec.tls = Some(Tls { enabled: true, secret_name: Some("c-tls".into()) });
        shapes.push((format!("{engine:?} with TLS"), tls.clone()));
        if engine != Engine::Memcached {
            for auto_failover in [false, true] {
                let mut ha = tls.clone();
                ha.spec.replicas = 3;
                ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover });
                shapes.push((format!("{engine:?} replicated, Sentinel {auto_failover}"), ha));
            }
        }
    }
    shapes
}

#[tokio::test]
async fn every_pod_a_cache_runs_passes_the_restricted_pod_security_standard() {
    let namespace = restricted_namespace("cache-restricted").await;
    let exporter_and_more = Settings::from_args(&CacheArgs {
        exporter: true,
        run_as_user: Some(1001),
        image_pull_secrets: vec!["mirror".into()],
        cpu_limit: Some("1".into()),
        ..CacheArgs::default()
    })
    .unwrap();
    for settings in [Settings::default(), exporter_and_more] {
        for (shape, cache) in every_shape() {
            admit(&namespace, &cache, &settings).await.unwrap_or_else(|refusal| panic!("{shape} ({settings:?}) is refused: {refusal}"));
        }
    }
}

#[tokio::test]
async fn a_pod_that_breaks_the_restricted_standard_is_refused_there() {
    // The check above can fail: the same API server refuses a template that escalates.
    let namespace = restricted_namespace("cache-restricted-refused").await;
    let mut cache = cache(Engine::Redis, 1);
    cache.metadata.namespace = Some(namespace.clone());
    let mut template = build::desired(&cache, &Settings::default()).unwrap().stateful_set.spec.unwrap().template;
    let container = &mut template.spec.as_mut().unwrap().containers[0];
    container.security_context.as_mut().unwrap().allow_privilege_escalation = Some(true);
    let pod =
        Pod { metadata: ObjectMeta { name: Some("c-cache-0".into()), ..ObjectMeta::default() }, spec: template.spec, ..Pod::default() };
    let pods: Api<Pod> = Api::namespaced(control_plane().await.unwrap().client(), &namespace);
    let refusal = pods.create(&PostParams { dry_run: true, ..PostParams::default() }, &pod).await.expect_err("refused").to_string();
    assert!(refusal.contains("violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"), "{refusal}");
}

/// The controller running over a namespace of the test's own (v1beta1 only: the conversion
/// webhook is never called; the CRD is the one the other Cache tests install).
async fn controller_in(prefix: &str) -> (TestNamespace<Cache>, ControllerTask) {
    let plane = control_plane().await.unwrap();
    crate::support::install_crd().await;
    let namespace = TestNamespace::new(prefix).await;
    let context = controller::Context::new(plane.client(), Settings::default(), metrics());
    let mut task = ControllerTask::default();
    let api: Api<Cache> = Api::namespaced(plane.client(), &namespace.namespace);
    task.start(controller::run(context, api, Some(namespace.namespace.clone()), 2, std::future::pending()));
    (namespace, task)
}

/// The Cache's Ready condition once its reason is `reason`: (status, message).
async fn ready_because(test: &TestNamespace<Cache>, name: &str, reason: &str) -> (String, String) {
    eventually(&format!("Ready with reason {reason}"), TIMEOUT, async || {
        let cache = test.api().get(name).await.map_err(|e| e.to_string())?;
        let ready = cache.status.iter().flat_map(|s| s.conditions.iter()).find(|c| c.type_ == "Ready").cloned();
        match ready {
            Some(c) if c.reason == reason => Ok((c.status, c.message)),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_pod_a_quota_refuses_is_the_cache_s_reason_and_a_warning() {
    let (test, _controller) = controller_in("cache-quota").await;
    let namespace = test.namespace.clone();
    // A quota the pod does not fit, with the status the quota controller would give it.
    let quotas: Api<ResourceQuota> = test.api_of();
    let quota =
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "small"}, "spec": {"hard": {"requests.memory": "32Mi"}}});
    quotas.create(&PostParams::default(), &serde_json::from_value(quota).unwrap()).await.unwrap();
    let status = json!({"status": {"hard": {"requests.memory": "32Mi"}, "used": {"requests.memory": "0"}}});
    quotas.patch_status("small", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();

    test.create(&cache(Engine::Redis, 1)).await;
    let stateful_set = eventually("the StatefulSet", TIMEOUT, async || {
        test.api_of::<StatefulSet>().get_opt("c-cache").await.map_err(|e| e.to_string())?.ok_or_else(|| "not yet".to_owned())
    })
    .await;
    // What the StatefulSet controller gets when it creates pod 0, and the event it records.
    let refusal =
        admit(&namespace, &test.api().get("c").await.unwrap(), &Settings::default()).await.expect_err("the quota refuses the pod");
    let message = refusal.split_once("ApiError: ").map_or(refusal.as_str(), |(_, m)| m).split(": Forbidden (").next().unwrap().to_owned();
    assert!(message.contains("exceeded quota: small"), "{message}");
    let event = Event {
        metadata: ObjectMeta { name: Some("c-cache.failedcreate".into()), ..ObjectMeta::default() },
        involved_object: ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("StatefulSet".into()),
            name: Some("c-cache".into()),
            namespace: Some(namespace.clone()),
            uid: stateful_set.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some("FailedCreate".into()),
        type_: Some("Warning".into()),
        message: Some(format!("create Pod c-cache-0 in StatefulSet c-cache failed error: {message}")),
        last_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())),
        ..Event::default()
    };
    test.api_of::<Event>().create(&PostParams::default(), &event).await.unwrap();

    let (status, said) = ready_because(&test, "c", "QuotaExceeded").await;
    assert_eq!(status, "False");
    assert!(
        said.starts_with("waiting for the StatefulSet to create pods (0/1): the API server refused to create pod c-cache-0: ")
            && said.contains("exceeded quota: small"),
        "{said}"
    );
    let warnings = test.wait_for_event("c", "QuotaExceeded").await;
    assert!(warnings[0].note.contains("exceeded quota"), "{warnings:?}");
    let last_error = test.api().get("c").await.unwrap().status.unwrap().last_error.expect("lastError");
    assert_eq!(last_error.reason, "QuotaExceeded");
}

#[tokio::test]
async fn an_image_the_node_cannot_pull_is_the_cache_s_reason_until_the_pod_runs() {
    let (test, _controller) = controller_in("cache-pull").await;
    test.create(&cache(Engine::Memcached, 1)).await;
    let stateful_set = eventually("the StatefulSet", TIMEOUT, async || {
        test.api_of::<StatefulSet>().get_opt("c-cache").await.map_err(|e| e.to_string())?.ok_or_else(|| "not yet".to_owned())
    })
    .await;
    // The pod as the StatefulSet controller creates it, then its status as the kubelet writes it.
    let template = stateful_set.spec.unwrap().template;
    let pod = Pod {
        metadata: ObjectMeta { name: Some("c-cache-0".into()), ..template.metadata.unwrap() },
        spec: template.spec,
        ..Pod::default()
    };
    test.api_of::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
    let sts_status = json!({"status": {"replicas": 1, "readyReplicas": 0}});
    test.api_of::<StatefulSet>().patch_status("c-cache", &PatchParams::default(), &Patch::Merge(&sts_status)).await.unwrap();
    let waiting = json!({"status": {"phase": "Pending", "containerStatuses": [{"name": "cache", "image": "memcached:1.6", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"memcached:1.6\": failed to resolve reference"}}}]}});
    test.api_of::<Pod>().patch_status("c-cache-0", &PatchParams::default(), &Patch::Merge(&waiting)).await.unwrap();

    let (_, said) = ready_because(&test, "c", "ImagePullFailed").await;
    assert_eq!(
        said,
        "0/1 replicas ready: pod c-cache-0 cannot pull image memcached:1.6 of container cache (ImagePullBackOff): Back-off pulling image \"memcached:1.6\": failed to resolve reference"
    );
    test.wait_for_event("c", "ImagePullFailed").await;

    // The image arrives and the pod runs: the reason goes with it.
    let running = json!({"status": {"phase": "Running", "containerStatuses": [{"name": "cache", "image": "memcached:1.6", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}});
    test.api_of::<Pod>().patch_status("c-cache-0", &PatchParams::default(), &Patch::Merge(&running)).await.unwrap();
    let ready = json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
    test.api_of::<StatefulSet>().patch_status("c-cache", &PatchParams::default(), &Patch::Merge(&ready)).await.unwrap();
    let (status, _) = ready_because(&test, "c", "AllReplicasAvailable").await;
    assert_eq!(status, "True");
    assert_eq!(test.api().get("c").await.unwrap().status.unwrap().last_error, None);
}

fn metrics() -> std::sync::Arc<blockwork_cache::metrics::CacheMetrics> {
    blockwork_cache::metrics::CacheMetrics::register(&mut prometheus_client::registry::Registry::default())
}
