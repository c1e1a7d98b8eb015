//! When to look at an object again: every requeue goes through [`requeue_delay`], so that each
//! follows the operator's intervals and carries their jitter; the attempt counter that is the
//! backoff's exponent lives here too.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::backoff::RequeuePolicy;
use crate::outcome::ErrorClass;
use crate::status::ReconcileState;

/// Why the object is looked at again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// The state's own interval: waiting for something to change.
    InState,
    /// The backoff after a failed call, by the error's class.
    AfterError(ErrorClass),
}

/// How long an operator waits: in each state, after a failed call, after throttling. One table
/// per operator, given at registration ([`crate::ControllerConfig::timing`]); seed 000's intervals by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Waiting for dependencies.
    pub pending: RequeuePolicy,
    /// Creating, Updating and Recreating: the next step follows at once.
    pub creating: RequeuePolicy,
    /// Waiting for the external system (the seed's Created/Validated).
    pub verifying: RequeuePolicy,
    /// Ready: how often a resource in sync is looked at again.
    pub ready: RequeuePolicy,
    /// After a terminal error: retried on this interval, or as soon as the spec changes.
    pub failed: RequeuePolicy,
    /// Waiting for the external resource to be deleted.
    pub terminating: RequeuePolicy,
    /// After a failed call (attempts count within a state).
    pub error_backoff: RequeuePolicy,
    /// The shortest wait after the API throttled us.
    pub throttle_floor: Duration,
    /// How long a deletion may be blocked on answers that leave the external resource's
    /// existence unknown (access denied, throttling, 5xx) before it says so plainly, with the two
    /// ways out (`machine::deletion_failed`). Long enough for throttling and passing outages to
    /// clear, short enough that a namespace deletion or `helm uninstall` hanging on it is told.
    pub deletion_blocked_after: Duration,
}

impl Timing {
    /// The interval of `state`.
    pub fn in_state(&self, state: ReconcileState) -> RequeuePolicy {
        match state {
            ReconcileState::Pending => self.pending,
            ReconcileState::Creating | ReconcileState::Updating | ReconcileState::Recreating => self.creating,
            ReconcileState::Verifying => self.verifying,
            ReconcileState::Succeeded => self.ready,
            ReconcileState::Failed => self.failed,
            ReconcileState::Terminating => self.terminating,
        }
    }
}

/// Seed 000's intervals: quick while things move, hourly once ready, five minutes when failed.
impl Default for Timing {
    fn default() -> Self {
        let secs = Duration::from_secs;
        Self {
            pending: RequeuePolicy::exponential(secs(30), secs(300)),
            creating: RequeuePolicy::exponential(secs(1), secs(60)),
            verifying: RequeuePolicy::exponential(secs(15), secs(300)),
            ready: RequeuePolicy::fixed(secs(3600)),
            failed: RequeuePolicy::fixed(secs(300)),
            terminating: RequeuePolicy::exponential(secs(10), secs(300)),
            error_backoff: RequeuePolicy::exponential(secs(5), secs(300)),
            throttle_floor: secs(60),
            deletion_blocked_after: secs(300),
        }
    }
}

/// Per state for waits, the error backoff after errors, and after throttling the error backoff
/// raised to the throttle floor, jittered after the clamp so that objects throttled together do
/// not all return at the same instant.
pub(crate) fn requeue_delay(timing: &Timing, requeue: Requeue, state: ReconcileState, attempt: u32) -> Duration {
    let rng = &mut rand::rng();
    match requeue {
        Requeue::InState => timing.in_state(state).delay(attempt, rng),
        Requeue::AfterError(ErrorClass::Throttled) => timing.error_backoff.delay_at_least(attempt, timing.throttle_floor, rng),
        Requeue::AfterError(_) => timing.error_backoff.delay(attempt, rng),
    }
}

/// Attempts made in the current state per object UID: the backoff exponent. Kept in memory on
/// purpose: persisting it would cost a write per wait, and a restart merely resets it.
#[derive(Default)]
pub(crate) struct Attempts(Mutex<HashMap<String, (ReconcileState, u32)>>);

impl Attempts {
    /// Counts an attempt in `state` and returns the number made before it; the count restarts
    /// when the state changes.
    pub(crate) fn next(&self, uid: &str, state: ReconcileState) -> u32 {
        let mut attempts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = attempts.entry(uid.to_owned()).or_insert((state, 0));
        if entry.0 == state {
            entry.1 = entry.1.saturating_add(1);
        } else {
            *entry = (state, 1);
        }
        entry.1 - 1
    }

    /// The backoff starts over (a retry was requested, or the object is gone).
    pub(crate) fn reset(&self, uid: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(requeue: Requeue, state: ReconcileState, attempt: u32) -> (Duration, Duration) {
        let delays: Vec<Duration> = (0..500).map(|_| requeue_delay(&Timing::default(), requeue, state, attempt)).collect();
        let min = delays.iter().min().copied().unwrap_or_default();
        let max = delays.iter().max().copied().unwrap_or_default();
        assert_ne!(min, max, "every requeue is jittered");
        (min, max)
    }

    fn within_ten_percent((min, max): (Duration, Duration), interval: Duration) -> bool {
        min >= interval.mul_f64(0.9) && max <= interval.mul_f64(1.1)
    }

    #[test]
    fn waits_follow_the_state_policy_with_jitter() {
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Succeeded, 0), Duration::from_secs(3600)));
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Pending, 1), Duration::from_secs(60)));
        // The first look after writing the create marker is the Creating state's first interval.
        assert!(within_ten_percent(delays(Requeue::InState, ReconcileState::Creating, 0), Duration::from_secs(1)));
    }

    #[test]
    fn retryable_errors_follow_the_error_backoff_with_jitter() {
        let state = ReconcileState::Creating;
        assert!(within_ten_percent(delays(Requeue::AfterError(ErrorClass::Retryable), state, 0), Duration::from_secs(5)));
        assert!(within_ten_percent(delays(Requeue::AfterError(ErrorClass::Retryable), state, 2), Duration::from_secs(20)));
    }

    #[test]
    fn throttling_waits_at_least_the_floor_with_jitter_around_it() {
        let (min, max) = delays(Requeue::AfterError(ErrorClass::Throttled), ReconcileState::Creating, 0);
        assert!(within_ten_percent((min, max), Duration::from_secs(60)), "{min:?}..{max:?}");
        assert!(min < Duration::from_secs(60) && max > Duration::from_secs(60), "jitter applies after the clamp: {min:?}..{max:?}");
        // Past the floor the backoff grows on: 5 s × 2^5 = 160 s.
        assert!(within_ten_percent(
            delays(Requeue::AfterError(ErrorClass::Throttled), ReconcileState::Creating, 5),
            Duration::from_secs(160)
        ));
    }

    #[test]
    fn attempts_count_within_a_state_and_restart_when_it_changes() {
        let attempts = Attempts::default();
        assert_eq!(attempts.next("u", ReconcileState::Creating), 0);
        assert_eq!(attempts.next("u", ReconcileState::Creating), 1);
        assert_eq!(attempts.next("u", ReconcileState::Verifying), 0);
        attempts.reset("u");
        assert_eq!(attempts.next("u", ReconcileState::Verifying), 0);
    }
}
