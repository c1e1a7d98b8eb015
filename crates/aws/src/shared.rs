//! Calls many objects share — an account's certificate listing, a hosted zone's records as one
//! role reads them — and what their objects are told while one fails (issue 37). Without this, a
//! shared call failing kept its readers in its retries (up to half a minute each, one at a time
//! behind the sweep's lock), holding the reconcile workers of the whole identity, while every
//! object waiting behind them said nothing: 39 of 40 Certs created during a 90-second ACM outage
//! had an empty status until it ended.
//!
//! [`Shared`] keeps a call's failure streak: since when it fails and AWS's latest answer. While
//! it fails, a reader is not made to wait on it: it is told at once, in an error whose code says
//! it waits on a shared call ([`is_shared_wait`]) and whose message says what the call is, AWS's
//! answer and since when — the same words for every reader and every retry of the streak, so an
//! object writes its status once, not once per retry (the runtime's `ExternalError::shared`). A
//! call with a retrier of its own (the listing's background sweeps) is retried only by it; one
//! without is called again by the next reader once the failed call has ended and `hold` passed.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::error::{AwsError, ErrorClass};
use crate::throttled::BACKING_OFF;

/// The code (and the condition's reason) of a wait on a shared call that fails other than by
/// throttling (a 5xx, a timeout, an unreachable endpoint); a throttled one is
/// [`BACKING_OFF`](crate::throttled::BACKING_OFF).
pub const SHARED_CALL_FAILING: &str = "SharedCallFailing";

/// Whether an error's code says its object waits on a call it shares with others (or on its
/// account's backoff), rather than that its own call failed.
pub fn is_shared_wait(code: Option<&str>) -> bool {
    matches!(code, Some(SHARED_CALL_FAILING | BACKING_OFF))
}

/// One shared call's health.
pub struct Shared {
    /// What the call is, for the message: `the ACM certificate listing of AwsIdentity team-a`.
    what: String,
    /// How long after a failed call ends its readers are still told of it before one calls
    /// again; `None`: until it succeeds (someone else retries it).
    hold: Option<Duration>,
    state: Mutex<State>,
    failed: Notify,
}

#[derive(Default)]
struct State {
    /// Calls under way.
    in_flight: usize,
    failing: Option<Failing>,
}

struct Failing {
    since: jiff::Timestamp,
    answer: AwsError,
    /// When the last failed call ended; `None` while one is under way.
    ended: Option<Instant>,
}

/// A call under way; when it goes, the call has ended.
pub struct Flight<'a>(&'a Shared);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0
            && let Some(failing) = &mut state.failing
        {
            failing.ended = Some(Instant::now());
        }
    }
}

