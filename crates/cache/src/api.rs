//! The `Cache` API, `cache.blockwork.dev`: `v1alpha1` and `v1beta1` (storage), converted by
//! Blockwork's webhook. Field docs become `kubectl explain` text; what the schema and CEL can
//! reject is rejected by the API server, before anything reaches the controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "cache.blockwork.dev";
/// Holds `spec.highAvailability` while an object is read as v1alpha1, so a round trip through
/// the older version loses nothing.
pub const HIGH_AVAILABILITY_ANNOTATION: &str = "cache.blockwork.dev/v1beta1-high-availability";

/// The cache server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Redis,
    Memcached,
    Valkey,
}

/// What happens when the cache is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionPolicy {
    /// Evict the least recently used keys.
    #[default]
    AllkeysLru,
    /// Evict the least recently used keys that have a TTL (Redis and Valkey only).
    VolatileLru,
    /// Refuse writes when full.
    Noeviction,
}

/// TLS for client connections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// Serve clients over TLS only.
    #[serde(default)]
    pub enabled: bool,
    /// A `kubernetes.io/tls` Secret in the same namespace with `tls.crt`, `tls.key` and
    /// optionally `ca.crt`. Requires `enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

/// Lifecycle phase of a Cache. (No Terminating: deletion's cleanup is bounded and finishes in
/// the reconcile that starts it, so the phase would never be seen; `deletionTimestamp` shows it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// The StatefulSet has no pods yet.
    Pending,
    /// Some replicas are not ready.
    Provisioning,
    /// Every replica is ready.
    Ready,
    /// The spec cannot be built (see the Ready condition's message).
    Failed,
}

/// Observed state of a Cache (the same in both versions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheStatus {
    /// Pending, Provisioning, Ready or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Replicas whose pods are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Where clients connect: `NAME-cache.NAMESPACE.svc.cluster.local:PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `Ready`: AllReplicasAvailable or ReplicasNotReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

fn default_replicas() -> i32 {
    1
}

fn default_true() -> bool {
    true
}

macro_rules! cache_version {
    ($version:literal, $($extra:tt)*) => {
        use kube::{CustomResource, KubeSchema};
        use serde::{Deserialize, Serialize};

        pub use super::{CacheStatus, Engine, EvictionPolicy, Phase, Tls};

        /// A Redis, Valkey or Memcached cache run as a StatefulSet.
        #[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[kube(
            group = "cache.blockwork.dev",
            version = $version,
            kind = "Cache",
            namespaced,
            shortname = "ch",
            category = "all",
            status = "CacheStatus",
            scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.readyReplicas"),
            printcolumn(name = "Engine", type_ = "string", json_path = ".spec.engine"),
            printcolumn(name = "Memory", type_ = "string", json_path = ".spec.memory"),
            printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
            printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[x_kube(validation = Rule::new("!has(self.tls) || !has(self.tls.secretName) || self.tls.enabled").message("tls.secretName requires tls.enabled to be true"))]
        #[x_kube(validation = Rule::new("self.engine != 'memcached' || self.evictionPolicy != 'volatile-lru'").message("memcached cannot evict only keys with a TTL: use allkeys-lru or noeviction"))]
        $($extra)*
    };
}

pub mod v1alpha1 {
    cache_version!(
        "v1alpha1",
        #[serde(rename_all = "camelCase")]
        pub struct CacheSpec {
            /// The cache server: redis, memcached or valkey.
            pub engine: Engine,
            /// Memory for the cache, e.g. 256Mi or 1Gi: the container's memory limit; the server
            /// keeps its data within 80 % of it.
            #[schemars(regex(pattern = r"^\d+(Mi|Gi)$"))]
            pub memory: String,
            /// Number of cache servers (1 to 10).
            #[serde(default = "super::default_replicas")]
            #[schemars(range(min = 1, max = 10))]
            pub replicas: i32,
            /// What happens when the cache is full.
            #[serde(default)]
            pub eviction_policy: EvictionPolicy,
            /// TLS for client connections.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tls: Option<Tls>,
        }
    );
}

pub mod v1beta1 {
    pub use super::HighAvailability;
    cache_version!(
        "v1beta1",
        #[x_kube(validation = Rule::new("!has(self.highAvailability) || !self.highAvailability.enabled || self.engine != 'memcached'").message("memcached does not replicate: highAvailability needs engine redis or valkey"))]
        #[x_kube(validation = Rule::new("!has(self.highAvailability) || !self.highAvailability.enabled || self.replicas >= 3").message("highAvailability.enabled needs at least 3 replicas (a primary, a replica to promote, and a Sentinel majority)"))]
        #[serde(rename_all = "camelCase")]
        pub struct CacheSpec {
            /// The cache server: redis, memcached or valkey.
            pub engine: Engine,
            /// Memory for the cache, e.g. 256Mi or 1Gi: the container's memory limit; the server
            /// keeps its data within 80 % of it.
            #[schemars(regex(pattern = r"^\d+(Mi|Gi)$"))]
            pub memory: String,
            /// Number of cache servers (1 to 10).
            #[serde(default = "super::default_replicas")]
            #[schemars(range(min = 1, max = 10))]
            pub replicas: i32,
            /// What happens when the cache is full.
            #[serde(default)]
            pub eviction_policy: EvictionPolicy,
            /// TLS for client connections.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tls: Option<Tls>,
            /// Replication with automatic failover.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub high_availability: Option<HighAvailability>,
        }
    );
}

/// Replication with automatic failover (v1beta1; redis and valkey).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HighAvailability {
    /// Run the replicas as one replicated set (pod 0 starts as the primary, the others replicate
    /// from it) rather than as independent caches. Needs at least 3 replicas.
    #[serde(default)]
    pub enabled: bool,
    /// Run a Sentinel beside each server (port 26379 of the Service) that promotes a replica
    /// when the primary fails; clients find the primary through Sentinel, master name = the
    /// Cache's name. Without it a failed primary stays failed until its pod is back.
    #[serde(default = "default_true")]
    pub auto_failover: bool,
}

/// The stored version, which the controller works with.
pub type Cache = v1beta1::Cache;
pub type CacheSpec = v1beta1::CacheSpec;
