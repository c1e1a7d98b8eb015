//! The Cache operator against a real kube-apiserver, with the conversion webhook served by the
//! test process (`support`). (The rendered files run by real servers: servers.rs.)

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use blockwork_cache::api::{Cache, CacheSpec, Engine, EvictionPolicy, HighAvailability, Phase, Tls, v1alpha1};
use blockwork_cache::controller;
use blockwork_cache::settings::Settings;
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually};
use blockwork_testenv::kube_proxy::{ApiFault, KubeProxy, Requests};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

mod network_policies;

/// A namespace of the test's own with the Cache CRD (its conversion served by this test process) and
/// the controller running in it.
struct Harness {
    test: TestNamespace<Cache>,
    _controller: ControllerTask,
}

impl std::ops::Deref for Harness {
    type Target = TestNamespace<Cache>;

    fn deref(&self) -> &Self::Target {
        &self.test
    }
}

impl Harness {
    async fn start(prefix: &str) -> Self {
        Self::start_with_controller_client(prefix, control_plane().await.unwrap().client()).await
    }

    /// The controller talks to the API server through `controller_client` (a fault proxy, say);
    /// the test through its own.
    async fn start_with_controller_client(prefix: &str, controller_client: Client) -> Self {
        Self::start_with(prefix, controller_client, Settings::default()).await
    }

    /// The controller with `settings`, as set at install.
    async fn start_with_settings(prefix: &str, settings: Settings) -> Self {
        Self::start_with(prefix, control_plane().await.unwrap().client(), settings).await
    }

    async fn start_with(prefix: &str, controller_client: Client, settings: Settings) -> Self {
        crate::support::install_crd().await;
        let namespace = TestNamespace::new(prefix).await;
        let context = controller::Context::new(controller_client.clone(), settings, metrics());
        let api: Api<Cache> = Api::namespaced(controller_client, &namespace.namespace);
        let mut controller = ControllerTask::default();
        controller.start(controller::run(context, api, Some(namespace.namespace.clone()), 2, std::future::pending()));
        Self { test: namespace, _controller: controller }
    }

    async fn eventually<T>(&self, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        eventually(what, TIMEOUT, async || check().await.ok_or_else(|| "not yet".to_owned())).await
    }
}

fn cache(name: &str, engine: Engine, memory: &str, replicas: i32) -> Cache {
    Cache::new(
        name,
        CacheSpec {
            engine,
            memory: memory.into(),
            replicas,
            eviction_policy: EvictionPolicy::AllkeysLru,
            access: None,
            tls: None,
            high_availability: None,
        },
    )
}

#[tokio::test]
async fn creates_its_objects_and_reports_pending_until_pods_exist() {
    let h = Harness::start("cache-create").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "256Mi", 1)).await.unwrap();
    let sts = h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap()).await;
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(1));
    let config = h.eventually("the ConfigMap", async || h.api_of::<ConfigMap>().get_opt("c-cache-config").await.unwrap()).await;
    assert!(config.data.unwrap()["redis.conf"].contains("maxmemory-policy allkeys-lru"));
    h.api_of::<Service>().get("c-cache").await.unwrap();
    let status = h.eventually("status", async || h.api().get("c").await.unwrap().status.filter(|s| s.phase.is_some())).await;
    assert_eq!(status.endpoint.as_deref(), Some(format!("c-cache.{}.svc.cluster.local:6379", h.namespace).as_str()));
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "ReplicasNotReady"));
    assert_eq!(status.phase, Some(Phase::Pending), "no kubelet here: the StatefulSet never has pods");
    assert!(h.api().get("c").await.unwrap().finalizers().contains(&controller::finalizer_name()));
}

