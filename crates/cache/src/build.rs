//! Pure: the objects a Cache is made of, from its spec and the install-time [`Settings`]. No
//! I/O, unit tested. The files come from [`crate::render`], the pod from [`crate::pod`], the
//! NetworkPolicy from [`crate::access`].

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::api::{Cache, Phase};
use crate::auth::PodAuth;
use crate::settings::Settings;
use crate::shape::{self, InvalidSpec, SENTINEL_PORT};
use crate::{access, pod, render};

/// Everything a Cache is made of. `pdb` is `None` for a single replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub config_map: ConfigMap,
    pub stateful_set: StatefulSet,
    /// What clients connect to.
    pub service: Service,
    /// Stable per-pod DNS names, which replicas and Sentinels use to find the primary, and each
    /// pod's exporter for Prometheus.
    pub headless_service: Service,
    pub pdb: Option<PodDisruptionBudget>,
    /// Who may connect to the pods; `None` when the installation applies no NetworkPolicy.
    pub network_policy: Option<NetworkPolicy>,
}

fn meta(cache: &Cache, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cache.namespace(),
        labels: Some(shape::labels(cache)),
        owner_references: cache.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The phase and its message from the StatefulSet's counts: Pending until it has pods,
/// Provisioning until `wanted` of them are ready.
pub fn phase(wanted: i32, created: i32, ready: i32) -> (Phase, String) {
    if ready >= wanted {
        (Phase::Ready, "all cache replicas are ready".to_owned())
    } else if created == 0 {
        (Phase::Pending, format!("waiting for the StatefulSet to create pods (0/{wanted})"))
    } else {
        (Phase::Provisioning, format!("{ready}/{wanted} replicas ready"))
    }
}

fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort { name: Some(name.into()), port, target_port: Some(IntOrString::String(name.into())), ..ServicePort::default() }
}

/// The client-facing ports: the cache's, and Sentinel's when it runs.
fn client_ports(cache: &Cache) -> Vec<ServicePort> {
    let mut ports = vec![service_port("cache", shape::port(cache.spec.engine))];
    if shape::has_sentinel(cache) {
        ports.push(service_port("sentinel", SENTINEL_PORT));
    }
    ports
}

