//! What an external resource manager reports back to the runtime (seed 003's outcome enums).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the runtime reacts to a failed call to the external API. In status (`lastError.class`)
/// as `Terminal`, `Retryable`, `Throttled` or `NotFound`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ErrorClass {
    /// Needs a person: the object goes to `Failed` and is retried on the `Failed` interval, or
    /// as soon as its spec changes.
    Terminal,
    /// Transient (5xx, network): the object keeps its state and is retried with backoff.
    Retryable,
    /// The API asked us to slow down: retried with backoff, never sooner than the throttle floor.
    Throttled,
    /// The external resource does not exist. Deleting it then counts as done.
    NotFound,
}

impl ErrorClass {
    /// A bounded label for metrics and event reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Retryable => "retryable",
            Self::Throttled => "throttled",
            Self::NotFound => "not_found",
        }
    }
}

/// A failed external call, already sanitized of anything users must not read (account ids,
/// ARNs): the message goes to status and events as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExternalError {
    pub class: ErrorClass,
    /// A CamelCase reason for conditions and events, e.g. the API's error code.
    pub reason: String,
    pub message: String,
}

impl ExternalError {
    pub fn new(class: ErrorClass, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self { class, reason: reason.into(), message: message.into() }
    }
    pub fn terminal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Terminal, reason, message)
    }
    pub fn retryable(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Retryable, reason, message)
    }
    pub fn throttled(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Throttled, reason, message)
    }
    pub fn not_found(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::NotFound, reason, message)
    }
}

/// What `verify` observed of the external resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// It does not exist (never created, or deleted outside Kubernetes).
    Missing,
    /// It exists but differs from the spec in a way an update can fix; the text says how.
    UpdateRequired(String),
    /// It exists but differs in a way only delete and create can fix; the text says how.
    RecreateRequired(String),
    /// It is being created or updated asynchronously; the text says what it waits for.
    InProgress(String),
    /// It exists, matches the spec and is ready for use.
    Ready,
    /// It could not be observed.
    Error(ExternalError),
    /// It is being deleted.
    Deleting,
}

/// What `create` or `update` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutateOutcome {
    /// Accepted; `verify` will tell when it is done.
    AwaitingVerification,
    /// Done and ready.
    Succeeded,
    Error(ExternalError),
}

/// What `delete` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Accepted; `verify` will report `Missing` when it is gone.
    AwaitingVerification,
    /// Gone.
    Succeeded,
    Error(ExternalError),
}

/// The external operations, as metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Verify,
    Create,
    Update,
    Delete,
    SuccessHook,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Verify => "verify",
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::SuccessHook => "success_hook",
        })
    }
}
