//! Dependencies: the custom resources an object waits for. Each reconcile resolves them (all
//! Ready, or a message saying which one is waited for), and registers them in an index that the
//! dependency watches read, so that a change of a dependency reconciles its dependents at once
//! instead of at their next requeue. Only a change that concerns them: whether the dependency is
//! Ready (for its generation, not being deleted), or what the dependents' operator reads of it
//! (`ExternalResource::dependency_view`); its other status writes wake nobody.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{debug, warn};

use crate::error::Error;
use crate::resource::DependencyRef;
use crate::status::READY;

/// What the controller knows of dependencies: the kinds it discovered, which objects wait for
/// which dependency, and the watches that report their changes.
pub(crate) struct Dependencies<K: Resource<DynamicType = ()>> {
    /// Discovery results per (apiVersion, kind) of a dependency.
    kinds: Mutex<HashMap<(String, String), DependencyKind>>,
    /// Shared with the dependency watch tasks, which look up whom a change concerns.
    index: Arc<Mutex<DependencyIndex<K>>>,
    /// What the dependents' operator reads of a dependency.
    view: View,
}

/// What an operator reads of a dependency (`ExternalResource::dependency_view`).
pub(crate) type View = fn(&DynamicObject) -> serde_json::Value;

impl<K: Resource<DynamicType = ()>> Dependencies<K> {
    pub(crate) fn new(view: View) -> Self {
        Self { kinds: Mutex::default(), index: Arc::default(), view }
    }
}

#[derive(Clone, Debug)]
struct DependencyKind {
    resource: ApiResource,
    cluster_scoped: bool,
}

/// One dependency object, independent of the API version it was named with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DependencyKey {
    group: String,
    kind: String,
    /// `None` for cluster-scoped kinds.
    namespace: Option<String>,
    name: String,
}

/// What one dependency watch covers: a kind in one namespace (so that a controller limited to
/// some namespaces needs no cluster-wide RBAC on its dependencies), or a cluster-scoped kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    group: String,
    kind: String,
    namespace: Option<String>,
}

/// Which objects wait for which dependency, and the watches that report a dependency's changes
/// to the controller: without them a dependency deleted after its dependents became Ready would
/// go unnoticed until their next requeue, an hour later.
struct DependencyIndex<K: Resource<DynamicType = ()>> {
    dependents: HashMap<DependencyKey, HashSet<ObjectRef<K>>>,
    /// What the dependents were last told of each dependency: its readiness and what they read
    /// of it. A change that alters neither wakes nobody.
    told: HashMap<DependencyKey, Told>,
    /// The reverse map, to drop an object's old entries when its dependencies change.
    of_object: HashMap<ObjectRef<K>, HashSet<DependencyKey>>,
    watches: HashMap<WatchKey, tokio::task::JoinHandle<()>>,
    /// Feeds the controller's `reconcile_on` stream; `None` outside [`crate::run`] (a test
    /// driving [`crate::reconcile`] directly), where no watch is started.
    triggers: Option<UnboundedSender<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for DependencyIndex<K> {
    fn default() -> Self {
        Self { dependents: HashMap::new(), told: HashMap::new(), of_object: HashMap::new(), watches: HashMap::new(), triggers: None }
    }
}

impl<K: Resource<DynamicType = ()>> DependencyIndex<K> {
    fn register(&mut self, object: ObjectRef<K>, keys: HashSet<DependencyKey>) {
        self.unregister(&object);
        for key in &keys {
            self.dependents.entry(key.clone()).or_default().insert(object.clone());
        }
        if !keys.is_empty() {
            self.of_object.insert(object, keys);
        }
    }

    fn unregister(&mut self, object: &ObjectRef<K>) {
        for key in self.of_object.remove(object).unwrap_or_default() {
            if let Some(dependents) = self.dependents.get_mut(&key) {
                dependents.remove(object);
                if dependents.is_empty() {
                    self.dependents.remove(&key);
                }
            }
        }
    }

