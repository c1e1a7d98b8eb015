//! Why a reconcile runs, and how long it waited: what kube-runtime's scheduler does not tell a
//! reconciler (kube-rs #457). Each trigger is noted as it is handed to the work queue (a watch
//! event, a dependency's change, a wake-up, a requeue or a retry after an error); the reconcile
//! takes it when it starts. Like the queue, which keeps one request per object and runs it at
//! the earliest time asked, the ledger keeps one trigger per object: the one due first.
//!
//! Nothing is kept while traces are off ([`crate::trace::enabled`]).

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::trace::SpanContext;

/// What woke a reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A watch event of the object itself (spec, annotations, finalizers; not its status).
    Changed,
    /// An object it depends on, or that it names, changed.
    Related,
    /// Woken by work done outside its reconciles (a sweep of a shared listing, a background write).
    Woken,
    /// Its last reconcile asked to look again after a while.
    Requeued,
    /// Its last reconcile failed; the error backoff's retry.
    RetryAfterError,
    /// A person asked (`blockwork retry`).
    RetryRequested,
    /// Listed by a watch that (re)started: every object is looked at once.
    Listed,
    /// Nothing was noted.
    Unknown,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Changed => "object changed",
            Self::Related => "related object changed",
            Self::Woken => "woken",
            Self::Requeued => "requeue",
            Self::RetryAfterError => "retry after error",
            Self::RetryRequested => "retry requested",
            Self::Listed => "listed",
            Self::Unknown => "unknown",
        })
    }
}

/// The trigger a reconcile starts with.
#[derive(Clone, Debug)]
pub struct Trigger {
    pub cause: Cause,
    /// From when it was due to when the reconcile started.
    pub queued: Duration,
    /// The span it follows from: the reconcile that asked for it (a requeue, a retry) or the
    /// work that woke it.
    pub link: Option<SpanContext>,
}

impl Trigger {
    pub fn unknown() -> Self {
        Self { cause: Cause::Unknown, queued: Duration::ZERO, link: None }
    }
}

/// What a trigger follows from.
enum Follows {
    /// The work in this span (none: a watch event, which follows from no reconcile).
    Span(Option<SpanContext>),
    /// The object's last reconcile, which asked for it.
    LastReconcile,
}

#[derive(Debug, Default)]
struct Entry {
    /// The trigger waiting in the queue, when it is due, and the span it follows from.
    pending: Option<(Cause, Instant, Option<SpanContext>)>,
    /// The span of the object's last reconcile.
    last: Option<SpanContext>,
    /// The `traceparent` the object last settled for ([`crate::trace::join`]).
    settled: Option<String>,
}

/// One controller's triggers, by object.
#[derive(Debug)]
pub struct Triggers<K> {
    entries: Mutex<HashMap<K, Entry>>,
}

impl<K> Default for Triggers<K> {
    fn default() -> Self {
        Self { entries: Mutex::default() }
    }
}

