//! Caches that authenticate their clients (issue 39): a pod of the Cache's namespace without the
//! password is refused; one that mounts the binding Secret (`status.binding.name`) connects, for
//! every engine, in plain text and TLS; a password rotation under a client writing ten times a
//! second fails no command and loses no write, and the old password is refused after it.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use blockwork_e2e::eventually;
use serde_json::Value;

use super::{CLIENT_IMAGE, POD_TIMEOUT, RESTRICTED_CONTAINER, RESTRICTED_POD, Suite, apply_cache, cache_ready, text};

/// Where a client pod mounts each binding Secret: `/binding/CACHE/`.
pub const BINDINGS: &str = "/binding";

/// A pod of `namespace` that mounts the binding Secret of each of `caches` (none: a pod without
/// any password), with redis-cli, busybox and openssl (the suite's client image), and a
/// writable `/scratch`.
pub struct ClientPod<'a> {
    suite: &'a Suite,
    namespace: String,
    name: String,
}

impl<'a> ClientPod<'a> {
    pub fn start(suite: &'a Suite, namespace: &str, name: &str, caches: &[&str]) -> Result<Self> {
        Self::start_labelled(suite, namespace, name, "{}", caches)
    }

    /// The pod labelled `labels` (a YAML flow map), as a Cache's `spec.access.podSelector` selects.
    pub fn start_labelled(suite: &'a Suite, namespace: &str, name: &str, labels: &str, caches: &[&str]) -> Result<Self> {
        let mounts: String =
            caches.iter().map(|cache| format!("    - {{name: {cache}, mountPath: {BINDINGS}/{cache}, readOnly: true}}\n")).collect();
        let volumes: String =
            caches.iter().map(|cache| format!("  - {{name: {cache}, secret: {{secretName: {cache}-cache-binding}}}}\n")).collect();
        let mounts = format!("    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n{mounts}");
        let volumes = format!("  volumes:\n  - {{name: scratch, emptyDir: {{}}}}\n{volumes}");
        suite.node.kubectl_with_input(&["apply", "-f", "-"], &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}\nspec:\n{RESTRICTED_POD}  terminationGracePeriodSeconds: 0\n  containers:\n  - name: client\n    image: {CLIENT_IMAGE}\n{RESTRICTED_CONTAINER}    command: [sleep, '86400']\n{mounts}{volumes}"
        ))?;
        suite.node.kubectl(&["-n", namespace, "wait", "--for=condition=Ready", &format!("pod/{name}"), "--timeout=180s"])?;
        Ok(Self { suite, namespace: namespace.to_owned(), name: name.to_owned() })
    }

    /// `sh -c script` in the pod; its stdout (and stderr).
    pub fn sh(&self, script: &str) -> Result<String> {
        self.suite.node.kubectl(&["-n", &self.namespace, "exec", &self.name, "--", "sh", "-c", &format!("{script} 2>&1")])
    }

    /// `redis-cli ARGS...` against `host` with the binding Secret of `cache`: its user and
    /// password (read from the mounted files into the environment, as an application re-reads
    /// them), its port, and TLS with its CA when it says so.
    pub fn redis(&self, cache: &str, host: &str, args: &[&str]) -> Result<String> {
        let dir = format!("{BINDINGS}/{cache}");
        let args: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        self.sh(&format!(
            r#"tls=""; [ "$(cat {dir}/ssl)" = true ] && tls="--tls --cacert {dir}/ca.crt"; REDISCLI_AUTH="$(cat {dir}/password)" redis-cli --no-auth-warning --user "$(cat {dir}/username)" -h {host} -p "$(cat {dir}/port)" $tls --raw {}"#,
            args.join(" ")
        ))
        .map(|reply| reply.trim().to_owned())
    }

    /// `redis-cli ARGS...` against the Sentinel at `host` (its port is plain in every mode), as
    /// the binding Secret of `cache` says (`sentinel.username`, `sentinel.password`).
    pub fn sentinel(&self, cache: &str, host: &str, args: &[&str]) -> Result<String> {
        let dir = format!("{BINDINGS}/{cache}");
        let args: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        self.sh(&format!(
            r#"REDISCLI_AUTH="$(cat {dir}/sentinel.password)" redis-cli --no-auth-warning --user "$(cat {dir}/sentinel.username)" -h {host} -p 26379 --raw {}"#,
            args.join(" ")
        ))
        .map(|reply| reply.trim().to_owned())
    }

    /// Writes `key` through `cache`'s binding Secret at `host` and reads it back.
    pub fn set_get(&self, cache: &str, host: &str, key: &str) -> Result<()> {
        let written = eventually(&format!("SET through {host}"), Duration::from_secs(60), || {
            Ok(self.redis(cache, host, &["set", key, "value"]).ok().filter(|reply| reply.ends_with("OK")))
        });
        written?;
        let value = self.redis(cache, host, &["get", key])?;
        ensure!(value == "value", "GET {key} through {host}: {value:?}");
        Ok(())
    }

    /// The memcached text protocol `commands` (CRLF-terminated), after authenticating with the
    /// binding Secret of `cache` (or not), over TLS with its CA when it says so: the answers
    /// within 5 s (memcached keeps an unauthenticated connection open after `quit`, and
    /// `s_client -quiet` ignores the end of its input).
    pub fn memcached(&self, cache: &str, host: &str, port: &str, authenticate: bool, commands: &str) -> Result<String> {
        let dir = format!("{BINDINGS}/{cache}");
        let token = if authenticate {
            format!(r#"token="$(cat {dir}/username) $(cat {dir}/password)"; printf 'set auth 0 0 %s\r\n%s\r\n' "${{#token}}" "$token";"#)
        } else {
            String::new()
        };
        self.sh(&format!(
            r#"{{ {token} printf '{commands}quit\r\n'; }} | if [ "$(cat {dir}/ssl 2>/dev/null)" = true ]; then timeout 5 openssl s_client -connect {host}:{port} -servername {host} -CAfile {dir}/ca.crt -verify_return_error -quiet 2>/dev/null; else nc -w 3 {host} {port}; fi; true"#
        ))
    }
}

