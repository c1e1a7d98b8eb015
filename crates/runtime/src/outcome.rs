//! What an external resource manager reports back to the runtime (seed 003's outcome enums).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
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

/// What an answer says of whether a thing being deleted still exists: one vocabulary for every
/// deletion path of every operator, decided where the answer is read (`docs/adr/0013-deleting-what-does-not-exist.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Existence {
    /// It cannot exist: the answer proves it (not found; the hosted zone that held it is gone;
    /// never written). Deleting it is done.
    Gone,
    /// It exists and stays until someone acts (an ACM certificate in use): the deletion waits,
    /// and the error says what to do.
    StillThere,
    /// The answer leaves it open (access denied, throttling, 5xx, a timeout): the deletion keeps
    /// the finalizer and retries; blocked longer than `Timing::deletion_blocked_after`, it says
    /// so plainly (reason `DeletionBlocked`).
    Unknown,
}

impl Existence {
    /// What a Kubernetes API answer says of the object it was about, for a deletion: 404 — gone;
    /// 409 — still there (it changed since it was read); anything else (forbidden, a timeout, a
    /// server error) — unknown.
    pub fn of_kube(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 404 => Self::Gone,
            kube::Error::Api(status) if status.code == 409 => Self::StillThere,
            _ => Self::Unknown,
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
    /// What the failure says of the thing it was about, for a deletion: `Gone` for `NotFound`,
    /// `StillThere` when the operator says so ([`Self::still_there`]), otherwise `Unknown`.
    pub existence: Existence,
    /// The failure is of a call this object shares with others (an account's certificate
    /// listing, a hosted zone's records, the account's throttling backoff), not of its own: the
    /// object waits on it and says so — what it waits for, AWS's answer and since when, in the
    /// message — in one status write, without a retry count or an event per retry
    /// ([`Self::shared`]).
    pub shared: bool,
}

impl ExternalError {
    pub fn new(class: ErrorClass, reason: impl Into<String>, message: impl Into<String>) -> Self {
        let existence = if class == ErrorClass::NotFound { Existence::Gone } else { Existence::Unknown };
        Self { class, reason: reason.into(), message: message.into(), existence, shared: false }
    }
    /// The same failure, of a call other objects share: the object waits on it (see the field).
    /// Its message must be the same for every retry while the call fails (no attempt count, no
    /// time left), so that the status is written once.
    pub fn shared(self) -> Self {
        Self { shared: true, ..self }
    }
    /// The thing exists and is not deleted until a person acts (terminal): the message says how.
    pub fn still_there(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self { existence: Existence::StillThere, ..Self::terminal(reason, message) }
    }
    /// The same failure, its message naming what it was about (`what: message`): a person
    /// reading it learns which thing is refused or unknown.
    pub fn concerning(self, what: impl fmt::Display) -> Self {
        Self { message: format!("{what}: {}", self.message), ..self }
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

/// What `verify` returns: data, never a write. Besides the outcome, the writes the operator
/// needs that are not a create, update or delete of the resource itself ([`Upkeep`]), which the
/// runtime runs through `ExternalResource::maintain` only where `machine::upkeep_runs` allows
/// them, the operator's conditions it decided, a merge patch of the spec, and what it derived from
/// the object for the calls after it (`ExternalResource::Derived`; `D = ()` when they need nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed<U, D = ()> {
    pub outcome: VerifyOutcome,
    pub upkeep: Vec<Upkeep<U>>,
    pub conditions: Conditions,
    /// A JSON merge patch (RFC 7386) of the object's spec (e.g. to record a value the external
    /// system assigned, such as an issued certificate's ARN). When it changes the spec, it is that
    /// reconcile's single write, instead of the status write: nothing else of the reconcile is
    /// done, the status follows on the next reconcile, which the spec change (a new generation)
    /// triggers and which applies the new spec as a spec change. The patch carries the
    /// resourceVersion read as a precondition. A patch that would change nothing is ignored, so
    /// returning the same patch again is harmless.
    pub spec_patch: Option<serde_json::Value>,
    /// Handed to the calls after `verify` in this reconcile (`Request::derived`).
    pub derived: D,
}

/// For operators that derive nothing; one that does names what it derived on every path.
impl<U> From<VerifyOutcome> for Observed<U> {
    fn from(outcome: VerifyOutcome) -> Self {
        Self { outcome, upkeep: Vec::new(), conditions: Conditions::default(), spec_patch: None, derived: () }
    }
}

impl<U, D> Observed<U, D> {
    pub fn with_upkeep(mut self, upkeep: impl IntoIterator<Item = Upkeep<U>>) -> Self {
        self.upkeep.extend(upkeep);
        self
    }
}

/// What `create`, `update`, `delete` or `maintain` did (`outcome`), and the operator's
/// conditions it decided.
#[derive(Clone, Debug, PartialEq)]
pub struct WithConditions<T> {
    pub outcome: T,
    pub conditions: Conditions,
}

impl<T> WithConditions<T> {
    /// Runs a call that decides its conditions as it goes, and returns them beside its outcome.
    pub async fn gathered(call: impl AsyncFnOnce(&mut Conditions) -> T) -> Self {
        let mut conditions = Conditions::default();
        let outcome = call(&mut conditions).await;
        Self { outcome, conditions }
    }
}

impl<T> From<T> for WithConditions<T> {
    fn from(outcome: T) -> Self {
        Self { outcome, conditions: Conditions::default() }
    }
}

/// The operator's own conditions (a tenant's `DNSReady`, a Cert's `Renewed`) as one call decided
/// them: data each call returns, beside its outcome. Each type a call names is set or removed; a
/// type that no call of the reconcile names keeps what the status has (a reconcile that calls
/// nothing, paused or waiting, keeps them all). The runtime folds the calls' conditions in the
/// order it made the calls (a later call's word on a type wins) and writes them with `Ready` and
/// `Synced`, in one pass, in the reconcile's single status write, on every path that writes status
/// (deletion, pause and invalid annotations included). `Ready` and `Synced` stay the runtime's:
/// entries of those types are ignored. A condition whose status did not change keeps its
/// `lastTransitionTime`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions(Vec<(String, Option<Condition>)>);

impl Conditions {
    /// Sets `condition` (its type's earlier word in this call is replaced).
    pub fn set(&mut self, condition: Condition) {
        let type_ = condition.type_.clone();
        self.say(type_, Some(condition));
    }

