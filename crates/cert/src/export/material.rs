//! What goes into an exported Secret, checked before it is written and read back from a Secret
//! to tell whether it still holds what was written: the certificate and its chain (`tls.crt`,
//! leaf first, as TLS servers and ingress controllers expect), the private key (`tls.key`,
//! unencrypted PKCS#8 PEM) and the chain's root (`ca.crt`, what a client in the cluster trusts).
//! The key must be the certificate's (their public keys compare equal): a Secret whose key does
//! not fit its certificate is never written, and one found so is someone else's change.
//!
//! Pure: parsing only. Errors name what is wrong, never the material.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use zeroize::Zeroizing;

/// A certificate with its chain and key, consistent with each other.
pub struct Material {
    /// `tls.crt`: the certificate, then the chain (PEM).
    pub certificates: String,
    /// `tls.key`: the private key, unencrypted PKCS#8 (PEM), zeroed when dropped.
    pub private_key: Zeroizing<String>,
    /// `ca.crt`: the last certificate of the chain, its root; the certificate itself when
    /// there is no chain (a self-signed one).
    pub ca: String,
    pub facts: Facts,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material").field("facts", &self.facts).finish_non_exhaustive()
    }
}

/// What the certificate says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The serial number as ACM shows it: lowercase hex bytes separated by colons.
    pub serial: String,
    pub not_before: jiff::Timestamp,
    pub not_after: jiff::Timestamp,
}

/// Why material cannot be used (or a Secret does not hold what was written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("tls.crt holds no PEM certificate")]
    NoCertificate,
    #[error("a certificate of tls.crt or ca.crt does not parse")]
    UnparsableCertificate,
    #[error("tls.key holds no PEM private key")]
    NoKey,
    #[error("tls.key is not a private key of a supported kind")]
    UnsupportedKey,
    #[error("tls.key is not the key of the certificate in tls.crt")]
    KeyMismatch,
    #[error("ca.crt is not the root of the chain in tls.crt")]
    WrongCa,
}

impl Material {
    /// The material of an export: `certificate` and `chain` as ACM returned them, `private_key`
    /// decrypted.
    pub fn from_export(certificate: &str, chain: &str, private_key: Zeroizing<String>) -> Result<Self, Unusable> {
        let leaf = pem_certificates(certificate)?;
        let chain = pem_certificates(chain)?;
        let first = leaf.first().ok_or(Unusable::NoCertificate)?;
        let mut all = vec![first.clone()];
        all.extend(chain.iter().cloned());
        let facts = facts(first)?;
        check_pair(all.clone(), &private_key)?;
        let ca = chain.last().unwrap_or(first);
        Ok(Self { certificates: to_pem(&all), private_key, ca: to_pem(std::slice::from_ref(ca)), facts })
    }

    /// What a Secret's `tls.crt`, `tls.key` and `ca.crt` hold, if they are consistent: the
    /// certificate's facts. Used to tell whether a Secret still holds what was written.
    pub fn check(certificates: &[u8], private_key: &[u8], ca: &[u8]) -> Result<Facts, Unusable> {
        let text = |bytes: &[u8]| std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| Unusable::UnparsableCertificate);
        let all = pem_certificates(&text(certificates)?)?;
        let first = all.first().ok_or(Unusable::NoCertificate)?;
        let facts = facts(first)?;
        let key = Zeroizing::new(std::str::from_utf8(private_key).map_err(|_| Unusable::NoKey)?.to_owned());
        check_pair(all.clone(), &key)?;
        let root = pem_certificates(&text(ca)?)?;
        if root.len() != 1 || root.first() != all.last() {
            return Err(Unusable::WrongCa);
        }
        Ok(facts)
    }
}

fn pem_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, Unusable> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|_| Unusable::UnparsableCertificate)
}

