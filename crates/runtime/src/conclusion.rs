//! Where one reconcile ends, as data: the [`Conclusion`] says the state to settle in, the
//! conditions, the create-pending marker, the events and when to look again; [`Conclusion::status`]
//! turns it into the status to write. Pure: `writes.rs` does the write.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;

use crate::machine::AfterCall;
use crate::outcome::{Conditions, ErrorClass, ExternalError};
use crate::policy::DriftPolicy;
use crate::status::{CreatePending, LastError, ManagedStatus, READY, ReconcileState, SYNCED, condition, set_condition};
use crate::timing::Requeue;

/// Where one reconcile ends: the status to write and when to look again.
pub(crate) struct Conclusion {
    pub(crate) state: ReconcileState,
    message: Option<String>,
    /// `Ready` as (status, reason, message); `None` keeps the current one.
    ready: Option<(bool, String, String)>,
    /// `Synced` as (status, reason, message).
    pub(crate) synced: (bool, String, String),
    marker: CreateMarker,
    /// The spec (as JSON) now applied to the external resource, when this reconcile applied it.
    pub(crate) last_applied: Option<String>,
    drift_detected: Option<bool>,
    pub(crate) requeue: Requeue,
    /// A Warning event (reason, note).
    pub(crate) warning: Option<(String, String)>,
    /// Set when the reconcile failed: the warning is then the error, recorded in
    /// `status.lastError` with this class.
    pub(crate) error_class: Option<ErrorClass>,
    /// The operator's own conditions, as the reconcile's calls returned them.
    pub(crate) operator_conditions: Conditions,
}

/// What becomes of the create-pending marker (`status.createPending`).
enum CreateMarker {
    Unchanged,
    /// Written for the spec (as JSON) the create will be for.
    Write {
        token: String,
        spec: String,
    },
    Remove,
}

impl Conclusion {
    pub(crate) fn new(state: ReconcileState) -> Self {
        Self {
            state,
            message: None,
            ready: None,
            synced: (true, "ReconcileSuccess".to_owned(), String::new()),
            marker: CreateMarker::Unchanged,
            last_applied: None,
            drift_detected: None,
            requeue: Requeue::InState,
            warning: None,
            error_class: None,
            operator_conditions: Conditions::default(),
        }
    }

    pub(crate) fn waiting(state: ReconcileState, reason: &str, message: String) -> Self {
        Self { ready: Some((false, reason.to_owned(), message.clone())), message: Some(message), ..Self::new(state) }
    }

    pub(crate) fn failed(reason: &str, message: String) -> Self {
        Self {
            ready: Some((false, reason.to_owned(), message.clone())),
            synced: (false, reason.to_owned(), message.clone()),
            warning: Some((reason.to_owned(), message.clone())),
            message: Some(message),
            marker: CreateMarker::Remove,
            error_class: Some(ErrorClass::Terminal),
            ..Self::new(ReconcileState::Failed)
        }
    }

    /// A failed call: terminal errors fail the object, others keep `state` and back off; a call
    /// the object shares with others failing is a wait ([`Self::waiting_on_shared`]).
    pub(crate) fn error(state: ReconcileState, error: ExternalError) -> Self {
        if error.shared {
            return Self::waiting_on_shared(state, error);
        }
        if error.class == ErrorClass::Terminal {
            return Self::failed(&error.reason, error.message);
        }
        Self {
            synced: (false, error.reason.clone(), error.message.clone()),
            warning: Some((error.reason, error.message.clone())),
            message: Some(error.message),
            requeue: Requeue::AfterError(error.class),
            error_class: Some(error.class),
            ..Self::new(state)
        }
    }

    /// The object waits on a call it shares with others, which fails (issue 37: 39 of 40 Certs
    /// created during an ACM outage said nothing while it lasted). It says so from its first
    /// look — `Synced=False` with the wait's reason and message (what it waits for, AWS's
    /// answer, since when), and `Ready=False` likewise unless it is Ready (what it holds still
    /// serves) — and the same words at every retry are no new write: no `lastError` with its
    /// attempt count and retry time, and no Warning event per retry (the state's event, when it
    /// changes, carries the message once). It backs off as after any error, and is woken
    /// sooner when the call recovers, where the operator can tell.
    pub(crate) fn waiting_on_shared(state: ReconcileState, error: ExternalError) -> Self {
        let ready = (state != ReconcileState::Succeeded).then(|| (false, error.reason.clone(), error.message.clone()));
        Self {
            ready,
            synced: (false, error.reason.clone(), error.message.clone()),
            message: Some(error.message),
            requeue: Requeue::AfterError(error.class),
            ..Self::new(state)
        }
    }

