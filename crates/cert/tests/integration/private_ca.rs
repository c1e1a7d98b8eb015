//! Private certificates (issue 30): a Cert naming an ACM Private CA gets a certificate that CA
//! signs, without DNS validation or Route 53 writes, exported like a public one; a CA the
//! installation does not issue from, in another region, disabled or gone is a clear condition
//! before anything is requested. Against moto's ACM and ACM Private CA, through the fault proxy
//! (moto's ACM neither has the CA sign nor checks its state: see `blockwork_testenv::issuance`).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use blockwork_cert::export::material::Material;
use blockwork_cert::{Cert, CertSpec, CertState};
use k8s_openapi::api::core::v1::Secret;

fn private(spec: CertSpec, authority: &str) -> CertSpec {
    CertSpec { certificate_authority_arn: Some(authority.to_owned()), ..spec }
}

fn reason(cert: &Cert, type_: &str) -> Option<String> {
    cert.status.as_ref()?.condition(type_).map(|c| c.reason.clone())
}

fn data<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    secret.data.as_ref().and_then(|d| d.get(key)).map_or(&[][..], |v| v.0.as_slice())
}

/// `openssl verify`: the chain of `tls.crt` up to `ca.crt`, for `host`.
fn openssl_verifies(secret: &Secret, host: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), data(secret, "tls.crt")).unwrap();
    std::fs::write(dir.path().join("ca.crt"), data(secret, "ca.crt")).unwrap();
    let output = std::process::Command::new("openssl")
        .args(["verify", "-CAfile", "ca.crt", "-verify_hostname", host, "tls.crt"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr))
    }
}

#[tokio::test]
async fn a_private_certificate_is_signed_by_its_ca_without_dns_records_and_exported_for_clients_that_trust_the_ca() {
    let mut h = Harness::start("private-ca", &["main"]).await;
    let authority = h.with_private_ca().await;
    h.create("api", private(exporting(spec("api", "prod"), "api-tls"), &authority)).await;
    let cert = h.wait_for("api", "exported", |c| reason(c, "Exported").as_deref() == Some("Exported")).await;
    let observed = &status(&cert).observation;
    assert_eq!(observed.state, Some(CertState::Ready));
    assert!(observed.validation_records.is_empty(), "no DNS validation");
    assert_eq!(h.proxy.calls("ChangeResourceRecordSets"), 0, "no Route 53 write");
    let arn = observed.certificate_arn.clone().unwrap();
    let described = h.acm.describe_certificate().certificate_arn(&arn).send().await.unwrap();
    let detail = described.certificate().unwrap();
    assert_eq!(detail.r#type().map(|t| t.as_str()), Some("PRIVATE"));
    assert_eq!(detail.certificate_authority_arn(), Some(authority.as_str()));

    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    Material::check(data(&secret, "tls.crt"), data(&secret, "tls.key"), data(&secret, "ca.crt")).unwrap();
    let host = format!("api-prod.{}", h.zones[0].name);
    openssl_verifies(&secret, &host).unwrap();
    let ca = h.pca.get_certificate_authority_certificate().certificate_authority_arn(&authority).send().await.unwrap();
    let body = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    assert_eq!(body(&String::from_utf8_lossy(data(&secret, "ca.crt"))), body(ca.certificate().unwrap()), "ca.crt is the CA's certificate");

    // Its renewal, from the same CA, reaches the Secret.
    let renewed = h.proxy.renew_certificate(&arn).await.unwrap();
    h.wait_for("api", "exported again", |c| status(c).observation.export.as_ref().is_some_and(|e| e.serial == renewed.serial)).await;
    let secret = h.api_of::<Secret>().get("api-tls").await.unwrap();
    openssl_verifies(&secret, &host).unwrap();
}

#[tokio::test]
async fn a_ca_not_allowed_elsewhere_disabled_or_gone_fails_the_cert_before_any_request() {
    let mut h = Harness::start("private-ca-refused", &["main"]).await;
    let active = h.with_private_ca().await;
    let disabled = blockwork_testenv::aws::private_ca(&h.pca, "disabled CA").await;
    let status = aws_sdk_acmpca::types::CertificateAuthorityStatus::Disabled;
    h.pca.update_certificate_authority().certificate_authority_arn(&disabled).status(status).send().await.unwrap();
    let elsewhere = active.replace(":us-east-1:", ":eu-west-1:");
    let missing = format!("{}00000000-0000-0000-0000-000000000000", &active[..active.rfind('/').unwrap() + 1]);
    h.certificate_authorities.extend([disabled.clone(), elsewhere.clone(), missing.clone()]);
    h.controller.crash();
    h.start_controller().await;

    let not_listed = blockwork_testenv::aws::private_ca(&h.pca, "not listed").await;
    let cases = [
        ("not-allowed", not_listed, "CertificateAuthorityNotAllowed", "--certificate-authorities"),
        ("elsewhere", elsewhere, "CertificateAuthorityInOtherRegion", "eu-west-1"),
        ("disabled", disabled, "CertificateAuthorityNotActive", "DISABLED"),
        ("missing", missing, "CertificateAuthorityNotFound", "does not exist"),
    ];
    for (name, authority, _, _) in &cases {
        h.create(name, private(spec(name, "prod"), authority)).await;
    }
    for (name, _, expected, said) in &cases {
        let cert = h.wait_for_state(name, CertState::Failed).await;
        let ready = cert.status.as_ref().unwrap().condition("Ready").unwrap().clone();
        assert_eq!(&ready.reason, expected, "{name}");
        assert!(ready.message.contains(said) && !ready.message.contains("123456789012"), "{name}: {}", ready.message);
    }
    assert_eq!(h.proxy.calls("RequestCertificate"), 0, "nothing requested: ACM would make failed certificates");
}

#[tokio::test]
async fn a_ca_disabled_after_it_was_read_fails_the_certificate_with_acm_s_reason() {
    let mut h = Harness::start("private-ca-late", &["main"]).await;
    let authority = h.with_private_ca().await;
    h.create("first", private(spec("first", "prod"), &authority)).await;
    h.wait_for_state("first", CertState::Ready).await;
    // Within the minute the operator reuses the CA's state for: ACM is asked, and refuses.
    let status = aws_sdk_acmpca::types::CertificateAuthorityStatus::Disabled;
    h.pca.update_certificate_authority().certificate_authority_arn(&authority).status(status).send().await.unwrap();
    h.create("second", private(spec("second", "prod"), &authority)).await;
    let cert = h.wait_for_state("second", CertState::Failed).await;
    let ready = cert.status.as_ref().unwrap().condition("Ready").unwrap().clone();
    assert_eq!(ready.reason, "CertificateAuthorityFailed");
    assert!(ready.message.contains("PCA_INVALID_STATE") && ready.message.contains("not ACTIVE"), "{}", ready.message);
}
