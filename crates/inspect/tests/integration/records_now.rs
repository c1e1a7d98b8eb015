//! `blockwork explain` of a Cert waiting for ACM reads its validation records from Route 53 at
//! explain time (read-only) and says truthfully what is there: against moto, a pending Cert's
//! records present with ACM's value, missing, or holding another value, and the change that
//! wrote each INSYNC or (through the fault proxy, as moto always answers INSYNC) PENDING.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use blockwork_aws::{Aws, AwsMetrics};
use blockwork_cert::{Cert, CertSpec, CertState, CertStatus, ValidationRecordStatus};
use blockwork_inspect::kinds::records_now_note;
use blockwork_inspect::read::records_in_route53;
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};
use jiff::Timestamp;

/// A Cert in Verifying whose status lists `records` (name, value, change id) in `zone` as written.
fn pending_cert(zone: &str, records: &[(&str, &str, Option<&str>)]) -> Cert {
    let mut cert = Cert::new("api", CertSpec { service_name: "api".into(), environment: "prod".into(), ..Default::default() });
    let mut status = CertStatus { reconcile_state: Some(blockwork_runtime::ReconcileState::Verifying), ..Default::default() };
    status.observation.state = Some(CertState::Validated);
    status.observation.validation_records = records
        .iter()
        .map(|(name, value, change_id)| ValidationRecordStatus {
            zone_id: zone.into(),
            name: (*name).into(),
            value: (*value).into(),
            owned: true,
            pending: false,
            change_id: change_id.map(str::to_owned),
        })
        .collect();
    cert.status = Some(status);
    cert
}

/// The AWS layer `explain` builds, through the fault proxy in front of moto, the proxy, and a
/// direct Route 53 client for the arrangement.
async fn moto() -> (Arc<Aws>, FaultProxy, aws_sdk_route53::Client) {
    let endpoint = blockwork_testenv::emulators::moto().await.expect("moto").endpoint();
    let proxy = FaultProxy::start(&endpoint).await.expect("proxy starts");
    let sdk = blockwork_testenv::aws::sdk_config(&proxy.endpoint()).await;
    let layer = Aws::with_sdk_config(
        blockwork_aws::AwsConfig { endpoint_url: Some(proxy.endpoint()), ..blockwork_testenv::aws::layer_config() },
        sdk,
        Arc::new(AwsMetrics::register(&mut Default::default(), &[])),
    );
    let direct = blockwork_testenv::aws::sdk_config(&endpoint).await;
    (layer, proxy, aws_sdk_route53::Client::new(&direct))
}

/// Writes CNAMEs (name, value) in one batch as the controller does (through the layer's zone
/// queue); the batch's change id.
async fn write(layer: &Arc<Aws>, zone: &str, records: &[(&str, &str)]) -> String {
    let records =
        records.iter().map(|(name, value)| blockwork_aws::route53::Record { name: (*name).into(), value: (*value).into(), ttl: 300 });
    let change = layer
        .records()
        .upsert("cert", &blockwork_aws::route53::Zone::new(zone, blockwork_aws::Principal::operator()), records.collect())
        .await
        .expect("written");
    change.expect("Route 53 answers a change id")
}

#[tokio::test]
async fn a_pending_certs_records_are_reported_as_route53_has_them_now() {
    let (layer, _proxy, route53) = moto().await;
    let zone = blockwork_testenv::aws::hosted_zone(&route53, "records-now.example.com").await;
    let change = write(&layer, &zone, &[("_a.api.records-now.example.com.", "_a.acm-validations.aws.")]).await;
    blockwork_testenv::aws::upsert_cname(&route53, &zone, "_c.www.records-now.example.com.", "_someone-else.example.net.").await;
    let cert = pending_cert(
        &zone,
        &[
            ("_a.api.records-now.example.com.", "_a.acm-validations.aws.", Some(&change)),
            ("_b.shop.records-now.example.com.", "_b.acm-validations.aws.", None),
            ("_c.www.records-now.example.com.", "_c.acm-validations.aws.", None),
        ],
    );

    let records = records_in_route53(&layer, &cert).await;
    let note = records_now_note(&records, Timestamp::now()).expect("a note");
    eprintln!("{note}");
    assert!(note.starts_with("Route 53 now (read by explain): "), "{note}");
    let id = change.trim_start_matches("/change/");
    assert!(
        note.contains(&format!(
            "the CNAME _a.api.records-now.example.com. is in zone {zone} with the value ACM asked for, and INSYNC (change {id}, submitted "
        )),
        "{note}"
    );
    assert!(note.contains(&format!("the CNAME _b.shop.records-now.example.com. is NOT in zone {zone}")), "{note}");
    assert!(note.contains("with the value _someone-else.example.net., not ACM's _c.acm-validations.aws."), "{note}");
    assert!(note.contains("the Cert records no Route 53 change for it"), "INSYNC is not claimed without a change id: {note}");
}

#[tokio::test]
async fn a_change_route53_still_applies_is_reported_pending_and_read_once_for_all_its_records() {
    let (layer, proxy, route53) = moto().await;
    let zone = blockwork_testenv::aws::hosted_zone(&route53, "pending-change.example.com").await;
    let records = [
        ("_a.api.pending-change.example.com.", "_a.acm-validations.aws."),
        ("_b.www.pending-change.example.com.", "_b.acm-validations.aws."),
    ];
    let change = write(&layer, &zone, &records).await;
    proxy.inject(Operation::named("GetChange"), Fault::PendingChange, usize::MAX);
    let cert = pending_cert(
        &zone,
        &[
            ("_a.api.pending-change.example.com.", "_a.acm-validations.aws.", Some(&change)),
            ("_b.www.pending-change.example.com.", "_b.acm-validations.aws.", Some(&change)),
        ],
    );
    let note = records_now_note(&records_in_route53(&layer, &cert).await, Timestamp::now()).expect("a note");
    eprintln!("{note}");
    let id = change.trim_start_matches("/change/");
    assert!(
        note.contains(&format!("the CNAME _a.api.pending-change.example.com. is in zone {zone} with the value ACM asked for, and PENDING (change {id}, submitted ")),
        "{note}"
    );
    assert!(note.contains("not yet on every Route 53 name server"), "{note}");
    assert_eq!(proxy.calls("GetChange"), 1, "one change, one read: {:?}", proxy.all_calls());
}

#[tokio::test]
async fn a_zone_that_cannot_be_read_is_said_so_not_guessed() {
    let (layer, _proxy, _) = moto().await;
    let cert = pending_cert("ZNOSUCHZONE0000000000", &[("_a.api.example.com.", "_a.acm-validations.aws.", None)]);
    let note = records_now_note(&records_in_route53(&layer, &cert).await, Timestamp::now()).expect("a note");
    assert!(note.contains("in zone ZNOSUCHZONE0000000000 could not be read: NoSuchHostedZone"), "{note}");
}

#[tokio::test]
async fn an_issued_cert_reads_nothing() {
    let (layer, proxy, _) = moto().await;
    let mut cert = pending_cert("Z1", &[("_a.api.example.com.", "_a.acm-validations.aws.", Some("/change/C1"))]);
    if let Some(status) = cert.status.as_mut() {
        status.observation.cert_ready = true;
    }
    assert!(records_in_route53(&layer, &cert).await.is_empty());
    assert_eq!(proxy.calls("GetChange") + proxy.calls("ListResourceRecordSets"), 0);
}
