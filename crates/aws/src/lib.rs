//! Blockwork's AWS layer: SDK configuration (with the endpoint override emulators need), error
//! classification that picks the runtime's reaction, messages sanitized of account ids and
//! ARNs before users can read them, and the one rule for DNS names ([`dns_name`]).

pub mod dns_name;
mod error;
mod sanitize;

pub use error::{AwsError, ErrorClass, classify, classify_sdk_error};
pub use sanitize::{mask_accounts, sanitize};

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// How long one attempt of an AWS call may take. The SDK's defaults bound only connecting: an
/// answer that never comes (a hung connection, an overloaded endpoint) would hold the reconcile
/// that made the call, and the object with it, forever. The reliability campaign's fault soak
/// found that (issue 15).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an AWS call may take with the SDK's own retries.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The shared SDK configuration: the usual credential and region chain (env, IRSA / Pod
/// Identity, profile, IMDS), with an optional endpoint override (`--aws-endpoint-url`) and region.
/// Every call is bounded ([`ATTEMPT_TIMEOUT`], [`CALL_TIMEOUT`]): a call that never answers ends
/// as a retryable timeout. A service client may set its own bounds (the cert controller's
/// `--aws-default-timeout`).
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
