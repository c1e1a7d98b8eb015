//! One scope's work queue and its workers: each trigger to a waiting worker at once (ADR 0010).

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt as _;
use kube::runtime::reflector::{self, ObjectRef};
use tokio::sync::Notify;
use tracing::{Instrument as _, debug, warn};

use blockwork_runtime::trace::{self, Cause};

use super::{Error, Meta, RESYNC, Rotator};
use crate::cache::Key;
use crate::plan::Action;
use crate::queue::Queue;

/// One scope's [`Queue`] of sources, and the wakers of its workers and its clock. Triggers are
/// handed to a waiting worker at once, without a timer in between (ADR 0010).
#[derive(Debug, Default)]
pub(super) struct Work {
    queue: Mutex<Queue<Key>>,
    /// A key was queued: wakes a worker.
    queued: Notify,
    /// The earliest timer changed: wakes the clock.
    rearmed: Notify,
}

impl Work {
    pub(super) fn queue(&self) -> MutexGuard<'_, Queue<Key>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn add(&self, key: Key) {
        if self.queue().add(key) {
            self.queued.notify_one();
        }
    }

    /// The next source to reconcile, once there is one.
    async fn next(&self) -> Key {
        loop {
            let queued = self.queued.notified();
            let mut queued = std::pin::pin!(queued);
            queued.as_mut().enable();
            if let Some(key) = self.queue().next() {
                return key;
            }
            queued.await;
        }
    }

    /// The reconcile of `key` ended; `requeue`: when to look at it again (`None`: it is no
    /// source, forget it).
    fn done(&self, key: &Key, requeue: Option<Duration>) {
        let mut queue = self.queue();
        let rearm = match requeue {
            Some(delay) => queue.add_at(key.clone(), Instant::now() + delay),
            None => {
                queue.forget_timer(key);
                false
            }
        };
        let queued = queue.done(key);
        drop(queue);
        if rearm {
            self.rearmed.notify_one();
        }
        if queued {
            self.queued.notify_one();
        }
    }

    /// Triggers each source when its timer is due; runs until dropped.
    pub(super) async fn clock(&self) {
        loop {
            let rearmed = self.rearmed.notified();
            let mut rearmed = std::pin::pin!(rearmed);
            rearmed.as_mut().enable();
            let deadline = self.queue().next_deadline();
            match deadline {
                Some(deadline) => {
                    let _ = futures::future::select(rearmed, std::pin::pin!(tokio::time::sleep_until(deadline.into()))).await;
                }
                None => rearmed.await,
            }
            let due = self.queue().fire(Instant::now());
            for _ in 0..due {
                self.queued.notify_one();
            }
        }
    }

    /// A worker: reconciles one source at a time until `shutdown`, which lets the reconcile in
    /// progress finish and starts no other (what is queued is listed again at the next start).
    pub(super) async fn worker(&self, rotator: &Rotator, sources: &reflector::Store<Meta>, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let key = tokio::select! {
                biased;
                () = &mut shutdown => return,
                key = self.next() => key,
            };
            let is_source = sources.get(&ObjectRef::new(&key.1).within(&key.0)).is_some();
            let requeue = if is_source { Some(reconcile(rotator, &key).await) } else { None };
            self.done(&key, requeue);
        }
    }
}

/// Reconciles a source, in a span of its own (`blockwork_runtime::trace`); when to look at it
/// again: the resync interval, or sooner after a conflict or a failure ([`Rotator::backoff`]).
async fn reconcile(rotator: &Rotator, key: &Key) -> Duration {
    let (namespace, name) = key;
    let span = span(rotator, key);
    let result = rotator.reconcile(namespace, name).instrument(span.clone()).await;
    let (delay, cause) = match result {
        Ok(outcome) => {
            rotator.succeeded(key);
            let action = outcome.as_ref().map(|o| &o.plan.action);
            trace::outcome(&span, action.map_or("not a source", Action::result), None);
            if action.is_some_and(|a| !matches!(a, Action::Blocked(_)))
                && let Some(traceparent) =
                    rotator.cache().get(namespace, name).and_then(|s| s.annotations().get(trace::TRACEPARENT_ANNOTATION).cloned())
            {
                rotator.triggers.settle(key, &traceparent);
            }
            let blocked = action.and_then(|action| match action {
                Action::Blocked(blocked) => Some(rotator.blocked_requeue(blocked)),
                _ => None,
            });
            (blocked.unwrap_or(RESYNC), Cause::Requeued)
        }
        Err(error) => {
            rotator.metrics.reconciled("failed");
            rotator.metrics.error(error.metric_reason());
            trace::outcome(&span, error.metric_reason(), Some(&error.to_string()));
            let delay = rotator.backoff(key.clone(), matches!(error, Error::Conflict(_)));
            if matches!(error, Error::Conflict(_)) {
                debug!(namespace, source = name, ?delay, "{error}");
            } else {
                warn!(namespace, source = name, ?delay, error = %error, "reconcile failed");
            }
            (delay, Cause::RetryAfterError)
        }
    };
    trace::requeue(&span, delay);
    rotator.triggers.note_after(key, cause, delay);
    delay
}

/// The span of a reconcile of the source `key` starting now, joined to the `traceparent` of the
/// source as the cache holds it.
fn span(rotator: &Rotator, key: &Key) -> tracing::Span {
    if !trace::enabled() {
        return tracing::Span::none();
    }
    let trigger = rotator.triggers.take(key);
    let source = rotator.cache().get(&key.0, &key.1);
    let annotations = source.as_ref().map(|s| s.annotations().clone()).unwrap_or_default();
    let join = trace::join(&annotations, rotator.triggers.settled(key).as_deref());
    let span = trace::reconcile(crate::config::CONTROLLER_NAME, "Secret", &key.0, &key.1, &trigger, &join);
    rotator.triggers.started(key, trace::span_context(&span));
    span
}
