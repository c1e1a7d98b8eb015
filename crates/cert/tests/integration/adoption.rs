#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 31, Cert: adopting an ACM certificate that already exists (`spec.adopt.certificateArn`),
//! handing it over between objects, and the same manifest applied again elsewhere (a new
//! object of the same name: a new cluster), against the real API server and moto behind the
//! fault proxy, which counts every call (ADR 0017).

use std::time::Duration;

use crate::support::{Harness, spec, status};
use blockwork_cert::api::AdoptSpec;
use blockwork_cert::{Cert, CertSpec, CertState};

/// The Cert's certificate name in the harness's first zone.
fn domain(h: &Harness, service: &str) -> String {
    format!("{service}-prod.{}", h.zones[0].name)
}

fn adopting(service: &str, arn: &str) -> CertSpec {
    CertSpec { adopt: Some(AdoptSpec { certificate_arn: arn.to_owned() }), ..spec(service, "prod") }
}

/// A certificate requested straight from moto (as the console or Terraform would), issued.
async fn existing_certificate(h: &Harness, names: &[String]) -> String {
    let arn = blockwork_testenv::aws::request_certificate(&h.acm, names).await;
    blockwork_testenv::harness::eventually("the certificate made outside Blockwork to be issued", Duration::from_secs(60), async || {
        let described = h.acm.describe_certificate().certificate_arn(&arn).send().await.map_err(|e| e.to_string())?;
        let status = described.certificate().and_then(|c| c.status()).map(|s| s.as_str().to_owned());
        if status.as_deref() == Some("ISSUED") { Ok(()) } else { Err(format!("{status:?}")) }
    })
    .await;
    arn
}

async fn tags(h: &Harness, arn: &str) -> Vec<(String, String)> {
    let listed = h.acm.list_tags_for_certificate().certificate_arn(arn).send().await.unwrap();
    listed.tags().iter().map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned())).collect()
}

fn tag<'a>(tags: &'a [(String, String)], key: &str) -> Option<&'a str> {
    tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn ready_reason(cert: &Cert) -> Option<String> {
    cert.status.as_ref().and_then(|s| s.condition("Ready")).map(|c| c.reason.clone())
}

async fn wait_for_reason(h: &Harness, name: &str, reason: &str) -> Cert {
    h.wait_for(name, reason, |c| ready_reason(c).as_deref() == Some(reason)).await
}

#[tokio::test]
async fn a_certificate_made_outside_blockwork_is_adopted_with_only_its_ownership_tags_written() {
    let h = Harness::start("adopt-outside", &["main"]).await;
    let arn = existing_certificate(&h, &[domain(&h, "api")]).await;
    let before = h.proxy.all_calls();

    let created = h.create("api", adopting("api", &arn)).await;
    let ready = h.wait_for_state("api", CertState::Ready).await;

    assert_eq!(status(&ready).observation.certificate_arn.as_deref(), Some(arn.as_str()));
    let tags = tags(&h, &arn).await;
    assert_eq!(tag(&tags, "blockwork.dev/owner-uid"), created.metadata.uid.as_deref(), "{tags:?}");
    assert_eq!(tag(&tags, "blockwork.dev/owner"), Some(format!("{}/api", h.namespace).as_str()));
    let made = |operation: &str| h.proxy.calls(operation) - before.get(operation).copied().unwrap_or(0);
    assert_eq!(made("RequestCertificate"), 0, "no certificate is requested: {:?}", h.proxy.all_calls());
    assert_eq!(made("AddTagsToCertificate"), 1, "the one write is the ownership tags");
    assert_eq!(made("DeleteCertificate"), 0);
    assert_eq!(made("ChangeResourceRecordSets"), 0, "an issued certificate gets no record written");
}

#[tokio::test]
async fn a_mismatching_certificate_is_refused_naming_every_difference_and_nothing_is_written() {
    let h = Harness::start("adopt-mismatch", &["main"]).await;
    let zone = h.zones[0].name.clone();
    let arn = existing_certificate(&h, &[format!("web-prod.{zone}"), format!("old.{zone}")]).await;

    h.create("api", CertSpec { subject_alternative_names: vec![format!("new.{zone}")], ..adopting("api", &arn) }).await;
    let refused = wait_for_reason(&h, "api", "AdoptionMismatch").await;

    let message = &status(&refused).condition("Ready").unwrap().message;
    for difference in [format!("web-prod.{zone}"), format!("new.{zone}"), format!("old.{zone}")] {
        assert!(message.contains(&difference), "{difference} named in: {message}");
    }
    assert!(!message.contains("123456789012"), "no account id: {message}");
    assert_eq!(h.proxy.calls("AddTagsToCertificate"), 0, "nothing is written");
    assert_eq!(h.proxy.calls("RequestCertificate"), 0);
    assert_eq!(tag(&tags(&h, &arn).await, "blockwork.dev/owner-uid"), None);
}

