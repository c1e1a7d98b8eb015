//! What Blockwork knows about one object, gathered into one vocabulary for every kind: the
//! [`Report`]. Built by pure functions from the objects as the API server returned them (the
//! object, its events, what it owns or references), so every line `blockwork explain` prints is
//! unit-testable; [`crate::read`] does the reads.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use crate::catalog::Scope;

/// The kinds `blockwork status` and `explain` know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Kind {
    Cert,
    DistributionTenant,
    /// An Ingress that names Certs (the Ingress controller's annotations).
    Ingress,
    Cache,
    /// A Secret the key rotator reads (`<prefix>/source-secret: "true"`).
    RotatorSource,
    /// A Secret the key rotator writes.
    RotatorTarget,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cert => "Cert",
            Self::DistributionTenant => "DistributionTenant",
            Self::Ingress => "Ingress",
            Self::Cache => "Cache",
            Self::RotatorSource | Self::RotatorTarget => "Secret",
        }
    }

    /// How `KIND/NAME` names it on the command line.
    pub fn short(self) -> &'static str {
        match self {
            Self::Cert => "cert",
            Self::DistributionTenant => "dt",
            Self::Ingress => "ingress",
            Self::Cache => "cache",
            Self::RotatorSource | Self::RotatorTarget => "secret",
        }
    }

    pub fn scope(self) -> Scope {
        match self {
            Self::Cert => Scope::Cert,
            Self::DistributionTenant => Scope::DistributionTenant,
            Self::Ingress => Scope::Ingress,
            Self::Cache => Scope::Cache,
            Self::RotatorSource | Self::RotatorTarget => Scope::Rotator,
        }
    }
}

/// A condition as `explain` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: Timestamp,
}

impl ConditionView {
    pub fn from_condition(condition: &Condition) -> Self {
        Self {
            type_: condition.type_.clone(),
            status: condition.status.clone(),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
            since: condition.last_transition_time.0,
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The failure the controller retries.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorView {
    pub reason: String,
    pub message: String,
    /// `Terminal`, `Retryable`, `Throttled` or `NotFound`; `None` where the controller does not
    /// record it (the rotator; a Cache's condition without a `lastError`).
    pub class: Option<String>,
    pub since: Option<Timestamp>,
    /// Reconciles in a row that ended with it.
    pub attempts: Option<u32>,
    pub retry_at: Option<Timestamp>,
}

impl ErrorView {
    /// The record a controller keeps in `status.lastError`.
    pub fn from_last_error(e: &blockwork_runtime::status::LastError) -> Self {
        Self {
            reason: e.reason.clone(),
            message: e.message.clone(),
            class: Some(format!("{:?}", e.class)),
            since: Some(e.since.0),
            attempts: Some(e.attempts),
            retry_at: Some(e.retry_at.0),
        }
    }
}

/// Where a policy's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    Annotation,
    Spec,
    /// The controller's default (for some policies a flag of `blockwork run`).
    Default,
}

/// One policy in effect.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Policy {
    /// `paused`, `access`, `deletion`, `drift`.
    pub name: &'static str,
    pub value: String,
    pub origin: Origin,
    /// Where exactly: the annotation or field, or the flag.
    pub source: String,
}

/// Something the object needs, and its state as far as Blockwork knows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reference {
    /// e.g. `hosted zone`, `Secret`, `distribution`, `source`.
    pub what: String,
    pub name: String,
    pub state: String,
    pub ok: bool,
}

/// A Kubernetes object the controller made for this one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Owned {
    pub kind: String,
    pub name: String,
    pub state: String,
    pub ready: bool,
}

/// One line of the external resource as last observed, or of a key slot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Field {
    pub label: String,
    pub value: String,
}

impl Field {
    pub fn new(label: impl Into<String>, value: impl Into<String>) -> Self {
        Self { label: label.into(), value: value.into() }
    }
}

/// An event about the object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub count: i32,
    pub last_seen: Option<Timestamp>,
}

impl EventView {
    pub fn from_event(event: &Event) -> Self {
        let series = event.series.as_ref();
        let last_seen = series
            .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
            .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.event_time.as_ref().map(|t| t.0))
            .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0));
        Self {
            type_: event.type_.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            note: event.message.clone().unwrap_or_default(),
            count: series.and_then(|s| s.count).or(event.count).unwrap_or(1),
            last_seen,
        }
    }

    pub fn is_warning(&self) -> bool {
        self.type_ == "Warning"
    }
}

/// Everything `explain` tells about one object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    /// The state: the runtime's `reconcileState`, a Cache's phase, or the rotator's word.
    pub state: String,
    /// The operator's own state beside it (a Cert's `status.state`).
    pub operator_state: Option<String>,
    pub state_since: Option<Timestamp>,
    /// `None` where the kind has no Ready condition (rotator Secrets).
    pub ready: Option<bool>,
    pub message: Option<String>,
    pub conditions: Vec<ConditionView>,
    pub last_error: Option<ErrorView>,
    /// Set while the controller has not seen the latest spec: (generation, observed).
    pub behind: Option<(i64, i64)>,
    pub deleting: bool,
    pub policies: Vec<Policy>,
    pub references: Vec<Reference>,
    /// The objects that use this one (a Cert's DistributionTenants and Ingresses).
    pub used_by: Vec<Reference>,
    /// The external resource (or the key set) as last observed.
    pub observed: Vec<Field>,
    pub owned: Vec<Owned>,
    /// Newest first.
    pub events: Vec<EventView>,
    /// Facts about this object that explain its wait, with numbers (`explain` prints them as
    /// "Why:"; each kind writes its own in [`crate::kinds`]).
    pub notes: Vec<String>,
    /// The trace of the reconcile that last changed the status, when the operator exports traces.
    pub trace_id: Option<String>,
}

