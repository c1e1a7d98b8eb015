//! What Sentinel says about a highly available Cache (`highAvailability` with `autoFailover`):
//! which pod is the primary, and whether it failed over. Asking is the only I/O here ([`ask`]);
//! what an answer means ([`parse`], [`latest`]) and what the status says after it ([`observe`],
//! [`condition`]) are pure.
//!
//! - **Which Sentinel.** Every ready pod runs one; all are asked at once, each by its pod's stable
//!   name (the headless Service), not through the Service, which picks one at random and may
//!   pick the dead primary's. Sentinels can disagree for a moment after a failover: the answer
//!   with the highest configuration epoch (which every failover raises) is the latest.
//! - **TLS and auth.** Sentinel's own port serves plain text in every mode: TLS mode makes the
//!   servers, and Sentinel's links to them (`tls-replication`), speak TLS, not port 26379, which
//!   carries only the topology. When clients authenticate, so does the operator: as `operator`,
//!   which may ask this and change passwords, nothing else (`crate::auth::users`).
//! - **Bounded.** Connecting and the answer together take at most [`CALL_TIMEOUT`] per Sentinel,
//!   asked concurrently, so a reconcile waits at most that long. No Sentinel answering is the
//!   `PrimaryKnown=False` condition, never a failed reconcile.
//! - **Following switchovers.** Nothing in Kubernetes changes when Sentinel promotes a replica
//!   (the pod of the old primary may even stay up), so a Cache with Sentinel is looked at again
//!   every [`POLL`], and every [`POLL_FAILING_OVER`] while the primary is down, a failover is
//!   under way or a pod is not ready (it may be the primary, before Sentinel notices). A killed
//!   primary pod also changes the StatefulSet, which triggers a reconcile at once.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use blockwork_runtime::status::condition as new_condition;

use crate::api::Failover;
use crate::auth::password::Password;

/// Connecting to one Sentinel and its answer, together.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a Cache with Sentinel is looked at when nothing happens in Kubernetes.
pub const POLL: Duration = Duration::from_secs(30);
/// How often while Sentinel reports the primary down or fails over, or a pod is not ready.
pub const POLL_FAILING_OVER: Duration = Duration::from_secs(5);
/// The condition type: whether the status names the primary Sentinel reports now.
pub const PRIMARY_KNOWN: &str = "PrimaryKnown";

/// What one Sentinel reports about the Cache's primary (`SENTINEL MASTER <name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The primary's pod: Sentinel announces hostnames, `POD.HEADLESS.NAMESPACE.svc...`.
    pub primary: String,
    /// Sentinel's flags for it (`master`, `s_down`, `o_down`, `failover_in_progress`, ...).
    pub flags: Vec<String>,
    /// Raised by every failover.
    pub config_epoch: u64,
    /// How long the primary has been reported as the primary: since its promotion.
    pub primary_for: Duration,
}

impl Report {
    /// Down in this Sentinel's eyes, or being replaced.
    pub fn failing_over(&self) -> bool {
        self.flags.iter().any(|flag| matches!(flag.as_str(), "s_down" | "o_down" | "failover_in_progress"))
    }
}

