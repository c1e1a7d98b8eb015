//! Looking for what users must never read — an AWS account id, an access key, private-key
//! material — in everything a user can read of Blockwork: the statuses of its objects, the
//! events about them, the operator's logs and metrics. A [`Scanner`] holds the needles (exact strings, e.g. the
//! distinctive account id the emulators were started with, see
//! [`Emulators::for_account`](crate::emulators::Emulators::for_account)) and the identifier
//! fields where one may appear because users need the identifier whole (a Cert's
//! `status.certificateArn` is what a load balancer is given). Every hit comes back as a
//! [`Finding`] that says where, so a failing test shows what leaked and from which object, event
//! or log line.

use std::fmt;

use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::Value;

/// Where a needle was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was found, e.g. `account id`.
    pub what: String,
    /// What was read, e.g. `DistributionTenant ns/shop status`, `event ns/shop.1234`, `log`.
    pub source: String,
    /// Where in it: a JSON pointer (`/conditions/0/message`) or `line 12`.
    pub location: String,
    /// The text around the hit.
    pub excerpt: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {} at {}: {}", self.what, self.source, self.location, self.excerpt)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Scanner {
    /// (what, text)
    needles: Vec<(String, String)>,
    /// Field names whose value may hold a needle.
    identifier_fields: Vec<String>,
    /// Look for private-key material of any key ([`Scanner::private_keys`]).
    private_keys: bool,
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks for `text`, reported as `what`.
    pub fn needle(mut self, what: &str, text: &str) -> Self {
        self.needles.push((what.to_owned(), text.to_owned()));
        self
    }

    /// Also looks for private keys, whichever: a PEM private key (`-----BEGIN … PRIVATE KEY-----`,
    /// encrypted or not), and base64 (at least [`KEY_BASE64_MIN`] characters) that decodes to a
    /// DER private key (PKCS#8, PKCS#1, SEC1, or PKCS#8 encrypted with PBES2) or to PEM text of
    /// one (a Secret's data as the API shows it).
    pub fn private_keys(mut self) -> Self {
        self.private_keys = true;
        self
    }

    /// JSON fields named `name` (at any depth) are identifiers users need whole, such as an ARN:
    /// a needle inside them is not a finding. Say why at the call.
    pub fn identifier_field(mut self, name: &str) -> Self {
        self.identifier_fields.push(name.to_owned());
        self
    }

    /// Every needle in `text`, by line.
    pub fn text(&self, source: &str, text: &str) -> Vec<Finding> {
        text.lines().enumerate().flat_map(|(index, line)| self.hits(source, &format!("line {}", index + 1), line)).collect()
    }

    /// Every needle in the strings (and keys) of `value`, but those of identifier fields.
    pub fn json(&self, source: &str, value: &Value) -> Vec<Finding> {
        let mut findings = Vec::new();
        self.walk(source, "", value, &mut findings);
        findings
    }

    /// The statuses of every object of `kinds` in `namespace`, and every event there.
    pub async fn namespace(&self, client: &Client, namespace: &str, kinds: &[ApiResource]) -> Result<Vec<Finding>, kube::Error> {
        let mut findings = Vec::new();
        for kind in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, kind);
            for object in api.list(&ListParams::default()).await? {
                let source = format!("{} {namespace}/{} status", kind.kind, object.name_any());
                findings.extend(self.json(&source, &object.data["status"]));
            }
        }
        let events: Api<Event> = Api::namespaced(client.clone(), namespace);
        for event in events.list(&ListParams::default()).await? {
            let source = format!("event {namespace}/{}", event.name_any());
            let mut value = serde_json::to_value(&event).unwrap_or(Value::Null);
            if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            findings.extend(self.json(&source, &value));
        }
        Ok(findings)
    }

    fn walk(&self, source: &str, pointer: &str, value: &Value, findings: &mut Vec<Finding>) {
        match value {
            Value::String(text) => findings.extend(self.hits(source, pointer, text)),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.walk(source, &format!("{pointer}/{index}"), item, findings);
                }
            }
            Value::Object(fields) => {
                for (name, field) in fields {
                    let pointer = format!("{pointer}/{name}");
                    findings.extend(self.hits(source, &pointer, name));
                    if !self.identifier_fields.iter().any(|allowed| allowed == name) {
                        self.walk(source, &pointer, field, findings);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => findings.extend(self.hits(source, pointer, &value.to_string())),
        }
    }

    fn hits(&self, source: &str, location: &str, text: &str) -> Vec<Finding> {
        let finding = |what: &str| Finding {
            what: what.to_owned(),
            source: source.to_owned(),
            location: location.to_owned(),
            excerpt: excerpt(text),
        };
        let mut found: Vec<Finding> =
            self.needles.iter().filter(|(_, needle)| text.contains(needle.as_str())).map(|(what, _)| finding(what)).collect();
        if self.private_keys
            && let Some(what) = key_material(text)
        {
            found.push(finding(what));
        }
        found
    }
}

