//! One scope's work queue and its workers: each trigger to a waiting worker at once (ADR 0010).

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::reflector::{self, ObjectRef};
use tokio::sync::Notify;
use tracing::{debug, warn};

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

/// Reconciles a source; when to look at it again: the resync interval, or sooner after a
/// conflict or a failure ([`Rotator::backoff`]).
async fn reconcile(rotator: &Rotator, key: &Key) -> Duration {
    let (namespace, name) = key;
    match rotator.reconcile(namespace, name).await {
        Ok(outcome) => {
            rotator.succeeded(key);
            let blocked = outcome.as_ref().and_then(|o| match &o.plan.action {
                Action::Blocked(blocked) => Some(rotator.blocked_requeue(blocked)),
                _ => None,
            });
            blocked.unwrap_or(RESYNC)
        }
        Err(error) => {
            rotator.metrics.reconciled("failed");
            rotator.metrics.error(error.metric_reason());
            let delay = rotator.backoff(key.clone(), matches!(error, Error::Conflict(_)));
            if matches!(error, Error::Conflict(_)) {
                debug!(namespace, source = name, ?delay, "{error}");
            } else {
                warn!(namespace, source = name, ?delay, error = %error, "reconcile failed");
            }
            delay
        }
    }
}
