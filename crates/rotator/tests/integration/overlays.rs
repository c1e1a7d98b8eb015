//! The Kustomize overlays: rendered with `kubectl kustomize`, checked, and their RBAC applied to
//! the test API server and used (by impersonating their ServiceAccount) to run the rotator.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::support::*;
use blockwork_rotator::{Config, RotatorArgs};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// kubectl from the pinned test tools, else from PATH.
fn kubectl() -> PathBuf {
    let dir = std::env::var_os("BLOCKWORK_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/blockwork-tools")));
    dir.map(|d| d.join("bin/kubectl")).filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// `kubectl kustomize` of an overlay, optionally wrapped in a kustomization of the user's own
/// that moves it to `namespace` and appends `suffix` to every name.
fn render(overlay: &str, wrap: Option<(&str, &str)>) -> Vec<Value> {
    let overlay_dir = repo().join("config/overlays").join(overlay);
    let temp = tempfile::tempdir().unwrap();
    let dir = match wrap {
        None => overlay_dir,
        Some((namespace, suffix)) => {
            let temp_dir = temp.path().canonicalize().unwrap();
            // Kustomize wants relative paths.
            let up = temp_dir.components().filter(|c| matches!(c, Component::Normal(_))).count();
            let relative = Path::new(&"../".repeat(up)).join(overlay_dir.strip_prefix("/").unwrap());
            let kustomization = format!("namespace: {namespace}\nnameSuffix: {suffix}\nresources:\n  - {}\n", relative.display());
            std::fs::write(temp_dir.join("kustomization.yaml"), kustomization).unwrap();
            temp_dir
        }
    };
    let output = Command::new(kubectl()).arg("kustomize").arg(&dir).output().unwrap();
    assert!(output.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&output.stderr));
    serde_saphyr::from_multiple::<Value>(&String::from_utf8(output.stdout).unwrap()).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn container(docs: &[Value]) -> &Value {
    let deployments = of_kind(docs, "Deployment");
    assert_eq!(deployments.len(), 1);
    &deployments[0]["spec"]["template"]["spec"]["containers"][0]
}

fn env_names(docs: &[Value]) -> Vec<String> {
    container(docs)["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_owned()).collect()
}

/// Every rule of every (Cluster)Role: no deletes, no wildcards.
fn assert_least_privilege(docs: &[Value]) {
    for role in of_kind(docs, "Role").into_iter().chain(of_kind(docs, "ClusterRole")) {
        for rule in role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
            assert!(!verbs.contains(&"delete") && !verbs.contains(&"deletecollection") && !verbs.contains(&"*"), "{rule}");
            assert!(!rule["resources"].as_array().unwrap().iter().any(|r| r == "*"), "{rule}");
        }
    }
}

