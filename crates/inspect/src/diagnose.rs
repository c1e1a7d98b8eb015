//! From a [`Report`] to what a person asks: is it fine, what is it waiting for, what do I do?
//! Pure: the headline and each hint come from the report and the catalog only.

use jiff::Timestamp;
use serde::Serialize;

use crate::catalog::{self, Entry, Severity};
use crate::report::Report;
use crate::text::{age, ago_or_in};

/// One reason the object carries, explained.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hint {
    pub reason: String,
    /// Where the reason was seen: `Ready`, `Synced`, another condition type, `last error`, or
    /// `event`.
    pub seen_in: String,
    pub severity: Severity,
    pub meaning: &'static str,
    pub fix: &'static str,
}

impl Hint {
    fn new(reason: &str, seen_in: &str, entry: &'static Entry) -> Self {
        Self { reason: reason.to_owned(), seen_in: seen_in.to_owned(), severity: entry.severity, meaning: entry.meaning, fix: entry.fix }
    }
}

/// The answer to "why is it stuck?".
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// One sentence: fine, waiting for what, or failing how.
    pub headline: String,
    /// When the controller looks again after the last error, in words (`in 52s`).
    pub next_retry: Option<String>,
    /// Every reason the object carries, the most pressing first.
    pub hints: Vec<Hint>,
}

/// How many recent warning events are explained beside the conditions.
const WARNINGS_EXPLAINED: usize = 3;

pub fn diagnose(report: &Report, now: Timestamp) -> Diagnosis {
    let scope = report.kind.scope();
    let mut hints: Vec<Hint> = Vec::new();
    let add = |hints: &mut Vec<Hint>, reason: &str, seen_in: &str| {
        if !reason.is_empty() && !hints.iter().any(|h| h.reason == reason) {
            hints.push(Hint::new(reason, seen_in, catalog::lookup(scope, reason)));
        }
    };
    if let Some(error) = &report.last_error {
        add(&mut hints, &error.reason, "last error");
    }
    let mut conditions: Vec<_> = report.conditions.iter().filter(|c| !c.is_true()).collect();
    // Synced before Ready: it carries the call that failed, Ready only what it means.
    conditions.sort_by_key(|c| match c.type_.as_str() {
        "Synced" => 0,
        "Ready" => 1,
        _ => 2,
    });
    for condition in conditions {
        add(&mut hints, &condition.reason, &condition.type_);
    }
    for event in report.events.iter().filter(|e| e.is_warning()).take(WARNINGS_EXPLAINED) {
        add(&mut hints, &event.reason, "event");
    }
    if hints.is_empty()
        && let Some(ready) = report.condition("Ready")
    {
        add(&mut hints, &ready.reason, "Ready");
    }
    if hints.is_empty() && !report.state.is_empty() {
        add(&mut hints, &report.state, "state");
    }

    let next_retry = report.last_error.as_ref().and_then(|e| e.retry_at).map(|at| ago_or_in(at, now));
    Diagnosis { headline: headline(report, now, next_retry.as_deref()), next_retry, hints }
}

