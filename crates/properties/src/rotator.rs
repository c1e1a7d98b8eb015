//! The key rotator: parsing key material (`blockwork_rotator::jwks::jwk`) and the plan
//! (`blockwork_rotator::plan::plan`).

use std::collections::BTreeMap;

use blockwork_rotator::plan::{Input, plan};
use blockwork_rotator::{Action, DEFAULT_ANNOTATION_PREFIX, Keys};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use crate::{Verdict, check};

/// Any bytes as a certificate PEM: an error or a JWK with a key type and its chain — never a
/// panic.
pub fn any_key_material_parses_to_a_key_or_an_error(input: &[u8]) -> Verdict {
    match blockwork_rotator::jwks::jwk(input, "kid") {
        Ok(jwk) => check(!jwk.kty.is_empty() && !jwk.x5c.is_empty(), || format!("a JWK without kty or x5c: {jwk:?}")),
        Err(_) => Ok(()),
    }
}

/// A TLS Secret marked as a source (annotation values `source` and `jwks`, anything) holding
/// `crt` and `key`, naming the target `target`.
pub fn source(source: &str, jwks: &str, crt: Vec<u8>, key: Vec<u8>) -> Secret {
    let prefix = DEFAULT_ANNOTATION_PREFIX;
    let annotations = BTreeMap::from([
        (format!("{prefix}/source-secret"), source.to_owned()),
        (format!("{prefix}/destination-secret-name"), "target".to_owned()),
        (format!("{prefix}/jwks"), jwks.to_owned()),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some("source".to_owned()),
            namespace: Some("fuzz".to_owned()),
            uid: Some("source-uid".to_owned()),
            resource_version: Some("1".to_owned()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(BTreeMap::from([("tls.crt".to_owned(), ByteString(crt)), ("tls.key".to_owned(), ByteString(key))])),
        ..Secret::default()
    }
}

/// The plan of any source is made without a panic; planning again after its write changes
/// nothing; and when the source's certificate is renewed to `renewed`, one rotation follows and
/// then nothing.
pub fn plans_any_source_and_rotates_once_per_change(source: &Secret, renewed: &[u8]) -> Verdict {
    let keys = Keys::default();
    let now = jiff::Timestamp::from_second(1_750_000_000).map_err(|e| e.to_string())?;
    let first = plan(&Input { keys: &keys, source, target: None, other_claim_active: false, now });
    let Some(mut target) = first.write else { return Ok(()) };
    target.metadata.resource_version = Some("2".to_owned());
    let again = plan(&Input { keys: &keys, source, target: Some(&target), other_claim_active: false, now });
    check(again.action == Action::Unchanged, || format!("planning again after the write changes something: {:?}", again.reasons))?;

    let mut renewed_source = source.clone();
    renewed_source.data.get_or_insert_default().insert("tls.crt".to_owned(), ByteString(renewed.to_vec()));
    let rotated = plan(&Input { keys: &keys, source: &renewed_source, target: Some(&target), other_claim_active: false, now });
    let Some(mut written) = rotated.write else { return Ok(()) };
    written.metadata.resource_version = Some("3".to_owned());
    let settled = plan(&Input { keys: &keys, source: &renewed_source, target: Some(&written), other_claim_active: false, now });
    check(settled.action == Action::Unchanged, || format!("a second plan after a rotation rotates again: {:?}", settled.reasons))
}
