//! Certificates inside the cluster (issue 30): a Cert with `spec.export` writes its certificate
//! into a `kubernetes.io/tls` Secret of its namespace, against the real kube-apiserver and moto
//! (ExportCertificate with a passphrase-encrypted PKCS#8 key).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use aws_sdk_acm::primitives::Blob;
use blockwork_cert::export::material::Material;
use blockwork_cert::export::secret;
use blockwork_cert::{Cert, CertState};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::PostParams;
use support::*;

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

    // Once it is gone, the Cert writes its own.
    h.api_of::<Secret>().delete("api-tls", &Default::default()).await.unwrap();
    h.wait_for("api", "exported", |c| condition(c, "Exported").is_some_and(|c| c.status == "True")).await;
}
