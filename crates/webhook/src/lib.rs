//! The HTTPS server behind Blockwork's webhooks (CRD conversion, admission): operators hand it
//! an axum `Router`; it serves it over TLS, with a certificate from files (e.g. cert-manager) or
//! a self-signed one it makes, whose CA goes into the webhook configurations' `caBundle`.

pub mod authority;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("webhook certificate: {0}")]
    Certificate(String),
    #[error("webhook server I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A serving certificate and key (PEM) and the CA that clients must trust.
#[derive(Clone, Debug, PartialEq, Eq)]
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

    pub(crate) fn certified_key(&self) -> Result<Arc<CertifiedKey>, Error> {
        let err = |e: String| Error::Certificate(e);
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(format!("reading the certificate: {e}")))?;
        if certs.is_empty() {
            return Err(err("no certificate in tls.crt".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| err(format!("reading the key: {e}")))?;
        let key = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).map_err(|e| err(format!("using the key: {e}")))?;
        let certified = CertifiedKey::new(certs, key);
        // A key that does not match the certificate would fail every handshake: refuse it now.
        certified.keys_match().map_err(|e| err(format!("the key does not match the certificate: {e}")))?;
        Ok(Arc::new(certified))
    }
}

/// The certificate the server presents. Replaceable while serving: cert-manager renews the
/// webhook's certificate in place, and a restart to pick it up would be an outage.
#[derive(Debug)]
pub struct ServingCertificate {
    current: RwLock<(Arc<CertifiedKey>, TlsMaterial)>,
}

impl ServingCertificate {
    pub fn new(material: &TlsMaterial) -> Result<Arc<Self>, Error> {
        Ok(Arc::new(Self { current: RwLock::new((material.certified_key()?, material.clone())) }))
    }

    /// Presents `material` from the next handshake on; an invalid one is refused and the
    /// current certificate kept.
    pub fn replace(&self, material: &TlsMaterial) -> Result<(), Error> {
        let key = material.certified_key()?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (key, material.clone());
        Ok(())
    }

    /// Re-reads `dir` (as [`TlsMaterial::from_dir`]) every `period` until `shutdown`, and
    /// presents what changed. Unreadable or invalid files (say, half written) are logged and
    /// the current certificate kept.
    pub fn reload_from(
        self: &Arc<Self>,
        dir: PathBuf,
        period: Duration,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::pin!(shutdown);
            loop {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(period) => {}
                }
                let changed = match TlsMaterial::from_dir(&dir) {
                    Ok(material) => {
                        let current = &this.current.read().unwrap_or_else(PoisonError::into_inner).1;
                        (material.cert_pem != current.cert_pem || material.key_pem != current.key_pem).then_some(material)
                    }
                    Err(error) => {
                        warn!(%error, dir = %dir.display(), "cannot read the webhook certificate; serving the current one");
                        None
                    }
                };
                if let Some(material) = changed {
                    match this.replace(&material) {
                        Ok(()) => info!(dir = %dir.display(), "webhook certificate reloaded"),
                        Err(error) => warn!(%error, "new webhook certificate refused; serving the current one"),
                    }
                }
            }
        })
    }

    fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Certificate(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner).0))
    }
}

/// Binds `address` and serves `router` over TLS until `shutdown` completes. Returns the bound
/// address (useful with port 0) and the serving task.
pub async fn serve(
    address: SocketAddr,
    router: axum::Router,
    certificate: &Arc<ServingCertificate>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(certificate.server_config()?));
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
