//! The exported Secrets' changes wake their Certs, so a Secret someone deleted or edited is seen
//! within seconds, not at the Cert's next look (hourly once Ready). A metadata-only watch of the
//! Secrets labelled with a Cert's UID ([`super::secret::LABEL_CERT_UID`]): the controller never
//! holds other Secrets, nor the exported ones' data, in memory. A change whose resourceVersion is
//! the one the Cert's status recorded is the Cert's own write and wakes nothing.

use std::sync::Arc;

use blockwork_runtime::Context;
use blockwork_runtime::namespaces::{self, Namespaces, run_in};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::ResourceExt as _;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt as _, watcher};
use tracing::warn;

use super::secret::LABEL_CERT_UID;
use crate::api::Cert;
use crate::external::CertManager;

/// Follows the exported Secrets of `namespaces` until the process stops.
pub async fn follow(context: Arc<Context<CertManager>>, client: Client, namespaces: Namespaces) {
    run_in(&namespaces, |scope| {
        let context = Arc::clone(&context);
        // A metadata-only list and watch: the Secrets' data never reaches this process here.
        let api = namespaces::api::<PartialObjectMeta<Secret>>(&client, scope.as_deref());
        async move {
            let config = watcher::Config::default().labels(LABEL_CERT_UID).any_semantic();
            watcher(api, config)
                .default_backoff()
                .touched_objects()
                .for_each(|changed| {
                    match changed {
                        Ok(secret) => wake(&context, &secret),
                        Err(error) => warn!(%error, "watching the exported Secrets; a Cert sees changes at its next look meanwhile"),
                    }
                    async {}
                })
                .await;
        }
    })
    .await;
}

/// Wakes the Cert whose Secret this is, unless the change is that Cert's own write.
fn wake(context: &Context<CertManager>, secret: &PartialObjectMeta<Secret>) {
    let Some(uid) = secret.labels().get(LABEL_CERT_UID) else { return };
    for cert in context.cached() {
        if cert.uid().as_deref() == Some(uid.as_str()) && !written_by(&cert, secret) {
            context.related_changed(&ObjectRef::from_obj(cert.as_ref()));
        }
    }
}

/// Whether the Secret is as the Cert last wrote it (by name and resourceVersion).
fn written_by(cert: &Cert, secret: &PartialObjectMeta<Secret>) -> bool {
    let recorded = cert.status.as_ref().and_then(|s| s.observation.export.as_ref());
    recorded.is_some_and(|r| {
        Some(&r.secret_name) == secret.metadata.name.as_ref() && secret.resource_version().as_deref() == Some(r.resource_version.as_str())
    })
}
