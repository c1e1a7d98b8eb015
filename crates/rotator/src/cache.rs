//! The Secrets the rotator keeps in full, so that a rotation reads nothing before its one write.
//!
//! Only `kubernetes.io/tls` Secrets, and of those only the few a rotation needs: sources, the
//! Secrets sources name as their target, and the rotator's own targets (its managed-by label).
//! They arrive in full through the watch of TLS Secrets; every other Secret streams past (its
//! metadata only, through the second watch) and is not kept.
//!
//! The cache is written by that watch alone, in the order of its events, so it always shows
//! the cluster as it was at one point of its history: a cached target never reflects a newer
//! source than the cached source. That is what makes planning from it safe — the plan's write
//! carries the cached target's resourceVersion, so a cache that is behind the API server costs
//! a 409 Conflict and a fresh read, never a wrong rotation. While the watch (re)lists, the
//! cache mixes old and new entries and is not used (see [`Cache::is_consistent`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt as _;

/// Namespace and name.
pub type Key = (String, String);

pub use blockwork_runtime::namespaces::Scope;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Cache {
    secrets: HashMap<Key, Arc<Secret>>,
    /// Scopes whose TLS watch has listed and is not listing again.
    consistent: HashSet<Scope>,
}

impl Cache {
    /// Keeps `secret` (without its managed fields, which the rotator never reads).
    pub fn put(&mut self, mut secret: Secret) {
        let Some(namespace) = secret.namespace() else { return };
        secret.metadata.managed_fields = None;
        self.secrets.insert((namespace, secret.name_any()), Arc::new(secret));
    }

    pub fn remove(&mut self, key: &Key) {
        self.secrets.remove(key);
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The watch of `scope` starts a (re)list: its entries are a mix of old and new until
    /// [`Cache::listed`].
    pub fn listing(&mut self, scope: &Scope) {
        self.consistent.remove(scope);
    }

    /// The watch of `scope` has listed: `kept` are the entries it put meanwhile; the others of
    /// the scope are gone (deleted while the watch was away, or no longer needed).
    pub fn listed(&mut self, scope: Scope, kept: &HashSet<Key>) {
        self.secrets.retain(|key, _| !in_scope(&scope, &key.0) || kept.contains(key));
        self.consistent.insert(scope);
    }

    /// Whether the entries of `namespace` form one consistent view: its watch has listed and is
    /// not listing again. A rotator without watches (a second replica in tests) never is.
    pub fn is_consistent(&self, namespace: &str) -> bool {
        self.consistent.contains(&None) || self.consistent.contains(&Some(namespace.to_owned()))
    }
}

fn in_scope(scope: &Scope, namespace: &str) -> bool {
    scope.as_deref().is_none_or(|ns| ns == namespace)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn secret(namespace: &str, name: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    fn key(namespace: &str, name: &str) -> Key {
        (namespace.to_owned(), name.to_owned())
    }

    #[test]
    fn keeps_secrets_without_their_managed_fields() {
        let mut cache = Cache::default();
        cache.put(secret("ns", "a"));
        let kept = cache.get("ns", "a").unwrap();
        assert_eq!(kept.metadata.managed_fields, None);
        assert!(cache.get("other", "a").is_none());
        cache.remove(&key("ns", "a"));
        assert!(cache.get("ns", "a").is_none());
    }

    #[test]
    fn is_consistent_only_between_the_end_of_a_list_and_the_start_of_the_next() {
        let mut cache = Cache::default();
        assert!(!cache.is_consistent("ns"), "before the first list");
        cache.listed(Some("ns".into()), &HashSet::new());
        assert!(cache.is_consistent("ns"));
        assert!(!cache.is_consistent("other"), "another namespace has its own watch");
        cache.listing(&Some("ns".into()));
        assert!(!cache.is_consistent("ns"), "while relisting");
        cache.listed(None, &HashSet::new());
        assert!(cache.is_consistent("other"), "a cluster-wide watch covers every namespace");
    }

    #[test]
    fn a_list_drops_the_entries_of_its_scope_it_did_not_keep() {
        let mut cache = Cache::default();
        for (ns, name) in [("a", "kept"), ("a", "gone"), ("b", "elsewhere")] {
            cache.put(secret(ns, name));
        }
        cache.listing(&Some("a".into()));
        cache.listed(Some("a".into()), &HashSet::from([key("a", "kept")]));
        assert!(cache.get("a", "kept").is_some());
        assert!(cache.get("a", "gone").is_none());
        assert!(cache.get("b", "elsewhere").is_some(), "another scope's entries stay");
        cache.listed(None, &HashSet::new());
        assert!(cache.get("b", "elsewhere").is_none(), "a cluster-wide list covers every namespace");
    }
}