impl Report {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            state: String::new(),
            operator_state: None,
            state_since: None,
            ready: None,
            message: None,
            conditions: Vec::new(),
            last_error: None,
            behind: None,
            deleting: false,
            policies: Vec::new(),
            references: Vec::new(),
            used_by: Vec::new(),
            observed: Vec::new(),
            owned: Vec::new(),
            events: Vec::new(),
            notes: Vec::new(),
            trace_id: None,
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&ConditionView> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `kind/name` as the command line takes it.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.kind.short(), self.name)
    }

    /// Events, newest first (the order `explain` shows).
    pub fn set_events(&mut self, events: &[Event]) {
        let mut views: Vec<EventView> = events.iter().map(EventView::from_event).collect();
        views.sort_by_key(|view| std::cmp::Reverse(view.last_seen));
        self.events = views;
    }
}

/// Generation and observed generation when the controller is behind the spec.
pub fn behind(generation: Option<i64>, observed: Option<i64>) -> Option<(i64, i64)> {
    match (generation, observed) {
        (Some(generation), Some(observed)) if observed < generation => Some((generation, observed)),
        (Some(generation), None) => Some((generation, 0)),
        _ => None,
    }
}

/// The runtime's status fields, common to Cert and DistributionTenant.
pub fn runtime_status<O>(report: &mut Report, status: Option<&blockwork_runtime::ManagedStatus<O>>, generation: Option<i64>) {
    let Some(status) = status else {
        report.state = "New".to_owned();
        report.ready = Some(false);
        report.behind = behind(generation, None);
        return;
    };
    report.state = status.state().as_str().to_owned();
    report.state_since = status.reconcile_state_since.as_ref().map(|t| t.0);
    report.message = status.message.clone();
    report.conditions = status.conditions.iter().map(ConditionView::from_condition).collect();
    report.ready = Some(status.condition(blockwork_runtime::status::READY).is_some_and(|c| c.status == "True"));
    report.behind = behind(generation, status.observed_generation);
    report.last_error = status.last_error.as_ref().map(ErrorView::from_last_error);
    report.trace_id = status.last_trace_id.clone();
    if status.drift_detected == Some(true) {
        report.observed.push(Field::new("drift", "detected: the external resource differs from the last applied spec"));
    }
}

/// The runtime's policies of an object, and where each came from. `spec_drift` is the object's
/// own drift policy field, if its kind has one (`spec.driftPolicy`); `default_drift` says what
/// the controller uses without either.
pub fn runtime_policies(
    annotations: &BTreeMap<String, String>,
    spec_drift: Option<(&str, String)>,
    default_drift: (&str, &str),
    default_deletion: &str,
) -> Vec<Policy> {
    use blockwork_runtime::policy::{ACCESS_ANNOTATION, DELETION_POLICY_ANNOTATION, DRIFT_POLICY_ANNOTATION, PAUSED_ANNOTATION};
    let from_annotation = |name: &'static str, key: &str| {
        annotations.get(key).map(|value| Policy {
            name,
            value: value.trim().to_owned(),
            origin: Origin::Annotation,
            source: key.to_owned(),
        })
    };
    let default = |name: &'static str, value: &str, source: &str| Policy {
        name,
        value: value.to_owned(),
        origin: Origin::Default,
        source: source.to_owned(),
    };
    let mut policies = vec![
        from_annotation("paused", PAUSED_ANNOTATION).unwrap_or_else(|| default("paused", "false", "not annotated")),
        from_annotation("access", ACCESS_ANNOTATION).unwrap_or_else(|| default("access", "CUD", "create, update and delete")),
        from_annotation("deletion", DELETION_POLICY_ANNOTATION)
            .unwrap_or_else(|| default("deletion", default_deletion, "the controller's")),
    ];
    let drift = from_annotation("drift", DRIFT_POLICY_ANNOTATION)
        .or_else(|| spec_drift.map(|(field, value)| Policy { name: "drift", value, origin: Origin::Spec, source: field.to_owned() }))
        .unwrap_or_else(|| default("drift", default_drift.0, default_drift.1));
    policies.push(drift);
    policies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_annotation_beats_the_spec_which_beats_the_controller_s_default() {
        let spec = Some(("spec.driftPolicy", "report".to_owned()));
        let by_annotation = runtime_policies(
            &annotations(&[("blockwork.dev/drift-policy", "suspend")]),
            spec.clone(),
            ("enforce", "the controller's"),
            "Delete",
        );
        let drift = |policies: &[Policy]| policies.iter().find(|p| p.name == "drift").cloned().expect("a drift policy");
        assert_eq!((drift(&by_annotation).value.as_str(), drift(&by_annotation).origin), ("suspend", Origin::Annotation));
        let by_spec = runtime_policies(&annotations(&[]), spec, ("enforce", "the controller's"), "Delete");
        assert_eq!((drift(&by_spec).value.as_str(), drift(&by_spec).origin), ("report", Origin::Spec));
        let by_default = runtime_policies(&annotations(&[]), None, ("enforce", "the controller's --drift-policy"), "Delete");
        assert_eq!((drift(&by_default).value.as_str(), drift(&by_default).origin), ("enforce", Origin::Default));
        assert!(drift(&by_default).source.contains("--drift-policy"));
    }

    #[test]
    fn a_controller_that_never_wrote_the_status_is_behind() {
        assert_eq!(behind(Some(3), Some(2)), Some((3, 2)));
        assert_eq!(behind(Some(1), None), Some((1, 0)));
        assert_eq!(behind(Some(2), Some(2)), None);
    }
}
