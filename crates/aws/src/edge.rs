//! The process's AWS edge: one [`Aws`] per process, shared by every controller. It builds the
//! SDK clients (region, endpoint overrides, assumed roles; the SDK's own retries off) and runs
//! every call through [`Aws::call`]:
//!
//! ```text
//! tokens (limiter: account, operation, changes) → attempt (timed, classified, counted)
//!   → throttled or transient? backoff with jitter, then tokens again → …
//! ```
//!
//! so a call is retried in one place, each retry draws tokens like the first attempt, and every
//! attempt lands in the one metrics family.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use backon::{ExponentialBuilder, Retryable};
use tokio::sync::OnceCell;
use tracing::{Instrument as _, debug};

use crate::credentials::Credentials;
use crate::error::{AwsError, classify_sdk_error};
use crate::limiter::{Account, Limiter, Scope};
use crate::metrics::{AwsMetrics, Seed};
use crate::principal::{AssumedRole, OPERATOR, Principal};
use crate::quota::{Quotas, Service};
use crate::route53::BatchPolicy;
use crate::throttled::{BACKING_OFF, Throttled, held_back};

/// Backoff between attempts of one call: `min(max_delay, base_delay × 2^n)` with jitter, at
/// most `max_retries` retries (seed 000: from 1 s, doubling, 5 retries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base_delay: Duration,
    pub max_delay: Duration,
    pub max_retries: usize,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(30), max_retries: 5 }
    }
}

/// An endpoint override for one service, for every controller or (`controller`) one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub controller: Option<&'static str>,
    pub service: Service,
    pub url: String,
}

/// Everything the layer is configured with (see [`crate::config::AwsArgs`] for the flags).
#[derive(Clone, Debug, PartialEq)]
pub struct AwsConfig {
    /// The region of regional APIs (ACM); default: the SDK's chain.
    pub region: Option<String>,
    /// An endpoint for every service (an emulator).
    pub endpoint_url: Option<String>,
    /// Per-service (and per-controller) endpoints, over `endpoint_url`.
    pub endpoints: Vec<Endpoint>,
    /// Bounds each attempt of a call.
    pub timeout: Duration,
    /// The process's share of the quotas (already scaled).
    pub quotas: Quotas,
    pub retry: RetryPolicy,
    pub route53_batch: BatchPolicy,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            region: None,
            endpoint_url: None,
            endpoints: Vec::new(),
            timeout: Duration::from_secs(30),
            // The published quotas are valid and the default factor is in range.
            quotas: Quotas::aws().scaled(crate::quota::DEFAULT_SAFETY_FACTOR).unwrap_or_else(|_| Quotas::aws()),
            retry: RetryPolicy::default(),
            route53_batch: BatchPolicy::default(),
        }
    }
}

/// One AWS call as the layer sees it: for whom, as whom, against which quota, which operation,
/// and how many record changes it makes (Route 53's change throughput).
#[derive(Clone, Debug)]
pub struct Call<'a> {
    /// The controllers the call serves (a Route 53 batch may serve several).
    pub callers: &'a [&'static str],
    /// The AwsIdentity it acts as (or `operator`): the metrics' `identity` label.
    pub identity: &'a str,
    pub scope: Scope,
    pub operation: &'static str,
    pub changes: u32,
}

/// The process's AWS layer.
pub struct Aws {
    config: AwsConfig,
    base: OnceCell<SdkConfig>,
    limiter: Limiter,
    metrics: Arc<AwsMetrics>,
    /// Assumed roles' credentials.
    credentials: Credentials,
    /// Accounts whose calls back off after AWS throttled them.
    throttled: Throttled,
    /// The operator's own account id, once asked (GetCallerIdentity).
    own_account: OnceCell<String>,
    records: std::sync::OnceLock<Arc<crate::route53::Records>>,
}

