//! One family of AWS metrics for every controller, recorded in one place (the layer's
//! [`call`](crate::Aws::call), limiter and caches), registered once by the process:
//!
//! | metric | labels |
//! |---|---|
//! | `blockwork_aws_calls_total` | `service`, `operation`, `result` (`success` or the error class), `identity` |
//! | `blockwork_aws_call_duration_seconds` | `service`, `operation`, `identity` |
//! | `blockwork_aws_throttling_events_total` | `service`, `operation`, `identity` |
//! | `blockwork_aws_limiter_wait_seconds` | `service` |
//! | `blockwork_aws_limiter_tokens` | `service`, `bucket` (`account`, `changes` or the operation): tokens left after the last call took its own |
//! | `blockwork_aws_cache_lookups_total` | `cache`, `result` (`hit`, `miss`) |
//!
//! Users' dashboards and alerts rely on the seeds' names, so the same recordings also feed the
//! families of the seed of the controller that made the call ([`Seed`]): seed 000's
//! `cert_operator_aws_api_calls_total{operation,success}` and its neighbours for the `cert`
//! controller, seed 001's `cloudfront_tenant_operator_aws_api_call_duration_seconds{operation}`
//! for `tenant`. Labels are bounded: services, operations, classes, bucket and cache names, and
//! `identity`, the AwsIdentity a call acted as (`operator` for the operator's own identity),
//! which the platform team creates (ADR 0014). No account id appears (a role's account is not a
//! label).
//!
//! The call duration histograms (ours and the seeds') carry, per bucket, the trace id of the
//! attempt last observed in it as an OpenMetrics exemplar, when traces are exported
//! ([`blockwork_runtime::trace::exemplar`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use blockwork_runtime::trace::exemplar::{self, TracedHistogram};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::ErrorClass;
use crate::quota::Service;

/// The `cache` label of described certificates (seed 000's `arn` lookups).
pub const DESCRIBE_CACHE: &str = "acm-describe";
/// The `cache` label of the certificate listing (seed 000's `fqdn` lookups).
pub const LISTING_CACHE: &str = "acm-listing";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: &'static str,
    operation: String,
    result: &'static str,
    identity: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    service: &'static str,
    operation: String,
    identity: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    service: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BucketLabels {
    service: &'static str,
    bucket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
    result: &'static str,
}

/// The controllers whose seeds name AWS metrics of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seed {
    /// Seed 000, the `cert` controller: `cert_operator_…`.
    Cert,
    /// Seed 001, the `tenant` controller: `cloudfront_tenant_operator_…`.
    Tenant,
}

impl Seed {
    /// The seed of a controller, by its name.
    pub fn of(controller: &str) -> Option<Self> {
        match controller {
            "cert" => Some(Self::Cert),
            "tenant" => Some(Self::Tenant),
            _ => None,
        }
    }
}

/// Seed 000's AWS metrics (after the `cert_operator_` prefix).
#[derive(Debug)]
struct CertSeed {
    calls: Family<SeedCallLabels, Counter>,
    latency: Family<SeedOperationLabels, TracedHistogram>,
    throttling: Family<SeedOperationLabels, Counter>,
    wait: Family<ServiceLabels, Histogram>,
    tokens: Family<ServiceLabels, Gauge<f64, AtomicU64>>,
    cache_hits: Family<LookupLabels, Counter>,
    cache_misses: Family<LookupLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeedCallLabels {
    operation: String,
    success: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeedOperationLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    lookup_type: &'static str,
}

impl CertSeed {
    fn new() -> Self {
        Self {
            calls: Family::default(),
            latency: Family::new_with_constructor(|| TracedHistogram::new(exponential_buckets(0.005, 2.0, 12))),
            throttling: Family::default(),
            wait: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 9))),
            tokens: Family::default(),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("cert_operator");
        registry.register("aws_api_calls", "AWS API calls by operation and success", self.calls.clone());
        registry.register("aws_api_latency_seconds", "AWS API call latency by operation", self.latency.clone());
        registry.register("throttling_events", "Calls AWS answered with a throttling error, by operation", self.throttling.clone());
        registry.register("rate_limit_wait_seconds", "Time calls waited for rate-limiter tokens, by service", self.wait.clone());
        registry.register(
            "rate_limiter_tokens",
            "Tokens left in the emptiest bucket of the service after the last call took its own",
            self.tokens.clone(),
        );
        registry.register("cache_hits", "Certificate lookups answered without calling AWS, by lookup type", self.cache_hits.clone());
        registry.register("cache_misses", "Certificate lookups that called AWS, by lookup type", self.cache_misses.clone());
    }
}