#[tokio::test]
async fn ready_when_the_statefulset_reports_ready_replicas() {
    let h = Harness::start("cache-ready").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Memcached, "64Mi", 1)).await.unwrap();
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap()).await;
    // No kubelet here: set the StatefulSet's status as a kubelet would.
    let status = json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
    h.api_of::<StatefulSet>().patch_status("c-cache", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let status = h
        .eventually("Ready", async || {
            h.api().get("c").await.unwrap().status.filter(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .await;
    assert_eq!(status.ready_replicas, 1);
    assert_eq!(status.conditions[0].reason, "AllReplicasAvailable");
}

#[tokio::test]
async fn spec_update_rewrites_the_configuration() {
    let h = Harness::start("cache-update").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "100Mi", 1)).await.unwrap();
    h.eventually("the ConfigMap", async || h.api_of::<ConfigMap>().get_opt("c-cache-config").await.unwrap()).await;
    h.merge("c", json!({"spec": {"memory": "200Mi", "evictionPolicy": "noeviction"}})).await;
    let expected = format!("maxmemory {}\n", (200u64 << 20) / 5 * 4);
    h.eventually("the new configuration", async || {
        let data = h.api_of::<ConfigMap>().get("c-cache-config").await.unwrap().data.unwrap();
        (data["redis.conf"].contains(&expected) && data["redis.conf"].contains("maxmemory-policy noeviction")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn scale_subresource_scales_the_statefulset_and_adds_a_disruption_budget() {
    let h = Harness::start("cache-scale").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Valkey, "64Mi", 1)).await.unwrap();
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap()).await;
    // What `kubectl scale cache c --replicas=3` sends.
    h.api().patch_scale("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.unwrap();
    h.eventually("3 replicas", async || {
        (h.api_of::<StatefulSet>().get("c-cache").await.unwrap().spec.unwrap().replicas == Some(3)).then_some(())
    })
    .await;
    h.eventually("the PodDisruptionBudget", async || h.api_of::<PodDisruptionBudget>().get_opt("c-cache").await.unwrap()).await;
}

#[tokio::test]
async fn drift_in_the_statefulset_is_repaired() {
    let h = Harness::start("cache-drift").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 2)).await.unwrap();
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap()).await;
    h.api_of::<StatefulSet>()
        .patch(
            "c-cache",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": 7}})),
        )
        .await
        .unwrap();
    h.eventually("the repair", async || {
        (h.api_of::<StatefulSet>().get("c-cache").await.unwrap().spec.unwrap().replicas == Some(2)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deletion_removes_the_children_and_the_object() {
    let h = Harness::start("cache-delete").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 2)).await.unwrap();
    h.eventually("the PodDisruptionBudget", async || h.api_of::<PodDisruptionBudget>().get_opt("c-cache").await.unwrap()).await;
    h.delete_and_wait("c").await;
    assert!(h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap().is_none());
    assert!(h.api_of::<Service>().get_opt("c-cache").await.unwrap().is_none());
    assert!(h.api_of::<ConfigMap>().get_opt("c-cache-config").await.unwrap().is_none());
    assert!(h.api_of::<PodDisruptionBudget>().get_opt("c-cache").await.unwrap().is_none());
}

#[tokio::test]
async fn v1alpha1_objects_read_back_as_v1beta1() {
    let h = Harness::start("cache-alpha").await;
    let alpha: Api<v1alpha1::Cache> = h.api_of();
    let spec = v1alpha1::CacheSpec {
        engine: Engine::Memcached,
        memory: "64Mi".into(),
        replicas: 2,
        eviction_policy: EvictionPolicy::Noeviction,
        access: None,
        tls: None,
    };
    alpha.create(&PostParams::default(), &v1alpha1::Cache::new("old", spec)).await.unwrap();
    let beta = h.api().get("old").await.unwrap();
    assert_eq!((beta.spec.engine, beta.spec.replicas, beta.spec.high_availability.clone()), (Engine::Memcached, 2, None));
}

#[tokio::test]
async fn v1beta1_objects_read_as_v1alpha1_and_back_keep_high_availability() {
    let h = Harness::start("cache-beta").await;
    let mut c = cache("ha", Engine::Redis, "64Mi", 3);
    c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: false });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let alpha: Api<v1alpha1::Cache> = h.api_of();
    let old = alpha.get("ha").await.unwrap();
    assert_eq!(old.spec.replicas, 3);
    assert!(old.annotations().contains_key(blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION));
    // Writing through the old version keeps what only the new one can express.
    alpha.patch("ha", &PatchParams::default(), &Patch::Merge(json!({"spec": {"memory": "128Mi"}}))).await.unwrap();
    let back = h.api().get("ha").await.unwrap();
    assert_eq!(back.spec.memory, "128Mi");
    assert_eq!(back.spec.high_availability, Some(HighAvailability { enabled: true, auto_failover: false }));
}

