//! Who may act where (ADR 0014): the platform team maps namespaces to AWS identities with the
//! cluster-scoped `AwsIdentity`, and every Cert's and DistributionTenant's AWS calls are made as
//! its namespace's identity, into the hosted zones (and names) it grants.
//!
//! - [`api`]: the CRD. [`validate`]: what makes a mapping wrong among the others (overlaps,
//!   contradictions), pure. [`grant`]: what a namespace may do and as whom ([`Grant`]), pure.
//! - [`registry`]: the mappings as the cluster has them ([`Identities`], one watch per process)
//!   and the grants resolved from them — how a controller obtains its objects' identity:
//!   `identities.grant(namespace, operator_zones)`.
//! - [`placement`]: whether an object's resources are in the account its namespace acts in now
//!   (a mapping changed under it holds it), pure.
//! - [`wake`]: a controller's objects woken when the mappings change.
//! - [`webhook`]: the admission webhook. [`status`]: `Ready` of each mapping, kept by the
//!   `aws_identity` controller.

pub mod api;
pub mod grant;
pub mod placement;
pub mod registry;
pub mod status;
pub mod validate;
pub mod wake;
pub mod webhook;

use k8s_openapi::api::rbac::v1::PolicyRule;

pub use api::{AwsIdentity, AwsIdentitySpec, GROUP, HostedZoneGrant, crd};
pub use grant::{DnsRefusal, Grant, OperatorZone, Refusal, Settings, Unmapped, ZoneGrant, tenant_zone};
pub use registry::Identities;

/// The controller that keeps the mappings' status: metric label, `--controllers` entry.
pub const CONTROLLER: &str = "aws_identity";

/// The process's settings of identities (flattened into `blockwork run` and `blockwork check`).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct IdentityArgs {
    /// The cluster's name in the STS session names of assumed roles
    /// (`blockwork.<cluster>.<namespace>`), as the target accounts' CloudTrail shows them.
    #[arg(long = "cluster-name", env = "BLOCKWORK_CLUSTER_NAME", default_value = "blockwork", value_name = "NAME")]
    pub cluster_name: String,

    /// Namespaces no AwsIdentity lists: `operator` acts for them with the operator's own
    /// identity (no assumed role), `refuse` does not act for them.
    #[arg(long = "aws-unmapped-namespaces", env = "BLOCKWORK_AWS_UNMAPPED_NAMESPACES", value_enum, default_value_t = Unmapped::Operator, value_name = "POLICY")]
    pub unmapped_namespaces: Unmapped,
}

impl Default for IdentityArgs {
    fn default() -> Self {
        Self { cluster_name: "blockwork".to_owned(), unmapped_namespaces: Unmapped::Operator }
    }
}

impl IdentityArgs {
    pub fn settings(&self) -> Settings {
        Settings { cluster: self.cluster_name.clone(), unmapped: self.unmapped_namespaces }
    }
}

/// What every controller acting in AWS for namespaces needs: reading the mappings.
pub fn read_rules() -> Vec<PolicyRule> {
    vec![blockwork_runtime::rbac::rule(GROUP, &["awsidentities"], &["get", "list", "watch"])]
}

/// The `aws_identity` controller's permissions: reading the mappings and writing their status.
/// Never their spec: only the platform team writes a mapping.
pub fn rbac() -> Vec<PolicyRule> {
    let mut rules = read_rules();
    rules.push(blockwork_runtime::rbac::rule(GROUP, &["awsidentities/status"], &["get", "patch", "update"]));
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_reads_mappings_and_writes_only_their_status() {
        let rules = rbac();
        let resources: Vec<&str> = rules.iter().flat_map(|r| r.resources.iter().flatten().map(String::as_str)).collect();
        assert_eq!(resources, ["awsidentities", "awsidentities/status"]);
        assert!(rules[0].verbs.iter().all(|v| matches!(v.as_str(), "get" | "list" | "watch")));
    }

    #[test]
    fn flags_default_to_the_operator_s_identity_for_unmapped_namespaces() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            identity: IdentityArgs,
        }
        let cli = Cli::try_parse_from(["x"]).expect("no flags are valid");
        assert_eq!(cli.identity, IdentityArgs::default());
        let cli = Cli::try_parse_from(["x", "--aws-unmapped-namespaces", "refuse", "--cluster-name", "prod"]).expect("valid");
        assert_eq!(cli.identity.settings(), Settings { cluster: "prod".to_owned(), unmapped: Unmapped::Refuse });
    }
}
