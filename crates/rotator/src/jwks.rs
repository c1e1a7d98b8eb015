//! The optional `jwks.json`: the public keys of the target's certificates as a JSON Web Key Set
//! (RFC 7517), ready for an authorization server to serve as it is.
//!
//! One JWK per non-empty slot, in the order prev, current, next; `kid` as in [`crate::kid`],
//! `use: sig`, `alg` from the key: RSA → `RS256`, EC P-256 → `ES256`, EC P-384 → `ES384`,
//! Ed25519 → `EdDSA`. `x5c` carries the certificate chain of the slot's `*.crt`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Serialize;
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer as _, X509Certificate};
use x509_parser::public_key::PublicKey;

/// The data key of the JWKS in the target.
pub const JWKS_KEY: &str = "jwks.json";

const OID_RSA: &str = "1.2.840.113549.1.1.1";
const OID_EC: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_ED25519: &str = "1.3.101.112";

/// A public JSON Web Key. Fields serialize in this order, absent ones omitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Jwk {
    pub kty: String,
    #[serde(rename = "use")]
    pub use_: String,
    pub alg: String,
    pub kid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub x5c: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JwkSet {
    pub keys: Vec<Jwk>,
}

/// Why a certificate has no JWK.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    #[error("no PEM CERTIFICATE block")]
    NotPem,
    #[error("not an X.509 certificate: {0}")]
    NotCertificate(String),
    #[error("unsupported public key: {0}")]
    Unsupported(String),
}

/// One slot to render: its name (`prev-tls`, `tls`, `next-tls`), certificate and kid.
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a> {
    pub name: &'a str,
    pub cert: &'a [u8],
    pub kid: &'a str,
}

/// The rendered set, and the slots left out with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub json: Vec<u8>,
    pub skipped: Vec<String>,
}

