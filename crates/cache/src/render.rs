//! Pure: the files of a Cache's ConfigMap, rendered from its spec: the engine's configuration,
//! the scripts that start the server and its Sentinel ([`crate::replication`]), and the script
//! the pod's probes run.
//! Everything a script needs comes from the environment the pod template sets
//! ([`crate::pod`]), so a test runs them as they are, against real servers.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{Cache, Engine, EvictionPolicy};
use crate::auth::MONITOR_FILE;
use crate::auth::state::MEMCACHED_AUTH;
use crate::auth::users::MONITOR;
use crate::replication;
use crate::shape::{self, InvalidSpec, MEMCACHED_LOOPBACK_PORT, SENTINEL_PORT, TLS_DIR, Topology};

/// The probe script's file, run as `sh probe.sh ready|alive|sentinel`.
pub const PROBE_SCRIPT: &str = "probe.sh";
/// How long a probe waits for an answer: a server that takes longer is hung, as far as its
/// clients can tell. The kubelet's own timeout is a second more.
pub const PROBE_ANSWER_SECONDS: i32 = 2;
/// How often a memcached pod looks whether its auth file changed.
pub const RELOAD_SECONDS: u32 = 2;

/// Every file of the ConfigMap, by name; with `authenticated`, the servers and scripts read the
/// passwords' files (`$CACHE_AUTH_DIR`: never a password here).
pub fn files(cache: &Cache, authenticated: bool) -> Result<BTreeMap<String, String>, InvalidSpec> {
    let mut files: BTreeMap<String, String> = match cache.spec.engine {
        Engine::Redis | Engine::Valkey => {
            [("redis.conf".to_owned(), config(cache)?), ("start.sh".to_owned(), replication::start_script(cache, authenticated))].into()
        }
        Engine::Memcached => [("memcached.args".to_owned(), config(cache)?)].into(),
    };
    if cache.spec.engine == Engine::Memcached && authenticated {
        files.insert("start.sh".into(), memcached_start_script(cache));
    }
    if shape::has_sentinel(cache) {
        files.insert("sentinel.sh".into(), replication::sentinel_script(cache, authenticated));
    }
    files.insert(PROBE_SCRIPT.into(), probe_script(cache, authenticated));
    Ok(files)
}

/// The engine's configuration file or argument list (with authentication, `start.sh` adds the
/// passwords' files).
pub fn config(cache: &Cache) -> Result<String, InvalidSpec> {
    let limit = shape::data_limit_bytes(&cache.spec.memory)?;
    let tls = shape::tls_enabled(cache);
    let port = shape::port(cache.spec.engine);
    Ok(match cache.spec.engine {
        Engine::Redis | Engine::Valkey => {
            let policy = match cache.spec.eviction_policy {
                EvictionPolicy::AllkeysLru => "allkeys-lru",
                EvictionPolicy::VolatileLru => "volatile-lru",
                EvictionPolicy::Noeviction => "noeviction",
            };
            let mut listen = if tls {
                format!("port 0\ntls-port {port}\ntls-cert-file {TLS_DIR}/tls.crt\ntls-key-file {TLS_DIR}/tls.key\ntls-auth-clients no\n")
            } else {
                format!("port {port}\n")
            };
            if tls && shape::topology(cache) != Topology::Standalone {
                // Replicas verify the primary against the Secret's CA (cert-manager writes ca.crt).
                listen.push_str(&format!("tls-replication yes\ntls-ca-cert-file {TLS_DIR}/ca.crt\n"));
            }
            format!(
                "# Rendered by Blockwork from Cache {}; edits are overwritten.\n{listen}bind 0.0.0.0\nprotected-mode no\nmaxmemory {limit}\nmaxmemory-policy {policy}\nappendonly no\nsave \"\"\n",
                cache.name_any()
            )
        }
        Engine::Memcached => {
            let listen = if tls {
                // TLS on every address but loopback, where the pod's own probes and exporter
                // speak plain text (memcached's `notls:` listener).
                format!("--listen=0.0.0.0:{port},notls:127.0.0.1:{MEMCACHED_LOOPBACK_PORT}")
            } else {
                "--listen=0.0.0.0".to_owned()
            };
            let mut args = vec![format!("--memory-limit={}", limit >> 20), format!("--port={port}"), listen];
            if cache.spec.eviction_policy == EvictionPolicy::Noeviction {
                args.push("--disable-evictions".into());
            }
            if tls {
                args.push("--enable-ssl".into());
                args.push(format!("--extended=ssl_chain_cert={TLS_DIR}/tls.crt,ssl_key={TLS_DIR}/tls.key"));
            }
            args.join("\n") + "\n"
        }
    })
}

