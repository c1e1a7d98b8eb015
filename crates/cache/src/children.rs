//! The Cache's own objects in the API server: applied with server-side apply (and only when they
//! change, see [`applied`]), deleted on cleanup. What to apply is decided by [`crate::build`].

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use blockwork_runtime::outcome::Existence;
use blockwork_runtime::trace;

use crate::api::Cache;
use crate::applied;
use crate::build::Desired;
use crate::shape;

/// The field manager of every write of the Cache controller.
pub const FIELD_MANAGER: &str = "blockwork-cache";

/// An owned object the API server did not take.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind} {name}: {}", describe(.error))]
pub struct ApplyFailed {
    action: &'static str,
    kind: String,
    name: String,
    pub error: kube::Error,
}

impl ApplyFailed {
    /// A 4xx other than a conflict, an expired resourceVersion (`410 Gone`) or throttling: the
    /// object as built is refused, and retrying the same object cannot help.
    pub fn is_refusal(&self) -> bool {
        matches!(&self.error, kube::Error::Api(status) if (400..500).contains(&status.code) && ![409, 410, 429].contains(&status.code))
    }
}

/// The API server's own message for its errors, which names the field; the error otherwise.
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Applies every owned object (and removes the PodDisruptionBudget a single replica does not
/// get, when `budget_may_exist`); the StatefulSet as the API server returned it. The
/// NetworkPolicy goes first: no pod of a new Cache runs before it is isolated.
pub async fn apply(
    client: &Client,
    namespace: &str,
    cache: &Cache,
    desired: Desired,
    budget_may_exist: bool,
) -> Result<StatefulSet, ApplyFailed> {
    let Desired { config_map, stateful_set, service, headless_service, pdb, network_policy } = desired;
    if let Some(network_policy) = network_policy {
        ssa(client, namespace, &network_policy).await?;
    }
    ssa(client, namespace, &config_map).await?;
    ssa(client, namespace, &service).await?;
    ssa(client, namespace, &headless_service).await?;
    let stateful_set = ssa(client, namespace, &stateful_set).await?;
    match pdb {
        Some(pdb) => {
            ssa(client, namespace, &pdb).await?;
        }
        None if budget_may_exist => {
            let name = shape::resource_name(cache);
            match Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace).delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(error) if Existence::of_kube(&error) == Existence::Gone => {}
                Err(error) => return Err(ApplyFailed { action: "deleting", kind: "PodDisruptionBudget".into(), name, error }),
            }
        }
        None => {}
    }
    Ok(stateful_set)
}

/// Deletes every owned object (there may be no garbage collector to do it), the NetworkPolicy
/// with `network_policies` (without, the operator may not touch one); the errors other than "not
/// found" (a child already gone is deleted), as text.
pub async fn delete(client: &Client, cache: &Cache, network_policies: bool) -> Vec<String> {
    let namespace = cache.namespace().unwrap_or_default();
    let name = shape::resource_name(cache);
    let params = DeleteParams::background();
    let mut results = vec![
        Api::<StatefulSet>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
        Api::<Service>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
        Api::<Service>::namespaced(client.clone(), &namespace).delete(&shape::headless_name(cache), &params).await.map(|_| ()),
        Api::<ConfigMap>::namespaced(client.clone(), &namespace).delete(&format!("{name}-config"), &params).await.map(|_| ()),
        Api::<PodDisruptionBudget>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()),
    ];
    if network_policies {
        results.push(Api::<NetworkPolicy>::namespaced(client.clone(), &namespace).delete(&name, &params).await.map(|_| ()));
    }
    results.into_iter().filter_map(Result::err).filter(|e| Existence::of_kube(e) != Existence::Gone).map(|e| e.to_string()).collect()
}

async fn ssa<K>(client: &Client, namespace: &str, object: &K) -> Result<K, ApplyFailed>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let failed = |error| ApplyFailed { action: "applying", kind: K::kind(&()).into_owned(), name: object.name_any(), error };
    let mut body = serde_json::to_value(object).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    applied::stamp(&mut body);
    // Nothing to change: no write (see `applied`).
    let live = api.get_opt(&object.name_any()).await.map_err(failed)?;
    if let Some(live) = live
        && applied::holds(&serde_json::to_value(&live).map_err(|e| failed(kube::Error::SerdeError(e)))?, &body)
    {
        return Ok(live);
    }
    let name = object.name_any();
    trace::kubernetes_write(
        "apply",
        "child",
        &K::kind(&()),
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)),
    )
    .await
    .map_err(failed)
}
