//! What the tenant controller is told at start-up. Flags and environment variables, to flatten
//! into the binary's `run` arguments (ids prefixed `tenant_`, so they do not clash; seed 001's
//! `--drift-policy` keeps its name). The AWS flags (region, endpoints, quotas) are the
//! process's, in `blockwork_aws::AwsArgs`, which also keeps this controller's former
//! `--tenant-aws-*` flags working.

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
}

impl Default for TenantArgs {
    fn default() -> Self {
        Self { drift_policy: DriftPolicy::Enforce }
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
    fn invalid_drift_policy_is_rejected_naming_the_accepted_values() {
        let error = Cli::try_parse_from(["t", "--drift-policy", "sometimes"]).err().expect("not a policy");
        assert!(error.to_string().contains("expected enforce, report or suspend"), "{error}");
    }
}
