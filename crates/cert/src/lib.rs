//! The Cert operator: ACM certificates with Route53 DNS validation (seed 000), on Blockwork's
//! runtime. A `Cert` (`acm.blockwork.dev/v1`) names a service and environment; the operator
//! requests the certificate for `{serviceName}-{environment}.{zone}` with an idempotency token
//! and owner tags, writes the validation CNAMEs, waits for ACM to issue it and publishes the ARN
//! in status.
//!
//! - [`api`]: the CRD. [`decisions`]: pure decisions (FQDN, zones, token, records, states).
//!   [`admission`]: what the webhook and the controller refuse. [`zones`]: `--dns-zones`.
//! - [`external`]: the runtime's `ExternalResource`, on the process's AWS layer
//!   (`blockwork_aws`: ACM and its certificate listing, batched Route 53 records, quotas,
//!   retries). [`wake`]: reconciles Certs when the listing or a record write tells of a change.
//!   [`publish`]: the ConfigMap with the ARN for consumers. [`metrics`]: seed 000's metric suite
//!   (its AWS-call metrics are the layer's, under the seed's names).
//!
//! It runs as the `cert` controller of `blockwork run`, with [`CertArgs`] flattened into that
//! command's flags.

pub mod account;
pub mod admission;
pub mod adoption;
pub mod api;
pub mod authority;
pub mod config;
pub mod decisions;
pub mod export;
pub mod external;
pub mod ingress;
pub mod metrics;
pub mod ownership_checks;
pub mod publish;
pub mod users;
pub mod wake;
pub mod webhook;
pub mod zones;

use std::future::Future;
use std::sync::Arc;

use blockwork_aws::Aws;
use blockwork_identity::Identities;
use blockwork_runtime::namespaces::{self, Namespaces, run_in};
use blockwork_runtime::{Context, ControllerConfig, RuntimeMetrics};
use futures::FutureExt as _;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::{Api, Client};
use tracing::info;

pub use account::{Accounts, CertAccount};
pub use api::{Cert, CertObservation, CertSpec, CertState, CertStatus, DnsZoneRef, GROUP, ValidationRecordStatus, crd};
pub use blockwork_runtime::Timing;
pub use config::{CertArgs, CertConfig, ConfigError};
pub use external::VALIDATION_RECORD_TTL;
pub use external::{CertManager, default_timing};
pub use metrics::CertMetrics;

/// The controller's name: metric label, event reporter, `--controllers` entry.
pub const CONTROLLER: &str = "cert";

/// Runs the controller over `namespaces` until `shutdown` completes, calling AWS through the
/// process's layer `aws` as each namespace's identity among `identities` (ADR 0014). It keeps
/// each identity's certificate listing swept while it runs.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    config: CertConfig,
    aws: Arc<Aws>,
    identities: Arc<Identities>,
    runtime_metrics: Arc<RuntimeMetrics>,
    metrics: Arc<CertMetrics>,
    namespaces: Namespaces,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    metrics.set_tracking_limits(config.expiry_threshold_days, config.max_tracked_certificates);
    let records = aws.records();
    let accounts = Arc::new(Accounts::new(Arc::clone(&aws), identities, &config.zones, config.acm));
    let manager = CertManager::new(
        Arc::clone(&accounts),
        Arc::clone(&records),
        config.validation_timeout,
        Arc::clone(&metrics),
        client.clone(),
        external::Issuing {
            export_secrets: config.export_secrets,
            authorities: config.certificate_authorities.clone(),
            pca: blockwork_aws::pca::Pca::new(&aws, CONTROLLER),
        },
    )
    .with_ownership_interval(config.ownership_interval);
    let (users_changed, changes) = tokio::sync::mpsc::unbounded_channel();
    let (users, _user_watches) = users::Users::watch(&client, &namespaces, config.ingress_users, move |namespace| {
        // Closed: the controller stopped.
        let _ = users_changed.send(namespace.to_owned());
    })
    .await;
    let manager = manager.with_users(users);
    let context =
        Context::new(client.clone(), manager, ControllerConfig::new(CONTROLLER, GROUP).with_timing(config.timing), runtime_metrics);
    let operator_zones = accounts.operator_zones().to_vec();
    let mappings = blockwork_identity::wake::follow(Arc::clone(&context), Arc::clone(accounts.identities()), operator_zones, |o| {
        o.aws_identity.as_deref()
    });
    let _mapped = Background(tokio::spawn(mappings));
    let _wakes = Background(tokio::spawn(wake::follow(Arc::clone(&context), accounts, records)));
    let _users = Background(tokio::spawn(wake::follow_users(Arc::clone(&context), changes)));
    // Only with the Secret permissions that come with export (a watch without them fails forever).
    let _secrets = config
        .export_secrets
        .then(|| Background(tokio::spawn(export::watch::follow(Arc::clone(&context), client.clone(), namespaces.clone()))));
    info!(zones = ?config.zones.zones().iter().map(|z| z.name.as_str()).collect::<Vec<_>>(), ?namespaces, "starting the cert controller");
    let shutdown = shutdown.boxed().shared();
    run_in(&namespaces, |scope| {
        let api: Api<Cert> = namespaces::api(&client, scope.as_deref());
        blockwork_runtime::run(api, Arc::clone(&context), concurrency, shutdown.clone())
    })
    .await;
}

