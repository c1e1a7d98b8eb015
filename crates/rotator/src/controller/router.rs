//! A scope's two watches routed into the cache, the store of sources and the work queue.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt as _;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;

use super::work::Work;
use super::{Meta, Rotator};
use crate::cache::{Key, Scope};
use crate::plan;

/// Which sources name which destination, per namespace: a change of any Secret that some source
/// names (a target, or a Secret in the way of one) triggers those sources. Bounded by the number
/// of sources.
#[derive(Debug, Default)]
struct Destinations {
    of_source: HashMap<(String, String), String>,
    sources: HashMap<(String, String), BTreeSet<String>>,
}

impl Destinations {
    /// Records `source`'s destination (`None`: not a source any more); returns the previous one.
    fn set(&mut self, namespace: &str, source: &str, destination: Option<String>) -> Option<String> {
        let key = (namespace.to_owned(), source.to_owned());
        let previous = match &destination {
            Some(d) => self.of_source.insert(key, d.clone()),
            None => self.of_source.remove(&key),
        };
        if let Some(old) = &previous {
            let old_key = (namespace.to_owned(), old.clone());
            if let Some(set) = self.sources.get_mut(&old_key) {
                set.remove(source);
                if set.is_empty() {
                    self.sources.remove(&old_key);
                }
            }
        }
        if let Some(d) = destination {
            self.sources.entry((namespace.to_owned(), d)).or_default().insert(source.to_owned());
        }
        previous
    }

    fn naming(&self, namespace: &str, destination: &str) -> Vec<String> {
        self.sources.get(&(namespace.to_owned(), destination.to_owned())).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    fn clear(&mut self) {
        self.of_source.clear();
        self.sources.clear();
    }
}

/// Which of a scope's two watches an event comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `kubernetes.io/tls` Secrets, in full.
    Tls,
    /// Every other Secret, metadata only.
    Other,
}

impl Kind {
    const BOTH: [Kind; 2] = [Kind::Tls, Kind::Other];

    fn index(self) -> usize {
        self as usize
    }
}

/// A (re)list in progress on one watch.
#[derive(Debug, Default)]
struct Listing {
    /// The watch's sources before it: those not listed again are gone.
    before: HashSet<Key>,
    /// What it put into the cache: the rest of the scope's entries are gone.
    kept: HashSet<Key>,
}

/// Routes a scope's two watches, one event at a time: the TLS Secrets the rotator works with
/// into the [`Cache`](crate::cache::Cache); sources into the store of sources the workers reconcile (stripped to
/// their identity); a change of a source, or of a Secret that sources name, to the work queue
/// (a reconcile of those sources); deletions of sources to [`Rotator::source_deleted`] and to the other sources naming the same
/// target (which may take it over). Reconciles wait while the TLS watch (re)lists, so that they
/// never plan from a half-listed cache; the metadata watch's list does not hold them up (what it
/// brings is read, never cached).
pub(super) struct Router {
    rotator: Arc<Rotator>,
    scope: Scope,
    /// Per watch ([`Kind::index`]): its sources, and which destination each names.
    sources: [HashSet<Key>; 2],
    destinations: [Destinations; 2],
    listings: [Option<Listing>; 2],
    /// Whether the TLS watch has listed once.
    tls_listed: bool,
    /// Sources to reconcile once the TLS watch has listed.
    held: BTreeSet<Key>,
    store: Writer<Meta>,
    work: Arc<Work>,
    deleted: mpsc::UnboundedSender<Meta>,
}

impl Router {
    pub(super) fn new(
        rotator: Arc<Rotator>,
        scope: Scope,
        store: Writer<Meta>,
        work: Arc<Work>,
        deleted: mpsc::UnboundedSender<Meta>,
    ) -> Self {
        Self {
            rotator,
            scope,
            sources: Default::default(),
            destinations: Default::default(),
            listings: Default::default(),
            tls_listed: false,
            held: BTreeSet::new(),
            store,
            work,
            deleted,
        }
    }

    pub(super) fn route(&mut self, kind: Kind, event: Event<Secret>) {
        match event {
            Event::Init => self.list_started(kind),
            Event::InitApply(secret) | Event::Apply(secret) => self.applied(kind, secret),
            Event::InitDone => self.list_done(kind),
            Event::Delete(secret) => self.deleted(kind, secret),
        }
    }