#[tokio::test]
async fn a_certificate_arn_of_the_wrong_kind_is_refused_by_the_schema_naming_the_field() {
    let h = Harness::start("adopt-kind", &["main"]).await;
    for wrong in [
        "arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/0b8c1a4e-1111-2222-3333-444455556666",
        "arn:aws:cloudfront::123456789012:distribution/E2QWRUHAPOMQZL",
        "arn:aws:iam::123456789012:server-certificate/api",
        "not an arn",
    ] {
        let refusal = h.refusal(&Cert::new("api", adopting("api", wrong))).await;
        assert!(refusal.contains("spec.adopt.certificateArn"), "{wrong}: {refusal}");
    }
}

#[tokio::test]
async fn a_certificate_in_another_account_is_refused_before_any_call_that_writes() {
    let h = Harness::start("adopt-account", &["main"]).await;
    let elsewhere = "arn:aws:acm:us-east-1:999999999999:certificate/0b8c1a4e-1111-2222-3333-444455556666";

    h.create("api", adopting("api", elsewhere)).await;
    let refused = wait_for_reason(&h, "api", "AdoptionRefused").await;

    let message = &status(&refused).condition("Ready").unwrap().message;
    assert!(message.contains("another AWS account") && !message.contains("999999999999"), "{message}");
    assert_eq!(h.proxy.calls("AddTagsToCertificate"), 0);
    assert_eq!(h.proxy.calls("DescribeCertificate"), 0, "refused before asking ACM about another account's certificate");
}

#[tokio::test]
async fn the_same_manifest_applied_again_requests_no_duplicate_and_adopts_when_told() {
    let h = Harness::start("adopt-again", &["main"]).await;
    // The "old cluster's" object: requested its certificate, then went without deleting it.
    h.create("api", spec("api", "prod")).await;
    let old = h.wait_for_records_written("api").await;
    let arn = status(&old).observation.certificate_arn.clone().unwrap();
    h.delete_and_wait("api").await;
    assert_eq!(h.proxy.calls("RequestCertificate"), 1);

    // The same manifest again: a new object (a new UID), as in a new cluster.
    h.create("api", spec("api", "prod")).await;
    let stopped = wait_for_reason(&h, "api", "OwnedElsewhere").await;
    let message = &status(&stopped).condition("Ready").unwrap().message;
    assert!(message.contains("spec.adopt.certificateArn") && message.contains(&format!("{}/api", h.namespace)), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.proxy.calls("RequestCertificate"), 1, "no duplicate certificate is requested");

    // The documented path: adopt it.
    let new = h.merge("api", serde_json::json!({"spec": {"adopt": {"certificateArn": arn}}})).await;
    let ready = h.wait_for_state("api", CertState::Ready).await;
    assert_eq!(status(&ready).observation.certificate_arn.as_deref(), Some(arn.as_str()));
    assert_eq!(tag(&tags(&h, &arn).await, "blockwork.dev/owner-uid"), new.metadata.uid.as_deref());
    assert_eq!(h.proxy.calls("RequestCertificate"), 1, "still the one certificate");
    assert_eq!(h.certificates_for(&domain(&h, "api")).await, vec![arn]);
}

#[tokio::test]
async fn the_previous_owner_notices_it_lost_the_certificate_stops_and_on_deletion_deletes_nothing() {
    let h = Harness::start_with("adopt-handover", &["main"], |config, _| config.ownership_interval = Duration::from_millis(500)).await;
    let deleting = CertSpec { delete_on_removal: true, ..spec("api", "prod") };
    h.create("old", deleting.clone()).await;
    let old = h.wait_for_records_written("old").await;
    let arn = status(&old).observation.certificate_arn.clone().unwrap();
    let records = h.cnames(&h.zones[0]).await;

    // Another object takes it over.
    let new = h.create("new", CertSpec { adopt: Some(AdoptSpec { certificate_arn: arn.clone() }), ..deleting }).await;
    h.wait_for_state("new", CertState::Ready).await;
    assert_eq!(tag(&tags(&h, &arn).await, "blockwork.dev/owner-uid"), new.metadata.uid.as_deref());

    // The previous owner's next look (here: the ownership interval passed, and something
    // wakes it) finds the certificate is another's.
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.annotate("old", "example.com/touched", Some("1")).await;
    let lost = wait_for_reason(&h, "old", "OwnershipLost").await;
    let message = &status(&lost).condition("Ready").unwrap().message;
    assert!(message.contains(&format!("{}/new", h.namespace)), "the new owner is named: {message}");
    assert_eq!(status(&lost).observation.ownership_lost, Some(blockwork_aws::mask_accounts(&arn)), "which one, its account masked");
    assert_eq!(status(&lost).observation.certificate_arn, None);
    let events = h.wait_for_event("old", "OwnershipLost").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].type_, "Warning");

    // Sticky: it never takes the certificate back.
    h.annotate("old", "example.com/touched", Some("2")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(tag(&tags(&h, &arn).await, "blockwork.dev/owner-uid"), new.metadata.uid.as_deref());
    assert_eq!(ready_reason(&h.get("old").await.unwrap()).as_deref(), Some("OwnershipLost"));

    // Deleting it (deleteOnRemoval: true) deletes nothing in AWS.
    let writes_before = h.proxy.calls("ChangeResourceRecordSets");
    h.delete_and_wait("old").await;
    assert_eq!(h.proxy.calls("DeleteCertificate"), 0);
    assert_eq!(h.proxy.calls("ChangeResourceRecordSets"), writes_before, "no record is deleted");
    assert!(h.certificate_exists(&arn).await);
    assert_eq!(h.cnames(&h.zones[0]).await, records, "the validation records stay for the new owner's renewals");
    assert_eq!(h.get("new").await.and_then(|c| ready_reason(&c)).as_deref(), Some("Available"));
}

