//! `blockwork check` per AwsIdentity (ADR 0014): each mapping valid among the others, its
//! namespaces there, each role it names assumable (with its ExternalId, in a session naming the
//! mapping); [`crate::aws_check`] then reads, per mapping, what each checked controller needs
//! (ACM, CloudFront, the hosted zones it grants) as that mapping. Findings name the mapping and
//! the field, never an account.

use std::collections::BTreeSet;

use blockwork_aws::{Aws, ErrorClass, mask_accounts};
use blockwork_identity::{AwsIdentity, Settings, validate};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt as _};

use crate::finding::{Finding, Verdict};

/// The cluster's mappings, or why they cannot be read.
pub async fn mappings(client: &Client) -> Result<Vec<AwsIdentity>, Finding> {
    match Api::<AwsIdentity>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(error) => Err(Finding::with(
            Verdict::Skip,
            "AwsIdentities",
            format!("cannot list them: {error}"),
            "run `blockwork check` as someone who may read the cluster-scoped awsidentities (the platform team), or install the CRD",
        )),
    }
}

/// The namespaces of the cluster, when the caller may list them.
pub async fn namespaces(client: &Client) -> Option<BTreeSet<String>> {
    let list = Api::<Namespace>::all(client.clone()).list(&ListParams::default()).await.ok()?;
    Some(list.items.iter().map(kube::ResourceExt::name_any).collect())
}

/// What is wrong with `identity` among `all` (overlaps, contradictions), and which namespaces it
/// lists do not exist (`existing`, when known): a mapping that acts for nobody is most likely a
/// typo.
pub fn mapping_findings(identity: &AwsIdentity, all: &[&AwsIdentity], existing: Option<&BTreeSet<String>>) -> Vec<Finding> {
    let check = format!("aws_identity: AwsIdentity {}", identity.name_any());
    let problems = validate::problems(identity, all);
    let mut findings = vec![if problems.is_empty() {
        Finding::pass(format!("{check}: mapping"), format!("{} namespace(s), no overlap or contradiction", identity.spec.namespaces.len()))
    } else {
        Finding::with(
            Verdict::Fail,
            format!("{check}: mapping"),
            problems.messages().join("; "),
            "fix the fields named: its namespaces' Certs and DistributionTenants are refused meanwhile (docs/multi-account.md)",
        )
    }];
    if let Some(existing) = existing {
        let missing: Vec<&str> = identity.spec.namespaces.iter().filter(|n| !existing.contains(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            findings.push(Finding::with(
                Verdict::Warn,
                format!("{check}: namespaces"),
                format!("{} do(es) not exist: nothing acts through this mapping there", missing.join(", ")),
                "check the names for a typo (a mapping names namespaces exactly), or create the namespaces",
            ));
        }
    }
    findings
}

/// Each role the mapping names, assumed as the operator assumes it, and the identity it gives.
pub async fn role_findings(aws: &Aws, identity: &AwsIdentity, settings: &Settings) -> Vec<Finding> {
    let check = format!("aws_identity: AwsIdentity {}", identity.name_any());
    let roles = blockwork_identity::status::roles(identity, settings);
    if roles.is_empty() {
        return vec![Finding::pass(format!("{check}: identity"), "no role: its namespaces act with the operator's own identity")];
    }
    let mut findings = Vec::new();
    for (field, principal) in roles {
        let finding = match blockwork_identity::status::assume(aws, &principal).await {
            Ok(()) => Finding::pass(
                format!("{check}: {field}"),
                format!(
                    "assumed with {}, session {}",
                    if principal.role().is_some_and(|r| r.external_id.is_some()) { "its ExternalId" } else { "no ExternalId" },
                    principal.role().map(|r| r.session_name.as_str()).unwrap_or_default()
                ),
            ),
            Err(error) => {
                let fix = match error.class {
                    ErrorClass::Throttled | ErrorClass::Retryable => {
                        "STS could not be reached or throttled the check: run it again".to_owned()
                    }
                    _ => format!(
                        "the role's trust policy must trust the operator's role with sts:AssumeRole and the ExternalId the mapping names, and the operator's role must allow sts:AssumeRole on it (docs/multi-account.md, \"IAM\"); {field} must be right"
                    ),
                };
                Finding::with(Verdict::Fail, format!("{check}: {field}"), mask_accounts(&error.to_string()), fix)
            }
        };
        findings.push(finding);
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_identity::AwsIdentitySpec;

    fn identity(name: &str, namespaces: &[&str]) -> AwsIdentity {
        AwsIdentity::new(
            name,
            AwsIdentitySpec { namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(), ..AwsIdentitySpec::default() },
        )
    }

    #[test]
    fn a_mapping_overlapping_another_fails_naming_both() {
        let (a, b) = (identity("a", &["x", "y"]), identity("b", &["y"]));
        let findings = mapping_findings(&a, &[&a, &b], None);
        assert_eq!(findings[0].verdict, Verdict::Fail);
        assert!(findings[0].detail.contains("y is already mapped by AwsIdentity b"), "{:?}", findings[0]);
    }

    #[test]
    fn namespaces_that_do_not_exist_are_a_warning_naming_them() {
        let a = identity("a", &["team-a", "tema-a"]);
        let existing = BTreeSet::from(["team-a".to_owned()]);
        let findings = mapping_findings(&a, &[&a], Some(&existing));
        assert_eq!(findings[0].verdict, Verdict::Pass);
        assert_eq!(findings[1].verdict, Verdict::Warn);
        assert!(findings[1].detail.starts_with("tema-a do(es) not exist"), "{:?}", findings[1]);
    }
}
