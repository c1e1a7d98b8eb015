//! Self-managed webhook certificates (`--webhook-certificate-secret`), for clusters without
//! cert-manager: the leader keeps a CA and a serving certificate in a Secret and the CA bundle in
//! the `caBundle` of the CRDs and the ValidatingWebhookConfiguration; every replica, leader or
//! not, serves the certificate the Secret holds.
//!
//! What the Secret should hold is decided by [`blockwork_webhook::authority::plan`]; this module
//! reads and writes. The leader publishes the Secret's bundle to every `caBundle` *before* it
//! plans the next write, so a new CA is trusted before a certificate it signed is served
//! (see the authority's module documentation).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use blockwork_webhook::ServingCertificate;
use blockwork_webhook::authority::{self, CA_BUNDLE, Plan, Policy};
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::cli::WebhookCertificateArgs;
use crate::controllers::Controller;
use crate::shutdown::Shutdown;

/// The field manager of the `caBundle` patches.
const FIELD_MANAGER: &str = "blockwork-webhook-certificates";
/// The leader looks at the Secret and the `caBundle`s at least this often (they can be edited
/// by hand, or re-created by a `helm upgrade`).
const RECHECK: Duration = Duration::from_secs(60);
/// After a failed step.
const RETRY: Duration = Duration::from_secs(5);
/// Shortest validity accepted: renewals come every two thirds of it.
const MIN_VALIDITY: Duration = Duration::from_secs(30);

/// Where the certificates live and what they certify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfManaged {
    pub namespace: String,
    pub secret: String,
    pub policy: Policy,
    /// The CRDs whose conversion webhook the server answers (of the selected controllers).
    pub crds: Vec<String>,
    /// The ValidatingWebhookConfiguration, if a selected controller has an admission webhook.
    pub webhook_configuration: Option<String>,
}

impl SelfManaged {
    /// `None` without `--webhook-certificate-secret`. `default_namespace` is the pod's.
    pub fn from_args(args: &WebhookCertificateArgs, controllers: &[Controller], default_namespace: &str) -> anyhow::Result<Option<Self>> {
        let Some(secret) = args.webhook_certificate_secret.clone().filter(|s| !s.is_empty()) else { return Ok(None) };
        if args.certificate_validity < MIN_VALIDITY {
            bail!("--webhook-certificate-validity must be at least {MIN_VALIDITY:?}, got {:?}", args.certificate_validity);
        }
        if args.ca_validity < args.certificate_validity {
            bail!(
                "--webhook-ca-validity ({:?}) must be at least --webhook-certificate-validity ({:?}): a certificate cannot outlive its CA",
                args.ca_validity,
                args.certificate_validity
            );
        }
        let namespace = args.service_namespace.clone().filter(|ns| !ns.is_empty()).unwrap_or_else(|| default_namespace.to_owned());
        let service = &args.service_name;
        let hosts = vec![format!("{service}.{namespace}.svc"), format!("{service}.{namespace}.svc.cluster.local")];
        Ok(Some(Self {
            policy: Policy { hosts, ca_validity: args.ca_validity, serving_validity: args.certificate_validity },
            crds: conversion_crds(controllers),
            webhook_configuration: has_admission_webhooks(controllers).then(|| args.configuration_name.clone()),
            namespace,
            secret,
        }))
    }
}

