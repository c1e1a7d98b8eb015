//! Who may connect to a Cache, enforced where it is tested (issue 39): the node runs kind's
//! NetworkPolicy implementation (kube-network-policies, scripts/node), and every Cache gets its
//! NetworkPolicy from the operator. Pods of the Cache's namespace connect; a pod of another
//! namespace does not (its connection times out), unless `spec.access.namespaces` names its
//! namespace; `spec.access.podSelector` narrows the clients; only the scrapers set at install
//! reach the exporter. For redis, valkey and memcached, plain and TLS. Every client holds the
//! password (the binding Secret, copied into the other namespace as a platform would hand it
//! over): what keeps a client out is the policy, never a missing password. The operator reaches
//! the servers through the policies to keep their passwords in step (`Authenticated`).
//! (Replication, Sentinel's failover and the operator's Sentinel queries under the policies: the
//! HA scenarios.)

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use blockwork_e2e::eventually;
use serde_json::json;

use super::cache_auth::{BINDINGS, ClientPod};
use super::{Suite, cache_ready, tls_secret};

/// Waits until `ask` (a client's command) answers with something containing `answer`.
fn answers(what: &str, ask: impl Fn() -> Result<String>, answer: &str) -> Result<()> {
    eventually(what, Duration::from_secs(60), || Ok(ask().ok().filter(|out| out.contains(answer)).map(|_| ())))
}

/// Tries a TCP connection from `client` to each `host:port` of `targets` at once, each given
/// 3 s; those that connected.
fn connected(client: &ClientPod, targets: &[String]) -> Result<Vec<String>> {
    let tries: String = targets
        .iter()
        .map(|target| {
            let (host, port) = target.rsplit_once(':').unwrap_or((target, ""));
            format!("(nc -w 3 {host} {port} </dev/null >/dev/null 2>&1 && echo 'open {target}') & ")
        })
        .collect();
    let out = client.sh(&format!("{tries}wait"))?;
    Ok(out.lines().filter_map(|line| line.strip_prefix("open ")).map(str::to_owned).collect())
}

/// `PING` with the password of `cache`'s binding Secret (mounted in `client`), given 5 s: what
/// the server answered, or nothing when no server did.
fn authenticated_ping(client: &ClientPod, cache: &str, host: &str) -> Result<String> {
    let dir = format!("{BINDINGS}/{cache}");
    client.sh(&format!(
        r#"REDISCLI_AUTH="$(cat {dir}/password)" timeout 5 redis-cli --no-auth-warning --user "$(cat {dir}/username)" -h {host} -p "$(cat {dir}/port)" ping; true"#
    ))
}

/// The binding Secret of `cache` in `from`, copied into namespace `to` under the same name.
fn copy_binding(suite: &Suite, from: &str, to: &str, cache: &str) -> Result<()> {
    let name = format!("{cache}-cache-binding");
    let secret = suite.node.get_json(&["secret", "-n", from, &name])?;
    let copy = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": to},
        "type": secret["type"],
        "data": secret["data"],
    });
    suite.node.kubectl_with_input(&["apply", "-f", "-"], &copy.to_string())?;
    Ok(())
}

