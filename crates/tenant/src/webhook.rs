//! The validating admission webhook for DistributionTenant: the rules of [`crate::validate`] that
//! need only the object — DNS names that CEL cannot check (reserved labels, IDNA A-labels a
//! public CA would refuse, the same domain with and without its trailing dot), the certificate's
//! region, a web ACL override without its ARN, and the rest — answered before the object is
//! stored, so a tenant CloudFront would refuse never gets a DNS record written for it. Served by
//! every replica, leader or not. It also refuses what the namespace is not granted (ADR 0014): a
//! namespace without an identity, and `spec.dns` — its hosted zone, its `assumeRoleArn`, its
//! domains — outside the namespace's AwsIdentity, naming the field. What needs AWS (the
//! distribution's parameters, the certificate's names) the controller checks before its first
//! write, and reports as a condition.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use blockwork_identity::{Identities, tenant_zone};
use blockwork_runtime::admission::{self, Scope};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
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
    admission::validating_webhook(GROUP, VERSION, "distributiontenants", Scope::Namespaced, PATH)
}

#[derive(Clone)]
struct Validator {
    identities: Arc<Identities>,
    fail_closed: bool,
}

/// The route, over the process's mappings. `fail_closed`: deny an invalid object, or admit it
/// with the problem as a warning (the controller then refuses it with the same message as a
/// condition).
pub fn router(identities: Arc<Identities>, fail_closed: bool) -> Router {
    Router::new().route(PATH, post(review)).with_state(Validator { identities, fail_closed })
}

async fn review(
    State(validator): State<Validator>,
    Json(review): Json<AdmissionReview<DistributionTenant>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let namespace = review.request.as_ref().and_then(|r| r.namespace.clone()).unwrap_or_default();
    let grant = validator.identities.grant(&namespace, &[]).await;
    Json(answer(review, &grant, validator.fail_closed))
}

/// The problem of a tenant in a namespace granted `grant` (or refused), if any.
fn granted(tenant: &DistributionTenant, grant: &Result<blockwork_identity::Grant, blockwork_identity::Refusal>) -> Option<String> {
    let grant = match grant {
        Ok(grant) => grant,
        Err(refusal) => return Some(refusal.to_string()),
    };
    let dns = tenant.spec.dns.as_ref()?;
    let domains: Vec<String> = tenant.spec.domains.iter().map(|d| d.domain.clone()).collect();
    tenant_zone(grant, &dns.hosted_zone_id, dns.assume_role_arn.as_deref(), &domains).err().map(|refusal| refusal.to_string())
}

