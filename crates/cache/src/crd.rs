//! The multi-version CRD, with conversion by Blockwork's webhook.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

use crate::api::{v1alpha1, v1beta1};

/// Where the conversion webhook is served.
pub const CONVERSION_PATH: &str = "/convert/cache";

/// The CRD as installed in a cluster: the webhook reached through the `blockwork-webhook`
/// Service in `blockwork-system` (its `caBundle` is injected at deployment, e.g. by cert-manager).
pub fn crd() -> CustomResourceDefinition {
    crd_with_conversion(WebhookClientConfig {
        service: Some(ServiceReference {
            name: "blockwork-webhook".into(),
            namespace: "blockwork-system".into(),
            path: Some(CONVERSION_PATH.into()),
            port: Some(443),
        }),
        ..WebhookClientConfig::default()
    })
}

/// Both versions, v1beta1 stored, converted by the webhook at `client_config`.
pub fn crd_with_conversion(client_config: WebhookClientConfig) -> CustomResourceDefinition {
    #[allow(clippy::expect_used)]
    let mut crd = merge_crds(vec![v1alpha1::Cache::crd(), v1beta1::Cache::crd()], "v1beta1")
        .expect("both versions are generated from one group, kind and scope");
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion { client_config: Some(client_config), conversion_review_versions: vec!["v1".into()] }),
    });
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_json(version: &str) -> String {
        let crd = crd();
        let v = crd.spec.versions.iter().find(|v| v.name == version).expect("version present");
        serde_json::to_string(&v.schema).expect("serializes")
    }

    #[test]
    fn both_versions_are_served_and_v1beta1_is_stored() {
        let crd = crd();
        let mut versions: Vec<(String, bool, bool)> = crd.spec.versions.iter().map(|v| (v.name.clone(), v.served, v.storage)).collect();
        versions.sort();
        assert_eq!(versions, [("v1alpha1".into(), true, false), ("v1beta1".into(), true, true)]);
        assert_eq!(crd.spec.names.short_names, Some(vec!["ch".into()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["all".into()]));
    }

    #[test]
    fn schema_carries_the_seed_validation() {
        let schema = schema_json("v1beta1");
        for needle in [
            r#""pattern":"^\\d+(Mi|Gi)$""#,
            r#""minimum":1"#,
            r#""maximum":10"#,
            r#""default":"allkeys-lru""#,
            "tls.secretName requires tls.enabled",
            "at least 3 replicas",
            "memcached does not replicate",
        ] {
            assert!(schema.contains(needle), "{needle} missing from {schema}");
        }
        assert!(!schema_json("v1alpha1").contains("highAvailability"));
    }

    #[test]
    fn scale_subresource_points_at_replicas() {
        let crd = crd();
        let stored = crd.spec.versions.iter().find(|v| v.storage).expect("a stored version");
        let scale = stored.subresources.as_ref().and_then(|s| s.scale.clone()).expect("scale subresource");
        assert_eq!((scale.spec_replicas_path.as_str(), scale.status_replicas_path.as_str()), (".spec.replicas", ".status.readyReplicas"));
    }
}
