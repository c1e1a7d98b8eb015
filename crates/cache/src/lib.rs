//! The Cache operator (seed 002): a `Cache` becomes a ConfigMap with the engine's configuration,
//! a StatefulSet, a Service, a NetworkPolicy (unless turned off at install) and, with more than
//! one replica, a PodDisruptionBudget.

pub mod access;
pub mod api;
pub mod applied;
pub mod auth;
pub mod build;
pub mod children;
pub mod controller;
pub mod conversion;
pub mod crd;
#[cfg(test)]
mod fixtures;
pub mod metrics;
pub mod pod;
pub mod refs;
pub mod render;
pub mod replication;
pub mod sentinel;
pub mod settings;
pub mod shape;
pub mod startup;
pub mod status;
mod traced;

use blockwork_runtime::rbac::rule;
use k8s_openapi::api::rbac::v1::PolicyRule;

/// The cluster permissions the Cache controller needs (see `blockwork rbac`).
pub fn rbac() -> Vec<PolicyRule> {
    vec![
        rule(api::GROUP, &["caches"], &["get", "list", "watch", "patch"]),
        rule(api::GROUP, &["caches/status"], &["patch"]),
        rule(api::GROUP, &["caches/finalizers"], &["update"]),
        rule("apps", &["statefulsets"], &["get", "list", "watch", "create", "patch", "delete"]),
        rule("", &["services", "configmaps"], &["get", "list", "watch", "create", "patch", "delete"]),
        rule("policy", &["poddisruptionbudgets"], &["get", "list", "watch", "create", "patch", "delete"]),
        // Secrets, watched by metadata only (a change of a referenced one reconciles its Cache).
        // Read: the TLS Secret (its keys, its CA) and the user's password Secret. Written: the
        // Cache's own two, its passwords' Secret and the binding Secret; a replace carries the read
        // resourceVersion (a rotation's commit point). Never deleted by the operator (no
        // controller may delete a Secret): owned by the Cache, they go with it.
        rule("", &["secrets"], &["get", "list", "watch", "create", "update", "patch"]),
        // Why a Cache's pods do not start: its pods (by label) and the StatefulSets'
        // FailedCreate events, watched; never written.
        rule("", &["pods", "events"], &["get", "list", "watch"]),
    ]
}

/// What the NetworkPolicies add (`--cache-network-policies`, on by default, and so in `blockwork
/// rbac` unless `--opt-out cache.network-policies`; the chart's `controllers.cache.networkPolicies`):
/// each Cache's own, applied, watched and deleted like its other objects.
pub fn network_policy_rbac() -> Vec<PolicyRule> {
    vec![rule("networking.k8s.io", &["networkpolicies"], &["get", "list", "watch", "create", "patch", "delete"])]
}
