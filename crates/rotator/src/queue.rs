//! The decisions of the rotator's work queue, with client-go's workqueue semantics (ADR 0010):
//! which source a free worker takes next, and when a source is due again.
//!
//! - A key is queued at most once: a trigger of a queued key changes nothing.
//! - A key is reconciled by one worker at a time: a trigger that arrives while its key is being
//!   reconciled queues it again once that reconcile is [`Queue::done`], so the change it stands
//!   for is never missed and never reconciled concurrently.
//! - A trigger is queued at once; timers are for requeues only (retry, backoff, resync), one per
//!   key, set by the key's last reconcile.
//!
//! Pure: time is passed in; waking workers and the clock, and shutting down, are left to the
//! caller (`controller.rs`).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Instant;

/// See the module documentation.
#[derive(Debug)]
pub struct Queue<K> {
    /// Keys waiting for a worker, oldest first.
    queued: VecDeque<K>,
    /// The keys in `queued`, and those triggered while being reconciled (queued at their `done`).
    dirty: HashSet<K>,
    /// Keys a worker is reconciling.
    processing: HashSet<K>,
    /// Each key's timer, and the timers in deadline order.
    timers: HashMap<K, Instant>,
    deadlines: BTreeSet<(Instant, K)>,
}

impl<K> Default for Queue<K> {
    fn default() -> Self {
        Self {
            queued: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            timers: HashMap::new(),
            deadlines: BTreeSet::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> Queue<K> {
    /// A trigger of `key`. Whether a worker may take something it could not before (wake one).
    pub fn add(&mut self, key: K) -> bool {
        if !self.dirty.insert(key.clone()) {
            return false;
        }
        if self.processing.contains(&key) {
            return false;
        }
        self.queued.push_back(key);
        true
    }

    /// The key a free worker reconciles next, now marked as being reconciled.
    pub fn next(&mut self) -> Option<K> {
        let key = self.queued.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    /// The reconcile of `key` ended. Whether it is queued again (triggered meanwhile: wake a
    /// worker).
    pub fn done(&mut self, key: &K) -> bool {
        self.processing.remove(key);
        if !self.dirty.contains(key) {
            return false;
        }
        self.queued.push_back(key.clone());
        true
    }

    /// Triggers `key` at `deadline`, replacing its timer: the last reconcile decides when its
    /// key is looked at again. Whether this is now the earliest timer (re-arm the clock).
    pub fn add_at(&mut self, key: K, deadline: Instant) -> bool {
        self.forget_timer(&key);
        self.timers.insert(key.clone(), deadline);
        self.deadlines.insert((deadline, key));
        self.next_deadline() == Some(deadline)
    }

    /// Drops `key`'s timer (its source is gone).
    pub fn forget_timer(&mut self, key: &K) {
        if let Some(deadline) = self.timers.remove(key) {
            self.deadlines.remove(&(deadline, key.clone()));
        }
    }

    /// When the earliest timer is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// Triggers the keys whose timers are due at `now`. How many workers to wake.
    pub fn fire(&mut self, now: Instant) -> usize {
        let mut woken = 0;
        while let Some((deadline, _)) = self.deadlines.first()
            && *deadline <= now
            && let Some((_, key)) = self.deadlines.pop_first()
        {
            self.timers.remove(&key);
            woken += usize::from(self.add(key));
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn queue() -> Queue<&'static str> {
        Queue::default()
    }

    fn drain(queue: &mut Queue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.next()).collect()
    }

    #[test]
    fn keys_are_handed_out_in_the_order_they_were_triggered() {
        let mut queue = queue();
        assert!(queue.add("a"));
        assert!(queue.add("b"));
        assert_eq!(drain(&mut queue), ["a", "b"]);
        assert_eq!(queue.next(), None);
    }

    #[test]
    fn a_key_is_queued_at_most_once() {
        let mut queue = queue();
        assert!(queue.add("a"));
        assert!(!queue.add("a"), "no worker to wake for a key already queued");
        queue.add("b");
        assert_eq!(drain(&mut queue), ["a", "b"]);
    }

    #[test]
    fn a_key_being_reconciled_is_not_handed_to_a_second_worker() {
        let mut queue = queue();
        queue.add("a");
        assert_eq!(queue.next(), Some("a"));
        assert!(!queue.add("a"), "held until the running reconcile is done");
        assert_eq!(queue.next(), None);
    }

    #[test]
    fn a_trigger_during_a_reconcile_runs_it_once_more_afterwards() {
        let mut queue = queue();
        queue.add("a");
        queue.next();
        queue.add("a");
        queue.add("a");
        assert!(queue.done(&"a"), "queued again");
        assert_eq!(drain(&mut queue), ["a"], "once, however many triggers");
        assert!(!queue.done(&"a"), "no trigger during the second reconcile");
        assert_eq!(queue.next(), None);
    }

    #[test]
    fn a_key_not_triggered_during_its_reconcile_is_not_queued_again() {
        let mut queue = queue();
        queue.add("a");
        queue.next();
        assert!(!queue.done(&"a"));
        assert_eq!(queue.next(), None);
        assert!(queue.add("a"), "a later trigger queues it at once");
    }

    #[test]
    fn a_timer_triggers_its_key_when_due_and_not_before() {
        let mut queue = queue();
        let now = Instant::now();
        assert!(queue.add_at("a", now + Duration::from_secs(2)));
        assert_eq!(queue.fire(now + Duration::from_secs(1)), 0);
        assert_eq!(queue.next(), None);
        assert_eq!(queue.fire(now + Duration::from_secs(2)), 1);
        assert_eq!(drain(&mut queue), ["a"]);
        assert_eq!(queue.next_deadline(), None, "a timer fires once");
    }

    #[test]
    fn a_keys_last_timer_replaces_the_one_before() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add_at("a", now + Duration::from_secs(3600));
        assert!(queue.add_at("a", now + Duration::from_secs(1)), "now the earliest: re-arm the clock");
        assert!(!queue.add_at("b", now + Duration::from_secs(2)));
        assert!(!queue.add_at("a", now + Duration::from_secs(5)), "b is earlier");
        assert_eq!(queue.fire(now + Duration::from_secs(3)), 1, "b only");
        assert_eq!(queue.next_deadline(), Some(now + Duration::from_secs(5)), "a's first timer is gone");
        assert_eq!(queue.fire(now + Duration::from_secs(3600)), 1, "one timer per key");
    }

    #[test]
    fn timers_fire_in_deadline_order_and_a_queued_key_is_not_queued_twice() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add("b");
        queue.add_at("a", now + Duration::from_secs(2));
        queue.add_at("b", now + Duration::from_secs(1));
        queue.add_at("c", now + Duration::from_secs(3));
        assert_eq!(queue.fire(now + Duration::from_secs(3)), 2, "b was queued already");
        assert_eq!(drain(&mut queue), ["b", "a", "c"]);
    }

    #[test]
    fn a_timer_due_during_its_keys_reconcile_runs_it_once_more_afterwards() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add("a");
        queue.next();
        queue.add_at("a", now);
        assert_eq!(queue.fire(now), 0);
        assert!(queue.done(&"a"));
        assert_eq!(drain(&mut queue), ["a"]);
    }

    #[test]
    fn a_forgotten_timer_never_fires() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add_at("a", now);
        queue.forget_timer(&"a");
        assert_eq!(queue.fire(now), 0);
        assert_eq!(queue.next_deadline(), None);
    }
}
