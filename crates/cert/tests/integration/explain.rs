//! `blockwork explain`, `status`, `retry`, `pause` and `resume` on Certs driven into each state
//! against the real kube-apiserver and moto (through the fault proxy): the hint named, the
//! numbers right.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use blockwork_cert::CertState;
use blockwork_inspect::actions::{self, Retried};
use blockwork_inspect::diagnose::diagnose;
use blockwork_inspect::read::{self, KindArg, Scope};
use blockwork_inspect::render::{self, Explanation, Row};
use blockwork_inspect::report::{Origin, Report};
use blockwork_runtime::ReconcileState;
use blockwork_testenv::fault_proxy::{Fault, Operation};
use jiff::Timestamp;
use std::time::Duration;

fn keys() -> read::Keys {
    read::default_keys()
}

async fn read_report(h: &Harness, name: &str) -> Report {
    read::report(&h.client, &h.namespace, KindArg::Cert, name, &keys(), Timestamp::now()).await.unwrap()
}

/// What `blockwork explain cert/NAME` prints.
async fn explain(h: &Harness, name: &str) -> String {
    let now = Timestamp::now();
    render::explain(&Explanation::of(read_report(h, name).await, now), now)
}

fn state(cert: &blockwork_cert::Cert) -> Option<ReconcileState> {
    cert.status.as_ref().and_then(|s| s.reconcile_state)
}

#[tokio::test]
async fn a_cert_pending_validation_names_its_record_zone_and_how_long_it_waited() {
    let h = Harness::start("explain-pending", &["main"]).await;
    // In every answer: the operator reads the certificate from its listing first.
    for operation in ["DescribeCertificate", "ListCertificates"] {
        h.proxy.inject(Operation::named(operation), Fault::PendingValidation, 100_000);
    }
    h.create("api", spec("api", "prod")).await;
    let cert = h.wait_for_state("api", CertState::Validated).await;
    let record = status(&cert).observation.validation_records.first().cloned().expect("a validation record");
    let text = explain(&h, "api").await;
    eprintln!("{text}");
    let domain = format!("api-prod.{}", h.zones[0].name);
    assert!(text.contains(&format!("DNS validation of {domain} pending for ")), "{text}");
    assert!(text.contains(&format!("the CNAME {} is written in zone {}", record.name, h.zones[0].id)), "{text}");
    assert!(text.contains("ACM usually issues within 30 min"), "{text}");
    assert!(text.contains("ACM status            PENDING_VALIDATION"), "{text}");
    assert!(text.contains(&format!("hosted zone       {} ({})  [ok]", h.zones[0].name, h.zones[0].id)), "{text}");
    assert!(text.contains("State:      Verifying for ") && text.contains("(Cert state Validated)"), "{text}");
    assert!(text.contains("InProgress (Ready)"), "the Ready reason is explained: {text}");
}

/// What `blockwork explain` adds for a Cert waiting for ACM: Route 53 read now, through the AWS
/// layer it builds (here at the harness's fault proxy in front of moto).
async fn explain_with_route53(h: &Harness, name: &str) -> String {
    let endpoint = h.proxy.endpoint();
    let layer = blockwork_aws::Aws::with_sdk_config(
        blockwork_aws::AwsConfig { endpoint_url: Some(endpoint.clone()), ..blockwork_testenv::aws::layer_config() },
        blockwork_testenv::aws::sdk_config(&endpoint).await,
        std::sync::Arc::new(blockwork_aws::AwsMetrics::register(&mut Default::default(), &[])),
    );
    let cert = h.api().get(name).await.unwrap();
    let now = Timestamp::now();
    let mut report = read_report(h, name).await;
    report.notes.extend(blockwork_inspect::kinds::records_now_note(&read::records_in_route53(&layer, &cert).await, now));
    render::explain(&Explanation::of(report, now), now)
}

#[tokio::test]
async fn a_cert_pending_validation_says_whether_the_change_that_wrote_its_record_is_pending_or_insync() {
    let h = Harness::start("explain-insync", &["main"]).await;
    // In every answer: the operator reads the certificate from its listing first.
    for operation in ["DescribeCertificate", "ListCertificates"] {
        h.proxy.inject(Operation::named(operation), Fault::PendingValidation, 100_000);
    }
    h.create("api", spec("api", "prod")).await;
    let cert = h.wait_for_state("api", CertState::Validated).await;
    let record = status(&cert).observation.validation_records.first().cloned().expect("a validation record");
    let change = record.change_id.clone().expect("the Cert records the change of the batch that wrote its record");
    let change = change.trim_start_matches("/change/");
    let zone = &h.zones[0].id;

    // moto applies a change at once: INSYNC.
    let text = explain_with_route53(&h, "api").await;
    eprintln!("{text}");
    assert!(
        text.contains(&format!(
            "the CNAME {} is in zone {zone} with the value ACM asked for, and INSYNC (change {change}, submitted ",
            record.name
        )),
        "{text}"
    );

    // Route 53 still applying it (moto never does; the proxy answers PENDING as Route 53 would).
    h.proxy.inject(Operation::named("GetChange"), Fault::PendingChange, 100_000);
    let text = explain_with_route53(&h, "api").await;
    eprintln!("{text}");
    assert!(
        text.contains(&format!("the CNAME {} is in zone {zone} with the value ACM asked for, and PENDING (change {change}, ", record.name)),
        "{text}"
    );
    assert!(text.contains("not yet on every Route 53 name server"), "{text}");
}

