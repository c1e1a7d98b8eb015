//! Seed 001's metrics under its names. [`TenantMetrics::register`] registers unprefixed names;
//! register into a sub-registry with the prefix [`PREFIX`] (as the `blockwork` binary does) to
//! get the seed's exact names:
//! `cloudfront_tenant_operator_reconcile_errors_total{error_type}`,
//! `cloudfront_tenant_operator_drift_detected_total`, and
//! `cloudfront_tenant_operator_tenants_total{namespace,status}`, computed at scrape time from a
//! reflector store (never stale, no work in the reconcile loop). The seed's
//! `cloudfront_tenant_operator_aws_api_call_duration_seconds{operation}` is recorded by the
//! process's AWS layer with every other AWS call (`blockwork_aws::metrics`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::api::DistributionTenant;

/// Seed 001's prefix: the sub-registry to register [`TenantMetrics`] in.
pub const PREFIX: &str = "cloudfront_tenant_operator";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub namespace: String,
    /// `Ready` (Ready condition True) or `NotReady`.
    pub status: String,
}

#[derive(Debug)]
pub struct TenantMetrics {
    reconcile_errors: Family<ErrorLabels, Counter>,
    drift_detected: Counter,
    tenants: Arc<TenantCount>,
}

impl TenantMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self { reconcile_errors: Family::default(), drift_detected: Counter::default(), tenants: Arc::default() };
        registry.register(
            "reconcile_errors",
            "AWS API errors by classification (seed 001's error table)",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "drift_detected",
            "Times external drift of a tenant was detected, whatever the drift policy",
            metrics.drift_detected.clone(),
        );
        registry.register_collector(Box::new(Arc::clone(&metrics.tenants)));
        Arc::new(metrics)
    }

    pub fn error(&self, error_type: &str) {
        self.reconcile_errors.get_or_create(&ErrorLabels { error_type: error_type.to_owned() }).inc();
    }

    pub fn drift(&self) {
        self.drift_detected.inc();
    }

    /// Where the tenant count comes from at scrape time: the controller's own caches
    /// (`blockwork_runtime::Context::cached`), so counting costs no watch of its own.
    pub fn count_from(&self, tenants: impl Fn() -> Vec<Arc<DistributionTenant>> + Send + Sync + 'static) {
        *self.tenants.source.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(tenants));
    }
}

type TenantSource = Box<dyn Fn() -> Vec<Arc<DistributionTenant>> + Send + Sync>;

/// `..._tenants_total`, counted from the controller's caches on each scrape.
#[derive(Default)]
struct TenantCount {
    source: Mutex<Option<TenantSource>>,
}

impl std::fmt::Debug for TenantCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantCount").finish_non_exhaustive()
    }
}

/// Tenants per (namespace, Ready/NotReady).
pub fn count_tenants<'a>(tenants: impl IntoIterator<Item = &'a DistributionTenant>) -> BTreeMap<(String, &'static str), i64> {
    let mut counts = BTreeMap::new();
    for tenant in tenants {
        let ready = tenant.status.as_ref().and_then(|s| s.condition(blockwork_runtime::status::READY)).is_some_and(|c| c.status == "True");
        let namespace = tenant.metadata.namespace.clone().unwrap_or_default();
        *counts.entry((namespace, if ready { "Ready" } else { "NotReady" })).or_insert(0) += 1;
    }
    counts
}

impl Collector for TenantCount {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.source.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|tenants| tenants()).unwrap_or_default();
        let counts = count_tenants(snapshot.iter().map(Arc::as_ref));
        let mut metric = encoder.encode_descriptor(
            "tenants_total",
            "DistributionTenant objects per namespace and readiness",
            None,
            MetricType::Gauge,
        )?;
        for ((namespace, status), count) in counts {
            let labels = TenantLabels { namespace, status: status.to_owned() };
            ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_runtime::status::{READY, condition};

    fn tenant(namespace: &str, ready: Option<bool>) -> DistributionTenant {
        let mut tenant = DistributionTenant::new("t", Default::default());
        tenant.metadata.namespace = Some(namespace.to_owned());
        if let Some(ready) = ready {
            let mut status = crate::api::DistributionTenantStatus::default();
            status.conditions.push(condition(READY, ready, "r", "", None));
            tenant.status = Some(status);
        }
        tenant
    }

    #[test]
    fn tenants_count_per_namespace_and_readiness() {
        let tenants = [tenant("a", Some(true)), tenant("a", Some(false)), tenant("a", None), tenant("b", Some(true))];
        let counts = count_tenants(&tenants);
        assert_eq!(counts.get(&("a".to_owned(), "Ready")), Some(&1));
        assert_eq!(counts.get(&("a".to_owned(), "NotReady")), Some(&2), "no Ready condition counts as NotReady");
        assert_eq!(counts.get(&("b".to_owned(), "Ready")), Some(&1));
    }

    #[test]
    fn tenant_count_is_read_from_the_store_at_scrape_time() {
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(registry.sub_registry_with_prefix(PREFIX));
        let (store, mut writer) = kube::runtime::reflector::store();
        metrics.count_from(move || store.state());
        let mut ready = tenant("shop", Some(true));
        ready.metadata.name = Some("a".to_owned());
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(ready));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("cloudfront_tenant_operator_tenants_total{namespace=\"shop\",status=\"Ready\"} 1"), "{text}");
    }

    #[test]
    fn metrics_use_the_seed_names() {
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(registry.sub_registry_with_prefix(PREFIX));
        metrics.error("throttling");
        metrics.drift();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("cloudfront_tenant_operator_reconcile_errors_total{error_type=\"throttling\"} 1"), "{text}");
        assert!(text.contains("cloudfront_tenant_operator_drift_detected_total 1"), "{text}");
    }
}