#[tokio::test]
async fn schema_and_cel_reject_invalid_specs_with_their_messages() {
    let h = Harness::start("cache-invalid").await;
    let secret_without_tls =
        rejection(&h, "bad", json!({"engine": "redis", "memory": "64Mi", "tls": {"enabled": false, "secretName": "s"}})).await;
    assert!(secret_without_tls.contains("tls.secretName requires tls.enabled to be true"), "{secret_without_tls}");
    let small_ha =
        rejection(&h, "bad", json!({"engine": "redis", "memory": "64Mi", "replicas": 2, "highAvailability": {"enabled": true}})).await;
    assert!(small_ha.contains("highAvailability.enabled needs at least 3 replicas"), "{small_ha}");
    let memcached_ha =
        rejection(&h, "bad", json!({"engine": "memcached", "memory": "64Mi", "replicas": 3, "highAvailability": {"enabled": true}})).await;
    assert!(memcached_ha.contains("memcached does not replicate"), "{memcached_ha}");
    let memcached_ttl = rejection(&h, "bad", json!({"engine": "memcached", "memory": "64Mi", "evictionPolicy": "volatile-lru"})).await;
    assert!(memcached_ttl.contains("memcached cannot evict only keys with a TTL"), "{memcached_ttl}");
    let memory = rejection(&h, "bad", json!({"engine": "redis", "memory": "1G"})).await;
    assert!(memory.contains("spec.memory") && memory.contains("should match"), "{memory}");
    let replicas = rejection(&h, "bad", json!({"engine": "redis", "memory": "64Mi", "replicas": 11})).await;
    assert!(replicas.contains("spec.replicas") && replicas.contains("less than or equal to 10"), "{replicas}");
    let engine = rejection(&h, "bad", json!({"engine": "mongodb", "memory": "64Mi"})).await;
    assert!(engine.contains("spec.engine") && engine.contains("Unsupported value"), "{engine}");
}

async fn rejection(h: &Harness, name: &str, spec: serde_json::Value) -> String {
    let object = json!({"apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache", "metadata": {"name": name}, "spec": spec});
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(h.client.clone(), &h.namespace, &kube::api::ApiResource::erase::<Cache>(&()));
    match api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await {
        Ok(_) => panic!("the API server accepted {name}: {spec}"),
        Err(kube::Error::Api(status)) => status.message.clone(),
        Err(other) => panic!("{other}"),
    }
}

#[tokio::test]
async fn memory_outside_64mi_to_1024gi_is_rejected_naming_the_field() {
    let h = Harness::start("cache-memory-range").await;
    for memory in ["0Mi", "63Mi", "0Gi", "1025Gi", "1048577Mi"] {
        let message = rejection(&h, "bad", json!({"engine": "redis", "memory": memory})).await;
        assert!(message.contains("spec.memory") && message.contains("memory must be from 64Mi to 1024Gi"), "{memory}: {message}");
    }
    let long = rejection(&h, "bad", json!({"engine": "redis", "memory": "99999999999Gi"})).await;
    assert!(long.contains("spec.memory") && long.contains("may not be more than 10"), "{long}");
    for memory in ["64Mi", "1024Gi"] {
        let c = cache(&format!("edge-{}", memory.to_lowercase()), Engine::Memcached, memory, 1);
        h.api().create(&PostParams::default(), &c).await.unwrap_or_else(|e| panic!("{memory} is in range: {e}"));
    }
}

#[tokio::test]
async fn tls_without_a_usable_secret_name_is_rejected() {
    let h = Harness::start("cache-tls-name").await;
    let no_name = rejection(&h, "bad", json!({"engine": "redis", "memory": "64Mi", "tls": {"enabled": true}})).await;
    assert!(no_name.contains("spec.tls") && no_name.contains("tls.enabled requires tls.secretName"), "{no_name}");
    for bad in ["", "Upper", "under_score", "-leading", "a..b"] {
        let message = rejection(&h, "bad", json!({"engine": "redis", "memory": "64Mi", "tls": {"enabled": true, "secretName": bad}})).await;
        assert!(message.contains("spec.tls.secretName"), "{bad:?}: {message}");
    }
}

#[tokio::test]
async fn names_that_cannot_name_the_derived_objects_are_rejected() {
    let h = Harness::start("cache-names").await;
    let spec = json!({"engine": "redis", "memory": "64Mi"});
    for name in ["a.b", "1cache", &"a".repeat(47)] {
        let message = rejection(&h, name, spec.clone()).await;
        assert!(message.contains("metadata.name must be a DNS-1035 label of at most 46 characters"), "{name}: {message}");
    }
    let longest = "a".repeat(46);
    h.api().create(&PostParams::default(), &cache(&longest, Engine::Redis, "64Mi", 1)).await.unwrap();
    let service = h
        .eventually("the headless Service", async || h.api_of::<Service>().get_opt(&format!("{longest}-cache-headless")).await.unwrap())
        .await;
    assert_eq!(service.name_any().len(), 61);
}

