#![allow(clippy::unwrap_used, clippy::panic)]
//! A renewed certificate (cert-manager rewrites the mounted files) is presented without a
//! restart; broken files never replace a working certificate.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use blockwork_webhook::{ServingCertificate, TlsMaterial, serve};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

const PERIOD: Duration = Duration::from_millis(50);

fn write(dir: &Path, material: &TlsMaterial) {
    std::fs::write(dir.join("tls.crt"), &material.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &material.key_pem).unwrap();
}

/// Whether a TLS handshake succeeds for a client that trusts only `ca_pem`.
async fn trusted_by(address: SocketAddr, ca_pem: &str) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let server = ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(server, stream).await.is_ok()
}

async fn started(dir: &Path) -> (SocketAddr, Arc<ServingCertificate>) {
    let certificate = ServingCertificate::new(&TlsMaterial::from_dir(dir).unwrap()).unwrap();
    certificate.reload_from(dir.to_owned(), PERIOD, std::future::pending());
    let (address, _task) = serve("127.0.0.1:0".parse().unwrap(), axum::Router::new(), &certificate, std::future::pending()).await.unwrap();
    (address, certificate)
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (first, renewed) = (TlsMaterial::self_signed(&["127.0.0.1"]).unwrap(), TlsMaterial::self_signed(&["127.0.0.1"]).unwrap());
    write(dir.path(), &first);
    let (address, _certificate) = started(dir.path()).await;
    assert!(trusted_by(address, &first.ca_pem).await);

    write(dir.path(), &renewed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !trusted_by(address, &renewed.ca_pem).await {
        assert!(tokio::time::Instant::now() < deadline, "the renewed certificate is never served");
        tokio::time::sleep(PERIOD).await;
    }
    assert!(!trusted_by(address, &first.ca_pem).await, "the old certificate is gone");
}

#[tokio::test]
async fn broken_files_keep_the_working_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = TlsMaterial::self_signed(&["127.0.0.1"]).unwrap();
    write(dir.path(), &first);
    let (address, _certificate) = started(dir.path()).await;

    // A key of another certificate: half of a renewal, or a mistake.
    let other = TlsMaterial::self_signed(&["127.0.0.1"]).unwrap();
    std::fs::write(dir.path().join("tls.key"), &other.key_pem).unwrap();
    tokio::time::sleep(PERIOD * 6).await;
    assert!(trusted_by(address, &first.ca_pem).await, "still served");
}