/// A Sentinel's answer that says nothing usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Sentinel's answer has no usable {0}")]
pub struct Unusable(&'static str);

/// Reads `SENTINEL MASTER`'s field list.
pub fn parse(fields: &HashMap<String, String>) -> Result<Report, Unusable> {
    let field = |name: &'static str| fields.get(name).map(String::as_str).filter(|value| !value.is_empty()).ok_or(Unusable(name));
    let primary = field("ip")?.split('.').next().filter(|pod| !pod.is_empty()).ok_or(Unusable("ip"))?.to_owned();
    let flags = field("flags")?.split(',').map(str::to_owned).collect();
    let config_epoch = field("config-epoch")?.parse().map_err(|_| Unusable("config-epoch"))?;
    let primary_for = Duration::from_millis(field("role-reported-time")?.parse().map_err(|_| Unusable("role-reported-time"))?);
    Ok(Report { primary, flags, config_epoch, primary_for })
}

/// The latest of several Sentinels' reports: the highest configuration epoch, and among equals
/// one that does not see the primary down (a Sentinel that lost its link is not the news).
pub fn latest(reports: impl IntoIterator<Item = Report>) -> Option<Report> {
    reports.into_iter().max_by_key(|report| (report.config_epoch, !report.failing_over()))
}

/// The primary and the last failover the status records after `report` at `now`, given what it
/// recorded before: a primary other than the recorded one is a failover, dated when Sentinel saw
/// the new primary take over.
pub fn observe(
    primary_before: Option<&str>,
    failover_before: Option<&Failover>,
    report: &Report,
    now: jiff::Timestamp,
) -> Option<Failover> {
    match primary_before {
        Some(before) if before != report.primary => {
            let since = jiff::SignedDuration::try_from(report.primary_for).unwrap_or(jiff::SignedDuration::ZERO);
            // Whole seconds: a status that is rewritten only when something changed.
            let took_over = now.checked_sub(since).unwrap_or(now);
            let took_over = jiff::Timestamp::from_second(took_over.as_second()).unwrap_or(took_over);
            Some(Failover { time: Time(took_over), from: before.to_owned(), to: report.primary.clone() })
        }
        _ => failover_before.cloned(),
    }
}

/// The `PrimaryKnown` condition for what the Sentinels answered (`None`: none did).
pub fn condition(report: Option<&Report>, asked: &[String], generation: Option<i64>) -> Condition {
    match report {
        // Sentinel may name the promoted replica before the failover ends.
        Some(report) if report.flags.iter().any(|flag| flag == "failover_in_progress") => new_condition(
            PRIMARY_KNOWN,
            false,
            "FailoverInProgress",
            &format!(
                "Sentinel is promoting a replica in place of the primary ({}): the status names the new one when it is done",
                report.flags.join(",")
            ),
            generation,
        ),
        Some(report) if report.failing_over() => new_condition(
            PRIMARY_KNOWN,
            false,
            "PrimaryDown",
            &format!(
                "Sentinel reports the primary {} down ({}): a replica is promoted once a majority agrees",
                report.primary,
                report.flags.join(",")
            ),
            generation,
        ),
        Some(report) => new_condition(
            PRIMARY_KNOWN,
            true,
            "SentinelReported",
            &format!("Sentinel reports {} as the primary", report.primary),
            generation,
        ),
        None => new_condition(
            PRIMARY_KNOWN,
            false,
            "SentinelUnreachable",
            &format!(
                "no Sentinel answered within {} s (asked {} on port {}); the status keeps the last primary known, and the operator's log has each error",
                CALL_TIMEOUT.as_secs(),
                asked.join(", "),
                crate::shape::SENTINEL_PORT
            ),
            generation,
        ),
    }
}

/// Asks the Sentinel at `port` of each of `hosts` about the primary `name` at once, as `user`
/// when they authenticate; the reports that came back within [`CALL_TIMEOUT`], and the errors
/// of the others by host.
pub async fn ask(hosts: &[String], port: u16, name: &str, user: Option<(&str, &Password)>) -> (Vec<Report>, Vec<(String, String)>) {
    let answers = join_all(hosts.iter().map(|host| async move {
        let answer = tokio::time::timeout(CALL_TIMEOUT, ask_one(host, port, name, user))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())));
        (host.clone(), answer)
    }))
    .await;
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    for (host, answer) in answers {
        match answer {
            Ok(report) => reports.push(report),
            Err(error) => errors.push((host, error)),
        }
    }
    (reports, errors)
}

