//! The writes a Cert finds needed while it observes (the validation records ACM waits for, the
//! published ConfigMap as the Cert goes) are the runtime's to allow, by the object's annotations
//! (ADR 0001, docs/cert.md): against the real kube-apiserver and moto, annotations in, Route 53
//! records, ConfigMaps and conditions out.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use aws_sdk_acm::types::Tag;
use blockwork_cert::{Cert, CertSpec, CertState};
use blockwork_runtime::policy::{ACCESS_ANNOTATION, DRIFT_POLICY_ANNOTATION};
use blockwork_testenv::aws::request_certificate;
use blockwork_testenv::fault_proxy::{Fault, Operation};
use blockwork_testenv::harness::{TIMEOUT, TestNamespace, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

/// The Cert `name` with `annotations`, created.
async fn create_annotated(h: &Harness, name: &str, spec: CertSpec, annotations: &[(&str, &str)]) -> Cert {
    let mut cert = Cert::new(name, spec);
    cert.metadata.annotations = Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
    TestNamespace::create(h, &cert).await
}

/// (reason, message) of the Cert's Ready condition.
fn ready(cert: &Cert) -> (String, String) {
    status(cert).condition("Ready").map(|c| (c.reason.clone(), c.message.clone())).unwrap_or_default()
}

#[tokio::test]
async fn a_read_only_cert_writes_none_of_the_validation_records_acm_waits_for_until_it_may_create() {
    let h = Harness::start("upkeep-read-only", &["main"]).await;
    // ACM keeps the certificate pending validation: without its records it is never issued.
    // In every answer: the operator reads the certificate from its listing first.
    for operation in ["DescribeCertificate", "ListCertificates"] {
        h.proxy.inject(Operation::named(operation), Fault::PendingValidation, 100_000);
    }
    let created = create_annotated(&h, "api", spec("api", "dev"), &[(ACCESS_ANNOTATION, "R")]).await;
    // Read-only, it requests no certificate; one of its own, made outside for exactly its
    // names (as a restore finds it), is observed.
    let domain = format!("api-dev.{}", h.zones[0].name);
    let arn = request_certificate(&h.acm, std::slice::from_ref(&domain)).await;
    let owner = Tag::builder().key("blockwork.dev/owner-uid").value(created.uid().unwrap()).build().unwrap();
    h.acm.add_tags_to_certificate().certificate_arn(&arn).tags(owner).send().await.unwrap();

    let waiting = h
        .wait_for("api", "waiting for ACM without writing", |c| {
            c.status.is_some() && ready(c).1.contains("access-permissions do not allow writing the validation records")
        })
        .await;
    assert_eq!(status(&waiting).observation.certificate_arn.as_deref(), Some(arn.as_str()));
    assert_eq!(ready(&waiting).0, "InProgress", "{:?}", ready(&waiting));
    // Looks go on; none writes a record.
    let looks = || h.proxy.injected().get("PendingValidation").copied().unwrap_or(0);
    let seen = looks();
    eventually(
        "three more looks at the certificate",
        TIMEOUT,
        async || if looks() >= seen + 3 { Ok(()) } else { Err(looks().to_string()) },
    )
    .await;
    assert!(h.cnames(&h.zones[0]).await.is_empty(), "a read-only Cert writes no record");
    assert_eq!(h.proxy.calls("ChangeResourceRecordSets"), 0, "{:?}", h.proxy.all_calls());
    assert_eq!(h.proxy.calls("RequestCertificate"), 0, "{:?}", h.proxy.all_calls());

    // The same Cert with the create permission: the records ACM waits for are written.
    h.annotate("api", ACCESS_ANNOTATION, None).await;
    let validated = h.wait_for_state("api", CertState::Validated).await;
    assert!(h.records_in_zone(&validated).await, "{:?} in {:?}", status(&validated).observation, h.cnames(&h.zones[0]).await);
    assert_eq!(h.proxy.calls("RequestCertificate"), 0, "the observed certificate is the Cert's: {:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn a_cert_under_the_report_or_suspend_drift_policy_still_writes_the_records_its_certificate_waits_for() {
    let h = Harness::start("upkeep-drift", &["main"]).await;
    for policy in ["report", "suspend"] {
        create_annotated(&h, policy, spec(policy, "dev"), &[(DRIFT_POLICY_ANNOTATION, policy)]).await;
    }
    for policy in ["report", "suspend"] {
        let ready = h.wait_for_records_written(policy).await;
        assert!(h.records_in_zone(&ready).await, "{policy}: {:?} in {:?}", status(&ready).observation, h.cnames(&h.zones[0]).await);
    }
}

#[tokio::test]
async fn a_cert_deleted_without_the_delete_permission_is_released_keeping_its_certificate_records_and_configmap() {
    let h = Harness::start("upkeep-release", &["main"]).await;
    let delete_on_removal = |name: &str| CertSpec { delete_on_removal: true, ..spec(name, "dev") };
    create_annotated(&h, "kept", delete_on_removal("kept"), &[(ACCESS_ANNOTATION, "CU")]).await;
    h.create("gone", delete_on_removal("gone")).await;
    let mut arns = Vec::new();
    for name in ["kept", "gone"] {
        let ready = h.wait_for_records_written(name).await;
        arns.push(status(&ready).observation.certificate_arn.clone().unwrap());
        h.wait_for_configmap(&format!("{name}-certificate"), "published", |m| m.is_some()).await;
    }

    h.delete_and_wait("kept").await;
    h.delete_and_wait("gone").await;

    let orphaned = h.events("kept").await;
    assert!(orphaned.iter().any(|e| e.reason == "Orphaned"), "{orphaned:?}");
    assert!(h.certificate_exists(&arns[0]).await, "deleteOnRemoval deletes nothing without the D permission");
    assert!(h.api_of::<ConfigMap>().get_opt("kept-certificate").await.unwrap().is_some(), "its owner reference is the garbage collector's");
    let records = h.cnames(&h.zones[0]).await;
    assert!(records.len() == 1 && records[0].0.contains("kept-dev"), "only the released Cert's record stays: {records:?}");
    assert!(!h.certificate_exists(&arns[1]).await, "with the D permission deleteOnRemoval deletes the certificate");
    assert!(h.api_of::<ConfigMap>().get_opt("gone-certificate").await.unwrap().is_none(), "and the published ConfigMap goes with the Cert");
}
