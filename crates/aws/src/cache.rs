//! Cached reads of AWS (moka: time to live, bounded size), counted in
//! `blockwork_aws_cache_lookups_total{cache}`. Concurrent misses of one key wait for one call
//! ([`Cached::get_or_load`], moka's `or_try_insert_with`), so an expiry never sends N identical
//! requests; failures are not cached.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;

use crate::metrics::{AwsMetrics, Seed};

pub struct Cached<K, V> {
    name: &'static str,
    seeds: Vec<Seed>,
    cache: Cache<K, V>,
    metrics: Arc<AwsMetrics>,
}

impl<K, V> Cached<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache named `name` (its metric label) for the controller `caller`.
    pub fn new(metrics: &Arc<AwsMetrics>, caller: &str, name: &'static str, ttl: Duration, capacity: u64) -> Self {
        Self {
            name,
            seeds: Seed::of(caller).into_iter().collect(),
            cache: Cache::builder().max_capacity(capacity).time_to_live(ttl).build(),
            metrics: Arc::clone(metrics),
        }
    }

    /// The cached value, or the one `load` reads (once, however many callers miss at once).
    pub async fn get_or_load<Q, E>(&self, key: &Q, load: impl Future<Output = Result<V, E>>) -> Result<V, E>
    where
        K: std::borrow::Borrow<Q>,
        Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
        E: Clone + Send + Sync + 'static,
    {
        // On the heap: the load is usually an AWS call, whose future is large.
        let entry = self.cache.entry_by_ref(key).or_try_insert_with(Box::pin(load)).await.map_err(|error| (*error).clone())?;
        self.metrics.cache_lookup(&self.seeds, self.name, !entry.is_fresh());
        Ok(entry.into_value())
    }

    /// The cached value, if any (counted as a lookup).
    pub async fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let value = self.cache.get(key).await;
        self.metrics.cache_lookup(&self.seeds, self.name, value.is_some());
        value
    }

    pub async fn insert(&self, key: K, value: V) {
        self.cache.insert(key, value).await;
    }

    pub async fn invalidate<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.invalidate(key).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_misses_of_one_key_make_one_call() {
        let metrics = Arc::new(AwsMetrics::unregistered());
        let cache: Cached<String, u32> = Cached::new(&metrics, "tenant", "test", Duration::from_secs(60), 10);
        let calls = AtomicUsize::new(0);
        let load = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<u32, String>(7)
        };
        let results = futures::future::join_all((0..8).map(|_| cache.get_or_load("k", load()))).await;
        assert!(results.iter().all(|r| *r == Ok(7)));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "eight readers, one call");
        assert_eq!(metrics.cache_counts("test"), (7, 1));
    }

    #[tokio::test]
    async fn failures_are_not_cached() {
        let metrics = Arc::new(AwsMetrics::unregistered());
        let cache: Cached<String, u32> = Cached::new(&metrics, "tenant", "test", Duration::from_secs(60), 10);
        assert_eq!(cache.get_or_load("k", async { Err::<u32, _>("down".to_owned()) }).await, Err("down".to_owned()));
        assert_eq!(cache.get_or_load("k", async { Ok::<u32, String>(3) }).await, Ok(3));
    }
}