/// A client without the password is refused by the redis or valkey at `host` (with `tls`, the
/// flags that reach it over TLS: TLS itself is not what refuses), and one with a wrong password
/// too.
pub fn refuses_without_the_password(client: &ClientPod, host: &str, tls: &str) -> Result<()> {
    let refused = client.sh(&format!("redis-cli -h {host} -p 6379 {tls} set k v"))?;
    ensure!(refused.contains("NOAUTH"), "{host} without a password: {refused:?}");
    let wrong = client.sh(&format!("REDISCLI_AUTH=not-the-password redis-cli --user app -h {host} -p 6379 {tls} ping"))?;
    ensure!(wrong.contains("WRONGPASS"), "{host} with a wrong password: {wrong:?}");
    Ok(())
}

const MEMCACHED_SET_GET: &str = r"set greeting 0 0 5\r\nhello\r\nget greeting\r\n";

/// A client that does not authenticate is refused by the memcached at `host`.
pub fn memcached_refuses_without_the_password(client: &ClientPod, cache: &str, host: &str) -> Result<()> {
    let refused = client.memcached(cache, host, "11211", false, MEMCACHED_SET_GET)?;
    ensure!(refused.contains("CLIENT_ERROR unauthenticated") && !refused.contains("STORED"), "{host} without a password: {refused:?}");
    Ok(())
}

/// A client with `cache`'s binding Secret stores and reads a key at `host`.
pub fn memcached_serves_the_binding(client: &ClientPod, cache: &str, host: &str) -> Result<()> {
    let answer = eventually(&format!("set and get through {cache}'s binding"), Duration::from_secs(60), || {
        Ok(client.memcached(cache, host, "11211", true, MEMCACHED_SET_GET).ok().filter(|a| a.contains("VALUE greeting 0 5")))
    })?;
    ensure!(answer.contains("hello"), "{cache}: {answer:?}");
    Ok(())
}