#[tokio::test]
async fn a_throttled_cert_shows_the_class_the_attempts_and_the_next_retry() {
    let h = Harness::start("explain-throttled", &["main"]).await;
    h.proxy.inject(Operation::named("RequestCertificate"), Fault::Throttling, 100_000);
    h.create("api", spec("api", "slow")).await;
    let cert = h
        .wait_for("api", "throttled twice", |c| {
            c.status.as_ref().and_then(|s| s.last_error.as_ref()).is_some_and(|e| e.reason == "ThrottlingException" && e.attempts >= 2)
        })
        .await;
    let recorded = status(&cert).last_error.clone().unwrap();
    let report = read_report(&h, "api").await;
    let error = report.last_error.clone().unwrap();
    assert_eq!((error.class.as_deref(), error.reason.as_str()), (Some("Throttled"), "ThrottlingException"));
    assert!(error.attempts.unwrap() >= recorded.attempts, "{error:?}");
    assert_eq!(error.since, Some(recorded.since.0), "the first throttled attempt");
    let now = Timestamp::now();
    let diagnosis = diagnose(&report, now);
    // The harness's throttle floor is 300 ms, its error backoff at most 1 s (±10 %).
    let ahead = error.retry_at.unwrap().duration_since(recorded.since.0);
    assert!(ahead > jiff::SignedDuration::ZERO, "the retry is after the first attempt: {ahead:?}");
    assert!(diagnosis.headline.contains("ThrottlingException (Throttled)"), "{}", diagnosis.headline);
    assert!(diagnosis.headline.contains("times in a row since"), "{}", diagnosis.headline);
    assert_eq!(diagnosis.hints[0].reason, "ThrottlingException");
    assert!(diagnosis.hints[0].fix.contains("backs off"), "{:?}", diagnosis.hints[0]);
    let text = render::explain(&Explanation::of(report, now), now);
    eprintln!("{text}");
    assert!(text.contains("  class     Throttled"), "{text}");
    assert!(text.contains("Rate exceeded"), "AWS's message: {text}");
}

#[tokio::test]
async fn access_denied_fails_the_cert_and_retry_clears_it_at_once() {
    let h = Harness::start("explain-denied", &["main"]).await;
    h.proxy.inject(Operation::named("RequestCertificate"), Fault::AccessDenied, 100_000);
    h.create("api", spec("api", "dev")).await;
    h.wait_for("api", "Failed", |c| state(c) == Some(ReconcileState::Failed)).await;
    let report = read_report(&h, "api").await;
    let now = Timestamp::now();
    let diagnosis = diagnose(&report, now);
    assert!(diagnosis.headline.starts_with("Cert Failed for "), "{}", diagnosis.headline);
    assert!(diagnosis.headline.contains("AccessDeniedException (Terminal)"), "{}", diagnosis.headline);
    assert!(diagnosis.headline.contains("or at once with `blockwork retry cert/api`"), "{}", diagnosis.headline);
    assert!(diagnosis.hints[0].fix.contains("Grant the IAM identity the call acts as"), "{:?}", diagnosis.hints);
    assert!(!render::explain(&Explanation::of(report.clone(), now), now).contains("123456789012"), "no account id");
    let row = Row::of(&report, now);
    assert_eq!((row.state.as_str(), row.ready), ("Failed", Some(false)));
    assert!(row.last_error.as_deref().is_some_and(|e| e.starts_with("AccessDeniedException: RequestCertificate")), "{row:?}");

    // Permission granted: `blockwork retry` is taken by the controller and the Cert goes on.
    h.proxy.clear();
    let retried = actions::retry(&h.client, &h.namespace, KindArg::Cert, "api", &keys(), Duration::from_secs(20)).await.unwrap();
    let Retried::Handled { value } = retried else { panic!("the controller took the request: {retried:?}") };
    let cert = h.api().get("api").await.unwrap();
    assert_eq!(status(&cert).last_handled_reconcile_at.as_deref(), Some(value.as_str()));
    let cert = h.wait_for("api", "past Failed", |c| state(c).is_some_and(|s| s != ReconcileState::Failed)).await;
    assert!(status(&cert).last_error.is_none() || status(&cert).last_error.as_ref().is_some_and(|e| e.reason != "AccessDeniedException"));
}

