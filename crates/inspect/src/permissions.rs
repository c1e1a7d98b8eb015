//! `blockwork check`'s proof that an identity's IAM policy allows what a controller does —
//! writes included — without writing: IAM's policy simulator (`iam:SimulatePrincipalPolicy`,
//! what `aws iam simulate-principal-policy` calls) is asked about every action of the
//! controller's policy file (docs/iam), on the resources the controller is configured with or
//! asked for, with the condition values its calls carry (the certificate's managed-by tag, the
//! CNAME record type and change actions). The simulator reads the principal's policies (inline,
//! attached, its groups'); it does not apply SCPs or permissions boundaries unless given them.
//!
//! The simulation needs `iam:SimulatePrincipalPolicy` on the principal, which the operator's own
//! policy does not grant: `check` usually runs as a person. Without it, or for a principal the
//! simulator cannot name (the account root, a federated user), the finding is "cannot verify"
//! (SKIP), neither a pass nor a failure, with what to grant.
//!
//! The emulators' moto gains the same call in `crates/testenv/emulators/moto_with_policy_simulation.py`.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_iam::types::{ContextEntry, ContextKeyTypeEnum, PolicyEvaluationDecisionType};
use blockwork_aws::{AwsConfig, AwsError, ErrorClass, classify_sdk_error, mask_accounts};

use crate::finding::{Finding, Verdict};

/// One call to the simulator: every action of a policy statement on the resources it applies
/// to here, with the condition values the controller's requests carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Simulation {
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    /// Condition keys and their values (all as string lists).
    pub context: Vec<(String, Vec<String>)>,
}

/// What a controller acts on, as far as `check` knows it.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// The caller's account, for ARN patterns with `*` as their account.
    pub account: String,
    /// Hosted zones: id and, when configured, name.
    pub zones: Vec<(String, Option<String>)>,
    /// Roles the controller assumes (a DistributionTenant's `spec.dns.assumeRoleArn`).
    pub roles: Vec<String>,
    /// Condition values every request of the controller carries.
    pub context: Vec<(String, Vec<String>)>,
}

/// One evaluated action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub action: String,
    pub resource: String,
    /// `allowed`, `explicitDeny` or `implicitDeny`.
    pub decision: String,
}

/// The IAM principal of a caller's ARN, as the simulator takes it: an assumed-role session is
/// its role (without the role's path, which the session ARN does not carry); a user is itself;
/// anything else (the root, a federated user) cannot be simulated.
pub fn principal(caller: &str) -> Option<String> {
    let (prefix, resource) = caller.split_once(":assumed-role/").map(|(p, r)| (p, Some(r))).unwrap_or((caller, None));
    match resource {
        Some(resource) => {
            let role = resource.split('/').next().filter(|r| !r.is_empty())?;
            let (partition_and_service, account) = prefix.rsplit_once(':')?;
            let partition = partition_and_service.strip_suffix(":sts:")?;
            Some(format!("{partition}:iam::{account}:role/{role}"))
        }
        None if caller.contains(":iam::") && (caller.contains(":user/") || caller.contains(":role/")) => Some(caller.to_owned()),
        None => None,
    }
}

/// The simulations of a policy document for `targets`, and the statements left out with why
/// (nothing to apply them to yet).
pub fn simulations(policy: &str, targets: &Targets) -> (Vec<Simulation>, Vec<String>) {
    let Ok(document) = serde_json::from_str::<serde_json::Value>(policy) else {
        return (Vec::new(), vec!["the policy file is not JSON".to_owned()]);
    };
    let strings = |value: &serde_json::Value| -> Vec<String> {
        match value {
            serde_json::Value::String(s) => vec![s.clone()],
            serde_json::Value::Array(list) => list.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        }
    };
    let statements = document["Statement"].as_array().cloned().unwrap_or_default();
    let (mut simulations, mut left_out) = (Vec::new(), Vec::new());
    for statement in statements.iter().filter(|s| s["Effect"] == "Allow") {
        let actions = strings(&statement["Action"]);
        for pattern in strings(&statement["Resource"]) {
            let resources = resources(&pattern, targets);
            if resources.is_empty() {
                left_out.push(format!("{} (no {} to simulate them on yet)", actions.join(", "), kind_of(&pattern)));
                continue;
            }
            for (resource, zone_name) in resources {
                let mut context = targets.context.clone();
                if let Some(name) = zone_name {
                    // The validation records' names, as route53's condition key normalizes them.
                    context.push((
                        "route53:ChangeResourceRecordSetsNormalizedRecordNames".to_owned(),
                        vec![format!("_blockwork-check.{}", name.trim_end_matches('.').to_ascii_lowercase())],
                    ));
                }
                simulations.push(Simulation { actions: actions.clone(), resources: vec![resource], context });
            }
        }
    }
    (simulations, left_out)
}

