//! `blockwork rbac`: the least-privilege RBAC for the selected controllers, generated from what
//! each controller declares beside its code, plus what the process itself needs.

use std::collections::{BTreeMap, BTreeSet};

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

/// The process's rules and the controllers', with the opt-ins asked for (`<controller>.<name>`),
/// merged by (group, resource) so each pair appears once.
pub fn cluster_rules(controllers: &[Controller], opt_ins: &[String]) -> Vec<PolicyRule> {
    let mut merged: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    let chosen = controllers
        .iter()
        .flat_map(|c| c.opt_in_rbac.iter().filter(|o| opt_ins.iter().any(|wanted| *wanted == opt_in_name(c, o))).flat_map(|o| (o.rules)()));
    let all = process_rules().into_iter().chain(controllers.iter().flat_map(|c| (c.rbac)())).chain(chosen);
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

/// `<controller>.<opt-in>`, as `blockwork rbac --opt-in` names it.
pub fn opt_in_name(controller: &Controller, opt_in: &crate::controllers::OptInRbac) -> String {
    format!("{}.{}", controller.name, opt_in.name)
}

/// The features whose permissions to grant: those on by default but the `opt_outs`, and the
/// `opt_ins` (`<controller>.<name>`).
pub fn features(controllers: &[Controller], opt_ins: &[String], opt_outs: &[String]) -> Vec<String> {
    let defaults = controllers.iter().flat_map(|c| c.opt_in_rbac.iter().filter(|o| o.enabled_by_default).map(move |o| opt_in_name(c, o)));
    let mut features: Vec<String> = defaults.filter(|feature| !opt_outs.contains(feature)).chain(opt_ins.iter().cloned()).collect();
    features.sort();
    features.dedup();
    features
}

/// The opt-ins of `controllers`, or an error naming the unknown ones among `wanted`.
pub fn check_opt_ins(controllers: &[Controller], wanted: &[String]) -> Result<(), String> {
    let known: Vec<String> = controllers.iter().flat_map(|c| c.opt_in_rbac.iter().map(move |o| opt_in_name(c, o))).collect();
    let unknown: Vec<&str> = wanted.iter().map(String::as_str).filter(|w| !known.iter().any(|k| k == w)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let valid = if known.is_empty() { "none for the selected controllers".to_owned() } else { known.join(", ") };
    Err(format!("unknown opt-in(s): {}; valid: {valid}", unknown.join(", ")))
}

/// Read access to the controllers' own namespaced kinds. In namespaced mode it stays
/// cluster-wide: an admission webhook compares an object with every other of its kind (e.g. a
/// domain two Certs claim in different namespaces). People's default roles aggregate these too;
/// a cluster-scoped kind (AwsIdentity, which grants AWS accounts) is never among them.
pub fn own_kind_reads(controllers: &[Controller]) -> Vec<PolicyRule> {
    let mut rules: Vec<PolicyRule> = controllers
        .iter()
        .flat_map(|c| (c.crds)())
        .filter(|crd| crd.spec.scope != "Cluster")
        .map(|crd| rule(&crd.spec.group, &[crd.spec.names.plural.as_str()], &["get", "list", "watch"]))
        .collect();
    rules.sort_by(|a, b| (&a.api_groups, &a.resources).cmp(&(&b.api_groups, &b.resources)));
    rules.dedup();
    rules
}

/// The (group, plural) of the cluster-scoped kinds among the controllers' CRDs.
fn cluster_scoped_kinds(controllers: &[Controller]) -> BTreeSet<(String, String)> {
    controllers
        .iter()
        .flat_map(|c| (c.crds)())
        .filter(|crd| crd.spec.scope == "Cluster")
        .map(|crd| (crd.spec.group.clone(), crd.spec.names.plural.clone()))
        .collect()
}

/// Whether a merged rule (one group, one resource) is about a cluster-scoped kind or one of its
/// subresources.
fn on_cluster_scoped(rule: &PolicyRule, kinds: &BTreeSet<(String, String)>) -> bool {
    let group = rule.api_groups.iter().flatten().next().cloned().unwrap_or_default();
    let resource = rule.resources.iter().flatten().next().map(|r| r.split('/').next().unwrap_or_default().to_owned()).unwrap_or_default();
    kinds.contains(&(group, resource))
}

/// The controllers' rules on cluster-scoped kinds (reading the AwsIdentity mappings, writing
/// their status): a Role cannot grant them, so in namespaced mode they stay in the ClusterRole.
pub fn cluster_scoped_rules(controllers: &[Controller], opt_ins: &[String]) -> Vec<PolicyRule> {
    let kinds = cluster_scoped_kinds(controllers);
    cluster_rules(controllers, opt_ins).into_iter().filter(|rule| on_cluster_scoped(rule, &kinds)).collect()
}

/// The process's and the controllers' rules on namespaced objects: in namespaced mode, a Role
/// in each watched namespace.
pub fn namespaced_rules(controllers: &[Controller], opt_ins: &[String]) -> Vec<PolicyRule> {
    let kinds = cluster_scoped_kinds(controllers);
    cluster_rules(controllers, opt_ins).into_iter().filter(|rule| !on_cluster_scoped(rule, &kinds)).collect()
}

/// How the operator is installed, beyond its identity.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// The watched namespaces; empty: all (a ClusterRole), else a Role in each.
    pub namespaces: Vec<String>,
    /// Permissions of features enabled at install (`<controller>.<name>`, e.g.
    /// `cert.export-secrets`), granted where the controllers' own rules are.
    pub opt_ins: Vec<String>,
    /// Self-managed webhook certificates: the Secret, and the ValidatingWebhookConfiguration
    /// whose `caBundle` the operator patches.
    pub webhook_certificates: Option<WebhookCertificates>,
}

#[derive(Clone, Debug)]
pub struct WebhookCertificates {
    pub secret: String,
    pub configuration_name: String,
}

/// The roles and bindings, as multi-document YAML:
/// - the controllers' rules in a ClusterRole, or (namespaced) in a Role per watched namespace
///   plus a ClusterRole reading Blockwork's own kinds and holding the rules on cluster-scoped
///   kinds;
/// - the leader-election Role in the operator's namespace;
/// - with self-managed webhook certificates, a Role for their Secret in the operator's
///   namespace and a ClusterRole patching the `caBundle` of the CRDs and the webhook
///   configuration, each limited to those objects by name.
pub fn manifests(controllers: &[Controller], identity: &Identity, scope: &Scope) -> anyhow::Result<String> {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: identity.service_account.clone(),
        namespace: Some(identity.namespace.clone()),
        ..Subject::default()
    };
    let mut documents = Vec::new();
    let mut cluster_role = |name: &str, rules: Vec<PolicyRule>| -> anyhow::Result<()> {
        if rules.is_empty() {
            return Ok(());
        }
        documents.push(document(&ClusterRole { metadata: meta(name, None), rules: Some(rules), ..ClusterRole::default() })?);
        documents.push(document(&ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: role_ref("ClusterRole", name),
            subjects: Some(vec![subject.clone()]),
        })?);
        Ok(())
    };
    let namespaces = crate::controllers::Namespaces::from_list(scope.namespaces.clone());
    match &namespaces {
        crate::controllers::Namespaces::All => cluster_role(&identity.name, cluster_rules(controllers, &scope.opt_ins))?,
        crate::controllers::Namespaces::Only(_) => cluster_role(
            &identity.name,
            own_kind_reads(controllers).into_iter().chain(cluster_scoped_rules(controllers, &scope.opt_ins)).collect(),
        )?,
    }
    let injection = scope.webhook_certificates.as_ref().filter(|_| crate::certificates::has_webhooks(controllers)).map(|certificates| {
        let crds = crate::certificates::conversion_crds(controllers);
        let configuration = crate::certificates::has_admission_webhooks(controllers).then_some(certificates.configuration_name.as_str());
        crate::certificates::ca_injection_rules(&crds, configuration)
    });
    if let Some(rules) = injection {
        cluster_role(&format!("{}-webhook-ca-injection", identity.name), rules)?;
    }
    let mut role = |name: &str, namespace: &str, rules: Vec<PolicyRule>| -> anyhow::Result<()> {
        documents.push(document(&Role { metadata: meta(name, Some(namespace)), rules: Some(rules) })?);
        documents.push(document(&RoleBinding {
            metadata: meta(name, Some(namespace)),
            role_ref: role_ref("Role", name),
            subjects: Some(vec![subject.clone()]),
        })?);
        Ok(())
    };
    if let crate::controllers::Namespaces::Only(watched) = &namespaces {
        for namespace in watched {
            role(&identity.name, namespace, namespaced_rules(controllers, &scope.opt_ins))?;
        }
    }
    role(&format!("{}-leader-election", identity.name), &identity.namespace, leader_election_rules())?;
    if let Some(certificates) = scope.webhook_certificates.as_ref().filter(|_| crate::certificates::has_webhooks(controllers)) {
        role(
            &format!("{}-webhook-certificates", identity.name),
            &identity.namespace,
            crate::certificates::secret_rules(&certificates.secret),
        )?;
    }
    Ok(documents.join("---\n"))
}

