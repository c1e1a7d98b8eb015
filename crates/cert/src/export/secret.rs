//! The exported Secret's format (ADR 0016): a `kubernetes.io/tls` Secret as ingress controllers,
//! pods and the key rotator expect it, with Blockwork's labels and annotations telling which
//! Cert wrote it and which certificate it holds. Pure.
//!
//! - `type: kubernetes.io/tls`; `tls.crt` the certificate then its chain, `tls.key` the key
//!   (unencrypted PKCS#8 PEM), `ca.crt` the chain's root.
//! - Labels: `app.kubernetes.io/managed-by: blockwork`, and `acm.blockwork.dev/cert-uid`: the
//!   UID of the Cert that wrote it, which decides ownership (a Secret without it, or with another
//!   Cert's, is never written) and selects the Secrets the controller watches.
//! - Annotations: `acm.blockwork.dev/cert` (the Cert's name), `certificate-arn`, `serial`,
//!   `not-after` (RFC 3339) and `exported-at`.
//! - The spec's `secretTemplate` labels and annotations besides (the rotator's, say).
//! - No owner reference: the Secret goes with the certificate (deleteOnRemoval), not with the
//!   Cert, so a Cert deleted with its certificate kept (or orphaned) leaves pods their Secret.

use std::collections::BTreeMap;

use blockwork_runtime::labels::{MANAGED_BY, MANAGED_BY_LABEL};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Resource as _, ResourceExt as _};

use super::material::Material;
use crate::api::{Cert, ExportSpec};

pub const TYPE: &str = "kubernetes.io/tls";
pub const KEY_CERTIFICATES: &str = "tls.crt";
pub const KEY_PRIVATE_KEY: &str = "tls.key";
pub const KEY_CA: &str = "ca.crt";

/// The prefix of Blockwork's labels and annotations on the Secret: the Cert's API group, so they
/// never meet the key rotator's (whose prefix may be configured to `blockwork.dev`).
pub const PREFIX: &str = "acm.blockwork.dev/";
pub const LABEL_CERT_UID: &str = "acm.blockwork.dev/cert-uid";
pub const ANNOTATION_CERT: &str = "acm.blockwork.dev/cert";
pub const ANNOTATION_CERTIFICATE_ARN: &str = "acm.blockwork.dev/certificate-arn";
pub const ANNOTATION_SERIAL: &str = "acm.blockwork.dev/serial";
pub const ANNOTATION_NOT_AFTER: &str = "acm.blockwork.dev/not-after";
pub const ANNOTATION_EXPORTED_AT: &str = "acm.blockwork.dev/exported-at";

/// Who a Secret of the export's name belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This Cert's (its UID in the label).
    This,
    /// Another Cert's export (another UID).
    OtherCert,
    /// Not an export of any Cert.
    Foreign,
}

pub fn owner(secret: &Secret, uid: &str) -> Owner {
    match secret.labels().get(LABEL_CERT_UID) {
        Some(owner) if !uid.is_empty() && owner == uid => Owner::This,
        Some(_) => Owner::OtherCert,
        None => Owner::Foreign,
    }
}

/// The labels and annotations the Secret of `cert` has for `arn` and `material` (the time of the
/// export aside): the template's, then Blockwork's.
pub fn metadata(
    cert: &Cert,
    export: &ExportSpec,
    arn: &str,
    facts: &super::material::Facts,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let template = export.secret_template.clone().unwrap_or_default();
    let mut labels = template.labels;
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels.insert(LABEL_CERT_UID.to_owned(), cert.uid().unwrap_or_default());
    let mut annotations = template.annotations;
    annotations.insert(ANNOTATION_CERT.to_owned(), cert.name_any());
    annotations.insert(ANNOTATION_CERTIFICATE_ARN.to_owned(), arn.to_owned());
    annotations.insert(ANNOTATION_SERIAL.to_owned(), facts.serial.clone());
    annotations.insert(ANNOTATION_NOT_AFTER.to_owned(), facts.not_after.to_string());
    (labels, annotations)
}

