//! The export's metrics (issue 30), beside seed 000's under the `cert_operator_` prefix, all with
//! bounded labels: how the exported Secrets stand (`exported_secrets{state}`, always every state),
//! the exported copies' days to expiry in the seed's six buckets, and the exports and failures
//! by reason. An exported Secret that lags ACM's certificate (ACM renewed it, the Secret still
//! holds the one before) counts as `lagging` whatever else its Cert says: that is what the
//! `ExportedSecretLagging` alert watches.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::{BucketLabels, EXPIRY_BUCKETS};

/// The export metrics' names as exposed (prefix `cert_operator_`), with their labels.
pub const EXPORT_METRICS: [(&str, &[&str]); 4] = [
    ("cert_operator_exported_secrets", &["state"]),
    ("cert_operator_exported_certificate_expiry_buckets", &["bucket"]),
    ("cert_operator_exports_total", &["why"]),
    ("cert_operator_export_failures_total", &["reason"]),
];

/// Where a Cert's exported Secret stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportState {
    /// It holds the current certificate.
    Current,
    /// The certificate is not issued yet.
    Waiting,
    /// Not written, and not going to be until someone acts: the name is someone else's Secret,
    /// export is not enabled, or the Cert is read-only.
    Refused,
    /// Changed by someone else and left so (drift policy report or suspend).
    Drifted,
    /// Exporting or writing it failed; retried.
    Failing,
}

impl ExportState {
    pub const ALL: [Self; 5] = [Self::Current, Self::Waiting, Self::Refused, Self::Drifted, Self::Failing];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Waiting => "waiting",
            Self::Refused => "refused",
            Self::Drifted => "drifted",
            Self::Failing => "failing",
        }
    }
}

/// Counted as `state="lagging"`.
const LAGGING: &str = "lagging";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhyLabels {
    pub why: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Copy, Debug, Default)]
struct Known {
    state: Option<ExportState>,
    lagging: bool,
    /// Days until the exported copy expires.
    expiry_days: Option<f64>,
}

#[derive(Debug, Default)]
pub struct ExportMetrics {
    secrets: Family<StateLabels, Gauge>,
    expiry_buckets: Family<BucketLabels, Gauge>,
    exports: Family<WhyLabels, Counter>,
    failures: Family<ReasonLabels, Counter>,
    known: Mutex<HashMap<String, Known>>,
}

impl ExportMetrics {
    /// Registers the families in `registry` (the Cert's, prefixed `cert_operator`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "exported_secrets",
            "Exporting Certs by where their Secret stands (lagging: older than ACM's certificate)",
            self.secrets.clone(),
        );
        registry.register(
            "exported_certificate_expiry_buckets",
            "Exported Secrets by days until the certificate they hold expires",
            self.expiry_buckets.clone(),
        );
        registry.register(
            "exports",
            "Certificates exported into their Secret, by why (first, renewed, repair, spec_changed)",
            self.exports.clone(),
        );
        registry.register("export_failures", "Exports or Secret writes that failed or were refused, by reason", self.failures.clone());
        self.recompute(&self.known.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The Cert `uid`'s Secret stands at `state`.
    pub fn state(&self, uid: &str, state: ExportState) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.entry(uid.to_owned()).or_default().state = Some(state);
        self.recompute(&known);
    }

    /// Whether the Cert `uid`'s Secret holds an older certificate than ACM's, and when the one
    /// it holds expires (days from now).
    pub fn copy(&self, uid: &str, lagging: bool, expiry_days: Option<f64>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = known.entry(uid.to_owned()).or_default();
        entry.lagging = lagging;
        entry.expiry_days = expiry_days;
        self.recompute(&known);
    }

    /// The Cert `uid` exports no longer (deleted, or without `spec.export`).
    pub fn forget(&self, uid: &str) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.remove(uid).is_some() {
            self.recompute(&known);
        }
    }

    /// One export written, for `why` (`first`, `renewed`, `repair`, `spec_changed`).
    pub fn exported(&self, why: &'static str) {
        self.exports.get_or_create(&WhyLabels { why: why.to_owned() }).inc();
    }

    /// One export or write that failed, or a Secret refused, with the condition's reason.
    pub fn failed(&self, reason: &str) {
        self.failures.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }

    fn recompute(&self, known: &HashMap<String, Known>) {
        let mut states: HashMap<&str, i64> = ExportState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        states.insert(LAGGING, 0);
        let mut buckets = [0i64; EXPIRY_BUCKETS.len()];
        for entry in known.values() {
            let state = if entry.lagging { Some(LAGGING) } else { entry.state.map(ExportState::as_str) };
            if let Some(state) = state {
                *states.entry(state).or_default() += 1;
            }
            if let Some(days) = entry.expiry_days
                && let Some(index) = EXPIRY_BUCKETS.iter().position(|(_, upper)| days < *upper)
            {
                buckets[index] += 1;
            }
        }
        for (state, count) in states {
            self.secrets.get_or_create(&StateLabels { state: state.to_owned() }).set(count);
        }
        for ((bucket, _), count) in EXPIRY_BUCKETS.iter().zip(buckets) {
            self.expiry_buckets.get_or_create(&BucketLabels { bucket: (*bucket).to_owned() }).set(count);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scrape(metrics: &ExportMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(registry.sub_registry_with_prefix("cert_operator"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn every_state_and_bucket_is_a_series_and_a_lagging_secret_counts_as_lagging() {
        let metrics = ExportMetrics::default();
        metrics.state("a", ExportState::Current);
        metrics.copy("a", false, Some(300.0));
        metrics.state("b", ExportState::Current);
        metrics.copy("b", true, Some(5.0));
        metrics.state("c", ExportState::Refused);
        let text = scrape(&metrics);
        assert_eq!(text.matches("cert_operator_exported_secrets{").count(), 6, "{text}");
        assert!(text.contains(r#"cert_operator_exported_secrets{state="current"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_exported_secrets{state="lagging"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_exported_secrets{state="refused"} 1"#), "{text}");
        assert_eq!(text.matches("cert_operator_exported_certificate_expiry_buckets{").count(), 6, "{text}");
        assert!(text.contains(r#"cert_operator_exported_certificate_expiry_buckets{bucket="0-7d"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_exported_certificate_expiry_buckets{bucket="90d+"} 1"#), "{text}");

        metrics.copy("b", false, Some(395.0));
        metrics.forget("c");
        let text = scrape(&metrics);
        assert!(text.contains(r#"cert_operator_exported_secrets{state="current"} 2"#), "{text}");
        assert!(text.contains(r#"cert_operator_exported_secrets{state="lagging"} 0"#), "{text}");
        assert!(text.contains(r#"cert_operator_exported_secrets{state="refused"} 0"#), "{text}");
    }

    #[test]
    fn exports_and_failures_are_counted_by_their_bounded_labels() {
        let metrics = ExportMetrics::default();
        metrics.exported("first");
        metrics.exported("renewed");
        metrics.failed("SecretConflict");
        let text = scrape(&metrics);
        assert!(text.contains(r#"cert_operator_exports_total{why="renewed"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_export_failures_total{reason="SecretConflict"} 1"#), "{text}");
    }
}
