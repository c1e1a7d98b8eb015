//! Pure: what a Cache cannot be built from or run with, found on the object and on what it
//! references. The schema rejects what the object alone shows; this module finds what it
//! cannot: a Secret that does not exist or lacks a key, and annotations no controller acts on.

use std::collections::BTreeMap;

use blockwork_runtime::policy::{self, AnnotationError, PAUSED_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION};
use k8s_openapi::api::core::v1::Secret;

use crate::api::{Cache, HIGH_AVAILABILITY_ANNOTATION};
use crate::shape::{Topology, topology};

/// The `blockwork.dev/` annotations the Cache controller reads.
/// (`reconcile-requested-at`: any value; its change reconciles the Cache at once, and the
/// status records it in `lastHandledReconcileAt`.)
pub const CACHE_ANNOTATIONS: &[&str] = &[PAUSED_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION];

/// Why the controller leaves a Cache's objects as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// `blockwork.dev/paused: "true"`.
    Paused,
    /// An annotation with a value (or a key) nobody acts on; held as if paused, since acting on
    /// it might do what the user meant to prevent.
    InvalidAnnotation(AnnotationError),
}

/// Whether the annotations hold the Cache, by the rule every Blockwork annotation follows
/// (`blockwork_runtime::policy`).
pub fn hold(annotations: &BTreeMap<String, String>) -> Option<Hold> {
    let checked = policy::paused(annotations).and_then(|paused| {
        policy::unknown_annotation(annotations, policy::PREFIX, CACHE_ANNOTATIONS)?;
        if let Some(value) = annotations.get(HIGH_AVAILABILITY_ANNOTATION) {
            return Err(AnnotationError::invalid(
                HIGH_AVAILABILITY_ANNOTATION,
                value,
                "no such annotation on a v1beta1 Cache (the conversion writes it while the Cache is read as v1alpha1): set spec.highAvailability",
            ));
        }
        Ok(paused)
    });
    match checked {
        Ok(false) => None,
        Ok(true) => Some(Hold::Paused),
        Err(invalid) => Some(Hold::InvalidAnnotation(invalid)),
    }
}

/// A referenced object the Cache's pods cannot start without.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    #[error("the TLS Secret {0} does not exist in the Cache's namespace: the pods cannot start until it does")]
    SecretNotFound(String),
    #[error("the TLS Secret {name} has no {}: the pods cannot start until it does", missing.join(", "))]
    SecretIncomplete { name: String, missing: Vec<&'static str> },
}

impl Unresolved {
    /// The condition and event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SecretNotFound(_) => "TLSSecretNotFound",
            Self::SecretIncomplete { .. } => "TLSSecretIncomplete",
        }
    }
}

/// The Secret the pods mount, if TLS is on.
pub fn tls_secret_name(cache: &Cache) -> Option<&str> {
    cache.spec.tls.as_ref().filter(|t| t.enabled).and_then(|t| t.secret_name.as_deref())
}

/// Whether the TLS Secret (`secret`, as read; `None` if it does not exist) has every key the
/// rendered configuration reads: `tls.crt` and `tls.key`, and `ca.crt` for replication.
pub fn check_tls_secret(cache: &Cache, secret: Option<&Secret>) -> Result<(), Unresolved> {
    let Some(name) = tls_secret_name(cache) else {
        return Ok(());
    };
    let Some(secret) = secret else {
        return Err(Unresolved::SecretNotFound(name.to_owned()));
    };
    let mut needed = vec!["tls.crt", "tls.key"];
    if topology(cache) != Topology::Standalone {
        needed.push("ca.crt");
    }
    let has = |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).is_some_and(|v| !v.0.is_empty());
    let missing: Vec<&'static str> = needed.into_iter().filter(|key| !has(key)).collect();
    if missing.is_empty() { Ok(()) } else { Err(Unresolved::SecretIncomplete { name: name.to_owned(), missing }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};
    use k8s_openapi::ByteString;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn cache(tls: Option<&str>, replicated: bool) -> Cache {
        Cache::new(
            "c",
            CacheSpec {
                engine: Engine::Redis,
                memory: "64Mi".into(),
                replicas: 3,
                eviction_policy: EvictionPolicy::AllkeysLru,
                access: None,
                tls: tls.map(|name| Tls { enabled: true, secret_name: Some(name.into()) }),
                high_availability: replicated.then_some(HighAvailability { enabled: true, auto_failover: true }),
            },
        )
    }

    fn secret(keys: &[&str]) -> Secret {
        Secret { data: Some(keys.iter().map(|k| ((*k).to_owned(), ByteString(b"x".to_vec()))).collect()), ..Secret::default() }
    }

    #[test]
    fn no_annotations_hold_nothing() {
        assert_eq!(hold(&annotations(&[("example.com/other", "x")])), None);
        assert_eq!(hold(&annotations(&[(PAUSED_ANNOTATION, "FALSE")])), None);
    }

    #[test]
    fn paused_holds_the_cache() {
        assert_eq!(hold(&annotations(&[(PAUSED_ANNOTATION, "True")])), Some(Hold::Paused));
    }

    #[test]
    fn an_invalid_pause_value_holds_the_cache_as_an_invalid_annotation() {
        let Some(Hold::InvalidAnnotation(error)) = hold(&annotations(&[(PAUSED_ANNOTATION, "yes")])) else { unreachable!("held") };
        assert!(error.to_string().contains("true or false"), "{error}");
    }

    #[test]
    fn policies_the_cache_does_not_have_are_invalid_annotations_naming_the_one_it_reads() {
        let Some(Hold::InvalidAnnotation(error)) = hold(&annotations(&[("blockwork.dev/deletion-policy", "Orphan")])) else {
            unreachable!("held")
        };
        assert!(error.expected.contains(PAUSED_ANNOTATION), "{error}");
    }

    #[test]
    fn the_conversion_s_annotation_on_a_stored_cache_is_invalid() {
        let held = hold(&annotations(&[(HIGH_AVAILABILITY_ANNOTATION, r#"{"enabled":true}"#)]));
        assert!(matches!(held, Some(Hold::InvalidAnnotation(e)) if e.expected.contains("spec.highAvailability")));
    }

    #[test]
    fn without_tls_there_is_nothing_to_resolve() {
        assert_eq!(check_tls_secret(&cache(None, false), None), Ok(()));
    }

    #[test]
    fn a_missing_tls_secret_is_named() {
        let error = check_tls_secret(&cache(Some("tls"), false), None).expect_err("missing");
        assert_eq!((error.reason(), error.to_string().contains("tls does not exist")), ("TLSSecretNotFound", true));
    }

    #[test]
    fn a_tls_secret_without_its_key_is_incomplete() {
        let error = check_tls_secret(&cache(Some("tls"), false), Some(&secret(&["tls.crt"]))).expect_err("no key");
        assert_eq!(error, Unresolved::SecretIncomplete { name: "tls".into(), missing: vec!["tls.key"] });
        assert_eq!(check_tls_secret(&cache(Some("tls"), false), Some(&secret(&["tls.crt", "tls.key"]))), Ok(()));
    }

    #[test]
    fn replication_over_tls_also_needs_the_ca() {
        let error = check_tls_secret(&cache(Some("tls"), true), Some(&secret(&["tls.crt", "tls.key"]))).expect_err("no ca");
        assert_eq!(error, Unresolved::SecretIncomplete { name: "tls".into(), missing: vec!["ca.crt"] });
    }
}
