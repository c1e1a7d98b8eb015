//! Retries of throttled and transient (5xx, network) calls with capped exponential backoff and
//! jitter (backon). The SDK's own retries are off, so this is the one place that retries and
//! counts throttling events. What still fails reaches the runtime, which backs off per object.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use super::{AwsError, Certificate, CertificateApi, CertificateRequest, DnsApi, DnsRecord, ErrorClass, Freshness};
use crate::metrics::CertMetrics;

/// Backoff between attempts: `min(max_delay, base_delay × 2^n)` with jitter (seed 000: 1 s
/// doubling, 5 retries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Retries after the first attempt.
    pub max_retries: usize,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self { base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(30), max_retries: 5 }
    }
}

pub struct Retrying<T> {
    inner: T,
    config: RetryConfig,
    metrics: Arc<CertMetrics>,
}

impl<T> Retrying<T> {
    pub fn new(inner: T, config: RetryConfig, metrics: Arc<CertMetrics>) -> Self {
        Self { inner, config, metrics }
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.config.base_delay)
            .with_max_delay(self.config.max_delay)
            .with_factor(2.0)
            .with_max_times(self.config.max_retries)
            .with_jitter()
    }

    fn notify(&self, error: &AwsError, _: Duration) {
        if error.class == ErrorClass::Throttled {
            self.metrics.throttled(error.operation);
        }
        tracing::debug!(operation = error.operation, class = ?error.class, %error, "retrying an AWS call");
    }
}

/// Throttling and transient failures are worth another attempt; a person must fix the rest.
fn retryable(error: &AwsError) -> bool {
    matches!(error.class, ErrorClass::Throttled | ErrorClass::Retryable)
}

impl<T: CertificateApi> CertificateApi for Retrying<T> {
    async fn describe(&self, arn: &str) -> Result<Certificate, AwsError> {
        (|| self.inner.describe(arn)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn list_certificates(&self, freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
        (|| self.inner.list_certificates(freshness)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn list_tags(&self, arn: &str) -> Result<Vec<(String, String)>, AwsError> {
        (|| self.inner.list_tags(arn)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn request(&self, request: &CertificateRequest) -> Result<String, AwsError> {
        // Safe to repeat: the idempotency token makes ACM return the first certificate.
        (|| self.inner.request(request)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn delete(&self, arn: &str) -> Result<(), AwsError> {
        (|| self.inner.delete(arn)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn invalidate(&self, arn: &str) {
        self.inner.invalidate(arn).await;
    }
}

impl<T: DnsApi> DnsApi for Retrying<T> {
    async fn lookup_cname(&self, zone_id: &str, name: &str) -> Result<Option<String>, AwsError> {
        (|| self.inner.lookup_cname(zone_id, name)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn upsert_cnames(&self, zone_id: &str, records: &[DnsRecord]) -> Result<(), AwsError> {
        (|| self.inner.upsert_cnames(zone_id, records)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }

    async fn delete_cname(&self, zone_id: &str, record: &DnsRecord) -> Result<bool, AwsError> {
        (|| self.inner.delete_cname(zone_id, record)).retry(self.backoff()).when(retryable).notify(|e, d| self.notify(e, d)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::aws::AcmStatus;
    use crate::aws::fake::Fake;

    fn retrying(fake: Fake) -> (Retrying<Fake>, Arc<CertMetrics>) {
        let metrics = Arc::new(CertMetrics::unregistered());
        let config = RetryConfig { base_delay: Duration::from_millis(1), max_delay: Duration::from_millis(5), max_retries: 3 };
        (Retrying::new(fake, config, Arc::clone(&metrics)), metrics)
    }

    #[tokio::test]
    async fn throttling_and_server_errors_are_retried_and_throttling_counted() {
        let (client, metrics) = retrying(Fake::with(AcmStatus::Issued));
        client.inner.fail(&[ErrorClass::Throttled, ErrorClass::Retryable]);
        client.describe("arn:1").await.unwrap();
        assert_eq!(client.inner.count("describe"), 3);
        assert_eq!(metrics.throttling_events("describe"), 1);
    }

    #[tokio::test]
    async fn terminal_and_not_found_errors_are_not_retried() {
        let (client, _) = retrying(Fake::with(AcmStatus::Issued));
        client.inner.fail(&[ErrorClass::Terminal]);
        assert_eq!(client.request(&request()).await.unwrap_err().class, ErrorClass::Terminal);
        client.inner.fail(&[ErrorClass::NotFound]);
        assert_eq!(client.delete("arn:1").await.unwrap_err().class, ErrorClass::NotFound);
        assert_eq!((client.inner.count("request"), client.inner.count("delete")), (1, 1));
    }

    #[tokio::test]
    async fn retries_are_capped() {
        let (client, metrics) = retrying(Fake::with(AcmStatus::Issued));
        client.inner.fail(&[ErrorClass::Throttled; 10]);
        assert_eq!(client.describe("arn:1").await.unwrap_err().class, ErrorClass::Throttled);
        assert_eq!(client.inner.count("describe"), 4, "one attempt and three retries");
        assert_eq!(metrics.throttling_events("describe"), 3, "the last failure is not followed by a retry");
    }

    fn request() -> CertificateRequest {
        CertificateRequest { domain: "a.example.com".into(), sans: Vec::new(), token: "t".into(), tags: Vec::new() }
    }
}
