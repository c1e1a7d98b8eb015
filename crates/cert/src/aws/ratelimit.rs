//! Token buckets in front of AWS (governor): one for ACM, one per Route53 hosted zone (created
//! on first use; AWS's Route53 quota is per zone, so zone A's traffic must not starve zone B).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::middleware::{StateInformationMiddleware, StateSnapshot};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::{AwsError, Certificate, CertificateApi, CertificateRequest, DnsApi, DnsRecord, Freshness};
use crate::metrics::CertMetrics;

/// Requests per second and burst of each bucket. Defaults: half of AWS's quotas (seed 000).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimitConfig {
    pub acm_per_second: f64,
    pub acm_burst: u32,
    pub route53_per_second: f64,
    pub route53_burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self { acm_per_second: 5.0, acm_burst: 10, route53_per_second: 3.0, route53_burst: 5 }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid rate limit: {0}")]
pub struct RateLimitError(String);

fn quota(per_second: f64, burst: u32, what: &str) -> Result<Quota, RateLimitError> {
    if !per_second.is_finite() || per_second <= 0.0 {
        return Err(RateLimitError(format!("{what} must be a positive number of requests per second, not {per_second}")));
    }
    let burst = NonZeroU32::new(burst).ok_or_else(|| RateLimitError(format!("{what} burst must be at least 1")))?;
    let period = Duration::from_secs_f64(1.0 / per_second);
    Quota::with_period(period).map(|q| q.allow_burst(burst)).ok_or_else(|| RateLimitError(format!("{what} is too high")))
}

/// Waits for a token before each call of the inner client.
pub struct RateLimited<T> {
    inner: T,
    acm: DefaultDirectRateLimiter<StateInformationMiddleware>,
    route53: DefaultKeyedRateLimiter<String, StateInformationMiddleware>,
    config: RateLimitConfig,
    metrics: Arc<CertMetrics>,
}

impl<T> RateLimited<T> {
    pub fn new(inner: T, config: RateLimitConfig, metrics: Arc<CertMetrics>) -> Result<Self, RateLimitError> {
        let acm = RateLimiter::direct(quota(config.acm_per_second, config.acm_burst, "--acm-rate-limit")?).with_middleware();
        let route53 = RateLimiter::keyed(quota(config.route53_per_second, config.route53_burst, "--route53-rate-limit")?).with_middleware();
        // Full buckets until the first call; a hosted zone's bucket starts full too.
        metrics.rate_limiter_tokens("acm", "", f64::from(config.acm_burst), config.acm_per_second, f64::from(config.acm_burst));
        let route53_burst = f64::from(config.route53_burst);
        metrics.rate_limiter_tokens("route53", "", route53_burst, config.route53_per_second, route53_burst);
        Ok(Self { inner, acm, route53, config, metrics })
    }

    async fn acm_token(&self) {
        let started = Instant::now();
        let snapshot = self.acm.until_ready().await;
        self.metrics.rate_limit_wait("acm", started.elapsed());
        self.report("acm", "", &snapshot, self.config.acm_per_second, self.config.acm_burst);
    }

    async fn route53_token(&self, zone_id: &str) {
        let started = Instant::now();
        let snapshot = self.route53.until_key_ready(&zone_id.to_owned()).await;
        self.metrics.rate_limit_wait("route53", started.elapsed());
        self.report("route53", zone_id, &snapshot, self.config.route53_per_second, self.config.route53_burst);
    }

    fn report(&self, service: &'static str, key: &str, snapshot: &StateSnapshot, per_second: f64, burst: u32) {
        let tokens = f64::from(snapshot.remaining_burst_capacity());
        self.metrics.rate_limiter_tokens(service, key, tokens, per_second, f64::from(burst));
    }
}

impl<T: CertificateApi> CertificateApi for RateLimited<T> {
    async fn describe(&self, arn: &str) -> Result<Certificate, AwsError> {
        self.acm_token().await;
        self.inner.describe(arn).await
    }

    async fn list_certificates(&self, freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
        // One token for all pages: a listing is shared by every adoption lookup for a while
        // (see the cache), so it is rare.
        self.acm_token().await;
        self.inner.list_certificates(freshness).await
    }

