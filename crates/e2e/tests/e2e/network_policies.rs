//! Who may connect to a Cache, enforced where it is tested (issue 39): the node runs kind's
//! NetworkPolicy implementation (kube-network-policies, scripts/node), and every Cache gets its
//! NetworkPolicy from the operator. Pods of the Cache's namespace connect; a pod of another
//! namespace does not (its connection times out), unless `spec.access.namespaces` names its
//! namespace; `spec.access.podSelector` narrows the clients; only the scrapers set at install
//! reach the exporter. For redis, valkey and memcached, plain and TLS. (Replication, Sentinel's
//! failover and the operator's Sentinel queries under the policies: the HA scenarios.)

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use blockwork_e2e::eventually;

use super::{CLIENT, CLIENT_IMAGE, CLIENT_NAMESPACE, RESTRICTED_CONTAINER, RESTRICTED_POD, Suite, cache_ready, tls_secret};

/// A pod of the suite's client image (redis-cli, busybox, openssl) in `namespace`, labelled
/// `labels` (a YAML flow map), with each TLS Secret of `secrets` at `/tls/<secret>`.
fn client_pod(suite: &Suite, namespace: &str, name: &str, labels: &str, secrets: &[&str]) -> Result<()> {
    let mounts: String = secrets.iter().map(|s| format!("    - {{name: {s}, mountPath: /tls/{s}}}\n")).collect();
    let volumes: String = secrets.iter().map(|s| format!("  - {{name: {s}, secret: {{secretName: {s}}}}}\n")).collect();
    let (mounts, volumes) = if secrets.is_empty() {
        (String::new(), String::new())
    } else {
        (format!("    volumeMounts:\n{mounts}"), format!("  volumes:\n{volumes}"))
    };
    suite.node.kubectl_with_input(&["apply", "-f", "-"], &format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}\nspec:\n{RESTRICTED_POD}  terminationGracePeriodSeconds: 0\n  containers:\n  - name: client\n    image: {CLIENT_IMAGE}\n{RESTRICTED_CONTAINER}    command: [sleep, '86400']\n{mounts}{volumes}"
    ))?;
    Ok(())
}

/// `sh -c script` in pod `namespace/pod`; its stdout.
fn sh(suite: &Suite, namespace: &str, pod: &str, script: &str) -> Result<String> {
    suite.node.kubectl(&["-n", namespace, "exec", pod, "--", "sh", "-c", script])
}

/// Waits until `script`, run in `namespace/pod`, prints something containing `answer`.
fn answers(suite: &Suite, namespace: &str, pod: &str, what: &str, script: &str, answer: &str) -> Result<()> {
    eventually(&format!("{what} from {namespace}/{pod}"), Duration::from_secs(60), || {
        Ok(sh(suite, namespace, pod, script).ok().filter(|out| out.contains(answer)).map(|_| ()))
    })
}

/// Tries a TCP connection from `namespace/pod` to each `host:port` of `targets` at once, each
/// given 3 s; those that connected.
fn connected(suite: &Suite, namespace: &str, pod: &str, targets: &[String]) -> Result<Vec<String>> {
    let tries: String = targets
        .iter()
        .map(|target| {
            let (host, port) = target.rsplit_once(':').unwrap_or((target, ""));
            format!("(nc -w 3 {host} {port} </dev/null >/dev/null 2>&1 && echo 'open {target}') & ")
        })
        .collect();
    let out = sh(suite, namespace, pod, &format!("{tries}wait"))?;
    Ok(out.lines().filter_map(|line| line.strip_prefix("open ")).map(str::to_owned).collect())
}

