//! The validating admission webhook for DistributionTenant: the rules of [`crate::validate`] that
//! need only the object — DNS names that CEL cannot check (reserved labels, IDNA A-labels a
//! public CA would refuse, the same domain with and without its trailing dot), the certificate's
//! region, a web ACL override without its ARN, and the rest — answered before the object is
//! stored, so a tenant CloudFront would refuse never gets a DNS record written for it. Served by
//! every replica, leader or not. It also refuses what the namespace is not granted (ADR 0014): a
//! namespace without an identity, and `spec.dns` — its hosted zone, its `assumeRoleArn`, its
//! domains — outside the namespace's AwsIdentity, naming the field. What needs AWS (the
//! distribution's parameters, the certificate's names) the controller checks before its first
//! write, and reports as a condition. A Cert `certRef` names is read: one whose certificate is
//! outside us-east-1, or whose names do not cover the domains, is refused naming the field (one
//! that does not exist yet is admitted with a warning: the tenant waits for it).

use blockwork_cert::Cert;
use kube::{Api, Client};

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
    client: Client,
    identities: Arc<Identities>,
    /// Where the installation requests certificates (`--aws-region`), when given: a Cert not
    /// issued yet will be there.
    region: Option<String>,
    fail_closed: bool,
}

/// The route, over the process's mappings, reading the Certs tenants name through `client`.
/// `fail_closed`: deny an invalid object, or admit it with the problem as a warning (the
/// controller then refuses it with the same message as a condition).
pub fn router(client: Client, identities: Arc<Identities>, region: Option<String>, fail_closed: bool) -> Router {
    Router::new().route(PATH, post(review)).with_state(Validator { client, identities, region, fail_closed })
}

/// The Cert a tenant names, as admission read it.
#[derive(Debug)]
enum Named {
    /// No `certRef`.
    Nothing,
    Cert(Box<Cert>),
    Missing(String),
    /// It could not be read: the controller checks it before any write.
    Unread(String),
}