    fn applied(&mut self, kind: Kind, secret: Secret) {
        let Some(namespace) = secret.namespace() else {
            return;
        };
        let key = (namespace, secret.name_any());
        let is_source = self.rotator.keys.is_source(secret.annotations());
        let destination = self.destination(&secret, is_source);
        let previous = self.destinations[kind.index()].set(&key.0, &key.1, destination.clone());
        let identity = identity(&secret.metadata);
        let resource_version = secret.resource_version();
        if !is_source && let Err(invalid) = self.rotator.keys.check(secret.annotations()) {
            // A source's annotations are checked by its reconcile, which blocks it.
            self.rotator.invalid_annotation(&secret, &invalid);
        }
        // The cache first: the reconciles triggered below read this version.
        if kind == Kind::Tls {
            if is_source || self.is_named(&key) || plan::labelled_as_target(secret.labels()) {
                if let Some(listing) = &mut self.listings[Kind::Tls.index()] {
                    listing.kept.insert(key.clone());
                }
                self.rotator.cache().put(secret);
            } else {
                self.rotator.cache().remove(&key);
            }
        }
        if is_source {
            self.sources[kind.index()].insert(key.clone());
            self.store.apply_watcher_event(&Event::Apply(identity));
        } else if self.sources[kind.index()].remove(&key) {
            // A Secret that stops being a source leaves the store like a deleted one.
            self.forget_source(kind, identity);
        }
        self.released(&key.0, previous, destination.as_ref());
        self.named_secret_changed(&key, resource_version.as_deref(), false);
        if is_source {
            self.trigger(key);
        }
    }

    fn deleted(&mut self, kind: Kind, secret: Secret) {
        let Some(namespace) = secret.namespace() else {
            return;
        };
        let key = (namespace, secret.name_any());
        self.named_secret_changed(&key, None, true);
        let previous = self.destinations[kind.index()].set(&key.0, &key.1, None);
        self.released(&key.0, previous, None);
        if kind == Kind::Tls {
            self.rotator.cache().remove(&key);
        }
        if self.sources[kind.index()].remove(&key) || self.rotator.keys.is_source(secret.annotations()) {
            self.forget_source(kind, identity(&secret.metadata));
            let _ = self.deleted.unbounded_send(Meta { metadata: secret.metadata, ..Meta::default() });
        }
    }

    fn list_started(&mut self, kind: Kind) {
        let before = std::mem::take(&mut self.sources[kind.index()]);
        self.listings[kind.index()] = Some(Listing { before, kept: HashSet::new() });
        self.destinations[kind.index()].clear();
        if kind == Kind::Tls {
            self.rotator.cache().listing(&self.scope);
        }
    }

    fn list_done(&mut self, kind: Kind) {
        let Some(listing) = self.listings[kind.index()].take() else {
            return;
        };
        let gone: Vec<Key> = listing.before.difference(&self.sources[kind.index()]).cloned().collect();
        for (namespace, name) in gone {
            let metadata = ObjectMeta { name: Some(name), namespace: Some(namespace), ..ObjectMeta::default() };
            self.forget_source(kind, Meta { metadata, ..Meta::default() });
        }
        if kind == Kind::Tls {
            self.rotator.cache().listed(self.scope.clone(), &listing.kept);
            self.tls_listed = true;
        }
        if self.reconciles_may_run() {
            for key in std::mem::take(&mut self.held) {
                self.trigger(key);
            }
        }
    }

    /// Removes a source from the store of sources, unless the other watch has a source of
    /// that name (deleted and created again with another type).
    fn forget_source(&mut self, kind: Kind, identity: Meta) {
        let other = Kind::BOTH[1 - kind.index()];
        let key = (identity.namespace().unwrap_or_default(), identity.name_any());
        if !self.sources[other.index()].contains(&key) {
            self.store.apply_watcher_event(&Event::Delete(identity));
        }
    }

    /// The destination a source names (trimmed, non-empty).
    fn destination(&self, secret: &Secret, is_source: bool) -> Option<String> {
        if !is_source {
            return None;
        }
        secret.annotations().get(&self.rotator.keys.destination).map(|d| d.trim().to_owned()).filter(|d| !d.is_empty())
    }

    fn naming(&self, (namespace, name): &Key) -> Vec<String> {
        let mut sources = self.destinations[0].naming(namespace, name);
        sources.extend(self.destinations[1].naming(namespace, name));
        sources
    }

    fn is_named(&self, key: &Key) -> bool {
        !self.naming(key).is_empty()
    }

