//! Pure: the objects a Cache is made of, from its spec. No I/O, unit tested.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec,
    PodTemplateSpec, ResourceRequirements, SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use blockwork_runtime::labels::{MANAGED_BY, MANAGED_BY_LABEL};

use crate::api::{Cache, Engine, EvictionPolicy, Phase};

const CONFIG_DIR: &str = "/etc/blockwork-cache";
const TLS_DIR: &str = "/etc/blockwork-cache/tls";
/// Writable: Redis and Sentinel rewrite their configuration files at run time.
const DATA_DIR: &str = "/data";
pub const SENTINEL_PORT: i32 = 26379;

/// How the pods of a Cache relate to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Independent servers behind one Service (memcached's only mode; redis/valkey without
    /// `highAvailability`).
    Standalone,
    /// Pod 0 starts as the primary and the others replicate from it; with `sentinel`, a
    /// Sentinel beside each server promotes a replica when the primary fails.
    Replicated { sentinel: bool },
}

pub fn topology(cache: &Cache) -> Topology {
    match (&cache.spec.high_availability, cache.spec.engine) {
        (Some(ha), Engine::Redis | Engine::Valkey) if ha.enabled => Topology::Replicated { sentinel: ha.auto_failover },
        _ => Topology::Standalone,
    }
}

/// A spec the API server accepted but the controller cannot build from.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpec {
    #[error("memory {0:?} is not a number followed by Mi or Gi")]
    Memory(String),
}

/// Bytes in a `memory` value (`256Mi`, `1Gi`).
pub fn memory_bytes(memory: &str) -> Result<u64, InvalidSpec> {
    let invalid = || InvalidSpec::Memory(memory.to_owned());
    let (number, unit) = memory.split_at(memory.len().checked_sub(2).ok_or_else(invalid)?);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let factor = match unit {
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(invalid()),
    };
    number.checked_mul(factor).ok_or_else(invalid)
}

/// The server keeps its data within 80 % of the container's memory, leaving room for
/// connections, replication buffers and fragmentation.
pub fn data_limit_bytes(memory: &str) -> Result<u64, InvalidSpec> {
    Ok(memory_bytes(memory)? / 5 * 4)
}

pub fn port(engine: Engine) -> i32 {
    match engine {
        Engine::Redis | Engine::Valkey => 6379,
        Engine::Memcached => 11211,
    }
}

pub fn resource_name(cache: &Cache) -> String {
    format!("{}-cache", cache.name_any())
}

/// The headless Service that gives each pod a stable DNS name (the StatefulSet's serviceName).
pub fn headless_name(cache: &Cache) -> String {
    format!("{}-cache-headless", cache.name_any())
}

/// `POD.HEADLESS.NAMESPACE.svc.cluster.local` without the pod: what follows a pod's name.
fn pod_domain(cache: &Cache) -> String {
    format!("{}.{}.svc.cluster.local", headless_name(cache), cache.namespace().unwrap_or_default())
}

/// The stable name of the pod with `ordinal`, from the headless Service.
pub fn pod_host(cache: &Cache, ordinal: i32) -> String {
    format!("{}-{ordinal}.{}", resource_name(cache), pod_domain(cache))
}

pub fn endpoint(cache: &Cache) -> String {
    format!("{}.{}.svc.cluster.local:{}", resource_name(cache), cache.namespace().unwrap_or_default(), port(cache.spec.engine))
}

