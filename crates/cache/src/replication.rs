//! Pure: the scripts that start the servers and Sentinels of a Cache (`start.sh`,
//! `sentinel.sh`), rendered into its ConfigMap; above all, which server a starting pod follows.
//!
//! Nothing is persisted (see docs/cache.md, "What survives what"): a server that restarts, in a
//! new pod or in the same one, starts empty. So the one thing a restarted server must never do
//! is serve as the primary while its replicas still hold the data: they would resynchronize
//! from it and drop everything. With Sentinel, a starting server therefore asks the Sentinels
//! of the other pods which server is the primary, as Spotahome's and OT-Container-Kit's
//! operators do, and:
//!
//! - follows the one they name (after a failover, the promoted replica, not pod 0);
//! - when they name *this* pod (its server died, and came back before they noticed), does not
//!   start at all until they promote a replica, which its absence makes them do within seconds;
//!   then follows it. Only if none is promoted within [`FAILOVER_WAIT_SECONDS`] (no replica is
//!   left to promote, or too few Sentinels to agree) does it serve as the primary, empty: then
//!   there is no data left to keep, and the Cache must serve again;
//! - when none answers (a new Cache, or every pod restarted at once), starts as pod 0 is the
//!   primary, the others its replicas.
//!
//! A starting Sentinel asks the same question, watches the server named and knows from the
//! start the replicas the answering Sentinel knows: it learns replicas from the primary, and a
//! new Sentinel beside a restarted primary that knew none could win the election for the
//! failover and then give it up (`-failover-abort-no-good-slave`), leaving the others to wait
//! twice the failover timeout before they try again. The Sentinels find each other at their
//! pods' stable names, so a new one votes at once, and one left alone with the last replica
//! (two pods of three lost) gets the majority it needs to promote it.
//!
//! Without Sentinel nothing promotes a replica, so pod 0 is always the primary.

use kube::ResourceExt;

use crate::api::Cache;
use crate::auth::MONITOR_FILE;
use crate::auth::state::{REPLICATION_CONF, SENTINEL_ACL, SENTINEL_AUTH, SERVER_ACL};
use crate::auth::users::MONITOR;
use crate::shape::{self, TLS_DIR, Topology};

/// Sentinel calls a primary down after this long without an answer.
const DOWN_AFTER_MILLISECONDS: u32 = 5_000;
/// Sentinel's failover timeout: after a failed failover it waits twice this long to try again.
const FAILOVER_TIMEOUT_MILLISECONDS: u32 = 60_000;
/// How long a restarted server that the Sentinels still name as the primary waits for them to
/// promote a replica: the time they take to call it down, to try again after a failover they
/// had to give up (no replica in sync, no majority yet), and to promote one.
pub const FAILOVER_WAIT_SECONDS: u32 = (DOWN_AFTER_MILLISECONDS + 2 * FAILOVER_TIMEOUT_MILLISECONDS) / 1000 + 15;
/// How long one Sentinel is given to answer a starting pod.
const ASK_SECONDS: u32 = 2;
/// How long a starting pod asks again while no Sentinel answered but one did not answer in time
/// (a loaded node): taken for a new Cache, pod 0 would start as an empty primary beside
/// replicas holding the data, and the Sentinels, seeing it up, would never promote one.
const ASK_AGAIN_SECONDS: u32 = 30;

