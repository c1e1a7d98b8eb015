//! `blockwork rbac`: the least-privilege RBAC for the selected controllers, generated from what
//! each controller declares beside its code, plus what the process itself needs.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::ObjectMeta;
use serde::Serialize;

use blockwork_runtime::rbac::rule;

use crate::controllers::Controller;

/// Where the operator runs: its ServiceAccount, and the namespace of its leader-election Lease.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Prefix of the generated objects' names.
    pub name: String,
    pub namespace: String,
    pub service_account: String,
}

/// The rules every controller of the process shares: publishing events.
pub fn process_rules() -> Vec<PolicyRule> {
    vec![rule("events.k8s.io", &["events"], &["create", "patch"])]
}

/// The rules of the leader-election Lease, granted only in the operator's own namespace.
pub fn leader_election_rules() -> Vec<PolicyRule> {
    vec![rule("coordination.k8s.io", &["leases"], &["get", "create", "update", "patch"])]
}

/// The process's rules and the controllers', merged by (group, resource) so each pair appears once.
pub fn cluster_rules(controllers: &[Controller]) -> Vec<PolicyRule> {
    let mut merged: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    let all = process_rules().into_iter().chain(controllers.iter().flat_map(|c| (c.rbac)()));
    for rule in all {
        for group in rule.api_groups.clone().unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                merged.entry((group.clone(), resource)).or_default().extend(rule.verbs.iter().cloned());
            }
        }
    }
    merged
        .into_iter()
        .map(|((group, resource), verbs)| PolicyRule {
            api_groups: Some(vec![group]),
            resources: Some(vec![resource]),
            verbs: verbs.into_iter().collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// The ClusterRole, Role and their bindings, as multi-document YAML.
pub fn manifests(controllers: &[Controller], identity: &Identity) -> anyhow::Result<String> {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: identity.service_account.clone(),
        namespace: Some(identity.namespace.clone()),
        ..Subject::default()
    };
    let cluster_name = identity.name.clone();
    let lease_name = format!("{}-leader-election", identity.name);
    let cluster_role =
        ClusterRole { metadata: meta(&cluster_name, None), rules: Some(cluster_rules(controllers)), ..ClusterRole::default() };
    let cluster_binding = ClusterRoleBinding {
        metadata: meta(&cluster_name, None),
        role_ref: role_ref("ClusterRole", &cluster_name),
        subjects: Some(vec![subject.clone()]),
    };
    let role = Role { metadata: meta(&lease_name, Some(&identity.namespace)), rules: Some(leader_election_rules()) };
    let binding = RoleBinding {
        metadata: meta(&lease_name, Some(&identity.namespace)),
        role_ref: role_ref("Role", &lease_name),
        subjects: Some(vec![subject]),
    };
    let documents = [document(&cluster_role)?, document(&cluster_binding)?, document(&role)?, document(&binding)?];
    Ok(documents.join("---\n"))
}

fn document<T: Serialize + kube::Resource<DynamicType = ()>>(object: &T) -> anyhow::Result<String> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = T::api_version(&()).into();
    value["kind"] = T::kind(&()).into();
    Ok(serde_saphyr::to_string(&value)?)
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some([("app.kubernetes.io/name".to_owned(), "blockwork".to_owned())].into()),
        ..ObjectMeta::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: kind.into(), name: name.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::no_metrics;

    fn controller(rbac: fn() -> Vec<PolicyRule>) -> Controller {
        Controller {
            name: "x",
            crds: Vec::new,
            rbac,
            webhooks: crate::controllers::Webhooks::NONE,
            register_metrics: no_metrics,
            run: |_| Box::pin(async { Ok(()) }),
        }
    }

    #[test]
    fn rules_of_several_controllers_merge_per_resource() {
        let a = controller(|| vec![rule("", &["secrets"], &["get", "list"]), rule("events.k8s.io", &["events"], &["create"])]);
        let b = controller(|| vec![rule("", &["secrets"], &["watch", "get"])]);
        let rules = cluster_rules(&[a, b]);
        let secrets = rules.iter().find(|r| r.resources.as_deref() == Some(&["secrets".to_owned()][..])).expect("secrets rule");
        assert_eq!(secrets.verbs, ["get", "list", "watch"]);
        assert_eq!(rules.iter().filter(|r| r.resources.as_deref() == Some(&["events".to_owned()][..])).count(), 1);
    }

    #[test]
    fn leases_are_not_granted_cluster_wide() {
        let rules = cluster_rules(&[]);
        assert!(rules.iter().all(|r| r.resources.as_deref() != Some(&["leases".to_owned()][..])));
    }

    #[test]
    fn manifests_bind_the_service_account() {
        let identity = Identity { name: "blockwork".into(), namespace: "blockwork-system".into(), service_account: "blockwork".into() };
        let yaml = manifests(&[], &identity).expect("renders");
        assert_eq!(yaml.matches("kind: ServiceAccount").count(), 2, "{yaml}");
        for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
            assert!(yaml.contains(&format!("kind: {kind}\n")), "{kind} missing:\n{yaml}");
        }
    }
}
