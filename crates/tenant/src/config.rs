//! What the tenant controller is told at start-up. Flags and environment variables, to flatten
//! into the binary's `run` arguments (ids prefixed `tenant_`, so they do not clash; seed 001's
//! `--drift-policy` keeps its name). The AWS flags (region, endpoints, quotas) are the
//! process's, in `blockwork_aws::AwsArgs`, which also keeps this controller's former
//! `--tenant-aws-*` flags working.

use std::time::Duration;

use blockwork_runtime::{DriftPolicy, RequeuePolicy, Timing};

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

/// Seed 001's intervals as the runtime's table: `poll` while AWS reports InProgress and between
/// deletion steps, `steady` once Deployed and in sync, `failed` after a terminal error or an
/// invalid spec, and `throttle` as the shortest wait after throttling; the rest the runtime's.
pub fn timing(poll: Duration, steady: Duration, failed: Duration, throttle: Duration) -> Timing {
    Timing {
        verifying: RequeuePolicy::fixed(poll),
        terminating: RequeuePolicy::fixed(poll),
        ready: RequeuePolicy::fixed(steady),
        failed: RequeuePolicy::fixed(failed),
        throttle_floor: throttle,
        ..Timing::default()
    }
}

/// Seed 001's intervals (a failed tenant is looked at again at the steady interval).
pub fn default_timing() -> Timing {
    timing(POLL_INTERVAL, STEADY_INTERVAL, STEADY_INTERVAL, THROTTLE_FLOOR)
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
