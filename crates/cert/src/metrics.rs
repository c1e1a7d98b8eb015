//! The Cert operator's own metrics, seed 000 part 5's suite (the runtime's generic reconcile
//! metrics come on top). Labels are bounded: AWS operation names, services, lookup types, the
//! five states; the one per-object family (`certificate_expiry_days`) holds at most
//! `--max-tracked-certificates` series. [`CertMetrics::register`] registers unprefixed names;
//! the `blockwork` binary passes a sub-registry with the prefix `cert_operator`, giving the
//! seed's names ([`SEED_METRICS`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Seed 000's metric names (after the `cert_operator_` prefix, as exposed) and the labels of
/// each, which dashboards and the shipped alerts rely on.
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
pub struct CallLabels {
    pub operation: String,
    pub success: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// `acm` or `route53`.
    pub service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// `arn` or `fqdn`.
    pub lookup_type: String,
}

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

/// One token bucket as last seen: its tokens right after the last call took one.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    per_second: f64,
    burst: f64,
}

impl Bucket {
    /// The tokens now: the bucket refills at its rate up to the burst.
    fn tokens(&self, now: Instant) -> f64 {
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * self.per_second).min(self.burst)
    }
}

/// `rate_limiter_tokens{service}`, computed when scraped: the tokens a call could take now, from
/// each bucket's state at its last call and its refill rate. Route53 has a bucket per hosted
/// zone; the series shows the emptiest (the zone closest to making calls wait).
#[derive(Clone, Debug, Default)]
struct TokenGauges {
    /// By (service, bucket key: the hosted zone id for Route53, empty for ACM and for the
    /// full bucket every new zone starts with).
    buckets: Arc<Mutex<HashMap<(&'static str, String), Bucket>>>,
}

impl TokenGauges {
    fn values(&self) -> Vec<(&'static str, f64)> {
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut services: Vec<(&'static str, f64)> = Vec::new();
        for ((service, _), bucket) in buckets.iter() {
            let tokens = bucket.tokens(now);
            match services.iter_mut().find(|(s, _)| s == service) {
                Some((_, lowest)) => *lowest = lowest.min(tokens),
                None => services.push((service, tokens)),
            }
        }
        services.sort_by(|a, b| a.0.cmp(b.0));
        services
    }
}

impl EncodeMetric for TokenGauges {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (service, tokens) in self.values() {
            let labels = ServiceLabels { service: service.to_owned() };
            encoder.encode_family(&labels)?.encode_gauge(&tokens)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
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
    expiry_buckets: Family<BucketLabels, Gauge>,
    expiry_days: Family<CertificateLabels, Gauge<f64, AtomicU64>>,
    not_tracked: Counter,
    certificates: Family<StateLabels, Gauge>,
    tracking: Mutex<Tracking>,
    reconcile_duration: Family<ReconcileLabels, Histogram>,
    aws_calls: Family<CallLabels, Counter>,
    aws_latency: Family<OperationLabels, Histogram>,
    throttling_events: Family<OperationLabels, Counter>,
    rate_limit_wait: Family<ServiceLabels, Histogram>,
    rate_limiter_tokens: TokenGauges,
    cache_hits: Family<LookupLabels, Counter>,
    cache_misses: Family<LookupLabels, Counter>,
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
        registry.register("aws_api_calls", "AWS API calls by operation and success", metrics.aws_calls.clone());
        registry.register("aws_api_latency_seconds", "AWS API call latency by operation", metrics.aws_latency.clone());
        registry.register(
            "throttling_events",
            "Calls AWS answered with a throttling error, by operation",
            metrics.throttling_events.clone(),
        );
        registry.register(
            "rate_limit_wait_seconds",
            "Time calls waited for a rate-limiter token, by service",
            metrics.rate_limit_wait.clone(),
        );
        registry.register(
            "rate_limiter_tokens",
            "Tokens a call could take now, by service (Route53: the emptiest hosted zone's bucket)",
            metrics.rate_limiter_tokens.clone(),
        );
        registry.register("cache_hits", "Certificate lookups answered from the cache, by lookup type", metrics.cache_hits.clone());
        registry.register("cache_misses", "Certificate lookups that went to AWS, by lookup type", metrics.cache_misses.clone());
        Arc::new(metrics)
    }