/// The Secret to write for `cert`: `material` exported from `arn` at `now`.
pub fn secret(cert: &Cert, export: &ExportSpec, arn: &str, material: &Material, now: jiff::Timestamp) -> Secret {
    let (labels, mut annotations) = metadata(cert, export, arn, &material.facts);
    annotations.insert(ANNOTATION_EXPORTED_AT.to_owned(), now.to_string());
    let data = BTreeMap::from([
        (KEY_CERTIFICATES.to_owned(), ByteString(material.certificates.as_bytes().to_vec())),
        (KEY_PRIVATE_KEY.to_owned(), ByteString(material.private_key.as_bytes().to_vec())),
        (KEY_CA.to_owned(), ByteString(material.ca.as_bytes().to_vec())),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(export.secret_name.clone()),
            namespace: cert.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some(TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Whether the Secret's type, labels and annotations are what `wanted` (from [`metadata`]) says
/// (others it may have besides are someone else's and fine).
pub fn metadata_intact(secret: &Secret, wanted: &(BTreeMap<String, String>, BTreeMap<String, String>)) -> bool {
    let holds = |have: &BTreeMap<String, String>, want: &BTreeMap<String, String>| want.iter().all(|(k, v)| have.get(k) == Some(v));
    secret.type_.as_deref() == Some(TYPE) && holds(secret.labels(), &wanted.0) && holds(secret.annotations(), &wanted.1)
}

/// `tls.crt`, `tls.key` and `ca.crt` of a Secret (empty when absent).
pub fn contents(secret: &Secret) -> [&[u8]; 3] {
    let get = |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).map_or(&[][..], |v| v.0.as_slice());
    [get(KEY_CERTIFICATES), get(KEY_PRIVATE_KEY), get(KEY_CA)]
}

/// Zeroes the data of a Secret this process holds (its key) once it is no longer needed.
pub fn forget_data(secret: &mut Secret) {
    use zeroize::Zeroize as _;
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        value.0.zeroize();
    }
}

/// A reference to the Cert for error messages and events: the Secret of this namespace.
pub fn describe(cert: &Cert, name: &str) -> String {
    format!("Secret {}/{name}", cert.meta().namespace.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::{CertSpec, SecretTemplate};
    use zeroize::Zeroizing;

    fn cert() -> Cert {
        let mut cert = Cert::new("api", CertSpec::default());
        cert.metadata.namespace = Some("team".into());
        cert.metadata.uid = Some("uid-1".into());
        cert
    }

    fn material() -> Material {
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(vec!["api.example.com".to_owned()]).unwrap().self_signed(&key).unwrap();
        Material::from_export(&certificate.pem(), "", Zeroizing::new(key.serialize_pem())).unwrap()
    }

    fn export() -> ExportSpec {
        let template = SecretTemplate {
            labels: BTreeMap::from([("team".to_owned(), "a".to_owned())]),
            annotations: BTreeMap::from([("rotator.gw.ei.telekom.de/source-secret".to_owned(), "true".to_owned())]),
        };
        ExportSpec { secret_name: "api-tls".into(), secret_template: Some(template) }
    }

    #[test]
    fn the_secret_is_kubernetes_tls_with_the_three_keys_blockwork_s_metadata_and_the_template_s() {
        let m = material();
        let secret = secret(&cert(), &export(), "arn:aws:acm:us-east-1:123456789012:certificate/x", &m, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!((secret.metadata.name.as_deref(), secret.metadata.namespace.as_deref()), (Some("api-tls"), Some("team")));
        let data = secret.data.as_ref().unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt", "tls.crt", "tls.key"]);
        assert_eq!(secret.labels()["app.kubernetes.io/managed-by"], "blockwork");
        assert_eq!(secret.labels()[LABEL_CERT_UID], "uid-1");
        assert_eq!(secret.labels()["team"], "a");
        assert_eq!(secret.annotations()["rotator.gw.ei.telekom.de/source-secret"], "true");
        assert_eq!(secret.annotations()[ANNOTATION_CERT], "api");
        assert_eq!(secret.annotations()[ANNOTATION_SERIAL], m.facts.serial);
        assert_eq!(secret.annotations()[ANNOTATION_NOT_AFTER], m.facts.not_after.to_string());
        assert!(secret.metadata.owner_references.is_none(), "the Secret goes with the certificate, not the Cert");
        let [crt, key, ca] = contents(&secret);
        assert!(Material::check(crt, key, ca).is_ok());
    }

    #[test]
    fn ownership_is_the_cert_uid_label() {
        let m = material();
        let ours = secret(&cert(), &export(), "arn", &m, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(owner(&ours, "uid-1"), Owner::This);
        assert_eq!(owner(&ours, "uid-2"), Owner::OtherCert);
        assert_eq!(owner(&Secret::default(), "uid-1"), Owner::Foreign);
        assert_eq!(owner(&ours, ""), Owner::OtherCert, "an object without UID owns nothing");
    }

    #[test]
    fn metadata_removed_or_changed_is_not_intact_and_added_metadata_is() {
        let m = material();
        let wanted = metadata(&cert(), &export(), "arn", &m.facts);
        let mut ours = secret(&cert(), &export(), "arn", &m, jiff::Timestamp::UNIX_EPOCH);
        assert!(metadata_intact(&ours, &wanted));
        ours.labels_mut().insert("extra".into(), "fine".into());
        assert!(metadata_intact(&ours, &wanted));
        ours.annotations_mut().remove("rotator.gw.ei.telekom.de/source-secret");
        assert!(!metadata_intact(&ours, &wanted));
    }
}
