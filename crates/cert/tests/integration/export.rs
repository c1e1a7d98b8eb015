//! Certificates inside the cluster (issue 30): a Cert with `spec.export` writes its certificate
//! into a `kubernetes.io/tls` Secret of its namespace, against the real kube-apiserver and moto
//! (ExportCertificate with a passphrase-encrypted PKCS#8 key).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::*;
use aws_sdk_acm::primitives::Blob;
use blockwork_cert::export::material::Material;
use blockwork_cert::export::secret;
use blockwork_cert::{Cert, CertState};
use blockwork_testenv::fault_proxy::{Fault, Operation};
use blockwork_testenv::harness::{TIMEOUT, eventually, sum};
use blockwork_testenv::kube_proxy::{ApiFault, KubeProxy, Requests};
use blockwork_testenv::leaks::Scanner;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::PostParams;

fn condition<'a>(cert: &'a Cert, type_: &str) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    cert.status.as_ref()?.condition(type_)
}

fn data<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    secret.data.as_ref().and_then(|d| d.get(key)).map_or(&[][..], |v| v.0.as_slice())
}

/// The certificate ACM holds for `arn`, exported by the test with a passphrase of its own.
async fn exported_by_acm(h: &Harness, arn: &str) -> (String, String) {
    let output = h.acm.export_certificate().certificate_arn(arn).passphrase(Blob::new("test-passphrase")).send().await.unwrap();
    let key = blockwork_aws::acm::decrypt(output.private_key().unwrap(), b"test-passphrase").unwrap();
    (output.certificate().unwrap().to_owned(), key.to_string())
}

#[tokio::test]
async fn an_exporting_cert_writes_a_tls_secret_holding_acm_s_certificate_its_chain_and_its_key() {
    let h = Harness::start("export", &["main"]).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = h.wait_for("api", "exported", |c| condition(c, "Exported").is_some_and(|c| c.status == "True")).await;
    let observed = &status(&cert).observation;
    assert_eq!(observed.state, Some(CertState::Ready));
    let arn = observed.certificate_arn.clone().unwrap();
    let described = h.acm.describe_certificate().certificate_arn(&arn).send().await.unwrap();
    let options = described.certificate().unwrap().options().unwrap();
    assert_eq!(options.export().map(|e| e.as_str()), Some("ENABLED"), "requested exportable");

    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let facts = Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt"))
        .expect("a consistent key pair and chain");
    let (certificate, key) = exported_by_acm(&h, &arn).await;
    let tls_crt = String::from_utf8(data(&secret, "tls.crt").to_vec()).unwrap();
    let body = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    assert!(body(&tls_crt).starts_with(&body(&certificate)), "tls.crt starts with ACM's certificate");
    assert_eq!(String::from_utf8(data(&secret, "tls.key").to_vec()).unwrap(), key, "tls.key is ACM's key, unencrypted");
    assert!(String::from_utf8_lossy(data(&secret, "tls.key")).starts_with("-----BEGIN PRIVATE KEY-----"));

    assert_eq!(secret.labels()["app.kubernetes.io/managed-by"], "blockwork");
    assert_eq!(secret.labels()[secret::LABEL_CERT_UID], cert.uid().unwrap());
    assert_eq!(secret.annotations()[secret::ANNOTATION_CERTIFICATE_ARN], arn);
    assert_eq!(secret.annotations()[secret::ANNOTATION_SERIAL], facts.serial);
    let recorded = observed.export.as_ref().unwrap();
    assert_eq!((recorded.secret_name.as_str(), recorded.serial.as_str()), ("api-tls", facts.serial.as_str()));
    assert_eq!(recorded.not_after.0, facts.not_after);
    assert_eq!(recorded.resource_version, secret.resource_version().unwrap());
    let message = &condition(&cert, "Exported").unwrap().message;
    assert!(message.contains(&facts.serial) && !message.contains("PRIVATE"), "{message}");
}

