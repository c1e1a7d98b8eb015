//! A certificate that expires, or whose managed renewal fails, behind the operator's back is
//! noticed by the certificate listing's sweep, without a reconcile of its own (the Ready requeue
//! is the production hour). Beside `a_revoked_certificate_is_noticed_by_the_sweep_…` in
//! lifecycle.rs. moto never expires nor renews a certificate; the fault proxy answers as ACM
//! does for one (`FaultProxy::set_certificate_status`, `FaultProxy::fail_renewal`). How soon,
//! and at what cost, is measured by `cargo bench -p blockwork-cert --bench thousand`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::*;
use blockwork_cert::CertState;

#[tokio::test]
async fn an_expired_certificate_is_noticed_by_the_sweep_without_a_reconcile_of_its_own() {
    let h = Harness::start_with("expired", &["main"], |config, _| config.acm.sweep = Duration::from_secs(1)).await;
    h.create("api", spec("api", "expired")).await;
    let cert = h.wait_for_records_written("api").await;
    let arn = status(&cert).observation.certificate_arn.clone().unwrap();
    h.proxy.set_certificate_status(&arn, "EXPIRED");
    let failed = h.wait_for_state("api", CertState::Failed).await;
    assert_eq!(status(&failed).condition("Ready").map(|c| c.reason.as_str()), Some("Expired"));
}

#[tokio::test]
async fn a_failed_renewal_is_noticed_by_the_sweep_and_shown_in_the_status() {
    let h = Harness::start_with("renewal-failed", &["main"], |config, _| config.acm.sweep = Duration::from_secs(1)).await;
    h.create("api", spec("api", "renewal")).await;
    let cert = h.wait_for_records_written("api").await;
    let arn = status(&cert).observation.certificate_arn.clone().unwrap();
    let describes = h.proxy.calls("DescribeCertificate");
    h.proxy.fail_renewal(&arn);
    let noticed =
        h.wait_for("api", "showing the failed renewal", |c| status(c).observation.renewal_status.as_deref() == Some("FAILED")).await;
    // Still usable until it expires: Ready, with the expiry ACM now reports (30 days ahead), and
    // a condition that says a person must act.
    assert_eq!(status(&noticed).observation.state, Some(CertState::Ready));
    let renewed = status(&noticed).condition("Renewed").expect("a Renewed condition");
    assert_eq!((renewed.status.as_str(), renewed.reason.as_str()), ("False", "RenewalFailed"));
    let expires = status(&noticed).observation.expiration_date.as_ref().unwrap().0;
    let days = expires.duration_since(jiff::Timestamp::now()).as_hours() / 24;
    assert!((29..=30).contains(&days), "expires in {days} days");
    // The listing shows an issued certificate inside the renewal window; only its description
    // tells the renewal failed.
    assert!(h.proxy.calls("DescribeCertificate") > describes);
}