/// A task that lives as long as the controller: aborted when [`run`] returns or is dropped.
struct Background(tokio::task::JoinHandle<()>);

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The cluster permissions the controller needs (beyond events and leases, which the binary
/// grants every controller): its own objects, their status and finalizers, the ConfigMaps
/// that publish each certificate's ARN ([`publish`]), and reading the DistributionTenants that
/// use Certs ([`users`]; Ingresses are read with the Ingress controller's permissions). No
/// Secrets: unless export is enabled at install ([`export_rbac`]) the certificate stays in ACM.
pub fn rbac() -> Vec<PolicyRule> {
    use blockwork_runtime::rbac::rule;
    vec![
        rule(GROUP, &["certs"], &["get", "list", "watch", "patch", "update"]),
        rule(GROUP, &["certs/status"], &["get", "patch", "update"]),
        rule(GROUP, &["certs/finalizers"], &["update"]),
        rule("", &["configmaps"], &["get", "create", "patch", "delete"]),
        rule(users::TENANT_GROUP, &["distributiontenants"], &["get", "list", "watch"]),
    ]
    .into_iter()
    .chain(blockwork_identity::read_rules())
    .collect()
}

/// The permissions export needs ([`export`]), granted only when it is enabled at install
/// (`blockwork rbac --opt-in cert.export-secrets`, the chart's `controllers.cert.exportSecrets`):
/// Secrets of the watched namespaces, read (an exported Secret is checked before it is written;
/// which Secret a name holds is only known by reading it), watched (metadata only, those
/// labelled as exports: changes wake their Certs), created, applied and deleted (with its
/// certificate, deleteOnRemoval). RBAC cannot narrow these verbs to the exported Secrets.
pub fn export_rbac() -> Vec<PolicyRule> {
    vec![blockwork_runtime::rbac::rule("", &["secrets"], &["get", "list", "watch", "create", "patch", "delete"])]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_covers_certs_status_finalizers_the_published_configmaps_and_reading_the_users_and_aws_identities() {
        let rules = rbac();
        let resources: Vec<&str> = rules.iter().flat_map(|r| r.resources.iter().flatten().map(String::as_str)).collect();
        assert_eq!(resources, ["certs", "certs/status", "certs/finalizers", "configmaps", "distributiontenants", "awsidentities"]);
        assert_eq!(rules[4].verbs, ["get", "list", "watch"], "the tenants are only read");
        assert_eq!(rules[5].verbs, ["get", "list", "watch"], "the mappings are only read");
        let (certs, configmaps) = rules[..4].split_at(3);
        assert!(certs.iter().all(|r| r.api_groups.as_deref() == Some(&[GROUP.to_owned()][..])));
        assert!(certs.iter().all(|r| !r.verbs.iter().any(|v| v == "delete" || v == "create" || v == "*")));
        assert_eq!(configmaps[0].api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(configmaps[0].verbs, ["get", "create", "patch", "delete"]);
    }
}