/// `prefix` (say, a `timeout`) running the engine's CLI as `monitor`: its password from its
/// file, through the environment (`REDISCLI_AUTH`), never an argument.
pub fn cli_as_monitor(prefix: &str) -> String {
    format!(r#"REDISCLI_AUTH="$(cat "$CACHE_AUTH_DIR/{MONITOR_FILE}")" {prefix} "$CACHE_CLI" --user {MONITOR}"#)
}

/// The engine's CLI bounded by [`ASK_SECONDS`], as `monitor` when clients authenticate.
fn ask(authenticated: bool) -> String {
    let timeout = format!("timeout {ASK_SECONDS}");
    if authenticated { cli_as_monitor(&timeout) } else { format!(r#"{timeout} "$CACHE_CLI""#) }
}

/// Shell functions both scripts use to ask the other pods' Sentinels
/// (`$CACHE_SENTINELS`: `HOST:PORT` of every pod's Sentinel).
fn ask_sentinels(authenticated: bool) -> String {
    let ask = ask(authenticated);
    // An open Cache keeps the script the release before rendered (ADR 0020: upgrading rolls none
    // of its pods), with one round of asking; an authenticating one asks a slow Sentinel again.
    let (again, once, reset, unanswered) = if authenticated {
        let again = format!(
            r#"# While none answered but one timed out (exit 124: there, but slow), asked again for up to
# {ASK_AGAIN_SECONDS} s: only Sentinels that do not exist (a new Cache) make an empty answer.
latest_primary() {{
  deadline_asking=$(( $(date +%s) + {ASK_AGAIN_SECONDS} ))
  while :; do
    ask_sentinels_once
    if [ -n "$primary" ] || [ -z "$slow" ] || [ "$(date +%s)" -ge "$deadline_asking" ]; then
      return 0
    fi
    echo "a Sentinel did not answer within {ASK_SECONDS} s: asking again"
  done
}}
"#
        );
        (again, "ask_sentinels_once", r#"primary="" epoch=-1 asked="" slow="""#, "|| { [ $? -ne 124 ] || slow=1; continue; }")
    } else {
        (String::new(), "latest_primary", r#"primary="" epoch=-1 asked="""#, "|| continue")
    };
    format!(
        r#"# The value of field $1 in a Sentinel's answer (names and values, one a line) on stdin.
field() {{ while read -r key && read -r value; do [ "$key" != "$1" ] || {{ echo "$value"; return; }}; done; }}
# Sets primary ("HOST PORT"; empty when no Sentinel answers), epoch and asked (the Sentinel that
# said it) from the answer of the other pods' Sentinels with the latest configuration: every
# failover raises its epoch. Each is given {ASK_SECONDS} s: a pod that is gone has no DNS name, a
# hung one no answer.
{again}{once}() {{
  {reset}
  for sentinel in $CACHE_SENTINELS; do
    [ "$sentinel" != "$CACHE_ANNOUNCE_HOST:$CACHE_SENTINEL_PORT" ] || continue
    answer=$({ask} -h "${{sentinel%:*}}" -p "${{sentinel##*:}}" --raw sentinel master "$CACHE_NAME" 2>/dev/null) {unanswered}
    host=$(printf '%s\n' "$answer" | field ip)
    port=$(printf '%s\n' "$answer" | field port)
    its_epoch=$(printf '%s\n' "$answer" | field config-epoch)
    if [ -n "$host" ] && [ -n "$port" ] && [ "${{its_epoch:--1}}" -gt "$epoch" ] 2>/dev/null; then
      primary="$host $port" epoch=$its_epoch asked=$sentinel
    fi
  done
}}
"#
    )
}

/// Starts redis-server or valkey-server from the rendered configuration, copied to the data
/// directory because the server may rewrite it; as a replica of the primary, unless it is one.
/// With `authenticated`, its users come from the ACL file and, replicated, it authenticates to
/// its primary as `replication` (both files of `$CACHE_AUTH_DIR`).
pub fn start_script(cache: &Cache, authenticated: bool) -> String {
    let name = cache.name_any();
    let mut header = format!(
        r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -eu
config="$CACHE_DATA_DIR/redis.conf"
cp "$CACHE_CONFIG_DIR/redis.conf" "$config"
# The server's files go to the data volume, the only writable place. Nothing is persisted: a
# snapshot that a replica's full synchronization left there is never loaded (it would bring
# back keys deleted since, should this server become the primary).
printf 'dir %s\n' "$CACHE_DATA_DIR" >> "$config"
rm -f "$CACHE_DATA_DIR/dump.rdb"
"#
    );
    if authenticated {
        header.push_str(&format!("printf 'aclfile %s/{SERVER_ACL}\\n' \"$CACHE_AUTH_DIR\" >> \"$config\"\n"));
        if shape::topology(cache) != Topology::Standalone {
            header.push_str(&format!("printf 'include %s/{REPLICATION_CONF}\\n' \"$CACHE_AUTH_DIR\" >> \"$config\"\n"));
        }
    }
    let replication = match shape::topology(cache) {
        Topology::Standalone => String::new(),
        Topology::Replicated { sentinel: false } => r#"if [ "${POD_NAME##*-}" != 0 ]; then
  printf 'replicaof %s %s\n' "$CACHE_PRIMARY_HOST" "$CACHE_PRIMARY_PORT" >> "$config"
fi
printf 'replica-announce-ip %s\n' "$CACHE_ANNOUNCE_HOST" >> "$config"
"#
        .to_owned(),
        Topology::Replicated { sentinel: true } => format!(
            r#"{ask}me="$CACHE_ANNOUNCE_HOST $CACHE_PORT"
latest_primary
if [ "$primary" = "$me" ]; then
  # This server restarted without its data, before the Sentinels saw it down: as the primary
  # it would have the replicas resynchronize the empty set. Its absence makes them promote one.
  echo "the Sentinels name this pod the primary: waiting up to {wait} s for them to promote a replica"
  deadline=$(( $(date +%s) + {wait} ))
  while [ "$primary" = "$me" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 1
    latest_primary
  done
  if [ "$primary" = "$me" ]; then
    echo "no replica was promoted within {wait} s: serving as the primary, without data"
  fi
fi
case "$primary" in
  "$me") ;;
  "") [ "${{POD_NAME##*-}}" = 0 ] || printf 'replicaof %s %s\n' "$CACHE_PRIMARY_HOST" "$CACHE_PRIMARY_PORT" >> "$config" ;;
  *) echo "following the primary the Sentinels name: $primary"; printf 'replicaof %s\n' "$primary" >> "$config" ;;
esac
printf 'replica-announce-ip %s\n' "$CACHE_ANNOUNCE_HOST" >> "$config"
"#,
            ask = ask_sentinels(authenticated),
            wait = FAILOVER_WAIT_SECONDS
        ),
    };
    format!("{header}{replication}exec \"$CACHE_SERVER\" \"$config\"\n")
}

/// Starts a Sentinel that watches the primary the other pods' Sentinels name (else pod 0) and
/// knows the replicas they know. Quorum: a majority of the replicas. With `authenticated`, its
/// users and how it authenticates to the servers and the other Sentinels come from
/// `$CACHE_AUTH_DIR`.
pub fn sentinel_script(cache: &Cache, authenticated: bool) -> String {
    let quorum = cache.spec.replicas / 2 + 1;
    let tls = if shape::tls_enabled(cache) {
        format!(
            "  echo 'tls-replication yes'\n  echo 'tls-cert-file {TLS_DIR}/tls.crt'\n  echo 'tls-key-file {TLS_DIR}/tls.key'\n  echo 'tls-ca-cert-file {TLS_DIR}/ca.crt'\n"
        )
    } else {
        String::new()
    };
    let auth = if authenticated {
        format!("  cat \"$CACHE_AUTH_DIR/{SENTINEL_ACL}\" \"$CACHE_AUTH_DIR/{SENTINEL_AUTH}\"\n")
    } else {
        String::new()
    };
    format!(
        r#"#!/bin/sh
# Rendered by Blockwork from Cache {name}; edits are overwritten.
set -eu
{ask_sentinels}# "HOST PORT" of each replica the Sentinel that answered knows, one a line.
replicas() {{
  {ask} -h "${{asked%:*}}" -p "${{asked##*:}}" --raw sentinel replicas "$CACHE_NAME" 2>/dev/null | {{
    while read -r key && read -r value; do
      case "$key" in ip) host=$value ;; port) echo "$host $value" ;; esac
    done
  }} || true
}}
latest_primary
[ -n "$primary" ] || primary="$CACHE_PRIMARY_HOST $CACHE_PRIMARY_PORT"
{{
  printf 'port %s\n' "$CACHE_SENTINEL_PORT"
  echo 'sentinel resolve-hostnames yes'
  echo 'sentinel announce-hostnames yes'
  printf 'sentinel announce-ip %s\n' "$CACHE_ANNOUNCE_HOST"
  printf 'sentinel monitor %s %s {quorum}\n' "$CACHE_NAME" "$primary"
  printf 'sentinel down-after-milliseconds %s {DOWN_AFTER_MILLISECONDS}\n' "$CACHE_NAME"
  printf 'sentinel failover-timeout %s {FAILOVER_TIMEOUT_MILLISECONDS}\n' "$CACHE_NAME"
  printf 'sentinel parallel-syncs %s 1\n' "$CACHE_NAME"
{auth}  if [ -n "$asked" ]; then
    # Known from the start, not learnt from the primary, which may be down: a Sentinel that
    # knew no replica could win the election for a failover and then give it up.
    printf 'sentinel config-epoch %s %s\n' "$CACHE_NAME" "$epoch"
    replicas | while read -r replica; do
      # Not this pod's own server: it is starting, as a replica or not yet.
      [ "$replica" = "$CACHE_ANNOUNCE_HOST $CACHE_PORT" ] || printf 'sentinel known-replica %s %s\n' "$CACHE_NAME" "$replica"
    done
  fi
{tls}}} > "$CACHE_DATA_DIR/sentinel.conf"
exec "$CACHE_SERVER" "$CACHE_DATA_DIR/sentinel.conf" --sentinel
"#,
        name = cache.name_any(),
        ask_sentinels = ask_sentinels(authenticated),
        ask = ask(authenticated),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};

    fn cache(replicas: i32, high_availability: Option<HighAvailability>) -> Cache {
        let mut cache = Cache::new(
            "c",
            CacheSpec {
                engine: Engine::Redis,
                memory: "64Mi".into(),
                replicas,
                eviction_policy: EvictionPolicy::AllkeysLru,
                access: None,
                tls: None,
                high_availability,
                auth: None,
            },
        );
        cache.metadata.namespace = Some("ns".into());
        cache
    }

    fn ha(replicas: i32, auto_failover: bool) -> Cache {
        cache(replicas, Some(HighAvailability { enabled: true, auto_failover }))
    }

    #[test]
    fn a_standalone_server_replicates_from_nothing() {
        let script = start_script(&cache(2, None), false);
        assert!(!script.contains("replicaof") && !script.contains("sentinel"), "{script}");
        assert!(script.ends_with("exec \"$CACHE_SERVER\" \"$config\"\n"), "{script}");
    }

    #[test]
    fn without_sentinel_pod_zero_is_always_the_primary() {
        let script = start_script(&ha(3, false), false);
        assert!(script.contains("if [ \"${POD_NAME##*-}\" != 0 ]; then\n  printf 'replicaof"), "{script}");
        assert!(!script.contains("latest_primary"), "{script}");
    }

    #[test]
    fn with_sentinel_a_server_follows_the_primary_the_sentinels_name() {
        let script = start_script(&ha(3, true), false);
        assert!(
            script.contains("*) echo \"following the primary the Sentinels name: $primary\"; printf 'replicaof %s\\n' \"$primary\""),
            "{script}"
        );
        assert!(
            script.contains("[ \"$sentinel\" != \"$CACHE_ANNOUNCE_HOST:$CACHE_SENTINEL_PORT\" ] || continue"),
            "only the others are asked"
        );
    }

    #[test]
    fn a_server_the_sentinels_still_name_waits_for_a_failover_and_then_no_longer() {
        let script = start_script(&ha(3, true), false);
        assert_eq!(FAILOVER_WAIT_SECONDS, 140);
        assert!(script.contains("deadline=$(( $(date +%s) + 140 ))"), "{script}");
        assert!(script.contains("serving as the primary, without data"), "{script}");
    }

    /// Found by the e2e failover scenario under a loaded CI: the other Sentinels' answers timed
    /// out, the restarted pod 0 took the empty answer for a new Cache and served as an empty
    /// primary, and the Sentinels never promoted a replica.
    #[test]
    fn a_sentinel_that_answers_too_late_is_asked_again_rather_than_taken_for_none() {
        for script in [start_script(&ha(3, true), true), sentinel_script(&ha(3, true), true)] {
            assert!(script.contains("|| { [ $? -ne 124 ] || slow=1; continue; }"), "{script}");
            assert!(script.contains("deadline_asking=$(( $(date +%s) + 30 ))"), "{script}");
        }
        // An open Cache is rendered as the release before rendered it (ADR 0020).
        for script in [start_script(&ha(3, true), false), sentinel_script(&ha(3, true), false)] {
            assert!(!script.contains("slow") && script.contains("2>/dev/null) || continue"), "{script}");
        }
    }

    #[test]
    fn a_sentinel_watches_the_primary_the_others_name_else_pod_zero_with_a_majority_for_quorum() {
        let script = sentinel_script(&ha(5, true), false);
        assert!(script.contains("sentinel config-epoch") && script.contains("sentinel known-replica"), "{script}");
        assert!(script.contains("latest_primary\n[ -n \"$primary\" ] || primary=\"$CACHE_PRIMARY_HOST $CACHE_PRIMARY_PORT\""), "{script}");
        assert!(script.contains("printf 'sentinel monitor %s %s 3\\n' \"$CACHE_NAME\" \"$primary\""), "quorum 3 of 5: {script}");
        assert!(script.contains("down-after-milliseconds %s 5000") && script.contains("failover-timeout %s 60000"), "{script}");
    }

    #[test]
    fn with_tls_sentinels_reach_the_servers_over_tls() {
        let mut c = ha(3, true);
        c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        assert!(sentinel_script(&c, false).contains("echo 'tls-replication yes'"));
        assert!(!sentinel_script(&ha(3, true), false).contains("tls-replication"));
    }

    #[test]
    fn an_authenticated_server_reads_its_users_and_replicates_as_replication() {
        let script = start_script(&ha(3, true), true);
        assert!(script.contains("printf 'aclfile %s/users.acl\\n' \"$CACHE_AUTH_DIR\" >> \"$config\"\n"), "{script}");
        assert!(script.contains("printf 'include %s/replication.conf\\n' \"$CACHE_AUTH_DIR\" >> \"$config\"\n"), "{script}");
        assert!(
            script
                .contains(r#"answer=$(REDISCLI_AUTH="$(cat "$CACHE_AUTH_DIR/monitor.password")" timeout 2 "$CACHE_CLI" --user monitor -h"#),
            "{script}"
        );
        assert!(!start_script(&cache(1, None), true).contains("replication.conf"), "a standalone server replicates from nothing");
    }

    #[test]
    fn an_authenticated_sentinel_takes_its_users_and_credentials_after_the_monitor_line() {
        let script = sentinel_script(&ha(3, true), true);
        let monitor = script.find("sentinel monitor").expect("monitor");
        let auth = script.find(r#"cat "$CACHE_AUTH_DIR/sentinel-users.acl" "$CACHE_AUTH_DIR/sentinel-auth.conf""#).expect("auth");
        assert!(monitor < auth, "auth-pass must follow the monitor line: {script}");
        assert!(!sentinel_script(&ha(3, true), false).contains("CACHE_AUTH_DIR"));
    }
}
