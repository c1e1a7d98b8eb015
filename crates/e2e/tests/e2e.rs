//! The end-to-end suite: a real node (scripts/node), Blockwork's image imported into it and
//! installed by its Helm chart, each scenario driven with kubectl and helm as a person would.
//!
//! One node for the whole suite, brought up before the first scenario and torn down after the
//! last whether they pass or fail (a killed run is cleaned up by the next `scripts/node up`).
//! Scenarios run one at a time: they share the node and the Helm release. A machine-wide lock
//! makes a second suite (another checkout's `make test`) wait for this one.

use std::fs::File;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use blockwork_e2e::{Node, eventually, unique};
use libtest_mimic::{Arguments, Failed, Trial};

const SUITE_LOCK: &str = "/run/blockwork-e2e.lock";

fn main() -> std::process::ExitCode {
    let mut args = Arguments::from_args();
    // Every scenario shares the node.
    args.test_threads = Some(1);

    let names = SCENARIOS.iter().map(|(name, _)| *name);
    if let Some(reason) = skip_reason() {
        println!("e2e: every scenario is skipped: {reason}");
        let trials = names.map(|name| Trial::test(name, || Ok(())).with_ignored_flag(true)).collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    if args.list {
        let trials = names.map(|name| Trial::test(name, || Ok(()))).collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }

    let conclusion = match Suite::start() {
        Ok(suite) => {
            let trials = SCENARIOS
                .iter()
                .map(|(name, scenario)| {
                    let suite = suite.clone();
                    let scenario = *scenario;
                    Trial::test(*name, move || scenario(&suite).map_err(|e| Failed::from(format!("{e:#}"))))
                })
                .collect();
            libtest_mimic::run(&args, trials)
        }
        Err(error) => {
            eprintln!("e2e: the node did not come up: {error:#}");
            let message = format!("{error:#}");
            let trials = names
                .map(|name| {
                    Trial::test(name, {
                        let m = message.clone();
                        move || Err(Failed::from(m))
                    })
                })
                .collect();
            libtest_mimic::run(&args, trials)
        }
    };
    if std::env::var_os("BLOCKWORK_E2E_KEEP_NODE").is_some() {
        eprintln!("e2e: BLOCKWORK_E2E_KEEP_NODE is set: the node stays up (scripts/node down removes it)");
    } else if let Err(error) = Node::down() {
        eprintln!("e2e: tearing the node down failed: {error:#}");
        return std::process::ExitCode::FAILURE;
    }
    conclusion.exit_code()
}

fn skip_reason() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        status.lines().find_map(|l| l.strip_prefix("Uid:")).map(|u| u.split_whitespace().next().unwrap_or("").to_owned())
    });
    (uid.as_deref() != Some("0")).then(|| "the node needs root (bridges, mounts, cgroups, iptables)".to_owned())
}

/// What every scenario gets: the node, and the lock that keeps other suites off it.
#[derive(Clone)]
struct Suite {
    node: Node,
    _lock: std::sync::Arc<File>,
}

impl Suite {
    fn start() -> Result<Self> {
        let lock = File::create(SUITE_LOCK).with_context(|| format!("creating {SUITE_LOCK}"))?;
        if lock.try_lock().is_err() {
            eprintln!("e2e: another end-to-end suite holds {SUITE_LOCK}; waiting for it");
            lock.lock()?;
        }
        let node = Node::up()?;
        Ok(Self { node, _lock: std::sync::Arc::new(lock) })
    }
}

type Scenario = fn(&Suite) -> Result<()>;

const SCENARIOS: &[(&str, Scenario)] = &[("node_runs_pods_that_reach_each_other_through_services_by_dns_name", node_runs_pods)];

/// The node itself: a pod is scheduled, started by the kubelet in containerd on the bridge
/// network, and a second pod reaches it through its Service by its DNS name (CoreDNS, then
/// kube-proxy's rules).
fn node_runs_pods(suite: &Suite) -> Result<()> {
    let node = &suite.node;
    let namespace = unique("node");
    node.kubectl(&["create", "namespace", &namespace])?;
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: server, namespace: {namespace}, labels: {{app: server}}}}
spec:
  containers:
  - name: redis
    image: docker.io/library/redis:7.2
    command: [redis-server, --port, "6379", --protected-mode, "no", --save, ""]
    readinessProbe: {{tcpSocket: {{port: 6379}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: server, namespace: {namespace}}}
spec:
  selector: {{app: server}}
  ports: [{{port: 6379}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: {namespace}}}
spec:
  containers:
  - name: client
    image: docker.io/library/redis:7.2
    command: [sleep, "3600"]
"#
    );
    node.kubectl_with_input(&["apply", "-f", "-"], &manifest)?;
    node.kubectl(&["-n", &namespace, "wait", "--for=condition=Ready", "pod/server", "pod/client", "--timeout=120s"])?;

    let address = format!("server.{namespace}.svc.cluster.local");
    let resolved = node.kubectl(&["-n", &namespace, "exec", "client", "--", "nslookup", &address])?;
    let service_ip = node.kubectl(&["-n", &namespace, "get", "service", "server", "-o", "jsonpath={.spec.clusterIP}"])?;
    if !resolved.contains(&service_ip) {
        bail!("{address} did not resolve to the Service's address {service_ip}:\n{resolved}");
    }
    let reply = eventually("the server answers through its Service", Duration::from_secs(30), || {
        let reply = node.kubectl(&["-n", &namespace, "exec", "client", "--", "redis-cli", "-h", &address, "set", "greeting", "hello"])?;
        Ok((reply.trim() == "OK").then_some(()))
    });
    reply?;
    let value = node.kubectl(&["-n", &namespace, "exec", "client", "--", "redis-cli", "-h", &address, "get", "greeting"])?;
    if value.trim() != "hello" {
        bail!("read back {value:?} instead of \"hello\"");
    }
    node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}