/// The names of the CRDs of `controllers` that convert through the webhook.
pub fn conversion_crds(controllers: &[Controller]) -> Vec<String> {
    let mut names: Vec<String> = controllers
        .iter()
        .flat_map(|c| (c.crds)())
        .filter(|crd| crd.spec.conversion.as_ref().is_some_and(|c| c.strategy == "Webhook"))
        .filter_map(|crd| crd.metadata.name)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether `controllers` serve any webhook (conversion or admission): else there is no server
/// and no certificate to manage.
pub fn has_webhooks(controllers: &[Controller]) -> bool {
    !conversion_crds(controllers).is_empty() || has_admission_webhooks(controllers)
}

pub fn has_admission_webhooks(controllers: &[Controller]) -> bool {
    controllers.iter().any(|c| !(c.webhooks.validating)().is_empty())
}

/// The rules of the Secret, granted in its namespace only. `create` cannot be limited to a name.
pub fn secret_rules(secret: &str) -> Vec<PolicyRule> {
    vec![
        named_rule("", "secrets", &["get", "list", "watch", "update"], &[secret.to_owned()]),
        blockwork_runtime::rbac::rule("", &["secrets"], &["create"]),
    ]
}

/// The rules of the `caBundle` patches, cluster-wide (CRDs and webhook configurations are
/// cluster-scoped), limited to the objects by name.
pub fn ca_injection_rules(crds: &[String], webhook_configuration: Option<&str>) -> Vec<PolicyRule> {
    let mut rules = Vec::new();
    if !crds.is_empty() {
        rules.push(named_rule("apiextensions.k8s.io", "customresourcedefinitions", &["get", "patch"], crds));
    }
    if let Some(name) = webhook_configuration {
        rules.push(named_rule("admissionregistration.k8s.io", "validatingwebhookconfigurations", &["get", "patch"], &[name.to_owned()]));
    }
    rules
}

fn named_rule(group: &str, resource: &str, verbs: &[&str], names: &[String]) -> PolicyRule {
    PolicyRule { resource_names: Some(names.to_vec()), ..blockwork_runtime::rbac::rule(group, &[resource], verbs) }
}

/// Every replica: presents the certificate in the Secret from the moment it appears, and each
/// renewal as soon as it is written. `loaded` is called after each certificate is presented.
pub async fn follow(client: Client, config: SelfManaged, certificate: Arc<ServingCertificate>, loaded: impl Fn(), shutdown: Shutdown) {
    let api: Api<Secret> = Api::namespaced(client, &config.namespace);
    let selector = watcher::Config::default().fields(&format!("metadata.name={}", config.secret));
    let mut secrets = std::pin::pin!(watcher(api, selector).default_backoff().applied_objects());
    loop {
        let secret = tokio::select! {
            () = shutdown.wait() => return,
            next = secrets.next() => match next {
                Some(Ok(secret)) => secret,
                Some(Err(e)) => {
                    warn!(error = %e, secret = %config.secret, "watching the webhook certificate Secret");
                    continue;
                }
                None => return,
            },
        };
        let Some(material) = authority::serving_material(&secret_data(&secret)) else {
            debug!(secret = %config.secret, "the webhook certificate Secret has no serving certificate yet");
            continue;
        };
        match certificate.replace(&material) {
            Ok(()) => {
                info!(secret = %config.secret, "serving the webhook certificate from the Secret");
                loaded();
            }
            Err(e) => {
                warn!(error = %e, secret = %config.secret, "the webhook certificate in the Secret is unusable; serving the current one")
            }
        }
    }
}

/// The leader: keeps the Secret and every `caBundle` current until `shutdown`. Errors are
/// logged and retried; returns `Ok` at shutdown.
pub async fn maintain(client: Client, config: SelfManaged, shutdown: Shutdown) -> anyhow::Result<()> {
    info!(secret = %config.secret, namespace = %config.namespace, crds = ?config.crds, webhook_configuration = ?config.webhook_configuration, "managing the webhook certificates");
    loop {
        let wait = match step(&client, &config).await {
            Ok(Step::Wrote) => Duration::ZERO,
            Ok(Step::Settled { next_check }) => {
                next_check.duration_since(SystemTime::now()).unwrap_or_default().clamp(Duration::from_secs(1), RECHECK)
            }
            Err(e) => {
                warn!(error = crate::telemetry::error_chain(&e), "webhook certificates: retrying in {RETRY:?}");
                RETRY
            }
        };
        tokio::select! {
            () = shutdown.wait() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

enum Step {
    Wrote,
    Settled { next_check: SystemTime },
}

/// Publishes the Secret's bundle, then writes the Secret once if the plan says so.
async fn step(client: &Client, config: &SelfManaged) -> anyhow::Result<Step> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let secret = secrets.get_opt(&config.secret).await.with_context(|| format!("reading Secret {}/{}", config.namespace, config.secret))?;
    let data = secret.as_ref().map(secret_data);
    if let Some(bundle) = data.as_ref().and_then(|d| d.get(CA_BUNDLE)).filter(|b| !b.is_empty()) {
        publish(client, config, bundle).await?;
    }
    match authority::plan(data.as_ref(), &config.policy, SystemTime::now())? {
        Plan::Keep { next_check } => Ok(Step::Settled { next_check }),
        Plan::Write { data, reason } => {
            let data: BTreeMap<String, ByteString> = data.into_iter().map(|(k, v)| (k, ByteString(v))).collect();
            match secret {
                Some(mut existing) => {
                    // Replaced with its resourceVersion: a concurrent writer makes this fail, not overwrite.
                    existing.data = Some(data);
                    secrets
                        .replace(&config.secret, &PostParams::default(), &existing)
                        .await
                        .context("updating the webhook certificate Secret")?;
                }
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(config.secret.clone()),
                            labels: Some(
                                [(blockwork_runtime::MANAGED_BY_LABEL.to_owned(), blockwork_runtime::MANAGED_BY.to_owned())].into(),
                            ),
                            ..ObjectMeta::default()
                        },
                        // Opaque: a `kubernetes.io/tls` Secret must hold a serving certificate
                        // from the start, and the CA comes first.
                        type_: Some("Opaque".to_owned()),
                        data: Some(data),
                        ..Secret::default()
                    };
                    secrets.create(&PostParams::default(), &secret).await.context("creating the webhook certificate Secret")?;
                }
            }
            info!(secret = %config.secret, %reason, "webhook certificates written");
            Ok(Step::Wrote)
        }
    }
}