#[tokio::test]
async fn high_availability_through_the_v1alpha1_annotation_must_hold_the_v1beta1_rules() {
    let h = Harness::start("cache-alpha-ha").await;
    let alpha: Api<v1alpha1::Cache> = h.api_of();
    let smuggle = |name: &str, engine: Engine, replicas: i32, annotation: &str| {
        let mut old = v1alpha1::Cache::new(
            name,
            v1alpha1::CacheSpec {
                engine,
                memory: "64Mi".into(),
                replicas,
                eviction_policy: EvictionPolicy::AllkeysLru,
                access: None,
                tls: None,
            },
        );
        old.metadata.annotations = Some([(blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION.to_owned(), annotation.to_owned())].into());
        old
    };
    for (name, engine, replicas, expected) in
        [("memcached", Engine::Memcached, 3, "memcached does not replicate"), ("two", Engine::Redis, 2, "at least 3 replicas")]
    {
        let message = match alpha.create(&PostParams::default(), &smuggle(name, engine, replicas, r#"{"enabled":true}"#)).await {
            Ok(_) => panic!("{name}: stored a v1beta1 object that v1beta1 forbids"),
            Err(kube::Error::Api(status)) => status.message,
            Err(other) => panic!("{other}"),
        };
        assert!(message.contains(expected) && message.contains(blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION), "{name}: {message}");
        assert!(h.api().get_opt(name).await.unwrap().is_none());
    }
    // What v1beta1 allows still round-trips.
    alpha.create(&PostParams::default(), &smuggle("three", Engine::Valkey, 3, r#"{"enabled":true}"#)).await.unwrap();
    let stored = h.api().get("three").await.unwrap();
    assert_eq!(stored.spec.high_availability, Some(HighAvailability { enabled: true, auto_failover: true }));
    assert!(!stored.annotations().contains_key(blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION));
    // And a write through v1alpha1 that breaks a v1beta1 rule of the stored object is refused.
    let scale_down = alpha.patch("three", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await;
    assert!(matches!(&scale_down, Err(kube::Error::Api(s)) if s.message.contains("at least 3 replicas")), "{scale_down:?}");
}

fn condition(cache: &Cache, type_: &str) -> Option<(String, String, String)> {
    let found = cache.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((found.status.clone(), found.reason.clone(), found.message.clone()))
}

async fn warnings(h: &Harness, name: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = h.api_of();
    let list = events.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn explain_names_the_missing_tls_secret_the_cache_waits_for_and_its_objects() {
    use blockwork_inspect::read::{self, KindArg};
    use blockwork_inspect::render::{self, Explanation};
    let h = Harness::start("cache-explain").await;
    let mut c = cache("sessions", Engine::Redis, "64Mi", 2);
    c.spec.tls = Some(Tls { enabled: true, secret_name: Some("sessions-tls".into()) });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    h.eventually("ResolvedRefs=False", async || {
        condition(&h.api().get("sessions").await.unwrap(), "ResolvedRefs").filter(|c| c.0 == "False")
    })
    .await;
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("sessions-cache").await.unwrap()).await;

    let now = jiff::Timestamp::now();
    let report = read::report(&h.client, &h.namespace, KindArg::Cache, "sessions", &read::default_keys(), now).await.unwrap();
    let explanation = Explanation::of(report, now);
    let text = render::explain(&explanation, now);
    eprintln!("{text}");
    let first = &explanation.diagnosis.hints[0];
    assert_eq!(first.reason, "TLSSecretNotFound", "{:?}", explanation.diagnosis.hints);
    assert!(first.fix.contains("Create it"), "{first:?}");
    assert!(text.contains("TLS Secret        sessions-tls  [NOT OK] does not exist (read now)"), "{text}");
    assert!(text.contains("StatefulSet/sessions-cache  0/2 ready, 0 created"), "{text}");
    assert!(text.contains("Service/sessions-cache-headless  headless"), "{text}");
    assert!(text.contains("replicas              0 ready of 2"), "{text}");
    assert!(text.contains("The StatefulSet has no pods"), "no kubelet here: {text}");
}

#[tokio::test]
async fn status_and_explain_show_the_class_and_the_next_retry_of_what_a_cache_waits_for() {
    use blockwork_inspect::read::{self, KindArg};
    use blockwork_inspect::render::{self, Explanation, Row};
    let h = Harness::start("cache-last-error").await;
    let mut c = cache("orders", Engine::Redis, "64Mi", 1);
    c.spec.tls = Some(Tls { enabled: true, secret_name: Some("orders-tls".into()) });
    let before = jiff::Timestamp::now();
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let error = h.eventually("status.lastError", async || h.api().get("orders").await.unwrap().status?.last_error).await;
    assert_eq!((format!("{:?}", error.class), error.reason.as_str()), ("NotFound".to_owned(), "TLSSecretNotFound"));
    let wait = error.retry_at.0.duration_since(before).as_secs();
    // The status keeps whole seconds.
    assert!((299..=330).contains(&wait), "retried at the latest on the 5-minute resync: {wait} s");

    let now = jiff::Timestamp::now();
    let report = read::report(&h.client, &h.namespace, KindArg::Cache, "orders", &read::default_keys(), now).await.unwrap();
    let table = render::table(&[Row::of(&report, now)], now);
    eprintln!("{table}");
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(row.contains("TLSSecretNotFound") && (row.contains(" in 4m") || row.contains(" in 5m")), "next retry in the table: {row}");
    let text = render::explain(&Explanation::of(report, now), now);
    eprintln!("{text}");
    assert!(text.contains("  class     NotFound"), "{text}");
    assert!(text.contains("  retry     in 4m") || text.contains("  retry     in 5m"), "{text}");

    // The Secret appears: nothing waits any more, and the record goes.
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta { name: Some("orders-tls".into()), ..Default::default() },
        data: Some(["tls.crt", "tls.key"].iter().map(|k| ((*k).to_owned(), ByteString(b"pem".to_vec()))).collect()),
        ..Default::default()
    };
    h.api_of::<k8s_openapi::api::core::v1::Secret>().create(&PostParams::default(), &secret).await.unwrap();
    h.eventually("no lastError", async || h.api().get("orders").await.unwrap().status.filter(|s| s.last_error.is_none())).await;
}

#[tokio::test]
async fn a_missing_tls_secret_is_a_condition_that_clears_when_the_secret_appears() {
    let h = Harness::start("cache-tls-secret").await;
    let mut c = cache("c", Engine::Redis, "64Mi", 1);
    c.spec.tls = Some(Tls { enabled: true, secret_name: Some("c-tls".into()) });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let (status, reason, message) = h
        .eventually("ResolvedRefs=False", async || condition(&h.api().get("c").await.unwrap(), "ResolvedRefs").filter(|c| c.0 == "False"))
        .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "TLSSecretNotFound"));
    assert!(message.contains("c-tls"), "{message}");
    let ready = condition(&h.api().get("c").await.unwrap(), "Ready").unwrap();
    assert_eq!(ready.1, "TLSSecretNotFound", "Ready says why the replicas do not start: {ready:?}");
    h.eventually("a Warning event", async || (!warnings(&h, "c", "TLSSecretNotFound").await.is_empty()).then_some(())).await;

    // A Secret without its key is named for what it lacks.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = h.api_of();
    let secret = |keys: &[&str]| k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta { name: Some("c-tls".into()), ..Default::default() },
        data: Some(keys.iter().map(|k| ((*k).to_owned(), ByteString(b"pem".to_vec()))).collect()),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret(&["tls.crt"])).await.unwrap();
    h.eventually("TLSSecretIncomplete", async || {
        condition(&h.api().get("c").await.unwrap(), "ResolvedRefs").filter(|c| c.1 == "TLSSecretIncomplete" && c.2.contains("tls.key"))
    })
    .await;
    // The Secret is watched: completing it clears the condition without touching the Cache.
    secrets.replace("c-tls", &PostParams::default(), &secret(&["tls.crt", "tls.key"])).await.unwrap();
    let resolved = h
        .eventually("ResolvedRefs=True", async || condition(&h.api().get("c").await.unwrap(), "ResolvedRefs").filter(|c| c.0 == "True"))
        .await;
    assert_eq!(resolved.1, "ResolvedRefs");
    assert_eq!(condition(&h.api().get("c").await.unwrap(), "Ready").unwrap().1, "ReplicasNotReady");
}