    /// Reconciling is paused: nothing is done, and `Synced=False` says so.
    pub(crate) fn paused(state: ReconcileState, message: String) -> Self {
        Self { synced: (false, "ReconcilePaused".to_owned(), message), ..Self::new(state) }
    }

    /// An annotation the runtime cannot act on: `Synced=False` and a Warning event, both naming the
    /// accepted values; the state is kept.
    pub(crate) fn invalid_annotation(state: ReconcileState, message: String) -> Self {
        Self {
            synced: (false, "InvalidAnnotation".to_owned(), message.clone()),
            warning: Some(("InvalidAnnotation".to_owned(), message)),
            ..Self::new(state)
        }
    }

    /// The resource exists and is ready. The create-pending marker goes with it in every case,
    /// including an adoption after a crash between create and status write: the marker only guards
    /// a create that may be in flight, and this one is known to have landed.
    pub(crate) fn ready() -> Self {
        Self {
            ready: Some((true, "Available".to_owned(), "the external resource is ready".to_owned())),
            drift_detected: Some(false),
            marker: CreateMarker::Remove,
            ..Self::new(ReconcileState::Succeeded)
        }
    }

    /// Ready with `spec` applied.
    pub(crate) fn ready_with(spec: &str) -> Self {
        Self { last_applied: Some(spec.to_owned()), ..Self::ready() }
    }

    /// The create call follows on the next reconcile, after the Creating state's first (short)
    /// requeue: the status write that carries the marker does not trigger a reconcile itself.
    pub(crate) fn mark_creating(token: &str, spec: &str) -> Self {
        Self {
            marker: CreateMarker::Write { token: token.to_owned(), spec: spec.to_owned() },
            ..Self::waiting(ReconcileState::Creating, "Creating", "creating the external resource".to_owned())
        }
    }

    /// Where a create, update or recreate's delete led, for the spec (`spec`) it was made for.
    pub(crate) fn after_call(next: AfterCall, token: &str, spec: &str, creating: bool) -> Self {
        match next {
            AfterCall::MoveTo(ReconcileState::Succeeded) => Self::ready_with(spec),
            AfterCall::MoveTo(state) => Self {
                marker: CreateMarker::Remove,
                last_applied: Some(spec.to_owned()),
                ..Self::waiting(state, "Verifying", "waiting for the external resource to become ready".to_owned())
            },
            AfterCall::MarkCreating => Self::mark_creating(token, spec),
            // A failed create keeps its marker (unless terminal): the retry reuses the token.
            AfterCall::Error { retry_in, error } => {
                let mut conclusion = Self::error(retry_in, error);
                if creating && conclusion.state == ReconcileState::Creating {
                    conclusion.marker = CreateMarker::Unchanged;
                }
                conclusion
            }
        }
    }

    pub(crate) fn drifted(state: ReconcileState, policy: DriftPolicy, difference: String) -> Self {
        let message = format!("the external resource drifted from the spec: {difference} (drift-policy {policy})");
        let synced = match policy {
            DriftPolicy::Report => (false, "DriftDetected".to_owned(), message.clone()),
            DriftPolicy::Enforce | DriftPolicy::Suspend => (true, "DriftIgnored".to_owned(), message.clone()),
        };
        Self { synced, drift_detected: Some(true), message: Some(message), ..Self::new(state) }
    }

    /// The external resource disappeared and the drift policy leaves it missing: drift, and no
    /// longer Ready.
    pub(crate) fn missing(state: ReconcileState, policy: DriftPolicy) -> Self {
        let message = "the external resource no longer exists".to_owned();
        Self {
            ready: Some((false, "ExternalResourceMissing".to_owned(), message.clone())),
            warning: Some(("ExternalResourceMissing".to_owned(), format!("{message} (drift-policy {policy}: not recreated)"))),
            ..Self::drifted(state, policy, message)
        }
    }

    /// The success hook failed: the object stays Ready (the resource is), but not Synced.
    pub(crate) fn hook_failed(&mut self, error: ExternalError) {
        self.synced = (false, "SuccessHookFailed".to_owned(), error.message.clone());
        self.warning = Some(("SuccessHookFailed".to_owned(), error.message));
        self.requeue = Requeue::AfterError(error.class);
        self.error_class = Some(error.class);
    }

