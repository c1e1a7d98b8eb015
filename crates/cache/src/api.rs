//! The `Cache` API, `cache.blockwork.dev`: `v1alpha1` and `v1beta1` (storage), converted by
//! Blockwork's webhook. Field docs become `kubectl explain` text; what the schema and CEL can
//! reject is rejected by the API server, before anything reaches the controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "cache.blockwork.dev";
/// Holds `spec.highAvailability` while an object is read as v1alpha1, so a round trip through
/// the older version loses nothing. Written by the conversion, never meant for users: on a
/// stored (v1beta1) object it means nothing and is reported as an invalid annotation.
pub const HIGH_AVAILABILITY_ANNOTATION: &str = "cache.blockwork.dev/v1beta1-high-availability";

/// The least `memory` a Cache gets. Below it a server has no room for data beside its own
/// footprint (Redis and Valkey start at a few MiB; memcached takes 1 MiB slab pages per size
/// class in use, and 64 MB is its own default).
pub const MIN_MEMORY: &str = "64Mi";
/// The most `memory` a Cache gets: one server process, single-threaded for Redis; a cache larger
/// than this is a sharding problem, not a bigger pod.
pub const MAX_MEMORY: &str = "1024Gi";

/// Derived objects are named `NAME-cache`, `NAME-cache-headless` (Services: DNS-1035 labels of
/// at most 63 characters) and `NAME-cache-config`; the StatefulSet `NAME-cache` labels its pods
/// with `NAME-cache-<revision hash>`, which Kubernetes keeps within 63 characters only for
/// StatefulSet names of at most 52. Hence at most 46 characters, a DNS-1035 label.
pub const MAX_NAME_LENGTH: usize = 46;

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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.secretName) || self.enabled").message("tls.secretName requires tls.enabled to be true"))]
#[x_kube(validation = Rule::new("!self.enabled || has(self.secretName)").message("tls.enabled requires tls.secretName: a kubernetes.io/tls Secret in the Cache's namespace with tls.crt and tls.key"))]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// Serve clients over TLS only. Requires `secretName`.
    #[serde(default)]
    pub enabled: bool,
    /// A `kubernetes.io/tls` Secret in the same namespace with `tls.crt`, `tls.key` and, for a
    /// replicated Cache (v1beta1), `ca.crt` (cert-manager writes all three). Requires `enabled`. Until
    /// it exists with those keys the pods cannot start; the `ResolvedRefs` condition says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"), length(min = 1, max = 253))]
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
    /// The value of the `blockwork.dev/reconcile-requested-at` annotation the controller last
    /// acted on (`blockwork retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The pod that takes writes, as Sentinel reports it (replicated Caches with automatic
    /// failover only). Looked at every 30 s, every 5 s while the primary is down or a pod is
    /// not ready; the `PrimaryKnown` condition says whether it is current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// The last failover Sentinel made: when the new primary took over, and from which pod to
    /// which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<Failover>,
    /// The failure the controller waits out, while it lasts: a refused spec or child object
    /// (`Terminal`: retried when the spec changes), a missing referenced Secret (`NotFound`:
    /// retried when it appears); `retryAt` is the latest the controller looks again. The API
    /// server's passing trouble is retried within seconds and not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<blockwork_runtime::status::LastError>,
}

/// A failover: Sentinel promoted a replica in place of the primary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// When the promoted replica took over, as Sentinel reports it (to the second).
    pub time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// The pod that was the primary.
    pub from: String,
    /// The pod Sentinel promoted.
    pub to: String,
}

/// `metadata.name` is a DNS-1035 label of at most [`MAX_NAME_LENGTH`] characters.
fn name_rule() -> String {
    format!("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= {MAX_NAME_LENGTH}")
}

fn name_message() -> String {
    format!(
        "metadata.name must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters (lowercase letters, digits and '-', starting with a letter): the Cache's Services and StatefulSet are named after it"
    )
}

/// `memory` from [`MIN_MEMORY`] to [`MAX_MEMORY`]. A value that is no quantity at all is left to
/// the pattern, which reports it on its own.
fn memory_rule() -> String {
    format!(
        "!isQuantity(self) || (quantity(self).compareTo(quantity('{MIN_MEMORY}')) >= 0 && quantity(self).compareTo(quantity('{MAX_MEMORY}')) <= 0)"
    )
}

fn memory_message() -> String {
    format!(
        "memory must be from {MIN_MEMORY} to {MAX_MEMORY}: less leaves a server no room for data, more is one process too many (shard it)"
    )
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

        pub use super::{CacheStatus, Engine, EvictionPolicy, Failover, Phase, Tls};

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
            printcolumn(name = "Primary", type_ = "string", json_path = ".status.primary"),
            printcolumn(name = "Last Failover", type_ = "date", json_path = ".status.lastFailover.time", priority = "1"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
            validation = Rule::new(super::name_rule()).message(super::name_message().as_str())
        )]
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
            /// Memory for the cache, e.g. 256Mi or 1Gi, from 64Mi to 1024Gi: the container's
            /// memory limit; the server keeps its data within 80 % of it.
            #[schemars(regex(pattern = r"^\d+(Mi|Gi)$"), length(max = 10))]
            #[x_kube(validation = Rule::new(super::memory_rule()).message(super::memory_message().as_str()))]
            pub memory: String,
            /// Number of cache servers (1 to 10).
            #[serde(default = "super::default_replicas")]
            #[schemars(range(min = 1, max = 10))]
            pub replicas: i32,
            /// What happens when the cache is full.
            #[serde(default)]
            pub eviction_policy: EvictionPolicy,
            /// Who may connect: the pods of the Cache's namespace unless this says otherwise.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub access: Option<crate::access::Access>,
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
            /// Memory for the cache, e.g. 256Mi or 1Gi, from 64Mi to 1024Gi: the container's
            /// memory limit; the server keeps its data within 80 % of it.
            #[schemars(regex(pattern = r"^\d+(Mi|Gi)$"), length(max = 10))]
            #[x_kube(validation = Rule::new(super::memory_rule()).message(super::memory_message().as_str()))]
            pub memory: String,
            /// Number of cache servers (1 to 10).
            #[serde(default = "super::default_replicas")]
            #[schemars(range(min = 1, max = 10))]
            pub replicas: i32,
            /// What happens when the cache is full.
            #[serde(default)]
            pub eviction_policy: EvictionPolicy,
            /// Who may connect: the pods of the Cache's namespace unless this says otherwise.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub access: Option<crate::access::Access>,
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
