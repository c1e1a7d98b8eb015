//! Text for people: the `status` table and the `explain` story. JSON for scripts is the
//! [`Row`]s and [`Explanation`] serialized as they are.

use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;

use crate::diagnose::{Diagnosis, diagnose};
use crate::report::{Origin, Report};
use crate::text::{age, short};

/// One line of `blockwork status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub ready: Option<bool>,
    /// Seconds in the current state, where known.
    pub in_state_seconds: Option<i64>,
    pub last_error: Option<String>,
    pub next_retry: Option<Timestamp>,
    /// The objects that use this one (`dt/shop`, `ingress/web`): a Cert's users.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub used_by: Vec<String>,
}

impl Row {
    /// A paused object says so in its state; one out of sync without an error (a drift, a
    /// pause) shows its `Synced` reason as the last error.
    pub fn of(report: &Report, now: Timestamp) -> Self {
        let paused = report.policies.iter().any(|p| p.name == "paused" && p.value.eq_ignore_ascii_case("true"));
        let unsynced = report.condition("Synced").filter(|c| !c.is_true() && c.reason != "ReconcilePaused");
        // An exported Secret left drifted or refused says so, though the Cert is in sync.
        let unexported = report.condition("Exported").filter(|c| !c.is_true() && c.reason != "WaitingForCertificate");
        Self {
            kind: report.kind.as_str().to_owned(),
            namespace: report.namespace.clone(),
            name: report.name.clone(),
            state: if paused { format!("{} (paused)", report.state) } else { report.state.clone() },
            ready: report.ready,
            in_state_seconds: report.state_since.map(|since| now.duration_since(since).as_secs()),
            last_error: report
                .last_error
                .as_ref()
                .map(|e| format!("{}: {}", e.reason, e.message))
                .or_else(|| unsynced.map(|c| format!("{}: {}", c.reason, c.message)))
                .or_else(|| unexported.map(|c| format!("{}: {}", c.reason, c.message))),
            next_retry: report.last_error.as_ref().and_then(|e| e.retry_at),
            used_by: report.used_by.iter().map(|user| format!("{}/{}", short_kind(&user.what), user.name)).collect(),
        }
    }
}

/// How `KIND/NAME` names a kind given by its name (a user's).
fn short_kind(kind: &str) -> String {
    match kind {
        "DistributionTenant" => "dt".to_owned(),
        other => other.to_ascii_lowercase(),
    }
}

/// How many users a row lists before it counts the rest.
const USERS_SHOWN: usize = 3;