fn answer(
    review: AdmissionReview<DistributionTenant>,
    grant: &Result<blockwork_identity::Grant, blockwork_identity::Refusal>,
    fail_closed: bool,
) -> AdmissionReview<DynamicObject> {
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
    let problem = validate(&tenant.name_any(), &tenant.spec).err().map(|invalid| invalid.to_string()).or_else(|| granted(&tenant, grant));
    let verdict = match problem {
        None => response,
        Some(problem) if fail_closed => response.deny(format!("DistributionTenant {}: {problem}", tenant.name_any())),
        Some(problem) => {
            let mut allowed = response;
            allowed.warnings = Some(vec![problem]);
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

    /// The grant of `team-a` when no AwsIdentity maps it and the operator acts for it.
    fn unmapped() -> Result<blockwork_identity::Grant, blockwork_identity::Refusal> {
        blockwork_identity::grant::grant("team-a", &[], &blockwork_identity::Settings::default(), &[])
    }

    /// `team-a` mapped to a role, granted zone Z1 through a DNS account's role, for shop.example.com only.
    fn mapped() -> Result<blockwork_identity::Grant, blockwork_identity::Refusal> {
        let identity = blockwork_identity::AwsIdentity::new(
            "team-a",
            blockwork_identity::AwsIdentitySpec {
                namespaces: vec!["team-a".to_owned()],
                role_arn: Some("arn:aws:iam::111111111111:role/team".to_owned()),
                external_id: None,
                hosted_zones: vec![blockwork_identity::HostedZoneGrant {
                    id: "Z1".to_owned(),
                    name: "example.com".to_owned(),
                    role_arn: Some("arn:aws:iam::222222222222:role/dns".to_owned()),
                    external_id: None,
                    domains: vec!["shop.example.com".to_owned()],
                }],
            },
        );
        blockwork_identity::grant::grant("team-a", &[&identity], &blockwork_identity::Settings::default(), &[])
    }

    fn with_dns(mut review: AdmissionReview<DistributionTenant>, zone: &str, role: Option<&str>) -> AdmissionReview<DistributionTenant> {
        let request = review.request.as_mut().expect("a request");
        let tenant = request.object.as_mut().expect("an object");
        tenant.spec.dns = Some(crate::api::DnsConfig {
            provider: crate::api::DnsProvider::Route53,
            hosted_zone_id: zone.to_owned(),
            assume_role_arn: role.map(str::to_owned),
            ttl: crate::api::DEFAULT_TTL,
        });
        review
    }

    #[test]
    fn a_role_the_namespace_is_not_granted_is_denied_naming_the_field_and_no_account() {
        let hostile = with_dns(review(&["shop.example.com"]), "Z1", Some("arn:aws:iam::999999999999:role/admin"));
        let answered = answer(hostile, &mapped(), true);
        let message = &response(&answered).result.message;
        assert!(!response(&answered).allowed);
        assert!(message.contains("spec.dns.assumeRoleArn") && !message.contains("999999999999"), "{message}");
        let granted = with_dns(review(&["shop.example.com"]), "Z1", None);
        assert!(response(&answer(granted, &mapped(), true)).allowed, "the mapping says how to reach the zone");
    }

    #[test]
    fn a_zone_or_domain_outside_the_grant_is_denied_naming_the_field() {
        let other_zone = answer(with_dns(review(&["shop.example.com"]), "Z2", None), &mapped(), true);
        assert!(response(&other_zone).result.message.contains("spec.dns.hostedZoneId Z2"), "{}", response(&other_zone).result.message);
        let other_name = answer(with_dns(review(&["api.example.com"]), "Z1", None), &mapped(), true);
        assert!(response(&other_name).result.message.contains("spec.domains: api.example.com"), "{}", response(&other_name).result.message);
    }

    #[test]
    fn an_unmapped_namespace_assumes_no_role_and_a_refused_one_is_denied() {
        let role = answer(with_dns(review(&["www.example.com"]), "Z9", Some("arn:aws:iam::222222222222:role/dns")), &unmapped(), true);
        assert!(response(&role).result.message.contains("unmapped namespaces assume no role"), "{}", response(&role).result.message);
        let refused = Err(blockwork_identity::Refusal::Unmapped("team-a".to_owned()));
        let answered = answer(review(&["www.example.com"]), &refused, true);
        assert!(response(&answered).result.message.contains("listed by no AwsIdentity"), "{}", response(&answered).result.message);
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
        let answered = answer(review(&["www.example.com", "api.example.com."]), &unmapped(), true);
        assert!(response(&answered).allowed);
    }

    #[test]
    fn undecodable_a_label_is_denied_naming_the_field_and_label() {
        let answered = answer(review(&["xn--zz.example.com"]), &unmapped(), true);
        let response = response(&answered);
        assert!(!response.allowed);
        assert!(response.result.message.contains("spec.domains[0]: label \"xn--zz\""), "{}", response.result.message);
    }

    #[test]
    fn fail_open_admits_with_the_problem_as_a_warning() {
        let answered = answer(review(&["www.example.com", "www.example.com."]), &unmapped(), false);
        let response = response(&answered);
        assert!(response.allowed);
        let warnings = response.warnings.clone().unwrap_or_default();
        assert!(warnings.iter().any(|w| w.contains("names www.example.com a second time")), "{warnings:?}");
    }
}