#[tokio::test]
async fn a_cert_asking_for_export_where_it_is_not_enabled_fails_before_any_certificate_is_requested() {
    let h = Harness::start_with("export-off", &["main"], |config, _| config.export_secrets = false).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = h.wait_for_state("api", CertState::Failed).await;
    let ready = condition(&cert, "Ready").unwrap();
    assert_eq!(ready.reason, "ExportNotEnabled");
    assert!(ready.message.contains("--export-secrets") && ready.message.contains("cert.export-secrets"), "{}", ready.message);
    assert_eq!(h.proxy.calls("RequestCertificate"), 0, "nothing is requested (an exportable certificate is charged)");
    assert!(h.api_of::<Secret>().get_opt("api-tls").await.unwrap().is_none());
}

#[tokio::test]
async fn a_secret_of_that_name_that_is_not_the_cert_s_is_never_overwritten_and_the_cert_says_so() {
    let h = Harness::start("export-foreign", &["main"]).await;
    let theirs = Secret {
        metadata: kube::api::ObjectMeta { name: Some("api-tls".into()), ..Default::default() },
        string_data: Some([("tls.crt".to_owned(), "theirs".to_owned())].into()),
        ..Secret::default()
    };
    h.api_of::<Secret>().create(&PostParams::default(), &theirs).await.unwrap();
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = h.wait_for("api", "refusing the Secret", |c| condition(c, "Exported").is_some_and(|c| c.reason == "SecretConflict")).await;
    assert_eq!(status(&cert).observation.state, Some(CertState::Ready), "the certificate itself is fine");
    let synced = condition(&cert, "Synced").unwrap();
    assert_eq!((synced.status.as_str(), synced.reason.as_str()), ("False", "SecretConflict"));
    let warnings = h.wait_for_event("api", "SecretConflict").await;
    assert!(warnings[0].note.contains(&format!("Secret {}/api-tls", h.namespace)), "{warnings:?}");
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert_eq!(data(&secret, "tls.crt"), b"theirs");
    assert!(secret.labels().is_empty());
    let metrics = h.scrape();
    assert!(sum(&metrics, "cert_operator_export_failures_total", &[("reason", "SecretConflict")]) >= 1.0, "{metrics}");
    assert_eq!(sum(&metrics, "cert_operator_exported_secrets", &[("state", "refused")]), 1.0, "{metrics}");

    // Once it is gone, the Cert writes its own.
    h.api_of::<Secret>().delete("api-tls", &Default::default()).await.unwrap();
    h.wait_for("api", "exported", |c| condition(c, "Exported").is_some_and(|c| c.status == "True")).await;
}

/// The exported certificate's serial, from its Secret's annotation.
async fn secret_serial(h: &Harness, name: &str) -> Option<String> {
    let secret = h.api_of::<Secret>().get_opt(name).await.unwrap()?;
    secret.annotations().get(secret::ANNOTATION_SERIAL).cloned()
}

async fn wait_exported(h: &Harness, name: &str) -> Cert {
    h.wait_for(name, "exported", |c| condition(c, "Exported").is_some_and(|c| c.status == "True")).await
}

#[tokio::test]
async fn acm_s_renewal_reaches_the_secret_within_a_sweep_without_a_look_of_its_own() {
    let h = Harness::start("export-renewal", &["main"]).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = wait_exported(&h, "api").await;
    let arn = status(&cert).observation.certificate_arn.clone().unwrap();
    let first = status(&cert).observation.export.clone().unwrap();
    let described = h.proxy.calls("DescribeCertificate");

    let renewed = h.proxy.renew_certificate(&arn).await.unwrap();
    assert_ne!(renewed.serial, first.serial);
    let cert =
        h.wait_for("api", "exported again", |c| status(c).observation.export.as_ref().is_some_and(|e| e.serial == renewed.serial)).await;
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert_eq!(secret.annotations()[secret::ANNOTATION_SERIAL], renewed.serial);
    let facts = Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt"))
        .expect("the renewed key is the renewed certificate's");
    assert_eq!(facts.not_after.as_second(), renewed.not_after);
    let tls_crt = String::from_utf8(data(&secret, "tls.crt").to_vec()).unwrap();
    assert!(tls_crt.starts_with(renewed.certificate.trim_end()), "tls.crt starts with the renewed certificate");
    assert_eq!(status(&cert).observation.certificate_arn.as_deref(), Some(arn.as_str()), "the same ARN");
    assert_eq!(h.proxy.calls("ExportCertificate"), 2, "one export per issuance");
    let metrics = h.scrape();
    assert_eq!(sum(&metrics, "cert_operator_exports_total", &[("why", "renewed")]), 1.0, "{metrics}");
    assert_eq!(sum(&metrics, "cert_operator_exported_secrets", &[("state", "current")]), 1.0, "{metrics}");
    assert_eq!(sum(&metrics, "cert_operator_exported_secrets", &[("state", "lagging")]), 0.0, "re-exported: no lag");
    assert_eq!(sum(&metrics, "cert_operator_exported_certificate_expiry_buckets", &[("bucket", "90d+")]), 1.0, "{metrics}");
    // List-first: the sweep saw the new expiry; nothing described the certificate to find it.
    assert_eq!(h.proxy.calls("DescribeCertificate"), described, "no DescribeCertificate to notice the renewal");
}