fn secret_data(secret: &Secret) -> authority::Data {
    secret.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

/// Sets `bundle` as the `caBundle` of every CRD and webhook of `config` whose differs.
async fn publish(client: &Client, config: &SelfManaged, bundle: &[u8]) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &config.crds {
        let Some(crd) = crds.get_opt(name).await.with_context(|| format!("reading CRD {name}"))? else {
            debug!(crd = %name, "CRD not installed; no caBundle to set");
            continue;
        };
        let Some(webhook) = crd.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook").and_then(|c| c.webhook.as_ref()) else {
            continue;
        };
        if webhook.client_config.as_ref().and_then(|c| c.ca_bundle.as_ref()).is_some_and(|b| b.0 == bundle) {
            continue;
        }
        let patch = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": name },
            "spec": { "conversion": { "strategy": "Webhook", "webhook": { "clientConfig": { "caBundle": ByteString(bundle.to_vec()) } } } },
        });
        crds.patch(name, &params, &Patch::Apply(patch)).await.with_context(|| format!("setting the caBundle of CRD {name}"))?;
        info!(crd = %name, "caBundle updated");
    }
    let Some(name) = &config.webhook_configuration else { return Ok(()) };
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let Some(configuration) =
        configurations.get_opt(name).await.with_context(|| format!("reading ValidatingWebhookConfiguration {name}"))?
    else {
        debug!(configuration = %name, "ValidatingWebhookConfiguration not installed; no caBundle to set");
        return Ok(());
    };
    let webhooks = configuration.webhooks.unwrap_or_default();
    if webhooks.iter().all(|w| w.client_config.ca_bundle.as_ref().is_some_and(|b| b.0 == bundle)) {
        return Ok(());
    }
    let entries: Vec<_> =
        webhooks.iter().map(|w| json!({ "name": w.name, "clientConfig": { "caBundle": ByteString(bundle.to_vec()) } })).collect();
    let patch = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": name },
        "webhooks": entries,
    });
    configurations
        .patch(name, &params, &Patch::Apply(patch))
        .await
        .with_context(|| format!("setting the caBundle of ValidatingWebhookConfiguration {name}"))?;
    info!(configuration = %name, "caBundle updated");
    Ok(())
}
