//! The HTTPS server behind Blockwork's webhooks (CRD conversion, admission): operators hand it
//! an axum `Router`; it serves it over TLS, with a certificate from files (e.g. cert-manager) or
//! a self-signed one it makes, whose CA goes into the webhook configurations' `caBundle`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tracing::{debug, warn};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("webhook certificate: {0}")]
    Certificate(String),
    #[error("webhook server I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A serving certificate and key (PEM) and the CA that clients must trust.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl TlsMaterial {
    /// A new CA and a serving certificate for `hosts` (DNS names or IP addresses).
    pub fn self_signed(hosts: &[&str]) -> Result<Self, Error> {
        let err = |e: rcgen::Error| Error::Certificate(e.to_string());
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "blockwork-webhook-ca");
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate().map_err(err)?;
        let mut leaf = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        leaf.distinguished_name.push(DnType::CommonName, "blockwork-webhook");
        for host in hosts {
            leaf.subject_alt_names.push(match host.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*host).try_into().map_err(err)?),
            });
        }
        let cert = leaf.signed_by(&key, &issuer).map_err(err)?;
        Ok(Self { cert_pem: cert.pem(), key_pem: key.serialize_pem(), ca_pem: ca_cert.pem() })
    }

    /// `tls.crt`, `tls.key` and (if present) `ca.crt` from a directory, as cert-manager writes them.
    pub fn from_dir(dir: &Path) -> Result<Self, Error> {
        let read = |name: &str| std::fs::read_to_string(dir.join(name));
        Ok(Self { cert_pem: read("tls.crt")?, key_pem: read("tls.key")?, ca_pem: read("ca.crt").unwrap_or_default() })
    }

    fn server_config(&self) -> Result<rustls::ServerConfig, Error> {
        let err = |e: String| Error::Certificate(e);
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(format!("reading the certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| err(format!("reading the key: {e}")))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| err(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Binds `address` and serves `router` over TLS until `shutdown` completes. Returns the bound
/// address (useful with port 0) and the serving task.
pub async fn serve(
    address: SocketAddr,
    router: axum::Router,
    tls: &TlsMaterial,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls.server_config()?));
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => { warn!(%error, "webhook accept failed"); continue; }
                },
            };
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let stream = match acceptor.accept(stream).await {
                    Ok(stream) => stream,
                    Err(error) => return debug!(%peer, %error, "webhook TLS handshake failed"),
                };
                let service = TowerToHyperService::new(router);
                if let Err(error) =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await
                {
                    debug!(%peer, %error, "webhook connection ended with an error");
                }
            });
        }
    });
    Ok((bound, task))
}