/// The reason of condition `type_` of Cache `namespace/name`.
fn reason(suite: &Suite, namespace: &str, name: &str, type_: &str) -> Result<String> {
    let cache = suite.node.get_json(&["cache", "-n", namespace, name])?;
    let conditions = cache["status"]["conditions"].as_array().cloned().unwrap_or_default();
    Ok(conditions.iter().find(|c| c["type"] == type_).map(|c| c["reason"].as_str().unwrap_or_default().to_owned()).unwrap_or_default())
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
    let names: Vec<&str> = caches.iter().map(|(name, _)| *name).collect();
    for name in &names {
        cache_ready(suite, &namespace, name)?;
        // The operator reached every server through its policy: their passwords are in step.
        eventually(&format!("{name}: Authenticated PasswordRequired"), Duration::from_secs(60), || {
            Ok((reason(suite, &namespace, name, "Authenticated")? == "PasswordRequired").then_some(()))
        })?;
    }
    // Every client holds the passwords of every Cache: the friend's namespace a copy of each.
    for name in &names {
        copy_binding(suite, &namespace, &friend, name)?;
    }
    let checkout = ClientPod::start_labelled(suite, &namespace, "checkout", "{app: checkout}", &names)?;
    let stranger = ClientPod::start_labelled(suite, &namespace, "stranger", "{app: stranger}", &names)?;
    let friendly = ClientPod::start_labelled(suite, &friend, "friend", "{app: friend}", &names)?;
    let policies = node.kubectl(&["-n", &namespace, "get", "networkpolicies", "-o", "name"])?;
    ensure!(names.iter().all(|name| policies.contains(&format!("/{name}-cache\n"))), "a Cache without its NetworkPolicy: {policies}");

    // Let in, with the password: the pods of the Cache's namespace; the named namespace; the
    // selected pods only.
    let started = Instant::now();
    let version = "version\\r\\n";
    let ping = |client: &ClientPod, cache: &str| client.redis(cache, &host(cache), &["ping"]);
    answers("redis from checkout", || ping(&checkout, "plain"), "PONG")?;
    answers("valkey from checkout", || ping(&checkout, "vk"), "PONG")?;
    answers("redis over TLS from checkout", || ping(&checkout, "tls"), "PONG")?;
    answers("memcached from checkout", || checkout.memcached("mc", &host("mc"), "11211", true, version), "VERSION")?;
    answers("memcached over TLS from checkout", || checkout.memcached("mctls", &host("mctls"), "11211", true, version), "VERSION")?;
    answers("redis from stranger, no selector", || ping(&stranger, "plain"), "PONG")?;
    answers("memcached from friend, its namespace named", || friendly.memcached("mc", &host("mc"), "11211", true, version), "VERSION")?;
    let exporter = format!("plain-cache-0.plain-cache-headless.{namespace}.svc.cluster.local:9121");
    answers(
        "the exporter, from the scrapers set at install",
        || suite.client_sh(&format!("wget -qO- http://{exporter}/metrics")),
        "redis_up 1",
    )?;
    println!("e2e: every client let in connected within {:.1} s", started.elapsed().as_secs_f64());

    // Kept out, password in hand: another namespace, pods the selector leaves out, clients at
    // the exporter's port. No connection is made at all (a password refused would be one).
    let friend_kept_out: Vec<String> = ["plain:6379", "vk:6379", "tls:6379", "mctls:11211"]
        .iter()
        .map(|t| {
            let (cache, port) = t.split_once(':').unwrap_or_default();
            format!("{}:{port}", host(cache))
        })
        .collect();
    let open = connected(&friendly, &friend_kept_out)?;
    ensure!(open.is_empty(), "a pod of another namespace connected to {open:?}");
    for cache in ["plain", "vk"] {
        let reply = authenticated_ping(&friendly, cache, &host(cache))?;
        ensure!(
            !reply.contains("PONG") && !reply.contains("NOAUTH") && !reply.contains("WRONGPASS"),
            "{cache} answered another namespace with its password: {reply:?}"
        );
    }
    let open = connected(&stranger, &[format!("{}:6379", host("tls"))])?;
    ensure!(open.is_empty(), "a pod spec.access.podSelector leaves out connected to {open:?}");
    let open = connected(&checkout, std::slice::from_ref(&exporter))?;
    ensure!(open.is_empty(), "a client reached the exporter's port: {open:?}");
    let open = suite.client_sh(&format!("nc -w 3 {} 6379 </dev/null >/dev/null 2>&1 && echo open; true", host("plain")))?;
    ensure!(!open.contains("open"), "the scrapers' namespace reached a Cache that does not name it");
    // The same connections, the same passwords, from where they are let in: what kept them out
    // was the policy.
    let open = connected(&checkout, &[format!("{}:6379", host("tls")), format!("{}:11211", host("mctls"))])?;
    ensure!(open.len() == 2, "the Cache's own namespace connects to TLS caches too: {open:?}");
    for cache in ["plain", "vk"] {
        let reply = authenticated_ping(&checkout, cache, &host(cache))?;
        ensure!(reply.contains("PONG"), "{cache} from its own namespace with the same password: {reply:?}");
    }
    ensure!(reason(suite, &namespace, "plain", "NetworkIsolated")? == "NetworkPolicyApplied", "NetworkIsolated of plain");
    node.kubectl(&["delete", "namespace", &namespace, &friend, "--wait=false"])?;
    Ok(())
}
