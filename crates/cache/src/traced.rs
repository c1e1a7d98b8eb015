//! The Cache controller's traces (`blockwork_runtime::trace`, ADR 0018): which watch event woke
//! each reconcile (the Cache's own, or a change of a child or of its TLS Secret), the span of the
//! reconcile, and its requeue.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube::Resource;
use kube::ResourceExt as _;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use blockwork_runtime::trace::{self, Cause, Triggers};

use crate::api::Cache;

/// The Caches' triggers, shared by the watches that note them and the reconciles that take them.
pub type CacheTriggers = Arc<Triggers<ObjectRef<Cache>>>;

/// `changes` of the Caches themselves, each noted as its Cache's trigger.
pub fn own(
    triggers: CacheTriggers,
    changes: impl Stream<Item = watcher::Result<Cache>> + Send + 'static,
) -> impl Stream<Item = watcher::Result<Cache>> + Send + 'static {
    changes.inspect(move |change| {
        if let Ok(cache) = change {
            triggers.note(&ObjectRef::from_obj(cache), Cause::Changed);
        }
    })
}

/// `changes` of a Cache's children, each noted as a trigger of the Cache that owns it.
pub fn children<K: Resource + Send + 'static>(
    triggers: CacheTriggers,
    changes: impl Stream<Item = watcher::Result<K>> + Send + 'static,
) -> impl Stream<Item = watcher::Result<K>> + Send + 'static {
    changes.inspect(move |change| {
        if let Ok(child) = change {
            let namespace = child.namespace().unwrap_or_default();
            for owner in child.owner_references().iter().filter(|o| o.kind == "Cache") {
                triggers.note(&ObjectRef::new(&owner.name).within(&namespace), Cause::Related);
            }
        }
    })
}

/// The span of a reconcile of `cache` starting now.
pub fn span(triggers: &CacheTriggers, cache: &Cache) -> tracing::Span {
    if !trace::enabled() {
        return tracing::Span::none();
    }
    let key = ObjectRef::from_obj(cache);
    let trigger = triggers.take(&key);
    let join = trace::join(cache.annotations(), triggers.settled(&key).as_deref());
    let span = trace::reconcile("cache", "Cache", &cache.namespace().unwrap_or_default(), &cache.name_any(), &trigger, &join);
    triggers.started(&key, trace::span_context(&span));
    span
}

/// `cache` is Ready, or failed for good: settled for its `traceparent` (later reconciles are
/// traces of their own, linked to it).
pub fn settled(triggers: &CacheTriggers, cache: &Cache) {
    if let Some(traceparent) = cache.annotations().get(trace::TRACEPARENT_ANNOTATION) {
        triggers.settle(&ObjectRef::from_obj(cache), traceparent);
    }
}

/// Looks at `cache` again `after`, for `cause`: noted for the next reconcile's span and recorded
/// on this one's.
pub fn requeue(triggers: &CacheTriggers, cache: &Cache, after: Duration, cause: Cause) -> Action {
    triggers.note_after(&ObjectRef::from_obj(cache), cause, after);
    trace::requeue(&tracing::Span::current(), after);
    Action::requeue(after)
}
