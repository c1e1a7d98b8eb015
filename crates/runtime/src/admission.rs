//! The registration every validating webhook of Blockwork shares: CREATE and UPDATE of one
//! resource, served at a path of the webhook server, with no side effects and a short timeout
//! (the API server waits for it on each write). `blockwork webhooks` fills in the service and
//! the caBundle.

use k8s_openapi::api::admissionregistration::v1::{RuleWithOperations, ServiceReference, ValidatingWebhook, WebhookClientConfig};

/// Whether the resource lives in namespaces or cluster-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
        }
    }
}

/// The registration for `resource` (plural) of `group`/`version`, served at `path`; named
/// `<resource>.<group>`.
pub fn validating_webhook(group: &str, version: &str, resource: &str, scope: Scope, path: &str) -> ValidatingWebhook {
    ValidatingWebhook {
        name: format!("{resource}.{group}"),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            scope: Some(scope.as_str().to_owned()),
        }]),
        client_config: WebhookClientConfig {
            service: Some(ServiceReference { path: Some(path.to_owned()), ..Default::default() }),
            ..Default::default()
        },
        admission_review_versions: vec!["v1".to_owned()],
        side_effects: "None".to_owned(),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_names_the_resource_in_its_group_and_validates_creates_and_updates() {
        let webhook = validating_webhook("blockwork.dev", "v1alpha1", "certs", Scope::Namespaced, "/validate/cert");
        assert_eq!(webhook.name, "certs.blockwork.dev");
        let rules = webhook.rules.unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].operations, Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]));
        assert_eq!(rules[0].resources, Some(vec!["certs".to_owned()]));
        assert_eq!(rules[0].scope.as_deref(), Some("Namespaced"));
        let path = webhook.client_config.service.and_then(|service| service.path);
        assert_eq!(path.as_deref(), Some("/validate/cert"));
        assert_eq!(webhook.side_effects, "None");
    }

    #[test]
    fn a_cluster_scoped_resource_is_registered_as_such() {
        let webhook = validating_webhook("blockwork.dev", "v1alpha1", "awsidentities", Scope::Cluster, "/validate/awsidentity");
        assert_eq!(webhook.rules.unwrap_or_default()[0].scope.as_deref(), Some("Cluster"));
    }
}
