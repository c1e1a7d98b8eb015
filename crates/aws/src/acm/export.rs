//! ExportCertificate: a certificate, its chain and its private key, for use outside ACM (an
//! exportable public certificate, or a private one). ACM encrypts the key under a passphrase the
//! caller chooses (PKCS#8, PBES2); the layer chooses a random one for each call, decrypts the
//! key in process and forgets the passphrase, so neither ever leaves this function. What it
//! returns holds the key unencrypted, in memory that is zeroed when dropped, and never prints it.

use std::fmt;

use aws_sdk_acm::primitives::Blob;
use pkcs8::EncryptedPrivateKeyInfoRef;
use pkcs8::der::pem::LineEnding;
use pkcs8::der::{Decode as _, SecretDocument};
use rand::Rng as _;
use zeroize::Zeroizing;

use super::Acm;
use crate::error::{AwsError, ErrorClass, classify_sdk_error};
use crate::principal::Principal;

/// Characters of the passphrase: 32 alphanumerics are ~190 bits, and ACM accepts them (it refuses
/// some punctuation in passphrases).
const PASSPHRASE_LENGTH: usize = 32;

/// What ExportCertificate returned, the key decrypted.
pub struct Exported {
    /// The certificate, PEM.
    pub certificate: String,
    /// The chain ACM gives with it (intermediates, then the root), PEM; empty when it gives none.
    pub chain: String,
    /// The private key, unencrypted PKCS#8 (`-----BEGIN PRIVATE KEY-----`), zeroed when dropped.
    pub private_key: Zeroizing<String>,
}

impl fmt::Debug for Exported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exported").field("certificate", &self.certificate).field("chain", &self.chain).finish_non_exhaustive()
    }
}

impl Acm {
    /// ExportCertificate as `principal` with a random passphrase, the key decrypted. A certificate that is not
    /// exportable (a public one requested without `Options.Export`) fails with ACM's
    /// `ValidationException`, of class `Terminal`.
    pub async fn export(&self, principal: &Principal, arn: &str) -> Result<Exported, AwsError> {
        const OP: &str = "ExportCertificate";
        let passphrase = passphrase();
        let client = self.client(principal).await?;
        let output = self
            .call(principal, OP, || {
                let call = client.export_certificate().certificate_arn(arn).passphrase(Blob::new(passphrase.as_bytes()));
                async move { call.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
            })
            .await?;
        let certificate = output.certificate().ok_or_else(|| AwsError::incomplete(OP, "the certificate"))?.to_owned();
        let chain = output.certificate_chain().unwrap_or_default().to_owned();
        let encrypted = Zeroizing::new(output.private_key.ok_or_else(|| AwsError::incomplete(OP, "the private key"))?);
        let private_key = decrypt(&encrypted, passphrase.as_bytes()).map_err(|why| AwsError {
            operation: OP,
            code: Some("UndecryptablePrivateKey".to_owned()),
            class: ErrorClass::Terminal,
            message: format!("the exported private key could not be decrypted: {why}"),
        })?;
        Ok(Exported { certificate, chain, private_key })
    }
}

/// A random passphrase for one export.
fn passphrase() -> Zeroizing<String> {
    let mut rng = rand::rng();
    Zeroizing::new((0..PASSPHRASE_LENGTH).map(|_| char::from(rng.sample(rand::distr::Alphanumeric))).collect())
}

/// Encrypted PKCS#8 PEM → unencrypted PKCS#8 PEM. The error names what failed, never the key.
pub fn decrypt(encrypted_pem: &str, passphrase: &[u8]) -> Result<Zeroizing<String>, &'static str> {
    let (label, document) = SecretDocument::from_pem(encrypted_pem).map_err(|_| "not a PEM document")?;
    if label != "ENCRYPTED PRIVATE KEY" {
        return Err("not an encrypted PKCS#8 key");
    }
    let info = EncryptedPrivateKeyInfoRef::from_der(document.as_bytes()).map_err(|_| "not an encrypted PKCS#8 key")?;
    let decrypted = info.decrypt(passphrase).map_err(|_| "the passphrase does not decrypt it")?;
    decrypted.to_pem("PRIVATE KEY", LineEnding::LF).map_err(|_| "the decrypted key does not encode as PEM")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An EC P-256 key, PKCS#8, encrypted by `openssl pkcs8 -topk8 -v2 aes-256-cbc -v2prf
    /// hmacWithSHA256` (PBES2 with PBKDF2-HMAC-SHA256 and AES-256-CBC, what ACM and moto's
    /// `BestAvailableEncryption` use) under the passphrase `correct horse`.
    const ENCRYPTED: &str = include_str!("testdata/encrypted-p256.pem");
    /// The same key, unencrypted (`openssl pkcs8 -topk8 -nocrypt`).
    const PLAIN: &str = include_str!("testdata/plain-p256.pem");

    #[test]
    fn an_encrypted_pkcs8_key_decrypts_to_the_same_key_unencrypted() {
        let decrypted = decrypt(ENCRYPTED, b"correct horse").unwrap();
        assert_eq!(decrypted.as_str(), PLAIN);
    }

    #[test]
    fn a_wrong_passphrase_or_an_unencrypted_key_is_refused_without_naming_the_key() {
        assert_eq!(decrypt(ENCRYPTED, b"battery staple"), Err("the passphrase does not decrypt it"));
        assert_eq!(decrypt(PLAIN, b"correct horse"), Err("not an encrypted PKCS#8 key"));
        assert_eq!(decrypt("garbage", b"x"), Err("not a PEM document"));
    }

    #[test]
    fn each_export_gets_its_own_passphrase_of_alphanumerics() {
        let (a, b) = (passphrase(), passphrase());
        assert_ne!(*a, *b);
        assert_eq!(a.len(), PASSPHRASE_LENGTH);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn the_exported_key_never_prints() {
        let exported = Exported {
            certificate: "CERT".into(),
            chain: String::new(),
            private_key: Zeroizing::new("-----BEGIN PRIVATE KEY-----".into()),
        };
        assert!(!format!("{exported:?}").contains("PRIVATE KEY"), "{exported:?}");
    }
}
