//! `retry`, `pause`, `resume` and `rotate`: each one annotation write, the documented way (see
//! `blockwork_runtime::policy`), so that `kubectl annotate` does the same.

use std::time::Duration;

use anyhow::{Context as _, bail};
use blockwork_cache::api::Cache;
use blockwork_cache::auth::ROTATE_ANNOTATION;
use blockwork_cert::Cert;
use blockwork_rotator::Keys;
use blockwork_runtime::policy::{PAUSED_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION};
use blockwork_tenant::DistributionTenant;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::read::KindArg;

/// The field manager of the CLI's writes.
pub const FIELD_MANAGER: &str = "blockwork-cli";

/// The merge patch that sets (`Some`) or removes (`None`) one annotation.
pub fn annotation_patch(key: &str, value: Option<&str>) -> serde_json::Value {
    json!({ "metadata": { "annotations": { key: value } } })
}

async fn patch<K>(client: &Client, namespace: &str, name: &str, body: &serde_json::Value) -> anyhow::Result<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    Api::<K>::namespaced(client.clone(), namespace)
        .patch(name, &params, &Patch::Merge(body))
        .await
        .with_context(|| format!("annotating {} {name}", K::kind(&())))
}

/// Annotations of the object, read to decide (paused? which source?).
async fn annotations(
    client: &Client,
    namespace: &str,
    kind: KindArg,
    name: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    macro_rules! read {
        ($k:ty) => {
            Api::<$k>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .with_context(|| format!("reading {} {name}", <$k>::kind(&())))?
                .annotations()
                .clone()
        };
    }
    Ok(match kind {
        KindArg::Cert => read!(Cert),
        KindArg::DistributionTenant => read!(DistributionTenant),
        KindArg::Ingress => bail!(NOT_FOR_INGRESSES),
        KindArg::Cache => read!(Cache),
        KindArg::Secret => read!(Secret),
    })
}

async fn annotate(client: &Client, namespace: &str, kind: KindArg, name: &str, body: &serde_json::Value) -> anyhow::Result<()> {
    match kind {
        KindArg::Cert => patch::<Cert>(client, namespace, name, body).await.map(drop),
        KindArg::DistributionTenant => patch::<DistributionTenant>(client, namespace, name, body).await.map(drop),
        KindArg::Ingress => bail!(NOT_FOR_INGRESSES),
        KindArg::Cache => patch::<Cache>(client, namespace, name, body).await.map(drop),
        KindArg::Secret => patch::<Secret>(client, namespace, name, body).await.map(drop),
    }
}

/// An Ingress has no state of Blockwork's to pause or retry.
const NOT_FOR_INGRESSES: &str = "the Ingress controller acts on an Ingress whenever it or a Cert it names changes, with no pause or retry of its own: change or remove its blockwork.dev/ annotations";

/// `pause` (`true`) or `resume` (`false`). The key rotator has no pause: it writes a target only
/// when its source changes, so there is nothing to hold.
pub async fn set_paused(client: &Client, namespace: &str, kind: KindArg, name: &str, paused: bool) -> anyhow::Result<String> {
    if kind == KindArg::Secret {
        bail!("the key rotator has no pause: it writes a target only when its source changes; remove the source's annotations to stop it");
    }
    let value = paused.then_some("true");
    annotate(client, namespace, kind, name, &annotation_patch(PAUSED_ANNOTATION, value)).await?;
    Ok(if paused {
        format!(
            "paused {}/{name}: nothing is reconciled, deletion included, until `blockwork resume`",
            crate::read::kind_name(kind).to_lowercase()
        )
    } else {
        format!("resumed {}/{name}: the controller reconciles it now", crate::read::kind_name(kind).to_lowercase())
    })
}

/// What `retry` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retried {
    /// The controller recorded the request in `status.lastHandledReconcileAt`.
    Handled { value: String },
    /// Requested; not (yet) acknowledged within the wait.
    Requested { value: String },
    /// A rotator source was annotated; Secrets have no status to acknowledge it.
    Source { name: String },
}

