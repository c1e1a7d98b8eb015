//! The Cache controller's own metrics (the servers' are their exporters'): the failovers it
//! saw, per Cache, for the dashboard's Failovers panel, and the password rotations it completed.
//! One series per Cache that ever failed over or rotated, so bounded by the Caches.
//!
//! [`CacheMetrics::register`] registers unprefixed names; the `blockwork` binary passes the
//! sub-registry `blockwork_cache`, so the counter is `blockwork_cache_failovers_total`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub namespace: String,
    pub cache: String,
}

#[derive(Debug, Default)]
pub struct CacheMetrics {
    failovers: Family<CacheLabels, Counter>,
    password_rotations: Family<CacheLabels, Counter>,
}

impl CacheMetrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::default();
        registry.register(
            "failovers",
            "Failovers Sentinel made, as the controller saw them (status.lastFailover)",
            metrics.failovers.clone(),
        );
        registry.register(
            "password_rotations",
            "Rotations of a Cache's application password the controller completed (the previous password retired)",
            metrics.password_rotations.clone(),
        );
        Arc::new(metrics)
    }

    /// Counts a completed password rotation of `namespace/cache`.
    pub fn password_rotation(&self, namespace: &str, cache: &str) {
        self.password_rotations.get_or_create(&CacheLabels { namespace: namespace.to_owned(), cache: cache.to_owned() }).inc();
    }

    /// Counts a failover of `namespace/cache`.
    pub fn failover(&self, namespace: &str, cache: &str) {
        self.failovers.get_or_create(&CacheLabels { namespace: namespace.to_owned(), cache: cache.to_owned() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_is_counted_per_cache() {
        let mut registry = Registry::default();
        let metrics = CacheMetrics::register(registry.sub_registry_with_prefix("blockwork_cache"));
        metrics.failover("ns", "ha");
        metrics.failover("ns", "ha");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("blockwork_cache_failovers_total{namespace=\"ns\",cache=\"ha\"} 2"), "{text}");
    }
}