#[tokio::test]
async fn a_paused_cert_says_so_and_where_the_pause_came_from_until_resumed() {
    let h = Harness::start("explain-paused", &["main"]).await;
    h.create("api", spec("api", "paused")).await;
    h.wait_for_state("api", CertState::Ready).await;
    let message = actions::set_paused(&h.client, &h.namespace, KindArg::Cert, "api", true).await.unwrap();
    assert!(message.contains("until `blockwork resume`"), "{message}");
    h.wait_for("api", "paused", |c| c.status.as_ref().and_then(|s| s.condition("Synced")).is_some_and(|c| c.reason == "ReconcilePaused"))
        .await;
    let report = read_report(&h, "api").await;
    let paused = report.policies.iter().find(|p| p.name == "paused").unwrap();
    assert_eq!((paused.value.as_str(), paused.origin, paused.source.as_str()), ("true", Origin::Annotation, "blockwork.dev/paused"));
    let headline = diagnose(&report, Timestamp::now()).headline;
    assert!(headline.starts_with("Paused by the annotation blockwork.dev/paused (since "), "{headline}");
    assert!(headline.contains("`blockwork resume cert/api`"), "{headline}");
    assert!(
        actions::retry(&h.client, &h.namespace, KindArg::Cert, "api", &keys(), Duration::ZERO)
            .await
            .unwrap_err()
            .to_string()
            .contains("resume")
    );

    actions::set_paused(&h.client, &h.namespace, KindArg::Cert, "api", false).await.unwrap();
    h.wait_for("api", "resumed", |c| c.status.as_ref().and_then(|s| s.condition("Synced")).is_some_and(|c| c.reason == "ReconcileSuccess"))
        .await;
    assert_eq!(diagnose(&read_report(&h, "api").await, Timestamp::now()).headline.split(' ').next(), Some("Ready"));
}

#[tokio::test]
async fn status_lists_every_cert_of_the_namespace_with_its_state() {
    let h = Harness::start("status", &["main"]).await;
    h.proxy.inject(Operation::named("RequestCertificate"), Fault::AccessDenied, 100_000);
    h.create("denied", spec("denied", "a")).await;
    h.wait_for("denied", "Failed", |c| state(c) == Some(ReconcileState::Failed)).await;
    let now = Timestamp::now();
    let (reports, missing) =
        read::reports(&h.client, &Scope::Namespace(h.namespace.clone()), &[KindArg::Cert], &keys(), now).await.unwrap();
    assert!(missing.is_empty());
    let rows: Vec<Row> = reports.iter().map(|r| Row::of(r, now)).collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let table = render::table(&rows, now);
    assert!(
        table.contains(&format!("{}/denied", h.namespace)) && table.contains("Failed") && table.contains("AccessDeniedException"),
        "{table}"
    );
}

#[tokio::test]
async fn an_issued_cert_shows_the_configmap_it_publishes_its_arn_in() {
    let h = Harness::start("explain-published", &["main"]).await;
    h.create("api", spec("api", "pub")).await;
    h.wait_for("api", "Succeeded", |c| state(c) == Some(ReconcileState::Succeeded)).await;
    // The ConfigMap is written by the reconcile that finds the certificate issued.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let configmap = loop {
        let report = read_report(&h, "api").await;
        let configmap = report.owned.iter().find(|o| o.kind == "ConfigMap").cloned().expect("the ConfigMap is listed");
        if configmap.ready || tokio::time::Instant::now() > deadline {
            break configmap;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(configmap.name, "api-certificate");
    assert_eq!((configmap.state.as_str(), configmap.ready), ("published: certificateArn, domainName, expirationDate", true));
    let text = explain(&h, "api").await;
    assert!(text.contains("Owned objects:\n  ConfigMap/api-certificate  published: "), "{text}");
}

#[tokio::test]
async fn an_exporting_cert_shows_its_secret_its_serial_against_acm_s_and_the_last_export() {
    let h = Harness::start("explain-export", &["main"]).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = h
        .wait_for("api", "exported", |c| c.status.as_ref().and_then(|s| s.condition("Exported")).is_some_and(|c| c.status == "True"))
        .await;
    let serial = status(&cert).observation.export.clone().unwrap().serial;
    let endpoint = h.proxy.endpoint();
    let layer = blockwork_aws::Aws::with_sdk_config(
        blockwork_aws::AwsConfig { endpoint_url: Some(endpoint.clone()), ..blockwork_testenv::aws::layer_config() },
        blockwork_testenv::aws::sdk_config(&endpoint).await,
        std::sync::Arc::new(blockwork_aws::AwsMetrics::register(&mut Default::default(), &[])),
    );
    let now = Timestamp::now();
    let mut report = read_report(&h, "api").await;
    report.owned.extend(read::export_in(&layer, &h.client, &cert).await.unwrap());
    let text = render::explain(&Explanation::of(report, now), now);
    assert!(text.contains(&format!("into Secret api-tls (serial {serial}, expires ")), "{text}");
    assert!(text.contains("exported ") && text.contains(" ago)"), "the last export: {text}");
    // moto shows its own serials in decimal: compared as numbers.
    assert!(text.contains(&format!("exported: serial {serial}, the same as ACM's")), "{text}");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}