    /// `next` — the status read, with what the reconcile changed (observation, last applied spec,
    /// handled retry request) — with this conclusion applied. `delay` is when the object is looked
    /// at again (`None`: only on a change).
    pub(crate) fn status<O>(
        &self,
        current: &ManagedStatus<O>,
        mut next: ManagedStatus<O>,
        generation: Option<i64>,
        now: jiff::Timestamp,
        delay: Option<Duration>,
    ) -> ManagedStatus<O> {
        if current.reconcile_state != Some(self.state) {
            next.reconcile_state_since = Some(Time(now));
        }
        next.reconcile_state = Some(self.state);
        next.message = self.message.clone();
        next.observed_generation = generation;
        next.last_error = match (self.error_class, &self.warning, delay) {
            (Some(class), Some((reason, message)), Some(delay)) => {
                let retry_at = now.checked_add(delay).unwrap_or(now);
                Some(LastError::after(current.last_error.as_ref(), class, reason, message, now, retry_at))
            }
            _ => None,
        };
        match &self.marker {
            CreateMarker::Unchanged => {}
            CreateMarker::Write { token, spec } => {
                next.create_pending = Some(CreatePending { token: token.clone(), since: Time(now), spec: Some(spec.clone()) });
            }
            CreateMarker::Remove => next.create_pending = None,
        }
        if let Some(drift) = self.drift_detected {
            next.drift_detected = drift.then_some(true);
        }
        next.conditions = self.conditions(std::mem::take(&mut next.conditions), generation);
        keep_marker_time(current, &mut next);
        next
    }

    /// The status's conditions after this reconcile, computed in one pass over the current ones:
    /// the runtime's `Ready` (kept when the conclusion does not decide it) and `Synced`, then the
    /// operator's, as its calls returned them (see [`Conditions`]).
    fn conditions(&self, mut conditions: Vec<Condition>, generation: Option<i64>) -> Vec<Condition> {
        if let Some((status, reason, message)) = &self.ready {
            set_condition(&mut conditions, condition(READY, *status, reason, message, generation));
        } else if !conditions.iter().any(|c| c.type_ == READY) {
            set_condition(&mut conditions, condition(READY, false, self.state.as_str(), "", generation));
        }
        let (synced, reason, message) = &self.synced;
        set_condition(&mut conditions, condition(SYNCED, *synced, reason, message, generation));
        for (type_, operator) in self.operator_conditions.iter().filter(|(type_, _)| *type_ != READY && *type_ != SYNCED) {
            match operator {
                Some(operator) => set_condition(&mut conditions, operator.clone()),
                None => conditions.retain(|c| c.type_ != type_),
            }
        }
        conditions
    }

    /// The events this conclusion publishes, given the state before it and the failure its
    /// status recorded: the new state's when it changed, and the warning, unless the Failed
    /// state's own event carries it, or the object stays Failed for the failure its status
    /// records already (the same reason and message): a failure is announced once, not again
    /// at each retry on the Failed interval nor after each restart of the operator.
    pub(crate) fn events(&self, previous: Option<ReconcileState>, recorded: Option<&LastError>) -> Vec<(EventType, String, String)> {
        let mut events = Vec::new();
        let state_changed = previous != Some(self.state);
        if state_changed {
            let note = self.message.clone().unwrap_or_else(|| format!("state is now {}", self.state));
            let kind = if self.state == ReconcileState::Failed { EventType::Warning } else { EventType::Normal };
            events.push((kind, self.state.as_str().to_owned(), note));
        }
        let failed = self.state == ReconcileState::Failed;
        // The Failed state's own event carries the failure when the object just failed.
        let failure_announced = state_changed && failed;
        let announced_before = |reason: &str, note: &str| {
            failed
                && !state_changed
                && recorded.is_some_and(|last| last.class == ErrorClass::Terminal && last.reason == reason && last.message == note)
        };
        if let Some((reason, note)) = &self.warning
            && !failure_announced
            && !announced_before(reason, note)
        {
            events.push((EventType::Warning, reason.clone(), note.clone()));
        }
        events
    }
}

