//! Pure: who may connect to a Cache. Its author says which clients (`spec.access`: the pods of
//! its own namespace, narrowed by a pod selector, widened by namespaces named one by one); the
//! platform says at install where Blockwork's own peers run ([`Peers`]: the operator, which asks
//! Sentinel for the primary, and Prometheus, which scrapes the exporters). [`spec`] makes of both
//! the NetworkPolicy that isolates the Cache's pods: ingress from those, each on the ports it
//! needs, and from nothing else. Egress stays open (ADR 0021 says why).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{KubeSchema, ResourceExt};
use serde::{Deserialize, Serialize};

use blockwork_runtime::status::condition as new_condition;

use crate::api::Cache;
use crate::shape::{self, SENTINEL_PORT, Topology};

/// The label Kubernetes puts on every namespace, with its name: how a NetworkPolicy names a
/// namespace (a name cannot be forged by whoever may label a namespace, since Kubernetes keeps it).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The most namespaces `spec.access.namespaces` lists: an allow-list, not a directory.
pub const MAX_NAMESPACES: u32 = 32;
/// The condition that says whether a NetworkPolicy isolates the Cache's pods.
pub const NETWORK_ISOLATED: &str = "NetworkIsolated";

/// Who may connect to the Cache, besides Blockwork itself. Enforced by a NetworkPolicy that
/// Blockwork applies with the Cache (unless the installation turned them off: the
/// `NetworkIsolated` condition says which); without `access`, only the pods of the Cache's own
/// namespace may connect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// Only the pods this selects may connect, in the Cache's namespace and in `namespaces` (a
    /// label selector: `matchLabels`, `matchExpressions`) [default: every pod of those
    /// namespaces].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])").message("spec.access.podSelector.matchExpressions: operator must be In, NotIn, Exists or DoesNotExist"))]
    #[x_kube(validation = Rule::new("!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))").message("spec.access.podSelector.matchExpressions: In and NotIn need values, Exists and DoesNotExist take none"))]
    pub pod_selector: Option<LabelSelector>,
    /// Other namespaces whose pods may connect too, each by its name (at most 32, no wildcard)
    /// [default: none, the Cache's own namespace only].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_NAMESPACES), inner(length(max = 63)), extend("x-kubernetes-list-type" = "set"))]
    #[x_kube(validation = Rule::new("self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))").message("spec.access.namespaces lists namespaces by name: each a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters); there is no wildcard, list each namespace"))]
    pub namespaces: Vec<String>,
}

/// Pods Blockwork itself runs or talks to, as set at install: those with `labels` in
/// `namespace` (`None`: in every namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Where Blockwork's own peers of every Cache run: what its NetworkPolicy lets in besides the
/// clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peers {
    /// The operator's pods: they ask the Sentinels of replicated Caches for the primary.
    pub operator: Peer,
    /// The pods that scrape the exporters (Prometheus), when the exporters run.
    pub scraper: Peer,
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort { port: Some(IntOrString::Int(port)), protocol: Some("TCP".into()), ..NetworkPolicyPort::default() }
}

fn labelled(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector { match_labels: (!labels.is_empty()).then(|| labels.clone()), ..LabelSelector::default() }
}

/// The namespaces named, by Kubernetes' own label.
fn named(namespaces: &[String]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: NAMESPACE_NAME_LABEL.into(),
            operator: "In".into(),
            values: Some(namespaces.to_vec()),
        }]),
        ..LabelSelector::default()
    }
}

/// The pods of `peer`: in its namespace, or in every namespace.
fn peer(peer: &Peer) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(peer.namespace.as_ref().map(|n| named(std::slice::from_ref(n))).unwrap_or_default()),
        pod_selector: Some(labelled(&peer.labels)),
        ..NetworkPolicyPeer::default()
    }
}

fn rule(from: Vec<NetworkPolicyPeer>, ports: &[i32]) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule { from: Some(from), ports: Some(ports.iter().copied().map(tcp).collect()) }
}

/// The ports clients use: the server's, and Sentinel's when it runs.
fn client_ports(cache: &Cache) -> Vec<i32> {
    let mut ports = vec![shape::port(cache.spec.engine)];
    if shape::has_sentinel(cache) {
        ports.push(SENTINEL_PORT);
    }
    ports
}

/// The ports the operator connects to: Sentinel's, to ask for the primary (`status.primary`),
/// when Sentinel runs; no other.
fn operator_ports(cache: &Cache) -> Vec<i32> {
    if shape::has_sentinel(cache) { vec![SENTINEL_PORT] } else { Vec::new() }
}

