//! Metrics every operator on the runtime shares. Labels are bounded: controller names, states,
//! results, operations and error classes, never object names. The duration histograms carry the
//! trace of an observation per bucket as its exemplar ([`crate::trace::exemplar`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

use crate::status::ReconcileState;
use crate::trace::exemplar::{self, TracedHistogram};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success` or an error category.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub controller: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub controller: String,
    pub operation: String,
    /// `success`, or the error class of a failed call.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub controller: String,
    pub operation: String,
}

/// Shared by all controllers of a process; register once.
#[derive(Debug)]
pub struct RuntimeMetrics {
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, TracedHistogram>,
    objects: Family<StateLabels, Gauge>,
    external_calls: Family<CallLabels, Counter>,
    external_call_duration: Family<OperationLabels, TracedHistogram>,
    /// The last state counted for each object, so the gauge moves on transitions and deletions.
    states: Mutex<HashMap<(String, String), ReconcileState>>,
}

impl RuntimeMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| TracedHistogram::new(exponential_buckets(0.005, 2.0, 14))),
            objects: Family::default(),
            external_calls: Family::default(),
            external_call_duration: Family::new_with_constructor(|| TracedHistogram::new(exponential_buckets(0.005, 2.0, 14))),
            states: Mutex::default(),
        };
        registry.register("reconciles", "Reconciles by controller and result", metrics.reconciles.clone());
        registry.register("reconcile_duration_seconds", "Duration of reconciles", metrics.reconcile_duration.clone());
        registry.register("managed_objects", "Managed objects by lifecycle state", metrics.objects.clone());
        registry.register("external_calls", "Calls to external APIs by operation and result", metrics.external_calls.clone());
        registry.register(
            "external_call_duration_seconds",
            "Duration of calls to external APIs by operation",
            metrics.external_call_duration.clone(),
        );
        Arc::new(metrics)
    }

    /// One reconcile, observed within its span (its exemplar).
    pub fn reconciled(&self, controller: &str, result: &str, duration: Duration) {
        self.reconciles.get_or_create(&ReconcileLabels { controller: controller.to_owned(), result: result.to_owned() }).inc();
        let histogram = self.reconcile_duration.get_or_create(&ControllerLabels { controller: controller.to_owned() });
        exemplar::observe(&histogram, duration.as_secs_f64());
    }

    /// One call to the operator, observed within the reconcile's span (its exemplar).
    pub fn external_call(&self, controller: &str, operation: &str, result: &str, duration: Duration) {
        self.external_calls
            .get_or_create(&CallLabels { controller: controller.to_owned(), operation: operation.to_owned(), result: result.to_owned() })
            .inc();
        let histogram = self
            .external_call_duration
            .get_or_create(&OperationLabels { controller: controller.to_owned(), operation: operation.to_owned() });
        exemplar::observe(&histogram, duration.as_secs_f64());
    }

    /// Records the state of one object (by UID); `None` when the object is gone.
    pub fn object_state(&self, controller: &str, uid: &str, state: Option<ReconcileState>) {
        let mut states = self.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (controller.to_owned(), uid.to_owned());
        let previous = match state {
            Some(state) => states.insert(key, state),
            None => states.remove(&key),
        };
        if previous == state {
            return;
        }
        if let Some(previous) = previous {
            self.gauge(controller, previous).dec();
        }
        if let Some(state) = state {
            self.gauge(controller, state).inc();
        }
    }

    fn gauge(&self, controller: &str, state: ReconcileState) -> Gauge {
        self.objects.get_or_create(&StateLabels { controller: controller.to_owned(), state: state.as_str().to_owned() }).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn scrape(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).expect("encodes");
        out
    }

    #[test]
    fn object_gauge_follows_transitions_and_deletion() {
        let mut registry = Registry::with_prefix("blockwork");
        let metrics = RuntimeMetrics::register(&mut registry);
        metrics.object_state("widget", "u1", Some(ReconcileState::Pending));
        metrics.object_state("widget", "u1", Some(ReconcileState::Succeeded));
        metrics.object_state("widget", "u2", Some(ReconcileState::Succeeded));
        metrics.object_state("widget", "u2", None);
        let text = scrape(&registry);
        assert!(text.contains(r#"blockwork_managed_objects{controller="widget",state="Succeeded"} 1"#), "{text}");
        assert!(text.contains(r#"blockwork_managed_objects{controller="widget",state="Pending"} 0"#), "{text}");
    }

    #[test]
    fn reconcile_and_call_counters_are_labelled_by_result() {
        let mut registry = Registry::with_prefix("blockwork");
        let metrics = RuntimeMetrics::register(&mut registry);
        metrics.reconciled("widget", "success", Duration::from_millis(3));
        metrics.external_call("widget", "create", "throttled", Duration::from_millis(3));
        let text = scrape(&registry);
        assert!(text.contains(r#"blockwork_reconciles_total{controller="widget",result="success"} 1"#), "{text}");
        assert!(text.contains(r#"blockwork_external_calls_total{controller="widget",operation="create",result="throttled"} 1"#), "{text}");
    }
}
