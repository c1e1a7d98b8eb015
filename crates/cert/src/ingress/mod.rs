//! The `ingress` controller: an Ingress names its Certs and the AWS Load Balancer Controller gets
//! their certificates, with no ARN copied by hand (ADR 0022, docs/composing.md).
//!
//! - `blockwork.dev/certificates: a,b` writes `alb.ingress.kubernetes.io/certificate-arn` with
//!   the Certs' ARNs (comma-separated, in order: the first is the listener's default) once every
//!   one is Ready, follows a Cert that replaces its certificate, and removes the value when the
//!   annotation goes. Blockwork writes the annotation by server-side apply under a field manager
//!   of its own ([`FIELD_MANAGER`]), never forced: a value someone else set (another field
//!   manager owns it) is not overwritten — a Warning event says so — and removing only ever
//!   removes what Blockwork wrote.
//! - `blockwork.dev/certificate-from-hosts: "true"` makes one Cert for the Ingress's TLS hosts
//!   (cert-manager's ingress-shim, for ACM): named after the Ingress, owned by it (the garbage
//!   collector deletes it with the Ingress, and its certificate goes with it), and named on the
//!   load balancer like the others. Only where the namespace's AwsIdentity grants the hosts (the
//!   Cert's own rules): otherwise nothing is made and a Warning event on the Ingress says why.
//! - Annotations follow Blockwork's rule: a value that is not documented, or a `blockwork.dev/`
//!   key this controller does not read, is a Warning event naming the accepted ones, and nothing
//!   is done to that Ingress until it is fixed.
//!
//! An Ingress that uses a Cert holds it: the Cert is not deleted while the Ingress names it or
//! its load balancer lists one of its certificates (`crate::users`). The decisions are pure
//! ([`plan`], [`annotations`]); this file reads and writes.

pub mod annotations;
pub mod metrics;
pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use blockwork_identity::{Identities, OperatorZone};
use blockwork_runtime::events::Publisher;
use blockwork_runtime::namespaces::{self, Namespaces, run_in};
use blockwork_runtime::rbac::rule;
use blockwork_runtime::watches::on_its_own;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as RunConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Predicate as _;
use kube::runtime::{WatchStreamExt as _, predicates, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::warn;

use crate::api::Cert;
use annotations::{ALB_CERTIFICATE_ARN, Asked};
use metrics::{IngressMetrics, Outcome};
use plan::Annotation;

/// The controller's name: `--controllers` entry, event reporter.
pub const CONTROLLER: &str = "ingress";
/// The field manager of what Blockwork writes on Ingresses and of the Certs it makes for them.
pub const FIELD_MANAGER: &str = "blockwork-ingress";

/// Looks again this long after an Ingress settled (its and its Certs' changes come sooner).
const SETTLED: Duration = Duration::from_secs(3600);
/// Looks again this long after a failure.
const RETRY: Duration = Duration::from_secs(30);
/// Looks again this long while a Cert is awaited: its change wakes the Ingress sooner.
const WAITING: Duration = Duration::from_secs(300);

/// The cluster permissions of the Ingress controller, granted only when it is enabled at install
/// (the chart's `controllers.ingress.enabled`): Ingresses read and patched (one annotation, by
/// server-side apply); Certs read, and made, changed and deleted for `certificate-from-hosts`
/// (only the one named after the Ingress and owned by it); the AwsIdentity mappings read (which
/// hosts a namespace may have certificates for). The Cert controller reads Ingresses with these
/// permissions when both run in one process (`crate::users`).
pub fn rbac() -> Vec<PolicyRule> {
    vec![
        rule("networking.k8s.io", &["ingresses"], &["get", "list", "watch", "patch"]),
        rule(crate::GROUP, &["certs"], &["get", "list", "watch", "create", "patch", "delete"]),
    ]
    .into_iter()
    .chain(blockwork_identity::read_rules())
    .collect()
}

/// What every reconcile of the controller shares.
struct Context {
    client: Client,
    events: Publisher,
    metrics: Arc<IngressMetrics>,
    identities: Arc<Identities>,
    /// What unmapped namespaces are granted (the Cert controller's `--dns-zones`).
    operator_zones: Vec<OperatorZone>,
}

/// Runs the controller over the Ingresses of `namespaces` until `shutdown` completes.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    identities: Arc<Identities>,
    operator_zones: Vec<OperatorZone>,
    metrics: Arc<IngressMetrics>,
    namespaces: Namespaces,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let events = Publisher::new(client.clone(), FIELD_MANAGER);
    let context = Arc::new(Context { events, metrics, client: client.clone(), identities, operator_zones });
    let shutdown = shutdown.boxed().shared();
    run_in(&namespaces, |scope| {
        let (context, shutdown) = (Arc::clone(&context), shutdown.clone());
        let (ingresses, certs) =
            (namespaces::api::<Ingress>(&client, scope.as_deref()), namespaces::api::<Cert>(&client, scope.as_deref()));
        async move {
            let (store, writer) = reflector::store();
            // Annotations and the spec (its TLS hosts): not the load balancer's status updates.
            let changes =
                watcher(ingresses, watcher::Config::default()).default_backoff().reflect(writer).applied_objects().predicate_filter(
                    (predicates::generation as fn(&Ingress) -> Option<u64>).combine(predicates::annotations as fn(&Ingress) -> Option<u64>),
                    Default::default(),
                );
            let naming = store.clone();
            let certs = watcher(certs, watcher::Config::default()).default_backoff().touched_objects();
            let run = Controller::for_stream(on_its_own(CONTROLLER, "Ingress", changes), store.clone())
                .watches_stream(on_its_own(CONTROLLER, "Cert", certs), move |cert: Cert| naming_ingresses(&naming, &cert))
                .with_config(RunConfig::default().concurrency(concurrency))
                .graceful_shutdown_on(shutdown.clone())
                .run(reconcile, error_policy, context)
                .for_each(|result| async move {
                    if let Err(error) = result {
                        warn!(%error, "ingress reconcile failed");
                    }
                });
            blockwork_runtime::shutdown::drive_until_shutdown(run, shutdown, store).await;
        }
    })
    .await;
}

