//! The DistributionTenant operator: CloudFront distribution tenants (seed 001) on Blockwork's
//! runtime. A `DistributionTenant` (`cloudfront.blockwork.dev/v1alpha1`) is one tenant of a
//! multi-tenant distribution; the operator creates it, pushes spec changes, handles drift by
//! policy, follows its managed certificate and deletes it step by step.
//!
//! - [`api`]: the CRD. [`validate`], [`diff`], [`classify`], [`lifecycle`]: pure decisions (spec
//!   rules, certificate coverage, the spec/AWS comparison, seed 001's error table, the deletion
//!   and managed-certificate steps).
//! - [`cloudfront`]: the CloudFront trait and its SDK implementation, on the process's AWS layer
//!   (`blockwork_aws`: quotas, retries, metrics, caches). [`dns`]: the DNS trait over the layer's
//!   batched Route 53 records (an assumed role for another account's zone). [`external`]: the
//!   runtime's `ExternalResource`.
//! - [`cert_ref`]: a certificate from a Cert of the namespace (the runtime's dependency), checked
//!   against CloudFront's rules and followed when the Cert replaces it.
//! - [`webhook`]: the validating admission webhook ([`validate`]'s rules, before the object is
//!   stored).
//! - [`metrics`]: seed 001's metrics. [`config`]: flags.

pub mod api;
pub mod cert_ref;
pub mod classify;
pub mod cloudfront;
pub mod config;
pub mod diff;
pub mod dns;
pub mod external;
pub mod lifecycle;
pub mod metrics;
pub mod ownership;
pub mod validate;
pub mod webhook;

use std::future::Future;
use std::sync::Arc;

use blockwork_aws::Aws;
use blockwork_identity::Identities;
use blockwork_runtime::namespaces::{self, Namespaces, run_in};
use blockwork_runtime::rbac::rule;
use blockwork_runtime::{Context, ControllerConfig, RuntimeMetrics};
use futures::FutureExt as _;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::{Api, Client};
use tracing::info;

pub use api::{DistributionTenant, DistributionTenantSpec, DistributionTenantStatus, GROUP, TenantObservation, crd};
pub use blockwork_runtime::Timing;
pub use config::{TenantArgs, default_timing, timing};
pub use external::TenantManager;
pub use metrics::TenantMetrics;

/// The controller's name: metric label, event reporter, `--controllers` entry.
pub const CONTROLLER: &str = "tenant";

/// The IAM policy the operator's identity needs (seed 001's table, plus reading records back
/// before deleting them): CloudFront tenant calls, ACM for managed certificates and certificate
/// coverage, Route53 (and STS for a DNS role in another account) for DNS records. Narrow `hostedzone/*` to your zones, and the role pattern to
/// the roles named in `spec.dns.assumeRoleArn`.
pub const IAM_POLICY: &str = include_str!("../../../docs/iam/cloudfront-tenant-operator-policy.json");

/// Runs the controller over `namespaces` until `shutdown` completes, calling AWS through the
/// process's layer `aws` as each namespace's identity among `identities` (ADR 0014).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    args: TenantArgs,
    aws: Arc<Aws>,
    identities: Arc<Identities>,
    runtime_metrics: Arc<RuntimeMetrics>,
    metrics: Arc<TenantMetrics>,
    namespaces: Namespaces,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let cloudfront = cloudfront::Sdk::new(&aws);
    let route53 = dns::Route53::new(aws.records());
    let manager = TenantManager::new(cloudfront, Some(route53), Arc::clone(&identities), Arc::clone(&metrics), &aws, client.clone());
    let config = ControllerConfig::new(CONTROLLER, GROUP).with_timing(default_timing()).with_default_drift(args.drift_policy);
    let context = Context::new(client.clone(), manager, config, runtime_metrics);
    info!(?namespaces, drift_policy = %args.drift_policy, "starting the tenant controller");
    let mappings = blockwork_identity::wake::follow(Arc::clone(&context), identities, Vec::new(), |o| o.aws_identity.as_deref());
    let _mapped = Background(tokio::spawn(mappings));
    let counted = Arc::clone(&context);
    metrics.count_from(move || counted.cached());
    let shutdown = shutdown.boxed().shared();
    run_in(&namespaces, |scope| {
        let api: Api<DistributionTenant> = namespaces::api(&client, scope.as_deref());
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
/// grants every controller): its own objects, their status and finalizers, and reading the Certs
/// tenants name (`certRef`: waited for, watched, their certificate's ARN used).
pub fn rbac() -> Vec<PolicyRule> {
    vec![
        rule(GROUP, &["distributiontenants"], &["get", "list", "watch", "patch", "update"]),
        rule(GROUP, &["distributiontenants/status"], &["get", "patch", "update"]),
        rule(GROUP, &["distributiontenants/finalizers"], &["update"]),
        rule(blockwork_cert::GROUP, &["certs"], &["get", "list", "watch"]),
    ]
    .into_iter()
    .chain(blockwork_identity::read_rules())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_covers_tenants_status_and_finalizers_and_reading_the_certs_and_aws_identities() {
        let rules = rbac();
        let resources: Vec<&str> = rules.iter().flat_map(|r| r.resources.iter().flatten().map(String::as_str)).collect();
        assert_eq!(
            resources,
            ["distributiontenants", "distributiontenants/status", "distributiontenants/finalizers", "certs", "awsidentities"]
        );
        assert!(rules[..3].iter().all(|r| r.api_groups.as_deref() == Some(&[GROUP.to_owned()][..])));
        assert_eq!(rules[3].verbs, ["get", "list", "watch"], "the Certs are only read");
        assert_eq!(rules[4].verbs, ["get", "list", "watch"], "the mappings are only read");
        assert!(rules.iter().all(|r| !r.verbs.iter().any(|v| v == "delete" || v == "create" || v == "*")));
    }

    #[test]
    /// Seed 001's table, plus `route53:ListResourceRecordSets`: records are read back before they
    /// are deleted, so that only ones still pointing at the tenant go (see `dns`); and
    /// `cloudfront:TagResource`, the ownership tags of an adoption (issue 31).
    fn iam_policy_grants_the_seed_permissions_and_reading_records_back() {
        let policy: serde_json::Value = serde_json::from_str(IAM_POLICY).expect("the policy is JSON");
        let mut actions: Vec<&str> = policy["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .flat_map(|s| s["Action"].as_array().expect("actions").iter().filter_map(serde_json::Value::as_str))
            .collect();
        actions.sort_unstable();
        assert_eq!(
            actions,
            [
                "acm:DescribeCertificate",
                "acm:RequestCertificate",
                "cloudfront:CreateDistributionTenant",
                "cloudfront:DeleteDistributionTenant",
                "cloudfront:GetConnectionGroup",
                "cloudfront:GetDistribution",
                "cloudfront:GetDistributionTenant",
                "cloudfront:GetManagedCertificateDetails",
                "cloudfront:ListConnectionGroups",
                "cloudfront:TagResource",
                "cloudfront:UpdateDistributionTenant",
                "route53:ChangeResourceRecordSets",
                "route53:GetChange",
                "route53:ListResourceRecordSets",
                "sts:AssumeRole",
            ]
        );
    }
}