fn kind_of(pattern: &str) -> &'static str {
    if pattern.contains(":hostedzone/") { "hosted zone" } else { "role" }
}

/// The concrete resources (with a hosted zone's name, when known) a statement's resource
/// pattern stands for: `*` itself; hosted zones and roles the controller is known to use; any
/// other ARN with its wildcards filled (the account with the caller's).
fn resources(pattern: &str, targets: &Targets) -> Vec<(String, Option<String>)> {
    if pattern == "*" {
        return vec![("*".to_owned(), None)];
    }
    if pattern.contains(":hostedzone/") {
        let partition = pattern.split(':').nth(1).unwrap_or("aws");
        return targets.zones.iter().map(|(id, name)| (format!("arn:{partition}:route53:::hostedzone/{id}"), name.clone())).collect();
    }
    if pattern.contains(":iam::") && pattern.contains(":role/") {
        return targets.roles.iter().map(|role| (role.clone(), None)).collect();
    }
    let mut fields: Vec<String> = pattern.splitn(6, ':').map(str::to_owned).collect();
    if let Some(account) = fields.get_mut(4).filter(|a| a.as_str() == "*") {
        account.clone_from(&targets.account);
    }
    vec![(fields.join(":").replace('*', "blockwork-check"), None)]
}

/// An IAM client over the same configuration as the process's AWS layer (its credential and
/// region chain, its endpoint override, its timeout): the crate's SDK configuration for calls
/// beside the layer, with the layer's bound and no SDK retries.
pub async fn client(config: &AwsConfig) -> aws_sdk_iam::Client {
    let base = blockwork_aws::sdk_config(config.endpoint_url.as_deref(), config.region.as_deref()).await;
    let timeout = TimeoutConfig::builder().operation_timeout(config.timeout.min(Duration::from_secs(30))).build();
    aws_sdk_iam::Client::from_conf(
        aws_sdk_iam::config::Builder::from(&base).retry_config(RetryConfig::disabled()).timeout_config(timeout).build(),
    )
}

/// Asks the simulator about each simulation for `principal`.
pub async fn simulate(iam: &aws_sdk_iam::Client, principal: &str, simulations: &[Simulation]) -> Result<Vec<Evaluation>, AwsError> {
    const OP: &str = "SimulatePrincipalPolicy";
    let mut evaluations = Vec::new();
    for simulation in simulations {
        let context: Vec<ContextEntry> = simulation
            .context
            .iter()
            .map(|(key, values)| {
                ContextEntry::builder()
                    .context_key_name(key)
                    .context_key_type(ContextKeyTypeEnum::StringList)
                    .set_context_key_values(Some(values.clone()))
                    .build()
            })
            .collect();
        let mut marker = None;
        loop {
            let page = iam
                .simulate_principal_policy()
                .policy_source_arn(principal)
                .set_action_names(Some(simulation.actions.clone()))
                .set_resource_arns(Some(simulation.resources.clone()))
                .set_context_entries(Some(context.clone()))
                .set_marker(marker.take())
                .send()
                .await
                .map_err(|e| classify_sdk_error(OP, &e))?;
            evaluations.extend(page.evaluation_results().iter().map(|result| Evaluation {
                action: result.eval_action_name().to_owned(),
                resource: result.eval_resource_name().unwrap_or("*").to_owned(),
                decision: match result.eval_decision() {
                    PolicyEvaluationDecisionType::Allowed => "allowed".to_owned(),
                    other => other.as_str().to_owned(),
                },
            }));
            match page.marker().filter(|_| page.is_truncated()) {
                Some(next) => marker = Some(next.to_owned()),
                None => break,
            }
        }
    }
    Ok(evaluations)
}

