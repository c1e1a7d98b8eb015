//! Cached reads of AWS (moka: time to live, bounded size), counted in
//! `blockwork_aws_cache_lookups_total{cache}`. Concurrent misses of one key wait for one call
//! ([`Cached::get_or_load`], moka's `or_try_insert_with`), so an expiry never sends N identical
//! requests; failures are not cached. A read many objects share tells them of its failures as a
//! wait ([`Cached::get_or_load_shared`], [`crate::shared`]).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use moka::future::Cache;

use crate::error::AwsError;
use crate::metrics::{AwsMetrics, Seed};
use crate::shared::Shared;

/// How long after a shared read failed its readers are told of it before the next one reads
/// again: the read has no retrier of its own, so its readers' retries are its retries, at most
/// one every five seconds however many objects wait on it.
pub const SHARED_READ_RETRY: Duration = Duration::from_secs(5);

pub struct Cached<K, V> {
    name: &'static str,
    seeds: Vec<Seed>,
    cache: Cache<K, V>,
    metrics: Arc<AwsMetrics>,
    /// The failure streaks of the keys whose shared read is under way or failing.
    health: Mutex<HashMap<K, Arc<Shared>>>,
}

impl<K, V> Cached<K, V>
where
    K: Clone + Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache named `name` (its metric label) for the controller `caller`.
    pub fn new(metrics: &Arc<AwsMetrics>, caller: &str, name: &'static str, ttl: Duration, capacity: u64) -> Self {
        Self {
            name,
            seeds: Seed::of(caller).into_iter().collect(),
            cache: Cache::builder().max_capacity(capacity).time_to_live(ttl).build(),
            metrics: Arc::clone(metrics),
            health: Mutex::default(),
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

    /// [`Self::get_or_load`], for a read many objects share (a CloudFront distribution its
    /// tenants are checked against): while it fails transiently, a reader is not made to wait
    /// for it but told at once what it waits for (`what`), AWS's answer and since when, in the
    /// same words for the whole streak, so that its object writes its status once
    /// ([`crate::shared`]); the first reader [`SHARED_READ_RETRY`] after a failed read ended
    /// reads again. Other failures (a refusal, a thing that does not exist) come back as they are.
    pub async fn get_or_load_shared<Q>(
        &self,
        key: &Q,
        what: impl FnOnce() -> String,
        load: impl Future<Output = Result<V, AwsError>>,
    ) -> Result<V, AwsError>
    where
        K: std::borrow::Borrow<Q>,
        Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
    {
        if let Some(waiting) = self.health_of(key).and_then(|health| health.outage()) {
            return Err(waiting);
        }
        // A streak is kept only while the read is under way or failing: a cached value costs a
        // lookup, no allocation.
        let read = async {
            let health = {
                let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
                let shared = health.entry(key.to_owned()).or_insert_with(|| Arc::new(Shared::new(what(), Some(SHARED_READ_RETRY))));
                Arc::clone(shared)
            };
            let read = {
                let _flight = health.begin();
                load.await.inspect_err(|error| health.failed(error))
            };
            if !read.as_ref().is_err_and(AwsError::is_transient) {
                // AWS answered (a value, or a refusal told as it is): nothing to tell its readers.
                self.health.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
            }
            read
        };
        self.get_or_load(key, read).await.map_err(|error| match self.health_of(key) {
            Some(health) => health.told(&error),
            None => error,
        })
    }

    fn health_of<Q>(&self, key: &Q) -> Option<Arc<Shared>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.health.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
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

    fn unavailable() -> AwsError {
        AwsError {
            operation: "GetDistribution",
            code: Some("ServiceUnavailable".to_owned()),
            class: crate::ErrorClass::Retryable,
            message: "Service Unavailable".to_owned(),
        }
    }

    #[tokio::test]
    async fn readers_of_a_failing_shared_read_are_told_what_they_wait_for_without_reading_again() {
        let metrics = Arc::new(AwsMetrics::unregistered());
        let cache: Cached<String, u32> = Cached::new(&metrics, "tenant", "test", Duration::from_secs(60), 10);
        let what = || "the CloudFront distribution E1 as the operator's own identity".to_owned();
        let calls = AtomicUsize::new(0);
        let failing = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(unavailable())
        };
        let first = cache.get_or_load_shared("E1", what, failing()).await.unwrap_err();
        let second = cache.get_or_load_shared("E1", what, failing()).await.unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the second reader is told, not made to read");
        assert_eq!(first, second, "the same words for the whole streak");
        assert_eq!(first.code.as_deref(), Some(crate::shared::SHARED_CALL_FAILING));
        for said in ["the CloudFront distribution E1", "ServiceUnavailable: Service Unavailable", "has been failing since"] {
            assert!(first.message.contains(said), "{said}: {}", first.message);
        }
    }

    #[tokio::test]
    async fn a_refused_shared_read_is_no_wait() {
        let metrics = Arc::new(AwsMetrics::unregistered());
        let cache: Cached<String, u32> = Cached::new(&metrics, "tenant", "test", Duration::from_secs(60), 10);
        let denied = AwsError { code: Some("AccessDenied".to_owned()), class: crate::ErrorClass::Terminal, ..unavailable() };
        let told = cache.get_or_load_shared("E1", String::new, async { Err::<u32, _>(denied.clone()) }).await;
        assert_eq!(told, Err(denied), "a person must act: told as it is");
        assert_eq!(cache.get_or_load_shared("E1", String::new, async { Ok(3) }).await, Ok(3), "and the next reader reads");
    }
}