impl std::fmt::Debug for Aws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aws").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Aws {
    /// The layer with the SDK's default credential and region chain (env, IRSA / Pod Identity,
    /// profile, IMDS), loaded on first use: building it costs nothing for a process whose
    /// controllers never call AWS.
    pub fn new(config: AwsConfig, metrics: Arc<AwsMetrics>) -> Arc<Self> {
        Self::build(config, metrics, OnceCell::new())
    }

    /// The layer over a given SDK configuration (its credentials and region), e.g. static
    /// credentials for an emulator.
    pub fn with_sdk_config(config: AwsConfig, sdk: SdkConfig, metrics: Arc<AwsMetrics>) -> Arc<Self> {
        Self::build(config, metrics, OnceCell::new_with(Some(sdk)))
    }

    fn build(config: AwsConfig, metrics: Arc<AwsMetrics>, base: OnceCell<SdkConfig>) -> Arc<Self> {
        let limiter = Limiter::new(config.quotas.clone(), Arc::clone(&metrics));
        Arc::new(Self {
            config,
            base,
            limiter,
            metrics,
            credentials: Credentials::new(),
            throttled: Throttled::default(),
            own_account: OnceCell::new(),
            records: std::sync::OnceLock::new(),
        })
    }

    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<AwsMetrics> {
        &self.metrics
    }

    /// The process's share of the quotas.
    pub fn quotas(&self) -> &Quotas {
        self.limiter.quotas()
    }

    /// The process's Route 53 records (one set of batches per hosted zone, for every controller).
    pub fn records(self: &Arc<Self>) -> Arc<crate::route53::Records> {
        Arc::clone(self.records.get_or_init(|| crate::route53::Records::new(Arc::clone(self))))
    }

    async fn base(&self) -> &SdkConfig {
        self.base
            .get_or_init(|| async {
                let mut loader = aws_config::defaults(BehaviorVersion::latest());
                if let Some(region) = &self.config.region {
                    loader = loader.region(Region::new(region.clone()));
                }
                loader.load().await
            })
            .await
    }

    /// The region regional calls go to when the caller names none.
    pub async fn region(&self) -> Option<String> {
        self.base().await.region().map(|r| r.as_ref().to_owned())
    }

    fn endpoint(&self, controller: &str, service: Service) -> Option<&str> {
        let overrides = self.config.endpoints.iter().filter(|e| e.service == service);
        let mut overrides: Vec<&Endpoint> = overrides.collect();
        overrides.sort_by_key(|e| e.controller.is_none());
        overrides
            .into_iter()
            .find(|e| e.controller.is_none_or(|c| c == controller))
            .map(|e| e.url.as_str())
            .or(self.config.endpoint_url.as_deref())
    }

    fn timeouts(&self) -> TimeoutConfig {
        TimeoutConfig::builder().operation_timeout(self.config.timeout).build()
    }

    /// The SDK configuration `principal` calls with: the operator's own, or an assumed role's
    /// (STS AssumeRole with its ExternalId and session name, cached; see [`crate::credentials`]).
    pub async fn sdk(&self, controller: &'static str, principal: &Principal) -> Result<SdkConfig, AwsError> {
        match principal.role() {
            None => Ok(self.base().await.clone()),
            // On the heap: the AssumeRole call's future is large, and every client asks here.
            Some(role) => Box::pin(self.credentials.get(role, Box::pin(self.assume(controller, principal.identity(), role)))).await,
        }
    }

    /// An ACM client for `controller` acting as `principal`, in `region` (default: the process's).
    pub async fn acm(
        &self,
        controller: &'static str,
        region: Option<&str>,
        principal: &Principal,
    ) -> Result<aws_sdk_acm::Client, AwsError> {
        let sdk = self.sdk(controller, principal).await?;
        let mut builder = aws_sdk_acm::config::Builder::from(&sdk).retry_config(RetryConfig::disabled()).timeout_config(self.timeouts());
        if let Some(url) = self.endpoint(controller, Service::Acm) {
            builder = builder.endpoint_url(url);
        }
        if let Some(region) = region {
            builder = builder.region(Region::new(region.to_owned()));
        }
        Ok(aws_sdk_acm::Client::from_conf(builder.build()))
    }

    /// An AWS Private CA client for `controller` acting as `principal`, in `region` (default: the process's).
    pub async fn acm_pca(
        &self,
        controller: &'static str,
        region: Option<&str>,
        principal: &Principal,
    ) -> Result<aws_sdk_acmpca::Client, AwsError> {
        let sdk = self.sdk(controller, principal).await?;
        let mut builder = aws_sdk_acmpca::config::Builder::from(&sdk).retry_config(RetryConfig::disabled()).timeout_config(self.timeouts());
        if let Some(url) = self.endpoint(controller, Service::AcmPca) {
            builder = builder.endpoint_url(url);
        }
        if let Some(region) = region {
            builder = builder.region(Region::new(region.to_owned()));
        }
        Ok(aws_sdk_acmpca::Client::from_conf(builder.build()))
    }

    /// A CloudFront client for `controller` acting as `principal`.
    pub async fn cloudfront(&self, controller: &'static str, principal: &Principal) -> Result<aws_sdk_cloudfront::Client, AwsError> {
        let sdk = self.sdk(controller, principal).await?;
        let mut builder =
            aws_sdk_cloudfront::config::Builder::from(&sdk).retry_config(RetryConfig::disabled()).timeout_config(self.timeouts());
        if let Some(url) = self.endpoint(controller, Service::CloudFront) {
            builder = builder.endpoint_url(url);
        }
        Ok(aws_sdk_cloudfront::Client::from_conf(builder.build()))
    }

    /// A Route 53 client for `controller` acting as `principal` (whose account its calls draw
    /// from: [`Principal::account`]).
    pub async fn route53(&self, controller: &'static str, principal: &Principal) -> Result<aws_sdk_route53::Client, AwsError> {
        let sdk = self.sdk(controller, principal).await?;
        let mut builder =
            aws_sdk_route53::config::Builder::from(&sdk).retry_config(RetryConfig::disabled()).timeout_config(self.timeouts());
        if let Some(url) = self.endpoint(controller, Service::Route53) {
            builder = builder.endpoint_url(url);
        }
        Ok(aws_sdk_route53::Client::from_conf(builder.build()))
    }

    /// The STS client of `controller` with the operator's own credentials (AssumeRole;
    /// GetCallerIdentity for `blockwork check`).
    pub async fn sts(&self, controller: &str) -> aws_sdk_sts::Client {
        self.sts_with(controller, self.base().await)
    }

    /// An STS client acting as `principal` (GetCallerIdentity: which account a role is in).
    pub async fn sts_as(&self, controller: &'static str, principal: &Principal) -> Result<aws_sdk_sts::Client, AwsError> {
        Ok(self.sts_with(controller, &self.sdk(controller, principal).await?))
    }

    fn sts_with(&self, controller: &str, sdk: &SdkConfig) -> aws_sdk_sts::Client {
        let mut builder = aws_sdk_sts::config::Builder::from(sdk).retry_config(RetryConfig::disabled()).timeout_config(self.timeouts());
        if let Some(url) = self.endpoint(controller, Service::Sts) {
            builder = builder.endpoint_url(url);
        }
        aws_sdk_sts::Client::from_conf(builder.build())
    }

    /// The account id of `principal`: its role's, from the ARN; for the operator's own identity,
    /// asked once with GetCallerIdentity (which needs no permission). `None` when it cannot be
    /// told. For comparing accounts only: never shown to users.
    pub async fn account_id(&self, controller: &'static str, principal: &Principal) -> Option<String> {
        if let Some(role) = principal.role() {
            return crate::principal::account_of_arn(&role.arn).map(str::to_owned);
        }
        const OP: &str = "GetCallerIdentity";
        let sts = self.sts(controller).await;
        let asked = self
            .own_account
            .get_or_try_init(|| async {
                let call = Call {
                    callers: &[controller],
                    identity: OPERATOR,
                    scope: Scope::new(Account::Own, Service::Sts, None),
                    operation: OP,
                    changes: 0,
                };
                let output =
                    self.call(call, || async { sts.get_caller_identity().send().await.map_err(|e| classify_sdk_error(OP, &e)) }).await?;
                output.account().map(str::to_owned).ok_or_else(|| AwsError::incomplete(OP, "the account"))
            })
            .await;
        match asked {
            Ok(account) => Some(account.clone()),
            Err(error) => {
                debug!(%error, "the operator's own account could not be told");
                None
            }
        }
    }

    /// AssumeRole of `role` for `identity`, through the layer (the operator's STS bucket, counted,
    /// retried): the SDK configuration with its credentials, and when they expire.
    async fn assume(&self, controller: &'static str, identity: &str, role: &AssumedRole) -> Result<(SdkConfig, SystemTime), AwsError> {
        const OP: &str = "AssumeRole";
        let sts = self.sts(controller).await;
        let call =
            Call { callers: &[controller], identity, scope: Scope::new(Account::Own, Service::Sts, None), operation: OP, changes: 0 };
        let output = self
            .call(call, || async {
                sts.assume_role()
                    .role_arn(&role.arn)
                    .set_external_id(role.external_id.clone())
                    .role_session_name(&role.session_name)
                    .send()
                    .await
                    .map_err(|e| classify_sdk_error(OP, &e))
            })
            .await
            .map_err(|error| not_assumed(identity, error))?;
        let credentials = output.credentials().ok_or_else(|| AwsError::incomplete(OP, "credentials"))?;
        let expires = SystemTime::try_from(*credentials.expiration()).unwrap_or_else(|_| SystemTime::now());
        let provider = aws_sdk_sts::config::Credentials::new(
            credentials.access_key_id(),
            credentials.secret_access_key(),
            Some(credentials.session_token().to_owned()),
            Some(expires),
            "AssumeRole",
        );
        let sdk =
            self.base().await.to_builder().credentials_provider(aws_sdk_sts::config::SharedCredentialsProvider::new(provider)).build();
        Ok((sdk, expires))
    }

    /// Runs one AWS call: tokens, attempt, and on throttling or a transient failure another
    /// attempt after a backoff (each drawing tokens again), up to the retry policy's limit. While
    /// another call of the account's service backs off after AWS throttled it, the call is not
    /// sent at all ([`crate::throttled`]). Each attempt is a span ([`crate::trace::attempt`]) from
    /// its wait for tokens to AWS's answer.
    pub async fn call<T, F, Fut>(&self, call: Call<'_>, attempt: F) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        self.call_watched(call, attempt, |_| {}).await
    }

    /// [`Aws::call`], telling `failed` of each attempt that fails, as it fails: a shared call's
    /// readers are told at once instead of waiting for its retries ([`crate::shared`]).
    pub async fn call_watched<T, F, Fut>(&self, call: Call<'_>, attempt: F, failed: impl Fn(&AwsError)) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        let seeds: Vec<Seed> = call.callers.iter().filter_map(|c| Seed::of(c)).collect();
        let (account, service) = (&call.scope.account, call.scope.service);
        let ticket = self.throttled.ticket();
        let attempts = AtomicU32::new(0);
        let once = || {
            let span = crate::trace::attempt(&call, attempts.fetch_add(1, Ordering::Relaxed) + 1);
            async {
                if let Some(since) = self.throttled.held(ticket, account, service, Instant::now()) {
                    let held = held_back(call.operation, service, call.identity, since);
                    crate::trace::answered(Some(&held));
                    failed(&held);
                    return Err(held);
                }
                let waited = self.limiter.acquire(&call.scope, call.operation, call.changes).await;
                self.metrics.limiter_wait(&seeds, service, waited);
                crate::trace::sent(waited);
                let started = Instant::now();
                // On the heap: an SDK call's future is large, and reconciles nest several.
                let result = Box::pin(attempt()).await;
                let outcome = result.as_ref().map(|_| ()).map_err(|e| e.class);
                self.metrics.call(&seeds, call.identity, service, call.operation, outcome, started.elapsed());
                crate::trace::answered(result.as_ref().err());
                if let Err(error) = &result {
                    failed(error);
                }
                result
            }
            .instrument(span)
        };
        let retry = self.config.retry;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(retry.base_delay)
            .with_max_delay(retry.max_delay)
            .with_factor(2.0)
            .with_max_times(retry.max_retries)
            .with_jitter();
        let result = Box::pin(once.retry(backoff).when(|error| error.is_transient() && error.code.as_deref() != Some(BACKING_OFF)).notify(
            |error, delay| {
                self.throttled.backing_off(ticket, account, service, error, delay);
                debug!(operation = error.operation, class = ?error.class, ?delay, %error, "retrying an AWS call");
            },
        ))
        .await;
        self.throttled.done(ticket, account, service);
        result
    }
}

