//! A cache of certificate lookups (moka: TTL, bounded size), by ARN (DescribeCertificate of
//! issued certificates) and by FQDN (the account's certificate listing that lookups by tag start
//! from), with hit and miss metrics. Ready certificates are looked up about once an hour; the
//! cache makes repeated reconciles in between (spec or annotation changes, restarts of the watch)
//! free, and a thousand Certs created at once share one listing instead of each paging through
//! all certificates. A caller that needs a complete listing says so ([`Freshness::Current`]): it
//! is read from AWS, and replaces the shared one.

use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;

use super::{AwsError, Certificate, CertificateApi, CertificateRequest, DnsApi, DnsRecord, Freshness};
use crate::metrics::CertMetrics;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    pub ttl: Duration,
    pub max_entries: u64,
    /// How long the certificate listing is reused for [`Freshness::Recent`] lookups. It misses
    /// a certificate requested since, so callers that conclude from a listing that a certificate
    /// does not exist ask for [`Freshness::Current`] instead.
    pub listing_ttl: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self { ttl: Duration::from_secs(300), max_entries: 1000, listing_ttl: Duration::from_secs(30) }
    }
}

pub struct Cached<T> {
    inner: T,
    by_arn: Cache<String, Certificate>,
    /// The one listing, (FQDN, ARN) pairs.
    listing: Cache<(), Arc<Vec<(String, String)>>>,
    metrics: Arc<CertMetrics>,
}

impl<T> Cached<T> {
    pub fn new(inner: T, config: CacheConfig, metrics: Arc<CertMetrics>) -> Self {
        Self {
            inner,
            by_arn: Cache::builder().max_capacity(config.max_entries).time_to_live(config.ttl).build(),
            listing: Cache::builder().max_capacity(1).time_to_live(config.listing_ttl).build(),
            metrics,
        }
    }
}

impl<T: CertificateApi> CertificateApi for Cached<T> {
    async fn describe(&self, arn: &str) -> Result<Certificate, AwsError> {
        if let Some(certificate) = self.by_arn.get(arn).await {
            self.metrics.cache_lookup("arn", true);
            return Ok(certificate);
        }
        self.metrics.cache_lookup("arn", false);
        let certificate = self.inner.describe(arn).await?;
        if cacheable(&certificate) {
            self.by_arn.insert(arn.to_owned(), certificate.clone()).await;
        }
        Ok(certificate)
    }

    async fn list_certificates(&self, freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
        if freshness == Freshness::Recent
            && let Some(listing) = self.listing.get(&()).await
        {
            self.metrics.cache_lookup("fqdn", true);
            return Ok(listing.as_ref().clone());
        }
        self.metrics.cache_lookup("fqdn", false);
        let listing = self.inner.list_certificates(freshness).await?;
        self.listing.insert((), Arc::new(listing.clone())).await;
        Ok(listing)
    }

    async fn list_tags(&self, arn: &str) -> Result<Vec<(String, String)>, AwsError> {
        self.inner.list_tags(arn).await
    }

    async fn request(&self, request: &CertificateRequest) -> Result<String, AwsError> {
        let arn = self.inner.request(request).await?;
        self.by_arn.invalidate(&arn).await;
        Ok(arn)
    }

    async fn delete(&self, arn: &str) -> Result<(), AwsError> {
        let result = self.inner.delete(arn).await;
        self.invalidate(arn).await;
        result
    }

    async fn invalidate(&self, arn: &str) {
        self.by_arn.invalidate(arn).await;
        self.inner.invalidate(arn).await;
    }
}

/// Only issued certificates are remembered: they are the steady state the cache is for, while a
/// pending certificate must be read fresh to see the moment ACM issues it.
fn cacheable(certificate: &Certificate) -> bool {
    certificate.status == super::AcmStatus::Issued
}

/// Route53 answers are not cached: the operator reads a record only right before writing it.
impl<T: DnsApi> DnsApi for Cached<T> {
    async fn lookup_cname(&self, zone_id: &str, name: &str) -> Result<Option<String>, AwsError> {
        self.inner.lookup_cname(zone_id, name).await
    }

    async fn upsert_cnames(&self, zone_id: &str, records: &[DnsRecord]) -> Result<(), AwsError> {
        self.inner.upsert_cnames(zone_id, records).await
    }

    async fn delete_cname(&self, zone_id: &str, record: &DnsRecord) -> Result<bool, AwsError> {
        self.inner.delete_cname(zone_id, record).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::aws::AcmStatus;
    use crate::aws::fake::Fake;

    fn cached(fake: Fake) -> (Cached<Fake>, Arc<CertMetrics>) {
        let metrics = Arc::new(CertMetrics::unregistered());
        (Cached::new(fake, CacheConfig::default(), Arc::clone(&metrics)), metrics)
    }

    #[tokio::test]
    async fn issued_certificates_are_served_from_the_cache_by_arn_and_fqdn() {
        let (cache, metrics) = cached(Fake::with(AcmStatus::Issued));
        cache.describe("arn:1").await.unwrap();
        cache.describe("arn:1").await.unwrap();
        assert_eq!(cache.inner.count("describe"), 1);
        assert_eq!(metrics.cache_counts("arn"), (1, 1));
        cache.list_certificates(Freshness::Recent).await.unwrap();
        let listed = cache.list_certificates(Freshness::Recent).await.unwrap();
        assert_eq!(listed, [("a.example.com".to_owned(), "arn:1".to_owned())]);
        assert_eq!(cache.inner.count("list_certificates"), 1, "the listing is shared");
        assert_eq!(metrics.cache_counts("fqdn"), (1, 1));
    }

    #[tokio::test]
    async fn a_current_listing_is_read_from_aws_and_replaces_the_shared_one() {
        let (cache, _) = cached(Fake::default());
        assert!(cache.list_certificates(Freshness::Recent).await.unwrap().is_empty());
        *cache.inner.certificate.lock().unwrap() = Fake::with(AcmStatus::PendingValidation).certificate.into_inner().unwrap();
        assert!(cache.list_certificates(Freshness::Recent).await.unwrap().is_empty(), "a recent listing may miss a new certificate");
        assert_eq!(cache.list_certificates(Freshness::Current).await.unwrap().len(), 1, "a current one does not");
        assert_eq!(cache.list_certificates(Freshness::Recent).await.unwrap().len(), 1, "and is shared from then on");
        assert_eq!(cache.inner.count("list_certificates"), 2);
    }

    #[tokio::test]
    async fn pending_certificates_are_always_read_fresh() {
        let (cache, _) = cached(Fake::with(AcmStatus::PendingValidation));
        cache.describe("arn:1").await.unwrap();
        cache.describe("arn:1").await.unwrap();
        assert_eq!(cache.inner.count("describe"), 2);
    }

    #[tokio::test]
    async fn delete_and_invalidate_forget_the_certificate() {
        let (cache, _) = cached(Fake::with(AcmStatus::Issued));
        cache.describe("arn:1").await.unwrap();
        cache.invalidate("arn:1").await;
        cache.describe("arn:1").await.unwrap();
        assert_eq!(cache.inner.count("describe"), 2);
        cache.delete("arn:1").await.unwrap();
        assert!(cache.describe("arn:1").await.is_err(), "a deleted certificate is not served from the cache");
    }
}