/// What the pod's probes run: `sh probe.sh ready` (the server answers, so it may take clients),
/// `alive` (it answers at all: a Redis still loading its data, or a replica whose primary is
/// down, is alive), `sentinel` (the Sentinel beside it answers). Each question is bounded by
/// [`PROBE_ANSWER_SECONDS`]: a hung server fails both, so it leaves the Service and is restarted.
/// What a failed probe prints, the kubelet records in the pod's events.
pub fn probe_script(cache: &Cache, authenticated: bool) -> String {
    let name = cache.name_any();
    let wait = PROBE_ANSWER_SECONDS;
    match cache.spec.engine {
        Engine::Redis | Engine::Valkey => {
            // The pod asks itself over loopback: TLS as the clients get it, without verifying a
            // certificate that names the Service, not 127.0.0.1; as `monitor` when clients
            // authenticate.
            let tls = if shape::tls_enabled(cache) { " --tls --insecure" } else { "" };
            let port = shape::port(cache.spec.engine);
            let cli = if authenticated {
                replication::cli_as_monitor(&format!("timeout {wait}"))
            } else {
                format!(r#"timeout {wait} "$CACHE_CLI""#)
            };
            format!(
                r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -u
case "${{1:-}}" in
  ready|alive) port={port}; tls="{tls}" ;;
  sentinel) port={SENTINEL_PORT}; tls="" ;;
  *) echo "usage: probe.sh ready|alive|sentinel" >&2; exit 2 ;;
esac
# $tls is a list of flags: split on purpose.
reply=$({cli} -h 127.0.0.1 -p "$port" $tls ping 2>&1) || true
case "$1:$reply" in
  *:PONG) exit 0 ;;
  alive:LOADING*|alive:MASTERDOWN*) exit 0 ;;
esac
echo "no PONG from 127.0.0.1:$port within {wait} s: ${{reply:-no answer}}"
exit 1
"#
            )
        }
        Engine::Memcached if authenticated => {
            let port = if shape::tls_enabled(cache) { MEMCACHED_LOOPBACK_PORT } else { shape::port(Engine::Memcached) };
            format!(
                r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -u
case "${{1:-}}" in
  ready|alive) ;;
  *) echo "usage: probe.sh ready|alive" >&2; exit 2 ;;
esac
# memcached's `version` over loopback, after authenticating as monitor (the token goes through
# the shell's own printf or the environment: never an argument): with nc where the image has
# it (busybox, Alpine), else with bash's /dev/tcp (Debian's images, the official one among them).
token="{MONITOR} $(cat "$CACHE_AUTH_DIR/{MONITOR_FILE}")"
if command -v nc >/dev/null 2>&1; then
  reply=$(printf 'set auth 0 0 %s\r\n%s\r\nversion\r\nquit\r\n' "${{#token}}" "$token" | timeout {wait} nc 127.0.0.1 {port} 2>&1) || true
else
  reply=$(TOKEN="$token" timeout {wait} bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && printf "set auth 0 0 %s\r\n%s\r\nversion\r\n" "${{#TOKEN}}" "$TOKEN" >&3 && read -r stored <&3 && read -r line <&3 && echo "$stored $line"' 2>&1) || true
fi
case "$reply" in
  STORED*VERSION*) exit 0 ;;
esac
echo "no VERSION from 127.0.0.1:{port} within {wait} s as {MONITOR}: ${{reply:-no answer}}"
exit 1
"#
            )
        }
        Engine::Memcached => {
            let port = if shape::tls_enabled(cache) { MEMCACHED_LOOPBACK_PORT } else { shape::port(Engine::Memcached) };
            format!(
                r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -u
case "${{1:-}}" in
  ready|alive) ;;
  *) echo "usage: probe.sh ready|alive" >&2; exit 2 ;;
esac
# memcached's `version` over loopback: with nc where the image has it (busybox, Alpine), else
# with bash's /dev/tcp (Debian's images, the official one among them).
if command -v nc >/dev/null 2>&1; then
  reply=$(printf 'version\r\nquit\r\n' | timeout {wait} nc 127.0.0.1 {port} 2>&1) || true
else
  reply=$(timeout {wait} bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && printf "version\r\n" >&3 && read -r line <&3 && echo "$line"' 2>&1) || true
fi
case "$reply" in
  VERSION*) exit 0 ;;
esac
echo "no VERSION from 127.0.0.1:{port} within {wait} s: ${{reply:-no answer}}"
exit 1
"#
            )
        }
    }
}

