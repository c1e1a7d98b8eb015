//! The Cert operator's metrics (seed 000 part 5) as a controller against the real
//! kube-apiserver and moto exposes them.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::*;
use blockwork_cert::CertState;
use blockwork_testenv::fault_proxy::{Fault, Operation};

/// The value of the sample `line_prefix` (name and labels, exactly as exposed), if present.
fn sample(text: &str, line_prefix: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(line_prefix)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_ready_cert_shows_in_the_state_expiry_reconcile_aws_and_rate_limiter_metrics() {
    let h = Harness::start("metrics", &["main"]).await;
    h.create("api", spec("api", "dev")).await;
    h.wait_for_state("api", CertState::Ready).await;
    let text = h.scrape();
    assert_eq!(sample(&text, r#"cert_operator_certificates_total{state="Ready"}"#), Some(1.0), "{text}");
    assert_eq!(sample(&text, r#"cert_operator_certificates_total{state="Failed"}"#), Some(0.0), "{text}");
    // moto issues certificates for a year: one certificate beyond 90 days, no per-certificate series.
    assert_eq!(sample(&text, r#"cert_operator_certificate_expiry_buckets{bucket="90d+"}"#), Some(1.0), "{text}");
    assert_eq!(text.matches("cert_operator_certificate_expiry_buckets{").count(), 6, "{text}");
    assert!(!text.contains("cert_operator_certificate_expiry_days{"), "{text}");
    assert!(sample(&text, r#"cert_operator_reconcile_duration_seconds_count{state="Pending",success="true"}"#) >= Some(1.0), "{text}");
    assert!(sample(&text, r#"cert_operator_aws_api_calls_total{operation="RequestCertificate",success="true"}"#) == Some(1.0), "{text}");
    assert!(sample(&text, r#"cert_operator_aws_api_latency_seconds_count{operation="DescribeCertificate"}"#) >= Some(1.0), "{text}");
    assert!(sample(&text, r#"cert_operator_rate_limit_wait_seconds_count{service="acm"}"#) >= Some(1.0), "{text}");
    assert!(sample(&text, r#"cert_operator_rate_limit_wait_seconds_count{service="route53"}"#) >= Some(1.0), "{text}");
    let tokens = sample(&text, r#"cert_operator_rate_limiter_tokens{service="acm"}"#).unwrap();
    assert!((0.0..=50.0).contains(&tokens), "{text}");
    assert!(sample(&text, r#"cert_operator_cache_misses_total{lookup_type="fqdn"}"#) >= Some(1.0), "{text}");
}

#[tokio::test]
async fn failing_aws_calls_are_recorded_as_unsuccessful_reconciles_and_throttling_events() {
    let h = Harness::start("metrics-fail", &["main"]).await;
    h.proxy.inject(Operation::named("RequestCertificate"), Fault::Throttling, 1000);
    h.create("api", spec("api", "dev")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let text = h.scrape();
        let failed = sample(&text, r#"cert_operator_reconcile_duration_seconds_count{state="Pending",success="false"}"#);
        let throttled = sample(&text, r#"cert_operator_throttling_events_total{operation="RequestCertificate"}"#);
        let calls = sample(&text, r#"cert_operator_aws_api_calls_total{operation="RequestCertificate",success="false"}"#);
        if failed >= Some(1.0) && throttled >= Some(1.0) && calls >= Some(2.0) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no failed reconcile recorded:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    h.proxy.clear();
    h.wait_for_state("api", CertState::Ready).await;
}