/// A Cert Ready on `arn`'s certificate ("old"), then another object adopting it ("new"), Ready.
async fn taken_over(h: &Harness) -> (String, Cert) {
    h.create("old", spec("api", "prod")).await;
    let old = h.wait_for_records_written("old").await;
    let arn = status(&old).observation.certificate_arn.clone().unwrap();
    let new = h.create("new", adopting("api", &arn)).await;
    h.wait_for_state("new", CertState::Ready).await;
    assert_eq!(tag(&tags(h, &arn).await, "blockwork.dev/owner-uid"), new.metadata.uid.as_deref());
    (arn, new)
}

#[tokio::test]
async fn a_ready_cert_notices_a_takeover_within_the_ownership_interval_with_nothing_else_waking_it() {
    // Ready Certs are requeued hourly here, as in the operator: only the ownership check's own
    // schedule brings the old Cert's look.
    let h = Harness::start_with("adopt-interval", &["main"], |config, _| config.ownership_interval = Duration::from_secs(2)).await;
    let (arn, _) = taken_over(&h).await;

    let lost = wait_for_reason(&h, "old", "OwnershipLost").await;

    assert_eq!(status(&lost).observation.ownership_lost, Some(blockwork_aws::mask_accounts(&arn)));
    assert!(h.proxy.calls("ListTagsForCertificate") > 0);
}

#[tokio::test]
async fn a_lost_certificate_is_told_once_naming_its_new_owner_through_later_looks_and_restarts() {
    let mut h = Harness::start_with("adopt-told-once", &["main"], |config, _| config.ownership_interval = Duration::from_secs(1)).await;
    taken_over(&h).await;
    let lost = wait_for_reason(&h, "old", "OwnershipLost").await;
    let told = status(&lost).condition("Ready").unwrap().message.clone();
    assert!(told.contains(&format!("{}/new", h.namespace)), "the new owner is named: {told}");

    // Later looks: a change of the object, the Failed interval's retries (a second here), and
    // two restarts of the operator, each a new process looking at every Cert.
    h.annotate("old", "example.com/touched", Some("1")).await;
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        h.controller.crash();
        h.start_controller().await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let now = h.get("old").await.unwrap();
    assert_eq!(status(&now).condition("Ready").unwrap().message, told, "the condition says the same, the owner named");
    assert!(status(&now).last_error.as_ref().is_some_and(|e| e.attempts > 3), "looked at again: {:?}", status(&now).last_error);
    let warnings: Vec<String> = h.events("old").await.into_iter().filter(|e| e.type_ == "Warning").map(|e| e.reason).collect();
    assert_eq!(warnings.iter().filter(|r| *r == "OwnershipLost").count(), 1, "one OwnershipLost event: {warnings:?}");
    assert_eq!(warnings.iter().filter(|r| *r == "Failed").count(), 1, "one Failed event: {warnings:?}");
}

#[tokio::test]
async fn an_adoption_is_ready_once_its_tags_are_read_back_without_waiting_for_the_verify_interval() {
    // The operator waits a minute between looks at a Cert in progress; here an hour: only the
    // read-back of the adoption's tags, due at once, brings the look that makes it Ready.
    let h = Harness::start_with("adopt-at-once", &["main"], |config, _| {
        config.timing.verifying = blockwork_runtime::RequeuePolicy::fixed(Duration::from_secs(3600));
    })
    .await;
    let arn = existing_certificate(&h, &[domain(&h, "api")]).await;

    h.create("api", adopting("api", &arn)).await;
    let ready = h.wait_for_state("api", CertState::Ready).await;

    assert_eq!(status(&ready).observation.certificate_arn.as_deref(), Some(arn.as_str()));
    assert_eq!(h.proxy.calls("AddTagsToCertificate"), 1);
}