/// Everything `cache` is made of; `auth` when its servers authenticate their clients.
pub fn desired(cache: &Cache, settings: &Settings, auth: Option<PodAuth<'_>>) -> Result<Desired, InvalidSpec> {
    let name = shape::resource_name(cache);
    let files = render::files(cache, auth.is_some())?;
    // A configuration change rolls the pods.
    let config_hash = {
        let mut hasher = Sha256::new();
        for (file, content) in &files {
            hasher.update(file.as_bytes());
            hasher.update(content.as_bytes());
        }
        hex::encode(&hasher.finalize()[..8])
    };
    let config_map = ConfigMap { metadata: meta(cache, shape::config_map_name(cache)), data: Some(files), ..ConfigMap::default() };
    let stateful_set = StatefulSet {
        metadata: meta(cache, name.clone()),
        spec: Some(StatefulSetSpec {
            replicas: Some(cache.spec.replicas),
            service_name: Some(shape::headless_name(cache)),
            selector: LabelSelector { match_labels: Some(shape::selector(cache)), ..LabelSelector::default() },
            template: pod::template(cache, settings, config_hash, auth),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    };
    let service = Service {
        metadata: meta(cache, name.clone()),
        spec: Some(ServiceSpec { selector: Some(shape::selector(cache)), ports: Some(client_ports(cache)), ..ServiceSpec::default() }),
        ..Service::default()
    };
    let mut headless_ports = client_ports(cache);
    if pod::runs_exporter(cache, settings, auth) {
        // Scraped per pod (the chart's ServiceMonitor), through the headless Service's endpoints.
        headless_ports.push(service_port("metrics", shape::exporter_port(cache.spec.engine)));
    }
    let headless_service = Service {
        metadata: meta(cache, shape::headless_name(cache)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Replicas must resolve the primary before any pod is ready.
            publish_not_ready_addresses: Some(true),
            selector: Some(shape::selector(cache)),
            ports: Some(headless_ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let network_policy = settings.network_policies.as_ref().map(|peers| NetworkPolicy {
        metadata: meta(cache, name.clone()),
        spec: Some(access::spec(cache, peers, settings.exporter, auth.is_some())),
    });
    let pdb = (cache.spec.replicas > 1).then(|| PodDisruptionBudget {
        metadata: meta(cache, name),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(shape::selector(cache)), ..LabelSelector::default() }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    });
    Ok(Desired { config_map, stateful_set, service, headless_service, pdb, network_policy })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Engine, HighAvailability};
    use crate::settings::CacheArgs;
    use blockwork_runtime::labels::{MANAGED_BY, MANAGED_BY_LABEL};

    fn cache(engine: Engine, memory: &str, replicas: i32) -> Cache {
        let mut cache = crate::fixtures::cache(engine);
        cache.spec.memory = memory.into();
        cache.spec.replicas = replicas;
        cache
    }

    fn build(cache: &Cache) -> Desired {
        desired(cache, &Settings::default(), None).expect("builds")
    }

    fn ports(service: &Service) -> Vec<(String, i32)> {
        service.spec.iter().flat_map(|s| s.ports.iter().flatten()).map(|p| (p.name.clone().unwrap_or_default(), p.port)).collect()
    }

    #[test]
    fn disruption_budget_only_with_several_replicas() {
        assert!(build(&cache(Engine::Redis, "64Mi", 1)).pdb.is_none());
        assert!(build(&cache(Engine::Redis, "64Mi", 3)).pdb.is_some());
    }

    #[test]
    fn every_object_is_owned_by_the_cache_and_labelled() {
        let d = build(&cache(Engine::Redis, "64Mi", 2));
        for meta in [&d.config_map.metadata, &d.stateful_set.metadata, &d.service.metadata, &d.pdb.as_ref().expect("pdb").metadata] {
            let owner = &meta.owner_references.as_ref().expect("owner")[0];
            assert_eq!((owner.kind.as_str(), owner.controller), ("Cache", Some(true)));
            assert_eq!(meta.labels.as_ref().expect("labels").get(MANAGED_BY_LABEL).map(String::as_str), Some(MANAGED_BY));
        }
    }

    #[test]
    fn sentinel_gets_its_port_on_both_services() {
        let mut ha = cache(Engine::Valkey, "64Mi", 3);
        ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        let d = build(&ha);
        assert_eq!(ports(&d.service), [("cache".to_owned(), 6379), ("sentinel".to_owned(), SENTINEL_PORT)]);
        let headless = d.headless_service.spec.as_ref().expect("spec");
        assert_eq!((headless.cluster_ip.as_deref(), headless.publish_not_ready_addresses), (Some("None"), Some(true)));
        assert_eq!(d.stateful_set.spec.as_ref().expect("spec").service_name.as_deref(), Some("c-cache-headless"));
    }

    #[test]
    fn the_exporter_is_scraped_through_the_headless_service_only() {
        let settings = Settings::from_args(&CacheArgs { exporter: true, ..CacheArgs::default() }).expect("valid");
        let d = desired(&cache(Engine::Memcached, "64Mi", 1), &settings, None).expect("builds");
        assert_eq!(ports(&d.headless_service), [("cache".to_owned(), 11211), ("metrics".to_owned(), 9150)]);
        assert_eq!(ports(&d.service), [("cache".to_owned(), 11211)]);
    }

    #[test]
    fn a_network_policy_unless_the_installation_turned_them_off() {
        let on = build(&cache(Engine::Redis, "64Mi", 1)).network_policy.expect("on by default");
        assert_eq!(on.metadata.name.as_deref(), Some("c-cache"));
        assert_eq!(on.metadata.owner_references.expect("owned")[0].kind, "Cache");
        let mut args = CacheArgs::default();
        args.network.enabled = false;
        let off = desired(&cache(Engine::Redis, "64Mi", 1), &Settings::from_args(&args).expect("valid"), None).expect("builds");
        assert_eq!(off.network_policy, None);
    }

    #[test]
    fn a_configuration_change_changes_the_pod_template() {
        let hash = |c: &Cache| {
            build(c).stateful_set.spec.expect("spec").template.metadata.expect("meta").annotations.expect("a")[pod::CONFIG_HASH_ANNOTATION]
                .clone()
        };
        assert_ne!(hash(&cache(Engine::Redis, "64Mi", 1)), hash(&cache(Engine::Redis, "128Mi", 1)));
    }

    #[test]
    fn phase_follows_the_statefulset() {
        assert_eq!(phase(3, 0, 0).0, Phase::Pending);
        assert_eq!(phase(3, 3, 1), (Phase::Provisioning, "1/3 replicas ready".to_owned()));
        assert_eq!(phase(3, 3, 3).0, Phase::Ready);
    }
}

/// Caches that served without a password before Blockwork had authentication are built, on
/// upgrade, exactly as the release before built them (docs/adr/0020-cache-authentication.md):
/// a changed pod template or configuration would roll their pods, and a standalone cache loses
/// its data and its clients' connections when it rolls.
#[cfg(test)]
mod open_caches_as_before {
    use super::*;
    use crate::api::{Engine, HighAvailability, Tls};
    use crate::settings::CacheArgs;

    fn fingerprint(desired: &Desired) -> String {
        // The NetworkPolicy is new beside them, and rolls no pod.
        let Desired { config_map, stateful_set, service, headless_service, pdb, network_policy: _ } = desired;
        let objects = serde_json::json!([config_map, stateful_set, service, headless_service, pdb]);
        hex::encode(&Sha256::digest(objects.to_string().as_bytes())[..12])
    }

    fn cache(engine: Engine, replicas: i32) -> Cache {
        let mut cache = crate::fixtures::cache(engine);
        cache.metadata.name = Some("sessions".into());
        cache.metadata.namespace = Some("team-a".into());
        cache.metadata.uid = Some("7d1c1d36-7b76-4a63-9b51-8a3d5c1e2f00".into());
        cache.spec.memory = "256Mi".into();
        cache.spec.replicas = replicas;
        cache
    }

    /// The fingerprints of the objects the release before authentication built (be68d6f).
    #[test]
    fn an_open_cache_is_built_exactly_as_the_release_before_built_it() {
        let exporter = Settings::from_args(&CacheArgs { exporter: true, ..CacheArgs::default() }).expect("valid");
        let mut ha = cache(Engine::Valkey, 3);
        ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        ha.spec.tls = Some(Tls { enabled: true, secret_name: Some("sessions-tls".into()) });
        let mut memcached = cache(Engine::Memcached, 2);
        memcached.spec.tls = Some(Tls { enabled: true, secret_name: Some("sessions-tls".into()) });
        for (what, cache, settings, before) in [
            ("redis", cache(Engine::Redis, 1), Settings::default(), "c26a964f956f4a40399d0bbb"),
            ("valkey, Sentinel, TLS, exporter", ha, exporter.clone(), "36fea4716fb56f98c993b191"),
            ("memcached, TLS, exporter", memcached, exporter, "6745ffe9a220d00981b04107"),
        ] {
            assert_eq!(fingerprint(&desired(&cache, &settings, None).expect("builds")), before, "{what}");
        }
    }
}