    /// A source let go of `previous` (it names another destination, or none): whoever else
    /// names it may take it over now.
    fn released(&mut self, namespace: &str, previous: Option<String>, now: Option<&String>) {
        let Some(old) = previous.filter(|old| Some(old) != now) else {
            return;
        };
        let key = (namespace.to_owned(), old);
        let others = self.naming(&key);
        if others.is_empty() {
            // No source rotates that target any more: free its metric series for live ones.
            self.rotator.metrics.forget(&key.0, &key.1);
        }
        for other in others {
            self.trigger((key.0.clone(), other));
        }
    }

    /// A Secret changed that sources name as their target: reconcile them (unless the change is
    /// the rotator's own last write).
    fn named_secret_changed(&mut self, key: &Key, resource_version: Option<&str>, deleted: bool) {
        let sources = self.naming(key);
        if sources.is_empty() {
            return;
        }
        if deleted {
            self.rotator.forget_written(&key.0, &key.1);
        } else if self.rotator.is_own_write(&key.0, &key.1, resource_version) {
            return;
        }
        for source in sources {
            self.trigger((key.0.clone(), source));
        }
    }

    fn reconciles_may_run(&self) -> bool {
        self.tls_listed && self.listings[Kind::Tls.index()].is_none()
    }

    fn trigger(&mut self, key: Key) {
        if self.reconciles_may_run() {
            self.work.add(key);
        } else {
            self.held.insert(key);
        }
    }
}

/// What the store of sources keeps of a source.
fn identity(metadata: &ObjectMeta) -> Meta {
    Meta {
        metadata: ObjectMeta {
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            resource_version: metadata.resource_version.clone(),
            ..ObjectMeta::default()
        },
        ..Meta::default()
    }
}