fn headline(report: &Report, now: Timestamp, next_retry: Option<&str>) -> String {
    let paused = report.policies.iter().find(|p| p.name == "paused").is_some_and(|p| p.value.eq_ignore_ascii_case("true"));
    let for_how_long = report.state_since.map(|since| format!(" for {}", age(since, now))).unwrap_or_default();
    if paused {
        return format!(
            "Paused by the annotation blockwork.dev/paused{}: nothing is reconciled, deletion included. `blockwork resume {}` to go on.",
            report
                .condition("Synced")
                .filter(|c| c.reason == "ReconcilePaused")
                .map(|c| format!(" (since {} ago)", age(c.since, now)))
                .unwrap_or_default(),
            report.reference()
        );
    }
    if let Some((generation, observed)) = report.behind {
        return format!(
            "The controller has not reconciled the latest spec (generation {generation}, status describes {observed}): is `blockwork run` running with this controller? `blockwork check` tells."
        );
    }
    // The deletion says plainly what is unknown and the two ways out: that is the headline.
    if let Some(error) = report.last_error.as_ref().filter(|e| report.deleting && e.reason == blockwork_runtime::machine::DELETION_BLOCKED)
    {
        return format!("Deletion blocked: {}.", error.message.trim_end_matches('.'));
    }
    // A Cert held for its users: who they are and the ways out are the headline.
    if let Some(error) = report.last_error.as_ref().filter(|e| report.deleting && e.reason == blockwork_cert::users::HELD_BY_USERS) {
        return format!("Deletion held: {}.", error.message.trim_end_matches('.'));
    }
    if let Some(error) = &report.last_error {
        let class = error.class.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
        let repeated = match (error.attempts, error.since) {
            (Some(n), Some(since)) if n > 1 => format!(", {n} times in a row since {} ago", age(since, now)),
            (_, Some(since)) => format!(", since {} ago", age(since, now)),
            _ => String::new(),
        };
        let retry = match (next_retry, error.class.as_deref()) {
            (Some(at), Some("Terminal")) => format!("; next retry {at} (or at once with `blockwork retry {}`)", report.reference()),
            (Some(at), _) => format!("; next retry {at}"),
            (None, _) => String::new(),
        };
        return format!("{} {}{for_how_long}: {}{class}{repeated}{retry}.", report.kind.as_str(), report.state, error.reason);
    }
    if report.deleting {
        return format!(
            "Being deleted{for_how_long}: {}",
            report.message.clone().unwrap_or_else(|| "the controller removes its finalizer once the external resource is handled".into())
        );
    }
    let unsynced = report.condition("Synced").filter(|c| !c.is_true());
    match report.ready {
        Some(true) if unsynced.is_some() => {
            let synced = unsynced.map(|c| format!("{}: {}", c.reason, c.message)).unwrap_or_default();
            format!("Ready ({}{for_how_long}), but not in sync — {synced}.", report.state)
        }
        Some(true) => format!("Ready ({}{for_how_long}).", report.state),
        Some(false) => {
            let waiting = report
                .condition("Ready")
                .map(|c| if c.message.is_empty() { c.reason.clone() } else { format!("{}: {}", c.reason, c.message) })
                .or_else(|| report.message.clone())
                .unwrap_or_else(|| "no condition yet".into());
            format!("Not ready, {}{for_how_long} — {waiting}.", report.state)
        }
        None => format!("{}{for_how_long}.", report.state),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ConditionView, ErrorView, Kind, Origin, Policy};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("valid")
    }

    fn condition(type_: &str, status: &str, reason: &str, since: i64) -> ConditionView {
        ConditionView { type_: type_.into(), status: status.into(), reason: reason.into(), message: String::new(), since: at(since) }
    }

    fn throttled_cert() -> Report {
        let mut report = Report::new(Kind::Cert, "team-a", "api");
        report.state = "Verifying".into();
        report.ready = Some(false);
        report.state_since = Some(at(1_000));
        report.conditions =
            vec![condition("Ready", "False", "InProgress", 1_000), condition("Synced", "False", "ThrottlingException", 1_500)];
        report.last_error = Some(ErrorView {
            reason: "ThrottlingException".into(),
            message: "Rate exceeded".into(),
            class: Some("Throttled".into()),
            since: Some(at(1_500)),
            attempts: Some(4),
            retry_at: Some(at(3_652)),
        });
        report
    }

    #[test]
    fn a_throttled_object_says_how_often_since_when_and_when_it_retries() {
        let diagnosis = diagnose(&throttled_cert(), at(3_600));
        assert_eq!(
            diagnosis.headline,
            "Cert Verifying for 43m: ThrottlingException (Throttled), 4 times in a row since 35m ago; next retry in 52s."
        );
        assert_eq!(diagnosis.next_retry.as_deref(), Some("in 52s"));
        let reasons: Vec<&str> = diagnosis.hints.iter().map(|h| h.reason.as_str()).collect();
        assert_eq!(reasons, ["ThrottlingException", "InProgress"], "the error first, each reason once");
        assert!(diagnosis.hints[0].fix.contains("backs off"));
    }

    #[test]
    fn a_terminal_error_offers_the_retry_command() {
        let mut report = throttled_cert();
        if let Some(error) = report.last_error.as_mut() {
            error.class = Some("Terminal".into());
            error.reason = "AccessDeniedException".into();
            error.attempts = Some(1);
        }
        let headline = diagnose(&report, at(3_600)).headline;
        assert!(
            headline.contains(
                "AccessDeniedException (Terminal), since 35m ago; next retry in 52s (or at once with `blockwork retry cert/api`)"
            ),
            "{headline}"
        );
    }

    #[test]
    fn a_paused_object_says_so_before_anything_else() {
        let mut report = throttled_cert();
        report.policies.push(Policy {
            name: "paused",
            value: "True".into(),
            origin: Origin::Annotation,
            source: "blockwork.dev/paused".into(),
        });
        let headline = diagnose(&report, at(3_600)).headline;
        assert!(
            headline.starts_with("Paused by the annotation blockwork.dev/paused") && headline.contains("blockwork resume cert/api"),
            "{headline}"
        );
    }

    #[test]
    fn a_ready_object_explains_its_ready_reason() {
        let mut report = Report::new(Kind::Cert, "team-a", "api");
        report.state = "Succeeded".into();
        report.ready = Some(true);
        report.conditions = vec![condition("Ready", "True", "Available", 0), condition("Synced", "True", "ReconcileSuccess", 0)];
        let diagnosis = diagnose(&report, at(3_600));
        assert_eq!(diagnosis.headline, "Ready (Succeeded).");
        assert_eq!(diagnosis.hints.len(), 1);
        assert_eq!((diagnosis.hints[0].reason.as_str(), diagnosis.hints[0].severity), ("Available", Severity::Fine));
    }

    #[test]
    fn a_ready_object_out_of_sync_says_why() {
        let mut report = Report::new(Kind::DistributionTenant, "team-a", "shop");
        report.state = "Succeeded".into();
        report.ready = Some(true);
        let mut synced = condition("Synced", "False", "DriftDetected", 0);
        synced.message = "enabled is false, want true".into();
        report.conditions = vec![condition("Ready", "True", "Available", 0), synced];
        let diagnosis = diagnose(&report, at(3_600));
        assert_eq!(diagnosis.headline, "Ready (Succeeded), but not in sync — DriftDetected: enabled is false, want true.");
        assert_eq!(diagnosis.hints[0].reason, "DriftDetected");
    }

    #[test]
    fn a_blocked_deletion_is_the_headline_with_what_is_unknown_and_both_ways_out() {
        let mut report = Report::new(Kind::DistributionTenant, "team-a", "shop");
        report.state = "Terminating".into();
        report.deleting = true;
        let message = "the deletion has been blocked for 12 min: the answers leave unknown whether what it deletes still exists (the CNAME records of www.example.com in hosted zone Z1: AccessDenied). Two ways out: fix what the answer names (a missing permission: grant it, and the controller finishes on its next look), or annotate the object blockwork.dev/deletion-policy=Orphan to release it and keep whatever still exists";
        report.last_error = Some(ErrorView {
            reason: "DeletionBlocked".into(),
            message: message.into(),
            class: Some("Retryable".into()),
            since: Some(at(0)),
            attempts: Some(6),
            retry_at: Some(at(900)),
        });
        let diagnosis = diagnose(&report, at(720));
        assert_eq!(diagnosis.headline, format!("Deletion blocked: {message}."));
        assert_eq!((diagnosis.hints[0].reason.as_str(), diagnosis.hints[0].severity), ("DeletionBlocked", Severity::Problem));
        assert!(diagnosis.hints[0].fix.contains("deletion-policy=Orphan") && diagnosis.hints[0].fix.contains("grant"));
    }

    #[test]
    fn a_controller_behind_the_spec_is_the_headline() {
        let mut report = throttled_cert();
        report.behind = Some((3, 2));
        assert!(diagnose(&report, at(3_600)).headline.contains("generation 3, status describes 2"));
    }
}
