//! Where the API server reaches Blockwork's webhook server: the CRDs' conversion webhooks and
//! `blockwork webhooks`, the ValidatingWebhookConfiguration of the controllers' admission
//! webhooks. In a cluster, the `blockwork-webhook` Service with a cert-manager certificate; for a
//! local `blockwork run`, a URL and the CA that signed its certificate.

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1 as admission;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ObjectMeta;

use crate::cli::WebhookLocation;
use crate::controllers::Controller;

/// cert-manager's CA injector fills `caBundle` from this Certificate (`namespace/name`).
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// The webhook server, resolved from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Url { base: String, ca_bundle: Vec<u8> },
    Service { namespace: String, name: String },
}

impl Endpoint {
    pub fn from_location(location: &WebhookLocation) -> anyhow::Result<Self> {
        match (&location.webhook_url, &location.webhook_ca_file) {
            (Some(base), Some(ca_file)) => {
                let ca_bundle = std::fs::read(ca_file).with_context(|| format!("reading --webhook-ca-file {}", ca_file.display()))?;
                Ok(Self::Url { base: base.trim_end_matches('/').to_owned(), ca_bundle })
            }
            _ => Ok(Self::Service { namespace: location.webhook_service_namespace.clone(), name: location.webhook_service_name.clone() }),
        }
    }

    fn conversion_config(&self, path: Option<String>) -> apiextensions::WebhookClientConfig {
        match self {
            Self::Url { base, ca_bundle } => apiextensions::WebhookClientConfig {
                url: Some(format!("{base}{}", path.unwrap_or_default())),
                ca_bundle: Some(ByteString(ca_bundle.clone())),
                service: None,
            },
            Self::Service { namespace, name } => apiextensions::WebhookClientConfig {
                service: Some(apiextensions::ServiceReference { namespace: namespace.clone(), name: name.clone(), path, port: Some(443) }),
                ..Default::default()
            },
        }
    }

    fn admission_config(&self, path: Option<String>) -> admission::WebhookClientConfig {
        match self {
            Self::Url { base, ca_bundle } => admission::WebhookClientConfig {
                url: Some(format!("{base}{}", path.unwrap_or_default())),
                ca_bundle: Some(ByteString(ca_bundle.clone())),
                service: None,
            },
            Self::Service { namespace, name } => admission::WebhookClientConfig {
                service: Some(admission::ServiceReference { namespace: namespace.clone(), name: name.clone(), path, port: Some(443) }),
                ..Default::default()
            },
        }
    }

    /// The annotation that has cert-manager inject the CA, for the Service endpoint.
    fn inject_ca_annotation(&self) -> Option<(String, String)> {
        match self {
            Self::Url { .. } => None,
            Self::Service { namespace, name } => Some((INJECT_CA_FROM.to_owned(), format!("{namespace}/{name}"))),
        }
    }
}

/// Points every CRD that converts through a webhook at `endpoint`, keeping its path.
pub fn point_conversions(crds: &mut [CustomResourceDefinition], endpoint: &Endpoint) {
    for crd in crds {
        let Some(webhook) = crd.spec.conversion.as_mut().and_then(|c| c.webhook.as_mut()) else { continue };
        let path = webhook.client_config.as_ref().and_then(|c| c.service.as_ref()).and_then(|s| s.path.clone());
        webhook.client_config = Some(endpoint.conversion_config(path));
        if let Some((key, value)) = endpoint.inject_ca_annotation() {
            crd.metadata.annotations.get_or_insert_with(Default::default).insert(key, value);
        }
    }
}