/// `dt/a, ingress/b` (and `+N more`).
fn users_cell(users: &[String]) -> String {
    if users.is_empty() {
        return "-".to_owned();
    }
    let mut shown = users.iter().take(USERS_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if users.len() > USERS_SHOWN {
        shown.push_str(&format!(" +{} more", users.len() - USERS_SHOWN));
    }
    shown
}

/// The `status` table: one row per object, columns padded to fit; a USED BY column (what uses
/// each Cert, as `crossplane beta trace` shows a composition) when any object has users.
pub fn table(rows: &[Row], now: Timestamp) -> String {
    let used = rows.iter().any(|row| !row.used_by.is_empty());
    let mut header = vec!["KIND", "NAMESPACE/NAME", "STATE", "READY", "IN STATE", "LAST ERROR", "NEXT RETRY"];
    if used {
        header.push("USED BY");
    }
    let mut lines: Vec<Vec<String>> = vec![header.into_iter().map(str::to_owned).collect()];
    for row in rows {
        let mut line = vec![
            row.kind.clone(),
            format!("{}/{}", row.namespace, row.name),
            row.state.clone(),
            match row.ready {
                Some(true) => "True".into(),
                Some(false) => "False".into(),
                None => "-".into(),
            },
            row.in_state_seconds.map(crate::text::duration).unwrap_or_else(|| "-".into()),
            row.last_error.as_deref().map(|e| short(e, 60)).unwrap_or_else(|| "-".into()),
            row.next_retry.map(|at| crate::text::ago_or_in(at, now)).unwrap_or_else(|| "-".into()),
        ];
        if used {
            line.push(users_cell(&row.used_by));
        }
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len()).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// `explain -o json`: the report and its diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    #[serde(flatten)]
    pub report: Report,
    pub diagnosis: Diagnosis,
}

impl Explanation {
    pub fn of(report: Report, now: Timestamp) -> Self {
        let diagnosis = diagnose(&report, now);
        Self { report, diagnosis }
    }
}

/// How many events `explain` prints.
const EVENTS_SHOWN: usize = 10;

/// The whole story of one object.
pub fn explain(explanation: &Explanation, now: Timestamp) -> String {
    let Explanation { report, diagnosis } = explanation;
    let mut out = String::new();
    let line = |out: &mut String, label: &str, value: &str| {
        let _ = writeln!(out, "{label:<12}{value}");
    };
    let _ = writeln!(out, "{} {}/{}", report.kind.as_str(), report.namespace, report.name);
    let since = report.state_since.map(|s| format!(" for {}", age(s, now))).unwrap_or_default();
    let operator = report.operator_state.as_deref().map(|s| format!(" ({} state {s})", report.kind.as_str())).unwrap_or_default();
    line(&mut out, "State:", &format!("{}{since}{operator}", report.state));
    line(
        &mut out,
        "Ready:",
        match report.ready {
            Some(true) => "True",
            Some(false) => "False",
            None => "-",
        },
    );
    line(&mut out, "Summary:", &diagnosis.headline);
    for note in &report.notes {
        line(&mut out, "Why:", note);
    }
    if let Some(first) = diagnosis.hints.first() {
        line(&mut out, "Next step:", first.fix);
    }
    if let Some(trace_id) = &report.trace_id {
        line(&mut out, "Trace:", &format!("{trace_id} (the reconcile that last changed the status, in your tracing backend)"));
    }
    if let Some(error) = &report.last_error {
        let _ = writeln!(out, "\nLast error:");
        let _ = writeln!(out, "  reason    {}", error.reason);
        if let Some(class) = &error.class {
            let _ = writeln!(out, "  class     {class}");
        }
        if let Some(attempts) = error.attempts {
            let _ = writeln!(out, "  attempts  {attempts}");
        }
        if let Some(since) = error.since {
            let _ = writeln!(out, "  since     {} ago", age(since, now));
        }
        if let Some(retry) = &diagnosis.next_retry {
            let _ = writeln!(out, "  retry     {retry}");
        }
        let _ = writeln!(out, "  message   {}", error.message);
    }
    if !report.conditions.is_empty() {
        let _ = writeln!(out, "\nConditions:");
        let width = report.conditions.iter().map(|c| c.type_.len()).max().unwrap_or(0);
        let reason_width = report.conditions.iter().map(|c| c.reason.len()).max().unwrap_or(0);
        for c in &report.conditions {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<5}  {:<reason_width$}  {:>6}  {}",
                c.type_,
                c.status,
                c.reason,
                age(c.since, now),
                c.message
            );
        }
    }
    if !diagnosis.hints.is_empty() {
        let _ = writeln!(out, "\nReasons explained:");
        for hint in &diagnosis.hints {
            let _ = writeln!(out, "  {} ({}): {}\n    → {}", hint.reason, hint.seen_in, hint.meaning, hint.fix);
        }
    }
    if !report.policies.is_empty() {
        let _ = writeln!(out, "\nPolicies:");
        for policy in &report.policies {
            let origin = match policy.origin {
                Origin::Annotation => "annotation",
                Origin::Spec => "spec",
                Origin::Default => "default",
            };
            let _ = writeln!(out, "  {:<16}{:<10}{origin} ({})", policy.name, policy.value, policy.source);
        }
    }
    if !report.references.is_empty() {
        let _ = writeln!(out, "\nDepends on:");
        for reference in &report.references {
            let mark = if reference.ok { "ok" } else { "NOT OK" };
            let _ = writeln!(out, "  {:<18}{}  [{mark}] {}", reference.what, reference.name, reference.state);
        }
    }
    if !report.used_by.is_empty() {
        let _ = writeln!(out, "\nUsed by:");
        for user in &report.used_by {
            let _ = writeln!(out, "  {:<20}{}  {}", user.what, user.name, user.state);
        }
    }
    if !report.observed.is_empty() {
        let title = match report.kind {
            crate::report::Kind::RotatorSource | crate::report::Kind::RotatorTarget => "Keys",
            crate::report::Kind::Cache | crate::report::Kind::Ingress => "Observed",
            _ => "External resource (as last observed)",
        };
        let _ = writeln!(out, "\n{title}:");
        for field in &report.observed {
            let _ = writeln!(out, "  {:<22}{}", field.label, field.value);
        }
    }
    if !report.owned.is_empty() {
        let _ = writeln!(out, "\nOwned objects:");
        for owned in &report.owned {
            let _ = writeln!(out, "  {}/{}  {}", owned.kind, owned.name, owned.state);
        }
    }
    let _ = writeln!(out, "\nEvents (newest first):");
    if report.events.is_empty() {
        let _ = writeln!(out, "  none (events are kept for an hour)");
    }
    for event in report.events.iter().take(EVENTS_SHOWN) {
        let when = event.last_seen.map(|t| age(t, now)).unwrap_or_else(|| "?".into());
        let count = if event.count > 1 { format!(" ×{}", event.count) } else { String::new() };
        let _ = writeln!(out, "  {when:>6}  {:<7}  {}{count}: {}", event.type_, event.reason, event.note);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ConditionView, ErrorView, Kind, Origin, Policy};

    #[test]
    fn a_paused_or_drifted_object_says_so_in_its_row() {
        let mut report = Report::new(Kind::DistributionTenant, "team-a", "shop");
        report.state = "Succeeded".into();
        report.ready = Some(true);
        report.policies.push(Policy { name: "paused", value: "true".into(), origin: Origin::Annotation, source: String::new() });
        report.conditions.push(ConditionView {
            type_: "Synced".into(),
            status: "False".into(),
            reason: "DriftDetected".into(),
            message: "enabled is false, want true".into(),
            since: at(0),
        });
        let row = Row::of(&report, at(10));
        assert_eq!(row.state, "Succeeded (paused)");
        assert_eq!(row.last_error.as_deref(), Some("DriftDetected: enabled is false, want true"));
    }

    #[test]
    fn a_cert_whose_exported_secret_is_left_drifted_says_so_in_its_row() {
        let mut report = Report::new(Kind::Cert, "team-a", "api");
        report.state = "Succeeded".into();
        report.ready = Some(true);
        let exported = |reason: &str| ConditionView {
            type_: "Exported".into(),
            status: "False".into(),
            reason: reason.into(),
            message: "Secret team-a/api-tls: the Secret was deleted".into(),
            since: at(0),
        };
        report.conditions.push(exported("SecretDrifted"));
        let row = Row::of(&report, at(10));
        assert_eq!(row.last_error.as_deref(), Some("SecretDrifted: Secret team-a/api-tls: the Secret was deleted"));
        report.conditions = vec![exported("WaitingForCertificate")];
        assert_eq!(Row::of(&report, at(10)).last_error, None, "waiting for ACM is no error");
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("valid")
    }

    #[test]
    fn the_table_has_one_aligned_row_per_object_with_the_error_and_retry() {
        let mut failing = Report::new(Kind::Cert, "team-a", "api");
        failing.state = "Failed".into();
        failing.ready = Some(false);
        failing.state_since = Some(at(0));
        failing.last_error = Some(ErrorView {
            reason: "AccessDeniedException".into(),
            message: "RequestCertificate: not authorized".into(),
            class: Some("Terminal".into()),
            since: Some(at(0)),
            attempts: Some(2),
            retry_at: Some(at(3_900)),
        });
        let mut cache = Report::new(Kind::Cache, "team-b", "sessions");
        cache.state = "Ready".into();
        cache.ready = Some(true);
        let now = at(3_600);
        let text = table(&[Row::of(&failing, now), Row::of(&cache, now)], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("KIND") && lines[0].contains("NEXT RETRY"));
        assert!(
            lines[1].contains("team-a/api") && lines[1].contains("Failed") && lines[1].contains("1h") && lines[1].contains("in 5m"),
            "{text}"
        );
        assert!(lines[1].contains("AccessDeniedException: RequestCertificate: not authorized"), "{text}");
        assert!(lines[2].contains("team-b/sessions") && lines[2].contains("True"));
        let state_column = lines[0].find("STATE").expect("a STATE column");
        assert_eq!(Row::of(&cache, now).last_error, None);
        assert_eq!(lines[2].find("Ready"), Some(state_column), "columns are aligned:\n{text}");
    }

    #[test]
    fn a_used_cert_lists_its_users_in_a_column_of_its_own_and_explain_says_how_each_uses_it() {
        let mut cert = Report::new(Kind::Cert, "team-a", "api");
        cert.state = "Succeeded".into();
        let user = |what: &str, name: &str| crate::report::Reference {
            what: what.into(),
            name: name.into(),
            state: "named in spec.customizations.certificate.certRef".into(),
            ok: true,
        };
        cert.used_by = vec![user("DistributionTenant", "shop"), user("Ingress", "web")];
        let alone = Report::new(Kind::Cache, "team-a", "sessions");
        let text = table(&[Row::of(&cert, at(0)), Row::of(&alone, at(0))], at(0));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("USED BY"), "{text}");
        assert!(lines[1].ends_with("dt/shop, ingress/web"), "{text}");
        assert!(lines[2].ends_with('-'), "{text}");
        assert!(!table(&[Row::of(&alone, at(0))], at(0)).contains("USED BY"), "no column when nothing is used");
        let story = explain(&Explanation::of(cert, at(0)), at(0));
        assert!(story.contains("Used by:\n  DistributionTenant  shop  named in spec.customizations.certificate.certRef"), "{story}");
    }

    #[test]
    fn explain_prints_the_trace_of_the_reconcile_that_last_changed_the_status_only_when_there_is_one() {
        let mut report = Report::new(Kind::Cert, "team-a", "api");
        report.state = "Verifying".into();
        let untraced = explain(&Explanation::of(report.clone(), at(10)), at(10));
        assert!(!untraced.contains("Trace:"), "{untraced}");
        report.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        let traced = explain(&Explanation::of(report, at(10)), at(10));
        let line = traced.lines().find(|l| l.starts_with("Trace:")).unwrap_or_else(|| unreachable!("{traced}"));
        assert!(line.contains("4bf92f3577b34da6a3ce929d0e0e4736"), "{line}");
    }
}
