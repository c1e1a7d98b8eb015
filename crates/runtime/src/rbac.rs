//! RBAC rules as operators declare them beside their code (`blockwork rbac` collects them).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// A rule granting `verbs` on `resources` of one API group (`""` is the core group).
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}