async fn review(
    State(validator): State<Validator>,
    Json(review): Json<AdmissionReview<DistributionTenant>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let namespace = review.request.as_ref().and_then(|r| r.namespace.clone()).unwrap_or_default();
    let grant = validator.identities.grant(&namespace, &[]).await;
    let named = review.request.as_ref().and_then(|r| r.object.as_ref()).and_then(|t| t.spec.cert_ref()).map(str::to_owned);
    let named = match named {
        None => Named::Nothing,
        Some(name) => match Api::<Cert>::namespaced(validator.client.clone(), &namespace).get_opt(&name).await {
            Ok(Some(cert)) => Named::Cert(Box::new(cert)),
            Ok(None) => Named::Missing(name),
            Err(error) => {
                Named::Unread(format!("{}: Cert {name} could not be read ({error}); the controller checks it", crate::cert_ref::FIELD))
            }
        },
    };
    Json(answer(review, &grant, &named, validator.region.as_deref(), validator.fail_closed))
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

/// The problem of a tenant with the Cert it names, if any; and what is worth a warning.
fn named_cert(tenant: &DistributionTenant, named: &Named, region: Option<&str>) -> (Option<String>, Option<String>) {
    match named {
        Named::Nothing => (None, None),
        Named::Cert(cert) => {
            let offered = crate::cert_ref::Offered::of(cert);
            (crate::cert_ref::check(&tenant.spec, &offered, region).err().map(|refused| refused.to_string()), None)
        }
        Named::Missing(name) => (
            None,
            Some(format!(
                "{}: Cert {name} does not exist (yet): the tenant waits for it (Ready=False, DependenciesNotReady) and uses its certificate once issued",
                crate::cert_ref::FIELD
            )),
        ),
        Named::Unread(warning) => (None, Some(warning.clone())),
    }
}

fn answer(
    review: AdmissionReview<DistributionTenant>,
    grant: &Result<blockwork_identity::Grant, blockwork_identity::Refusal>,
    named: &Named,
    region: Option<&str>,
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
    let (cert_problem, warning) = named_cert(&tenant, named, region);
    let problem = validate(&tenant.name_any(), &tenant.spec)
        .err()
        .map(|invalid| invalid.to_string())
        .or_else(|| granted(&tenant, grant))
        .or(cert_problem);
    let mut verdict = match problem {
        None => response,
        Some(problem) if fail_closed => response.deny(format!("DistributionTenant {}: {problem}", tenant.name_any())),
        Some(problem) => {
            let mut allowed = response;
            allowed.warnings = Some(vec![problem]);
            allowed
        }
    };
    if verdict.allowed
        && let Some(warning) = warning
    {
        verdict.warnings.get_or_insert_with(Vec::new).push(warning);
    }
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
        let answered = answer(hostile, &mapped(), &Named::Nothing, None, true);
        let message = &response(&answered).result.message;
        assert!(!response(&answered).allowed);
        assert!(message.contains("spec.dns.assumeRoleArn") && !message.contains("999999999999"), "{message}");
        let granted = with_dns(review(&["shop.example.com"]), "Z1", None);
        assert!(response(&answer(granted, &mapped(), &Named::Nothing, None, true)).allowed, "the mapping says how to reach the zone");
    }

    #[test]
    fn a_zone_or_domain_outside_the_grant_is_denied_naming_the_field() {
        let other_zone = answer(with_dns(review(&["shop.example.com"]), "Z2", None), &mapped(), &Named::Nothing, None, true);
        assert!(response(&other_zone).result.message.contains("spec.dns.hostedZoneId Z2"), "{}", response(&other_zone).result.message);
        let other_name = answer(with_dns(review(&["api.example.com"]), "Z1", None), &mapped(), &Named::Nothing, None, true);
        assert!(response(&other_name).result.message.contains("spec.domains: api.example.com"), "{}", response(&other_name).result.message);
    }

    #[test]
    fn an_unmapped_namespace_assumes_no_role_and_a_refused_one_is_denied() {
        let role = answer(
            with_dns(review(&["www.example.com"]), "Z9", Some("arn:aws:iam::222222222222:role/dns")),
            &unmapped(),
            &Named::Nothing,
            None,
            true,
        );
        assert!(response(&role).result.message.contains("unmapped namespaces assume no role"), "{}", response(&role).result.message);
        let refused = Err(blockwork_identity::Refusal::Unmapped("team-a".to_owned()));
        let answered = answer(review(&["www.example.com"]), &refused, &Named::Nothing, None, true);
        assert!(response(&answered).result.message.contains("listed by no AwsIdentity"), "{}", response(&answered).result.message);
    }

    fn naming_cert(domains: &[&str]) -> AdmissionReview<DistributionTenant> {
        let mut review = review(domains);
        let tenant = review.request.as_mut().and_then(|r| r.object.as_mut()).expect("an object");
        tenant.spec.customizations = Some(crate::api::Customizations {
            certificate: Some(crate::api::CertificateRef { arn: None, cert_ref: Some(crate::api::CertRef { name: "shop".to_owned() }) }),
            ..crate::api::Customizations::default()
        });
        review
    }

    fn issued(region: &str, domain: &str) -> Named {
        let mut cert = Cert::new("shop", blockwork_cert::CertSpec::default());
        let mut status = blockwork_cert::CertStatus::default();
        status.observation.certificate_arn =
            Some(format!("arn:aws:acm:{region}:123456789012:certificate/0a1b2c3d-0000-4000-8000-000000000001"));
        status.observation.domain_name = Some(domain.to_owned());
        cert.status = Some(status);
        Named::Cert(Box::new(cert))
    }

    #[test]
    fn a_named_cert_cloudfront_would_refuse_is_denied_naming_the_field() {
        let elsewhere = answer(naming_cert(&["www.example.com"]), &unmapped(), &issued("eu-west-1", "*.example.com"), None, true);
        let message = &response(&elsewhere).result.message;
        assert!(!response(&elsewhere).allowed);
        assert!(message.contains("spec.customizations.certificate.certRef: Cert shop's certificate is in eu-west-1"), "{message}");
        assert!(!message.contains("123456789012"), "no account: {message}");
        let narrow =
            answer(naming_cert(&["www.example.com", "example.com"]), &unmapped(), &issued("us-east-1", "*.example.com"), None, true);
        let message = &response(&narrow).result.message;
        assert!(message.contains("Cert shop's names do not cover the domains example.com"), "{message}");
        let covering = answer(naming_cert(&["www.example.com"]), &unmapped(), &issued("us-east-1", "*.example.com"), None, true);
        assert!(response(&covering).allowed);
    }

    #[test]
    fn a_named_cert_that_does_not_exist_yet_is_admitted_with_a_warning() {
        let answered = answer(naming_cert(&["www.example.com"]), &unmapped(), &Named::Missing("shop".to_owned()), None, true);
        let response = response(&answered);
        assert!(response.allowed);
        let warnings = response.warnings.clone().unwrap_or_default();
        assert!(warnings.iter().any(|w| w.contains("Cert shop does not exist (yet): the tenant waits for it")), "{warnings:?}");
        let before_issuance =
            answer(naming_cert(&["www.example.com"]), &unmapped(), &Named::Missing("shop".to_owned()), Some("eu-west-1"), true);
        assert!(before_issuance.response.expect("a response").allowed, "a missing Cert's region is not known from it");
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
        let answered = answer(review(&["www.example.com", "api.example.com."]), &unmapped(), &Named::Nothing, None, true);
        assert!(response(&answered).allowed);
    }

    #[test]
    fn undecodable_a_label_is_denied_naming_the_field_and_label() {
        let answered = answer(review(&["xn--zz.example.com"]), &unmapped(), &Named::Nothing, None, true);
        let response = response(&answered);
        assert!(!response.allowed);
        assert!(response.result.message.contains("spec.domains[0]: label \"xn--zz\""), "{}", response.result.message);
    }

    #[test]
    fn fail_open_admits_with_the_problem_as_a_warning() {
        let answered = answer(review(&["www.example.com", "www.example.com."]), &unmapped(), &Named::Nothing, None, false);
        let response = response(&answered);
        assert!(response.allowed);
        let warnings = response.warnings.clone().unwrap_or_default();
        assert!(warnings.iter().any(|w| w.contains("names www.example.com a second time")), "{warnings:?}");
    }
}