/// The ValidatingWebhookConfiguration `blockwork` of `controllers`, or `None` if none has an
/// admission webhook.
pub fn configuration(
    controllers: &[Controller],
    endpoint: &Endpoint,
    fail_closed: bool,
) -> Option<admission::ValidatingWebhookConfiguration> {
    let webhooks: Vec<admission::ValidatingWebhook> = controllers
        .iter()
        .flat_map(|c| (c.webhooks.validating)())
        .map(|mut webhook| {
            let path = webhook.client_config.service.as_ref().and_then(|s| s.path.clone());
            webhook.client_config = endpoint.admission_config(path);
            webhook.failure_policy = Some(if fail_closed { "Fail" } else { "Ignore" }.to_owned());
            webhook
        })
        .collect();
    if webhooks.is_empty() {
        return None;
    }
    Some(admission::ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("blockwork".to_owned()),
            annotations: endpoint.inject_ca_annotation().map(|annotation| [annotation].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(webhooks),
    })
}

/// `blockwork webhooks`: prints the configuration as YAML, or nothing.
pub fn run(controllers: &[Controller], location: &WebhookLocation, fail_closed: bool) -> anyhow::Result<()> {
    let endpoint = Endpoint::from_location(location)?;
    if let Some(configuration) = configuration(controllers, &endpoint, fail_closed) {
        print!("{}", serde_saphyr::to_string(&configuration).context("serializing the ValidatingWebhookConfiguration")?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::Webhooks;

    fn service() -> Endpoint {
        Endpoint::Service { namespace: "ops".into(), name: "hooks".into() }
    }

    fn url() -> Endpoint {
        Endpoint::Url { base: "https://127.0.0.1:9443".into(), ca_bundle: b"CA".to_vec() }
    }

    fn validating(path: &str) -> Vec<admission::ValidatingWebhook> {
        vec![admission::ValidatingWebhook {
            name: "things.example.dev".into(),
            client_config: admission::WebhookClientConfig {
                service: Some(admission::ServiceReference { path: Some(path.into()), ..Default::default() }),
                ..Default::default()
            },
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            ..Default::default()
        }]
    }

    fn controller(validating: fn() -> Vec<admission::ValidatingWebhook>) -> Controller {
        Controller {
            name: "x",
            crds: Vec::new,
            rbac: Vec::new,
            opt_in_rbac: &[],
            webhooks: Webhooks { routes: |_| Ok(axum::Router::new()), validating },
            metrics_prefix: "blockwork_test",
            start: |_| crate::controllers::runnable(|_| async { Ok(()) }),
        }
    }

    #[test]
    fn no_admission_webhook_no_configuration() {
        assert_eq!(configuration(&[controller(Vec::new)], &service(), true), None);
    }

    #[test]
    fn a_local_server_is_reached_by_url_with_its_ca() {
        let config = configuration(&[controller(|| validating("/validate/thing"))], &url(), false).expect("one webhook");
        let webhook = &config.webhooks.expect("webhooks")[0];
        assert_eq!(webhook.client_config.url.as_deref(), Some("https://127.0.0.1:9443/validate/thing"));
        assert_eq!(webhook.client_config.ca_bundle, Some(ByteString(b"CA".to_vec())));
        assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));
        assert!(config.metadata.annotations.is_none());
    }

    #[test]
    fn in_a_cluster_the_service_is_used_and_cert_manager_injects_the_ca() {
        let config = configuration(&[controller(|| validating("/validate/thing"))], &service(), true).expect("one webhook");
        let webhook = &config.webhooks.expect("webhooks")[0];
        let service = webhook.client_config.service.as_ref().expect("service");
        assert_eq!((service.namespace.as_str(), service.name.as_str(), service.path.as_deref()), ("ops", "hooks", Some("/validate/thing")));
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(config.metadata.annotations.expect("annotations")[INJECT_CA_FROM], "ops/hooks");
    }

    #[test]
    fn conversion_webhooks_keep_their_path() {
        let mut crds = vec![blockwork_cache::crd::crd()];
        point_conversions(&mut crds, &url());
        let config =
            crds[0].spec.conversion.as_ref().and_then(|c| c.webhook.as_ref()).and_then(|w| w.client_config.as_ref()).expect("config");
        assert_eq!(config.url.as_deref(), Some("https://127.0.0.1:9443/convert/cache"));
        assert!(config.service.is_none());
    }
}