/// The code (and condition reason) of an object whose AwsIdentity's role was refused.
pub const ASSUME_ROLE_FAILED: &str = "AssumeRoleFailed";

/// A refused AssumeRole, as the objects of the mapping read it: which AwsIdentity's role (its
/// name, never the account), and AWS's answer; a transient failure stays as it is (retried).
fn not_assumed(identity: &str, error: AwsError) -> AwsError {
    if error.is_transient() {
        return error;
    }
    let answer = error.code.as_deref().map_or_else(|| error.message.clone(), |code| format!("{code}: {}", error.message));
    AwsError {
        code: Some(ASSUME_ROLE_FAILED.to_owned()),
        message: format!(
            "a role AwsIdentity {identity} names could not be assumed ({answer}); its trust policy must trust the operator's role with the mapping's ExternalId"
        ),
        ..error
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::ErrorClass;

    #[test]
    fn a_refused_assume_role_names_the_mapping_and_keeps_aws_s_answer() {
        let refused = AwsError {
            operation: "AssumeRole",
            code: Some("AccessDenied".into()),
            class: ErrorClass::Terminal,
            message: "User: [ARN] is not authorized to perform: sts:AssumeRole on resource: [ARN]".into(),
        };
        let told = not_assumed("team-a", refused);
        assert_eq!((told.code.as_deref(), told.class), (Some(ASSUME_ROLE_FAILED), ErrorClass::Terminal));
        assert!(
            told.message.contains("AwsIdentity team-a") && told.message.contains("AccessDenied: User: [ARN] is not authorized"),
            "{told}"
        );
        let throttled = AwsError { code: Some("Throttling".into()), class: ErrorClass::Throttled, ..told.clone() };
        assert_eq!(not_assumed("team-a", throttled.clone()), throttled, "retried as it is");
    }
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn layer(retries: usize) -> Arc<Aws> {
        let config = AwsConfig {
            retry: RetryPolicy { base_delay: Duration::from_millis(1), max_delay: Duration::from_millis(5), max_retries: retries },
            ..AwsConfig::default()
        };
        Aws::with_sdk_config(config, SdkConfig::builder().build(), Arc::new(AwsMetrics::unregistered()))
    }

    fn describe() -> Call<'static> {
        Call {
            callers: &["cert"],
            identity: OPERATOR,
            scope: Scope::new(Account::Own, Service::Acm, Some("us-east-1")),
            operation: "DescribeCertificate",
            changes: 0,
        }
    }

    fn failing(class: ErrorClass) -> AwsError {
        AwsError { operation: "DescribeCertificate", code: Some(format!("{class:?}")), class, message: "scripted".into() }
    }

    #[tokio::test]
    async fn throttling_and_server_errors_are_retried_and_each_attempt_counted() {
        let aws = layer(3);
        let attempts = AtomicUsize::new(0);
        let result = aws
            .call(describe(), || async {
                match attempts.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(failing(ErrorClass::Throttled)),
                    1 => Err(failing(ErrorClass::Retryable)),
                    _ => Ok(7),
                }
            })
            .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(aws.metrics().calls(Service::Acm, "DescribeCertificate"), 3);
        assert_eq!(aws.metrics().throttling_events(Service::Acm, "DescribeCertificate"), 1);
    }

    #[tokio::test]
    async fn terminal_and_not_found_errors_are_not_retried() {
        let aws = layer(3);
        for class in [ErrorClass::Terminal, ErrorClass::NotFound] {
            let attempts = AtomicUsize::new(0);
            let result: Result<(), _> = aws
                .call(describe(), || async {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    Err(failing(class))
                })
                .await;
            assert_eq!(result.unwrap_err().class, class);
            assert_eq!(attempts.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn retries_are_capped() {
        let aws = layer(3);
        let attempts = AtomicUsize::new(0);
        let result: Result<(), _> = aws
            .call(describe(), || async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err(failing(ErrorClass::Throttled))
            })
            .await;
        assert_eq!(result.unwrap_err().class, ErrorClass::Throttled);
        assert_eq!(attempts.load(Ordering::SeqCst), 4, "one attempt and three retries");
    }

    #[tokio::test]
    async fn while_a_call_backs_off_after_aws_throttled_its_account_the_others_of_that_account_are_not_sent() {
        let aws = Aws::with_sdk_config(
            AwsConfig {
                retry: RetryPolicy { base_delay: Duration::from_millis(300), max_delay: Duration::from_millis(300), max_retries: 1 },
                ..AwsConfig::default()
            },
            SdkConfig::builder().build(),
            Arc::new(AwsMetrics::unregistered()),
        );
        let first_attempts = AtomicUsize::new(0);
        let throttled = aws.call(describe(), || async {
            first_attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(failing(ErrorClass::Throttled))
        });
        let others = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let sent = AtomicUsize::new(0);
            let held: Result<(), AwsError> = aws
                .call(describe(), || async {
                    sent.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .await;
            let elsewhere =
                Call { scope: Scope::new(Account::Other("210987654321".into()), Service::Acm, Some("us-east-1")), ..describe() };
            let other_account = aws.call(elsewhere, || async { Ok::<_, AwsError>(7) }).await;
            (held, sent.load(Ordering::SeqCst), other_account)
        };
        let (first, (held, sent, other_account)) = tokio::join!(throttled, others);
        assert_eq!(first.unwrap_err().class, ErrorClass::Throttled);
        assert_eq!(first_attempts.load(Ordering::SeqCst), 2, "the first call retried once");
        let held = held.unwrap_err();
        assert_eq!((held.class, held.code.as_deref(), sent), (ErrorClass::Throttled, Some(BACKING_OFF), 0), "{held}");
        assert_eq!(other_account.unwrap(), 7, "another account is not held back");
        let after: Result<(), AwsError> = aws.call(describe(), || async { Ok(()) }).await;
        assert!(after.is_ok(), "the mark goes with the call that set it");
    }

    #[test]
    fn a_controller_s_endpoint_wins_over_the_service_s_which_wins_over_the_process_s() {
        let config = AwsConfig {
            endpoint_url: Some("http://all".into()),
            endpoints: vec![
                Endpoint { controller: None, service: Service::Acm, url: "http://acm".into() },
                Endpoint { controller: Some("tenant"), service: Service::Acm, url: "http://tenant-acm".into() },
            ],
            ..AwsConfig::default()
        };
        let aws = Aws::with_sdk_config(config, SdkConfig::builder().build(), Arc::new(AwsMetrics::unregistered()));
        assert_eq!(aws.endpoint("cert", Service::Acm), Some("http://acm"));
        assert_eq!(aws.endpoint("tenant", Service::Acm), Some("http://tenant-acm"));
        assert_eq!(aws.endpoint("tenant", Service::Route53), Some("http://all"));
    }
}