/// Starts memcached with its auth file, and reloads it (SIGHUP) when the kubelet updates the
/// file: memcached reads it only at start and on that signal, and keeps its connections.
fn memcached_start_script(cache: &Cache) -> String {
    format!(
        r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -eu
auth="$CACHE_AUTH_DIR/{MEMCACHED_AUTH}"
server=$$
(
  loaded=$(cat "$auth" 2>/dev/null || true)
  while sleep {RELOAD_SECONDS}; do
    now=$(cat "$auth") || continue
    if [ "$now" != "$loaded" ] && kill -HUP "$server"; then
      loaded=$now
      echo "the auth file changed: memcached reloads it"
    fi
  done
) &
# Every connection's first command authenticates (a `set` whose data is `USER PASSWORD`).
exec memcached $(cat "$CACHE_CONFIG_DIR/memcached.args") --auth-file="$auth"
"#,
        name = cache.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HighAvailability, Tls};

    fn cache(engine: Engine, memory: &str) -> Cache {
        let mut cache = crate::fixtures::cache(engine);
        cache.spec.memory = memory.into();
        cache
    }

    fn with_tls(mut cache: Cache) -> Cache {
        cache.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        cache
    }

    #[test]
    fn redis_config_limits_data_to_eighty_percent_with_the_policy() {
        let mut c = cache(Engine::Redis, "100Mi");
        c.spec.eviction_policy = EvictionPolicy::VolatileLru;
        let config = config(&c).expect("renders");
        assert!(config.contains(&format!("maxmemory {}\n", (100u64 << 20) / 5 * 4)), "{config}");
        assert!(config.contains("maxmemory-policy volatile-lru\n"), "{config}");
        assert!(config.contains("port 6379\n"), "{config}");
    }

    #[test]
    fn redis_tls_moves_the_port_to_tls() {
        let config = config(&with_tls(cache(Engine::Valkey, "64Mi"))).expect("renders");
        assert!(config.contains("port 0\ntls-port 6379\n"), "{config}");
    }

    #[test]
    fn memcached_arguments_carry_megabytes_and_noeviction() {
        let mut c = cache(Engine::Memcached, "1Gi");
        c.spec.eviction_policy = EvictionPolicy::Noeviction;
        let args = config(&c).expect("renders");
        assert!(args.contains("--memory-limit=819\n"), "{args}");
        assert!(args.contains("--disable-evictions\n"), "{args}");
    }

    #[test]
    fn memcached_with_tls_speaks_plain_text_only_on_loopback() {
        let args = config(&with_tls(cache(Engine::Memcached, "64Mi"))).expect("renders");
        assert!(args.contains("--listen=0.0.0.0:11211,notls:127.0.0.1:11212\n") && args.contains("--enable-ssl\n"), "{args}");
        assert!(probe_script(&with_tls(cache(Engine::Memcached, "64Mi")), false).contains("nc 127.0.0.1 11212"));
    }

    #[test]
    fn the_redis_probe_speaks_tls_when_clients_must() {
        assert!(!probe_script(&cache(Engine::Redis, "64Mi"), false).contains("--tls"));
        let probe = probe_script(&with_tls(cache(Engine::Redis, "64Mi")), false);
        assert!(probe.contains(r#"ready|alive) port=6379; tls=" --tls --insecure""#), "{probe}");
        assert!(probe.contains(r#"sentinel) port=26379; tls="""#), "Sentinel's port is plain: {probe}");
    }

    #[test]
    fn tls_with_replication_verifies_the_primary() {
        let mut c = with_tls(cache(Engine::Redis, "64Mi"));
        c.spec.replicas = 3;
        c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        let config = config(&c).expect("renders");
        assert!(config.contains("tls-replication yes\n") && config.contains("tls-ca-cert-file"), "{config}");
    }

    #[test]
    fn every_engine_has_a_probe_script_and_only_sentinel_caches_a_sentinel_script() {
        let mut ha = cache(Engine::Valkey, "64Mi");
        ha.spec.replicas = 5;
        ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        let files = files(&ha, false).expect("renders");
        assert_eq!(files.keys().map(String::as_str).collect::<Vec<_>>(), ["probe.sh", "redis.conf", "sentinel.sh", "start.sh"]);
        let files = super::files(&cache(Engine::Memcached, "64Mi"), false).expect("renders");
        assert_eq!(files.keys().map(String::as_str).collect::<Vec<_>>(), ["memcached.args", "probe.sh"]);
    }

    #[test]
    fn authenticated_probes_ask_as_monitor_with_the_password_from_its_file() {
        let probe = probe_script(&cache(Engine::Valkey, "64Mi"), true);
        assert!(
            probe.contains(
                r#"reply=$(REDISCLI_AUTH="$(cat "$CACHE_AUTH_DIR/monitor.password")" timeout 2 "$CACHE_CLI" --user monitor -h 127.0.0.1"#
            ),
            "{probe}"
        );
        let memcached = probe_script(&cache(Engine::Memcached, "64Mi"), true);
        assert!(memcached.contains(r#"token="monitor $(cat "$CACHE_AUTH_DIR/monitor.password")""#), "{memcached}");
        assert!(memcached.contains("STORED*VERSION*) exit 0"), "{memcached}");
    }

    #[test]
    fn authenticated_memcached_reads_its_auth_file_and_reloads_it_when_it_changes() {
        let files = files(&cache(Engine::Memcached, "64Mi"), true).expect("renders");
        assert!(!files["memcached.args"].contains("auth"), "the arguments are an open memcached's: {}", files["memcached.args"]);
        let start = &files["start.sh"];
        assert!(start.contains(r#"kill -HUP "$server""#), "{start}");
        assert!(start.ends_with("exec memcached $(cat \"$CACHE_CONFIG_DIR/memcached.args\") --auth-file=\"$auth\"\n"), "{start}");
        assert!(!super::files(&cache(Engine::Memcached, "64Mi"), false).expect("renders").contains_key("start.sh"));
    }
}