/// A ValidatingAdmissionPolicy that refuses every Service in the harness's namespace, until
/// dropped.
struct NoServices {
    client: Client,
    name: String,
}

impl NoServices {
    async fn install(h: &Harness) -> Self {
        use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
        let name = format!("no-services-{}", h.namespace);
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["services"]}]},
                "validations": [{"expression": "false", "message": "Services are not allowed in this namespace"}]
            }
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": h.namespace}}}}
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(h.client.clone()).create(&PostParams::default(), &policy).await.unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(h.client.clone()).create(&PostParams::default(), &binding).await.unwrap();
        // The policy takes effect once the API server's informers have it.
        let probe: Service = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": {"ports": [{"port": 80}]}})).unwrap();
        h.eventually("the policy to refuse Services", async || match h.api_of::<Service>().create(&PostParams::default(), &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("denied request") => Some(()),
            Ok(_) => {
                h.api_of::<Service>().delete("probe", &DeleteParams::default()).await.unwrap();
                None
            }
            Err(other) => panic!("{other}"),
        })
        .await;
        Self { client: h.client.clone(), name }
    }

    async fn remove(self, h: &Harness) {
        use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone()).delete(&self.name, &DeleteParams::default()).await.unwrap();
        Api::<ValidatingAdmissionPolicy>::all(self.client.clone()).delete(&self.name, &DeleteParams::default()).await.unwrap();
        let probe: Service = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": {"ports": [{"port": 80}]}})).unwrap();
        h.eventually("the policy to be gone", async || h.api_of::<Service>().create(&PostParams::default(), &probe).await.ok()).await;
    }
}

