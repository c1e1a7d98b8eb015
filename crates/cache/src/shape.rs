//! Pure: what every part of a Cache agrees on: the names of its objects and pods, its ports and
//! directories, how its pods relate ([`Topology`]) and its memory in bytes.

use std::collections::BTreeMap;

use kube::ResourceExt;

use blockwork_runtime::labels::{MANAGED_BY, MANAGED_BY_LABEL};

use crate::api::{Cache, Engine};

/// The rendered files (read-only).
pub const CONFIG_DIR: &str = "/etc/blockwork-cache";
/// The TLS Secret (read-only).
pub const TLS_DIR: &str = "/etc/blockwork-cache/tls";
/// Writable, and the only writable place of the pod: Redis and Sentinel rewrite their
/// configuration files at run time.
pub const DATA_DIR: &str = "/data";
pub const SENTINEL_PORT: i32 = 26379;
/// With TLS, memcached also listens in plain text on this loopback port, for its probes and
/// exporter: nothing outside the pod reaches it.
pub const MEMCACHED_LOOPBACK_PORT: i32 = 11212;
/// The exporters' own ports, as their images document them.
pub const REDIS_EXPORTER_PORT: i32 = 9121;
pub const MEMCACHED_EXPORTER_PORT: i32 = 9150;

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

pub fn has_sentinel(cache: &Cache) -> bool {
    topology(cache) == (Topology::Replicated { sentinel: true })
}

pub fn tls_enabled(cache: &Cache) -> bool {
    cache.spec.tls.as_ref().is_some_and(|t| t.enabled)
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

pub fn exporter_port(engine: Engine) -> i32 {
    match engine {
        Engine::Redis | Engine::Valkey => REDIS_EXPORTER_PORT,
        Engine::Memcached => MEMCACHED_EXPORTER_PORT,
    }
}

pub fn resource_name(cache: &Cache) -> String {
    format!("{}-cache", cache.name_any())
}

/// The headless Service that gives each pod a stable DNS name (the StatefulSet's serviceName).
pub fn headless_name(cache: &Cache) -> String {
    format!("{}-cache-headless", cache.name_any())
}

pub fn config_map_name(cache: &Cache) -> String {
    format!("{}-cache-config", cache.name_any())
}

/// `POD.HEADLESS.NAMESPACE.svc.cluster.local` without the pod: what follows a pod's name.
pub fn pod_domain(cache: &Cache) -> String {
    format!("{}.{}.svc.cluster.local", headless_name(cache), cache.namespace().unwrap_or_default())
}

/// The stable name of the pod with `ordinal`, from the headless Service.
pub fn pod_host(cache: &Cache, ordinal: i32) -> String {
    format!("{}-{ordinal}.{}", resource_name(cache), pod_domain(cache))
}

pub fn endpoint(cache: &Cache) -> String {
    format!("{}.{}.svc.cluster.local:{}", resource_name(cache), cache.namespace().unwrap_or_default(), port(cache.spec.engine))
}

/// The labels of every object of a Cache, its pods included.
pub fn labels(cache: &Cache) -> BTreeMap<String, String> {
    let mut labels = selector(cache);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels
}

/// What selects a Cache's pods (its Services, budget and spread).
pub fn selector(cache: &Cache) -> BTreeMap<String, String> {
    [(NAME_LABEL.to_owned(), "cache".to_owned()), (INSTANCE_LABEL.to_owned(), cache.name_any())].into()
}

/// Every Cache's pods carry `app.kubernetes.io/name: cache`...
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// ...and their Cache's name.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::cache;

    #[test]
    fn memory_units_are_binary() {
        assert_eq!(memory_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(memory_bytes("2Gi"), Ok(2 << 30));
        assert!(memory_bytes("1G").is_err());
        assert!(memory_bytes("Mi").is_err());
        assert!(memory_bytes("").is_err());
    }

    #[test]
    fn high_availability_only_replicates_redis_and_valkey() {
        let ha = |engine, auto_failover| {
            let mut c = cache(engine);
            c.spec.high_availability = Some(crate::api::HighAvailability { enabled: true, auto_failover });
            c
        };
        assert_eq!(topology(&cache(Engine::Redis)), Topology::Standalone);
        assert_eq!(topology(&ha(Engine::Redis, true)), Topology::Replicated { sentinel: true });
        assert_eq!(topology(&ha(Engine::Valkey, false)), Topology::Replicated { sentinel: false });
        assert_eq!(topology(&ha(Engine::Memcached, true)), Topology::Standalone);
    }

    #[test]
    fn endpoint_names_the_service() {
        assert_eq!(endpoint(&cache(Engine::Memcached)), "c-cache.ns.svc.cluster.local:11211");
        assert_eq!(pod_host(&cache(Engine::Redis), 2), "c-cache-2.c-cache-headless.ns.svc.cluster.local");
    }
}