/// A metadata-only event as a Secret event (with metadata only), to route both watches alike.
pub(super) fn with_metadata_only(event: Event<Meta>) -> Event<Secret> {
    let secret = |meta: Meta| Secret { metadata: meta.metadata, ..Secret::default() };
    match event {
        Event::Apply(meta) => Event::Apply(secret(meta)),
        Event::Delete(meta) => Event::Delete(secret(meta)),
        Event::Init => Event::Init,
        Event::InitApply(meta) => Event::InitApply(secret(meta)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kube::runtime::reflector::{self, ObjectRef};

    use super::*;
    use crate::config::{Config, Keys};
    use crate::metrics::Metrics;

    #[test]
    fn destinations_follow_sources_and_forget_them() {
        let mut index = Destinations::default();
        assert_eq!(index.set("ns", "a", Some("t".into())), None);
        index.set("ns", "b", Some("t".into()));
        index.set("other", "c", Some("t".into()));
        assert_eq!(index.naming("ns", "t"), ["a", "b"]);
        assert_eq!(index.set("ns", "a", Some("u".into())).as_deref(), Some("t"));
        assert_eq!(index.naming("ns", "t"), ["b"]);
        assert_eq!(index.naming("ns", "u"), ["a"]);
        index.set("ns", "b", None);
        assert!(index.naming("ns", "t").is_empty());
        assert!(!index.sources.contains_key(&("ns".to_owned(), "t".to_owned())), "no empty sets left behind");
        index.clear();
        assert!(index.naming("other", "t").is_empty());
    }

    /// A router of the namespace `ns` whose rotator has a client that is never called.
    struct Routed {
        router: Router,
        rotator: Arc<Rotator>,
        work: Arc<Work>,
        store: reflector::Store<Meta>,
    }

    impl Routed {
        fn new() -> Self {
            let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))).expect("a client");
            let config = Config::new(&crate::RotatorArgs::default(), &[], 1).expect("valid");
            let mut registry = prometheus_client::registry::Registry::default();
            let rotator = Arc::new(Rotator::new(client, &config, Metrics::register(&mut registry)));
            let (store, writer) = reflector::store::<Meta>();
            let work = Arc::new(Work::default());
            let (deleted, _) = mpsc::unbounded();
            Self { router: Router::new(Arc::clone(&rotator), Some("ns".into()), writer, Arc::clone(&work), deleted), rotator, work, store }
        }

        fn list(&mut self, kind: Kind, secrets: Vec<Secret>) {
            self.router.route(kind, Event::Init);
            for secret in secrets {
                self.router.route(kind, Event::InitApply(secret));
            }
            self.router.route(kind, Event::InitDone);
        }

        /// The sources queued, each then reconciled (so that the next trigger queues it again).
        fn triggered(&mut self) -> Vec<String> {
            let mut queue = self.work.queue();
            let keys: Vec<Key> = std::iter::from_fn(|| queue.next()).collect();
            keys.into_iter()
                .map(|key| {
                    queue.done(&key);
                    key.1
                })
                .collect()
        }

        fn cached(&self, name: &str) -> bool {
            self.rotator.cache().get("ns", name).is_some()
        }

        fn in_store(&self, name: &str) -> bool {
            self.store.get(&ObjectRef::new(name).within("ns")).is_some()
        }
    }

    fn secret(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Secret {
        let map = |pairs: &[(&str, &str)]| Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some("1".into()),
                annotations: map(annotations),
                labels: map(labels),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    fn source(name: &str, target: &str) -> Secret {
        let keys = Keys::default();
        secret(name, &[(&keys.source, "true"), (&keys.destination, target)], &[])
    }

    #[tokio::test]
    async fn reconciles_wait_until_the_tls_watch_has_listed() {
        let mut routed = Routed::new();
        routed.router.route(Kind::Tls, Event::Init);
        routed.router.route(Kind::Tls, Event::InitApply(source("a", "t")));
        routed.router.route(Kind::Other, Event::Init);
        routed.router.route(Kind::Other, Event::InitApply(source("b", "u")));
        assert!(routed.triggered().is_empty(), "the cache is half listed");
        assert!(routed.in_store("a") && routed.in_store("b"));
        assert!(!routed.rotator.cache().is_consistent("ns"));
        routed.router.route(Kind::Tls, Event::InitDone);
        assert_eq!(routed.triggered(), ["a", "b"]);
        assert!(routed.rotator.cache().is_consistent("ns"));
        routed.router.route(Kind::Other, Event::InitApply(source("c", "v")));
        assert_eq!(routed.triggered(), ["c"], "the metadata watch's list holds nothing up");
        routed.router.route(Kind::Other, Event::InitDone);
        routed.router.route(Kind::Tls, Event::Apply(source("a", "t")));
        assert_eq!(routed.triggered(), ["a"], "afterwards each change at once");
    }

    #[tokio::test]
    async fn the_cache_keeps_sources_the_secrets_they_name_and_the_rotators_targets_only() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        let managed = [(plan::MANAGED_BY_LABEL, blockwork_runtime::MANAGED_BY)];
        routed.list(Kind::Tls, vec![source("a", "t"), secret("t", &[], &[]), secret("orphan", &[], &managed), secret("web", &[], &[])]);
        assert!(routed.cached("a") && routed.cached("t") && routed.cached("orphan"));
        assert!(!routed.cached("web"), "an unrelated TLS Secret streams past");

        // The source names another target: the old one is dropped at its next event.
        routed.router.route(Kind::Tls, Event::Apply(source("a", "t2")));
        routed.router.route(Kind::Tls, Event::Apply(secret("t", &[], &[])));
        assert!(!routed.cached("t"));
        routed.router.route(Kind::Tls, Event::Delete(secret("orphan", &[], &managed)));
        assert!(!routed.cached("orphan"));
    }

    #[tokio::test]
    async fn a_relist_forgets_what_it_no_longer_lists_and_holds_reconciles_until_it_is_done() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        routed.list(Kind::Tls, vec![source("a", "t"), source("b", "u"), secret("u", &[], &[])]);
        routed.triggered();

        routed.router.route(Kind::Tls, Event::Init);
        routed.router.route(Kind::Tls, Event::InitApply(source("a", "t")));
        assert!(!routed.rotator.cache().is_consistent("ns"), "half listed");
        assert!(routed.triggered().is_empty(), "held while listing");
        routed.router.route(Kind::Tls, Event::InitDone);
        assert_eq!(routed.triggered(), ["a"]);
        assert!(routed.in_store("a") && !routed.in_store("b"), "b was deleted while the watch was away");
        assert!(!routed.cached("b") && !routed.cached("u"));
        assert!(routed.rotator.cache().is_consistent("ns"));
    }

    #[tokio::test]
    async fn a_change_of_a_named_secret_reconciles_its_sources_unless_it_is_the_rotators_own_write() {
        let mut routed = Routed::new();
        routed.list(Kind::Other, vec![]);
        routed.list(Kind::Tls, vec![source("a", "t"), source("b", "t")]);
        routed.triggered();
        routed.router.route(Kind::Other, Event::Apply(secret("t", &[], &[])));
        assert_eq!(routed.triggered(), ["a", "b"], "a Secret in the way, of any type");

        routed.rotator.written.lock().expect("not poisoned").insert(("ns".into(), "t".into()), "1".into());
        routed.router.route(Kind::Tls, Event::Apply(secret("t", &[], &[])));
        assert!(routed.triggered().is_empty(), "the rotator's own write");
    }
}
