//! The shipped PrometheusRule (config/prometheus/cert-operator-rules.yaml) checked like a rule
//! linter would (promtool is not obtainable from the Go module proxy here: one of Prometheus's
//! dependencies is not served): each expression parses as PromQL, each `for` is a duration, and
//! every metric an alert reads — with every label it matches on or prints — is one the operator
//! exports, taken from the text exposition of a registered `CertMetrics` and `RuntimeMetrics`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use blockwork_aws::{AwsMetrics, ErrorClass, Seed, Service};
use blockwork_cert::{CertMetrics, CertState};
use blockwork_runtime::{ReconcileState, RuntimeMetrics};
use prometheus_client::registry::Registry;
use promql_parser::parser::VectorSelector;
use serde::Deserialize;

const RULES: &str = include_str!("../../../../config/prometheus/cert-operator-rules.yaml");

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PrometheusRule {
    api_version: String,
    kind: String,
    spec: Spec,
}

#[derive(Debug, Deserialize)]
struct Spec {
    groups: Vec<Group>,
}

#[derive(Debug, Deserialize)]
struct Group {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

fn rules() -> Vec<Rule> {
    let rule: PrometheusRule = serde_saphyr::from_str(RULES).unwrap();
    assert_eq!(rule.api_version, "monitoring.coreos.com/v1");
    assert_eq!(rule.kind, "PrometheusRule");
    assert!(rule.spec.groups.iter().all(|g| !g.name.is_empty()));
    rule.spec.groups.into_iter().flat_map(|g| g.rules).collect()
}

/// Every series the operator exposes, by sample name (`_total`, `_bucket`, `_count`, `_sum`
/// included), with the label names each carries: a registered CertMetrics (prefix
/// `cert_operator`, as `blockwork run` registers it), RuntimeMetrics (prefix `blockwork`) and
/// the AWS layer's (with seed 000's names), with every metric touched once so that each family
/// has a series.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let mut registry = Registry::default();
    let cert = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
    let runtime = RuntimeMetrics::register(registry.sub_registry_with_prefix("blockwork"));
    cert.set_tracking_limits(90, 1);
    cert.certificate("u1", "ns", "a", CertState::Ready, Some(5.0));
    cert.certificate("u2", "ns", "b", CertState::Ready, Some(6.0));
    cert.reconciled(CertState::Ready, true, Duration::from_millis(5));
    cert.export.state("u1", blockwork_cert::export::metrics::ExportState::Current);
    cert.export.copy("u1", true, Some(5.0));
    cert.export.exported("renewed");
    cert.export.failed("SecretConflict");
    let aws = AwsMetrics::register(&mut registry, &[Seed::Cert]);
    aws.call(&[Seed::Cert], "operator", Service::Acm, "DescribeCertificate", Ok(()), Duration::from_millis(5));
    aws.call(&[Seed::Cert], "operator", Service::Acm, "RequestCertificate", Err(ErrorClass::Throttled), Duration::from_millis(5));
    aws.limiter_wait(&[Seed::Cert], Service::Acm, Duration::from_millis(1));
    aws.limiter_tokens(Service::Acm, "DescribeCertificate", 8.0);
    aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::DESCRIBE_CACHE, true);
    aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::DESCRIBE_CACHE, false);
    runtime.reconciled("cert", "success", Duration::from_millis(5));
    runtime.external_call("cert", "verify", "success", Duration::from_millis(5));
    runtime.object_state("cert", "u1", Some(ReconcileState::Succeeded));

    blockwork_testenv::promql::exported(&registry).unwrap()
}

