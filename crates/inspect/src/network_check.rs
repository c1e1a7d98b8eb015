//! `blockwork check`'s NetworkPolicy probe: whether the Caches' NetworkPolicies are applied (the
//! running operator's `--cache-network-policies`) and whether anything enforces them. The API
//! cannot say the latter: a NetworkPolicy is stored whether or not the network plugin acts on it.
//! So the check recognises the implementations it knows by their DaemonSets and says so, and
//! says what it did not verify: that a connection is really refused (a pod in another namespace
//! connecting to a Cache's Service would tell; the e2e suite does exactly that).

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::finding::{Finding, Verdict};

const CHECK: &str = "Cache NetworkPolicies";

/// The NetworkPolicy implementations the check knows, by the name of the DaemonSet that runs
/// their agent on every node.
const IMPLEMENTATIONS: &[(&str, &str)] = &[
    ("kube-network-policies", "kube-network-policies (kind's)"),
    ("calico-node", "Calico"),
    ("canal", "Canal (Calico's policy engine)"),
    ("cilium", "Cilium"),
    ("anetd", "GKE Dataplane V2 (Cilium)"),
    ("antrea-agent", "Antrea"),
    ("kube-router", "kube-router"),
    ("weave-net", "Weave Net"),
    ("azure-npm", "Azure Network Policy Manager"),
];

/// Amazon VPC CNI enforces NetworkPolicies only when its node agent (a container of `aws-node`)
/// runs with this argument.
const AWS_NODE_AGENT: (&str, &str) = ("aws-eks-nodeagent", "--enable-network-policy=true");

/// What enforces NetworkPolicies among `daemonsets`, as "NAME (DaemonSet NS/NAME, READY/WANTED
/// ready)", and whether every one of them has all its pods ready.
fn recognised(daemonsets: &[DaemonSet]) -> Vec<(String, bool)> {
    daemonsets
        .iter()
        .filter_map(|daemonset| {
            let name = daemonset.name_any();
            let known = IMPLEMENTATIONS.iter().find(|(agent, _)| *agent == name).map(|(_, what)| *what);
            let aws = || {
                let containers = daemonset.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|p| p.containers.as_slice());
                containers
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.name == AWS_NODE_AGENT.0 && c.args.iter().flatten().any(|a| a == AWS_NODE_AGENT.1))
                    .then_some("Amazon VPC CNI's network policy agent")
            };
            let what = known.or_else(|| (name == "aws-node").then(aws).flatten())?;
            let status = daemonset.status.clone().unwrap_or_default();
            let (ready, wanted) = (status.number_ready, status.desired_number_scheduled);
            let namespace = daemonset.namespace().unwrap_or_default();
            Some((format!("{what} (DaemonSet {namespace}/{name}, {ready}/{wanted} ready)"), wanted > 0 && ready == wanted))
        })
        .collect()
}

/// The finding, from whether the operator applies NetworkPolicies (`applied`) and the cluster's
/// DaemonSets as listed.
pub fn finding(applied: bool, daemonsets: Result<&[DaemonSet], &kube::Error>) -> Finding {
    if !applied {
        return Finding::with(
            Verdict::Warn,
            CHECK,
            "off at install (--cache-network-policies=false): every Cache is reachable from every pod that reaches its pods, in any namespace",
            "install a NetworkPolicy implementation, then turn them on (the chart's controllers.cache.networkPolicies=true)",
        );
    }
    let daemonsets = match daemonsets {
        Ok(daemonsets) => daemonsets,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Finding::with(
                Verdict::Skip,
                CHECK,
                "applied to every Cache; whether anything enforces them was not tested: this identity may not list DaemonSets",
                "run check as someone who may list DaemonSets in every namespace",
            );
        }
        Err(error) => {
            return Finding::with(
                Verdict::Fail,
                CHECK,
                format!("applied to every Cache; listing DaemonSets failed: {error}"),
                "check the connection to the API server",
            );
        }
    };
    let found = recognised(daemonsets);
    let unverified = "recognised by its DaemonSet; no connection was tried";
    match found.iter().find(|(_, ready)| *ready) {
        Some((what, _)) => Finding::pass(CHECK, format!("applied to every Cache, enforced by {what} ({unverified})")),
        None if !found.is_empty() => {
            let all: Vec<&str> = found.iter().map(|(what, _)| what.as_str()).collect();
            Finding::with(
                Verdict::Warn,
                CHECK,
                format!(
                    "applied to every Cache, but {} has pods not ready: where its agent does not run, nothing enforces them",
                    all.join(", ")
                ),
                "look at its pods (`kubectl -n NAMESPACE get pods -o wide`): every node needs one",
            )
        }
        None => {
            let known: Vec<&str> = IMPLEMENTATIONS.iter().map(|(agent, _)| *agent).chain(["aws-node"]).collect();
            Finding::with(
                Verdict::Warn,
                CHECK,
                format!(
                    "applied to every Cache, but no NetworkPolicy implementation this check knows runs (no DaemonSet {}): a NetworkPolicy nothing enforces is stored and ignored, and every Cache is then reachable from every namespace. Not verified either way",
                    known.join(", ")
                ),
                "if your network plugin enforces NetworkPolicies, verify it: from a pod in another namespace, connect to a Cache's Service (it must time out); otherwise install one (Calico, Cilium, ...)",
            )
        }
    }
}

