//! `blockwork remove-finalizers`: for uninstalling. Once the operator is stopped nothing would
//! remove its finalizers, and deleting the CRDs (or a namespace) would hang on every object that
//! still carries one. This releases them; the external resources are left as they are.

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::controllers::Controller;

/// The finalizer Blockwork puts on objects of `group` (the runtime's and every operator's).
pub fn finalizer_of(group: &str) -> String {
    format!("{group}/finalizer")
}

/// Removes Blockwork's finalizer from every object of the controllers' CRDs, in every
/// namespace. Returns how many objects were released. A CRD that is not installed is skipped.
pub async fn remove_all(client: &Client, controllers: &[Controller]) -> anyhow::Result<usize> {
    let mut released = 0;
    for crd in controllers.iter().flat_map(|c| (c.crds)()) {
        let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else { continue };
        let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let finalizer = finalizer_of(&crd.spec.group);
        let objects = match Api::<DynamicObject>::all_with(client.clone(), &resource).list(&ListParams::default()).await {
            Ok(objects) => objects,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", crd.spec.names.plural)),
        };
        for object in objects {
            let Some(index) = object.finalizers().iter().position(|f| *f == finalizer) else { continue };
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), &object.namespace().unwrap_or_default(), &resource);
            // `test` guards against removing another finalizer if the list changed meanwhile.
            let path = format!("/metadata/finalizers/{index}");
            let patch: json_patch::Patch =
                serde_json::from_value(json!([{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]))?;
            match api.patch(&object.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
                Ok(_) => released += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("removing the finalizer of {} {}", crd.spec.names.kind, object.name_any()));
                }
            }
        }
    }
    Ok(released)
}
