//! When to look at an object again: every requeue goes through [`requeue_delay`], so that each
//! follows the operator's intervals and carries their jitter; the attempt counter that is the
//! backoff's exponent lives here too.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::backoff::RequeuePolicy;
use crate::outcome::ErrorClass;
use crate::resource::ExternalResource;
use crate::status::ReconcileState;

/// Why the object is looked at again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// The state's own interval: waiting for something to change.
    InState,
    /// The backoff after a failed call, by the error's class.
    AfterError(ErrorClass),
}

/// Seed 000's intervals: quick while things move, hourly once ready, five minutes when failed.
pub fn default_requeue_policy(state: ReconcileState) -> RequeuePolicy {
    let secs = Duration::from_secs;
    match state {
        ReconcileState::Pending => RequeuePolicy::exponential(secs(30), secs(300)),
        ReconcileState::Creating | ReconcileState::Updating | ReconcileState::Recreating => RequeuePolicy::exponential(secs(1), secs(60)),
        ReconcileState::Verifying => RequeuePolicy::exponential(secs(15), secs(300)),
        ReconcileState::Terminating => RequeuePolicy::exponential(secs(10), secs(300)),
        ReconcileState::Succeeded => RequeuePolicy::fixed(secs(3600)),
        ReconcileState::Failed => RequeuePolicy::fixed(secs(300)),
    }
}

/// Per state for waits, the error backoff after errors, and after throttling the error backoff
/// raised to the throttle floor, jittered after the clamp so that objects throttled together do
/// not all return at the same instant.
pub(crate) fn requeue_delay<M: ExternalResource>(manager: &M, requeue: Requeue, state: ReconcileState, attempt: u32) -> Duration {
    let rng = &mut rand::rng();
    match requeue {
        Requeue::InState => manager.requeue_policy(state).delay(attempt, rng),
        Requeue::AfterError(ErrorClass::Throttled) => manager.error_backoff().delay_at_least(attempt, manager.throttle_floor(), rng),
        Requeue::AfterError(_) => manager.error_backoff().delay(attempt, rng),
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
    use crate::outcome::{DeleteOutcome, MutateOutcome, VerifyOutcome};
    use crate::resource::Request;
    use crate::status::ManagedStatus;
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "testing.blockwork.dev", version = "v1", kind = "Thing", namespaced, status = "ManagedStatus<()>")]
    struct ThingSpec {}

    /// Only the requeue policies matter here; no call is ever made.
    struct Defaults;

    impl ExternalResource for Defaults {
        type Object = Thing;
        type Observation = ();

        async fn verify(&self, _: &Request<'_, Thing>, _: &mut ()) -> VerifyOutcome {
            VerifyOutcome::Ready
        }
        async fn create(&self, _: &Request<'_, Thing>, _: &mut ()) -> MutateOutcome {
            MutateOutcome::Succeeded
        }
        async fn update(&self, _: &Request<'_, Thing>, _: &mut ()) -> MutateOutcome {
            MutateOutcome::Succeeded
        }
        async fn delete(&self, _: &Request<'_, Thing>, _: &mut ()) -> DeleteOutcome {
            DeleteOutcome::Succeeded
        }
    }

    fn delays(requeue: Requeue, state: ReconcileState, attempt: u32) -> (Duration, Duration) {
        let delays: Vec<Duration> = (0..500).map(|_| requeue_delay(&Defaults, requeue, state, attempt)).collect();
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
