//! Pure: the next step of a Cache's passwords, the key rotator's prev/current/next applied to a
//! password (docs/rotator.md). ACL users and memcached's auth file accept several passwords at
//! once, so a rotation never has a moment when a client's password is refused:
//!
//! 1. **AddingNext**: a new password is written as `next`; the operator adds it on every running
//!    server and Sentinel (`ACL SETUSER`; memcached reloads its auth file), and the pods' copy of
//!    the Secret, which a restarted server reads, follows within the kubelet's sync.
//! 2. **Publishing**: once every server accepts it and that sync is over, it becomes `current`,
//!    the old one `previous`, and the binding Secret publishes it.
//! 3. **RetiringPrevious**: from the moment the binding Secret publishes it, clients have the
//!    grace period to read it; then `previous` is removed from the servers.
//!
//! Each step is one write of the Secret, carrying the `resourceVersion` it was planned from:
//! a plan made from a Secret that changed since is refused by the API server and made again.
//! What the servers accept is derived from the Secret, never the other way round, so a crash
//! between the write and the servers' update is repaired by the next reconcile.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::Cache;
use crate::auth::api::RotationPhase;
use crate::auth::password::Password;
use crate::auth::state::{Damaged, State, holds};
use crate::auth::{self, ROTATE_ANNOTATION};

/// How often a rotation under way is looked at while it waits for the servers.
pub const POLL: Duration = Duration::from_secs(5);

/// What the plan is made from. (No `Debug`: the Secret holds the passwords.)
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub cache: &'a Cache,
    /// Whether clients without a password are refused (`auth.required`).
    pub required: bool,
    /// The Secret as read, if it exists.
    pub secret: Option<&'a Secret>,
    /// The password of the user's Secret (`auth.secretRef`), when it gives a usable one (with
    /// `secretRef`, a rotation starts only from it).
    pub given: Option<&'a Password>,
    /// Every running server and Sentinel accepts exactly the passwords `secret` lists.
    pub servers_in_step: bool,
    /// The binding Secret publishes `secret`'s current password.
    pub published: bool,
    /// How long the kubelet takes to bring a changed Secret into the pods that mount it.
    pub propagation: Duration,
    pub now: Timestamp,
}

/// Why a rotation starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `auth.rotationPeriod` passed since the last one.
    Period,
    /// `blockwork rotate` (the annotation's value).
    Requested(String),
    /// The user's Secret holds another password.
    Given,
}

/// What the plan does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// First sight: every password made.
    Create,
    /// The Secret lacked what it needs (edited by hand): every password made anew; the pods roll.
    Reset(Damaged),
    Start(Cause),
    /// The next password is on every server: it becomes the current one, to be published.
    Promote,
    /// The binding Secret publishes the current password: the grace period starts.
    Published,
    /// The grace period is over: the previous password goes.
    Retire,
    /// A rotation was requested while the password is the user's own: nothing to rotate.
    RequestIgnored(String),
    /// The files the pods read differ from the passwords' (another `auth.required`, TLS, a
    /// hand edit): written again, without a rotation.
    Refresh,
    Unchanged,
}

/// The decision. (No `Debug`: the Secret to write holds the passwords.)
#[derive(Clone)]
pub struct Plan {
    pub step: Step,
    /// The State after the step.
    pub state: State,
    /// The Secret to create (no `resourceVersion`) or replace (the read one's).
    pub write: Option<Secret>,
    /// The latest time the plan should be made again, when time alone moves it on.
    pub look_again: Option<Timestamp>,
}

/// Decides. See the module documentation.
pub fn plan(input: &Input<'_>) -> Plan {
    let Input { cache, required, secret, given, now, .. } = *input;
    let read = secret.map(State::read);
    // A Secret without data is one authentication was turned off for: made again as new.
    let emptied = secret.is_some_and(|s| s.data.as_ref().is_none_or(|d| d.is_empty()));
    let (step, state) = match read {
        None => (Step::Create, State::new(given.cloned(), now)),
        Some(Err(_)) if emptied => (Step::Create, State::new(given.cloned(), now)),
        Some(Err(damaged)) => (Step::Reset(damaged), State::new(given.cloned(), now)),
        Some(Ok(state)) => next_step(input, state),
    };
    let mut desired = state.secret(cache, required);
    let write = match secret {
        Some(read) if holds(read, &desired) => None,
        Some(read) => {
            desired.metadata.resource_version = read.resource_version();
            // Others' annotations and labels stay.
            let mut annotations = read.annotations().clone();
            annotations.retain(|key, _| !key.starts_with("cache.blockwork.dev/"));
            annotations.extend(desired.annotations().clone());
            desired.metadata.annotations = Some(annotations);
            Some(desired)
        }
        None => Some(desired),
    };
    let step = match (step, &write) {
        (Step::Unchanged, Some(_)) => Step::Refresh,
        (step, _) => step,
    };
    let look_again = look_again(input, &state);
    Plan { step, state, write, look_again }
}