/// Seed 001's AWS metric (after the `cloudfront_tenant_operator_` prefix).
#[derive(Debug)]
struct TenantSeed {
    duration: Family<SeedOperationLabels, TracedHistogram>,
}

impl TenantSeed {
    fn new() -> Self {
        Self { duration: Family::new_with_constructor(|| TracedHistogram::new(exponential_buckets(0.005, 2.0, 14))) }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "cloudfront_tenant_operator_aws_api_call_duration_seconds",
            "Wall-clock duration of each AWS SDK call, successful or not",
            self.duration.clone(),
        );
    }

    /// Seed 001 names CloudFront operations bare and the others with their service.
    fn operation(service: Service, operation: &str) -> String {
        match service {
            Service::CloudFront => operation.to_owned(),
            Service::Route53 => format!("Route53{operation}"),
            Service::Acm => format!("ACM{operation}"),
            Service::Sts => format!("STS{operation}"),
            Service::AcmPca => format!("ACMPCA{operation}"),
        }
    }
}

/// The AWS metrics of the process.
#[derive(Debug)]
pub struct AwsMetrics {
    calls: Family<CallLabels, Counter>,
    duration: Family<OperationLabels, TracedHistogram>,
    throttling: Family<OperationLabels, Counter>,
    wait: Family<ServiceLabels, Histogram>,
    tokens: Family<BucketLabels, Gauge<f64, AtomicU64>>,
    cache: Family<CacheLabels, Counter>,
    cert: CertSeed,
    tenant: TenantSeed,
    /// The last tokens seen per (service, bucket), for the seed's per-service minimum.
    last_tokens: Mutex<HashMap<(Service, String), f64>>,
    /// The identities calls were made as, for the totals tests read.
    seen: Mutex<BTreeSet<String>>,
}

impl AwsMetrics {
    /// Registers the family under `blockwork_aws_` in `registry` (the root), and the seed
    /// families of `seeds` under the seeds' names.
    pub fn register(registry: &mut Registry, seeds: &[Seed]) -> Self {
        let metrics = Self::unregistered();
        let aws = registry.sub_registry_with_prefix("blockwork_aws");
        aws.register("calls", "AWS API calls by service, operation and result (success or the error class)", metrics.calls.clone());
        aws.register("call_duration_seconds", "Duration of each AWS API call attempt", metrics.duration.clone());
        aws.register("throttling_events", "Calls AWS answered with a throttling error", metrics.throttling.clone());
        aws.register("limiter_wait_seconds", "Time calls waited for the process's token buckets", metrics.wait.clone());
        aws.register("limiter_tokens", "Tokens left in a bucket after the last call took its own", metrics.tokens.clone());
        aws.register("cache_lookups", "Lookups of the layer's caches by cache and result", metrics.cache.clone());
        if seeds.contains(&Seed::Cert) {
            metrics.cert.register(registry);
        }
        if seeds.contains(&Seed::Tenant) {
            metrics.tenant.register(registry);
        }
        metrics
    }