impl Shared {
    pub fn new(what: impl Into<String>, hold: Option<Duration>) -> Self {
        Self { what: what.into(), hold, state: Mutex::default(), failed: Notify::new() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call begins.
    pub fn begin(&self) -> Flight<'_> {
        self.state().in_flight += 1;
        Flight(self)
    }

    /// An attempt of the call failed with `error`: a transient failure starts (or goes on with)
    /// the streak, and readers waiting for the call are told at once.
    pub fn failed(&self, error: &AwsError) {
        if !error.is_transient() {
            return;
        }
        {
            let mut state = self.state();
            let since = state.failing.as_ref().map_or_else(jiff::Timestamp::now, |failing| failing.since);
            state.failing = Some(Failing { since, answer: error.clone(), ended: None });
        }
        self.failed.notify_waiters();
    }

    /// The call succeeded; true when it was failing until now (its readers may go on).
    pub fn succeeded(&self) -> bool {
        self.state().failing.take().is_some()
    }

    /// What a reader is told instead of calling, while the call fails: under way (retrying), or
    /// ended less than `hold` ago (or, without a hold, until it succeeds).
    pub fn outage(&self) -> Option<AwsError> {
        let state = self.state();
        let failing = state.failing.as_ref()?;
        let told = match (failing.ended, self.hold) {
            _ if state.in_flight > 0 => true,
            (None, _) | (_, None) => true,
            (Some(ended), Some(hold)) => ended.elapsed() < hold,
        };
        told.then(|| waiting(&self.what, failing.since, &failing.answer))
    }

    /// Resolves with what readers are told as soon as an attempt of the call fails.
    pub async fn next_failure(&self) -> AwsError {
        loop {
            let notified = self.failed.notified();
            if let Some(outage) = self.outage()
                && self.state().in_flight > 0
            {
                return outage;
            }
            notified.await;
        }
    }

    /// What the readers of a call that failed with `error` are told: the shared wait, when the
    /// call fails transiently (with since when); otherwise the error as it is (a refusal
    /// needing a person, a resource that does not exist).
    pub fn told(&self, error: &AwsError) -> AwsError {
        let state = self.state();
        match state.failing.as_ref() {
            Some(failing) if error.is_transient() => waiting(&self.what, failing.since, error),
            _ => error.clone(),
        }
    }
}

/// The error readers of a shared call are told: throttled — the account backs off; otherwise
/// the call fails. Its message is the same for the whole streak (AWS's answer and its first
/// time, nothing that changes with each retry).
pub fn waiting(what: &str, since: jiff::Timestamp, answer: &AwsError) -> AwsError {
    let since = since.round(jiff::Unit::Second).unwrap_or(since);
    let answered = match &answer.code {
        Some(code) if code.as_str() != BACKING_OFF => format!("{code}: {}", answer.message),
        _ => answer.message.clone(),
    };
    let (code, how) = match answer.class {
        ErrorClass::Throttled => (BACKING_OFF, "AWS has been throttling it"),
        _ => (SHARED_CALL_FAILING, "it has been failing"),
    };
    AwsError {
        operation: answer.operation,
        code: Some(code.to_owned()),
        class: answer.class,
        message: format!(
            "waiting for {what}, which other objects share: {how} since {since} ({answered}); retried for all of them, and this object is looked at again when it answers"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answer(code: &str, class: ErrorClass) -> AwsError {
        AwsError {
            operation: "ListCertificates",
            code: Some(code.to_owned()),
            class,
            message: "We encountered an internal error.".to_owned(),
        }
    }

    #[test]
    fn readers_of_a_failing_call_are_told_the_same_words_for_the_whole_streak() {
        let shared = Shared::new("the ACM certificate listing of AwsIdentity team-a", None);
        assert!(shared.outage().is_none(), "nothing failed yet");
        let flight = shared.begin();
        shared.failed(&answer("ServiceUnavailable", ErrorClass::Retryable));
        let first = shared.outage().expect("told while the call retries");
        assert_eq!((first.code.as_deref(), first.class), (Some(SHARED_CALL_FAILING), ErrorClass::Retryable));
        for said in ["the ACM certificate listing of AwsIdentity team-a", "ServiceUnavailable: We encountered", "has been failing since "] {
            assert!(first.message.contains(said), "{said}: {}", first.message);
        }
        shared.failed(&answer("ServiceUnavailable", ErrorClass::Retryable));
        drop(flight);
        assert_eq!(shared.outage(), Some(first.clone()), "another failed attempt, the same words: no status write of its own");
        assert!(shared.succeeded(), "it was failing");
        assert!(shared.outage().is_none() && !shared.succeeded());
    }

    #[test]
    fn a_throttled_shared_call_is_the_account_backing_off() {
        let shared = Shared::new("the ACM certificate listing of the operator's own identity", None);
        shared.failed(&answer("ThrottlingException", ErrorClass::Throttled));
        let told = shared.outage().unwrap();
        assert_eq!((told.code.as_deref(), told.class), (Some(BACKING_OFF), ErrorClass::Throttled));
        assert!(told.message.contains("AWS has been throttling it since"), "{}", told.message);
    }

    #[test]
    fn a_refusal_is_not_a_wait_and_is_told_as_it_is() {
        let shared = Shared::new("the records of hosted zone Z1", Some(Duration::from_secs(5)));
        let denied = answer("AccessDenied", ErrorClass::Terminal);
        shared.failed(&denied);
        assert!(shared.outage().is_none(), "a person must act: not a shared wait");
        assert_eq!(shared.told(&denied), denied);
    }

    #[test]
    fn without_a_retrier_the_next_reader_calls_again_once_the_hold_has_passed() {
        let shared = Shared::new("the records of hosted zone Z1", Some(Duration::from_millis(30)));
        {
            let _flight = shared.begin();
            shared.failed(&answer("InternalFailure", ErrorClass::Retryable));
        }
        assert!(shared.outage().is_some(), "just ended: told");
        std::thread::sleep(Duration::from_millis(40));
        assert!(shared.outage().is_none(), "the next reader calls again");
        let retried = shared.begin();
        shared.failed(&answer("InternalFailure", ErrorClass::Retryable));
        assert!(shared.outage().is_some_and(|told| told.message.contains("has been failing since")), "the streak goes on");
        drop(retried);
    }

    #[test]
    fn shared_waits_are_told_apart_by_their_code() {
        assert!(is_shared_wait(Some(SHARED_CALL_FAILING)) && is_shared_wait(Some(BACKING_OFF)));
        assert!(!is_shared_wait(Some("ServiceUnavailable")) && !is_shared_wait(None));
    }
}
