//! Blockwork's AWS layer: SDK configuration (with the endpoint override emulators need), error
//! classification that picks the runtime's reaction, messages sanitized of account ids and
//! ARNs before users can read them, and the one rule for DNS names ([`dns_name`]).

pub mod dns_name;
mod error;
mod sanitize;

pub use error::{AwsError, ErrorClass, classify, classify_sdk_error};
pub use sanitize::{mask_accounts, sanitize};

use aws_config::{BehaviorVersion, Region, SdkConfig};

/// The shared SDK configuration: the usual credential and region chain (env, IRSA / Pod
/// Identity, profile, IMDS), with an optional endpoint override (`--aws-endpoint-url`) and region.
pub async fn sdk_config(endpoint_url: Option<&str>, region: Option<&str>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(endpoint) = endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_owned()));
    }
    loader.load().await
}