    /// Metrics that count but are not exposed (tests, tools).
    pub fn unregistered() -> Self {
        Self {
            calls: Family::default(),
            duration: Family::new_with_constructor(|| TracedHistogram::new(exponential_buckets(0.005, 2.0, 14))),
            throttling: Family::default(),
            wait: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 10))),
            tokens: Family::default(),
            cache: Family::default(),
            cert: CertSeed::new(),
            tenant: TenantSeed::new(),
            last_tokens: Mutex::default(),
            seen: Mutex::default(),
        }
    }

    /// One attempt of a call made for `seeds` as `identity`, its outcome and duration.
    pub fn call(
        &self,
        seeds: &[Seed],
        identity: &str,
        service: Service,
        operation: &str,
        outcome: Result<(), ErrorClass>,
        latency: Duration,
    ) {
        let result = match outcome {
            Ok(()) => "success",
            Err(class) => class.as_str(),
        };
        let seconds = latency.as_secs_f64();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if !seen.contains(identity) {
            seen.insert(identity.to_owned());
        }
        drop(seen);
        let labels = OperationLabels { service: service.as_str(), operation: operation.to_owned(), identity: identity.to_owned() };
        self.calls
            .get_or_create(&CallLabels {
                service: labels.service,
                operation: labels.operation.clone(),
                result,
                identity: labels.identity.clone(),
            })
            .inc();
        exemplar::observe(&self.duration.get_or_create(&labels), seconds);
        if outcome == Err(ErrorClass::Throttled) {
            self.throttling.get_or_create(&labels).inc();
        }
        for seed in seeds {
            match seed {
                Seed::Cert => {
                    let success = if outcome.is_ok() { "true" } else { "false" };
                    self.cert.calls.get_or_create(&SeedCallLabels { operation: operation.to_owned(), success }).inc();
                    exemplar::observe(&self.cert.latency.get_or_create(&SeedOperationLabels { operation: operation.to_owned() }), seconds);
                    if outcome == Err(ErrorClass::Throttled) {
                        self.cert.throttling.get_or_create(&SeedOperationLabels { operation: operation.to_owned() }).inc();
                    }
                }
                Seed::Tenant => {
                    let operation = TenantSeed::operation(service, operation);
                    exemplar::observe(&self.tenant.duration.get_or_create(&SeedOperationLabels { operation }), seconds);
                }
            }
        }
    }

    /// A call made for `seeds` waited this long for its tokens.
    pub fn limiter_wait(&self, seeds: &[Seed], service: Service, waited: Duration) {
        let labels = ServiceLabels { service: service.as_str() };
        self.wait.get_or_create(&labels).observe(waited.as_secs_f64());
        if seeds.contains(&Seed::Cert) {
            self.cert.wait.get_or_create(&labels).observe(waited.as_secs_f64());
        }
    }

    /// Tokens left in a bucket right after a call took its own.
    pub fn limiter_tokens(&self, service: Service, bucket: &str, tokens: f64) {
        self.tokens.get_or_create(&BucketLabels { service: service.as_str(), bucket: bucket.to_owned() }).set(tokens);
        let mut last = self.last_tokens.lock().unwrap_or_else(PoisonError::into_inner);
        last.insert((service, bucket.to_owned()), tokens);
        let lowest = last.iter().filter(|((s, _), _)| *s == service).map(|(_, tokens)| *tokens).fold(f64::INFINITY, f64::min);
        self.cert.tokens.get_or_create(&ServiceLabels { service: service.as_str() }).set(lowest);
    }

    /// A lookup of the layer's cache `cache`; seed 000 names its two ACM caches `arn` (a
    /// certificate's description) and `fqdn` (the certificate listing).
    pub fn cache_lookup(&self, seeds: &[Seed], cache: &'static str, hit: bool) {
        self.cache.get_or_create(&CacheLabels { cache, result: if hit { "hit" } else { "miss" } }).inc();
        if seeds.contains(&Seed::Cert) {
            let lookup_type = match cache {
                LISTING_CACHE => "fqdn",
                _ => "arn",
            };
            let family = if hit { &self.cert.cache_hits } else { &self.cert.cache_misses };
            family.get_or_create(&LookupLabels { lookup_type }).inc();
        }
    }

    /// Attempts of `operation` (any result, any identity), for tests and benchmarks.
    pub fn calls(&self, service: Service, operation: &str) -> u64 {
        self.identities().iter().map(|identity| self.calls_as(identity, service, operation)).sum()
    }

    /// Attempts of `operation` made as `identity` (any result), for tests and benchmarks.
    pub fn calls_as(&self, identity: &str, service: Service, operation: &str) -> u64 {
        ["success", "terminal", "retryable", "throttled", "not_found"]
            .iter()
            .map(|result| {
                let labels =
                    CallLabels { service: service.as_str(), operation: operation.to_owned(), result, identity: identity.to_owned() };
                self.calls.get(&labels).map_or(0, |counter| counter.get())
            })
            .sum()
    }

    /// Throttling answers to `operation` (any identity), for tests and benchmarks.
    pub fn throttling_events(&self, service: Service, operation: &str) -> u64 {
        self.identities().iter().map(|identity| self.throttling_events_as(identity, service, operation)).sum()
    }

    /// Throttling answers to `operation` made as `identity`, for tests and benchmarks.
    pub fn throttling_events_as(&self, identity: &str, service: Service, operation: &str) -> u64 {
        let labels = OperationLabels { service: service.as_str(), operation: operation.to_owned(), identity: identity.to_owned() };
        self.throttling.get(&labels).map_or(0, |counter| counter.get())
    }

    /// The identities calls were made as.
    fn identities(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }

    /// (hits, misses) of `cache`, for tests.
    pub fn cache_counts(&self, cache: &'static str) -> (u64, u64) {
        let get = |result| self.cache.get_or_create(&CacheLabels { cache, result }).get();
        (get("hit"), get("miss"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn a_call_is_counted_once_in_the_family_and_in_the_seed_of_each_controller_it_served() {
        let mut registry = Registry::default();
        let metrics = AwsMetrics::register(&mut registry, &[Seed::Cert, Seed::Tenant]);
        metrics.call(&[Seed::Cert, Seed::Tenant], "team-a", Service::Route53, "ChangeResourceRecordSets", Ok(()), Duration::from_millis(4));
        metrics.call(&[Seed::Cert], "operator", Service::Acm, "RequestCertificate", Err(ErrorClass::Throttled), Duration::from_millis(2));
        let text = scrape(&registry);
        for line in [
            r#"blockwork_aws_calls_total{service="route53",operation="ChangeResourceRecordSets",result="success",identity="team-a"} 1"#,
            r#"blockwork_aws_calls_total{service="acm",operation="RequestCertificate",result="throttled",identity="operator"} 1"#,
            r#"blockwork_aws_throttling_events_total{service="acm",operation="RequestCertificate",identity="operator"} 1"#,
            r#"cert_operator_aws_api_calls_total{operation="ChangeResourceRecordSets",success="true"} 1"#,
            r#"cert_operator_aws_api_calls_total{operation="RequestCertificate",success="false"} 1"#,
            r#"cert_operator_throttling_events_total{operation="RequestCertificate"} 1"#,
            r#"cert_operator_aws_api_latency_seconds_count{operation="ChangeResourceRecordSets"} 1"#,
            r#"cloudfront_tenant_operator_aws_api_call_duration_seconds_count{operation="Route53ChangeResourceRecordSets"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert!(!text.contains(r#"cloudfront_tenant_operator_aws_api_call_duration_seconds_count{operation="ACMRequestCertificate"}"#));
    }

    #[test]
    fn totals_add_up_every_identity_and_tell_each_apart() {
        let metrics = AwsMetrics::unregistered();
        for identity in ["team-a", "team-a", "team-b"] {
            metrics.call(&[], identity, Service::Acm, "RequestCertificate", Err(ErrorClass::Throttled), Duration::from_millis(1));
        }
        assert_eq!(metrics.calls(Service::Acm, "RequestCertificate"), 3);
        assert_eq!(metrics.calls_as("team-a", Service::Acm, "RequestCertificate"), 2);
        assert_eq!(metrics.throttling_events_as("team-b", Service::Acm, "RequestCertificate"), 1);
        assert_eq!(metrics.throttling_events(Service::Acm, "RequestCertificate"), 3);
    }

    #[test]
    fn seed_families_are_registered_only_for_controllers_that_run() {
        let mut registry = Registry::default();
        let metrics = AwsMetrics::register(&mut registry, &[Seed::Tenant]);
        metrics.call(&[Seed::Tenant], "operator", Service::CloudFront, "GetDistributionTenant", Ok(()), Duration::from_millis(1));
        let text = scrape(&registry);
        assert!(text.contains(r#"cloudfront_tenant_operator_aws_api_call_duration_seconds_count{operation="GetDistributionTenant"} 1"#));
        assert!(!text.contains("cert_operator_"), "{text}");
    }

    #[test]
    fn the_seed_s_tokens_show_the_emptiest_bucket_of_the_service() {
        let mut registry = Registry::default();
        let metrics = AwsMetrics::register(&mut registry, &[Seed::Cert]);
        metrics.limiter_tokens(Service::Route53, "account", 30.0);
        metrics.limiter_tokens(Service::Route53, "GetChange", 3.0);
        metrics.limiter_tokens(Service::Acm, "DescribeCertificate", 7.0);
        let text = scrape(&registry);
        assert!(text.contains(r#"cert_operator_rate_limiter_tokens{service="route53"} 3.0"#), "{text}");
        assert!(text.contains(r#"cert_operator_rate_limiter_tokens{service="acm"} 7.0"#), "{text}");
        assert!(text.contains(r#"blockwork_aws_limiter_tokens{service="route53",bucket="account"} 30.0"#), "{text}");
    }

    #[test]
    fn cache_lookups_keep_the_seed_s_lookup_types() {
        let mut registry = Registry::default();
        let metrics = AwsMetrics::register(&mut registry, &[Seed::Cert]);
        metrics.cache_lookup(&[Seed::Cert], LISTING_CACHE, true);
        metrics.cache_lookup(&[Seed::Cert], DESCRIBE_CACHE, false);
        let text = scrape(&registry);
        assert!(text.contains(r#"cert_operator_cache_hits_total{lookup_type="fqdn"} 1"#), "{text}");
        assert!(text.contains(r#"cert_operator_cache_misses_total{lookup_type="arn"} 1"#), "{text}");
        assert_eq!(metrics.cache_counts(LISTING_CACHE), (1, 0));
    }
}
