//! Blockwork's AWS layer: one per process, shared by every controller.
//!
//! - [`Aws`] ([`edge`]): the SDK clients (region, endpoint overrides; the SDK's own retries
//!   off) for a [`Principal`] — the operator's own identity or a role assumed for a namespace's
//!   AwsIdentity ([`principal`], its credentials cached in `credentials`) — and the one path of
//!   every call: the process's token buckets, then the attempt, timed, classified and counted,
//!   then a retry with backoff and jitter on throttling and transient failures, except while
//!   another call of the account backs off after AWS throttled it ([`throttled`]).
//! - [`quota`]: the quota model, per account (and region for ACM): account-level,
//!   per-operation and Route 53 change-throughput buckets at AWS's published values times a
//!   safety factor. [`limiter`] holds them (governor). [`config`]: the process's AWS flags.
//! - [`acm`]: ACM calls and the shared certificate listing. [`pca`]: the state of private CAs. [`route53`]: records for every
//!   controller, batched per hosted zone ([`batch`]), with one ownership rule.
//! - [`metrics`]: one family of AWS metrics, feeding the seeds' names too. [`cache`]: cached
//!   reads whose concurrent misses share one call. [`shared`]: what the readers of a shared call
//!   (a listing) are told at once while it fails, instead of waiting in its retries.
//! - [`ErrorClass`] (the runtime's) and [`classify`]: how a failed call is handled; messages are
//!   sanitized of account ids and ARNs ([`sanitize`]) before users can read them.
//! - [`dns_name`]: the one rule and normal form of DNS names; [`idna2008`]: the code point rules
//!   of internationalized labels it applies.
//! - [`ownership`]: the ownership tags on a resource and the claim decision (ours, adopt,
//!   lost, owned elsewhere) of every kind that adopts (ADR 0017).

pub mod acm;
pub mod batch;
pub mod cache;
pub mod config;
mod credentials;
pub mod dns_name;
pub mod edge;
mod error;
pub mod idna2008;
pub mod limiter;
pub mod metrics;
pub mod ownership;
pub mod pca;
pub mod principal;
pub mod quota;
pub mod route53;
mod sanitize;
pub mod shared;
pub mod throttled;
mod trace;

pub use config::{AwsArgs, parse_duration};
pub use edge::{Aws, AwsConfig, Call, Endpoint, RetryPolicy};
pub use error::{AwsError, ErrorClass, HttpStatus, classify, classify_sdk_error};
pub use limiter::{Account, Scope};
pub use metrics::{AwsMetrics, Seed};
pub use principal::{AssumedRole, OPERATOR, Principal};
pub use quota::{Quotas, Service};
pub use sanitize::{mask_accounts, sanitize};

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// How long one attempt of an AWS call made with [`sdk_config`] may take. The SDK's defaults
/// bound only connecting: an answer that never comes (a hung connection, an overloaded endpoint)
/// would hold the caller forever. The reliability campaign's fault soak found that (issue 15);
/// the layer's own clients are bounded by `--aws-default-timeout` ([`AwsConfig`]).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an AWS call made with [`sdk_config`] may take with the SDK's own retries.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// An SDK configuration with the usual credential and region chain and an optional endpoint
/// override and region, every call bounded ([`ATTEMPT_TIMEOUT`], [`CALL_TIMEOUT`]): for tools
/// and tests that call AWS beside the layer.
pub async fn sdk_config(endpoint_url: Option<&str>, region: Option<&str>) -> SdkConfig {
    let timeouts = TimeoutConfig::builder().operation_attempt_timeout(ATTEMPT_TIMEOUT).operation_timeout(CALL_TIMEOUT).build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts);
    if let Some(endpoint) = endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_owned()));
    }
    loader.load().await
}
