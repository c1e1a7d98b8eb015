//! A Cache's NetworkPolicy against a real API server (issue 39): the policy the controller
//! renders is one the API server takes, with the rules `spec.access` and the install's peers
//! make; it is repaired when edited and deleted with the Cache; `spec.access` the schema refuses
//! is refused with its message; and with NetworkPolicies off at install there is none, and the
//! status says so. Whether a policy is enforced is tested where it is: on the e2e node.

use blockwork_cache::access::{Access, NAMESPACE_NAME_LABEL};
use blockwork_cache::api::{Engine, HighAvailability};
use blockwork_cache::settings::{CacheArgs, Settings};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Harness, cache, condition, rejection};

/// The ports of each ingress rule, in order.
fn rule_ports(policy: &NetworkPolicy) -> Vec<Vec<i32>> {
    let ingress = policy.spec.as_ref().and_then(|s| s.ingress.clone()).unwrap_or_default();
    ingress
        .iter()
        .map(|rule| {
            rule.ports
                .iter()
                .flatten()
                .filter_map(|p| match p.port {
                    Some(IntOrString::Int(port)) => Some(port),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_cache_is_isolated_by_a_network_policy_the_api_server_takes_with_every_rule_it_needs() {
    let mut args = CacheArgs { exporter: true, ..CacheArgs::default() };
    args.network.scraper_namespace = Some("monitoring".into());
    let h = Harness::start_with_settings("cache-netpol", Settings::from_args(&args).unwrap()).await;
    let mut ha = cache("ha", Engine::Valkey, "64Mi", 3);
    ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
    ha.spec.access = Some(Access {
        pod_selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), "checkout".to_owned())].into()),
            ..LabelSelector::default()
        }),
        namespaces: vec!["team-b".into()],
    });
    h.api().create(&PostParams::default(), &ha).await.unwrap();
    let policy = h.eventually("the NetworkPolicy", async || h.api_of::<NetworkPolicy>().get_opt("ha-cache").await.unwrap()).await;
    assert_eq!(policy.metadata.owner_references.as_ref().unwrap()[0].kind, "Cache");
    let spec = policy.spec.clone().unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    // Clients, the Cache's own pods, the operator, the scrapers: each on its ports only.
    assert_eq!(rule_ports(&policy), [vec![6379, 26379], vec![6379, 26379], vec![26379], vec![9121]]);
    let clients = spec.ingress.as_ref().unwrap()[0].from.clone().unwrap();
    let named = clients[1].namespace_selector.clone().and_then(|s| s.match_expressions).unwrap();
    assert_eq!((named[0].key.as_str(), named[0].values.clone()), (NAMESPACE_NAME_LABEL, Some(vec!["team-b".to_owned()])));
    let (status, reason, message) =
        h.eventually("NetworkIsolated", async || condition(&h.api().get("ha").await.unwrap(), "NetworkIsolated")).await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NetworkPolicyApplied"));
    assert!(message.contains(&format!("{}, team-b", h.namespace)), "{message}");

    // A hand edit that lets everyone in is repaired.
    let open = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "spec": {"ingress": [{}]}});
    h.api_of::<NetworkPolicy>().patch("ha-cache", &PatchParams::apply("someone-else").force(), &Patch::Apply(open)).await.unwrap();
    h.eventually("the repair", async || (rule_ports(&h.api_of::<NetworkPolicy>().get("ha-cache").await.unwrap()).len() == 4).then_some(()))
        .await;
    // Narrowing the access narrows the policy.
    h.merge("ha", json!({"spec": {"access": {"namespaces": null}}})).await;
    h.eventually("the narrower policy", async || {
        let policy = h.api_of::<NetworkPolicy>().get("ha-cache").await.unwrap();
        let clients = policy.spec.and_then(|s| s.ingress).unwrap_or_default()[0].from.clone().unwrap_or_default();
        (clients.len() == 1).then_some(())
    })
    .await;
    h.delete_and_wait("ha").await;
    assert!(h.api_of::<NetworkPolicy>().get_opt("ha-cache").await.unwrap().is_none(), "deleted with the Cache");
}

#[tokio::test]
async fn with_network_policies_off_at_install_there_is_none_and_the_status_says_so() {
    let mut args = CacheArgs::default();
    args.network.enabled = false;
    let h = Harness::start_with_settings("cache-netpol-off", Settings::from_args(&args).unwrap()).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Memcached, "64Mi", 1)).await.unwrap();
    let (status, reason, message) =
        h.eventually("NetworkIsolated", async || condition(&h.api().get("c").await.unwrap(), "NetworkIsolated")).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NetworkPoliciesOff"));
    assert!(message.contains("any pod that reaches the Cache's pods may connect"), "{message}");
    assert!(h.api_of::<StatefulSet>().get_opt("c-cache").await.unwrap().is_some(), "the Cache's other objects are applied");
    assert!(h.api_of::<NetworkPolicy>().get_opt("c-cache").await.unwrap().is_none());
}

#[tokio::test]
async fn access_that_names_no_namespace_or_selects_no_pods_is_rejected_with_its_message() {
    let h = Harness::start("cache-access-invalid").await;
    let spec = |access: serde_json::Value| json!({"engine": "redis", "memory": "64Mi", "access": access});
    for namespaces in [json!(["*"]), json!(["Team-B"]), json!(["team_b"]), json!(["-team"])] {
        let message = rejection(&h, "bad", spec(json!({"namespaces": namespaces}))).await;
        assert!(
            message.contains("spec.access.namespaces lists namespaces by name") && message.contains("no wildcard"),
            "{namespaces}: {message}"
        );
    }
    let twice = rejection(&h, "bad", spec(json!({"namespaces": ["team-b", "team-b"]}))).await;
    assert!(twice.contains("spec.access.namespaces") && twice.contains("Duplicate value"), "{twice}");
    let many: Vec<String> = (0..33).map(|i| format!("team-{i}")).collect();
    let too_many = rejection(&h, "bad", spec(json!({"namespaces": many}))).await;
    assert!(too_many.contains("spec.access.namespaces") && too_many.contains("must have at most 32 items"), "{too_many}");
    let operator = rejection(&h, "bad", spec(json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "Has"}]}}))).await;
    assert!(operator.contains("operator must be In, NotIn, Exists or DoesNotExist"), "{operator}");
    let no_values = rejection(&h, "bad", spec(json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}))).await;
    assert!(no_values.contains("In and NotIn need values"), "{no_values}");
    let valid = json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}, {"key": "tier", "operator": "Exists"}]}, "namespaces": ["team-b"]});
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(h.client.clone(), &h.namespace, &kube::api::ApiResource::erase::<blockwork_cache::api::Cache>(&()));
    let object = json!({"apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache", "metadata": {"name": "good"}, "spec": spec(valid)});
    api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
}