/// The finding of a simulation's answer: a pass when every action is allowed; a failure naming
/// each refused action and the policy file to attach; "cannot verify" when the simulator could
/// not be asked.
pub fn finding(
    controller: &str,
    policy_path: &str,
    principal: &str,
    answer: Result<Vec<Evaluation>, AwsError>,
    left_out: &[String],
) -> Finding {
    let check = format!("{controller}: IAM permissions");
    let principal = mask_accounts(principal);
    let evaluations = match answer {
        Ok(evaluations) => evaluations,
        Err(error) => return cannot_verify(check, &principal, policy_path, &error),
    };
    let refused: Vec<&Evaluation> = evaluations.iter().filter(|e| e.decision != "allowed").collect();
    let not_simulated = if left_out.is_empty() { String::new() } else { format!("; not simulated: {}", left_out.join("; ")) };
    if refused.is_empty() {
        let mut actions: Vec<&str> = evaluations.iter().map(|e| e.action.as_str()).collect();
        actions.sort_unstable();
        actions.dedup();
        return Finding {
            check,
            verdict: Verdict::Pass,
            detail: format!("IAM's policy simulator allows {principal} all {} actions of {policy_path}{not_simulated}", actions.len()),
            fix: None,
        };
    }
    let denied: Vec<String> = refused
        .iter()
        .map(|e| {
            if e.resource == "*" {
                format!("{} ({})", e.action, e.decision)
            } else {
                format!("{} on {} ({})", e.action, e.resource, e.decision)
            }
        })
        .collect();
    let explicit = refused.iter().any(|e| e.decision == "explicitDeny");
    let fix = if explicit {
        format!("an explicit Deny in {principal}'s policies refuses part of it: remove that Deny, and attach {policy_path}")
    } else {
        format!("attach {policy_path} to {principal} (or grant the actions named)")
    };
    Finding { check, verdict: Verdict::Fail, detail: format!("{principal} may not: {}{not_simulated}", denied.join(", ")), fix: Some(fix) }
}

