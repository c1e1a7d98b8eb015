//! When the rotator publishes its events: after the rotations, not between them.
//!
//! Every event is one more write to the API server and etcd. Published as soon as its rotation's
//! write returned, it met the next rotation whenever renewals came back to back (a mass renewal,
//! the benchmark): over 1,500 back-to-back rotations, latency p99 43 ms with the events against
//! 15 ms without them, p50 3.5 against 3.1 ms (`docs/benchmarks.md`, "Events after the
//! rotations"). So events wait here until the rotator is idle — no reconcile running and none
//! ended in the last [`QUIET`] — and then go oldest first, [`AT_ONCE`] at a time, each batch
//! looking again before it goes. An event never waits longer than [`LONGEST_WAIT`], so a rotator
//! that is never idle still tells every write, at most that late.
//!
//! Nothing is merged or dropped while the process runs: one event per write, as before. Events
//! stay best effort: a crash loses those still waiting (at most [`LONGEST_WAIT`]'s), never a
//! rotation, whose record is the target's annotations. At shutdown the outbox is closed: what
//! waits is published at once, for at most [`LONGEST_WAIT`], then given up and counted.
//!
//! Pure: time is passed in; publishing, waking and the reconciles' bookkeeping are left to the
//! caller (`controller.rs`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the rotator must have been idle before an event goes: longer than the gap between
/// two back-to-back rotations (a watch event's delivery, about 2 ms), short enough that events
/// follow a lone rotation at once to a person watching.
pub const QUIET: Duration = Duration::from_millis(50);

/// Events published together: one at a time, the runtime parks and wakes around each POST, which
/// cost ~0.1 ms of CPU per rotation in the benchmark; a few at a time cost none, and a rotation
/// that starts meanwhile meets at most this many.
pub const AT_ONCE: usize = 4;

/// The longest an event waits for the rotator to be idle, the longest the outbox publishes after
/// it is closed, and the longest the publisher waits for the API server to take one event.
pub const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// See the module documentation.
#[derive(Debug)]
pub struct Outbox<E> {
    /// Events waiting, oldest first, with when each came.
    waiting: VecDeque<(Instant, E)>,
    /// Reconciles running.
    running: usize,
    /// When the last reconcile ended (`None`: none has run).
    last_ended: Option<Instant>,
    /// When the outbox was closed (shutdown).
    closed: Option<Instant>,
}

impl<E> Default for Outbox<E> {
    fn default() -> Self {
        Self { waiting: VecDeque::new(), running: 0, last_ended: None, closed: None }
    }
}

/// What the publisher does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<E> {
    /// Publish these events now (at most [`AT_ONCE`], oldest first).
    Publish(Vec<E>),
    /// Nothing may go before this time, unless a reconcile ends or an event comes first.
    WaitUntil(Instant),
    /// Nothing waits: wait for an event.
    Wait,
    /// Closed and done; the count of events given up after [`LONGEST_WAIT`] of closing.
    Done { given_up: usize },
}

impl<E> Outbox<E> {
    /// An event to publish.
    pub fn push(&mut self, now: Instant, event: E) {
        self.waiting.push_back((now, event));
    }

    /// A reconcile started.
    pub fn started(&mut self) {
        self.running += 1;
    }

    /// A reconcile ended.
    pub fn ended(&mut self, now: Instant) {
        self.running = self.running.saturating_sub(1);
        self.last_ended = Some(now);
    }

    /// Shutdown: publish what waits at once, for at most [`LONGEST_WAIT`].
    pub fn close(&mut self, now: Instant) {
        self.closed.get_or_insert(now);
    }

    /// What to do at `now`.
    pub fn next(&mut self, now: Instant) -> Next<E> {
        if let Some(closed) = self.closed {
            if now >= closed + LONGEST_WAIT {
                let given_up = self.waiting.len();
                self.waiting.clear();
                return Next::Done { given_up };
            }
            return if self.waiting.is_empty() { Next::Done { given_up: 0 } } else { Next::Publish(self.batch()) };
        }
        let Some(&(came, _)) = self.waiting.front() else {
            return Next::Wait;
        };
        let overdue = came + LONGEST_WAIT;
        let idle_from = match (self.running, self.last_ended) {
            (0, None) => Some(now),
            (0, Some(ended)) => Some(ended + QUIET),
            _ => None,
        };
        let due = idle_from.map_or(overdue, |idle| idle.min(overdue));
        if now >= due { Next::Publish(self.batch()) } else { Next::WaitUntil(due) }
    }

