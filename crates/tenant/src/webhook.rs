//! The validating admission webhook for DistributionTenant: the rules of [`crate::validate`] that
//! need only the object — DNS names that CEL cannot check (reserved labels, IDNA A-labels a
//! public CA would refuse, the same domain with and without its trailing dot), the certificate's
//! region, a web ACL override without its ARN, and the rest — answered before the object is
//! stored, so a tenant CloudFront would refuse never gets a DNS record written for it. Served by every replica, leader or not.
//! What needs AWS (the distribution's parameters, the certificate's names) the controller checks
//! before its first write, and reports as a condition.

use axum::routing::post;
use axum::{Json, Router};
use k8s_openapi::api::admissionregistration::v1::{RuleWithOperations, ServiceReference, ValidatingWebhook, WebhookClientConfig};
use kube::ResourceExt as _;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use crate::api::{DistributionTenant, GROUP, VERSION};
use crate::validate::validate;

/// Where the webhook server serves it.
pub const PATH: &str = "/validate/distributiontenant";

/// The registration: DistributionTenant CREATE and UPDATE, at [`PATH`] (`blockwork webhooks`
/// fills in where).
pub fn validating_webhook() -> ValidatingWebhook {
    ValidatingWebhook {
        name: format!("distributiontenants.{GROUP}"),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![GROUP.to_owned()]),
            api_versions: Some(vec![VERSION.to_owned()]),
            operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
            resources: Some(vec!["distributiontenants".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]),
        client_config: WebhookClientConfig {
            service: Some(ServiceReference { path: Some(PATH.to_owned()), ..Default::default() }),
            ..Default::default()
        },
        admission_review_versions: vec!["v1".to_owned()],
        side_effects: "None".to_owned(),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

/// The route. `fail_closed`: deny an invalid object, or admit it with the problem as a warning
/// (the controller then refuses it with the same message as a condition).
pub fn router(fail_closed: bool) -> Router {
    Router::new().route(PATH, post(move |Json(review)| async move { Json(answer(review, fail_closed)) }))
}

fn answer(review: AdmissionReview<DistributionTenant>, fail_closed: bool) -> AdmissionReview<DynamicObject> {
    let request: AdmissionRequest<DistributionTenant> = match review.try_into() {
        Ok(request) => request,
        Err(error) => return AdmissionResponse::invalid(error.to_string()).into_review(),
    };
    let response = AdmissionResponse::from(&request);
    let Some(tenant) = request.object else {
        return response.into_review();
    };
    // Deleting is never refused: the finalizer runs whatever the spec says.
    if tenant.metadata.deletion_timestamp.is_some() {
        return response.into_review();
    }
    let verdict = match validate(&tenant.name_any(), &tenant.spec) {
        Ok(()) => response,
        Err(invalid) if fail_closed => response.deny(format!("DistributionTenant {}: {invalid}", tenant.name_any())),
        Err(invalid) => {
            let mut allowed = response;
            allowed.warnings = Some(vec![invalid.to_string()]);
            allowed
        }
    };
    verdict.into_review()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DistributionTenantSpec, DomainName};

    fn review(domains: &[&str]) -> AdmissionReview<DistributionTenant> {
        let spec = DistributionTenantSpec {
            distribution_id: "E1ABC".to_owned(),
            domains: domains.iter().map(|d| DomainName { domain: (*d).to_owned() }).collect(),
            ..DistributionTenantSpec::default()
        };
        let mut tenant = DistributionTenant::new("shop", spec);
        tenant.metadata.namespace = Some("team-a".to_owned());
        serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0e4b0a6c-1f4c-4d0e-9a37-7f3c2d1b5a10",
                "kind": {"group": GROUP, "version": VERSION, "kind": "DistributionTenant"},
                "resource": {"group": GROUP, "version": VERSION, "resource": "distributiontenants"},
                "operation": "CREATE",
                "userInfo": {},
                "name": "shop",
                "namespace": "team-a",
                "object": tenant,
            }
        }))
        .expect("an AdmissionReview")
    }

    fn response(review: &AdmissionReview<DynamicObject>) -> &AdmissionResponse {
        review.response.as_ref().expect("a response")
    }

    #[test]
    fn registration_covers_create_and_update_of_distribution_tenants() {
        let webhook = validating_webhook();
        let rule = &webhook.rules.expect("rules")[0];
        assert_eq!(rule.resources, Some(vec!["distributiontenants".to_owned()]));
        assert_eq!(rule.operations, Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]));
        assert_eq!(webhook.client_config.service.and_then(|s| s.path).as_deref(), Some(PATH));
    }

    #[test]
    fn valid_tenant_is_admitted() {
        let answered = answer(review(&["www.example.com", "api.example.com."]), true);
        assert!(response(&answered).allowed);
    }

    #[test]
    fn undecodable_a_label_is_denied_naming_the_field_and_label() {
        let answered = answer(review(&["xn--zz.example.com"]), true);
        let response = response(&answered);
        assert!(!response.allowed);
        assert!(response.result.message.contains("spec.domains[0]: label \"xn--zz\""), "{}", response.result.message);
    }

    #[test]
    fn fail_open_admits_with_the_problem_as_a_warning() {
        let answered = answer(review(&["www.example.com", "www.example.com."]), false);
        let response = response(&answered);
        assert!(response.allowed);
        let warnings = response.warnings.clone().unwrap_or_default();
        assert!(warnings.iter().any(|w| w.contains("names www.example.com a second time")), "{warnings:?}");
    }
}