    /// Metrics that count but are not exposed (tests, tools).
    pub fn unregistered() -> Self {
        Self {
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
                Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])
            }),
            aws_calls: Family::default(),
            aws_latency: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 12))),
            throttling_events: Family::default(),
            rate_limit_wait: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 9))),
            rate_limiter_tokens: TokenGauges::default(),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
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

    pub fn aws_call(&self, operation: &str, success: bool, latency: Duration) {
        let success = if success { "true" } else { "false" };
        self.aws_calls.get_or_create(&CallLabels { operation: operation.to_owned(), success: success.to_owned() }).inc();
        self.aws_latency.get_or_create(&OperationLabels { operation: operation.to_owned() }).observe(latency.as_secs_f64());
    }

    /// One reconcile of a Cert that began in `state`.
    pub fn reconciled(&self, state: crate::api::CertState, success: bool, duration: Duration) {
        let labels = ReconcileLabels { state: state.as_str().to_owned(), success: success.to_string() };
        self.reconcile_duration.get_or_create(&labels).observe(duration.as_secs_f64());
    }

    /// A token bucket of `service` (`key`: its hosted zone, or empty) that now holds `tokens`
    /// of at most `burst`, refilling at `per_second`.
    pub fn rate_limiter_tokens(&self, service: &'static str, key: &str, tokens: f64, per_second: f64, burst: f64) {
        let bucket = Bucket { tokens, at: Instant::now(), per_second, burst };
        self.rate_limiter_tokens.buckets.lock().unwrap_or_else(PoisonError::into_inner).insert((service, key.to_owned()), bucket);
    }

    pub fn throttled(&self, operation: &str) {
        self.throttling_events.get_or_create(&OperationLabels { operation: operation.to_owned() }).inc();
    }

    pub fn rate_limit_wait(&self, service: &str, waited: Duration) {
        self.rate_limit_wait.get_or_create(&ServiceLabels { service: service.to_owned() }).observe(waited.as_secs_f64());
    }

    pub fn cache_lookup(&self, lookup_type: &str, hit: bool) {
        let labels = LookupLabels { lookup_type: lookup_type.to_owned() };
        if hit {
            self.cache_hits.get_or_create(&labels).inc()
        } else {
            self.cache_misses.get_or_create(&labels).inc()
        };
    }

    /// Calls of `operation` made so far (both outcomes), for tests and benchmarks.
    pub fn aws_calls(&self, operation: &str) -> u64 {
        ["true", "false"]
            .iter()
            .map(|s| self.aws_calls.get_or_create(&CallLabels { operation: operation.to_owned(), success: (*s).to_owned() }).get())
            .sum()
    }

    /// The tokens `service`'s bucket holds now, as `rate_limiter_tokens` shows them (for tests
    /// and benchmarks).
    pub fn tokens(&self, service: &str) -> Option<f64> {
        self.rate_limiter_tokens.values().into_iter().find(|(s, _)| *s == service).map(|(_, tokens)| tokens)
    }

    pub fn throttling_events(&self, operation: &str) -> u64 {
        self.throttling_events.get_or_create(&OperationLabels { operation: operation.to_owned() }).get()
    }

    pub fn cache_counts(&self, lookup_type: &str) -> (u64, u64) {
        let labels = LookupLabels { lookup_type: lookup_type.to_owned() };
        (self.cache_hits.get_or_create(&labels).get(), self.cache_misses.get_or_create(&labels).get())
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

    /// Every metric once, so that each family has a series.
    fn exercise(metrics: &CertMetrics) {
        metrics.certificate("u1", "ns", "a", CertState::Ready, Some(5.0));
        metrics.reconciled(CertState::Ready, true, Duration::from_millis(50));
        metrics.aws_call("DescribeCertificate", true, Duration::from_millis(5));
        metrics.throttled("RequestCertificate");
        metrics.rate_limit_wait("acm", Duration::from_millis(2));
        metrics.rate_limiter_tokens("acm", "", 8.0, 5.0, 10.0);
        metrics.cache_lookup("fqdn", true);
        metrics.cache_lookup("fqdn", false);
        metrics.not_tracked.inc();
    }

    #[test]
    fn exposed_names_and_labels_are_exactly_the_seed_s() {
        let (registry, metrics) = registered();
        exercise(&metrics);
        let exposed = series(&scrape(&registry));
        for (name, labels) in SEED_METRICS {
            let found: Vec<&Vec<String>> = exposed.iter().filter(|(n, _)| n == name).map(|(_, l)| l).collect();
            assert!(!found.is_empty(), "{name} is not exposed: {exposed:?}");
            for exposed_labels in found {
                assert_eq!(exposed_labels, labels, "labels of {name}");
            }
        }
        for (name, _) in &exposed {
            assert!(SEED_METRICS.iter().any(|(seed, _)| seed == name), "{name} is not one of the seed's metrics");
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

    #[test]
    fn rate_limiter_tokens_refill_at_the_rate_up_to_the_burst_and_show_the_emptiest_zone() {
        let (registry, metrics) = registered();
        metrics.rate_limiter_tokens("route53", "", 5.0, 3.0, 5.0);
        metrics.rate_limiter_tokens("route53", "Z1", 0.0, 3.0, 5.0);
        metrics.rate_limiter_tokens("acm", "", 10.0, 5.0, 10.0);
        let values = metrics.rate_limiter_tokens.values();
        assert_eq!(values[0], ("acm", 10.0));
        assert_eq!(values[1].0, "route53");
        assert!(values[1].1 < 1.0, "the emptiest zone: {values:?}");
        let bucket = Bucket { tokens: 1.0, at: Instant::now(), per_second: 3.0, burst: 5.0 };
        assert!((bucket.tokens(bucket.at + Duration::from_millis(500)) - 2.5).abs() < 1e-9);
        assert_eq!(bucket.tokens(bucket.at + Duration::from_secs(60)), 5.0);
        assert!(scrape(&registry).contains(r#"cert_operator_rate_limiter_tokens{service="acm"} 10.0"#));
    }

    #[test]
    fn aws_and_cache_metrics_are_labelled_by_operation_service_and_lookup_type() {
        let (registry, metrics) = registered();
        metrics.aws_call("DescribeCertificate", true, Duration::from_millis(5));
        metrics.cache_lookup("arn", true);
        metrics.cache_lookup("fqdn", false);
        metrics.throttled("RequestCertificate");
        metrics.rate_limit_wait("acm", Duration::from_millis(2));
        let text = scrape(&registry);
        for line in [
            r#"cert_operator_aws_api_calls_total{operation="DescribeCertificate",success="true"} 1"#,
            r#"cert_operator_aws_api_latency_seconds_count{operation="DescribeCertificate"} 1"#,
            r#"cert_operator_cache_hits_total{lookup_type="arn"} 1"#,
            r#"cert_operator_cache_misses_total{lookup_type="fqdn"} 1"#,
            r#"cert_operator_throttling_events_total{operation="RequestCertificate"} 1"#,
            r#"cert_operator_rate_limit_wait_seconds_count{service="acm"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert_eq!(metrics.aws_calls("DescribeCertificate"), 1);
        assert_eq!(metrics.cache_counts("arn"), (1, 0));
    }
}
