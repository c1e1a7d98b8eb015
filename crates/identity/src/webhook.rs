//! The validating admission webhook for AwsIdentity: a mapping that lists a namespace another
//! lists, or contradicts itself or the others ([`crate::validate`]), is refused before it is
//! stored, naming the field and the other mapping. A change that moves namespaces to another
//! account (or drops them) is admitted with a warning: their objects holding AWS resources are
//! held, not moved (ADR 0014). Served by every replica, leader or not.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use blockwork_aws::principal::account_of_arn;
use blockwork_runtime::admission::{self, Scope};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use kube::ResourceExt as _;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use crate::api::{AwsIdentity, GROUP, VERSION};
use crate::registry::Identities;
use crate::validate::problems;

/// Where the webhook server serves it.
pub const PATH: &str = "/validate/awsidentity";

/// The registration: AwsIdentity CREATE and UPDATE, at [`PATH`].
pub fn validating_webhook() -> ValidatingWebhook {
    admission::validating_webhook(GROUP, VERSION, "awsidentities", Scope::Cluster, PATH)
}

#[derive(Clone)]
struct Validator {
    identities: Arc<Identities>,
    fail_closed: bool,
}

/// The route, over the process's mappings.
pub fn router(identities: Arc<Identities>, fail_closed: bool) -> Router {
    Router::new().route(PATH, post(review)).with_state(Validator { identities, fail_closed })
}

async fn review(
    State(validator): State<Validator>,
    Json(review): Json<AdmissionReview<AwsIdentity>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<AwsIdentity> = match review.try_into() {
        Ok(request) => request,
        Err(error) => return Json(AdmissionResponse::invalid(error.to_string()).into_review()),
    };
    let response = AdmissionResponse::from(&request);
    let Some(identity) = request.object.as_ref() else {
        return Json(response.into_review());
    };
    let messages = match validator.identities.all().await {
        Some(all) => problems(identity, &all.iter().map(AsRef::as_ref).collect::<Vec<_>>()).messages(),
        None => vec![
            "the webhook has not read the other AwsIdentities yet, so an overlap cannot be ruled out; retry in a few seconds".to_owned(),
        ],
    };
    let warnings = request.old_object.as_ref().map(|old| moves(old, identity)).unwrap_or_default();
    Json(verdict(response, messages, warnings, validator.fail_closed, &identity.name_any()).into_review())
}

/// Warnings for a change that takes namespaces out of the mapping or to another account.
fn moves(old: &AwsIdentity, new: &AwsIdentity) -> Vec<String> {
    let dropped: Vec<&str> = old.spec.namespaces.iter().filter(|n| !new.spec.namespaces.contains(n)).map(String::as_str).collect();
    let account = |identity: &AwsIdentity| identity.spec.role_arn.as_deref().map(|arn| account_of_arn(arn).map(str::to_owned));
    let moved = account(old) != account(new);
    let held = "their Certs and DistributionTenants that hold AWS resources are held (Synced=False, reason AwsIdentityChanged), not moved: see docs/multi-account.md, \"Changing a mapping\"";
    let mut warnings = Vec::new();
    if !dropped.is_empty() {
        warnings.push(format!("namespaces {} leave this AwsIdentity: {held}", dropped.join(", ")));
    }
    if moved {
        warnings.push(format!("spec.roleArn moves the namespaces to another account: {held}"));
    }
    warnings
}

/// Denies with every problem (fail closed), or allows with them as warnings; warnings of an
/// admitted change stay.
fn verdict(
    response: AdmissionResponse,
    problems: Vec<String>,
    mut warnings: Vec<String>,
    fail_closed: bool,
    name: &str,
) -> AdmissionResponse {
    if !problems.is_empty() && fail_closed {
        return response.deny(format!("AwsIdentity {name}: {}", problems.join("; ")));
    }
    warnings.extend(problems);
    let mut allowed = response;
    if !warnings.is_empty() {
        allowed.warnings = Some(warnings);
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AwsIdentitySpec;

    fn identity(namespaces: &[&str], role: Option<&str>) -> AwsIdentity {
        AwsIdentity::new(
            "team-a",
            AwsIdentitySpec {
                namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
                role_arn: role.map(str::to_owned),
                ..AwsIdentitySpec::default()
            },
        )
    }

    #[test]
    fn registration_covers_create_and_update_of_the_cluster_scoped_kind() {
        let webhook = validating_webhook();
        let rule = &webhook.rules.clone().unwrap_or_default()[0];
        assert_eq!(rule.resources, Some(vec!["awsidentities".to_owned()]));
        assert_eq!(rule.scope.as_deref(), Some("Cluster"));
        assert_eq!(webhook.client_config.service.and_then(|s| s.path).as_deref(), Some(PATH));
    }

    #[test]
    fn moving_namespaces_to_another_account_or_out_is_admitted_with_a_warning() {
        let old = identity(&["a", "b"], Some("arn:aws:iam::111111111111:role/r"));
        assert!(moves(&old, &old).is_empty());
        let other_role_same_account = identity(&["a", "b"], Some("arn:aws:iam::111111111111:role/other"));
        assert!(moves(&old, &other_role_same_account).is_empty(), "another role of the same account is not a move");
        let warnings = moves(&old, &identity(&["a"], Some("arn:aws:iam::222222222222:role/r")));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("namespaces b leave"), "{warnings:?}");
        assert!(warnings.iter().all(|w| !w.contains("222222222222")));
    }

    #[test]
    fn problems_deny_when_fail_closed_and_warn_otherwise() {
        let denied = verdict(AdmissionResponse::invalid("x"), vec!["bad".into()], vec![], true, "a");
        assert!(!denied.allowed);
        assert!(denied.result.message.contains("AwsIdentity a: bad"), "{}", denied.result.message);
        let mut open = AdmissionResponse::invalid("x");
        open.allowed = true;
        let warned = verdict(open, vec!["bad".into()], vec!["moved".into()], false, "a");
        assert!(warned.allowed);
        assert_eq!(warned.warnings, Some(vec!["moved".to_owned(), "bad".to_owned()]));
    }
}
