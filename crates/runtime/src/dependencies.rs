//! Dependencies: the custom resources an object waits for. Each reconcile resolves them (all
//! Ready, or a message saying which one is waited for), and registers them in an index that the
//! dependency watches read, so that a change of a dependency reconciles its dependents at once
//! instead of at their next requeue.

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
}

impl<K: Resource<DynamicType = ()>> Default for Dependencies<K> {
    fn default() -> Self {
        Self { kinds: Mutex::default(), index: Arc::default() }
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
    /// The reverse map, to drop an object's old entries when its dependencies change.
    of_object: HashMap<ObjectRef<K>, HashSet<DependencyKey>>,
    watches: HashMap<WatchKey, tokio::task::JoinHandle<()>>,
    /// Feeds the controller's `reconcile_on` stream; `None` outside [`crate::run`] (a test
    /// driving [`crate::reconcile`] directly), where no watch is started.
    triggers: Option<UnboundedSender<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for DependencyIndex<K> {
    fn default() -> Self {
        Self { dependents: HashMap::new(), of_object: HashMap::new(), watches: HashMap::new(), triggers: None }
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
                Some(found) if !is_ready(&found) => return Ok(Err(format!("waiting for {dependency} to be Ready"))),
                Some(found) => resolved.push(found),
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
        let task = tokio::spawn(watch_dependencies(api, key.clone(), Arc::clone(&self.index), triggers));
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

/// Reports every change of a watched dependency (created, changed, deleted) to the objects
/// that depend on it. Ends when the controller stops listening.
async fn watch_dependencies<K: Resource<DynamicType = ()>>(
    api: Api<DynamicObject>,
    key: WatchKey,
    index: Arc<Mutex<DependencyIndex<K>>>,
    triggers: UnboundedSender<ObjectRef<K>>,
) {
    let changes = watcher(api, watcher::Config::default()).default_backoff().touched_objects();
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        let changed = match change {
            Ok(changed) => changed,
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
        let dependents: Vec<ObjectRef<K>> = index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dependents
            .get(&dependency)
            .map(|dependents| dependents.iter().cloned().collect())
            .unwrap_or_default();
        for dependent in dependents {
            if triggers.unbounded_send(dependent).is_err() {
                return;
            }
        }
    }
}

fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == READY && c["status"] == "True"))
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