#[tokio::test]
async fn an_owned_object_the_api_server_refuses_is_a_condition_and_a_warning_event() {
    let h = Harness::start("cache-apply-fails").await;
    let policy = NoServices::install(&h).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    let (status, reason, message) =
        h.eventually("Synced=False", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "False")).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
    assert!(message.contains("applying Service c-cache") && message.contains("Services are not allowed"), "{message}");
    let notes = h.eventually("a Warning event", async || Some(warnings(&h, "c", "ApplyFailed").await).filter(|n| !n.is_empty())).await;
    assert!(notes[0].contains("Service c-cache"), "{notes:?}");

    policy.remove(&h).await;
    // A refusal is retried when the Cache changes.
    h.merge("c", json!({"spec": {"memory": "128Mi"}})).await;
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;
    h.api_of::<Service>().get("c-cache").await.unwrap();
}

/// Found by the reliability campaign's API server suite (issue 15): a 500 from the API server
/// while applying a child was written to the status as `Synced=False`, and back as `Synced=True`
/// when the retry succeeded, so every passing fault rewrote the Cache twice.
#[tokio::test]
async fn a_passing_api_server_error_while_applying_is_retried_without_touching_the_status() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let h = Harness::start_with_controller_client("cache-api-500", proxy.client().await.unwrap()).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;

    let writes = proxy.writes().len();
    proxy.inject(Requests::Writes, ApiFault::ServerError(500), 1);
    // A change the controller repairs with a write to a child (and nothing in the Cache's status).
    let touched = h.api().get("c").await.unwrap();
    let drift = json!({"data": {"redis.conf": "# drifted"}});
    h.api_of::<ConfigMap>().patch("c-cache-config", &PatchParams::default(), &Patch::Merge(drift)).await.unwrap();
    // The retry comes after the error backoff (10 s): wait for the write that follows the fault.
    eventually("a retry after the injected 500", Duration::from_secs(90), async || {
        let since = proxy.writes()[writes..].to_vec();
        match since.iter().position(|w| w.status == 500 && !w.forwarded) {
            Some(fault) if since[fault + 1..].iter().any(|w| w.forwarded) => Ok(()),
            _ => Err(format!("{since:?}")),
        }
    })
    .await;
    let after = h.api().get("c").await.unwrap();
    assert_eq!(condition(&after, "Synced").map(|c| c.0), Some("True".to_owned()));
    assert_eq!(after.resource_version(), touched.resource_version(), "the Cache was rewritten: {:?}", after.status);
    assert!(warnings(&h, "c", "ApplyFailed").await.is_empty(), "a passing fault is not a warning");
}