/// The engine's configuration file (Redis/Valkey) or argument list (Memcached).
pub fn render_config(cache: &Cache) -> Result<String, InvalidSpec> {
    let limit = data_limit_bytes(&cache.spec.memory)?;
    let tls = cache.spec.tls.as_ref().is_some_and(|t| t.enabled);
    let port = port(cache.spec.engine);
    Ok(match cache.spec.engine {
        Engine::Redis | Engine::Valkey => {
            let policy = match cache.spec.eviction_policy {
                EvictionPolicy::AllkeysLru => "allkeys-lru",
                EvictionPolicy::VolatileLru => "volatile-lru",
                EvictionPolicy::Noeviction => "noeviction",
            };
            let mut listen = if tls {
                format!("port 0\ntls-port {port}\ntls-cert-file {TLS_DIR}/tls.crt\ntls-key-file {TLS_DIR}/tls.key\ntls-auth-clients no\n")
            } else {
                format!("port {port}\n")
            };
            if tls && topology(cache) != Topology::Standalone {
                // Replicas verify the primary against the Secret's CA (cert-manager writes ca.crt).
                listen.push_str(&format!("tls-replication yes\ntls-ca-cert-file {TLS_DIR}/ca.crt\n"));
            }
            format!(
                "# Rendered by Blockwork from Cache {}; edits are overwritten.\n{listen}bind 0.0.0.0\nprotected-mode no\nmaxmemory {limit}\nmaxmemory-policy {policy}\nappendonly no\nsave \"\"\n",
                cache.name_any()
            )
        }
        Engine::Memcached => {
            let mut args = vec![format!("--memory-limit={}", limit >> 20), format!("--port={port}"), "--listen=0.0.0.0".to_owned()];
            if cache.spec.eviction_policy == EvictionPolicy::Noeviction {
                args.push("--disable-evictions".into());
            }
            if tls {
                args.push("--enable-ssl".into());
                args.push(format!("--extended=ssl_chain_cert={TLS_DIR}/tls.crt,ssl_key={TLS_DIR}/tls.key"));
            }
            args.join("\n") + "\n"
        }
    })
}

/// Starts redis-server or valkey-server from the rendered configuration, copied to the data
/// directory because the server may rewrite it. A pod other than pod 0 of a replicated Cache
/// starts as a replica of pod 0; after a failover, Sentinel reconfigures whoever rejoins.
/// Everything it needs comes from the environment (see [`desired`]), so a test can run it as is.
pub fn render_start_script(cache: &Cache) -> String {
    format!(
        r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -eu
config="$CACHE_DATA_DIR/redis.conf"
cp "$CACHE_CONFIG_DIR/redis.conf" "$config"
if [ -n "${{CACHE_PRIMARY_HOST:-}}" ] && [ "${{POD_NAME##*-}}" != 0 ]; then
  printf 'replicaof %s %s\n' "$CACHE_PRIMARY_HOST" "$CACHE_PRIMARY_PORT" >> "$config"
fi
if [ -n "${{CACHE_ANNOUNCE_HOST:-}}" ]; then
  printf 'replica-announce-ip %s\n' "$CACHE_ANNOUNCE_HOST" >> "$config"
fi
exec "$CACHE_SERVER" "$config"
"#,
        name = cache.name_any()
    )
}

/// Starts a Sentinel that watches the current primary: the one its peers report (a restarted
/// Sentinel must not fall back to pod 0 after a failover), else pod 0. Quorum: a majority of
/// the replicas.
pub fn render_sentinel_script(cache: &Cache) -> String {
    let quorum = cache.spec.replicas / 2 + 1;
    let tls = if cache.spec.tls.as_ref().is_some_and(|t| t.enabled) {
        format!(
            "  echo 'tls-replication yes'\n  echo 'tls-cert-file {TLS_DIR}/tls.crt'\n  echo 'tls-key-file {TLS_DIR}/tls.key'\n  echo 'tls-ca-cert-file {TLS_DIR}/ca.crt'\n"
        )
    } else {
        String::new()
    };
    format!(
        r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -eu
host="$CACHE_PRIMARY_HOST"
port="$CACHE_PRIMARY_PORT"
current=$("$CACHE_CLI" -h "$CACHE_SENTINEL_SERVICE" -p "$CACHE_SENTINEL_PORT" --raw sentinel get-master-addr-by-name "$CACHE_NAME" 2>/dev/null || true)
if [ "$(printf '%s\n' "$current" | wc -l)" -eq 2 ]; then
  host=$(printf '%s\n' "$current" | sed -n 1p)
  port=$(printf '%s\n' "$current" | sed -n 2p)
fi
{{
  printf 'port %s\n' "$CACHE_SENTINEL_PORT"
  echo 'sentinel resolve-hostnames yes'
  echo 'sentinel announce-hostnames yes'
  printf 'sentinel announce-ip %s\n' "$CACHE_ANNOUNCE_HOST"
  printf 'sentinel monitor %s %s %s {quorum}\n' "$CACHE_NAME" "$host" "$port"
  printf 'sentinel down-after-milliseconds %s 5000\n' "$CACHE_NAME"
  printf 'sentinel failover-timeout %s 60000\n' "$CACHE_NAME"
  printf 'sentinel parallel-syncs %s 1\n' "$CACHE_NAME"
{tls}}} > "$CACHE_DATA_DIR/sentinel.conf"
exec "$CACHE_SERVER" "$CACHE_DATA_DIR/sentinel.conf" --sentinel
"#,
        name = cache.name_any()
    )
}

