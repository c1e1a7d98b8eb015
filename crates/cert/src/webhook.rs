//! The validating admission webhook for Cert: the checks the CRD schema cannot make — whether the
//! namespace may act at all and the domains lie in the hosted zones (and names) its grant gives
//! (ADR 0014: its AwsIdentity's, or the operator's `--dns-zones`), and a domain already held by
//! another Cert in any namespace (an index over all Certs, kept by a watch) — answered before the
//! object is stored. Served by every replica, leader or not.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use blockwork_runtime::admission::{self, Scope};
use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use kube::api::{Api, DynamicObject};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use tracing::warn;

use blockwork_identity::{AwsIdentity, Identities, OperatorZone};

use crate::admission::{FqdnIndex, validate};
use crate::api::{Cert, GROUP, VERSION};
use crate::export::admission as export;
use crate::zones::ZoneRegistry;

/// Where the webhook server serves it.
pub const PATH: &str = "/validate/cert";
/// How long a request waits for the index of Certs after a start.
const INDEX_WAIT: Duration = Duration::from_secs(3);

/// The registration: Cert CREATE and UPDATE, at [`PATH`] (`blockwork webhooks` fills in where).
pub fn validating_webhook() -> ValidatingWebhook {
    admission::validating_webhook(GROUP, VERSION, "certs", Scope::Namespaced, PATH)
}

#[derive(Clone)]
struct Validator {
    certs: Store<Cert>,
    identities: Arc<Identities>,
    /// What the operator's own identity grants unmapped namespaces (`--dns-zones`).
    operator_zones: Arc<Vec<OperatorZone>>,
    fail_closed: bool,
    issuance: Arc<Issuance>,
}

/// What the installation lets Certs ask for besides public certificates, as admission checks it.
#[derive(Clone, Debug, Default)]
pub struct Issuance {
    /// Export into Secrets is enabled (`--export-secrets`).
    pub export_secrets: bool,
    /// The private CAs Certs may name (`--certificate-authorities`).
    pub certificate_authorities: Vec<String>,
    /// ACM's region, when the process is given one (`--aws-region`): a private CA elsewhere is
    /// refused.
    pub region: Option<String>,
}

/// The route, with a watch of every Cert feeding the domain index (started here, on the
/// current runtime; it ends with the process), over the process's mappings.
pub fn router(client: Client, identities: Arc<Identities>, operator_zones: &ZoneRegistry, fail_closed: bool, issuance: Issuance) -> Router {
    let (certs, writer) = reflector::store();
    let watch = watcher(Api::<Cert>::all(client), watcher::Config::default().any_semantic()).default_backoff().reflect(writer).for_each(
        |event| async move {
            if let Err(error) = event {
                warn!(%error, "watching Certs for the webhook's domain index");
            }
        },
    );
    tokio::spawn(watch);
    let operator_zones = operator_zones.operator_zones();
    let validator = Validator { certs, identities, operator_zones: Arc::new(operator_zones), fail_closed, issuance: Arc::new(issuance) };
    Router::new().route(PATH, post(review)).with_state(validator)
}

async fn review(State(validator): State<Validator>, Json(review): Json<AdmissionReview<Cert>>) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<Cert> = match review.try_into() {
        Ok(request) => request,
        Err(error) => return Json(AdmissionResponse::invalid(error.to_string()).into_review()),
    };
    let response = AdmissionResponse::from(&request);
    let Some(cert) = request.object else {
        return Json(response.into_review());
    };
    let namespace = request.namespace.clone().or_else(|| cert.metadata.namespace.clone()).unwrap_or_default();
    let ready = tokio::time::timeout(INDEX_WAIT, validator.certs.wait_until_ready()).await;
    let mappings = validator.identities.all().await;
    let mut problems = match (ready, mappings) {
        (Ok(Ok(())), Some(mappings)) => {
            let mappings: Vec<&AwsIdentity> = mappings.iter().map(AsRef::as_ref).collect();
            let settings = validator.identities.settings();
            let zones_of = |namespace: &str| {
                blockwork_identity::grant::grant(namespace, &mappings, settings, &validator.operator_zones)
                    .map(|grant| crate::account::registry(&grant))
            };
            match zones_of(&namespace) {
                Ok(zones) => {
                    let all: Vec<Cert> = validator.certs.state().iter().map(|c| (**c).clone()).collect();
                    let index = FqdnIndex::from_certs(&all, |namespace| zones_of(namespace).ok());
                    let mut problems = validate(&cert.spec, &zones, cert.metadata.uid.as_deref(), &index);
                    // The account a mapped namespace acts in is its role's; the operator's own is
                    // not known here (the controller checks it before any write).
                    let grant = blockwork_identity::grant::grant(&namespace, &mappings, settings, &validator.operator_zones).ok();
                    let role = grant.as_ref().and_then(|grant| grant.principal.role());
                    let account = role.and_then(|role| blockwork_aws::principal::account_of_arn(&role.arn));
                    problems.extend(crate::adoption::admission_problem(&cert.spec, validator.issuance.region.as_deref(), account));
                    problems
                }
                Err(refusal) => vec![refusal.to_string()],
            }
        }
        _ => vec![
            "the webhook has not read the Certs and AwsIdentities yet, so a duplicate domain or the namespace's grant cannot be checked; retry in a few seconds"
                .to_owned(),
        ],
    };
    problems.extend(export::template_problems(&cert.spec));
    if let Some(authority) = &cert.spec.certificate_authority_arn
        && let Err(refusal) =
            crate::authority::check(authority, &validator.issuance.certificate_authorities, validator.issuance.region.as_deref())
    {
        problems.push(format!("spec.certificateAuthorityArn: {}", refusal.message));
    }
    let old = request.old_object.as_ref().map(|old| &old.spec);
    let warnings = export::warnings(old, &cert.spec, validator.issuance.export_secrets);
    let mut response = verdict(response, &mut problems, validator.fail_closed, &cert.name_any());
    if response.allowed && !warnings.is_empty() {
        response.warnings.get_or_insert_with(Vec::new).extend(warnings);
    }
    Json(response.into_review())
}

/// Denies with every problem (fail closed), or allows with them as warnings.
fn verdict(response: AdmissionResponse, problems: &mut Vec<String>, fail_closed: bool, name: &str) -> AdmissionResponse {
    if problems.is_empty() {
        return response;
    }
    if fail_closed {
        response.deny(format!("Cert {name}: {}", problems.join("; ")))
    } else {
        let mut allowed = response;
        allowed.warnings = Some(std::mem::take(problems));
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_covers_create_and_update_of_certs() {
        let webhook = validating_webhook();
        let rule = &webhook.rules.expect("rules")[0];
        assert_eq!(rule.resources, Some(vec!["certs".to_owned()]));
        assert_eq!(rule.operations, Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]));
        assert_eq!(webhook.client_config.service.and_then(|s| s.path).as_deref(), Some(PATH));
        assert_eq!(webhook.side_effects, "None");
    }

    #[test]
    fn problems_deny_when_fail_closed_and_warn_otherwise() {
        let denied = verdict(AdmissionResponse::invalid("x"), &mut vec!["bad".into()], true, "c");
        assert!(!denied.allowed);
        assert!(denied.result.message.contains("Cert c: bad"), "{}", denied.result.message);
        let mut allowed = AdmissionResponse::invalid("x");
        allowed.allowed = true;
        let warned = verdict(allowed, &mut vec!["bad".into()], false, "c");
        assert!(warned.allowed);
        assert_eq!(warned.warnings, Some(vec!["bad".to_owned()]));
    }
}