async fn ask_one(host: &str, port: u16, name: &str, user: Option<(&str, &Password)>) -> Result<Report, String> {
    let mut connection = crate::auth::servers::connect(host, port, None, user).await?;
    let fields: HashMap<String, String> =
        redis::cmd("SENTINEL").arg("MASTER").arg(name).query_async(&mut connection).await.map_err(|e| e.to_string())?;
    parse(&fields).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(ip: &str, flags: &str, epoch: u64, since_ms: u64) -> HashMap<String, String> {
        [
            ("name", "ha"),
            ("ip", ip),
            ("port", "6379"),
            ("flags", flags),
            ("config-epoch", &epoch.to_string()),
            ("role-reported-time", &since_ms.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn report(primary: &str, flags: &str, epoch: u64) -> Report {
        parse(&fields(&format!("{primary}.ha-cache-headless.ns.svc.cluster.local"), flags, epoch, 0)).expect("a report")
    }

    #[test]
    fn the_primary_is_the_pod_of_the_announced_hostname() {
        let report = parse(&fields("ha-cache-1.ha-cache-headless.ns.svc.cluster.local", "master", 2, 1500)).expect("a report");
        assert_eq!(
            report,
            Report {
                primary: "ha-cache-1".into(),
                flags: vec!["master".into()],
                config_epoch: 2,
                primary_for: Duration::from_millis(1500)
            }
        );
        assert!(!report.failing_over());
    }

    #[test]
    fn an_answer_without_the_primary_is_unusable() {
        let mut answer = fields("", "master", 0, 0);
        assert_eq!(parse(&answer), Err(Unusable("ip")));
        answer.remove("ip");
        assert_eq!(parse(&answer), Err(Unusable("ip")));
    }

    #[test]
    fn a_primary_seen_down_is_failing_over() {
        assert!(report("ha-cache-0", "master,s_down,o_down", 0).failing_over());
        assert!(report("ha-cache-0", "master,failover_in_progress", 0).failing_over());
    }

    #[test]
    fn the_latest_report_is_the_one_with_the_highest_epoch() {
        let stale = report("ha-cache-0", "master,s_down", 0);
        let promoted = report("ha-cache-1", "master", 1);
        assert_eq!(latest([stale.clone(), promoted.clone()]), Some(promoted));
        let sees_down = report("ha-cache-0", "master,s_down", 0);
        let sees_up = report("ha-cache-0", "master", 0);
        assert_eq!(latest([sees_down, sees_up.clone()]), Some(sees_up));
        assert_eq!(latest([]), None);
    }

    #[test]
    fn a_new_primary_is_a_failover_dated_when_it_took_over() {
        let now = jiff::Timestamp::from_second(1_000_000).expect("a time");
        let mut promoted = report("ha-cache-1", "master", 1);
        promoted.primary_for = Duration::from_millis(12_400);
        let failover = observe(Some("ha-cache-0"), None, &promoted, now).expect("a failover");
        assert_eq!((failover.from.as_str(), failover.to.as_str()), ("ha-cache-0", "ha-cache-1"));
        assert_eq!(failover.time.0.as_second(), 999_987, "12.4 s before now, to the second");
    }

    #[test]
    fn the_same_primary_keeps_the_last_failover() {
        let earlier = Failover { time: Time(jiff::Timestamp::UNIX_EPOCH), from: "ha-cache-2".into(), to: "ha-cache-0".into() };
        let now = jiff::Timestamp::now();
        assert_eq!(observe(Some("ha-cache-0"), Some(&earlier), &report("ha-cache-0", "master", 3), now), Some(earlier));
    }

    #[test]
    fn the_first_primary_seen_is_no_failover() {
        assert_eq!(observe(None, None, &report("ha-cache-0", "master", 0), jiff::Timestamp::now()), None);
    }

    #[test]
    fn no_answer_is_a_condition_naming_the_sentinels_asked() {
        let condition = condition(None, &["ha-cache-0.ha-cache-headless.ns.svc.cluster.local".into()], Some(1));
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "SentinelUnreachable"));
        assert!(condition.message.contains("ha-cache-0.ha-cache-headless") && condition.message.contains("26379"), "{}", condition.message);
    }

    #[test]
    fn a_failover_under_way_is_not_a_known_primary() {
        let condition = condition(Some(&report("ha-cache-1", "master,s_down,o_down,failover_in_progress", 1)), &[], Some(1));
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "FailoverInProgress"));
    }

    #[test]
    fn a_primary_seen_down_is_not_known() {
        let condition = condition(Some(&report("ha-cache-0", "master,s_down,o_down", 0)), &[], Some(1));
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "PrimaryDown"));
    }
}
