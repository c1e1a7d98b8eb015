//! The Ingress controller's metric, with fixed cardinality: `reconciles_total{outcome}`, one
//! count per look at an Ingress that concerns Blockwork, by what came of it. [`IngressMetrics::register`]
//! registers unprefixed names; the binary passes a sub-registry with the prefix `blockwork_ingress`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What came of a look at an Ingress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The load balancer's annotation was written.
    Written,
    /// Blockwork's value was removed.
    Removed,
    /// As it should be.
    Unchanged,
    /// A named Cert is not Ready.
    Waiting,
    /// Someone else's value stands in the way.
    Conflict,
    /// An annotation is invalid.
    Invalid,
    /// The Kubernetes API failed; retried.
    Error,
}

impl Outcome {
    pub const ALL: [Self; 7] = [Self::Written, Self::Removed, Self::Unchanged, Self::Waiting, Self::Conflict, Self::Invalid, Self::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::Removed => "removed",
            Self::Unchanged => "unchanged",
            Self::Waiting => "waiting",
            Self::Conflict => "conflict",
            Self::Invalid => "invalid",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Register once per process; shared by every namespace's watch.
#[derive(Debug, Default)]
pub struct IngressMetrics {
    reconciles: Family<OutcomeLabels, Counter>,
}

impl IngressMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::default();
        registry.register(
            "reconciles",
            "Looks at Ingresses that name Certs, by outcome: written, removed, unchanged, waiting, conflict, invalid, error",
            metrics.reconciles.clone(),
        );
        // Every outcome from the start: a rate over a series that appears later misses its first count.
        for outcome in Outcome::ALL {
            let _ = metrics.reconciles.get_or_create(&OutcomeLabels { outcome: outcome.as_str() });
        }
        Arc::new(metrics)
    }

    pub fn reconciled(&self, outcome: Outcome) {
        self.reconciles.get_or_create(&OutcomeLabels { outcome: outcome.as_str() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_a_series_from_the_start() {
        let mut registry = Registry::default();
        let metrics = IngressMetrics::register(&mut registry);
        metrics.reconciled(Outcome::Written);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("reconciles_total{outcome=\"written\"} 1"), "{text}");
        assert_eq!(text.matches("reconciles_total{").count(), Outcome::ALL.len(), "{text}");
    }
}