/// The Ingresses of `cert`'s namespace that name it (or made it from their hosts).
fn naming_ingresses(ingresses: &Store<Ingress>, cert: &Cert) -> Vec<ObjectRef<Ingress>> {
    let namespace = cert.namespace();
    ingresses
        .state()
        .iter()
        .filter(|ingress| ingress.namespace() == namespace)
        .filter(|ingress| crate::users::ingress_use(ingress).names.iter().any(|name| *name == cert.name_any()))
        .map(|ingress| ObjectRef::from_obj(ingress.as_ref()))
        .collect()
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

fn error_policy(ingress: Arc<Ingress>, error: &Error, context: Arc<Context>) -> Action {
    warn!(ingress = %ObjectRef::from_obj(ingress.as_ref()), %error, "retrying");
    context.metrics.reconciled(Outcome::Error);
    Action::requeue(RETRY)
}

/// One look at an Ingress, counted by its outcome when it concerns Blockwork.
async fn reconcile(ingress: Arc<Ingress>, context: Arc<Context>) -> Result<Action, Error> {
    let (action, outcome) = look(&ingress, &context).await?;
    if let Some(outcome) = outcome {
        context.metrics.reconciled(outcome);
    }
    Ok(action)
}

async fn look(ingress: &Ingress, context: &Context) -> Result<(Action, Option<Outcome>), Error> {
    let asked = match annotations::read(ingress.annotations()) {
        Ok(asked) => asked,
        Err(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            let note = format!("{}; nothing is done for this Ingress until it is fixed", problems.join("; "));
            context.event(ingress, EventType::Warning, "InvalidAnnotation", &note).await;
            return Ok((Action::await_change(), Some(Outcome::Invalid)));
        }
    };
    let written = written(ingress);
    let namespace = ingress.namespace().unwrap_or_default();
    let certs: Api<Cert> = Api::namespaced(context.client.clone(), &namespace);
    let made = certs.get_opt(&ingress.name_any()).await?.filter(|cert| made_for(cert, ingress));
    if !asked.any() && written.is_none() && made.is_none() {
        return Ok((Action::await_change(), None));
    }
    let from_hosts = match asked.from_hosts {
        true => context.make_from_hosts(ingress, &certs, made.as_ref()).await?,
        false => {
            if let Some(made) = made {
                context.unmake(ingress, &certs, &made).await?;
            }
            None
        }
    };
    let mut named = Vec::new();
    for name in names(&asked, from_hosts.as_deref()) {
        let cert = certs.get_opt(&name).await?;
        named.push((name, plan::offer(cert.as_ref())));
    }
    let outcome = match plan::annotation(&named, written.as_deref()) {
        Annotation::Keep => Outcome::Unchanged,
        Annotation::Wait(waiting) => {
            let note = format!("{ALB_CERTIFICATE_ARN} is written once every Cert named is Ready: {}", waiting.join("; "));
            context.event(ingress, EventType::Normal, "WaitingForCerts", &note).await;
            return Ok((Action::requeue(WAITING), Some(Outcome::Waiting)));
        }
        Annotation::Write(value) => match context.apply(ingress, Some(&value)).await? {
            true => {
                let certs: Vec<&str> = named.iter().map(|(name, _)| name.as_str()).collect();
                let note = format!("{ALB_CERTIFICATE_ARN}: the certificates of {} Cert(s), {}", certs.len(), certs.join(", "));
                context.event(ingress, EventType::Normal, "CertificatesWritten", &note).await;
                Outcome::Written
            }
            false => Outcome::Conflict,
        },
        Annotation::Remove => match context.apply(ingress, None).await? {
            true => {
                let note = format!("{ALB_CERTIFICATE_ARN}: the value Blockwork wrote is removed (no Cert is named)");
                context.event(ingress, EventType::Normal, "CertificatesRemoved", &note).await;
                Outcome::Removed
            }
            false => Outcome::Conflict,
        },
    };
    Ok((Action::requeue(SETTLED), Some(outcome)))
}

/// The Certs whose ARNs go on the load balancer, in order: those the annotation names, then the
/// one made from the hosts.
pub fn names(asked: &Asked, from_hosts: Option<&str>) -> Vec<String> {
    let mut names = asked.certs.clone();
    if let Some(made) = from_hosts.filter(|made| !names.iter().any(|n| n == made)) {
        names.push(made.to_owned());
    }
    names
}

/// The load balancer's certificates as Blockwork wrote them: the annotation's value, when
/// Blockwork's field manager owns it.
pub fn written(ingress: &Ingress) -> Option<String> {
    let key = format!("f:{ALB_CERTIFICATE_ARN}");
    let owned = ingress.managed_fields().iter().any(|entry| {
        entry.manager.as_deref() == Some(FIELD_MANAGER)
            && entry.fields_v1.as_ref().is_some_and(|fields| fields.0["f:metadata"]["f:annotations"].get(&key).is_some())
    });
    owned.then(|| ingress.annotations().get(ALB_CERTIFICATE_ARN).cloned()).flatten()
}

/// Whether `cert` is the Cert Blockwork made from `ingress`'s hosts: it owns it.
pub fn made_for(cert: &Cert, ingress: &Ingress) -> bool {
    cert.owner_references().iter().any(|o| Some(&o.uid) == ingress.metadata.uid.as_ref() && o.controller == Some(true))
}

impl Context {
    async fn event(&self, ingress: &Ingress, type_: EventType, reason: &str, note: &str) {
        self.events.publish(&ingress.object_ref(&()), type_, reason, "Reconcile", note).await;
    }

    /// Writes (or, with `None`, removes) Blockwork's value of the load balancer's annotation, by
    /// server-side apply under [`FIELD_MANAGER`], not forced: a value another field manager owns
    /// is a conflict, told in a Warning event and not overwritten (`Ok(false)`).
    async fn apply(&self, ingress: &Ingress, value: Option<&str>) -> Result<bool, Error> {
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), &ingress.namespace().unwrap_or_default());
        let mut patch = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": ingress.name_any()}});
        if let Some(value) = value {
            patch["metadata"]["annotations"] = json!({ ALB_CERTIFICATE_ARN: value });
        }
        match api.patch(&ingress.name_any(), &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let note = format!(
                    "{ALB_CERTIFICATE_ARN} is set by someone else ({}): Blockwork does not overwrite it. Remove it from where it is set to let the Certs named in {} write it, or remove that annotation",
                    status.message,
                    annotations::CERTIFICATES
                );
                self.event(ingress, EventType::Warning, "AnnotationConflict", &note).await;
                Ok(false)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The Cert for the Ingress's TLS hosts, made or brought up to date (its name, once it is
    /// the Ingress's), or `None` with a Warning event saying why none is.
    async fn make_from_hosts(&self, ingress: &Ingress, certs: &Api<Cert>, made: Option<&Cert>) -> Result<Option<String>, Error> {
        let name = ingress.name_any();
        let refused = match plan::from_hosts(ingress) {
            Err(why) => Some(why),
            Ok(spec) => match self.granted(ingress, &spec).await {
                Err(why) => Some(why),
                Ok(()) if made.is_some_and(|made| made.spec == spec) => return Ok(Some(name)),
                Ok(()) => match certs.get_opt(&name).await? {
                    Some(other) if !made_for(&other, ingress) => Some(format!(
                        "a Cert named {name} exists that this Ingress did not make; it is left alone: delete or rename it, or name it in {} instead",
                        annotations::CERTIFICATES
                    )),
                    _ => self.apply_cert(ingress, certs, spec).await?.err(),
                },
            },
        };
        match refused {
            None => Ok(Some(name)),
            Some(why) => {
                let note = format!("{}: no Cert is made: {why}", annotations::FROM_HOSTS);
                self.event(ingress, EventType::Warning, "CertificateNotMade", &note).await;
                Ok(None)
            }
        }
    }

    /// Whether the namespace may have a certificate for the hosts: its AwsIdentity grants them
    /// (the Cert's own admission rules, which would refuse the Cert anyway).
    async fn granted(&self, ingress: &Ingress, spec: &crate::api::CertSpec) -> Result<(), String> {
        let namespace = ingress.namespace().unwrap_or_default();
        let grant = self.identities.grant(&namespace, &self.operator_zones).await.map_err(|refusal| refusal.to_string())?;
        crate::admission::admissible(spec, &crate::account::registry(&grant)).map(|_| ()).map_err(|problems| problems.join("; "))
    }

    /// Creates or updates the Ingress's Cert (server-side apply, owned by the Ingress); the API
    /// server's or the Cert webhook's refusal comes back as why.
    async fn apply_cert(&self, ingress: &Ingress, certs: &Api<Cert>, spec: crate::api::CertSpec) -> Result<Result<(), String>, Error> {
        let Some(owner) = ingress.controller_owner_ref(&()) else { return Ok(Err("the Ingress has no UID yet".to_owned())) };
        let mut cert = Cert::new(&ingress.name_any(), spec);
        cert.metadata.owner_references = Some(vec![OwnerReference { block_owner_deletion: Some(true), ..owner }]);
        cert.metadata.managed_fields = None;
        let mut patch = serde_json::to_value(&cert).map_err(kube::Error::SerdeError)?;
        patch["apiVersion"] = Cert::api_version(&()).into();
        patch["kind"] = Cert::kind(&()).into();
        match certs.patch(&ingress.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await {
            Ok(_) => {
                let note = format!("Cert {} for the Ingress's TLS hosts is made or brought up to date", ingress.name_any());
                self.event(ingress, EventType::Normal, "CertificateMade", &note).await;
                Ok(Ok(()))
            }
            Err(kube::Error::Api(status)) if status.code == 400 || status.code == 403 || status.code == 422 => Ok(Err(status.message)),
            Err(error) => Err(error.into()),
        }
    }

    /// `certificate-from-hosts` went: the Cert made for it goes too (held while the load
    /// balancer still lists its certificate, which this same look removes).
    async fn unmake(&self, ingress: &Ingress, certs: &Api<Cert>, made: &Cert) -> Result<(), Error> {
        match certs.delete(&made.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        let note =
            format!("Cert {} made from the Ingress's hosts is deleted: {} is no longer true", made.name_any(), annotations::FROM_HOSTS);
        self.event(ingress, EventType::Normal, "CertificateUnmade", &note).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn ingress(annotation: Option<&str>, manager: &str) -> Ingress {
        let mut ingress = Ingress::default();
        ingress.metadata.name = Some("web".into());
        if let Some(value) = annotation {
            ingress.metadata.annotations = Some([(ALB_CERTIFICATE_ARN.to_owned(), value.to_owned())].into());
        }
        let fields = json!({"f:metadata": {"f:annotations": {format!("f:{ALB_CERTIFICATE_ARN}"): {}}}});
        ingress.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(manager.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }]);
        ingress
    }

    #[test]
    fn only_a_value_blockwork_s_field_manager_owns_is_blockwork_s() {
        assert_eq!(written(&ingress(Some("arn:a"), FIELD_MANAGER)).as_deref(), Some("arn:a"));
        assert_eq!(written(&ingress(Some("arn:a"), "kubectl-client-side-apply")), None, "set by someone else");
        assert_eq!(written(&ingress(None, FIELD_MANAGER)), None);
    }

    #[test]
    fn the_cert_made_from_the_hosts_comes_after_the_named_ones_once() {
        let asked = Asked { certs: vec!["api".into(), "web".into()], from_hosts: true };
        assert_eq!(names(&asked, Some("web")), ["api", "web"]);
        assert_eq!(names(&Asked { certs: vec!["api".into()], from_hosts: true }, Some("web")), ["api", "web"]);
        assert_eq!(names(&asked, None), ["api", "web"]);
    }
}