#[tokio::test]
async fn a_deleted_or_edited_secret_is_written_again_at_once_under_enforce() {
    let h = Harness::start("export-repair", &["main"]).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    let cert = wait_exported(&h, "api").await;
    let serial = status(&cert).observation.export.clone().unwrap().serial;
    let secrets = h.api_of::<Secret>();

    secrets.delete("api-tls", &Default::default()).await.unwrap();
    eventually("the deleted Secret to be written again", TIMEOUT, async || match secret_serial(&h, "api-tls").await {
        Some(found) if found == serial => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;

    let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
    secrets
        .patch("api-tls", &Default::default(), &kube::api::Patch::Merge(serde_json::json!({"stringData": {"tls.key": other_key}})))
        .await
        .unwrap();
    eventually("the edited key to be repaired", TIMEOUT, async || {
        let secret = secrets.get("api-tls").await.unwrap();
        Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt")).map(|_| ()).map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(h.proxy.calls("ExportCertificate"), 3, "the first export and one per repair");
}

#[tokio::test]
async fn under_drift_policy_report_a_changed_secret_is_reported_and_left_as_it_is() {
    let h = Harness::start("export-report", &["main"]).await;
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    // Set before the first export (which the policy does not hold back), so the controller has
    // seen it long before the Secret is edited: annotated just before the edit, a loaded CI's
    // controller saw the edit first and repaired it under enforce.
    h.annotate("api", "blockwork.dev/drift-policy", Some("report")).await;
    wait_exported(&h, "api").await;
    let secrets = h.api_of::<Secret>();
    secrets
        .patch("api-tls", &Default::default(), &kube::api::Patch::Merge(serde_json::json!({"stringData": {"tls.crt": "edited"}})))
        .await
        .unwrap();
    let cert = h.wait_for("api", "reporting the drift", |c| condition(c, "Exported").is_some_and(|c| c.reason == "SecretDrifted")).await;
    let message = &condition(&cert, "Exported").unwrap().message;
    assert!(message.contains("api-tls") && message.contains("drift-policy report"), "{message}");
    assert_eq!(h.proxy.calls("ExportCertificate"), 1, "not repaired");
    assert_eq!(data(&secrets.get("api-tls").await.unwrap(), "tls.crt"), b"edited");

    // Back to enforce: repaired.
    h.annotate("api", "blockwork.dev/drift-policy", None).await;
    wait_exported(&h, "api").await;
    let secret = secrets.get("api-tls").await.unwrap();
    assert!(Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt")).is_ok());
}

#[tokio::test]
async fn the_secret_goes_with_the_certificate_and_stays_when_the_certificate_is_kept_or_orphaned() {
    let h = Harness::start("export-delete", &["main"]).await;
    let cases = [("deleted", true, None), ("kept", false, None), ("orphaned", true, Some("Orphan"))];
    for (name, delete_on_removal, policy) in cases {
        let mut spec = exporting(spec(name, "prod"), &format!("{name}-tls"));
        spec.delete_on_removal = delete_on_removal;
        h.create(name, spec).await;
        if let Some(policy) = policy {
            h.annotate(name, "blockwork.dev/deletion-policy", Some(policy)).await;
        }
    }
    for (name, _, _) in cases {
        wait_exported(&h, name).await;
        h.delete_and_wait(name).await;
    }
    let exists = async |name: &str| h.api_of::<Secret>().get_opt(&format!("{name}-tls")).await.unwrap().is_some();
    assert!(!exists("deleted").await, "deleteOnRemoval: the Secret goes with the certificate");
    assert!(exists("kept").await, "the certificate is kept: so is its Secret, pods may mount it");
    assert!(exists("orphaned").await, "orphaned: nothing is deleted");
}

#[tokio::test]
async fn turning_export_on_for_a_ready_cert_requests_an_exportable_certificate_and_keeps_the_old_one() {
    let h = Harness::start("export-later", &["main"]).await;
    h.create("api", spec("api", "prod")).await;
    let plain = h.wait_for_state("api", CertState::Ready).await;
    let old = status(&plain).observation.certificate_arn.clone().unwrap();
    h.merge("api", serde_json::json!({"spec": {"export": {"secretName": "api-tls"}}})).await;
    let cert = wait_exported(&h, "api").await;
    let new = status(&cert).observation.certificate_arn.clone().unwrap();
    assert_ne!(new, old, "exportability is fixed at the request: a new certificate");
    assert!(h.certificate_exists(&old).await, "deleteOnRemoval false: the old one is kept (a load balancer may use it)");
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert_eq!(secret.annotations()[secret::ANNOTATION_CERTIFICATE_ARN], new);
}

#[tokio::test]
async fn a_crash_between_the_export_and_the_secret_write_leaves_nothing_behind_and_no_key_anywhere() {
    let mut h = Harness::start("export-crash", &["main"]).await;
    // The export takes effect at ACM; its answer comes when the process is gone.
    h.proxy.inject(Operation::named("ExportCertificate"), Fault::SlowResponse(Duration::from_secs(3)), 1);
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    h.proxy.wait_for_calls("ExportCertificate", 1).await;
    h.controller.crash();
    assert!(h.api_of::<Secret>().get_opt("api-tls").await.unwrap().is_none(), "nothing half-written");
    assert!(status(&h.get("api").await.unwrap()).observation.export.is_none());

    h.start_controller().await;
    wait_exported(&h, "api").await;
    assert_eq!(h.proxy.calls("ExportCertificate"), 2, "exported again, with a passphrase of its own");
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert!(Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt")).is_ok());

    let key = String::from_utf8(data(&secret, "tls.key").to_vec()).unwrap();
    let scanner = key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 40)
        .fold(Scanner::new(), |scanner, line| scanner.needle("the exported key", line))
        .private_keys();
    let kinds = [kube::api::ApiResource::erase::<Cert>(&())];
    let mut findings = scanner.namespace(&h.client, &h.namespace, &kinds).await.unwrap();
    findings.extend(scanner.text("metrics", &h.scrape()));
    assert!(findings.is_empty(), "{findings:#?}");
}

#[tokio::test]
async fn a_secret_written_by_a_look_whose_status_write_was_lost_is_adopted_not_exported_again() {
    let mut h = Harness::start("export-lost-status", &["main"]).await;
    let kube = KubeProxy::start(h.plane).await.unwrap();
    h.controller.crash();
    h.start_controller_with(kube.client().await.unwrap()).await;
    let (arrived, release) = kube.hold(format!("POST /api/v1/namespaces/{}/secrets", h.namespace));
    h.create("api", exporting(spec("api", "prod"), "api-tls")).await;
    arrived.await.unwrap();
    // The status write that follows the Secret's is refused.
    kube.inject_on_path(Requests::Writes, "/certs/api/status", ApiFault::ServerError(503), 1);
    drop(release);
    let cert = wait_exported(&h, "api").await;
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    assert_eq!(status(&cert).observation.export.as_ref().unwrap().resource_version, secret.resource_version().unwrap());
    assert_eq!(h.proxy.calls("ExportCertificate"), 1, "adopted: the key in the Secret is the one exported");
    assert_eq!(kube.injected().get("ServerError(503)"), Some(&1), "the status write was refused");
}
