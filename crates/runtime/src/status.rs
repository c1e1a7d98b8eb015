//! The part of an object's status the runtime owns, and the conditions it sets.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::outcome::ErrorClass;

/// Where an object is in its lifecycle (seed 003's reconcile states).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReconcileState {
    /// Not created yet, or waiting for dependencies.
    #[default]
    Pending,
    /// About to create the external resource (the create-pending marker is set).
    Creating,
    /// An update was accepted or is being retried.
    Updating,
    /// Waiting for the external resource to become ready.
    Verifying,
    /// Ready for use.
    Succeeded,
    /// Being deleted so it can be created again.
    Recreating,
    /// Needs a person; retried on a long interval and whenever the spec changes.
    Failed,
    /// The object is being deleted and so is the external resource.
    Terminating,
}

impl ReconcileState {
    pub const ALL: [Self; 8] = [
        Self::Pending,
        Self::Creating,
        Self::Updating,
        Self::Verifying,
        Self::Succeeded,
        Self::Recreating,
        Self::Failed,
        Self::Terminating,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Creating => "Creating",
            Self::Updating => "Updating",
            Self::Verifying => "Verifying",
            Self::Succeeded => "Succeeded",
            Self::Recreating => "Recreating",
            Self::Failed => "Failed",
            Self::Terminating => "Terminating",
        }
    }
}

impl fmt::Display for ReconcileState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written before the create call and cleared with its result, so a crash in between is
/// recognised: the next attempt observes first, and creates again only with the same token.
/// It is a write-ahead record: `create` is called only under a marker written for the object's
/// current spec, so a create whose result never reached the status (a 409, a kill) made
/// something for exactly `spec`, and `verify` can look for that.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatePending {
    /// The idempotency token the create call uses (derived from the object's UID).
    pub token: String,
    /// When the marker was written (kept while it is re-written for the same spec).
    pub since: Time,
    /// The spec, as JSON, the create is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
}

/// The status of a managed object: the runtime's fields, and the operator's own observation
/// (`O`) flattened beside them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedStatus<O> {
    /// Where the runtime's state machine is: Pending, Creating, Updating, Verifying, Succeeded,
    /// Recreating, Failed or Terminating. (Operators may show their own `state` beside it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_state: Option<ReconcileState>,
    /// A human-readable explanation of the state: what it waits for, or what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready (the external resource is usable) and Synced (the last
    /// reconcile reached the external API and the resource matches the spec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The spec, as JSON, last applied to the external resource by a successful create or update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_spec: Option<String>,
    /// Set while a create call may be in flight; see the runtime's crash-safety notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_pending: Option<CreatePending>,
    /// True when the external resource was seen to differ from the last applied spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detected: Option<bool>,
    /// When `reconcileState` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_state_since: Option<Time>,
    /// Why the last reconcile failed and when the controller tries again; absent once a
    /// reconcile does not fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// The value of the `blockwork.dev/reconcile-requested-at` annotation the controller last
    /// acted on: a retry was handled when this equals the annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The OpenTelemetry trace id of the reconcile that last changed this status, when the
    /// operator exports traces (docs/observability.md): look it up in your tracing backend.
    /// `blockwork explain` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_trace_id: Option<String>,
    #[serde(flatten)]
    pub observation: O,
}

impl<O> ManagedStatus<O> {
    pub fn state(&self) -> ReconcileState {
        self.reconcile_state.unwrap_or_default()
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// A failure the controller retries: what failed, since when, and when it looks again. Written
/// with the status write of each failed reconcile (a failed reconcile is retried on a backoff,
/// so this costs at most one write per retry); the attempt count and the next retry are in
/// memory otherwise and lost on restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Terminal (needs a person; retried on the Failed interval or when the spec changes),
    /// Retryable, Throttled or NotFound.
    pub class: ErrorClass,
    /// The condition and event reason, e.g. the AWS error code.
    pub reason: String,
    pub message: String,
    /// When this error (same reason and class) was first seen, in a row.
    pub since: Time,
    /// Reconciles in a row that ended with this error.
    pub attempts: u32,
    /// When the controller tries again (sooner if the spec or an annotation changes).
    pub retry_at: Time,
}

impl LastError {
    /// The record after another failed reconcile: the same error in a row keeps its `since`
    /// and counts on; another error starts again.
    pub fn after(
        previous: Option<&Self>,
        class: ErrorClass,
        reason: &str,
        message: &str,
        now: jiff::Timestamp,
        retry_at: jiff::Timestamp,
    ) -> Self {
        let (since, attempts) = match previous {
            Some(previous) if previous.class == class && previous.reason == reason => {
                (previous.since.clone(), previous.attempts.saturating_add(1))
            }
            _ => (Time(now), 1),
        };
        Self { class, reason: reason.to_owned(), message: message.to_owned(), since, attempts, retry_at: Time(retry_at) }
    }
}

pub const READY: &str = "Ready";
pub const SYNCED: &str = "Synced";

/// Sets a condition, keeping its lastTransitionTime when the status does not change.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

pub fn condition(type_: &str, status: bool, reason: &str, message: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_condition_status_keeps_transition_time() {
        let mut conditions = vec![condition(READY, false, "Creating", "a", Some(1))];
        let first = conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(2));
        set_condition(&mut conditions, condition(READY, false, "Verifying", "b", Some(1)));
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].reason, "Verifying");
    }

    #[test]
    fn changed_condition_status_moves_transition_time() {
        let mut conditions = vec![condition(READY, false, "Creating", "a", Some(1))];
        let first = conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(2));
        set_condition(&mut conditions, condition(READY, true, "Available", "b", Some(1)));
        assert_ne!(conditions[0].last_transition_time, first);
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn the_same_error_in_a_row_keeps_its_since_and_counts_attempts() {
        let t0 = jiff::Timestamp::from_second(1_000).expect("valid");
        let t1 = jiff::Timestamp::from_second(1_060).expect("valid");
        let first = LastError::after(None, ErrorClass::Throttled, "ThrottlingException", "slow down", t0, t1);
        assert_eq!((first.attempts, first.since.0), (1, t0));
        let second = LastError::after(Some(&first), ErrorClass::Throttled, "ThrottlingException", "slow down", t1, t1);
        assert_eq!((second.attempts, second.since.0, second.retry_at.0), (2, t0, t1));
    }

    #[test]
    fn another_error_starts_counting_again() {
        let t0 = jiff::Timestamp::from_second(1_000).expect("valid");
        let t1 = jiff::Timestamp::from_second(1_060).expect("valid");
        let first = LastError::after(None, ErrorClass::Throttled, "ThrottlingException", "slow down", t0, t0);
        let other = LastError::after(Some(&first), ErrorClass::Terminal, "AccessDeniedException", "denied", t1, t1);
        assert_eq!((other.attempts, other.since.0, other.class), (1, t1, ErrorClass::Terminal));
    }

    #[test]
    fn unset_fields_are_omitted_so_server_side_apply_removes_them() {
        #[derive(Clone, Debug, Default, PartialEq, Serialize)]
        struct Observation {
            #[serde(skip_serializing_if = "Option::is_none")]
            id: Option<String>,
        }
        let status = ManagedStatus { reconcile_state: Some(ReconcileState::Pending), ..ManagedStatus::<Observation>::default() };
        assert_eq!(serde_json::to_value(&status).expect("serializes"), serde_json::json!({"reconcileState": "Pending"}));
    }
}