    /// Removes the condition of `type_` from the status (one that no longer applies).
    pub fn remove(&mut self, type_: &str) {
        self.say(type_.to_owned(), None);
    }

    /// These conditions, then a later call's.
    pub fn then(&mut self, later: Self) {
        for (type_, condition) in later.0 {
            self.say(type_, condition);
        }
    }

    /// Takes a later call's conditions (see [`Self::then`]) and hands back its outcome.
    pub(crate) fn after<T>(&mut self, done: WithConditions<T>) -> T {
        self.then(done.conditions);
        done.outcome
    }

    fn say(&mut self, type_: String, condition: Option<Condition>) {
        match self.0.iter_mut().find(|(t, _)| *t == type_) {
            Some(entry) => entry.1 = condition,
            None => self.0.push((type_, condition)),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, Option<&Condition>)> {
        self.0.iter().map(|(type_, condition)| (type_.as_str(), condition.as_ref()))
    }
}

/// A write `verify` found needed that is neither a create, an update nor a delete of the external
/// resource: the operator's own work around it (ACM's validation records, the DNS records of a
/// domain that left the spec, the certificates a recreate replaced, a published ConfigMap). The
/// runtime decides whether it runs (`machine::upkeep_runs`), by its purpose; `work` is the
/// operator's own description of it, handed back to `maintain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upkeep<U> {
    pub purpose: Purpose,
    pub work: U,
}

/// Why an upkeep is needed: it decides which permission it takes and when it may run.
///
/// None of these repairs drift: each writes only what the operator itself made or must make for
/// the resource it holds, never undoes someone else's change. So the drift policy does not gate
/// them by itself; a resource left drifted or missing (Report, Suspend) is not worked on at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Finishes creating the resource (ACM's validation records, which the certificate waits
    /// for, also at renewal): takes the create permission. Report and Suspend allow it: a
    /// certificate that never gets its records is not "left as it drifted", it is never made.
    FinishCreate,
    /// Finishes a spec change already applied (the DNS records of a domain that left the spec,
    /// once the resource no longer serves it): takes the update permission.
    FinishUpdate,
    /// Finishes a recreate (the resources the new one replaced, make before break): it deletes,
    /// so it takes the delete permission.
    FinishRecreate,
    /// Cleans up around the resource once it is gone, as the object is released (a published
    /// ConfigMap): only in the deletion phase, which the delete permission already decided.
    Release,
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
    /// [`Upkeep`] the machine allowed, through `maintain`.
    Upkeep,
    SuccessHook,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Verify => "verify",
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Upkeep => "upkeep",
            Self::SuccessHook => "success_hook",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({"code": code, "message": "m"})).expect("a status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_kubernetes_object_not_found_is_gone_a_conflict_still_there_and_the_rest_unknown() {
        assert_eq!(Existence::of_kube(&answered(404)), Existence::Gone);
        assert_eq!(Existence::of_kube(&answered(409)), Existence::StillThere);
        for code in [403, 429, 500] {
            assert_eq!(Existence::of_kube(&answered(code)), Existence::Unknown, "{code}");
        }
    }

    #[test]
    fn only_a_not_found_error_proves_a_thing_gone_unless_the_operator_says_it_is_still_there() {
        assert_eq!(ExternalError::not_found("NotFound", "m").existence, Existence::Gone);
        assert_eq!(ExternalError::terminal("AccessDenied", "m").existence, Existence::Unknown);
        assert_eq!(ExternalError::throttled("Throttling", "m").existence, Existence::Unknown);
        assert_eq!(ExternalError::still_there("CertificateInUse", "m").existence, Existence::StillThere);
        assert_eq!(ExternalError::still_there("CertificateInUse", "m").class, ErrorClass::Terminal);
    }
}