fn next_step(input: &Input<'_>, mut state: State) -> (Step, State) {
    let Input { cache, given, servers_in_step, published, propagation, now, .. } = *input;
    match state.phase() {
        Some(RotationPhase::AddingNext) => {
            if let Some(given) = given.filter(|given| state.next.as_ref() != Some(*given)) {
                // The user's Secret changed again: the newest password is the one to add.
                state.next = Some(given.clone());
                state.next_added_at = Some(now);
                return (Step::Start(Cause::Given), state);
            }
            let synced_into_pods = state.next_added_at.is_none_or(|added| now >= after(added, propagation));
            if servers_in_step
                && synced_into_pods
                && let Some(next) = state.next.take()
            {
                state.previous = Some(std::mem::replace(&mut state.current, next));
                state.next_added_at = None;
                state.published_at = None;
                return (Step::Promote, state);
            }
            (Step::Unchanged, state)
        }
        Some(RotationPhase::Publishing) if published => {
            state.published_at = Some(now);
            (Step::Published, state)
        }
        Some(RotationPhase::Publishing) => (Step::Unchanged, state),
        Some(RotationPhase::RetiringPrevious) => {
            let retires_at = state.published_at.map(|published| after(published, grace(cache)));
            if retires_at.is_some_and(|at| now >= at) {
                state.previous = None;
                state.published_at = None;
                state.since = now;
                state.rotations += 1;
                return (Step::Retire, state);
            }
            (Step::Unchanged, state)
        }
        None => {
            let start = |mut state: State, next: Password, cause: Cause| {
                state.next = Some(next);
                state.next_added_at = Some(now);
                (Step::Start(cause), state)
            };
            if let Some(given) = given.filter(|given| **given != state.current) {
                return start(state, given.clone(), Cause::Given);
            }
            if let Some(request) = unhandled_request(cache, &state) {
                state.handled_request = Some(request.clone());
                if users_own(cache) {
                    return (Step::RequestIgnored(request), state);
                }
                return start(state, Password::generate(), Cause::Requested(request));
            }
            if !users_own(cache) && rotation_period(cache).is_some_and(|period| now >= after(state.since, period)) {
                return start(state, Password::generate(), Cause::Period);
            }
            (Step::Unchanged, state)
        }
    }
}

/// The `blockwork.dev/rotate-requested-at` value no rotation was started for yet.
fn unhandled_request(cache: &Cache, state: &State) -> Option<String> {
    let request = cache.annotations().get(ROTATE_ANNOTATION).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())?;
    (state.handled_request.as_ref() != Some(&request)).then_some(request)
}

/// The password is the user's (`auth.secretRef`): it changes when they change it, never here.
fn users_own(cache: &Cache) -> bool {
    cache.spec.auth.as_ref().is_some_and(|auth| auth.secret_ref.is_some())
}

fn rotation_period(cache: &Cache) -> Option<Duration> {
    cache.spec.auth.as_ref()?.rotation_period.as_deref().and_then(auth::duration)
}

/// The grace period `cache` gives clients (the schema's default when unreadable).
pub fn grace(cache: &Cache) -> Duration {
    cache.spec.auth.as_ref().and_then(|auth| auth::duration(&auth.grace_period)).unwrap_or(auth::DEFAULT_GRACE)
}

/// `duration` after `time`.
pub fn after(time: Timestamp, duration: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(duration).ok().and_then(|d| time.checked_add(d).ok()).unwrap_or(Timestamp::MAX)
}

/// When time alone moves `state` on: the end of the kubelet's sync while adding (every [`POLL`]
/// while the servers are not all in step), now while publishing, the end of the grace period
/// while retiring, the next rotation's time when rotations are periodic.
fn look_again(input: &Input<'_>, state: &State) -> Option<Timestamp> {
    let Input { cache, servers_in_step, propagation, now, .. } = *input;
    match state.phase() {
        Some(RotationPhase::AddingNext) if servers_in_step => Some(state.next_added_at.map_or(now, |added| after(added, propagation))),
        Some(RotationPhase::AddingNext) => Some(after(now, POLL)),
        Some(RotationPhase::Publishing) => Some(now),
        Some(RotationPhase::RetiringPrevious) => state.published_at.map(|published| after(published, grace(cache))),
        None if !users_own(cache) => rotation_period(cache).map(|period| after(state.since, period)),
        None => None,
    }
}

#[cfg(test)]
mod tests;