    async fn list_tags(&self, arn: &str) -> Result<Vec<(String, String)>, AwsError> {
        self.acm_token().await;
        self.inner.list_tags(arn).await
    }

    async fn request(&self, request: &CertificateRequest) -> Result<String, AwsError> {
        self.acm_token().await;
        self.inner.request(request).await
    }

    async fn delete(&self, arn: &str) -> Result<(), AwsError> {
        self.acm_token().await;
        self.inner.delete(arn).await
    }

    async fn invalidate(&self, arn: &str) {
        self.inner.invalidate(arn).await;
    }
}

impl<T: DnsApi> DnsApi for RateLimited<T> {
    async fn lookup_cname(&self, zone_id: &str, name: &str) -> Result<Option<String>, AwsError> {
        self.route53_token(zone_id).await;
        self.inner.lookup_cname(zone_id, name).await
    }

    async fn upsert_cnames(&self, zone_id: &str, records: &[DnsRecord]) -> Result<(), AwsError> {
        self.route53_token(zone_id).await;
        self.inner.upsert_cnames(zone_id, records).await
    }

    async fn delete_cname(&self, zone_id: &str, record: &DnsRecord) -> Result<bool, AwsError> {
        self.route53_token(zone_id).await;
        self.inner.delete_cname(zone_id, record).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rejects_nonsensical_limits() {
        assert!(quota(0.0, 1, "x").is_err());
        assert!(quota(f64::NAN, 1, "x").is_err());
        assert!(quota(5.0, 0, "x").is_err());
        assert!(quota(5.0, 10, "x").is_ok());
        assert!(quota(0.5, 1, "x").is_ok(), "less than one per second is fine");
    }

    #[tokio::test]
    async fn burst_passes_at_once_then_calls_are_paced() {
        let limiter: DefaultDirectRateLimiter = RateLimiter::direct(quota(20.0, 3, "x").unwrap());
        let started = Instant::now();
        for _ in 0..3 {
            limiter.until_ready().await;
        }
        assert!(started.elapsed() < Duration::from_millis(30), "the burst does not wait");
        for _ in 0..2 {
            limiter.until_ready().await;
        }
        assert!(started.elapsed() >= Duration::from_millis(90), "then 20/s: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn the_tokens_gauge_starts_full_drops_with_each_call_and_shows_the_emptiest_zone() {
        use crate::aws::AcmStatus;
        use crate::aws::fake::Fake;
        let metrics = Arc::new(CertMetrics::unregistered());
        let config = RateLimitConfig { acm_per_second: 0.01, acm_burst: 3, route53_per_second: 0.01, route53_burst: 5 };
        let limited = RateLimited::new(Fake::with(AcmStatus::Issued), config, Arc::clone(&metrics)).unwrap();
        assert_eq!(metrics.tokens("acm"), Some(3.0));
        assert_eq!(metrics.tokens("route53"), Some(5.0));
        limited.describe("arn:1").await.unwrap();
        limited.describe("arn:1").await.unwrap();
        let acm = metrics.tokens("acm").unwrap();
        assert!((1.0..1.1).contains(&acm), "two of three tokens taken: {acm}");
        limited.acm_token().await;
        assert!(metrics.tokens("acm").unwrap() < 0.1);
        limited.route53_token("Z1").await;
        limited.route53_token("Z2").await;
        limited.route53_token("Z2").await;
        let route53 = metrics.tokens("route53").unwrap();
        assert!((3.0..3.1).contains(&route53), "zone Z2 has taken two of five: {route53}");
    }

    #[tokio::test]
    async fn each_zone_has_its_own_bucket() {
        let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota(1.0, 1, "x").unwrap());
        let started = Instant::now();
        limiter.until_key_ready(&"Z1".to_owned()).await;
        limiter.until_key_ready(&"Z2".to_owned()).await;
        assert!(started.elapsed() < Duration::from_millis(100), "zone B is not slowed by zone A");
        assert!(limiter.check_key(&"Z1".to_owned()).is_err(), "zone A's bucket is empty");
    }
}