/// Renders the non-empty slots, in order; a key id already in the set is not repeated.
pub fn render(slots: &[Slot<'_>]) -> Rendered {
    let mut keys: Vec<Jwk> = Vec::new();
    let mut skipped = Vec::new();
    for slot in slots.iter().filter(|s| !s.cert.is_empty()) {
        if keys.iter().any(|k| k.kid == slot.kid) {
            continue;
        }
        match jwk(slot.cert, slot.kid) {
            Ok(key) => keys.push(key),
            Err(e) => skipped.push(format!("{}.crt: {e}", slot.name)),
        }
    }
    // Serializing plain strings cannot fail; an empty set is the fallback all the same.
    let json = serde_json::to_vec(&JwkSet { keys }).unwrap_or_else(|_| br#"{"keys":[]}"#.to_vec());
    Rendered { json, skipped }
}

/// The JWK of the first certificate of a PEM bundle; `x5c` lists every certificate of it.
pub fn jwk(cert_pem: &[u8], kid: &str) -> Result<Jwk, JwkError> {
    let ders: Vec<Vec<u8>> =
        Pem::iter_from_buffer(cert_pem).map_while(Result::ok).filter(|pem| pem.label == "CERTIFICATE").map(|pem| pem.contents).collect();
    let leaf = ders.first().ok_or(JwkError::NotPem)?;
    let (_, cert) = X509Certificate::from_der(leaf).map_err(|e| JwkError::NotCertificate(e.to_string()))?;
    let spki = cert.public_key();
    let algorithm = spki.algorithm.algorithm.to_id_string();
    let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    let mut key = Jwk {
        kty: String::new(),
        use_: "sig".into(),
        alg: String::new(),
        kid: kid.to_owned(),
        crv: None,
        n: None,
        e: None,
        x: None,
        y: None,
        x5c: ders.iter().map(|der| STANDARD.encode(der)).collect(),
    };
    match algorithm.as_str() {
        OID_RSA => {
            let Ok(PublicKey::RSA(rsa)) = spki.parsed() else {
                return Err(JwkError::Unsupported("malformed RSA key".into()));
            };
            key.kty = "RSA".into();
            key.alg = "RS256".into();
            key.n = Some(b64(unsigned(rsa.modulus)));
            key.e = Some(b64(unsigned(rsa.exponent)));
        }
        OID_EC => {
            let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|oid| oid.to_id_string());
            let (crv, alg, size) = match curve.as_deref() {
                Some(OID_P256) => ("P-256", "ES256", 32),
                Some(OID_P384) => ("P-384", "ES384", 48),
                other => return Err(JwkError::Unsupported(format!("EC curve {}", other.unwrap_or("without a named curve")))),
            };
            let point: &[u8] = &spki.subject_public_key.data;
            let coordinates = match point.split_first() {
                Some((4, xy)) if xy.len() == 2 * size => xy,
                _ => return Err(JwkError::Unsupported(format!("{crv} point is not uncompressed"))),
            };
            let (x, y) = coordinates.split_at(size);
            key.kty = "EC".into();
            key.alg = alg.into();
            key.crv = Some(crv.into());
            key.x = Some(b64(x));
            key.y = Some(b64(y));
        }
        OID_ED25519 => {
            let raw: &[u8] = &spki.subject_public_key.data;
            if raw.len() != 32 {
                return Err(JwkError::Unsupported("Ed25519 key is not 32 bytes".into()));
            }
            key.kty = "OKP".into();
            key.alg = "EdDSA".into();
            key.crv = Some("Ed25519".into());
            key.x = Some(b64(raw));
        }
        other => return Err(JwkError::Unsupported(format!("algorithm {other}"))),
    }
    Ok(key)
}

/// A DER INTEGER's bytes without the sign padding (JWK integers are unsigned, minimal).
fn unsigned(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len().saturating_sub(1));
    &bytes[start..]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::kid::kid;
    use jsonwebtoken::jwk::JwkSet as JoseJwkSet;
    use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
    use rcgen::{CertificateParams, KeyPair, SignatureAlgorithm};

    struct Generated {
        cert: String,
        key: String,
    }

    fn generate(alg: &'static SignatureAlgorithm) -> Generated {
        let key = if alg == &rcgen::PKCS_RSA_SHA256 {
            KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).unwrap()
        } else {
            KeyPair::generate_for(alg).unwrap()
        };
        let params = CertificateParams::new(vec!["jwks.example".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        Generated { cert: cert.pem(), key: key.serialize_pem() }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Claims {
        sub: String,
        exp: u64,
    }

    fn sign(alg: Algorithm, key_pem: &str, kid: &str) -> String {
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(key_pem.as_bytes()).unwrap(),
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(key_pem.as_bytes()).unwrap(),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(key_pem.as_bytes()).unwrap(),
            other => panic!("no key for {other:?}"),
        };
        let mut header = Header::new(alg);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, &Claims { sub: "client".into(), exp: 4_000_000_000 }, &key).unwrap()
    }

    /// Renders prev/current/next of one key type, parses the set with a JOSE library, and
    /// verifies a token signed with the current key by the key its `kid` selects.
    fn round_trip(alg: &'static SignatureAlgorithm, jose: Algorithm, kty: &str) {
        let [prev, current, next] = [generate(alg), generate(alg), generate(alg)];
        let kids = [kid(prev.cert.as_bytes()), kid(current.cert.as_bytes()), kid(next.cert.as_bytes())];
        let rendered = render(&[
            Slot { name: "prev-tls", cert: prev.cert.as_bytes(), kid: &kids[0] },
            Slot { name: "tls", cert: current.cert.as_bytes(), kid: &kids[1] },
            Slot { name: "next-tls", cert: next.cert.as_bytes(), kid: &kids[2] },
        ]);
        assert!(rendered.skipped.is_empty(), "{:?}", rendered.skipped);

        let set: JoseJwkSet = serde_json::from_slice(&rendered.json).unwrap();
        assert_eq!(set.keys.len(), 3);
        let raw: serde_json::Value = serde_json::from_slice(&rendered.json).unwrap();
        for (i, key) in raw["keys"].as_array().unwrap().iter().enumerate() {
            assert_eq!(key["kid"], kids[i].as_str());
            assert_eq!(key["use"], "sig");
            assert_eq!(key["kty"], kty);
            assert_eq!(key["alg"], format!("{jose:?}"));
            assert!(key.get("d").is_none(), "no private parts");
        }

        let token = sign(jose, &current.key, &kids[1]);
        let header = jsonwebtoken::decode_header(&token).unwrap();
        let jwk = set.find(header.kid.as_deref().unwrap()).unwrap();
        let decoding = DecodingKey::from_jwk(jwk).unwrap();
        let claims = jsonwebtoken::decode::<Claims>(&token, &decoding, &Validation::new(jose)).unwrap();
        assert_eq!(claims.claims.sub, "client");

        // The next key does not verify the current key's token.
        let wrong = DecodingKey::from_jwk(set.find(&kids[2]).unwrap()).unwrap();
        assert!(jsonwebtoken::decode::<Claims>(&token, &wrong, &Validation::new(jose)).is_err());
    }

    #[test]
    fn rsa_keys_verify_tokens_signed_with_the_current_key() {
        round_trip(&rcgen::PKCS_RSA_SHA256, Algorithm::RS256, "RSA");
    }

    #[test]
    fn p256_keys_verify_tokens_signed_with_the_current_key() {
        round_trip(&rcgen::PKCS_ECDSA_P256_SHA256, Algorithm::ES256, "EC");
    }

    #[test]
    fn p384_keys_verify_tokens_signed_with_the_current_key() {
        round_trip(&rcgen::PKCS_ECDSA_P384_SHA384, Algorithm::ES384, "EC");
    }

    #[test]
    fn ed25519_keys_verify_tokens_signed_with_the_current_key() {
        round_trip(&rcgen::PKCS_ED25519, Algorithm::EdDSA, "OKP");
    }

    #[test]
    fn empty_slots_are_left_out_and_garbage_is_reported() {
        let next = generate(&rcgen::PKCS_ECDSA_P256_SHA256);
        let next_kid = kid(next.cert.as_bytes());
        let rendered = render(&[
            Slot { name: "prev-tls", cert: b"", kid: "" },
            Slot { name: "tls", cert: b"test-crt", kid: "aa407a3c-6e56-54cb-b987-27c48ff40b07" },
            Slot { name: "next-tls", cert: next.cert.as_bytes(), kid: &next_kid },
        ]);
        assert_eq!(rendered.skipped, ["tls.crt: no PEM CERTIFICATE block"]);
        let set: JoseJwkSet = serde_json::from_slice(&rendered.json).unwrap();
        assert_eq!(set.keys.len(), 1);
        assert_eq!(set.keys[0].common.key_id.as_deref(), Some(next_kid.as_str()));
    }

    #[test]
    fn the_same_key_twice_is_listed_once() {
        let cert = generate(&rcgen::PKCS_ED25519);
        let id = kid(cert.cert.as_bytes());
        let slot = Slot { name: "tls", cert: cert.cert.as_bytes(), kid: &id };
        let rendered = render(&[slot, Slot { name: "next-tls", ..slot }]);
        let set: JoseJwkSet = serde_json::from_slice(&rendered.json).unwrap();
        assert_eq!(set.keys.len(), 1);
    }

    #[test]
    fn rendering_is_deterministic_and_x5c_is_the_chain() {
        let cert = generate(&rcgen::PKCS_ECDSA_P384_SHA384);
        let other = generate(&rcgen::PKCS_ECDSA_P256_SHA256);
        let bundle = format!("{}{}", cert.cert, other.cert);
        let id = kid(bundle.as_bytes());
        let slots = [Slot { name: "tls", cert: bundle.as_bytes(), kid: &id }];
        assert_eq!(render(&slots), render(&slots));
        let key = jwk(bundle.as_bytes(), &id).unwrap();
        assert_eq!(key.x5c.len(), 2);
        assert_eq!(key.crv.as_deref(), Some("P-384"), "the first certificate is the key's");
    }

    #[test]
    fn unsigned_strips_sign_padding() {
        assert_eq!(unsigned(&[0, 0x80, 1]), &[0x80, 1]);
        assert_eq!(unsigned(&[1, 0, 1]), &[1, 0, 1]);
        assert_eq!(unsigned(&[0]), &[0]);
    }
}
