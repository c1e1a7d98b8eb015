//! What the tenant controller is told at start-up. Flags and environment variables, to flatten
//! into the binary's `run` arguments (ids prefixed `tenant_`, so they do not clash; seed 001's
//! `--drift-policy` keeps its name, the AWS flags are prefixed because the cert controller owns
//! `--aws-endpoint-url`).

use std::time::Duration;

use blockwork_runtime::DriftPolicy;

/// Seed 001's polling interval while a tenant is InProgress.
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);
/// Seed 001's backoff after throttling (CloudFront and Route53).
pub const THROTTLE_FLOOR: Duration = Duration::from_secs(60);
/// Seed 001's steady-state requeue.
pub const STEADY_INTERVAL: Duration = Duration::from_secs(300);

#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct TenantArgs {
    /// How external drift of a tenant is handled when neither `spec.driftPolicy` nor the
    /// `blockwork.dev/drift-policy` annotation says: enforce, report or suspend.
    #[arg(id = "tenant_drift_policy", long = "drift-policy", env = "TENANT_DRIFT_POLICY", default_value = "enforce", value_parser = parse_drift_policy, value_name = "POLICY")]
    pub drift_policy: DriftPolicy,

    /// AWS endpoint override for CloudFront (an emulator); default: AWS.
    #[arg(id = "tenant_aws_endpoint_url", long = "tenant-aws-endpoint-url", env = "TENANT_AWS_ENDPOINT_URL", value_name = "URL")]
    pub aws_endpoint_url: Option<String>,

    /// AWS endpoint override for Route53 and STS (the DNS calls, an emulator); default: the
    /// `--tenant-aws-endpoint-url`, else AWS.
    #[arg(
        id = "tenant_route53_endpoint_url",
        long = "tenant-route53-endpoint-url",
        env = "TENANT_ROUTE53_ENDPOINT_URL",
        value_name = "URL"
    )]
    pub route53_endpoint_url: Option<String>,

    /// AWS region for the API calls (CloudFront is global; this picks the signing region);
    /// default: the SDK's chain (env, profile, IMDS).
    #[arg(id = "tenant_aws_region", long = "tenant-aws-region", env = "TENANT_AWS_REGION", value_name = "REGION")]
    pub aws_region: Option<String>,
}

impl Default for TenantArgs {
    fn default() -> Self {
        Self { drift_policy: DriftPolicy::Enforce, aws_endpoint_url: None, route53_endpoint_url: None, aws_region: None }
    }
}

/// An invalid value stops start-up with a message naming the accepted ones.
fn parse_drift_policy(value: &str) -> Result<DriftPolicy, String> {
    match value.trim() {
        "enforce" => Ok(DriftPolicy::Enforce),
        "report" => Ok(DriftPolicy::Report),
        "suspend" => Ok(DriftPolicy::Suspend),
        other => Err(format!("invalid drift policy {other:?}: expected enforce, report or suspend")),
    }
}

/// How often the manager looks again; seed 001's intervals by default, shorter in tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// While AWS reports InProgress, and between deletion steps.
    pub poll: Duration,
    /// Once Deployed and in sync.
    pub steady: Duration,
    /// After a terminal error or an invalid spec (seed 001: 5 minutes).
    pub failed: Duration,
    /// The shortest wait after throttling (seed 001: 60 seconds).
    pub throttle: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self { poll: POLL_INTERVAL, steady: STEADY_INTERVAL, failed: STEADY_INTERVAL, throttle: THROTTLE_FLOOR }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tenant: TenantArgs,
    }

    #[test]
    fn drift_policy_defaults_to_enforce() {
        let cli = Cli::try_parse_from(["t"]).expect("no flags are valid");
        assert_eq!(cli.tenant, TenantArgs::default());
    }

    #[test]
    fn drift_policy_flag_is_parsed() {
        let cli = Cli::try_parse_from(["t", "--drift-policy", "suspend"]).expect("valid policy");
        assert_eq!(cli.tenant.drift_policy, DriftPolicy::Suspend);
    }

    #[test]
    fn route53_endpoint_flag_is_parsed() {
        let cli = Cli::try_parse_from(["t", "--tenant-route53-endpoint-url", "http://localhost:5000"]).expect("valid URL");
        assert_eq!(cli.tenant.route53_endpoint_url.as_deref(), Some("http://localhost:5000"));
    }

    #[test]
    fn invalid_drift_policy_is_rejected_naming_the_accepted_values() {
        let error = Cli::try_parse_from(["t", "--drift-policy", "sometimes"]).err().expect("not a policy");
        assert!(error.to_string().contains("expected enforce, report or suspend"), "{error}");
    }
}