fn labels(cache: &Cache) -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name".to_owned(), "cache".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), cache.name_any()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ]
    .into()
}

fn selector(cache: &Cache) -> BTreeMap<String, String> {
    [("app.kubernetes.io/name".to_owned(), "cache".to_owned()), ("app.kubernetes.io/instance".to_owned(), cache.name_any())].into()
}

fn meta(cache: &Cache, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cache.namespace(),
        labels: Some(labels(cache)),
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

/// Everything a Cache is made of. `pdb` is `None` for a single replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub config_map: ConfigMap,
    pub stateful_set: StatefulSet,
    /// What clients connect to.
    pub service: Service,
    /// Stable per-pod DNS names, which replicas and Sentinels use to find the primary.
    pub headless_service: Service,
    pub pdb: Option<PodDisruptionBudget>,
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..EnvVar::default() }
}

fn memory_resources(memory: &str) -> ResourceRequirements {
    let memory = Quantity(memory.to_owned());
    ResourceRequirements {
        limits: Some([("memory".to_owned(), memory.clone())].into()),
        requests: Some([("memory".to_owned(), memory)].into()),
        ..ResourceRequirements::default()
    }
}

fn service_ports(cache: &Cache) -> Vec<ServicePort> {
    let port = |name: &str, port: i32| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        ..ServicePort::default()
    };
    let mut ports = vec![port("cache", self::port(cache.spec.engine))];
    if topology(cache) == (Topology::Replicated { sentinel: true }) {
        ports.push(port("sentinel", SENTINEL_PORT));
    }
    ports
}

