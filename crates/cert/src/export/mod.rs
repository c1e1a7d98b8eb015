//! Certificates inside the cluster (issue 30, ADR 0016): a Cert with `spec.export` gets its
//! certificate, chain and private key in a `kubernetes.io/tls` Secret of its namespace, written
//! once ACM has issued it and again after each renewal, repaired per the drift policy, never
//! over a Secret that is not its own.
//!
//! - [`material`]: what ExportCertificate returned, checked (the key is the certificate's) and
//!   laid out as `tls.crt`, `tls.key`, `ca.crt`; and a Secret read back, checked the same way.
//! - [`secret`]: the Secret's format, labels and annotations, and whose a Secret is.
//! - [`plan`]: whether a look writes it, and why. Pure.
//! - This module: reading, writing and deleting the Secret, the calls behind `plan`'s decisions.
//!   [`watch`]: the exported Secrets' changes wake their Certs.
//!
//! The key exists unencrypted only in this process's memory between the export and the write
//! (zeroed when dropped, as far as the Kubernetes client's own buffers allow) and in the Secret.
//! Nothing else carries it: not the status (which records the serial and expiry), not an event,
//! log line, metric or error message (those name what is wrong, never the material).

pub mod admission;
pub mod look;
pub mod material;
pub mod metrics;
pub mod plan;
pub mod secret;
pub mod watch;

use blockwork_runtime::ExternalError;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};

use self::material::Material;
use self::plan::Seen;
use crate::api::{Cert, ExportSpec};

/// Field manager of the Secret's writes.
pub const FIELD_MANAGER: &str = "blockwork-cert";

fn kube_error(action: &str, name: &str, error: &kube::Error) -> ExternalError {
    // The API server's message names the object and the reason, never its data.
    ExternalError::retryable("SecretWriteFailed", format!("{action} the Secret {name} failed: {error}"))
}

fn api(client: &Client, cert: &Cert) -> Api<Secret> {
    Api::namespaced(client.clone(), &cert.namespace().unwrap_or_default())
}

/// The Secret `name` of the Cert's namespace, if there is one.
pub async fn read(client: &Client, cert: &Cert, name: &str) -> Result<Option<Secret>, ExternalError> {
    api(client, cert).get_opt(name).await.map_err(|e| kube_error("reading", name, &e))
}

/// What a look sees of the Secret for the export of `arn`.
pub fn seen(cert: &Cert, export: &ExportSpec, arn: &str, found: &Secret) -> Seen {
    let [certificates, key, ca] = secret::contents(found);
    let content = Material::check(certificates, key, ca);
    let metadata_intact = match &content {
        Ok(facts) => secret::metadata_intact(found, &secret::metadata(cert, export, arn, facts)),
        Err(_) => false,
    };
    Seen {
        owner: secret::owner(found, &cert.uid().unwrap_or_default()),
        resource_version: found.resource_version().unwrap_or_default(),
        content,
        metadata_intact,
        certificate_arn: found.annotations().get(secret::ANNOTATION_CERTIFICATE_ARN).cloned(),
    }
}

/// Writes `desired`: created when `existing` is `None` (a Secret created meanwhile by someone
/// else makes it fail: never overwritten), else applied over the Secret read at resourceVersion
/// `existing` (changed meanwhile: it fails, and the next look decides again). Returns the new
/// resourceVersion.
pub async fn write(client: &Client, cert: &Cert, desired: &Secret, existing: Option<&str>) -> Result<String, ExternalError> {
    let name = desired.name_any();
    let api = api(client, cert);
    let written = match existing {
        None => {
            let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
            api.create(&params, desired).await
        }
        Some(version) => {
            let mut desired = desired.clone();
            desired.metadata.resource_version = Some(version.to_owned());
            let patch = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": desired.metadata,
                "type": desired.type_,
                "data": desired.data,
            });
            let mut patch = patch;
            let written = api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await;
            look::forget(&mut patch["data"]);
            secret::forget_data(&mut desired);
            written
        }
    };
    match written {
        Ok(secret) => Ok(secret.resource_version().unwrap_or_default()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(ExternalError::retryable(
            "SecretChanged",
            format!("the Secret {name} was created or changed by someone else while it was exported; the next look decides again"),
        )),
        Err(error) => Err(kube_error("writing", &name, &error)),
    }
}

/// Deletes the Secret `name` if it is this Cert's.
pub async fn delete_own(client: &Client, cert: &Cert, name: &str) -> Result<(), ExternalError> {
    let Some(found) = read(client, cert, name).await? else { return Ok(()) };
    if secret::owner(&found, &cert.uid().unwrap_or_default()) != secret::Owner::This {
        return Ok(());
    }
    let precondition = kube::api::Preconditions { uid: found.uid(), resource_version: found.resource_version() };
    match api(client, cert).delete(name, &DeleteParams { preconditions: Some(precondition), ..DeleteParams::default() }).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(kube_error("deleting", name, &error)),
    }
}
