//! The AwsIdentity's status, kept by the leader: `Ready` says whether the mapping is valid among
//! the others and whether every role it names can be assumed (with its ExternalId), so the
//! platform team sees a wrong trust policy before a team's first object fails on it.
//!
//! Looked at when a mapping's spec changes (any of them: an overlap involves two) and every
//! [`RECHECK`]; the status is written only when the condition changes. Messages name fields and
//! mappings, never an account.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::{Aws, AwsError, Call, Principal, Scope, Service, classify_sdk_error};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt as _};
use tokio::sync::broadcast::error::RecvError;
use tracing::{info, warn};

use crate::api::AwsIdentity;
use crate::grant::Settings;
use crate::registry::Identities;
use crate::validate::{Problems, problems};

/// How often every mapping's roles are assumed again.
pub const RECHECK: Duration = Duration::from_secs(600);
/// The condition.
pub const READY: &str = "Ready";

/// Keeps the statuses until `shutdown` completes.
pub async fn run(client: Client, identities: Arc<Identities>, aws: Arc<Aws>, shutdown: impl Future<Output = ()>) {
    let mut changes = identities.changes();
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut looked_at: BTreeMap<String, Option<i64>> = BTreeMap::new();
    tokio::pin!(shutdown);
    loop {
        let every = tokio::select! {
            () = &mut shutdown => return,
            _ = recheck.tick() => true,
            changed = changes.recv() => matches!(changed, Err(RecvError::Lagged(_))),
        };
        let Some(all) = identities.all().await else { continue };
        let specs: BTreeMap<String, Option<i64>> = all.iter().map(|i| (i.name_any(), i.metadata.generation)).collect();
        // Our own status writes come back as changes: only a spec change is looked at.
        if !every && specs == looked_at {
            continue;
        }
        looked_at = specs;
        let refs: Vec<&AwsIdentity> = all.iter().map(AsRef::as_ref).collect();
        for identity in &refs {
            let ready = assess(identity, &refs, &aws, identities.settings()).await;
            if let Err(error) = write(&client, identity, ready).await {
                warn!(identity = %identity.name_any(), %error, "writing an AwsIdentity's status");
            }
        }
    }
}

/// The `Ready` condition of `identity` among `all`.
async fn assess(identity: &AwsIdentity, all: &[&AwsIdentity], aws: &Aws, settings: &Settings) -> (bool, &'static str, String) {
    let found = problems(identity, all);
    if !found.is_empty() {
        return readiness(&found, &[]);
    }
    let mut checks = Vec::new();
    for (field, principal) in roles(identity, settings) {
        checks.push((field, assume(aws, &principal).await));
    }
    readiness(&found, &checks)
}

/// Every role the mapping names, by field, as the principal that assumes it for the mapping's
/// shared work.
pub fn roles(identity: &AwsIdentity, settings: &Settings) -> Vec<(String, Principal)> {
    let grant = crate::grant::shared_grant(identity, settings);
    let own = grant.principal.role().map(|_| ("spec.roleArn".to_owned(), grant.principal.clone()));
    let zones = identity.spec.hosted_zones.iter().zip(&grant.zones).enumerate().filter_map(|(index, (zone, granted))| {
        zone.role_arn.as_ref().map(|_| (format!("spec.hostedZones[{index}].roleArn"), granted.principal.clone()))
    });
    own.into_iter().chain(zones).collect()
}

/// AssumeRole (through the layer's credentials) and GetCallerIdentity with its credentials.
pub async fn assume(aws: &Aws, principal: &Principal) -> Result<(), AwsError> {
    const OP: &str = "GetCallerIdentity";
    let sts = aws.sts_as(crate::CONTROLLER, principal).await?;
    let call = Call {
        callers: &[crate::CONTROLLER],
        identity: principal.identity(),
        scope: Scope::new(principal.account(), Service::Sts, None),
        operation: OP,
        changes: 0,
    };
    aws.call(call, || async { sts.get_caller_identity().send().await.map(|_| ()).map_err(|e| classify_sdk_error(OP, &e)) }).await
}

/// Ready, its reason and message, from the mapping's problems and its roles' checks.
fn readiness(problems: &Problems, checks: &[(String, Result<(), AwsError>)]) -> (bool, &'static str, String) {
    if !problems.is_empty() {
        return (false, "InvalidMapping", problems.messages().join("; "));
    }
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(field, result)| result.as_ref().err().map(|error| format!("{field} cannot be assumed: {error}")))
        .collect();
    if !failed.is_empty() {
        return (false, "AssumeRoleFailed", failed.join("; "));
    }
    let how = match checks.len() {
        0 => "its namespaces act with the operator's own identity".to_owned(),
        roles => format!("every role it names ({roles}) was assumed"),
    };
    (true, "Ready", how)
}

async fn write(client: &Client, identity: &AwsIdentity, (status, reason, message): (bool, &'static str, String)) -> kube::Result<()> {
    let generation = identity.metadata.generation;
    let current = identity.status.as_ref();
    let same = current.is_some_and(|s| {
        s.observed_generation == generation
            && s.conditions.iter().any(|c| c.type_ == READY && (c.status == "True") == status && c.reason == reason && c.message == message)
    });
    if same {
        return Ok(());
    }
    let condition: Condition = blockwork_runtime::status::condition(READY, status, reason, &message, generation);
    let patch = serde_json::json!({"status": {"observedGeneration": generation, "conditions": [condition]}});
    Api::<AwsIdentity>::all(client.clone()).patch_status(&identity.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    info!(identity = %identity.name_any(), ready = status, reason, "AwsIdentity checked");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_aws::ErrorClass;

    #[test]
    fn an_invalid_mapping_is_not_ready_with_its_problems() {
        let found = Problems { overlaps: vec![("x".into(), "b".into())], contradictions: vec![] };
        let (ready, reason, message) = readiness(&found, &[]);
        assert!(!ready);
        assert_eq!(reason, "InvalidMapping");
        assert!(message.contains("x is already mapped by AwsIdentity b"), "{message}");
    }

    #[test]
    fn a_role_that_cannot_be_assumed_is_named_by_its_field() {
        let denied =
            AwsError { operation: "AssumeRole", code: Some("AccessDenied".into()), class: ErrorClass::Terminal, message: "no".into() };
        let checks = [("spec.roleArn".to_owned(), Ok(())), ("spec.hostedZones[1].roleArn".to_owned(), Err(denied))];
        let (ready, reason, message) = readiness(&Problems::default(), &checks);
        assert_eq!((ready, reason), (false, "AssumeRoleFailed"));
        assert!(message.starts_with("spec.hostedZones[1].roleArn cannot be assumed"), "{message}");
    }

    #[test]
    fn a_valid_mapping_whose_roles_were_assumed_is_ready() {
        assert_eq!(
            readiness(&Problems::default(), &[("spec.roleArn".into(), Ok(()))]),
            (true, "Ready", "every role it names (1) was assumed".into())
        );
        assert!(readiness(&Problems::default(), &[]).2.contains("operator's own identity"));
    }
}