    /// The oldest [`AT_ONCE`] events, taken out.
    fn batch(&mut self) -> Vec<E> {
        let count = self.waiting.len().min(AT_ONCE);
        self.waiting.drain(..count).map(|(_, event)| event).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_event_with_no_reconcile_running_or_just_ended_goes_at_once() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(now, "a");
        assert_eq!(outbox.next(now), Next::Publish(vec!["a"]));
        assert_eq!(outbox.next(now), Next::Wait, "nothing left");
    }

    #[test]
    fn events_wait_while_a_reconcile_runs() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.started();
        outbox.push(now, "a");
        assert_eq!(outbox.next(now + ms(100)), Next::WaitUntil(now + LONGEST_WAIT), "only the longest wait bounds it");
    }

    #[test]
    fn events_go_once_the_rotator_has_been_idle_for_the_quiet_time() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.started();
        outbox.push(now, "a");
        outbox.push(now, "b");
        outbox.ended(now + ms(1));
        assert_eq!(outbox.next(now + ms(2)), Next::WaitUntil(now + ms(1) + QUIET));
        assert_eq!(outbox.next(now + ms(1) + QUIET), Next::Publish(vec!["a", "b"]), "oldest first");
    }

    #[test]
    fn back_to_back_reconciles_hold_the_events_until_they_stop() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for i in 0..10 {
            let at = now + ms(3 * i);
            outbox.started();
            outbox.push(at, i);
            outbox.ended(at + ms(2));
            assert!(matches!(outbox.next(at + ms(3)), Next::WaitUntil(_)), "rotation {i}: the next one comes before the quiet time");
        }
        let last_ended = now + ms(29);
        let batches: Vec<_> = std::iter::from_fn(|| match outbox.next(last_ended + QUIET) {
            Next::Publish(events) => Some(events),
            _ => None,
        })
        .collect();
        assert_eq!(batches, [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]], "every event, in order, once the rotations stopped");
    }

    #[test]
    fn a_reconcile_that_starts_stops_the_events_that_still_wait() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for event in ["a", "b", "c", "d", "e"] {
            outbox.push(now, event);
        }
        assert_eq!(outbox.next(now), Next::Publish(vec!["a", "b", "c", "d"]));
        outbox.started();
        assert_eq!(outbox.next(now), Next::WaitUntil(now + LONGEST_WAIT), "e waits for the rotation");
    }

    #[test]
    fn an_event_never_waits_longer_than_the_longest_wait() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.started();
        outbox.push(now, "a");
        outbox.push(now + ms(10), "b");
        assert_eq!(outbox.next(now + LONGEST_WAIT), Next::Publish(vec!["a", "b"]), "a rotator that is never idle still tells its writes");
        outbox.push(now + ms(20), "c");
        assert_eq!(outbox.next(now + LONGEST_WAIT), Next::WaitUntil(now + ms(20) + LONGEST_WAIT));
    }

    #[test]
    fn a_closed_outbox_publishes_at_once_then_is_done() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.started();
        outbox.push(now, "a");
        outbox.close(now);
        assert_eq!(outbox.next(now), Next::Publish(vec!["a"]), "no quiet time at shutdown");
        assert_eq!(outbox.next(now), Next::Done { given_up: 0 });
    }

    #[test]
    fn a_closed_outbox_gives_up_after_the_longest_wait_and_counts_what_it_gave_up() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(now, "a");
        outbox.push(now, "b");
        outbox.close(now);
        outbox.close(now + ms(1));
        assert_eq!(outbox.next(now + LONGEST_WAIT), Next::Done { given_up: 2 }, "closed at the first close");
        assert_eq!(outbox.next(now + LONGEST_WAIT), Next::Done { given_up: 0 });
    }
}