#[test]
fn the_overlays_render_as_the_seed_describes() {
    for overlay in ["clusterwide", "namespaced"] {
        let docs = render(overlay, None);
        for doc in docs.iter().filter(|d| d["kind"] != "Namespace" && !d["kind"].as_str().unwrap().starts_with("Cluster")) {
            assert_eq!(doc["metadata"]["namespace"], "tls-rotator-system", "{overlay}: {}", doc["metadata"]["name"]);
        }
        let deployment = of_kind(&docs, "Deployment")[0];
        assert_eq!(deployment["metadata"]["labels"]["control-plane"], "controller-manager", "the seed's `kubectl logs -l` works");
        let args: Vec<&str> = container(&docs)["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert!(args.contains(&"run") && args.contains(&"--controllers=rotator") && args.contains(&"--leader-elect"), "{args:?}");
        assert_least_privilege(&docs);
        let lease_role = of_kind(&docs, "Role").into_iter().find(|r| r["rules"][0]["resources"][0] == "leases");
        assert!(lease_role.is_some(), "{overlay}: leader election has its Role");
    }

    let clusterwide = render("clusterwide", None);
    assert_eq!(of_kind(&clusterwide, "ClusterRole").len(), 1);
    assert_eq!(of_kind(&clusterwide, "ClusterRoleBinding").len(), 1);
    assert!(!env_names(&clusterwide).contains(&"ROTATOR_NAMESPACES".to_owned()), "all namespaces");

    let namespaced = render("namespaced", None);
    assert!(of_kind(&namespaced, "ClusterRole").is_empty() && of_kind(&namespaced, "ClusterRoleBinding").is_empty());
    let env = container(&namespaced)["env"].as_array().unwrap().iter().find(|e| e["name"] == "ROTATOR_NAMESPACES").cloned().unwrap();
    assert_eq!(env["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace", "watches only its own namespace");
    assert_eq!(of_kind(&namespaced, "RoleBinding").len(), 2);
}

/// The overlays are the rotator's RBAC for Kustomize users; `blockwork rbac` generates it from
/// `blockwork_rotator::rbac()`. Both must grant the same on Secrets.
#[test]
fn the_overlays_grant_what_the_rotator_declares() {
    let declared: Vec<Value> = blockwork_rotator::rbac().iter().map(|rule| serde_json::to_value(rule).unwrap()).collect();
    for (overlay, kind) in [("clusterwide", "ClusterRole"), ("namespaced", "Role")] {
        let docs = render(overlay, None);
        let secret_rules: Vec<Value> = of_kind(&docs, kind)
            .into_iter()
            .flat_map(|role| role["rules"].as_array().unwrap().clone())
            .filter(|rule| rule["resources"].as_array().unwrap().iter().any(|r| r == "secrets"))
            .collect();
        assert_eq!(secret_rules, declared, "{overlay}");
    }
}

/// Server-side applies every rendered object but the Namespace (the test's exists).
async fn apply(client: &Client, docs: &[Value]) {
    for doc in docs.iter().filter(|d| d["kind"] != "Namespace") {
        let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let types = object.types.clone().unwrap();
        let (group, version) = types.api_version.rsplit_once('/').unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = match (capabilities.scope, object.namespace()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), &ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&object.name_any(), &PatchParams::apply("rotator-overlay-test").force(), &Patch::Apply(&object)).await.unwrap();
    }
}

/// A client that acts as the overlay's ServiceAccount.
fn impersonating(h: &Harness, docs: &[Value]) -> (Client, String) {
    let account = of_kind(docs, "ServiceAccount")[0];
    let (name, namespace) = (account["metadata"]["name"].as_str().unwrap(), account["metadata"]["namespace"].as_str().unwrap());
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let mut config = h.plane.kube_config();
    config.auth_info.impersonate = Some(user.clone());
    config.auth_info.impersonate_groups =
        Some(vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}"), "system:authenticated".into()]);
    (Client::try_from(config).unwrap(), user)
}

async fn allowed(client: &Client, user: &str, namespace: &str, group: &str, resource: &str, verb: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                verb: Some(verb.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviewed = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await.unwrap();
    reviewed.status.unwrap().allowed
}

#[tokio::test]
async fn the_namespaced_overlay_grants_enough_to_rotate_in_its_namespace_only() {
    let mut h = Harness::new("overlay-namespaced").await;
    let docs = render("namespaced", Some((&h.namespace, &format!("-{}", h.namespace))));
    apply(&h.client, &docs).await;
    let (client, user) = impersonating(&h, &docs);
    let other = h.plane.namespace("overlay-namespaced-other").await.unwrap();

    assert!(allowed(&h.client, &user, &h.namespace, "coordination.k8s.io", "leases", "create").await);
    assert!(allowed(&h.client, &user, &h.namespace, "", "secrets", "watch").await);
    assert!(!allowed(&h.client, &user, &h.namespace, "", "secrets", "delete").await, "never deletes");
    assert!(!allowed(&h.client, &user, &other, "", "secrets", "get").await, "nothing outside its namespace");

    let forbidden = Api::<Secret>::namespaced(client.clone(), &other).list(&Default::default()).await;
    assert!(matches!(forbidden, Err(kube::Error::Api(ref s)) if s.code == 403), "{forbidden:?}");

    // ROTATOR_NAMESPACES as the fieldRef sets it: the pod's namespace.
    h.start_controller_with(client);
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    let target = h.wait_for_next("target", "cert-1").await;
    assert_eq!(slots(&target), ["", "cert", "cert-1"]);
    h.wait_for_event("target", "Rotated").await;
}

#[tokio::test]
async fn the_clusterwide_overlay_grants_enough_to_rotate_everywhere() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let home = plane.namespace("overlay-clusterwide").await.unwrap();
    let elsewhere = plane.namespace("overlay-clusterwide-app").await.unwrap();
    let args = RotatorArgs { annotation_prefix: "overlay.clusterwide.rotator.test".into(), ..RotatorArgs::default() };
    let mut h = Harness::with_config(&elsewhere, Config::new(&args, &[], 2).unwrap()).await;
    let docs = render("clusterwide", Some((&home, &format!("-{home}"))));
    apply(&h.client, &docs).await;
    let (client, user) = impersonating(&h, &docs);

    assert!(allowed(&h.client, &user, &home, "coordination.k8s.io", "leases", "update").await);
    assert!(!allowed(&h.client, &user, &elsewhere, "coordination.k8s.io", "leases", "create").await, "leases only at home");
    assert!(allowed(&h.client, &user, &elsewhere, "", "secrets", "list").await);
    assert!(allowed(&h.client, &user, &elsewhere, "events.k8s.io", "events", "create").await);
    assert!(!allowed(&h.client, &user, &elsewhere, "", "secrets", "delete").await, "never deletes");

    h.start_controller_with(client);
    h.create_source("source", "target", "cert", "key").await;
    h.wait_for_next("target", "cert").await;
    h.renew("source", "cert-1", "key-1").await;
    h.wait_for_next("target", "cert-1").await;
    h.wait_for_event("target", "Rotated").await;
    let api: Api<Secret> = Api::namespaced(h.client.clone(), &home);
    assert!(api.get_opt("target").await.unwrap().is_none());
}