/// Found by the reliability campaign's API server suite (issue 15, seed 3895827964306208364): a
/// `410 Gone` (an expired resourceVersion, which a fresh read cures) while reading a child was
/// taken for a refusal and written as `Synced=False ApplyFailed`, and back on the retry.
#[tokio::test]
async fn a_gone_answer_while_applying_is_retried_without_touching_the_status() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let h = Harness::start_with_controller_client("cache-api-410", proxy.client().await.unwrap()).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;

    let reads = || proxy.counts().get("read").copied().unwrap_or(0);
    // Counted from before the change: the reconcile it starts reads the ConfigMap first, which
    // is the 410. (Counted from when the test saw the 410, a retry under way by then was missed.)
    let before = reads();
    proxy.inject_on_path(Requests::Reads, "/configmaps/c-cache-config", ApiFault::Gone, 1);
    let touched = h.merge("c", json!({"metadata": {"labels": {"touched": "yes"}}})).await;
    // The retry comes after the error backoff (10 s): wait until the ConfigMap is read again.
    let injected = async || if proxy.injected().contains_key("Gone") { Ok(()) } else { Err("the ConfigMap was not read".to_owned()) };
    eventually("the 410", Duration::from_secs(90), injected).await;
    let after_fault = before + 1;
    // The retry reads the four owned objects (the ConfigMap, the two Services, the StatefulSet).
    let retried = async || if reads() >= after_fault + 4 { Ok(()) } else { Err(format!("{} reads since the 410", reads() - after_fault)) };
    eventually("a retry after the 410", Duration::from_secs(90), retried).await;
    let after = h.api().get("c").await.unwrap();
    assert_eq!(condition(&after, "Synced").map(|c| c.0), Some("True".to_owned()));
    assert_eq!(after.resource_version(), touched.resource_version(), "the Cache was rewritten: {:?}", after.status);
}