/// Lists the DaemonSets of every namespace and decides.
pub async fn check(client: &Client, applied: bool) -> Finding {
    if !applied {
        return finding(false, Ok(&[]));
    }
    match Api::<DaemonSet>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => finding(true, Ok(&list.items)),
        Err(error) => finding(true, Err(&error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSetSpec, DaemonSetStatus};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

    fn daemonset(namespace: &str, name: &str, ready: i32, wanted: i32) -> DaemonSet {
        let mut daemonset = DaemonSet {
            status: Some(DaemonSetStatus { number_ready: ready, desired_number_scheduled: wanted, ..DaemonSetStatus::default() }),
            ..DaemonSet::default()
        };
        daemonset.metadata.name = Some(name.into());
        daemonset.metadata.namespace = Some(namespace.into());
        daemonset
    }

    #[test]
    fn a_known_implementation_with_every_pod_ready_passes_and_says_it_was_not_tried() {
        let found = [daemonset("kube-system", "kube-proxy", 3, 3), daemonset("calico-system", "calico-node", 3, 3)];
        let finding = finding(true, Ok(&found));
        assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
        assert!(finding.detail.contains("Calico (DaemonSet calico-system/calico-node, 3/3 ready)"), "{}", finding.detail);
        assert!(finding.detail.contains("no connection was tried"), "{}", finding.detail);
    }

    #[test]
    fn an_implementation_missing_on_some_nodes_is_a_warning() {
        let finding = finding(true, Ok(&[daemonset("kube-system", "cilium", 2, 3)]));
        assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
        assert!(finding.detail.contains("2/3 ready"), "{}", finding.detail);
    }

    #[test]
    fn no_known_implementation_is_a_warning_that_says_nothing_was_verified() {
        let finding = finding(true, Ok(&[daemonset("kube-system", "kube-proxy", 1, 1), daemonset("kube-system", "flannel", 1, 1)]));
        assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
        assert!(finding.detail.contains("Not verified") && finding.detail.contains("calico-node"), "{}", finding.detail);
        assert!(finding.fix.as_deref().is_some_and(|fix| fix.contains("another namespace")));
    }

    #[test]
    fn amazon_vpc_cni_counts_only_with_its_policy_agent_on() {
        let with_agent = |args: &[&str]| {
            let mut aws = daemonset("kube-system", "aws-node", 2, 2);
            aws.spec = Some(DaemonSetSpec {
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "aws-eks-nodeagent".into(),
                            args: Some(args.iter().map(|a| (*a).to_owned()).collect()),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                    ..PodTemplateSpec::default()
                },
                ..DaemonSetSpec::default()
            });
            finding(true, Ok(&[aws])).verdict
        };
        assert_eq!(with_agent(&["--enable-network-policy=true"]), Verdict::Pass);
        assert_eq!(with_agent(&["--enable-network-policy=false"]), Verdict::Warn);
    }

    #[test]
    fn policies_off_at_install_are_a_warning_whatever_runs() {
        let finding = finding(false, Ok(&[daemonset("calico-system", "calico-node", 3, 3)]));
        assert_eq!(finding.verdict, Verdict::Warn);
        assert!(finding.detail.contains("off at install"), "{}", finding.detail);
    }

    #[test]
    fn daemonsets_this_identity_may_not_list_skip_the_check() {
        let forbidden = kube::Error::Api(kube::core::Status::failure("forbidden", "Forbidden").with_code(403).boxed());
        assert_eq!(finding(true, Err(&forbidden)).verdict, Verdict::Skip);
    }
}
