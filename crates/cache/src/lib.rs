//! The Cache operator (seed 002): a `Cache` becomes a ConfigMap with the engine's configuration,
//! a StatefulSet, a Service and, with more than one replica, a PodDisruptionBudget.

pub mod api;
pub mod build;
pub mod controller;
pub mod conversion;
pub mod crd;

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The cluster permissions the Cache controller needs (see `blockwork rbac`).
pub fn rbac() -> Vec<PolicyRule> {
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    vec![
        rule(api::GROUP, &["caches"], &["get", "list", "watch", "patch"]),
        rule(api::GROUP, &["caches/status"], &["patch"]),
        rule(api::GROUP, &["caches/finalizers"], &["update"]),
        rule("apps", &["statefulsets"], &["get", "list", "watch", "create", "patch", "delete"]),
        rule("", &["services", "configmaps"], &["get", "list", "watch", "create", "patch", "delete"]),
        rule("policy", &["poddisruptionbudgets"], &["get", "list", "watch", "create", "patch", "delete"]),
    ]
}
