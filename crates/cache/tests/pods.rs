//! The pods of a Cache against a real kube-apiserver: its own Pod Security admission takes the
//! pod template of every engine and topology in a namespace that enforces the `restricted`
//! standard (no node needed: each template is created as a Pod, dry run).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;

use blockwork_cache::api::{Cache, CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};
use blockwork_cache::build;
use blockwork_cache::settings::{CacheArgs, Settings};
use blockwork_testenv::control_plane::control_plane;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ObjectMeta, PostParams};

fn cache(engine: Engine, replicas: i32) -> Cache {
    let mut cache = Cache::new(
        "c",
        CacheSpec {
            engine,
            memory: "64Mi".into(),
            replicas,
            eviction_policy: EvictionPolicy::AllkeysLru,
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