/// The shortest base64 run looked at: a DER private key is longer (an EC P-256 key in PKCS#8 is
/// 138 bytes, 184 characters), a hash or an id shorter.
pub const KEY_BASE64_MIN: usize = 100;

/// What private-key material `text` holds, if any.
pub fn key_material(text: &str) -> Option<&'static str> {
    if text.contains("PRIVATE KEY") {
        return Some("a PEM private key");
    }
    let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_');
    text.split(|c: char| !base64(c)).filter(|run| run.len() >= KEY_BASE64_MIN).find_map(|run| {
        use base64::Engine as _;
        let trimmed = run.trim_end_matches('=');
        let usable = &trimmed[..trimmed.len() - trimmed.len() % 4];
        let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(usable)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(usable))
            .ok()?;
        if decoded.windows(11).any(|w| w == b"PRIVATE KEY") {
            return Some("a base64 PEM private key");
        }
        der_private_key(&decoded).then_some("a base64 DER private key")
    })
}

/// Whether `der` starts as a private key does: a SEQUENCE whose content begins with version 0
/// then an AlgorithmIdentifier (PKCS#8) or an INTEGER (PKCS#1 RSA), with version 1 then an OCTET
/// STRING (SEC1 EC), or is an EncryptedPrivateKeyInfo under PBES2. Certificates and public keys
/// begin otherwise (a tagged version, a SEQUENCE, an INTEGER of more than one byte).
fn der_private_key(der: &[u8]) -> bool {
    let content = match der {
        [0x30, 0x81, _, rest @ ..] => rest,
        [0x30, 0x82, _, _, rest @ ..] => rest,
        [0x30, len, rest @ ..] if *len < 0x80 => rest,
        _ => return false,
    };
    const PBES2: [u8; 11] = [0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];
    content.starts_with(&[0x02, 0x01, 0x00, 0x30])
        || content.starts_with(&[0x02, 0x01, 0x00, 0x02])
        || content.starts_with(&[0x02, 0x01, 0x01, 0x04])
        || (content.first() == Some(&0x30) && content.windows(PBES2.len()).take(8).any(|w| w == PBES2))
}

/// At most 200 characters of a hit's text.
fn excerpt(text: &str) -> String {
    let mut short: String = text.chars().take(200).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const ACCOUNT: &str = "731902846215";

    fn scanner() -> Scanner {
        Scanner::new().needle("account id", ACCOUNT).identifier_field("certificateArn")
    }

    #[test]
    fn needle_in_a_log_line_is_found_with_its_line() {
        let log = format!("starting\nUser: arn:aws:iam::{ACCOUNT}:user/op is not authorized\n");
        let findings = scanner().text("log", &log);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!((findings[0].what.as_str(), findings[0].location.as_str()), ("account id", "line 2"));
    }

    #[test]
    fn needle_in_a_condition_message_is_found_with_its_pointer() {
        let status = serde_json::json!({"conditions": [{"type": "Ready", "message": format!("certificate arn:aws:acm:us-east-1:{ACCOUNT}:certificate/x")}]});
        let findings = scanner().json("Thing ns/a status", &status);
        assert_eq!(findings.iter().map(|f| f.location.as_str()).collect::<Vec<_>>(), ["/conditions/0/message"]);
    }

    #[test]
    fn needle_in_an_identifier_field_is_not_a_finding() {
        let status = serde_json::json!({"certificateArn": format!("arn:aws:acm:us-east-1:{ACCOUNT}:certificate/x"), "message": "ready"});
        assert!(scanner().json("Cert ns/a status", &status).is_empty());
    }

    fn key() -> rcgen::KeyPair {
        rcgen::KeyPair::generate().unwrap()
    }

    #[test]
    fn a_private_key_in_pem_base64_der_or_base64_pem_is_found() {
        use base64::Engine as _;
        let key = key();
        let scanner = Scanner::new().private_keys();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        for text in [
            format!("loaded {}", key.serialize_pem()),
            format!("{{\"key\":\"{}\"}}", b64(&key.serialize_der())),
            format!("tls.key: {}", b64(key.serialize_pem().as_bytes())),
            "-----BEGIN ENCRYPTED PRIVATE KEY-----".to_owned(),
        ] {
            assert_eq!(scanner.text("log", &text).len().min(1), 1, "not found in {text}");
        }
    }

    #[test]
    fn certificates_public_keys_and_ids_are_not_private_keys() {
        use base64::Engine as _;
        let key = key();
        let certificate = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).unwrap().self_signed(&key).unwrap();
        let scanner = Scanner::new().private_keys();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        for text in [
            certificate.pem(),
            b64(certificate.der()),
            b64(&rcgen::PublicKeyData::subject_public_key_info(&key)),
            "serial 0a:bc:01, kid 558ba4da-9628-5cb4-b244-ef833e84a53c".to_owned(),
            "a".repeat(300),
        ] {
            assert!(scanner.text("log", &text).is_empty(), "{text}");
        }
    }

    #[test]
    fn masked_account_is_not_a_finding() {
        assert!(scanner().text("log", "certificate arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/x").is_empty());
    }
}