/// The binding Secret `name` of `namespace`, decoded.
fn binding(suite: &Suite, namespace: &str, name: &str) -> Result<serde_json::Map<String, Value>> {
    use base64::Engine as _;
    let secret = suite.node.get_json(&["secret", "-n", namespace, name])?;
    let mut decoded = serde_json::Map::new();
    for (key, value) in secret["data"].as_object().cloned().unwrap_or_default() {
        let bytes = base64::engine::general_purpose::STANDARD.decode(text(&value))?;
        decoded.insert(key, Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    }
    ensure!(secret["type"].as_str().is_some_and(|t| t.starts_with("servicebinding.io/")), "not a binding Secret: {}", secret["type"]);
    Ok(decoded)
}

/// Redis, Valkey and Memcached, authenticating (TLS: the TLS scenarios): a pod of their
/// namespace without the password is refused by each, one with the wrong one too, and a pod
/// mounting their binding Secrets writes and reads through each.
pub fn every_engine_refuses_clients_without_the_password_and_serves_the_binding_secret(suite: &Suite) -> Result<()> {
    let namespace = suite.new_namespace("auth")?;
    let tls_host = |name: &str| format!("{name}-cache.{namespace}.svc.cluster.local");
    let caches = [
        ("redis", "{engine: redis, memory: 64Mi}"),
        ("valkey", "{engine: valkey, memory: 64Mi}"),
        ("mc", "{engine: memcached, memory: 64Mi}"),
    ];
    for (name, spec) in caches {
        apply_cache(suite, &namespace, name, spec)?;
    }
    let names: Vec<&str> = caches.iter().map(|(name, _)| *name).collect();
    for name in &names {
        let status = cache_ready(suite, &namespace, name)?;
        let authenticated = status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Authenticated").cloned();
        ensure!(
            authenticated.as_ref().is_some_and(|c| c["status"] == "True" && c["reason"] == "PasswordRequired"),
            "{name}: {authenticated:?}"
        );
        ensure!(status["binding"]["name"] == format!("{name}-cache-binding").as_str(), "{name}: status.binding {}", status["binding"]);
    }
    let with = ClientPod::start(suite, &namespace, "with-password", &names)?;
    let without = ClientPod::start(suite, &namespace, "without-password", &[])?;

    for name in ["redis", "valkey"] {
        let host = tls_host(name);
        let bound = binding(suite, &namespace, &format!("{name}-cache-binding"))?;
        ensure!(bound["host"] == host.as_str() && bound["username"] == "app", "{name}'s binding: {:?}", bound.keys().collect::<Vec<_>>());
        refuses_without_the_password(&without, &host, "")?;
        with.set_get(name, &host, "greeting")?;
        let denied = with.redis(name, &host, &["config", "get", "maxmemory"])?;
        ensure!(denied.contains("NOPERM"), "{name}: app may administer the server: {denied:?}");
    }
    let host = tls_host("mc");
    memcached_refuses_without_the_password(&without, "mc", &host)?;
    memcached_serves_the_binding(&with, "mc", &host)?;

    // The example of an application using its Cache's binding Secret, as documented.
    let example = std::fs::read_to_string(blockwork_e2e::workspace().join("examples/cache/binding.yaml"))?
        .replace("namespace: default", &format!("namespace: {namespace}"))
        .replace("image: redis:7.2", &format!("image: {CLIENT_IMAGE}"));
    suite.node.kubectl_with_input(&["apply", "-f", "-"], &example)?;
    let log = eventually("the example application counting its visits", POD_TIMEOUT, || {
        let log = suite.node.kubectl(&["-n", &namespace, "logs", "sessions-app"]).unwrap_or_default();
        Ok(log.contains("visits: 3").then_some(log))
    })?;
    ensure!(!log.contains("NOAUTH") && !log.contains("WRONGPASS"), "the example application was refused: {log}");
    suite.node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}

/// A client writing ten times a second, each write a new connection with the password it reads
/// from the mounted binding Secret, while `blockwork rotate` rotates it: no command fails, every
/// acknowledged write is there, and after the grace period the old password is refused.
pub fn a_rotation_under_a_writing_client_fails_no_command(suite: &Suite) -> Result<()> {
    let namespace = suite.new_namespace("rotation")?;
    apply_cache(suite, &namespace, "sessions", "{engine: redis, memory: 64Mi, auth: {gracePeriod: 1m}}")?;
    cache_ready(suite, &namespace, "sessions")?;
    let host = format!("sessions-cache.{namespace}.svc.cluster.local");
    let client = ClientPod::start(suite, &namespace, "writer", &["sessions"])?;
    let old = text(&binding(suite, &namespace, "sessions-cache-binding")?["password"]);
    // The writer: ten times a second, the password read from the mounted files and given
    // (`AUTH`, which a server checks as it checks a new connection's) before each write, on one
    // connection: a password the server refuses is a failed command.
    client.sh(&format!(
        r#"setsid sh -c 'i=0; while [ ! -e /scratch/stop ]; do printf "AUTH app %s\nSET write:%s %s\n" "$(cat {BINDINGS}/sessions/password)" $i $i; i=$((i+1)); sleep 0.1; done | redis-cli --no-auth-warning -h {host}' > /scratch/replies.log 2>&1 < /dev/null &"#
    ))?;
    std::thread::sleep(Duration::from_secs(3));

    let requested = Instant::now();
    let rotate = std::process::Command::new(&suite.binary)
        .args(["rotate", "cache/sessions", "-n", &namespace, "--kubeconfig"])
        .arg(suite.node.kubeconfig())
        .output()?;
    ensure!(
        rotate.status.success(),
        "blockwork rotate: {}{}",
        String::from_utf8_lossy(&rotate.stdout),
        String::from_utf8_lossy(&rotate.stderr)
    );
    println!("e2e: {}", String::from_utf8_lossy(&rotate.stdout).trim());
    let published = eventually("the new password published", Duration::from_secs(180), || {
        let password = text(&binding(suite, &namespace, "sessions-cache-binding")?["password"]);
        Ok((password != old).then_some(password))
    })?;
    println!("e2e: the new password was published {:.1} s after blockwork rotate", requested.elapsed().as_secs_f64());
    eventually("the client to use the new password (the kubelet updates the mounted Secret)", POD_TIMEOUT, || {
        Ok((client.sh(&format!("cat {BINDINGS}/sessions/password"))?.trim() == published).then_some(()))
    })?;
    println!("e2e: the writer's pod read it {:.1} s after blockwork rotate", requested.elapsed().as_secs_f64());
    let status = eventually("the previous password retired", Duration::from_secs(240), || {
        let cache = suite.node.get_json(&["cache", "-n", &namespace, "sessions"])?;
        let auth = cache["status"]["auth"].clone();
        Ok((auth["rotations"] == 1 && auth["rotation"].is_null()).then_some(auth))
    })?;
    println!("e2e: the rotation ended {:.1} s after blockwork rotate: {status}", requested.elapsed().as_secs_f64());
    // The servers lose the old password with the retirement's next reconcile.
    let refused = eventually("the old password refused", Duration::from_secs(60), || {
        let reply = client.sh(&format!("REDISCLI_AUTH='{old}' redis-cli --no-auth-warning --user app -h {host} ping"))?;
        Ok((reply.contains("WRONGPASS") || reply.contains("NOAUTH")).then_some(reply))
    })?;
    println!("e2e: the old password is refused: {}", refused.trim());
    std::thread::sleep(Duration::from_secs(2));
    client.sh("touch /scratch/stop")?;
    std::thread::sleep(Duration::from_secs(1));

    let replies = client.sh("cat /scratch/replies.log")?;
    let replies: Vec<&str> = replies.lines().collect();
    let failed: Vec<(usize, &&str)> = replies.iter().enumerate().filter(|(_, reply)| reply.trim() != "OK").collect();
    let writes = replies.len() / 2;
    let seconds = requested.elapsed().as_secs_f64() + 3.0;
    println!(
        "e2e: the writer made {writes} writes in {seconds:.0} s ({:.1} a second), {} commands failed",
        writes as f64 / seconds,
        failed.len()
    );
    ensure!(failed.is_empty(), "failed commands during the rotation (AUTH and SET alternate): {failed:?}");
    ensure!(writes as f64 > seconds * 5.0, "the writer wrote {writes} times in {seconds:.0} s");
    // Every acknowledged write is there: read back on one connection.
    let missing = client.sh(&format!(
        r#"for i in $(seq 0 {}); do echo "GET write:$i"; done | REDISCLI_AUTH="$(cat {BINDINGS}/sessions/password)" redis-cli --no-auth-warning --user app -h {host} | awk '{{ if ($0 != NR - 1) n++ }} END {{ print n + 0 }}'"#,
        writes - 1
    ))?;
    ensure!(missing.trim() == "0", "{} acknowledged writes missing", missing.trim());
    let events = suite.node.kubectl(&[
        "-n",
        &namespace,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=sessions",
        "-o",
        "jsonpath={.items[*].reason}",
    ])?;
    for reason in ["PasswordRotationStarted", "PasswordPublished", "PreviousPasswordRetired"] {
        ensure!(events.contains(reason), "no {reason} event: {events}");
    }
    suite.node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}