/// Requests a reconcile now with the backoff cleared: annotates `blockwork.dev/reconcile-requested-at`
/// with the time, then waits up to `wait` for the controller to record it as handled. A rotator
/// target's source (or the source itself) is annotated instead.
pub async fn retry(client: &Client, namespace: &str, kind: KindArg, name: &str, keys: &Keys, wait: Duration) -> anyhow::Result<Retried> {
    let current = annotations(client, namespace, kind, name).await?;
    let paused = current.get(PAUSED_ANNOTATION).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if paused {
        bail!("{name} is paused (blockwork.dev/paused): `blockwork resume` it first, which reconciles it at once");
    }
    let value = Timestamp::now().to_string();
    let body = annotation_patch(RECONCILE_REQUESTED_ANNOTATION, Some(&value));
    if kind == KindArg::Secret {
        let source = if keys.is_source(&current) {
            name.to_owned()
        } else {
            keys.claimed_by(&current).map(str::to_owned).with_context(|| format!("secret {name} is no rotator source and names none"))?
        };
        annotate(client, namespace, kind, &source, &body).await?;
        return Ok(Retried::Source { name: source });
    }
    annotate(client, namespace, kind, name, &body).await?;
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        if handled(client, namespace, kind, name).await?.as_deref() == Some(value.as_str()) {
            return Ok(Retried::Handled { value });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(Retried::Requested { value })
}

/// What `rotate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rotated {
    /// The controller started the rotation (`status.auth.lastHandledRotateAt`).
    Started { value: String },
    /// Requested; not (yet) taken within the wait.
    Requested { value: String },
}

/// Requests a rotation of a Cache's application password: annotates
/// `blockwork.dev/rotate-requested-at` with the time, then waits up to `wait` for the controller
/// to start it. Refused, saying why, when there is nothing Blockwork may rotate.
pub async fn rotate(client: &Client, namespace: &str, kind: KindArg, name: &str, wait: Duration) -> anyhow::Result<Rotated> {
    if kind != KindArg::Cache {
        bail!("only a Cache has a password to rotate (the key rotator rotates a Secret when its source is renewed)");
    }
    let api = Api::<Cache>::namespaced(client.clone(), namespace);
    let cache = api.get(name).await.with_context(|| format!("reading Cache {name}"))?;
    if cache.annotations().get(PAUSED_ANNOTATION).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        bail!("{name} is paused (blockwork.dev/paused): `blockwork resume` it first");
    }
    if let Some(secret) = cache.spec.auth.as_ref().and_then(|auth| auth.secret_ref.as_ref()) {
        bail!(
            "the password of cache/{name} is yours (spec.auth.secretRef {}): change it in that Secret, and it is rotated in",
            secret.name
        );
    }
    let authenticated = cache.status.as_ref().and_then(|status| status.auth.as_ref()).is_some_and(|auth| auth.user.is_some());
    if !authenticated {
        bail!("cache/{name} serves without a password (its Authenticated condition says why): there is nothing to rotate");
    }
    let value = Timestamp::now().to_string();
    annotate(client, namespace, kind, name, &annotation_patch(ROTATE_ANNOTATION, Some(&value))).await?;
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        let handled = api.get(name).await?.status.and_then(|s| s.auth).and_then(|a| a.last_handled_rotate_at);
        if handled.as_deref() == Some(value.as_str()) {
            return Ok(Rotated::Started { value });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(Rotated::Requested { value })
}

/// `status.lastHandledReconcileAt` as the object says now.
async fn handled(client: &Client, namespace: &str, kind: KindArg, name: &str) -> anyhow::Result<Option<String>> {
    Ok(match kind {
        KindArg::Cert => {
            Api::<Cert>::namespaced(client.clone(), namespace).get(name).await?.status.and_then(|s| s.last_handled_reconcile_at)
        }
        KindArg::DistributionTenant => Api::<DistributionTenant>::namespaced(client.clone(), namespace)
            .get(name)
            .await?
            .status
            .and_then(|s| s.last_handled_reconcile_at),
        KindArg::Ingress => None,
        KindArg::Cache => {
            Api::<Cache>::namespaced(client.clone(), namespace).get(name).await?.status.and_then(|s| s.last_handled_reconcile_at)
        }
        KindArg::Secret => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_is_set_or_removed_by_one_merge_patch() {
        assert_eq!(
            annotation_patch("blockwork.dev/paused", Some("true")),
            json!({"metadata": {"annotations": {"blockwork.dev/paused": "true"}}})
        );
        assert_eq!(annotation_patch("blockwork.dev/paused", None), json!({"metadata": {"annotations": {"blockwork.dev/paused": null}}}));
    }
}