impl<K: Eq + Hash + Clone> Triggers<K> {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key` was queued now for `cause`.
    pub fn note(&self, key: &K, cause: Cause) {
        self.note_at(key, cause, Instant::now(), Follows::Span(None));
    }

    /// `key` was queued now for `cause` by the work in `link` (a wake-up).
    pub fn note_from(&self, key: &K, cause: Cause, link: Option<SpanContext>) {
        self.note_at(key, cause, Instant::now(), Follows::Span(link));
    }

    /// `key` was queued now for `cause` by what its last reconcile left (a wake-up for work that
    /// reconcile recorded, such as validation records listed but not yet written): it follows
    /// from that reconcile, as a requeue does.
    pub fn note_following(&self, key: &K, cause: Cause) {
        self.note_at(key, cause, Instant::now(), Follows::LastReconcile);
    }

    /// `key` is queued to run `after` from now for `cause` (a requeue, a retry), following its
    /// last reconcile.
    pub fn note_after(&self, key: &K, cause: Cause, after: Duration) {
        let due = Instant::now().checked_add(after).unwrap_or_else(Instant::now);
        self.note_at(key, cause, due, Follows::LastReconcile);
    }

    fn note_at(&self, key: &K, cause: Cause, due: Instant, follows: Follows) {
        if !crate::trace::enabled() {
            return;
        }
        let mut entries = self.entries();
        let entry = entries.entry(key.clone()).or_default();
        let link = match follows {
            Follows::Span(link) => link,
            Follows::LastReconcile => entry.last.clone(),
        };
        if entry.pending.as_ref().is_none_or(|(_, pending, _)| due < *pending) {
            entry.pending = Some((cause, due, link));
        }
    }

    /// The span of the last reconcile of `key` (for what is logged about it after it ended).
    pub fn last(&self, key: &K) -> Option<SpanContext> {
        if !crate::trace::enabled() {
            return None;
        }
        self.entries().get(key).and_then(|entry| entry.last.clone())
    }

    /// The trigger of the reconcile of `key` starting now (forgotten: a trigger noted from now
    /// on is the next reconcile's).
    pub fn take(&self, key: &K) -> Trigger {
        if !crate::trace::enabled() {
            return Trigger::unknown();
        }
        let pending = self.entries().get_mut(key).and_then(|entry| entry.pending.take());
        match pending {
            Some((cause, due, link)) => Trigger { cause, queued: Instant::now().saturating_duration_since(due), link },
            None => Trigger::unknown(),
        }
    }

    /// The reconcile of `key` started with the span `span` (what its requeue will follow from).
    pub fn started(&self, key: &K, span: Option<SpanContext>) {
        if let Some(span) = span {
            self.entries().entry(key.clone()).or_default().last = Some(span);
        }
    }

    /// The `traceparent` `key` last settled for.
    pub fn settled(&self, key: &K) -> Option<String> {
        if !crate::trace::enabled() {
            return None;
        }
        self.entries().get(key).and_then(|entry| entry.settled.clone())
    }

    /// `key` settled (Ready, or failed for good) for `traceparent`: its later reconciles are
    /// traces of their own.
    pub fn settle(&self, key: &K, traceparent: &str) {
        if crate::trace::enabled() {
            self.entries().entry(key.clone()).or_default().settled = Some(traceparent.trim().to_owned());
        }
    }

    /// `key` is gone.
    pub fn forget(&self, key: &K) {
        if crate::trace::enabled() {
            self.entries().remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn traced() -> Triggers<&'static str> {
        crate::trace::enable();
        Triggers::default()
    }

    fn span(id: u64) -> SpanContext {
        SpanContext::new(TraceId::from(u128::from(id)), SpanId::from(id), TraceFlags::SAMPLED, false, TraceState::default())
    }

    #[test]
    fn a_reconcile_takes_the_trigger_that_queued_it_once() {
        let triggers = traced();
        triggers.note(&"a", Cause::Changed);
        let trigger = triggers.take(&"a");
        assert_eq!(trigger.cause, Cause::Changed);
        assert!(trigger.link.is_none());
        assert_eq!(triggers.take(&"a").cause, Cause::Unknown, "taken");
        assert_eq!(triggers.take(&"b").cause, Cause::Unknown, "never noted");
    }

    #[test]
    fn the_trigger_due_first_is_the_one_kept_as_the_queue_keeps_it() {
        let triggers = traced();
        triggers.note_after(&"a", Cause::Requeued, Duration::from_secs(3600));
        triggers.note(&"a", Cause::Changed);
        assert_eq!(triggers.take(&"a").cause, Cause::Changed, "the change runs it an hour sooner");

        triggers.note(&"a", Cause::Changed);
        triggers.note_after(&"a", Cause::Requeued, Duration::from_secs(3600));
        assert_eq!(triggers.take(&"a").cause, Cause::Changed, "the requeue noted later is not due first");
    }

    #[test]
    fn a_requeue_follows_from_the_reconcile_that_asked_for_it() {
        let triggers = traced();
        triggers.started(&"a", Some(span(7)));
        triggers.note_after(&"a", Cause::Requeued, Duration::ZERO);
        assert_eq!(triggers.take(&"a").link, Some(span(7)));
        triggers.note(&"a", Cause::Changed);
        assert_eq!(triggers.take(&"a").link, None, "a watch event follows from no reconcile");
        triggers.note_from(&"a", Cause::Woken, Some(span(9)));
        assert_eq!(triggers.take(&"a").link, Some(span(9)), "a wake-up follows from what woke it");
    }

    #[test]
    fn a_wake_up_for_work_the_last_reconcile_left_follows_from_that_reconcile() {
        let triggers = traced();
        triggers.started(&"a", Some(span(7)));
        triggers.note_following(&"a", Cause::Woken);
        let trigger = triggers.take(&"a");
        assert_eq!((trigger.cause, trigger.link), (Cause::Woken, Some(span(7))));
        assert_eq!(triggers.last(&"a"), Some(span(7)), "kept for the log lines about it");
    }

    #[test]
    fn time_queued_counts_from_when_the_trigger_was_due() {
        let triggers = traced();
        triggers.note(&"a", Cause::Changed);
        std::thread::sleep(Duration::from_millis(20));
        assert!(triggers.take(&"a").queued >= Duration::from_millis(20));
        triggers.note_after(&"a", Cause::Requeued, Duration::from_secs(60));
        assert_eq!(triggers.take(&"a").queued, Duration::ZERO, "taken before it was due (a retry came first)");
    }

    #[test]
    fn an_object_settles_for_a_traceparent_until_it_is_forgotten() {
        let triggers = traced();
        assert_eq!(triggers.settled(&"a"), None);
        triggers.settle(&"a", " 00-x ");
        assert_eq!(triggers.settled(&"a").as_deref(), Some("00-x"));
        triggers.forget(&"a");
        assert_eq!(triggers.settled(&"a"), None);
    }
}