/// The NetworkPolicy of `cache`'s pods (the ones its Services select): ingress only
/// - from its clients: the pods of its namespace and of the namespaces `spec.access` names,
///   those `spec.access.podSelector` selects, on the server's port (and Sentinel's);
/// - from its own pods, when they replicate: the server's port, and Sentinel's for the Sentinels;
/// - from the operator's pods, on the ports it connects to ([`operator_ports`]);
/// - from the scrapers, when the exporters run (`exporter`): the exporter's port.
pub fn spec(cache: &Cache, peers: &Peers, exporter: bool) -> NetworkPolicySpec {
    let access = cache.spec.access.clone().unwrap_or_default();
    let clients = access.pod_selector.unwrap_or_default();
    let mut from = vec![NetworkPolicyPeer { pod_selector: Some(clients.clone()), ..NetworkPolicyPeer::default() }];
    if !access.namespaces.is_empty() {
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(named(&access.namespaces)),
            pod_selector: Some(clients),
            ..NetworkPolicyPeer::default()
        });
    }
    let mut ingress = vec![rule(from, &client_ports(cache))];
    if let Topology::Replicated { .. } = shape::topology(cache) {
        let own = NetworkPolicyPeer { pod_selector: Some(labelled(&shape::selector(cache))), ..NetworkPolicyPeer::default() };
        ingress.push(rule(vec![own], &client_ports(cache)));
    }
    let operator = operator_ports(cache);
    if !operator.is_empty() {
        ingress.push(rule(vec![peer(&peers.operator)], &operator));
    }
    if exporter {
        ingress.push(rule(vec![peer(&peers.scraper)], &[shape::exporter_port(cache.spec.engine)]));
    }
    NetworkPolicySpec {
        pod_selector: Some(labelled(&shape::selector(cache))),
        policy_types: Some(vec!["Ingress".into()]),
        ingress: Some(ingress),
        ..NetworkPolicySpec::default()
    }
}

