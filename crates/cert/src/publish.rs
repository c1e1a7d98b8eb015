//! Publishes a Ready certificate's ARN for its consumers (the leak seed 000 regrets): a
//! ConfigMap `<cert-name>-certificate` in the Cert's namespace with `certificateArn`,
//! `domainName` and `expirationDate`, owned by the Cert (garbage-collected with it) and labelled
//! `app.kubernetes.io/managed-by=blockwork`. It is written after each reconcile that finds the
//! certificate Ready (only when its content differs: a Ready certificate costs one GET per
//! hour), so a renewal or a new certificate updates it; the finalizer deletes it too, for
//! clusters without a garbage collector.
//!
//! A write never outlives the Cert: one made from a reconcile that began before the Cert's
//! deletion — another process of the operator draining its reconciles after SIGTERM while the
//! new one releases the Cert (a rolling update without leader election), issue 37's two
//! ConfigMaps left behind by deleted Certs — reads the Cert back and takes the ConfigMap away
//! again when the Cert is being deleted or gone. The release deletes the ConfigMap before the
//! finalizer goes, so either the release sees the write, or the write's read sees the deletion.

use std::collections::BTreeMap;

use blockwork_runtime::labels::{MANAGED_BY, MANAGED_BY_LABEL, is_managed};
use blockwork_runtime::{Existence, ExternalError};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};

use crate::api::{Cert, CertObservation};

/// The ConfigMap's keys.
pub const KEY_ARN: &str = "certificateArn";
pub const KEY_DOMAIN: &str = "domainName";
pub const KEY_EXPIRATION: &str = "expirationDate";
/// Server-side-apply field manager of the ConfigMap.
const FIELD_MANAGER: &str = "blockwork-cert";
const SUFFIX: &str = "-certificate";
/// The longest object name Kubernetes allows (a DNS subdomain).
const MAX_NAME: usize = 253;

/// `<cert-name>-certificate`, or `None` when that would be longer than a name may be.
pub fn configmap_name(cert_name: &str) -> Option<String> {
    (cert_name.len() + SUFFIX.len() <= MAX_NAME).then(|| format!("{cert_name}{SUFFIX}"))
}

/// The data published for a certificate: `None` until it has an ARN.
pub fn data(observation: &CertObservation) -> Option<BTreeMap<String, String>> {
    let arn = observation.certificate_arn.as_ref()?;
    let mut data = BTreeMap::from([(KEY_ARN.to_owned(), arn.clone())]);
    if let Some(domain) = &observation.domain_name {
        data.insert(KEY_DOMAIN.to_owned(), domain.clone());
    }
    if let Some(expiration) = &observation.expiration_date {
        data.insert(KEY_EXPIRATION.to_owned(), expiration.0.to_string());
    }
    Some(data)
}

/// The ConfigMap for `cert`, owned by it: `None` when there is nothing to publish yet.
pub fn configmap(cert: &Cert, observation: &CertObservation) -> Result<Option<ConfigMap>, ExternalError> {
    let Some(data) = data(observation) else { return Ok(None) };
    let name = configmap_name(&cert.name_any()).ok_or_else(|| {
        ExternalError::terminal("NameTooLong", format!("the ConfigMap name {}{SUFFIX} would exceed {MAX_NAME} characters", cert.name_any()))
    })?;
    let owner = cert.controller_owner_ref(&()).ok_or_else(|| ExternalError::terminal("MissingMetadata", "the Cert has no UID"))?;
    Ok(Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cert.namespace(),
            labels: Some(BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())])),
            owner_references: Some(vec![OwnerReference { block_owner_deletion: Some(true), ..owner }]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }))
}

/// Whether `existing` belongs to the Cert with `uid`.
pub fn owned_by(existing: &ConfigMap, uid: &str) -> bool {
    existing.owner_references().iter().any(|r| r.uid == uid && r.controller == Some(true))
}

fn kube_error(action: &str, name: &str, error: &kube::Error) -> ExternalError {
    ExternalError::retryable("ConfigMapFailed", format!("{action} the ConfigMap {name} failed: {error}"))
}

