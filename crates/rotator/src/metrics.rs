//! The rotator's metrics, with bounded cardinality (seed 000's two layers):
//!
//! - aggregate, fixed cardinality: `rotations_total{result}`, `errors_total{reason}` and
//!   `last_rotation_timestamp_seconds` (the latest rotation of any target);
//! - per target, bounded: `target_last_rotation_timestamp_seconds{namespace,target}` for at most
//!   `max_tracked_targets` targets; the others are counted in `targets_not_tracked`.
//!
//! [`Metrics::register`] registers unprefixed names; the caller passes a sub-registry with the
//! prefix `rotator` (the `blockwork` binary passes `blockwork_rotator`).

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::DEFAULT_MAX_TRACKED_TARGETS;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `created`, `rotated`, `updated`, `unchanged`, `blocked` or `failed`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `invalid_source`, `invalid_destination`, `target_not_managed`, `target_conflict`,
    /// `invalid_annotation`, `jwks_key_skipped`, `conflict` (a write lost a resourceVersion race)
    /// or `api`.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    pub namespace: String,
    pub target: String,
}

type Timestamp = Gauge<f64, AtomicU64>;

#[derive(Debug, Default)]
struct Tracking {
    max: usize,
    tracked: HashSet<(String, String)>,
    untracked: HashSet<(String, String)>,
}

/// Register once per process; shared by all of the rotator's watches.
#[derive(Debug)]
pub struct Metrics {
    rotations: Family<ResultLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    last_rotation: Timestamp,
    target_last_rotation: Family<TargetLabels, Timestamp>,
    targets_not_tracked: Gauge,
    tracking: Mutex<Tracking>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::unregistered();
        registry.register(
            "rotations",
            "Reconciles of a source by result: created, rotated, updated, unchanged, blocked, failed",
            metrics.rotations.clone(),
        );
        registry.register("errors", "Errors and blocked sources by reason", metrics.errors.clone());
        registry.register(
            "last_rotation_timestamp_seconds",
            "Unix time of the latest rotation or target creation of any target",
            metrics.last_rotation.clone(),
        );
        registry.register(
            "target_last_rotation_timestamp_seconds",
            "Unix time of the last rotation or creation per target, for at most max-tracked-targets targets",
            metrics.target_last_rotation.clone(),
        );
        registry.register(
            "targets_not_tracked",
            "Targets without their own last-rotation series because max-tracked-targets is reached",
            metrics.targets_not_tracked.clone(),
        );
        Arc::new(metrics)
    }

    fn unregistered() -> Self {
        Self {
            rotations: Family::default(),
            errors: Family::default(),
            last_rotation: Timestamp::default(),
            target_last_rotation: Family::default(),
            targets_not_tracked: Gauge::default(),
            tracking: Mutex::new(Tracking { max: DEFAULT_MAX_TRACKED_TARGETS, ..Tracking::default() }),
        }
    }

    /// Sets the bound of per-target series (at start-up).
    pub fn set_max_tracked_targets(&self, max: usize) {
        self.lock().max = max.max(1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracking> {
        self.tracking.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn reconciled(&self, result: &str) {
        self.rotations.get_or_create(&ResultLabels { result: result.to_owned() }).inc();
    }

    pub fn error(&self, reason: &str) {
        self.errors.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }

    /// A rotation (or creation) of a target just now, at `unix_seconds`.
    pub fn rotated(&self, namespace: &str, target: &str, unix_seconds: f64) {
        if unix_seconds > self.last_rotation.get() {
            self.last_rotation.set(unix_seconds);
        }
        self.observe(namespace, target, unix_seconds);
    }

    /// The last rotation time of a target as recorded on it (after a restart, say).
    pub fn observe(&self, namespace: &str, target: &str, unix_seconds: f64) {
        let key = (namespace.to_owned(), target.to_owned());
        let mut tracking = self.lock();
        if !tracking.tracked.contains(&key) {
            if tracking.tracked.len() >= tracking.max {
                tracking.untracked.insert(key);
                self.targets_not_tracked.set(i64::try_from(tracking.untracked.len()).unwrap_or(i64::MAX));
                return;
            }
            tracking.untracked.remove(&key);
            tracking.tracked.insert(key);
            self.targets_not_tracked.set(i64::try_from(tracking.untracked.len()).unwrap_or(i64::MAX));
        }
        drop(tracking);
        self.target_last_rotation
            .get_or_create(&TargetLabels { namespace: namespace.to_owned(), target: target.to_owned() })
            .set(unix_seconds);
    }

    /// A target no longer rotated (its source is gone): its series goes.
    pub fn forget(&self, namespace: &str, target: &str) {
        let key = (namespace.to_owned(), target.to_owned());
        let mut tracking = self.lock();
        tracking.untracked.remove(&key);
        if tracking.tracked.remove(&key) {
            self.target_last_rotation.remove(&TargetLabels { namespace: key.0, target: key.1 });
        }
        self.targets_not_tracked.set(i64::try_from(tracking.untracked.len()).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn per_target_series_are_bounded_and_the_rest_counted() {
        let mut registry = Registry::with_prefix("rotator");
        let metrics = Metrics::register(&mut registry);
        metrics.set_max_tracked_targets(2);
        for (i, target) in ["a", "b", "c", "d"].iter().enumerate() {
            metrics.rotated("ns", target, 100.0 + i as f64);
        }
        let out = text(&registry);
        assert!(out.contains(r#"rotator_target_last_rotation_timestamp_seconds{namespace="ns",target="a"} 100"#), "{out}");
        assert!(out.contains(r#"target="b""#));
        assert!(!out.contains(r#"target="c""#), "{out}");
        assert!(out.contains("rotator_targets_not_tracked 2"), "{out}");
        assert!(out.contains("rotator_last_rotation_timestamp_seconds 103"), "{out}");

        metrics.forget("ns", "a");
        metrics.forget("ns", "c");
        metrics.observe("ns", "d", 103.0);
        let out = text(&registry);
        assert!(!out.contains(r#"target="a""#), "{out}");
        assert!(out.contains(r#"target="d""#), "a freed slot is taken by the next update");
        assert!(out.contains("rotator_targets_not_tracked 0"), "{out}");
    }

    #[test]
    fn results_and_reasons_are_counted() {
        let mut registry = Registry::with_prefix("rotator");
        let metrics = Metrics::register(&mut registry);
        metrics.reconciled("rotated");
        metrics.reconciled("rotated");
        metrics.error("target_conflict");
        let out = text(&registry);
        assert!(out.contains(r#"rotator_rotations_total{result="rotated"} 2"#), "{out}");
        assert!(out.contains(r#"rotator_errors_total{reason="target_conflict"} 1"#), "{out}");
    }
}