    /// The objects to wake now that `dependency` is as `now` says (`None`: it is gone): its
    /// dependents, when its readiness or what they read of it changed since they were last told.
    fn tell(&mut self, dependency: &DependencyKey, now: Option<Told>) -> Vec<ObjectRef<K>> {
        let changed = match now {
            None => {
                self.told.remove(dependency);
                true
            }
            Some(told) => self.told.insert(dependency.clone(), told.clone()).as_ref() != Some(&told),
        };
        match self.dependents.get(dependency).filter(|_| changed) {
            Some(dependents) => dependents.iter().cloned().collect(),
            None => Vec::new(),
        }
    }

    fn stop(&mut self) {
        self.triggers = None;
        for (_, watch) in self.watches.drain() {
            watch.abort();
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Dependencies<K> {
    /// From now on, a change of a dependency is sent to `triggers` (the controller's
    /// `reconcile_on` stream).
    pub(crate) fn start(&self, triggers: UnboundedSender<ObjectRef<K>>) {
        self.lock_index().triggers = Some(triggers);
    }

    /// Stops every dependency watch.
    pub(crate) fn stop(&self) {
        self.lock_index().stop();
    }

    /// The object is gone: its dependencies no longer concern it.
    pub(crate) fn forget(&self, object: &ObjectRef<K>) {
        self.lock_index().unregister(object);
    }

    fn lock_index(&self) -> std::sync::MutexGuard<'_, DependencyIndex<K>> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `Ok(Ok(objects))` when every dependency is Ready, `Ok(Err(message))` when waiting.
    ///
    /// Each dependency is registered, and its kind watched, before it is read: a change after the
    /// read then triggers this object again, and one before it is in what was read.
    pub(crate) async fn resolve(
        &self,
        client: &Client,
        controller: &'static str,
        object: &K,
        dependencies: Vec<DependencyRef>,
        namespace: &str,
    ) -> Result<Result<Vec<DynamicObject>, String>, Error> {
        let mut lookups = Vec::new();
        let mut keys = HashSet::new();
        let mut unserved = None;
        for dependency in dependencies {
            let Some(kind) = self.kind(client, &dependency).await? else {
                // Nothing to watch yet: the Pending requeue looks again.
                unserved.get_or_insert_with(|| format!("waiting for {dependency}: its kind is not served by the API server"));
                continue;
            };
            let dependency_namespace = (!kind.cluster_scoped).then(|| dependency.namespace.clone().unwrap_or_else(|| namespace.to_owned()));
            self.watch(client, controller, &kind, dependency_namespace.as_deref());
            keys.insert(DependencyKey {
                group: kind.resource.group.clone(),
                kind: kind.resource.kind.clone(),
                namespace: dependency_namespace.clone(),
                name: dependency.name.clone(),
            });
            lookups.push((dependency, kind, dependency_namespace));
        }
        self.lock_index().register(ObjectRef::from_obj(object), keys);
        if let Some(waiting) = unserved {
            return Ok(Err(waiting));
        }
        let mut resolved = Vec::new();
        for (dependency, kind, dependency_namespace) in lookups {
            let api: Api<DynamicObject> = match &dependency_namespace {
                Some(dependency_namespace) => Api::namespaced_with(client.clone(), dependency_namespace, &kind.resource),
                None => Api::all_with(client.clone(), &kind.resource),
            };
            match api.get_opt(&dependency.name).await? {
                None => return Ok(Err(format!("waiting for {dependency}: not found"))),
                Some(found) => match unready(&found) {
                    Some(why) => return Ok(Err(format!("waiting for {dependency} to be Ready: {why}"))),
                    None => resolved.push(found),
                },
            }
        }
        Ok(Ok(resolved))
    }

    /// Starts watching the dependency's kind (in its namespace) unless already watched.
    fn watch(&self, client: &Client, controller: &'static str, kind: &DependencyKind, namespace: Option<&str>) {
        let mut index = self.lock_index();
        let Some(triggers) = index.triggers.clone() else {
            return;
        };
        let key =
            WatchKey { group: kind.resource.group.clone(), kind: kind.resource.kind.clone(), namespace: namespace.map(str::to_owned) };
        if index.watches.contains_key(&key) {
            return;
        }
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(client.clone(), namespace, &kind.resource),
            None => Api::all_with(client.clone(), &kind.resource),
        };
        debug!(controller, kind = %kind.resource.kind, ?namespace, "watching dependencies");
        let task = tokio::spawn(watch_dependencies(api, key.clone(), Arc::clone(&self.index), self.view, triggers));
        index.watches.insert(key, task);
    }

    async fn kind(&self, client: &Client, dependency: &DependencyRef) -> Result<Option<DependencyKind>, Error> {
        let key = (dependency.api_version.clone(), dependency.kind.clone());
        if let Some(found) = self.kinds.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(Some(found.clone()));
        }
        let (group, version) = match dependency.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", dependency.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &dependency.kind);
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, capabilities)) => {
                let kind = DependencyKind { resource, cluster_scoped: capabilities.scope == Scope::Cluster };
                self.kinds.lock().unwrap_or_else(PoisonError::into_inner).insert(key, kind.clone());
                Ok(Some(kind))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

/// What a dependency's dependents were told of it.
#[derive(Clone, Debug, PartialEq)]
struct Told {
    /// [`unready`]'s verdict.
    unready: Option<String>,
    /// What the dependents' operator reads of it.
    view: serde_json::Value,
}

/// Reports every change of a watched dependency that concerns its dependents (created, deleted,
/// its readiness or what they read of it changed) to the objects that depend on it. Ends when the
/// controller stops listening.
async fn watch_dependencies<K: Resource<DynamicType = ()>>(
    api: Api<DynamicObject>,
    key: WatchKey,
    index: Arc<Mutex<DependencyIndex<K>>>,
    view: View,
    triggers: UnboundedSender<ObjectRef<K>>,
) {
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let (changed, gone) = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => (object, false),
            Ok(watcher::Event::Delete(object)) => (object, true),
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            // The backoff retries the watch; the dependents' own requeues cover the gap.
            Err(error) => {
                warn!(kind = %key.kind, %error, "dependency watch failed");
                continue;
            }
        };
        let dependency = DependencyKey {
            group: key.group.clone(),
            kind: key.kind.clone(),
            namespace: key.namespace.as_ref().and(changed.metadata.namespace.clone()),
            name: changed.name_any(),
        };
        let now = (!gone).then(|| Told { unready: unready(&changed), view: view(&changed) });
        let dependents = index.lock().unwrap_or_else(PoisonError::into_inner).tell(&dependency, now);
        for dependent in dependents {
            if triggers.unbounded_send(dependent).is_err() {
                return;
            }
        }
    }
}

/// Why a dependency found is not Ready, `None` when it is: Ready for its current generation (a
/// status written before its latest change describes the spec before it), and not being deleted
/// (a dependent that has not taken what it offers yet would start to use what is going away).
/// Said with the dependency's own words, its Ready condition's reason and message.
fn unready(object: &DynamicObject) -> Option<String> {
    if object.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".to_owned());
    }
    let status = &object.data["status"];
    let ready = status["conditions"].as_array().and_then(|conditions| conditions.iter().find(|c| c["type"] == READY));
    let text = |field: &str| ready.and_then(|c| c[field].as_str()).filter(|s| !s.is_empty());
    let said = match (text("reason"), text("message")) {
        (Some(reason), Some(message)) => format!("{reason}: {message}"),
        (Some(said), None) | (None, Some(said)) => said.to_owned(),
        (None, None) => "it has no Ready condition yet".to_owned(),
    };
    if ready.is_none_or(|c| c["status"] != "True") {
        return Some(said);
    }
    let observed = status["observedGeneration"].as_i64();
    match (object.metadata.generation, observed) {
        (Some(generation), Some(observed)) if observed < generation => {
            Some(format!("its controller has not applied its latest change yet (generation {generation}, observed {observed})"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn key(name: &str) -> DependencyKey {
        DependencyKey { group: "testing.blockwork.dev".into(), kind: "Thing".into(), namespace: Some("ns".into()), name: name.into() }
    }

    fn dependents(index: &DependencyIndex<ConfigMap>, name: &str) -> Vec<String> {
        let mut names: Vec<String> = index.dependents.get(&key(name)).into_iter().flatten().map(|r| r.name.clone()).collect();
        names.sort();
        names
    }

    fn dependency(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("an object")
    }

    #[test]
    fn a_dependency_is_ready_for_its_current_generation_and_while_it_is_not_being_deleted() {
        let ready =
            serde_json::json!({"type": "Ready", "status": "True", "reason": "Available", "message": "the external resource is ready"});
        let object = |generation: i64, observed: i64, deleted: bool| {
            let mut metadata = serde_json::json!({"name": "api", "generation": generation});
            if deleted {
                metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            dependency(serde_json::json!({"metadata": metadata, "status": {"observedGeneration": observed, "conditions": [ready]}}))
        };
        assert_eq!(unready(&object(2, 2, false)), None);
        let behind = unready(&object(3, 2, false)).expect("not ready");
        assert!(behind.contains("not applied its latest change yet (generation 3, observed 2)"), "{behind}");
        assert_eq!(unready(&object(2, 2, true)).as_deref(), Some("it is being deleted"));
    }

    #[test]
    fn a_dependency_that_is_not_ready_is_told_in_its_own_words() {
        let waiting = dependency(serde_json::json!({"metadata": {"name": "api"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "InProgress", "message": "waiting for ACM to issue api.example.com"}
        ]}}));
        assert_eq!(unready(&waiting).as_deref(), Some("InProgress: waiting for ACM to issue api.example.com"));
        let new = dependency(serde_json::json!({"metadata": {"name": "api"}}));
        assert_eq!(unready(&new).as_deref(), Some("it has no Ready condition yet"));
    }

    #[test]
    fn dependents_are_woken_when_the_dependency_s_readiness_or_what_they_read_of_it_changes_only() {
        let mut index = DependencyIndex::<ConfigMap>::default();
        index.register(ObjectRef::new("a").within("ns"), HashSet::from([key("db")]));
        let told = |unready: Option<&str>, arn: &str| Some(Told { unready: unready.map(str::to_owned), view: serde_json::json!(arn) });
        assert_eq!(index.tell(&key("db"), told(Some("InProgress"), "")).len(), 1, "first seen");
        assert!(index.tell(&key("db"), told(Some("InProgress"), "")).is_empty(), "a status write about its own work");
        assert_eq!(index.tell(&key("db"), told(None, "arn:1")).len(), 1, "Ready, with a value");
        assert!(index.tell(&key("db"), told(None, "arn:1")).is_empty());
        assert_eq!(index.tell(&key("db"), told(None, "arn:2")).len(), 1, "what the dependent reads changed");
        assert_eq!(index.tell(&key("db"), None).len(), 1, "gone");
        assert_eq!(index.tell(&key("db"), told(None, "arn:2")).len(), 1, "back");
        assert!(index.tell(&key("other"), told(None, "x")).is_empty(), "nobody depends on it");
    }

    #[test]
    fn dependency_index_follows_each_objects_current_dependencies() {
        let mut index = DependencyIndex::<ConfigMap>::default();
        let a = ObjectRef::new("a").within("ns");
        let b = ObjectRef::new("b").within("ns");
        index.register(a.clone(), HashSet::from([key("db"), key("net")]));
        index.register(b.clone(), HashSet::from([key("db")]));
        assert_eq!(dependents(&index, "db"), ["a", "b"]);
        // a no longer depends on net: a change of net must not wake it.
        index.register(a.clone(), HashSet::from([key("db")]));
        assert!(dependents(&index, "net").is_empty());
        assert!(!index.dependents.contains_key(&key("net")), "empty entries are dropped");
        // A deleted object is forgotten entirely.
        index.unregister(&a);
        index.register(b, HashSet::new());
        assert!(index.dependents.is_empty() && index.of_object.is_empty());
    }
}