/// The marker's timestamp is when it was first written for this spec, not when it was last
/// re-set: operators may tie a create to it (one create, however often it is retried).
fn keep_marker_time<O>(current: &ManagedStatus<O>, next: &mut ManagedStatus<O>) {
    if let (Some(old), Some(new)) = (&current.create_pending, &mut next.create_pending)
        && old.token == new.token
        && old.spec == new.spec
    {
        new.since = old.since.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_conditions_are_set_or_removed_as_the_calls_said_others_kept_and_ready_and_synced_stay_the_runtimes() {
        let current = vec![
            condition(READY, true, "Available", "", Some(1)),
            condition(SYNCED, true, "ReconcileSuccess", "", Some(1)),
            condition("DNSReady", false, "DNSPropagating", "", Some(1)),
            condition("CertificateReady", true, "CertificateAttached", "", Some(1)),
            condition("Renewed", false, "RenewalFailed", "", Some(1)),
        ];
        let dns_since = current[2].last_transition_time.clone();
        let mut verified = Conditions::default();
        verified.set(condition("DNSReady", true, "DNSReady", "", Some(2)));
        verified.set(condition(READY, false, "Hijacked", "", Some(2)));
        verified.remove("CertificateReady");
        let mut updated = Conditions::default();
        updated.set(condition("DNSReady", false, "DNSRecordCreating", "", Some(2)));
        verified.then(updated);
        let mut conclusion = Conclusion::ready();
        conclusion.operator_conditions = verified;
        let conditions = conclusion.conditions(current, Some(2));
        let seen: Vec<(&str, &str)> = conditions.iter().map(|c| (c.type_.as_str(), c.reason.as_str())).collect();
        assert_eq!(
            seen,
            [(READY, "Available"), (SYNCED, "ReconcileSuccess"), ("DNSReady", "DNSRecordCreating"), ("Renewed", "RenewalFailed")],
            "the later call wins, a removed type goes, one not named stays"
        );
        assert_eq!(conditions[2].last_transition_time, dns_since, "same status: the transition time stays");
    }

    fn reasons(events: Vec<(EventType, String, String)>) -> Vec<String> {
        events.into_iter().map(|e| e.1).collect()
    }

    #[test]
    fn a_wait_on_a_shared_call_is_said_once_with_no_retry_count_and_no_event_per_retry() {
        let waiting = ExternalError::retryable("SharedCallFailing", "waiting for the listing: it has been failing since 12:00").shared();
        let conclusion = Conclusion::error(ReconcileState::Pending, waiting.clone());
        let current = ManagedStatus::<()>::default();
        let now = jiff::Timestamp::now();
        let first = conclusion.status(&current, current.clone(), Some(1), now, Some(Duration::from_secs(1)));
        assert_eq!(first.last_error, None, "no attempt count or retry time that change with each retry");
        let synced = first.condition(SYNCED).expect("Synced");
        assert_eq!((synced.status.as_str(), synced.reason.as_str()), ("False", "SharedCallFailing"));
        assert_eq!(first.condition(READY).map(|c| c.message.as_str()), Some(waiting.message.as_str()), "what it waits for, at once");
        let events: Vec<String> = conclusion.events(None, None).into_iter().map(|e| e.1).collect();
        assert_eq!(events, ["Pending"], "the state's event says it, once");
        let again = Conclusion::error(ReconcileState::Pending, waiting);
        let later = now.checked_add(jiff::SignedDuration::from_secs(5)).expect("in range");
        let second = again.status(&first, first.clone(), Some(1), later, Some(Duration::from_secs(2)));
        assert_eq!(
            serde_json::to_value(&second).expect("serializes"),
            serde_json::to_value(&first).expect("serializes"),
            "a retry writes nothing"
        );
        assert!(again.events(Some(ReconcileState::Pending), second.last_error.as_ref()).is_empty(), "and publishes nothing");
    }

    #[test]
    fn a_failure_is_announced_once_by_the_failed_states_event() {
        let failed = Conclusion::failed("Invalid", "bad spec".to_owned());
        assert_eq!(reasons(failed.events(Some(ReconcileState::Creating), None)), ["Failed"]);
    }

    #[test]
    fn a_failure_the_status_records_already_is_not_announced_again_at_a_retry_or_after_a_restart() {
        let now = jiff::Timestamp::now();
        let recorded = |reason: &str, message: &str| LastError::after(None, ErrorClass::Terminal, reason, message, now, now);
        let failed = Conclusion::failed("Invalid", "bad spec".to_owned());
        let same = recorded("Invalid", "bad spec");
        assert_eq!(reasons(failed.events(Some(ReconcileState::Failed), Some(&same))), Vec::<String>::new());
        let other_words = recorded("Invalid", "another bad spec");
        assert_eq!(reasons(failed.events(Some(ReconcileState::Failed), Some(&other_words))), ["Invalid"], "a new failure is told");
        assert_eq!(reasons(failed.events(Some(ReconcileState::Failed), None)), ["Invalid"], "none recorded: told");
        let retrying = Conclusion::error(ReconcileState::Creating, ExternalError::retryable("Throttling", "slow down"));
        let recorded_retry = LastError::after(None, ErrorClass::Retryable, "Throttling", "slow down", now, now);
        assert_eq!(
            reasons(retrying.events(Some(ReconcileState::Creating), Some(&recorded_retry))),
            ["Throttling"],
            "retries keep their warnings"
        );
    }
}
