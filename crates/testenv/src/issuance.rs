//! ACM issuing a new body for a certificate ARN, which moto never does: the fault proxy's
//! faithful extension for exported certificates (issue 30).
//!
//! - **A managed renewal** ([`crate::fault_proxy::FaultProxy::renew_certificate`]): ACM renews a
//!   certificate under the same ARN, with its tags, type and export option, and a new serial,
//!   validity and (for an exportable certificate) key; `DescribeCertificate` then reports a
//!   `RenewalSummary` `SUCCESS`. moto cannot: its `ImportCertificate` with an existing ARN
//!   replaces the certificate by an *imported* one (type `IMPORTED`, export disabled, tags and
//!   private CA forgotten), which no renewal does and which ExportCertificate then refuses.
//! - **A private CA's issuance**: for a certificate requested with `CertificateAuthorityArn`,
//!   moto makes a self-signed certificate that names Amazon as its issuer and returns Amazon's
//!   public intermediate as its chain; ACM has the private CA sign it, and the chain is the CA's.
//!   The proxy has moto's own ACM Private CA sign one (`IssueCertificate`, `GetCertificate`).
//!
//! The new body (certificate, chain, key) is then the proxy's: it answers `ExportCertificate`
//! (the key encrypted under the request's passphrase, PBES2 as ACM does) and `GetCertificate`
//! for that ARN itself, and rewrites `Serial`, `NotBefore`, `NotAfter` (and the renewal) in
//! `DescribeCertificate` and `ListCertificates`; everything else is moto's.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use pkcs8::pkcs5::pbes2;
use rand::Rng as _;
use serde_json::{Value, json};

use crate::process::Error;

type Upstream = hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A certificate body ACM issued for an ARN, over moto's.
#[derive(Clone, Debug)]
pub struct Issued {
    /// PEM.
    pub certificate: String,
    /// PEM, intermediates then root.
    pub chain: String,
    /// PKCS#8 DER.
    key: Vec<u8>,
    /// Lowercase hex bytes separated by colons, as ACM shows it.
    pub serial: String,
    /// Epoch seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// When ACM renewed it; `None` for the first issuance.
    pub renewed_at: Option<i64>,
}

/// How long ACM's certificates are valid: 395 days (public and, by default, private ones).
const VALIDITY_DAYS: i64 = 395;

/// A new body for `arn`, for its names (and its private CA, if it has one), as `upstream`
/// (moto) describes it. `renewal`: a managed renewal (else the first issuance).
pub(crate) async fn issue(upstream: &str, client: &Upstream, arn: &str, renewal: bool) -> Result<Issued, Error> {
    let region = region_of(arn);
    let described =
        call(upstream, client, "acm", &region, "CertificateManager.DescribeCertificate", json!({"CertificateArn": arn})).await?;
    let detail = &described["Certificate"];
    let domain = detail["DomainName"].as_str().unwrap_or_default().to_owned();
    let mut names: Vec<String> =
        detail["SubjectAlternativeNames"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(str::to_owned)).collect();
    if !names.contains(&domain) {
        names.insert(0, domain.clone());
    }
    let key = rcgen::KeyPair::generate().map_err(other)?;
    let now = crate::fault_proxy::unix_seconds();
    let mut params = rcgen::CertificateParams::new(names).map_err(other)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, domain);
    params.not_before = time::OffsetDateTime::from_unix_timestamp(now - 60).map_err(other)?;
    params.not_after = time::OffsetDateTime::from_unix_timestamp(now + VALIDITY_DAYS * 86_400).map_err(other)?;
    let (certificate, chain) = match detail["CertificateAuthorityArn"].as_str() {
        Some(authority) => {
            let csr = params.serialize_request(&key).map_err(other)?.pem().map_err(other)?;
            let body = json!({
                "CertificateAuthorityArn": authority,
                "Csr": base64::engine::general_purpose::STANDARD.encode(csr),
                "SigningAlgorithm": "SHA256WITHRSA",
                "Validity": {"Type": "DAYS", "Value": VALIDITY_DAYS},
            });
            let issued = call(upstream, client, "acm-pca", &region, "ACMPrivateCA.IssueCertificate", body).await?;
            let issued_arn = issued["CertificateArn"].as_str().unwrap_or_default();
            let got = json!({"CertificateAuthorityArn": authority, "CertificateArn": issued_arn});
            let got = call(upstream, client, "acm-pca", &region, "ACMPrivateCA.GetCertificate", got).await?;
            (text(&got["Certificate"]), text(&got["CertificateChain"]))
        }
        None => {
            // Public: self-signed as moto makes them, with moto's (Amazon's) chain.
            let got = call(upstream, client, "acm", &region, "CertificateManager.GetCertificate", json!({"CertificateArn": arn})).await?;
            (params.self_signed(&key).map_err(other)?.pem(), text(&got["CertificateChain"]))
        }
    };
    let der = pem_der(&certificate).ok_or_else(|| other("the issued certificate is not PEM"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).map_err(other)?;
    let validity = parsed.validity();
    let serial = parsed.raw_serial().iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    Ok(Issued {
        certificate,
        chain,
        key: key.serialize_der(),
        serial,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        renewed_at: renewal.then_some(now),
    })
}