/// The simulator was not asked: what stopped it, and what lets it be asked.
pub fn cannot_verify(check: String, principal: &str, policy_path: &str, error: &AwsError) -> Finding {
    let code = error.code.clone().unwrap_or_else(|| "no error code".into());
    let why = match (error.class, code.as_str()) {
        (_, c) if c.contains("AccessDenied") => format!("this identity may not call iam:SimulatePrincipalPolicy on {principal}"),
        (_, "NoSuchEntity") => format!("IAM knows no user or role {principal} (a role with a path must be named with it: --iam-principal)"),
        (ErrorClass::Throttled, _) => "IAM throttled the simulation; run check again".to_owned(),
        _ => format!("the simulator answered {code}: {}", mask_accounts(&error.message)),
    };
    Finding {
        check,
        verdict: Verdict::Skip,
        detail: format!("cannot verify: {why}"),
        fix: Some(format!(
            "allow iam:SimulatePrincipalPolicy on {principal} to the identity running check (a person's, not the operator's), or compare {principal}'s policy with {policy_path}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT_POLICY: &str = include_str!("../../../docs/iam/cert-operator-policy.json");
    const TENANT_POLICY: &str = include_str!("../../../docs/iam/cloudfront-tenant-operator-policy.json");

    fn evaluation(action: &str, decision: &str) -> Evaluation {
        Evaluation { action: action.into(), resource: "*".into(), decision: decision.into() }
    }

    #[test]
    fn an_assumed_role_session_is_simulated_as_its_role() {
        assert_eq!(
            principal("arn:aws:sts::111122223333:assumed-role/blockwork-operator/botocore-session-1").as_deref(),
            Some("arn:aws:iam::111122223333:role/blockwork-operator")
        );
        assert_eq!(principal("arn:aws:iam::111122223333:user/ops/alice").as_deref(), Some("arn:aws:iam::111122223333:user/ops/alice"));
        assert_eq!(principal("arn:aws:iam::111122223333:root"), None);
        assert_eq!(principal("arn:aws:sts::111122223333:federated-user/bob"), None);
    }

    #[test]
    fn every_action_of_the_cert_policy_is_simulated_on_each_configured_zone() {
        let targets = Targets { account: "1".into(), zones: vec![("Z1".into(), Some("example.com".into()))], ..Targets::default() };
        let (simulations, left_out) = simulations(CERT_POLICY, &targets);
        assert!(left_out.is_empty(), "{left_out:?}");
        let change = simulations
            .iter()
            .find(|s| s.actions.contains(&"route53:ChangeResourceRecordSets".to_owned()))
            .expect("the record writes are simulated");
        assert_eq!(change.resources, vec!["arn:aws:route53:::hostedzone/Z1".to_owned()]);
        assert!(change.context.iter().any(|(k, v)| k.ends_with("NormalizedRecordNames") && v == &["_blockwork-check.example.com"]));
        let actions: Vec<&String> = simulations.iter().flat_map(|s| &s.actions).collect();
        for action in ["acm:RequestCertificate", "acm:DeleteCertificate", "acm:AddTagsToCertificate", "route53:ListResourceRecordSets"] {
            assert!(actions.iter().any(|a| a.as_str() == action), "{action} missing from {actions:?}");
        }
    }

    #[test]
    fn statements_on_zones_or_roles_nobody_names_yet_are_left_out_and_said_so() {
        let targets = Targets { account: "111122223333".into(), ..Targets::default() };
        let (simulations, left_out) = simulations(TENANT_POLICY, &targets);
        assert!(left_out.iter().any(|l| l.contains("route53:ChangeResourceRecordSets") && l.contains("no hosted zone")), "{left_out:?}");
        assert!(left_out.iter().any(|l| l.contains("sts:AssumeRole") && l.contains("no role")), "{left_out:?}");
        let coverage = simulations.iter().find(|s| s.actions == ["acm:DescribeCertificate"]).expect("coverage simulated");
        assert_eq!(coverage.resources, vec!["arn:aws:acm:us-east-1:111122223333:certificate/blockwork-check".to_owned()]);
    }

    #[test]
    fn a_refused_action_fails_naming_it_and_the_policy_to_attach() {
        let answer =
            Ok(vec![evaluation("acm:RequestCertificate", "allowed"), evaluation("route53:ChangeResourceRecordSets", "implicitDeny")]);
        let finding = finding("cert", "docs/iam/cert-operator-policy.json", "arn:aws:iam::1:user/u", answer, &[]);
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.detail.contains("route53:ChangeResourceRecordSets (implicitDeny)"), "{}", finding.detail);
        assert!(!finding.detail.contains("acm:RequestCertificate"), "{}", finding.detail);
        assert!(finding.fix.unwrap_or_default().contains("attach docs/iam/cert-operator-policy.json"));
    }

    #[test]
    fn a_simulator_this_identity_may_not_call_is_neither_pass_nor_fail() {
        let refused = AwsError {
            operation: "SimulatePrincipalPolicy",
            code: Some("AccessDenied".into()),
            class: ErrorClass::Terminal,
            message: "not authorized".into(),
        };
        let finding = finding("cert", "docs/iam/cert-operator-policy.json", "arn:aws:iam::1:user/u", Err(refused), &[]);
        assert_eq!(finding.verdict, Verdict::Skip);
        assert!(finding.detail.starts_with("cannot verify"), "{}", finding.detail);
        assert!(finding.fix.unwrap_or_default().contains("allow iam:SimulatePrincipalPolicy"));
    }
}