pub fn caches_admit_only_the_pods_their_access_lets_in(suite: &Suite) -> Result<()> {
    let node = &suite.node;
    let namespace = suite.new_namespace("access")?;
    let friend = suite.new_namespace("friend")?;
    let host = |cache: &str| format!("{cache}-cache.{namespace}.svc.cluster.local");
    node.kubectl_with_input(&["apply", "-f", "-"], &tls_secret(&namespace, "redis-tls", &host("tls"))?)?;
    node.kubectl_with_input(&["apply", "-f", "-"], &tls_secret(&namespace, "memcached-tls", &host("mctls"))?)?;
    let caches = [
        ("plain", "{engine: redis, memory: 64Mi}"),
        ("vk", "{engine: valkey, memory: 64Mi}"),
        ("mc", &*format!("{{engine: memcached, memory: 64Mi, access: {{namespaces: [{friend}]}}}}")),
        (
            "tls",
            "{engine: redis, memory: 64Mi, tls: {enabled: true, secretName: redis-tls}, access: {podSelector: {matchLabels: {app: checkout}}}}",
        ),
        ("mctls", "{engine: memcached, memory: 64Mi, tls: {enabled: true, secretName: memcached-tls}}"),
    ];
    for (name, spec) in caches {
        node.kubectl_with_input(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: cache.blockwork.dev/v1beta1\nkind: Cache\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {spec}\n"
            ),
        )?;
    }
    client_pod(suite, &namespace, "checkout", "{app: checkout}", &["redis-tls", "memcached-tls"])?;
    client_pod(suite, &namespace, "stranger", "{app: stranger}", &[])?;
    client_pod(suite, &friend, "friend", "{app: friend}", &[])?;
    for (name, _) in caches {
        cache_ready(suite, &namespace, name)?;
    }
    for (pod_namespace, pod) in [(&namespace, "checkout"), (&namespace, "stranger"), (&friend, "friend")] {
        node.kubectl(&["-n", pod_namespace, "wait", "--for=condition=Ready", &format!("pod/{pod}"), "--timeout=180s"])?;
    }
    let policies = node.kubectl(&["-n", &namespace, "get", "networkpolicies", "-o", "name"])?;
    ensure!(caches.iter().all(|(name, _)| policies.contains(&format!("/{name}-cache\n"))), "a Cache without its NetworkPolicy: {policies}");

    // Let in: the pods of the Cache's namespace; the named namespace; the selected pods only.
    let started = Instant::now();
    let ping = |cache: &str| format!("redis-cli -h {} ping", host(cache));
    let version = |cache: &str| format!("printf 'version\\r\\nquit\\r\\n' | nc -w 3 {} 11211", host(cache));
    answers(suite, &namespace, "checkout", "redis", &ping("plain"), "PONG")?;
    answers(suite, &namespace, "checkout", "valkey", &ping("vk"), "PONG")?;
    answers(suite, &namespace, "checkout", "memcached", &version("mc"), "VERSION")?;
    let tls_ping = format!("redis-cli -h {} --tls --cacert /tls/redis-tls/ca.crt ping", host("tls"));
    answers(suite, &namespace, "checkout", "redis over TLS", &tls_ping, "PONG")?;
    let tls_version = format!(
        "printf 'version\\r\\nquit\\r\\n' | openssl s_client -connect {0}:11211 -servername {0} -CAfile /tls/memcached-tls/ca.crt -verify_return_error -quiet 2>/dev/null",
        host("mctls")
    );
    answers(suite, &namespace, "checkout", "memcached over TLS", &tls_version, "VERSION")?;
    answers(suite, &namespace, "stranger", "redis, no selector", &ping("plain"), "PONG")?;
    answers(suite, &friend, "friend", "memcached, its namespace named", &version("mc"), "VERSION")?;
    let exporter = format!("plain-cache-0.plain-cache-headless.{namespace}.svc.cluster.local:9121");
    answers(
        suite,
        CLIENT_NAMESPACE,
        CLIENT,
        "the exporter, as the scrapers set at install",
        &format!("wget -qO- http://{exporter}/metrics"),
        "redis_up 1",
    )?;
    println!("e2e: every client let in connected within {:.1} s", started.elapsed().as_secs_f64());

    // Kept out: another namespace, pods the selector leaves out, clients at the exporter's port.
    let friend_kept_out: Vec<String> = ["plain:6379", "vk:6379", "tls:6379", "mctls:11211"]
        .iter()
        .map(|t| {
            let (cache, port) = t.split_once(':').unwrap_or_default();
            format!("{}:{port}", host(cache))
        })
        .collect();
    let open = connected(suite, &friend, "friend", &friend_kept_out)?;
    ensure!(open.is_empty(), "a pod of another namespace connected to {open:?}");
    let open = connected(suite, &namespace, "stranger", &[format!("{}:6379", host("tls"))])?;
    ensure!(open.is_empty(), "a pod spec.access.podSelector leaves out connected to {open:?}");
    let open = connected(suite, &namespace, "checkout", std::slice::from_ref(&exporter))?;
    ensure!(open.is_empty(), "a client reached the exporter's port: {open:?}");
    let open = connected(suite, CLIENT_NAMESPACE, CLIENT, &[format!("{}:6379", host("plain"))])?;
    ensure!(open.is_empty(), "the scrapers' namespace reached a Cache that does not name it: {open:?}");
    // The same connections from where they are let in: what kept them out was the policy.
    let open = connected(suite, &namespace, "checkout", &[format!("{}:6379", host("tls")), format!("{}:11211", host("mctls"))])?;
    ensure!(open.len() == 2, "the Cache's own namespace connects to TLS caches too: {open:?}");
    let isolated = node.kubectl(&[
        "-n",
        &namespace,
        "get",
        "cache",
        "plain",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"NetworkIsolated\")].reason}",
    ])?;
    ensure!(isolated.trim() == "NetworkPolicyApplied", "NetworkIsolated: {isolated:?}");
    node.kubectl(&["delete", "namespace", &namespace, &friend, "--wait=false"])?;
    Ok(())
}