/// The proxy's own answer to `operation` about a certificate it issued a body for, if the
/// operation reads that body: ExportCertificate and GetCertificate.
pub(crate) fn answer(operation: &str, request: &[u8], issued: &Issued) -> Option<Response<Full<Bytes>>> {
    let body = match operation {
        "GetCertificate" => json!({"Certificate": issued.certificate, "CertificateChain": issued.chain}),
        "ExportCertificate" => {
            let request: Value = serde_json::from_slice(request).ok()?;
            let passphrase = base64::engine::general_purpose::STANDARD.decode(request["Passphrase"].as_str()?).ok()?;
            json!({"Certificate": issued.certificate, "CertificateChain": issued.chain, "PrivateKey": encrypt(&issued.key, &passphrase)?})
        }
        _ => return None,
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/x-amz-json-1.1"));
    Some(response)
}

/// Rewrites a certificate of a DescribeCertificate (`detail`) or ListCertificates answer as
/// ACM reports the body it issued.
pub(crate) fn rewrite(certificate: &mut Value, issued: &Issued, detail: bool) {
    certificate["NotBefore"] = json!(issued.not_before);
    certificate["NotAfter"] = json!(issued.not_after);
    if !detail {
        return;
    }
    certificate["Serial"] = json!(issued.serial);
    if let Some(renewed_at) = issued.renewed_at {
        certificate["RenewalEligibility"] = json!("ELIGIBLE");
        let validations = certificate.get("DomainValidationOptions").cloned().unwrap_or_else(|| json!([]));
        certificate["RenewalSummary"] =
            json!({"RenewalStatus": "SUCCESS", "DomainValidationOptions": validations, "UpdatedAt": renewed_at});
    }
}

/// The key as ACM exports it: PKCS#8 encrypted under the passphrase (PBES2: PBKDF2-HMAC-SHA256,
/// AES-256-CBC), PEM.
fn encrypt(key: &[u8], passphrase: &[u8]) -> Option<String> {
    let mut rng = rand::rng();
    let (salt, iv): ([u8; 16], [u8; 16]) = (rng.random(), rng.random());
    let params = pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(2048, &salt, iv).ok()?;
    let info = pkcs8::PrivateKeyInfoRef::try_from(key).ok()?;
    let encrypted = info.encrypt_with_params(params, passphrase).ok()?;
    encrypted.to_pem("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF).ok().map(|pem| pem.to_string())
}

/// The region of an ARN (`arn:aws:acm:REGION:...`).
fn region_of(arn: &str) -> String {
    arn.split(':').nth(3).filter(|r| !r.is_empty()).unwrap_or("us-east-1").to_owned()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let body: String =
        pem.lines().skip_while(|l| !l.starts_with("-----BEGIN")).skip(1).take_while(|l| !l.starts_with("-----END")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

fn other(error: impl std::fmt::Display) -> Error {
    Error::Io(std::io::Error::other(error.to_string()))
}

/// A JSON call to moto, signed as moto needs it to tell the service and region (it does not
/// check the signature).
pub(crate) async fn call(
    upstream: &str,
    client: &Upstream,
    service: &str,
    region: &str,
    target: &str,
    body: Value,
) -> Result<Value, Error> {
    let request = Request::builder()
        .method("POST")
        .uri(format!("{upstream}/"))
        .header("x-amz-target", target)
        .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.1")
        .header(
            http::header::AUTHORIZATION,
            format!("AWS4-HMAC-SHA256 Credential=test/20260101/{region}/{service}/aws4_request, SignedHeaders=host, Signature=0"),
        )
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(other)?;
    let response = client.request(request).await.map_err(other)?;
    let status = response.status();
    let bytes = response.into_body().collect().await.map_err(other)?.to_bytes();
    if !status.is_success() {
        return Err(other(format!("{target}: {status}: {}", String::from_utf8_lossy(&bytes))));
    }
    serde_json::from_slice(&bytes).map_err(other)
}

/// The facts of an issued body shared by every answer.
pub(crate) type Shared = Arc<Issued>;