pub(crate) fn document<T: Serialize + kube::Resource<DynamicType = ()>>(object: &T) -> anyhow::Result<String> {
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

    fn controller(rbac: fn() -> Vec<PolicyRule>) -> Controller {
        Controller {
            name: "x",
            crds: Vec::new,
            rbac,
            opt_in_rbac: &[],
            webhooks: crate::controllers::Webhooks::NONE,
            metrics_prefix: "blockwork_test",
            start: |_| crate::controllers::runnable(|_| async { Ok(()) }),
        }
    }

    #[test]
    fn rules_of_several_controllers_merge_per_resource() {
        let a = controller(|| vec![rule("", &["secrets"], &["get", "list"]), rule("events.k8s.io", &["events"], &["create"])]);
        let b = controller(|| vec![rule("", &["secrets"], &["watch", "get"])]);
        let rules = cluster_rules(&[a, b], &[]);
        let secrets = rules.iter().find(|r| r.resources.as_deref() == Some(&["secrets".to_owned()][..])).expect("secrets rule");
        assert_eq!(secrets.verbs, ["get", "list", "watch"]);
        assert_eq!(rules.iter().filter(|r| r.resources.as_deref() == Some(&["events".to_owned()][..])).count(), 1);
    }

    #[test]
    fn leases_are_not_granted_cluster_wide() {
        let rules = cluster_rules(&[], &[]);
        assert!(rules.iter().all(|r| r.resources.as_deref() != Some(&["leases".to_owned()][..])));
    }

    fn identity() -> Identity {
        Identity { name: "blockwork".into(), namespace: "blockwork-system".into(), service_account: "blockwork".into() }
    }

    #[test]
    fn manifests_bind_the_service_account() {
        let yaml = manifests(&[], &identity(), &Scope::default()).expect("renders");
        assert_eq!(yaml.matches("kind: ServiceAccount").count(), 2, "{yaml}");
        for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
            assert!(yaml.contains(&format!("kind: {kind}\n")), "{kind} missing:\n{yaml}");
        }
    }

    #[test]
    fn namespaced_mode_grants_a_role_per_namespace_and_only_reads_own_kinds_cluster_wide() {
        let cache = crate::controllers::registered().into_iter().filter(|c| c.name == "cache").collect::<Vec<_>>();
        let scope = Scope { namespaces: vec!["a".into(), "b".into()], ..Scope::default() };
        let yaml = manifests(&cache, &identity(), &scope).expect("renders");
        assert_eq!(yaml.lines().filter(|l| *l == "kind: Role").count(), 3, "two namespaces and the Lease:\n{yaml}");
        let cluster_role = yaml.split("---\n").find(|d| d.lines().any(|l| l == "kind: ClusterRole")).expect("a ClusterRole");
        assert!(cluster_role.contains("caches") && !cluster_role.contains("statefulsets"), "{cluster_role}");
        assert!(!cluster_role.contains("patch"), "{cluster_role}");
    }

    #[test]
    fn an_opt_in_adds_its_rules_only_when_asked_for() {
        let cert: Vec<Controller> = crate::controllers::registered().into_iter().filter(|c| c.name == "cert").collect();
        let secrets = |rules: &[PolicyRule]| rules.iter().any(|r| r.resources.as_deref() == Some(&["secrets".to_owned()][..]));
        assert!(!secrets(&cluster_rules(&cert, &[])), "least privilege: no Secrets without the opt-in");
        let granted = cluster_rules(&cert, &["cert.export-secrets".to_owned()]);
        let rule = granted.iter().find(|r| r.resources.as_deref() == Some(&["secrets".to_owned()][..])).expect("secrets");
        assert_eq!(rule.verbs, ["create", "delete", "get", "list", "patch", "watch"]);
        assert!(check_opt_ins(&cert, &["cert.export-secrets".to_owned()]).is_ok());
        let unknown = check_opt_ins(&cert, &["cert.secrets".to_owned()]).expect_err("an unknown opt-in");
        assert!(unknown.contains("cert.secrets") && unknown.contains("valid: cert.export-secrets"), "{unknown}");
    }

    #[test]
    fn a_feature_on_by_default_is_granted_unless_opted_out() {
        let cache: Vec<Controller> = crate::controllers::registered().into_iter().filter(|c| c.name == "cache").collect();
        let policies = |features: &[String]| {
            cluster_rules(&cache, features).iter().any(|r| r.resources.as_deref() == Some(&["networkpolicies".to_owned()][..]))
        };
        assert_eq!(features(&cache, &[], &[]), ["cache.network-policies"]);
        assert!(policies(&features(&cache, &[], &[])), "NetworkPolicies are on by default, and so are their permissions");
        assert!(!policies(&features(&cache, &[], &["cache.network-policies".to_owned()])), "least privilege once turned off");
        assert!(!policies(&[]), "the rules are the feature's, not the controller's");
    }

    #[test]
    fn self_managed_certificates_are_granted_by_name() {
        let scope = Scope {
            webhook_certificates: Some(WebhookCertificates { secret: "hooks-tls".into(), configuration_name: "hooks".into() }),
            ..Scope::default()
        };
        let yaml = manifests(&crate::controllers::registered(), &identity(), &scope).expect("renders");
        let injection = yaml
            .split("---\n")
            .find(|d| d.contains("name: blockwork-webhook-ca-injection\n") && d.lines().any(|l| l == "kind: ClusterRole"))
            .expect("injection role");
        assert!(injection.contains("caches.cache.blockwork.dev") && injection.contains("- hooks\n"), "{injection}");
        let secret = yaml
            .split("---\n")
            .find(|d| d.contains("name: blockwork-webhook-certificates\n") && d.lines().any(|l| l == "kind: Role"))
            .expect("secret role");
        assert!(secret.contains("hooks-tls") && secret.contains("namespace: blockwork-system"), "{secret}");
    }
}