/// The `NetworkIsolated` condition of `cache`: whether the installation `applies` NetworkPolicies.
pub fn condition(cache: &Cache, applies: bool) -> Condition {
    let generation = cache.metadata.generation;
    if !applies {
        let message = "this installation applies no NetworkPolicy (blockwork run --cache-network-policies=false, the chart's controllers.cache.networkPolicies): any pod that reaches the Cache's pods may connect";
        return new_condition(NETWORK_ISOLATED, false, "NetworkPoliciesOff", message, generation);
    }
    let access = cache.spec.access.clone().unwrap_or_default();
    let mut namespaces = vec![cache.namespace().unwrap_or_default()];
    namespaces.extend(access.namespaces);
    let which = if access.pod_selector.is_some() { "pods spec.access.podSelector selects" } else { "pods" };
    let message = format!(
        "NetworkPolicy {} admits clients only from {which} of namespace{} {}, besides Blockwork's own peers; enforced where the cluster's network plugin enforces NetworkPolicies (`blockwork check` says)",
        shape::resource_name(cache),
        if namespaces.len() > 1 { "s" } else { "" },
        namespaces.join(", ")
    );
    new_condition(NETWORK_ISOLATED, true, "NetworkPolicyApplied", &message, generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CacheSpec, Engine, EvictionPolicy, HighAvailability};

    fn cache(engine: Engine, high_availability: Option<HighAvailability>) -> Cache {
        let mut cache = Cache::new(
            "c",
            CacheSpec {
                engine,
                memory: "64Mi".into(),
                replicas: 3,
                eviction_policy: EvictionPolicy::AllkeysLru,
                access: None,
                tls: None,
                high_availability,
            },
        );
        cache.metadata.namespace = Some("team-a".into());
        cache
    }

    fn sentinel() -> Option<HighAvailability> {
        Some(HighAvailability { enabled: true, auto_failover: true })
    }

    fn peers() -> Peers {
        Peers {
            operator: Peer { namespace: Some("blockwork-system".into()), labels: map(&[("app.kubernetes.io/name", "blockwork")]) },
            scraper: Peer { namespace: Some("monitoring".into()), labels: map(&[("app.kubernetes.io/name", "prometheus")]) },
        }
    }

    fn ports(rule: &NetworkPolicyIngressRule) -> Vec<i32> {
        rule.ports
            .iter()
            .flatten()
            .filter_map(|p| match p.port {
                Some(IntOrString::Int(port)) => Some(port),
                _ => None,
            })
            .collect()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_policy_selects_the_cache_s_pods_for_ingress_only() {
        let spec = spec(&cache(Engine::Memcached, None), &peers(), false);
        assert_eq!(spec.pod_selector.and_then(|s| s.match_labels), Some(shape::selector(&cache(Engine::Memcached, None))));
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]), "egress stays open");
    }

    #[test]
    fn by_default_only_pods_of_the_cache_s_namespace_connect_and_only_to_the_server() {
        let ingress = spec(&cache(Engine::Memcached, None), &peers(), false).ingress.expect("rules");
        assert_eq!(ingress.len(), 1, "standalone servers have no peer but their clients: {ingress:?}");
        let from = ingress[0].from.clone().expect("peers");
        assert_eq!(from, [NetworkPolicyPeer { pod_selector: Some(LabelSelector::default()), ..NetworkPolicyPeer::default() }]);
        assert_eq!(ports(&ingress[0]), [11211]);
    }

    #[test]
    fn named_namespaces_are_let_in_by_their_name_label() {
        let mut c = cache(Engine::Redis, None);
        c.spec.access = Some(Access { namespaces: vec!["team-b".into(), "team-c".into()], ..Access::default() });
        let from = spec(&c, &peers(), false).ingress.expect("rules")[0].from.clone().expect("peers");
        let namespaces = from[1].namespace_selector.clone().and_then(|s| s.match_expressions).expect("by name");
        assert_eq!(
            (namespaces[0].key.as_str(), namespaces[0].operator.as_str(), namespaces[0].values.clone()),
            (NAMESPACE_NAME_LABEL, "In", Some(vec!["team-b".to_owned(), "team-c".to_owned()]))
        );
    }

    #[test]
    fn a_pod_selector_narrows_the_clients_of_every_namespace_let_in() {
        let mut c = cache(Engine::Redis, None);
        let selector = LabelSelector { match_labels: Some(map(&[("app", "checkout")])), ..LabelSelector::default() };
        c.spec.access = Some(Access { pod_selector: Some(selector.clone()), namespaces: vec!["team-b".into()] });
        let from = spec(&c, &peers(), false).ingress.expect("rules")[0].from.clone().expect("peers");
        assert!(from.iter().all(|peer| peer.pod_selector.as_ref() == Some(&selector)), "{from:?}");
    }

    #[test]
    fn replicas_and_sentinels_reach_each_other_whatever_the_clients_selector() {
        let mut c = cache(Engine::Valkey, sentinel());
        c.spec.access = Some(Access {
            pod_selector: Some(LabelSelector { match_labels: Some(map(&[("app", "checkout")])), ..LabelSelector::default() }),
            ..Access::default()
        });
        let ingress = spec(&c, &peers(), false).ingress.expect("rules");
        assert_eq!(ports(&ingress[0]), [6379, SENTINEL_PORT]);
        let own = ingress[1].from.clone().expect("peers");
        assert_eq!(own[0].pod_selector.clone().and_then(|s| s.match_labels), Some(shape::selector(&c)));
        assert_eq!(own[0].namespace_selector, None, "the Cache's own namespace only");
        assert_eq!(ports(&ingress[1]), [6379, SENTINEL_PORT]);
    }

    #[test]
    fn replicas_without_sentinel_reach_only_the_server_port() {
        let c = cache(Engine::Redis, Some(HighAvailability { enabled: true, auto_failover: false }));
        let ingress = spec(&c, &peers(), false).ingress.expect("rules");
        assert_eq!(ingress.len(), 2, "clients and replicas, no operator: {ingress:?}");
        assert_eq!(ports(&ingress[1]), [6379]);
    }

    #[test]
    fn the_operator_reaches_only_sentinel_from_its_namespace_and_pods() {
        let ingress = spec(&cache(Engine::Redis, sentinel()), &peers(), false).ingress.expect("rules");
        let operator = &ingress[2];
        assert_eq!(ports(operator), [SENTINEL_PORT]);
        let from = &operator.from.as_ref().expect("peers")[0];
        assert_eq!(
            from.namespace_selector.clone().and_then(|s| s.match_expressions).expect("by name")[0].values,
            Some(vec!["blockwork-system".to_owned()])
        );
        assert_eq!(from.pod_selector.clone().and_then(|s| s.match_labels), Some(map(&[("app.kubernetes.io/name", "blockwork")])));
    }

    #[test]
    fn the_scrapers_reach_only_the_exporter_and_only_when_it_runs() {
        let with = spec(&cache(Engine::Memcached, None), &peers(), true).ingress.expect("rules");
        let scraper = with.last().expect("a rule");
        assert_eq!(ports(scraper), [shape::MEMCACHED_EXPORTER_PORT]);
        let from = &scraper.from.as_ref().expect("peers")[0];
        assert_eq!(
            from.namespace_selector.clone().and_then(|s| s.match_expressions).expect("by name")[0].values,
            Some(vec!["monitoring".to_owned()])
        );
        let anywhere = Peers { scraper: Peer { namespace: None, ..peers().scraper }, ..peers() };
        let from = spec(&cache(Engine::Redis, None), &anywhere, true).ingress.expect("rules")[1].from.clone().expect("peers");
        assert_eq!(from[0].namespace_selector, Some(LabelSelector::default()), "every namespace, Prometheus' pods only");
        assert_eq!(from[0].pod_selector.clone().and_then(|s| s.match_labels), Some(map(&[("app.kubernetes.io/name", "prometheus")])));
        assert!(spec(&cache(Engine::Redis, None), &anywhere, false).ingress.expect("rules").len() == 1, "no exporter, no scraper");
    }

    #[test]
    fn the_condition_says_whether_a_policy_isolates_the_pods() {
        let mut c = cache(Engine::Redis, None);
        c.spec.access = Some(Access { namespaces: vec!["team-b".into()], ..Access::default() });
        let on = condition(&c, true);
        assert_eq!((on.status.as_str(), on.reason.as_str()), ("True", "NetworkPolicyApplied"));
        assert!(on.message.contains("c-cache") && on.message.contains("team-a, team-b"), "{}", on.message);
        let off = condition(&c, false);
        assert_eq!((off.status.as_str(), off.reason.as_str()), ("False", "NetworkPoliciesOff"));
        assert!(off.message.contains("any pod"), "{}", off.message);
    }
}