/// Found by the reliability campaign's API server suite (issue 15, seed 5353439065185244773): a
/// single-replica Cache deleted its disruption budget, which it does not have, on every
/// reconcile: a write request while nothing changed, which a passing fault then made an error.
#[tokio::test]
async fn a_single_replica_cache_deletes_a_disruption_budget_only_when_it_has_one() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let h = Harness::start_with_controller_client("cache-budget-delete", proxy.client().await.unwrap()).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;

    let writes = proxy.writes().len();
    let reads = || proxy.counts().get("read").copied().unwrap_or(0);
    let before = reads();
    h.merge("c", json!({"metadata": {"labels": {"touched": "yes"}}})).await;
    // A reconcile reads the four owned objects (the ConfigMap, the two Services, the StatefulSet).
    let reconciled = async || if reads() >= before + 4 { Ok(()) } else { Err(format!("{} reads since the change", reads() - before)) };
    eventually("a reconcile of the changed Cache", Duration::from_secs(90), reconciled).await;
    let deletes: Vec<_> = proxy.writes()[writes..].iter().filter(|w| w.method == "DELETE").cloned().collect();
    assert!(deletes.is_empty(), "deleted while nothing changed: {deletes:?}");

    // Scaled up it gets a budget; scaled down again the budget goes.
    h.api().patch_scale("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.unwrap();
    h.eventually("the PodDisruptionBudget", async || h.api_of::<PodDisruptionBudget>().get_opt("c-cache").await.unwrap()).await;
    h.api().patch_scale("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    h.eventually("no PodDisruptionBudget", async || {
        h.api_of::<PodDisruptionBudget>().get_opt("c-cache").await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Found by the reliability campaign's API server suite (issue 15, seed 6191853475873919598):
/// kube-runtime's `Controller` backs off all its watches together, so while one watch kept
/// failing the others were not read, and changed Caches went unseen for minutes. Here only the
/// PodDisruptionBudget watch fails (as when its RBAC rule is missing): after six failures the
/// shared backoff would wait at least 25.6 s; the Cache's change must be seen well before.
#[tokio::test]
async fn a_failing_watch_of_one_kind_does_not_hold_back_the_changes_of_the_caches() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let h = Harness::start_with_controller_client("cache-one-watch-failing", proxy.client().await.unwrap()).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;

    proxy.inject_on_path(Requests::Watches, "/poddisruptionbudgets", ApiFault::ServerError(500), usize::MAX);
    proxy.cut_watches();
    let failed = || proxy.injected().get("ServerError(500)").copied().unwrap_or(0);
    let retried =
        async || if failed() >= 6 { Ok(()) } else { Err(format!("the PodDisruptionBudget watch was retried {} times", failed())) };
    eventually("six failed watches of PodDisruptionBudgets", Duration::from_secs(120), retried).await;

    h.merge("c", json!({"spec": {"memory": "128Mi"}})).await;
    h.eventually("the new generation observed", async || {
        h.api().get("c").await.unwrap().status.filter(|s| s.observed_generation == Some(2))
    })
    .await;
}

/// A replicated Cache with Sentinel whose Sentinels cannot be reached (here: no node, so no pod
/// DNS name resolves) is reconciled as ever; the status says the primary is unknown, and why.
#[tokio::test]
async fn an_unreachable_sentinel_is_a_condition_not_a_failed_reconcile() {
    let h = Harness::start("cache-sentinel-unreachable").await;
    let mut c = cache("ha", Engine::Redis, "64Mi", 3);
    c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let (_, reason, _) = h
        .eventually("PrimaryKnown=False", async || condition(&h.api().get("ha").await.unwrap(), "PrimaryKnown").filter(|c| c.0 == "False"))
        .await;
    assert_eq!(reason, "NoSentinelReady", "no pod is ready yet");

    // No kubelet here: the test says the pods are ready, as the StatefulSet controller would.
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("ha-cache").await.unwrap()).await;
    let ready = json!({"status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3}});
    h.api_of::<StatefulSet>().patch_status("ha-cache", &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    let (_, _, message) = h
        .eventually("SentinelUnreachable", async || {
            condition(&h.api().get("ha").await.unwrap(), "PrimaryKnown").filter(|c| c.1 == "SentinelUnreachable")
        })
        .await;
    assert!(message.contains(&format!("ha-cache-0.ha-cache-headless.{}.svc.cluster.local", h.namespace)), "{message}");
    let cache = h.api().get("ha").await.unwrap();
    assert_eq!(condition(&cache, "Synced").map(|c| c.0), Some("True".to_owned()), "the reconcile itself succeeded");
    assert_eq!(cache.status.as_ref().and_then(|s| s.phase), Some(Phase::Ready));
    assert_eq!(cache.status.as_ref().and_then(|s| s.primary.clone()), None, "no primary was ever known");
}

/// Found by the reliability campaign's API server suite (issue 15, seed 3895827964306208364): a
/// relist after a `410 Gone` is answered from the API server's watch cache, which may lag, and
/// the controller wrote the status of the older copy it reconciled back over the current one.
#[tokio::test]
async fn an_older_copy_of_a_cache_from_the_watch_is_not_written_back() {
    let h = Harness::start("cache-older-copy").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    h.eventually("Synced=True", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "True")).await;
    let settled = h.api().get("c").await.unwrap();

    // The copy a watch delivered before the first status write; reconciled in a later second than
    // the status was written (conditions' times have whole seconds), so writing it back shows.
    let mut older = settled.clone();
    older.status = None;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    controller::reconcile(std::sync::Arc::new(older), controller::Context::new(h.client.clone(), Settings::default(), metrics()))
        .await
        .unwrap();
    let after = h.api().get("c").await.unwrap();
    assert_eq!(after.resource_version(), settled.resource_version(), "written back: {:?}", after.status);
}

#[tokio::test]
async fn a_paused_cache_is_left_alone_and_an_invalid_pause_value_holds_it_with_a_warning() {
    let h = Harness::start("cache-paused").await;
    let mut c = cache("c", Engine::Redis, "64Mi", 1);
    c.metadata.annotations = Some([("blockwork.dev/paused".to_owned(), "yes".to_owned())].into());
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let (_, reason, message) =
        h.eventually("Synced=False", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.0 == "False")).await;
    assert_eq!(reason, "InvalidAnnotation");
    assert!(message.contains("blockwork.dev/paused") && message.contains("true or false"), "{message}");
    h.eventually("a Warning event", async || (!warnings(&h, "c", "InvalidAnnotation").await.is_empty()).then_some(())).await;
    assert!(h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap().is_none(), "held: nothing applied");

    h.annotate("c", "blockwork.dev/paused", Some("TRUE")).await;
    h.eventually("ReconcilePaused", async || condition(&h.api().get("c").await.unwrap(), "Synced").filter(|c| c.1 == "ReconcilePaused"))
        .await;
    assert!(h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap().is_none());
    h.annotate("c", "blockwork.dev/paused", Some("false")).await;
    h.eventually("the StatefulSet", async || h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap()).await;
}

#[tokio::test]
async fn defaults_are_applied_by_the_api_server() {
    let h = Harness::start("cache-defaults").await;
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(h.client.clone(), &h.namespace, &kube::api::ApiResource::erase::<Cache>(&()));
    let object = json!({"apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache", "metadata": {"name": "d"},
                        "spec": {"engine": "redis", "memory": "64Mi", "tls": {}, "highAvailability": {"enabled": false}}});
    api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    let created = h.api().get("d").await.unwrap();
    assert_eq!((created.spec.replicas, created.spec.eviction_policy), (1, EvictionPolicy::AllkeysLru));
    assert_eq!(created.spec.tls, Some(Tls { enabled: false, secret_name: None }));
    assert!(created.spec.high_availability.unwrap().auto_failover);
}

fn metrics() -> std::sync::Arc<blockwork_cache::metrics::CacheMetrics> {
    blockwork_cache::metrics::CacheMetrics::register(&mut prometheus_client::registry::Registry::default())
}
