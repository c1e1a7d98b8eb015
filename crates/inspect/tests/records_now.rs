//! `blockwork explain` of a Cert waiting for ACM reads its validation records from Route 53 at
//! explain time (read-only) and says truthfully what is there: against moto, a pending Cert's
//! records present with ACM's value, missing, or holding another value.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use blockwork_aws::{Aws, AwsMetrics};
use blockwork_cert::{Cert, CertSpec, CertState, CertStatus, ValidationRecordStatus};
use blockwork_inspect::kinds::records_now_note;
use blockwork_inspect::read::records_in_route53;

/// A Cert in Verifying whose status lists `records` (name, value) in `zone` as written.
fn pending_cert(zone: &str, records: &[(&str, &str)]) -> Cert {
    let mut cert = Cert::new("api", CertSpec { service_name: "api".into(), environment: "prod".into(), ..Default::default() });
    let mut status = CertStatus { reconcile_state: Some(blockwork_runtime::ReconcileState::Verifying), ..Default::default() };
    status.observation.state = Some(CertState::Validated);
    status.observation.validation_records = records
        .iter()
        .map(|(name, value)| ValidationRecordStatus {
            zone_id: zone.into(),
            name: (*name).into(),
            value: (*value).into(),
            owned: true,
            pending: false,
        })
        .collect();
    cert.status = Some(status);
    cert
}

async fn moto() -> (Arc<Aws>, aws_sdk_route53::Client) {
    let endpoint = blockwork_testenv::emulators::moto().await.expect("moto").endpoint();
    let sdk = blockwork_testenv::aws::sdk_config(&endpoint).await;
    let layer = Aws::with_sdk_config(
        blockwork_aws::AwsConfig { endpoint_url: Some(endpoint), ..blockwork_testenv::aws::layer_config() },
        sdk.clone(),
        Arc::new(AwsMetrics::register(&mut Default::default(), &[])),
    );
    (layer, aws_sdk_route53::Client::new(&sdk))
}

#[tokio::test]
async fn a_pending_certs_records_are_reported_as_route53_has_them_now() {
    let (layer, route53) = moto().await;
    let zone = blockwork_testenv::aws::hosted_zone(&route53, "records-now.example.com").await;
    blockwork_testenv::aws::upsert_cname(&route53, &zone, "_a.api.records-now.example.com.", "_a.acm-validations.aws.").await;
    blockwork_testenv::aws::upsert_cname(&route53, &zone, "_c.www.records-now.example.com.", "_someone-else.example.net.").await;
    let cert = pending_cert(
        &zone,
        &[
            ("_a.api.records-now.example.com.", "_a.acm-validations.aws."),
            ("_b.shop.records-now.example.com.", "_b.acm-validations.aws."),
            ("_c.www.records-now.example.com.", "_c.acm-validations.aws."),
        ],
    );

    let records = records_in_route53(&layer, &cert).await;
    let note = records_now_note(&records).expect("a note");
    eprintln!("{note}");
    assert!(note.starts_with("Route 53 now (read by explain): "), "{note}");
    assert!(note.contains(&format!("the CNAME _a.api.records-now.example.com. is in zone {zone} with the value ACM asked for")), "{note}");
    assert!(note.contains(&format!("the CNAME _b.shop.records-now.example.com. is NOT in zone {zone}")), "{note}");
    assert!(note.contains("with the value _someone-else.example.net., not ACM's _c.acm-validations.aws."), "{note}");
    assert!(note.contains("the Cert records no change id, so that is not checked"), "INSYNC is not claimed: {note}");
}

#[tokio::test]
async fn a_zone_that_cannot_be_read_is_said_so_not_guessed() {
    let (layer, _) = moto().await;
    let cert = pending_cert("ZNOSUCHZONE0000000000", &[("_a.api.example.com.", "_a.acm-validations.aws.")]);
    let note = records_now_note(&records_in_route53(&layer, &cert).await).expect("a note");
    assert!(note.contains("in zone ZNOSUCHZONE0000000000 could not be read: NoSuchHostedZone"), "{note}");
}

#[tokio::test]
async fn an_issued_cert_reads_nothing() {
    let (layer, _) = moto().await;
    let mut cert = pending_cert("Z1", &[("_a.api.example.com.", "_a.acm-validations.aws.")]);
    if let Some(status) = cert.status.as_mut() {
        status.observation.cert_ready = true;
    }
    assert!(records_in_route53(&layer, &cert).await.is_empty());
}
