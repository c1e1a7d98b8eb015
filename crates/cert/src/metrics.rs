//! The Cert operator's own metrics, seed 000 part 5's suite (the runtime's generic reconcile
//! metrics come on top). Labels are bounded: the five states, six expiry buckets; the one
//! per-object family (`certificate_expiry_days`) holds at most `--max-tracked-certificates`
//! series. [`CertMetrics::register`] registers unprefixed names; the `blockwork` binary passes
//! a sub-registry with the prefix `cert_operator`, giving the seed's names ([`SEED_METRICS`]).
//!
//! The seed's AWS-call metrics (calls, latency, throttling events, rate-limiter wait and tokens,
//! cache hits and misses) are recorded by the process's AWS layer, in its one family, and
//! exposed under the seed's names too (`blockwork_aws::metrics`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use blockwork_runtime::trace::exemplar::{self, TracedHistogram};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Seed 000's metric names (as exposed) and the labels of each, which dashboards and the shipped
/// alerts rely on: the first five are this module's, the rest the AWS layer's.
pub const SEED_METRICS: [(&str, &[&str]); 12] = [
    ("cert_operator_certificate_expiry_buckets", &["bucket"]),
    ("cert_operator_certificate_expiry_days", &["namespace", "name"]),
    ("cert_operator_certificates_not_tracked_total", &[]),
    ("cert_operator_certificates_total", &["state"]),
    ("cert_operator_reconcile_duration_seconds", &["state", "success"]),
    ("cert_operator_aws_api_calls_total", &["operation", "success"]),
    ("cert_operator_aws_api_latency_seconds", &["operation"]),
    ("cert_operator_throttling_events_total", &["operation"]),
    ("cert_operator_rate_limit_wait_seconds", &["service"]),
    ("cert_operator_rate_limiter_tokens", &["service"]),
    ("cert_operator_cache_hits_total", &["lookup_type"]),
    ("cert_operator_cache_misses_total", &["lookup_type"]),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BucketLabels {
    pub bucket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The Cert's state when the reconcile began.
    pub state: String,
    /// `false` when a call to AWS or Kubernetes failed.
    pub success: String,
}

/// The six fixed expiry windows (seed 000), by upper bound in days; an expired certificate
/// counts in the first.
pub const EXPIRY_BUCKETS: [(&str, f64); 6] =
    [("0-7d", 7.0), ("7-14d", 14.0), ("14-30d", 30.0), ("30-60d", 60.0), ("60-90d", 90.0), ("90d+", f64::INFINITY)];

/// The seed's per-certificate tracking bounds (`--metrics-expiry-threshold`,
/// `--max-tracked-certificates`).
pub const DEFAULT_EXPIRY_THRESHOLD_DAYS: u32 = 90;
pub const DEFAULT_MAX_TRACKED_CERTIFICATES: usize = 1000;

#[derive(Debug)]
struct Known {
    namespace: String,
    name: String,
    state: crate::api::CertState,
    expiry_days: Option<f64>,
}

#[derive(Debug)]
struct Tracking {
    threshold_days: f64,
    max_tracked: usize,
    /// Every certificate seen, by UID: the source of the bucket and state gauges.
    known: HashMap<String, Known>,
    /// UIDs with their own expiry series.
    tracked: HashSet<String>,
}

#[derive(Debug)]
pub struct CertMetrics {
    /// The exported Secrets' ([`crate::export::metrics`]).
    pub export: crate::export::metrics::ExportMetrics,
    expiry_buckets: Family<BucketLabels, Gauge>,
    expiry_days: Family<CertificateLabels, Gauge<f64, AtomicU64>>,
    not_tracked: Counter,
    certificates: Family<StateLabels, Gauge>,
    tracking: Mutex<Tracking>,
    reconcile_duration: Family<ReconcileLabels, TracedHistogram>,
}

impl CertMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::unregistered();
        registry.register("certificate_expiry_buckets", "Certificates by days until expiry", metrics.expiry_buckets.clone());
        registry.register(
            "certificate_expiry_days",
            "Days until expiry of each certificate within the threshold, up to the tracking limit",
            metrics.expiry_days.clone(),
        );
        registry.register(
            "certificates_not_tracked",
            "Certificates within the expiry threshold left without their own series (the tracking limit was reached)",
            metrics.not_tracked.clone(),
        );
        // A gauge, named as the seed names it.
        registry.register("certificates_total", "Certificates by state", metrics.certificates.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of Cert reconciles by the state they began in and whether they succeeded",
            metrics.reconcile_duration.clone(),
        );
        metrics.export.register(registry);
        Arc::new(metrics)
    }

    /// Metrics that count but are not exposed (tests, tools).
    pub fn unregistered() -> Self {
        Self {
            export: crate::export::metrics::ExportMetrics::default(),
            expiry_buckets: Family::default(),
            expiry_days: Family::default(),
            not_tracked: Counter::default(),
            certificates: Family::default(),
            tracking: Mutex::new(Tracking {
                threshold_days: f64::from(DEFAULT_EXPIRY_THRESHOLD_DAYS),
                max_tracked: DEFAULT_MAX_TRACKED_CERTIFICATES,
                known: HashMap::new(),
                tracked: HashSet::new(),
            }),
            reconcile_duration: Family::new_with_constructor(|| {
                TracedHistogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0].into_iter())
            }),
        }
    }

    pub fn set_tracking_limits(&self, threshold_days: u32, max_tracked: usize) {
        let mut tracking = self.tracking.lock().unwrap_or_else(PoisonError::into_inner);
        tracking.threshold_days = f64::from(threshold_days);
        tracking.max_tracked = max_tracked;
    }

    /// Records a certificate's state and days until expiry; the buckets and state gauges are
    /// recomputed from every known certificate, so they never drift.
    pub fn certificate(&self, uid: &str, namespace: &str, name: &str, state: crate::api::CertState, expiry_days: Option<f64>) {
        let mut tracking = self.tracking.lock().unwrap_or_else(PoisonError::into_inner);
        tracking.known.insert(uid.to_owned(), Known { namespace: namespace.to_owned(), name: name.to_owned(), state, expiry_days });
        let labels = CertificateLabels { namespace: namespace.to_owned(), name: name.to_owned() };
        match expiry_days {
            Some(days) if days <= tracking.threshold_days => {
                if tracking.tracked.contains(uid) || tracking.tracked.len() < tracking.max_tracked {
                    tracking.tracked.insert(uid.to_owned());
                    self.expiry_days.get_or_create(&labels).set(days);
                } else {
                    self.not_tracked.inc();
                }
            }
            _ => {
                if tracking.tracked.remove(uid) {
                    self.expiry_days.remove(&labels);
                }
            }
        }
        self.recompute(&tracking);
    }

    /// Forgets a deleted certificate.
    pub fn forget_certificate(&self, uid: &str) {
        let mut tracking = self.tracking.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = tracking.known.remove(uid)
            && tracking.tracked.remove(uid)
        {
            self.expiry_days.remove(&CertificateLabels { namespace: known.namespace, name: known.name });
        }
        self.recompute(&tracking);
    }

    fn recompute(&self, tracking: &Tracking) {
        let mut buckets = [0i64; EXPIRY_BUCKETS.len()];
        let mut states: HashMap<&str, i64> = crate::api::CertState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for known in tracking.known.values() {
            *states.entry(known.state.as_str()).or_default() += 1;
            if let Some(days) = known.expiry_days
                && let Some(index) = EXPIRY_BUCKETS.iter().position(|(_, upper)| days < *upper)
            {
                buckets[index] += 1;
            }
        }
        for ((bucket, _), count) in EXPIRY_BUCKETS.iter().zip(buckets) {
            self.expiry_buckets.get_or_create(&BucketLabels { bucket: (*bucket).to_owned() }).set(count);
        }
        for (state, count) in states {
            self.certificates.get_or_create(&StateLabels { state: state.to_owned() }).set(count);
        }
    }

    /// One reconcile of a Cert that began in `state`, observed within its span (the exemplar).
    pub fn reconciled(&self, state: crate::api::CertState, success: bool, duration: Duration) {
        let labels = ReconcileLabels { state: state.as_str().to_owned(), success: success.to_string() };
        exemplar::observe(&self.reconcile_duration.get_or_create(&labels), duration.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::CertState;
    use prometheus_client::encoding::text::encode;

    /// As the `blockwork` binary registers them.
    fn registered() -> (Registry, Arc<CertMetrics>) {
        let mut registry = Registry::default();
        let metrics = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
        (registry, metrics)
    }

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    /// Each sample's metric name (histogram suffixes removed) with its label names (`le` left
    /// out), from the text encoding.
    fn series(text: &str) -> Vec<(String, Vec<String>)> {
        text.lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (name, rest) = line.split_once(['{', ' ']).unwrap();
                let labels = if line.as_bytes()[name.len()] == b'{' {
                    let (labels, _) = rest.split_once('}').unwrap();
                    labels.split(',').map(|l| l.split_once('=').unwrap().0.to_owned()).filter(|l| l != "le").collect()
                } else {
                    Vec::new()
                };
                let base = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix)).unwrap_or(name);
                (base.to_owned(), labels)
            })
            .collect()
    }

    /// Every metric once, so that each family has a series: the Cert's own, and the AWS
    /// layer's as the process records them for the cert controller.
    fn exercise(metrics: &CertMetrics, aws: &blockwork_aws::AwsMetrics) {
        use blockwork_aws::{ErrorClass, Seed, Service};
        metrics.certificate("u1", "ns", "a", CertState::Ready, Some(5.0));
        metrics.reconciled(CertState::Ready, true, Duration::from_millis(50));
        metrics.not_tracked.inc();
        aws.call(&[Seed::Cert], "operator", Service::Acm, "DescribeCertificate", Ok(()), Duration::from_millis(5));
        aws.call(&[Seed::Cert], "operator", Service::Acm, "RequestCertificate", Err(ErrorClass::Throttled), Duration::from_millis(5));
        aws.limiter_wait(&[Seed::Cert], Service::Acm, Duration::from_millis(2));
        aws.limiter_tokens(Service::Acm, "RequestCertificate", 3.0);
        aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::LISTING_CACHE, true);
        aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::LISTING_CACHE, false);
    }

    #[test]
    fn exposed_names_and_labels_are_exactly_the_seed_s() {
        let (mut registry, metrics) = registered();
        let aws = blockwork_aws::AwsMetrics::register(&mut registry, &[blockwork_aws::Seed::Cert]);
        exercise(&metrics, &aws);
        let exposed: Vec<(String, Vec<String>)> =
            series(&scrape(&registry)).into_iter().filter(|(name, _)| !name.starts_with("blockwork_aws_")).collect();
        for (name, labels) in SEED_METRICS {
            let found: Vec<&Vec<String>> = exposed.iter().filter(|(n, _)| n == name).map(|(_, l)| l).collect();
            assert!(!found.is_empty(), "{name} is not exposed: {exposed:?}");
            for exposed_labels in found {
                assert_eq!(exposed_labels, labels, "labels of {name}");
            }
        }
        let export = crate::export::metrics::EXPORT_METRICS;
        for (name, labels) in &exposed {
            let known = SEED_METRICS.iter().chain(&export).find(|(known, _)| known == name);
            assert!(known.is_some_and(|(_, known)| known == labels), "{name} {labels:?} is neither the seed's nor the export's");
        }
    }

    #[test]
    fn expiry_buckets_are_always_six_series_and_states_all_five() {
        let (registry, metrics) = registered();
        metrics.set_tracking_limits(30, 2);
        metrics.certificate("u1", "ns", "a", CertState::Ready, Some(5.0));
        metrics.certificate("u2", "ns", "b", CertState::Ready, Some(20.0));
        metrics.certificate("u3", "ns", "c", CertState::Ready, Some(25.0));
        metrics.certificate("u4", "ns", "d", CertState::Ready, Some(200.0));
        metrics.certificate("u5", "ns", "e", CertState::Pending, None);
        let text = scrape(&registry);
        assert_eq!(text.matches("cert_operator_certificate_expiry_buckets{").count(), 6, "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_buckets{bucket="0-7d"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_buckets{bucket="7-14d"} 0"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_buckets{bucket="14-30d"} 2"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_buckets{bucket="90d+"} 1"#), "{text}");
        assert_eq!(text.matches("cert_operator_certificates_total{").count(), 5, "{text}");
        assert!(text.contains(r#"cert_operator_certificates_total{state="Ready"} 4"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificates_total{state="Pending"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificates_total{state="Failed"} 0"#), "{text}");

        // A renewed certificate leaves the threshold and frees its series; a deleted one is forgotten.
        metrics.certificate("u1", "ns", "a", CertState::Ready, Some(395.0));
        metrics.forget_certificate("u2");
        metrics.certificate("u3", "ns", "c", CertState::Ready, Some(24.0));
        let text = scrape(&registry);
        assert_eq!(text.matches("cert_operator_certificate_expiry_days{").count(), 1, "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_days{namespace="ns",name="c"} 24"#), "{text}");
        assert!(text.contains(r#"cert_operator_certificates_total{state="Ready"} 3"#), "{text}");
    }

    #[test]
    fn per_certificate_series_never_exceed_the_tracking_limit_and_the_overflow_is_counted() {
        let (registry, metrics) = registered();
        metrics.set_tracking_limits(90, 10);
        for i in 0..50 {
            metrics.certificate(&format!("u{i}"), "ns", &format!("c{i}"), CertState::Ready, Some(f64::from(i)));
        }
        let text = scrape(&registry);
        assert_eq!(text.matches("cert_operator_certificate_expiry_days{").count(), 10, "{text}");
        assert!(text.contains("cert_operator_certificates_not_tracked_total 40"), "{text}");
        // Another round of updates: the same ten keep their series, the rest stay counted.
        for i in 0..50 {
            metrics.certificate(&format!("u{i}"), "ns", &format!("c{i}"), CertState::Ready, Some(f64::from(i)));
        }
        let text = scrape(&registry);
        assert_eq!(text.matches("cert_operator_certificate_expiry_days{").count(), 10, "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_days{namespace="ns",name="c9"} 9"#), "{text}");
        assert!(text.contains("cert_operator_certificates_not_tracked_total 80"), "{text}");
        // Certificates beyond the threshold never get a series, and do not count as overflow.
        metrics.certificate("far", "ns", "far", CertState::Ready, Some(300.0));
        let text = scrape(&registry);
        assert!(!text.contains(r#"name="far""#), "{text}");
        assert!(text.contains("cert_operator_certificates_not_tracked_total 80"), "{text}");
        // A tracked certificate that is deleted frees its slot for the next one.
        metrics.forget_certificate("u0");
        metrics.certificate("u10", "ns", "c10", CertState::Ready, Some(10.0));
        let text = scrape(&registry);
        assert_eq!(text.matches("cert_operator_certificate_expiry_days{").count(), 10, "{text}");
        assert!(text.contains(r#"cert_operator_certificate_expiry_days{namespace="ns",name="c10"} 10"#), "{text}");
    }

    #[test]
    fn reconcile_durations_are_recorded_by_state_and_success() {
        let (registry, metrics) = registered();
        metrics.reconciled(CertState::Ready, true, Duration::from_millis(50));
        metrics.reconciled(CertState::Created, false, Duration::from_millis(700));
        let text = scrape(&registry);
        for line in [
            r#"cert_operator_reconcile_duration_seconds_bucket{le="0.1",state="Ready",success="true"} 1"#,
            r#"cert_operator_reconcile_duration_seconds_bucket{le="0.5",state="Created",success="false"} 0"#,
            r#"cert_operator_reconcile_duration_seconds_bucket{le="1.0",state="Created",success="false"} 1"#,
            r#"cert_operator_reconcile_duration_seconds_count{state="Ready",success="true"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }
}