/// Writes the ConfigMap unless it already says the same. A ConfigMap of that name that is not
/// this Cert's is left alone, and the Cert says so.
pub async fn publish(client: &Client, cert: &Cert, observation: &CertObservation) -> Result<(), ExternalError> {
    let Some(desired) = configmap(cert, observation)? else { return Ok(()) };
    let name = desired.name_any();
    let uid = cert.uid().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cert.namespace().unwrap_or_default());
    let existing = api.get_opt(&name).await.map_err(|e| kube_error("reading", &name, &e))?;
    if let Some(existing) = &existing {
        if !owned_by(existing, &uid) {
            return Err(ExternalError::terminal(
                "ConfigMapConflict",
                format!("the ConfigMap {name} exists and does not belong to this Cert; the certificate ARN is not published there"),
            ));
        }
        let labelled = is_managed(existing.labels());
        if labelled && existing.data == desired.data {
            return Ok(());
        }
    }
    let patch = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": desired.metadata,
        "data": desired.data,
    });
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(|e| kube_error("writing", &name, &e))?;
    if !live(client, cert).await? {
        return unpublish(client, cert).await;
    }
    Ok(())
}

/// Whether the Cert (this very object, by UID) still exists and is not being deleted.
async fn live(client: &Client, cert: &Cert) -> Result<bool, ExternalError> {
    let certs: Api<Cert> = Api::namespaced(client.clone(), &cert.namespace().unwrap_or_default());
    let now = certs.get_opt(&cert.name_any()).await.map_err(|e| kube_error("reading the Cert of", &cert.name_any(), &e))?;
    Ok(now.is_some_and(|now| now.uid() == cert.uid() && now.metadata.deletion_timestamp.is_none()))
}

/// Deletes the Cert's ConfigMap, if it has one (and it is the Cert's).
pub async fn unpublish(client: &Client, cert: &Cert) -> Result<(), ExternalError> {
    let Some(name) = configmap_name(&cert.name_any()) else { return Ok(()) };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cert.namespace().unwrap_or_default());
    let Some(existing) = api.get_opt(&name).await.map_err(|e| kube_error("reading", &name, &e))? else { return Ok(()) };
    if !owned_by(&existing, &cert.uid().unwrap_or_default()) {
        return Ok(());
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(error) if Existence::of_kube(&error) == Existence::Gone => Ok(()),
        Err(error) => Err(kube_error("deleting", &name, &error)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::CertSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cert(name: &str) -> Cert {
        let mut cert = Cert::new(name, CertSpec { service_name: "api".into(), environment: "prod".into(), ..CertSpec::default() });
        cert.metadata.namespace = Some("team".into());
        cert.metadata.uid = Some("uid-1".into());
        cert
    }

    #[test]
    fn nothing_is_published_before_the_certificate_has_an_arn() {
        assert_eq!(configmap(&cert("api"), &CertObservation::default()).unwrap(), None);
    }

    #[test]
    fn the_configmap_is_named_after_the_cert_owned_by_it_and_carries_arn_domain_and_expiry() {
        let observation = CertObservation {
            certificate_arn: Some("arn:aws:acm:us-east-1:123456789012:certificate/abc".into()),
            domain_name: Some("api-prod.example.com".into()),
            expiration_date: Some(Time("2027-01-02T03:04:05Z".parse().unwrap())),
            ..CertObservation::default()
        };
        let map = configmap(&cert("api"), &observation).unwrap().unwrap();
        assert_eq!(map.metadata.name.as_deref(), Some("api-certificate"));
        assert_eq!(map.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(map.labels().get(MANAGED_BY_LABEL).map(String::as_str), Some("blockwork"));
        let owner = &map.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Cert", "api", "uid-1"));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
        assert!(owned_by(&map, "uid-1") && !owned_by(&map, "uid-2"));
        let data = map.data.unwrap();
        assert_eq!(data[KEY_ARN], "arn:aws:acm:us-east-1:123456789012:certificate/abc");
        assert_eq!(data[KEY_DOMAIN], "api-prod.example.com");
        assert_eq!(data[KEY_EXPIRATION], "2027-01-02T03:04:05Z");
    }

    #[test]
    fn a_name_too_long_for_the_suffix_is_refused() {
        assert_eq!(configmap_name(&"a".repeat(242)), None);
        assert_eq!(configmap_name(&"a".repeat(241)).map(|n| n.len()), Some(253));
        let observation = CertObservation { certificate_arn: Some("arn".into()), ..CertObservation::default() };
        assert_eq!(configmap(&cert(&"a".repeat(250)), &observation).unwrap_err().reason, "NameTooLong");
    }
}