fn to_pem(certificates: &[CertificateDer<'_>]) -> String {
    use base64::Engine as _;
    let mut pem = String::new();
    for certificate in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let encoded = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

fn facts(certificate: &CertificateDer<'_>) -> Result<Facts, Unusable> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).map_err(|_| Unusable::UnparsableCertificate)?;
    let time = |t: x509_parser::time::ASN1Time| jiff::Timestamp::from_second(t.timestamp()).map_err(|_| Unusable::UnparsableCertificate);
    let validity = parsed.validity();
    Ok(Facts { serial: serial(parsed.raw_serial()), not_before: time(validity.not_before)?, not_after: time(validity.not_after)? })
}

/// Lowercase hex bytes separated by colons, as ACM's DescribeCertificate shows a serial.
pub fn serial(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The key is the first certificate's: their public keys compare equal.
fn check_pair(certificates: Vec<CertificateDer<'static>>, private_key: &Zeroizing<String>) -> Result<(), Unusable> {
    let key = PrivateKeyDer::from_pem_slice(private_key.as_bytes()).map_err(|_| Unusable::NoKey)?;
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let signing = provider.key_provider.load_private_key(key).map_err(|_| Unusable::UnsupportedKey)?;
    CertifiedKey::new(certificates, signing).keys_match().map_err(|_| Unusable::KeyMismatch)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A CA and a leaf it signed, with the leaf's key (rcgen, as the tests of the webhook's own
    /// certificates make them).
    fn issued() -> (String, String, Zeroizing<String>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["api.example.com".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
        (leaf.pem(), ca.pem(), Zeroizing::new(key.serialize_pem()))
    }

    #[test]
    fn an_export_becomes_the_certificate_then_its_chain_the_key_and_the_chain_s_root() {
        let (leaf, ca, key) = issued();
        let material = Material::from_export(&leaf, &ca, key.clone()).unwrap();
        assert_eq!(pem_certificates(&material.certificates).unwrap().len(), 2);
        assert!(material.certificates.starts_with(&leaf.replace("\r\n", "\n")[..40]));
        assert_eq!(pem_certificates(&material.ca).unwrap(), pem_certificates(&ca).unwrap());
        assert_eq!(*material.private_key, *key);
        let facts = Material::check(material.certificates.as_bytes(), material.private_key.as_bytes(), material.ca.as_bytes()).unwrap();
        assert_eq!(facts, material.facts);
        assert!(facts.not_before < facts.not_after);
        assert!(facts.serial.split(':').all(|byte| byte.len() == 2 && byte.chars().all(|c| c.is_ascii_hexdigit())), "{}", facts.serial);
    }

    #[test]
    fn a_self_signed_certificate_is_its_own_ca() {
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).unwrap().self_signed(&key).unwrap();
        let material = Material::from_export(&certificate.pem(), "", Zeroizing::new(key.serialize_pem())).unwrap();
        assert_eq!(pem_certificates(&material.ca).unwrap(), pem_certificates(&certificate.pem()).unwrap());
    }

    #[test]
    fn a_key_that_is_not_the_certificate_s_is_refused() {
        let (leaf, ca, _) = issued();
        let other = Zeroizing::new(rcgen::KeyPair::generate().unwrap().serialize_pem());
        assert_eq!(Material::from_export(&leaf, &ca, other).unwrap_err(), Unusable::KeyMismatch);
    }

    #[test]
    fn a_secret_changed_in_any_of_its_three_keys_is_told_apart() {
        let (leaf, ca, key) = issued();
        let m = Material::from_export(&leaf, &ca, key).unwrap();
        let (crt, tls_key, root) = (m.certificates.as_bytes(), m.private_key.as_bytes(), m.ca.as_bytes());
        assert!(Material::check(crt, tls_key, root).is_ok());
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        assert_eq!(Material::check(crt, other.as_bytes(), root), Err(Unusable::KeyMismatch));
        assert_eq!(Material::check(b"edited", tls_key, root), Err(Unusable::NoCertificate));
        assert_eq!(Material::check(crt, b"", root), Err(Unusable::NoKey));
        assert_eq!(Material::check(crt, tls_key, leaf.as_bytes()), Err(Unusable::WrongCa));
    }

    #[test]
    fn serials_read_as_acm_shows_them() {
        assert_eq!(serial(&[0x0a, 0xbc, 0x01]), "0a:bc:01");
    }

    #[test]
    fn material_never_prints_its_key() {
        let (leaf, ca, key) = issued();
        let material = Material::from_export(&leaf, &ca, key).unwrap();
        assert!(!format!("{material:?}").contains("PRIVATE KEY"));
    }
}