fn selectors(expr: &str) -> Vec<VectorSelector> {
    blockwork_testenv::promql::selectors(expr).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_alert_expression_parses_and_every_for_is_a_duration() {
    let rules = rules();
    assert!(!rules.is_empty());
    let mut names = BTreeSet::new();
    for rule in &rules {
        assert!(names.insert(rule.alert.as_str()), "alert {} is defined twice", rule.alert);
        assert!(!selectors(&rule.expr).is_empty(), "{} reads no metric", rule.alert);
        if let Some(duration) = &rule.for_ {
            promql_parser::util::parse_duration(duration).unwrap_or_else(|e| panic!("{}: for: {duration:?}: {e}", rule.alert));
        }
        let severity = rule.labels.get("severity").map(String::as_str);
        assert!(matches!(severity, Some("info" | "warning" | "critical")), "{}: severity {severity:?}", rule.alert);
        assert!(rule.annotations.contains_key("summary"), "{} has no summary", rule.alert);
    }
}

#[test]
fn every_metric_and_label_an_alert_uses_is_exported_by_the_operator() {
    let exported = exported();
    for rule in rules() {
        let mut labels_available = BTreeSet::new();
        for selector in selectors(&rule.expr) {
            let name = selector
                .name
                .clone()
                .or_else(|| selector.matchers.matchers.iter().find(|m| m.name == "__name__").map(|m| m.value.clone()))
                .unwrap_or_else(|| panic!("{}: a selector without a metric name", rule.alert));
            let Some(labels) = exported.get(&name) else {
                panic!("{}: {name} is not exported; the operator exports {:#?}", rule.alert, exported.keys().collect::<Vec<_>>())
            };
            for matcher in selector.matchers.matchers.iter().filter(|m| m.name != "__name__") {
                assert!(labels.contains(&matcher.name), "{}: {name} has no label {}", rule.alert, matcher.name);
            }
            labels_available.extend(labels.iter().cloned());
        }
        for annotation in rule.annotations.values() {
            for (index, _) in annotation.match_indices("$labels.") {
                let label: String =
                    annotation[index + "$labels.".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                assert!(labels_available.contains(&label), "{}: the annotation prints $labels.{label}, which its metrics lack", rule.alert);
            }
        }
    }
}

#[test]
fn the_seed_s_five_alerts_are_shipped_with_its_expressions_and_durations() {
    let rules = rules();
    let normalized = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for (alert, expr, for_, severity) in [
        (
            "CertificateExpiringSoon",
            "cert_operator_certificate_expiry_days < 14 and cert_operator_certificate_expiry_days > 0",
            "1h",
            "warning",
        ),
        (
            "CertificateExpiryCritical",
            "cert_operator_certificate_expiry_days <= 7 and cert_operator_certificate_expiry_days > 0",
            "30m",
            "critical",
        ),
        ("AWSAPIThrottlingHigh", "rate(cert_operator_throttling_events_total[5m]) > 0.1", "5m", "warning"),
        ("CertificatesFailed", r#"cert_operator_certificates_total{state="Failed"} > 0"#, "15m", "warning"),
        (
            "HighReconciliationErrorRate",
            r#"sum(rate(cert_operator_reconcile_duration_seconds_count{success="false"}[5m])) / sum(rate(cert_operator_reconcile_duration_seconds_count[5m])) > 0.1"#,
            "10m",
            "warning",
        ),
    ] {
        let rule = rules.iter().find(|r| r.alert == alert).unwrap_or_else(|| panic!("{alert} is not shipped"));
        assert_eq!(normalized(&rule.expr), expr, "{alert}");
        assert_eq!(rule.for_.as_deref(), Some(for_), "{alert}");
        assert_eq!(rule.labels.get("severity").map(String::as_str), Some(severity), "{alert}");
    }
}

#[test]
fn an_alert_on_a_metric_the_operator_does_not_export_is_caught() {
    let exported = exported();
    let selectors = selectors("rate(cert_operator_certificate_renewals_total[5m]) > 0");
    assert_eq!(selectors.len(), 1);
    assert!(!exported.contains_key(selectors[0].name.as_deref().unwrap()));
    assert!(promql_parser::parser::parse("rate(cert_operator_throttling_events_total[5m] > 0.1").is_err());
}