pub fn desired(cache: &Cache) -> Result<Desired, InvalidSpec> {
    let name = resource_name(cache);
    let topology = topology(cache);
    let mut files: BTreeMap<String, String> = match cache.spec.engine {
        Engine::Redis | Engine::Valkey => {
            [("redis.conf".to_owned(), render_config(cache)?), ("start.sh".to_owned(), render_start_script(cache))].into()
        }
        Engine::Memcached => [("memcached.args".to_owned(), render_config(cache)?)].into(),
    };
    if topology == (Topology::Replicated { sentinel: true }) {
        files.insert("sentinel.sh".into(), render_sentinel_script(cache));
    }
    // A configuration change rolls the pods.
    let config_hash = {
        let mut hasher = Sha256::new();
        for (file, content) in &files {
            hasher.update(file.as_bytes());
            hasher.update(content.as_bytes());
        }
        hex::encode(&hasher.finalize()[..8])
    };
    let config_map = ConfigMap { metadata: meta(cache, format!("{name}-config")), data: Some(files), ..ConfigMap::default() };

    let tls_secret = cache.spec.tls.as_ref().filter(|t| t.enabled).and_then(|t| t.secret_name.clone());
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource { name: format!("{name}-config"), ..ConfigMapVolumeSource::default() }),
            ..Volume::default()
        },
        Volume { name: "data".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
    ];
    let mut mounts = vec![
        VolumeMount { name: "config".into(), mount_path: CONFIG_DIR.into(), read_only: Some(true), ..VolumeMount::default() },
        VolumeMount { name: "data".into(), mount_path: DATA_DIR.into(), ..VolumeMount::default() },
    ];
    if let Some(secret) = &tls_secret {
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource { secret_name: Some(secret.clone()), ..SecretVolumeSource::default() }),
            ..Volume::default()
        });
        mounts.push(VolumeMount { name: "tls".into(), mount_path: TLS_DIR.into(), read_only: Some(true), ..VolumeMount::default() });
    }

    let port = port(cache.spec.engine);
    let domain = pod_domain(cache);
    let (image, server, cli) = match cache.spec.engine {
        Engine::Redis => ("redis:7.2", "redis-server", "redis-cli"),
        Engine::Valkey => ("valkey/valkey:8.0", "valkey-server", "valkey-cli"),
        Engine::Memcached => ("memcached:1.6", "memcached", ""),
    };
    let mut environment = vec![
        EnvVar {
            name: "POD_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), ..ObjectFieldSelector::default() }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        env("CACHE_NAME", cache.name_any()),
        env("CACHE_SERVER", server),
        env("CACHE_CLI", cli),
        env("CACHE_CONFIG_DIR", CONFIG_DIR),
        env("CACHE_DATA_DIR", DATA_DIR),
    ];
    if let Topology::Replicated { .. } = topology {
        environment.extend([
            env("CACHE_PRIMARY_HOST", pod_host(cache, 0)),
            env("CACHE_PRIMARY_PORT", port.to_string()),
            // Kubernetes expands $(POD_NAME) from the variable above.
            env("CACHE_ANNOUNCE_HOST", format!("$(POD_NAME).{domain}")),
            env("CACHE_SENTINEL_SERVICE", format!("{name}.{}.svc.cluster.local", cache.namespace().unwrap_or_default())),
            env("CACHE_SENTINEL_PORT", SENTINEL_PORT.to_string()),
        ]);
    }
    let command = match cache.spec.engine {
        Engine::Redis | Engine::Valkey => vec!["sh".to_owned(), format!("{CONFIG_DIR}/start.sh")],
        Engine::Memcached => vec!["sh".to_owned(), "-c".to_owned(), format!("exec memcached $(cat {CONFIG_DIR}/memcached.args)")],
    };
    let mut containers = vec![Container {
        name: "cache".into(),
        image: Some(image.into()),
        command: Some(command),
        env: Some(environment.clone()),
        ports: Some(vec![ContainerPort { name: Some("cache".into()), container_port: port, ..ContainerPort::default() }]),
        resources: Some(memory_resources(&cache.spec.memory)),
        volume_mounts: Some(mounts.clone()),
        ..Container::default()
    }];
    if topology == (Topology::Replicated { sentinel: true }) {
        containers.push(Container {
            name: "sentinel".into(),
            image: Some(image.into()),
            command: Some(vec!["sh".to_owned(), format!("{CONFIG_DIR}/sentinel.sh")]),
            env: Some(environment),
            ports: Some(vec![ContainerPort { name: Some("sentinel".into()), container_port: SENTINEL_PORT, ..ContainerPort::default() }]),
            // Sentinel keeps only the topology in memory.
            resources: Some(memory_resources("64Mi")),
            volume_mounts: Some(mounts),
            ..Container::default()
        });
    }

    let stateful_set = StatefulSet {
        metadata: meta(cache, name.clone()),
        spec: Some(StatefulSetSpec {
            replicas: Some(cache.spec.replicas),
            service_name: Some(headless_name(cache)),
            selector: LabelSelector { match_labels: Some(selector(cache)), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(cache)),
                    annotations: Some([("cache.blockwork.dev/config-hash".to_owned(), config_hash)].into()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec { containers, volumes: Some(volumes), ..PodSpec::default() }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    };
    let service = Service {
        metadata: meta(cache, name.clone()),
        spec: Some(ServiceSpec { selector: Some(selector(cache)), ports: Some(service_ports(cache)), ..ServiceSpec::default() }),
        ..Service::default()
    };
    let headless_service = Service {
        metadata: meta(cache, headless_name(cache)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Replicas must resolve the primary before any pod is ready.
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(cache)),
            ports: Some(service_ports(cache)),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let pdb = (cache.spec.replicas > 1).then(|| PodDisruptionBudget {
        metadata: meta(cache, name),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(selector(cache)), ..LabelSelector::default() }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    });
    Ok(Desired { config_map, stateful_set, service, headless_service, pdb })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CacheSpec, Tls};

    fn cache(engine: Engine, memory: &str, replicas: i32) -> Cache {
        let mut cache = Cache::new(
            "c",
            CacheSpec {
                engine,
                memory: memory.into(),
                replicas,
                eviction_policy: EvictionPolicy::AllkeysLru,
                tls: None,
                high_availability: None,
            },
        );
        cache.metadata.namespace = Some("ns".into());
        cache.metadata.uid = Some("uid-1".into());
        cache
    }

    #[test]
    fn memory_units_are_binary() {
        assert_eq!(memory_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(memory_bytes("2Gi"), Ok(2 << 30));
        assert!(memory_bytes("1G").is_err());
        assert!(memory_bytes("Mi").is_err());
        assert!(memory_bytes("").is_err());
    }

    #[test]
    fn redis_config_limits_data_to_eighty_percent_with_the_policy() {
        let mut c = cache(Engine::Redis, "100Mi", 1);
        c.spec.eviction_policy = EvictionPolicy::VolatileLru;
        let config = render_config(&c).expect("renders");
        assert!(config.contains(&format!("maxmemory {}\n", (100u64 << 20) / 5 * 4)), "{config}");
        assert!(config.contains("maxmemory-policy volatile-lru\n"), "{config}");
        assert!(config.contains("port 6379\n"), "{config}");
    }

    #[test]
    fn redis_tls_moves_the_port_to_tls() {
        let mut c = cache(Engine::Valkey, "64Mi", 1);
        c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        let config = render_config(&c).expect("renders");
        assert!(config.contains("port 0\ntls-port 6379\n"), "{config}");
        let desired = desired(&c).expect("builds");
        let pod = desired.stateful_set.spec.expect("spec").template.spec.expect("pod");
        assert!(pod.volumes.expect("volumes").iter().any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("s")));
    }

    #[test]
    fn memcached_arguments_carry_megabytes_and_noeviction() {
        let mut c = cache(Engine::Memcached, "1Gi", 1);
        c.spec.eviction_policy = EvictionPolicy::Noeviction;
        let args = render_config(&c).expect("renders");
        assert!(args.contains("--memory-limit=819\n"), "{args}");
        assert!(args.contains("--disable-evictions\n"), "{args}");
    }

    #[test]
    fn container_memory_limit_is_the_spec_memory() {
        let desired = desired(&cache(Engine::Redis, "512Mi", 1)).expect("builds");
        let container = &desired.stateful_set.spec.expect("spec").template.spec.expect("pod").containers[0];
        let limits = container.resources.as_ref().and_then(|r| r.limits.clone()).expect("limits");
        assert_eq!(limits["memory"], Quantity("512Mi".into()));
    }

    #[test]
    fn disruption_budget_only_with_several_replicas() {
        assert!(desired(&cache(Engine::Redis, "64Mi", 1)).expect("builds").pdb.is_none());
        assert!(desired(&cache(Engine::Redis, "64Mi", 3)).expect("builds").pdb.is_some());
    }

    #[test]
    fn every_object_is_owned_by_the_cache_and_labelled() {
        let d = desired(&cache(Engine::Redis, "64Mi", 2)).expect("builds");
        for meta in [&d.config_map.metadata, &d.stateful_set.metadata, &d.service.metadata, &d.pdb.as_ref().expect("pdb").metadata] {
            let owner = &meta.owner_references.as_ref().expect("owner")[0];
            assert_eq!((owner.kind.as_str(), owner.controller), ("Cache", Some(true)));
            assert_eq!(meta.labels.as_ref().expect("labels").get(MANAGED_BY_LABEL).map(String::as_str), Some(MANAGED_BY));
        }
    }

    fn ha(engine: Engine, replicas: i32, auto_failover: bool) -> Cache {
        let mut c = cache(engine, "64Mi", replicas);
        c.spec.high_availability = Some(crate::api::HighAvailability { enabled: true, auto_failover });
        c
    }

    fn pod(d: &Desired) -> PodSpec {
        d.stateful_set.spec.clone().expect("spec").template.spec.expect("pod")
    }

    fn env_value(container: &Container, name: &str) -> Option<String> {
        container.env.as_ref()?.iter().find(|e| e.name == name)?.value.clone()
    }

    #[test]
    fn high_availability_only_replicates_redis_and_valkey() {
        assert_eq!(topology(&cache(Engine::Redis, "64Mi", 3)), Topology::Standalone);
        assert_eq!(topology(&ha(Engine::Redis, 3, true)), Topology::Replicated { sentinel: true });
        assert_eq!(topology(&ha(Engine::Valkey, 3, false)), Topology::Replicated { sentinel: false });
        assert_eq!(topology(&ha(Engine::Memcached, 3, true)), Topology::Standalone);
    }

    #[test]
    fn replicas_find_the_primary_through_the_headless_service() {
        let d = desired(&ha(Engine::Redis, 3, false)).expect("builds");
        let server = &pod(&d).containers[0];
        assert_eq!(env_value(server, "CACHE_PRIMARY_HOST").as_deref(), Some("c-cache-0.c-cache-headless.ns.svc.cluster.local"));
        assert_eq!(env_value(server, "CACHE_ANNOUNCE_HOST").as_deref(), Some("$(POD_NAME).c-cache-headless.ns.svc.cluster.local"));
        assert_eq!(d.stateful_set.spec.as_ref().expect("spec").service_name.as_deref(), Some("c-cache-headless"));
        let headless = d.headless_service.spec.as_ref().expect("spec");
        assert_eq!((headless.cluster_ip.as_deref(), headless.publish_not_ready_addresses), (Some("None"), Some(true)));
        assert_eq!(pod(&d).containers.len(), 1, "no Sentinel without autoFailover");
    }

    #[test]
    fn auto_failover_adds_a_sentinel_beside_each_server() {
        let d = desired(&ha(Engine::Valkey, 5, true)).expect("builds");
        let containers = pod(&d).containers;
        assert_eq!(containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["cache", "sentinel"]);
        assert_eq!(env_value(&containers[1], "CACHE_CLI").as_deref(), Some("valkey-cli"));
        let ports: Vec<i32> = d.service.spec.as_ref().expect("spec").ports.as_ref().expect("ports").iter().map(|p| p.port).collect();
        assert_eq!(ports, [6379, SENTINEL_PORT]);
        let files = d.config_map.data.as_ref().expect("data");
        assert!(
            files["sentinel.sh"].contains("' \"$CACHE_NAME\" \"$host\" \"$port\"") && files["sentinel.sh"].contains("%s %s %s 3\\n"),
            "quorum 3 of 5"
        );
    }

    #[test]
    fn standalone_pods_get_no_replication_settings() {
        let d = desired(&cache(Engine::Redis, "64Mi", 2)).expect("builds");
        assert_eq!(env_value(&pod(&d).containers[0], "CACHE_PRIMARY_HOST"), None);
        assert!(!d.config_map.data.as_ref().expect("data").contains_key("sentinel.sh"));
    }

    #[test]
    fn tls_with_replication_verifies_the_primary() {
        let mut c = ha(Engine::Redis, 3, true);
        c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        let config = render_config(&c).expect("renders");
        assert!(config.contains("tls-replication yes\n") && config.contains("tls-ca-cert-file"), "{config}");
        assert!(render_sentinel_script(&c).contains("tls-replication yes"));
    }

    #[test]
    fn a_configuration_change_changes_the_pod_template() {
        let hash = |c: &Cache| {
            desired(c).expect("builds").stateful_set.spec.expect("spec").template.metadata.expect("meta").annotations.expect("a")
            ["cache.blockwork.dev/config-hash"]
            .clone()
        };
        let mut bigger = cache(Engine::Redis, "64Mi", 1);
        bigger.spec.memory = "128Mi".into();
        assert_ne!(hash(&cache(Engine::Redis, "64Mi", 1)), hash(&bigger));
    }

    #[test]
    fn phase_follows_the_statefulset() {
        assert_eq!(phase(3, 0, 0).0, Phase::Pending);
        assert_eq!(phase(3, 3, 1), (Phase::Provisioning, "1/3 replicas ready".to_owned()));
        assert_eq!(phase(3, 3, 3).0, Phase::Ready);
    }

    #[test]
    fn endpoint_names_the_service() {
        assert_eq!(endpoint(&cache(Engine::Memcached, "64Mi", 1)), "c-cache.ns.svc.cluster.local:11211");
    }
}
