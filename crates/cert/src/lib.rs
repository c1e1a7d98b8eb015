//! The Cert operator: ACM certificates with Route53 DNS validation (seed 000), on Blockwork's
//! runtime. A `Cert` (`acm.blockwork.dev/v1`) names a service and environment; the operator
//! requests the certificate for `{serviceName}-{environment}.{zone}` with an idempotency token
//! and owner tags, writes the validation CNAMEs, waits for ACM to issue it and publishes the ARN
//! in status.
//!
//! - [`api`]: the CRD. [`logic`]: pure decisions (FQDN, zones, token, records, states, admission
//!   rules). [`zones`]: `--dns-zones`.
//! - [`aws`]: ACM/Route53 traits, the SDK implementation and its decorators (cache, retry,
//!   rate limits). [`manager`]: the runtime's `ExternalResource`. [`publish`]: the ConfigMap
//!   with the ARN for consumers. [`metrics`]: seed 000's metric suite.
//!
//! It runs as the `cert` controller of `blockwork run`, with [`CertArgs`] flattened into that
//! command's flags.

pub mod api;
pub mod aws;
pub mod config;
pub mod logic;
pub mod manager;
pub mod metrics;
pub mod publish;
pub mod webhook;
pub mod zones;

use std::future::Future;
use std::sync::Arc;

use blockwork_runtime::{Context, ControllerConfig, RuntimeMetrics};
use futures::FutureExt as _;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::{Api, Client};
use tracing::info;

pub use api::{Cert, CertObservation, CertSpec, CertState, CertStatus, DnsZoneRef, GROUP, ValidationRecordStatus, crd};
pub use config::{CertArgs, CertConfig, ConfigError};
pub use manager::{CertManager, Timing};
pub use metrics::CertMetrics;

/// The decorated AWS client the controller uses.
pub type AwsClient = aws::Cached<aws::Retrying<aws::RateLimited<aws::Sdk>>>;

/// The controller's name: metric label, event reporter, `--controllers` entry.
pub const CONTROLLER: &str = "cert";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    RateLimit(#[from] aws::RateLimitError),
}

/// Composes the AWS client: SDK → rate limits → retries → cache (seed 000's decorator stack).
pub fn aws_client(sdk_config: &aws_config::SdkConfig, config: &CertConfig, metrics: &Arc<CertMetrics>) -> Result<AwsClient, Error> {
    let sdk = aws::Sdk::new(sdk_config, config.aws_timeout, Arc::clone(metrics));
    let limited = aws::RateLimited::new(sdk, config.rate_limits, Arc::clone(metrics))?;
    let retrying = aws::Retrying::new(limited, config.retry, Arc::clone(metrics));
    Ok(aws::Cached::new(retrying, config.cache, Arc::clone(metrics)))
}

/// Runs the controller over `namespaces` (`None`: all) until `shutdown` completes.
pub async fn run(
    client: Client,
    config: CertConfig,
    runtime_metrics: Arc<RuntimeMetrics>,
    metrics: Arc<CertMetrics>,
    namespaces: Option<Vec<String>>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let sdk_config = blockwork_aws::sdk_config(config.aws_endpoint_url.as_deref(), config.aws_region.as_deref()).await;
    let aws = aws_client(&sdk_config, &config, &metrics)?;
    metrics.set_tracking_limits(config.expiry_threshold_days, config.max_tracked_certificates);
    let manager =
        CertManager::new(aws, config.zones.clone(), config.validation_timeout, config.timing, Arc::clone(&metrics), client.clone());
    let context = Context::new(client.clone(), manager, ControllerConfig::new(CONTROLLER, GROUP), runtime_metrics);
    let apis: Vec<Api<Cert>> = match &namespaces {
        None => vec![Api::all(client)],
        Some(namespaces) => namespaces.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect(),
    };
    info!(zones = ?config.zones.zones().iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ?namespaces, "starting the cert controller");
    let shutdown = shutdown.boxed().shared();
    futures::future::join_all(apis.into_iter().map(|api| blockwork_runtime::run(api, Arc::clone(&context), concurrency, shutdown.clone())))
        .await;
    Ok(())
}

/// The cluster permissions the controller needs (beyond events and leases, which the binary
/// grants every controller): its own objects, their status and finalizers, and the ConfigMaps
/// that publish each certificate's ARN ([`publish`]). No Secrets: the certificate stays in ACM.
pub fn rbac() -> Vec<PolicyRule> {
    use blockwork_runtime::rbac::rule;
    vec![
        rule(GROUP, &["certs"], &["get", "list", "watch", "patch", "update"]),
        rule(GROUP, &["certs/status"], &["get", "patch", "update"]),
        rule(GROUP, &["certs/finalizers"], &["update"]),
        rule("", &["configmaps"], &["get", "create", "patch", "delete"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_covers_certs_status_finalizers_and_the_published_configmaps_only() {
        let rules = rbac();
        let resources: Vec<&str> = rules.iter().flat_map(|r| r.resources.iter().flatten().map(String::as_str)).collect();
        assert_eq!(resources, ["certs", "certs/status", "certs/finalizers", "configmaps"]);
        let (certs, configmaps) = rules.split_at(3);
        assert!(certs.iter().all(|r| r.api_groups.as_deref() == Some(&[GROUP.to_owned()][..])));
        assert!(certs.iter().all(|r| !r.verbs.iter().any(|v| v == "delete" || v == "create" || v == "*")));
        assert_eq!(configmaps[0].api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(configmaps[0].verbs, ["get", "create", "patch", "delete"]);
    }
}
