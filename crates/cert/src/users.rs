//! Who uses a Cert's certificate (ADR 0022): DistributionTenants that name it
//! (`spec.customizations.certificate.certRef`) or serve one of its certificates in CloudFront
//! (`status.certificateInUse`), and Ingresses that name it (`blockwork.dev/certificates`, or the
//! Cert made from their hosts) or list one of its certificates for their load balancer
//! (`alb.ingress.kubernetes.io/certificate-arn`, whoever wrote it). A Cert in use is not deleted,
//! nor is a certificate it replaced while someone still serves it: nothing in use is deleted from
//! under its user, and ACM's `ResourceInUseException` is never the first sign.
//!
//! The users are read from the users' own objects, through watches (a tenant by its spec and
//! status, untyped: the tenant crate depends on this one, not the other way round), never kept
//! beside them: after a restart, the first question waits until the watches have listed every
//! user, so a Cert being deleted is never released on an empty index. A change of a user wakes
//! the Certs of its namespace that wait for users (being deleted, or keeping a replaced
//! certificate), so letting go finishes at once, not at the next requeue. The decisions are pure
//! ([`tenant_use`], [`ingress_use`], [`users_of`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::mask_accounts;
use blockwork_runtime::namespaces::{self, Namespaces};
use blockwork_runtime::{Existence, ExternalError};
use futures::StreamExt as _;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::api::Cert;
use crate::ingress::annotations::{self, ALB_CERTIFICATE_ARN};

/// The DistributionTenant kind, read untyped.
pub const TENANT_GROUP: &str = "cloudfront.blockwork.dev";
pub const TENANT_VERSION: &str = "v1alpha1";
pub const TENANT_KIND: &str = "DistributionTenant";
/// Where a tenant names its Cert, and the certificates it gives CloudFront (JSON pointers).
pub const TENANT_CERT_REF: &str = "/spec/customizations/certificate/certRef/name";
pub const TENANT_CERTIFICATE_ARN: &str = "/spec/customizations/certificate/arn";
pub const TENANT_CERTIFICATE_IN_USE: &str = "/status/certificateInUse";

/// How long a question about users waits for the watches' first listing after a start.
const LISTED_WITHIN: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum UserKind {
    DistributionTenant,
    Ingress,
}

impl UserKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DistributionTenant => "DistributionTenant",
            Self::Ingress => "Ingress",
        }
    }

    /// Where this kind names a Cert.
    pub fn reference(self) -> &'static str {
        match self {
            Self::DistributionTenant => "spec.customizations.certificate.certRef",
            Self::Ingress => "the annotation blockwork.dev/certificates (or blockwork.dev/certificate-from-hosts)",
        }
    }
}

/// How one object uses Certs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Use {
    /// The Certs of its namespace it names, while it lives (one being deleted lets go of them).
    pub names: Vec<String>,
    /// The certificates (ARNs) it serves or is given.
    pub serves: Vec<String>,
}

/// A DistributionTenant's use, read from it untyped.
pub fn tenant_use(tenant: &DynamicObject) -> Use {
    let text = |pointer: &str| tenant.data.pointer(pointer).and_then(serde_json::Value::as_str).map(str::to_owned);
    let live = tenant.metadata.deletion_timestamp.is_none();
    let mut serves: Vec<String> = [TENANT_CERTIFICATE_ARN, TENANT_CERTIFICATE_IN_USE].iter().filter_map(|p| text(p)).collect();
    serves.dedup();
    Use { names: text(TENANT_CERT_REF).filter(|_| live).into_iter().collect(), serves }
}

/// An Ingress's use: the Certs its annotation names, the Cert made from its hosts (named after
/// it), and the ARNs its load balancer's annotation lists. An Ingress whose annotations are
/// invalid names nothing (the Ingress controller acts on none of them either).
pub fn ingress_use(ingress: &Ingress) -> Use {
    let live = ingress.metadata.deletion_timestamp.is_none();
    let asked = annotations::read(ingress.annotations()).unwrap_or_default();
    let mut names = asked.certs;
    if asked.from_hosts {
        names.push(ingress.name_any());
    }
    let serves = ingress.annotations().get(ALB_CERTIFICATE_ARN).map(|v| annotations::arns(v)).unwrap_or_default();
    Use { names: if live { names } else { Vec::new() }, serves }
}

/// One object that uses a Cert.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct User {
    pub kind: UserKind,
    pub name: String,
    /// It names the Cert.
    pub names_it: bool,
    /// The Cert's certificates it serves.
    pub serves: Vec<String>,
}

impl User {
    /// How it uses the Cert: `named in ...; serves ...` (accounts masked).
    pub fn how(&self) -> String {
        let mut how = Vec::new();
        if self.names_it {
            how.push(format!("named in {}", self.kind.reference()));
        }
        if !self.serves.is_empty() {
            let serves: Vec<String> = self.serves.iter().map(|arn| mask_accounts(arn)).collect();
            how.push(format!("serves {}", serves.join(", ")));
        }
        how.join("; ")
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.kind.as_str(), self.name, self.how())
    }
}

/// The users of `cert` among the objects of its namespace: those that name it and those that
/// serve one of its certificates (`arns`). A Cert made from an Ingress's hosts is named by that
/// Ingress only if the Ingress owns it (a Cert of the same name someone made is not its).
pub fn users_of<'a>(cert: &Cert, arns: &[&str], objects: impl IntoIterator<Item = (UserKind, &'a str, Use)>) -> Vec<User> {
    let name = cert.name_any();
    let mut users: Vec<User> = objects
        .into_iter()
        .filter_map(|(kind, object, used)| {
            let shim = kind == UserKind::Ingress && object == name && !owned_by_ingress(cert, object);
            let names_it = used.names.contains(&name) && !shim;
            let serves: Vec<String> = used.serves.into_iter().filter(|arn| arns.contains(&arn.as_str())).collect();
            (names_it || !serves.is_empty()).then(|| User { kind, name: object.to_owned(), names_it, serves })
        })
        .collect();
    users.sort();
    users
}

/// Whether `cert` is the Cert the Ingress `ingress` made from its hosts (it owns it).
fn owned_by_ingress(cert: &Cert, ingress: &str) -> bool {
    cert.owner_references().iter().any(|o| o.kind == "Ingress" && o.name == ingress && o.controller == Some(true))
}

/// The users that hold `arn`: they serve it.
pub fn serving<'u>(users: &'u [User], arn: &str) -> Vec<&'u User> {
    users.iter().filter(|u| u.serves.iter().any(|a| a == arn)).collect()
}

/// `DistributionTenant shop (...), Ingress web (...)`.
pub fn listed(users: &[&User]) -> String {
    users.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The reason a Cert being deleted waits with while it is in use.
pub const HELD_BY_USERS: &str = "HeldByUsers";

/// The error a Cert being deleted waits with while `users` use it: who, and the ways out.
pub fn held(users: &[User]) -> ExternalError {
    let users: Vec<&User> = users.iter().collect();
    ExternalError::still_there(
        HELD_BY_USERS,
        format!(
            "the Cert is in use by {}: it and its certificate stay until no user is left. Two ways out: remove the reference to this Cert from each user, or delete the users",
            listed(&users)
        ),
    )
}

/// The watches of a controller's users: their caches, per watched namespace.
#[derive(Default)]
pub struct Users {
    tenants: Vec<Store<DynamicObject>>,
    ingresses: Vec<Store<Ingress>>,
}

/// Watches that end with the controller.
pub struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for watch in &self.0 {
            watch.abort();
        }
    }
}

impl Users {
    /// Watches the users in `namespaces`: DistributionTenants when their CRD is served, Ingresses
    /// when `ingresses` (the Ingress controller runs in this process, which brings the permission).
    /// `changed` is told the namespace of every user that changes.
    pub async fn watch(
        client: &Client,
        namespaces: &Namespaces,
        ingresses: bool,
        changed: impl Fn(&str) + Clone + Send + Sync + 'static,
    ) -> (Arc<Self>, Watches) {
        let mut users = Self::default();
        let mut tasks = Vec::new();
        let tenants = served_tenants(client).await;
        if tenants.is_none() {
            info!("DistributionTenants are not served: no tenant can use a Cert");
        }
        for scope in namespaces.scopes() {
            if let Some(resource) = &tenants {
                let api: Api<DynamicObject> = match &scope {
                    Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
                    None => Api::all_with(client.clone(), resource),
                };
                let writer = reflector::store::Writer::new(ApiResource::clone(resource));
                users.tenants.push(writer.as_reader());
                tasks.push(tokio::spawn(follow(api, writer, changed.clone())));
            }
            if ingresses {
                let api: Api<Ingress> = namespaces::api(client, scope.as_deref());
                let (store, writer) = reflector::store();
                users.ingresses.push(store);
                tasks.push(tokio::spawn(follow(api, writer, changed.clone())));
            }
        }
        (Arc::new(users), Watches(tasks))
    }

    /// The users of `cert` (its certificates: `arns`), once every watch has listed them; an error
    /// of its own while they have not (a Cert is never released on what is not known yet).
    pub async fn of(&self, cert: &Cert, arns: &[&str]) -> Result<Vec<User>, ExternalError> {
        let listed = async {
            for store in &self.tenants {
                store.wait_until_ready().await?;
            }
            for store in &self.ingresses {
                store.wait_until_ready().await?;
            }
            Ok::<_, reflector::store::WriterDropped>(())
        };
        let unknown = || {
            ExternalError::retryable("UsersNotKnown", "who uses this Cert is not known yet (the watches of its users have not listed them)")
        };
        match tokio::time::timeout(LISTED_WITHIN, listed).await {
            Ok(Ok(())) => {}
            _ => return Err(unknown()),
        }
        let namespace = cert.namespace().unwrap_or_default();
        let tenants = self.tenants.iter().flat_map(Store::state).filter(|t| t.namespace().as_deref() == Some(namespace.as_str()));
        let ingresses = self.ingresses.iter().flat_map(Store::state).filter(|i| i.namespace().as_deref() == Some(namespace.as_str()));
        let tenants: Vec<(String, Use)> = tenants.map(|t| (t.name_any(), tenant_use(&t))).collect();
        let ingresses: Vec<(String, Use)> = ingresses.map(|i| (i.name_any(), ingress_use(&i))).collect();
        let objects = tenants
            .iter()
            .map(|(name, used)| (UserKind::DistributionTenant, name.as_str(), used.clone()))
            .chain(ingresses.iter().map(|(name, used)| (UserKind::Ingress, name.as_str(), used.clone())));
        Ok(users_of(cert, arns, objects))
    }
}

/// The DistributionTenant kind, if the API server serves it. Asked until it answers: a Cert is
/// never released because a transient failure made its tenants look absent.
async fn served_tenants(client: &Client) -> Option<ApiResource> {
    let gvk = GroupVersionKind::gvk(TENANT_GROUP, TENANT_VERSION, TENANT_KIND);
    let mut backoff = Duration::from_millis(500);
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, _)) => return Some(resource),
            Err(kube::Error::Api(status)) if status.code == 404 => return None,
            Err(kube::Error::Discovery(_)) => return None,
            Err(error) => {
                warn!(%error, "asking the API server whether it serves DistributionTenants; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Keeps `writer`'s cache of `api` and tells `changed` the namespace of each change, until the
/// controller stops.
async fn follow<K>(api: Api<K>, writer: reflector::store::Writer<K>, changed: impl Fn(&str))
where
    K: kube::Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    let changes = watcher(api, watcher::Config::default()).default_backoff().reflect(writer).touched_objects();
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        match change {
            Ok(object) => changed(&object.namespace().unwrap_or_default()),
            // The backoff retries the watch; the Certs' own requeues cover the gap.
            Err(error) => warn!(%error, "watching the users of Certs"),
        }
    }
}

/// A deleted Cert's error when its users are not known: the deletion waits (still there).
pub fn unknown_users(error: ExternalError) -> ExternalError {
    ExternalError { existence: Existence::StillThere, ..error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CertSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    const A: &str = "arn:aws:acm:us-east-1:123456789012:certificate/aaaaaaaa-0000-4000-8000-0000000000a1";
    const B: &str = "arn:aws:acm:us-east-1:123456789012:certificate/bbbbbbbb-0000-4000-8000-0000000000b2";

    fn tenant(cert_ref: Option<&str>, in_use: Option<&str>, deleting: bool) -> DynamicObject {
        let mut value = serde_json::json!({"metadata": {"name": "shop"}, "spec": {"customizations": {"certificate": {}}}, "status": {}});
        if let Some(name) = cert_ref {
            value["spec"]["customizations"]["certificate"]["certRef"] = serde_json::json!({"name": name});
        }
        if let Some(arn) = in_use {
            value["status"]["certificateInUse"] = arn.into();
        }
        if deleting {
            value["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(value).expect("an object")
    }

    fn ingress(annotations: &[(&str, &str)]) -> Ingress {
        let mut ingress = Ingress::default();
        ingress.metadata.name = Some("web".into());
        ingress.metadata.annotations = Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        ingress
    }

    fn cert(name: &str) -> Cert {
        Cert::new(name, CertSpec::default())
    }

    #[test]
    fn a_tenant_uses_the_cert_it_names_while_it_lives_and_the_certificate_it_serves_until_it_lets_go() {
        assert_eq!(tenant_use(&tenant(Some("api"), Some(A), false)), Use { names: vec!["api".into()], serves: vec![A.into()] });
        assert_eq!(tenant_use(&tenant(Some("api"), Some(A), true)), Use { names: vec![], serves: vec![A.into()] }, "being deleted");
        assert_eq!(tenant_use(&tenant(None, None, false)), Use::default());
    }

    #[test]
    fn an_ingress_uses_the_certs_it_names_the_one_made_from_its_hosts_and_what_its_load_balancer_lists() {
        let used = ingress_use(&ingress(&[
            (annotations::CERTIFICATES, "api, www"),
            (annotations::FROM_HOSTS, "true"),
            (ALB_CERTIFICATE_ARN, &format!("{A},{B}")),
        ]));
        assert_eq!(used.names, ["api", "www", "web"]);
        assert_eq!(used.serves, [A, B]);
        let invalid = ingress_use(&ingress(&[(annotations::CERTIFICATES, "API"), (ALB_CERTIFICATE_ARN, A)]));
        assert_eq!(invalid, Use { names: vec![], serves: vec![A.into()] }, "what it serves still counts");
    }

    #[test]
    fn users_are_those_that_name_the_cert_or_serve_one_of_its_certificates() {
        let objects = vec![
            (UserKind::DistributionTenant, "shop", Use { names: vec!["api".into()], serves: vec![] }),
            (UserKind::DistributionTenant, "old", Use { names: vec![], serves: vec![A.into()] }),
            (UserKind::Ingress, "other", Use { names: vec!["www".into()], serves: vec![B.into()] }),
        ];
        let users = users_of(&cert("api"), &[A], objects);
        let said: Vec<String> = users.iter().map(ToString::to_string).collect();
        assert_eq!(
            said,
            [
                "DistributionTenant old (serves arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/aaaaaaaa-0000-4000-8000-0000000000a1)",
                "DistributionTenant shop (named in spec.customizations.certificate.certRef)",
            ]
        );
        assert_eq!(serving(&users, A).len(), 1);
        assert!(serving(&users, B).is_empty());
    }

    #[test]
    fn a_cert_named_like_an_ingress_is_the_one_made_from_its_hosts_only_if_the_ingress_owns_it() {
        let from_hosts = || vec![(UserKind::Ingress, "web", Use { names: vec!["web".into()], serves: vec![] })];
        assert!(users_of(&cert("web"), &[], from_hosts()).is_empty(), "someone else's Cert of that name");
        let mut owned = cert("web");
        owned.metadata.owner_references =
            Some(vec![OwnerReference { kind: "Ingress".into(), name: "web".into(), controller: Some(true), ..OwnerReference::default() }]);
        assert_eq!(users_of(&owned, &[], from_hosts()).len(), 1);
    }

    #[test]
    fn a_held_cert_says_who_holds_it_and_the_two_ways_out() {
        let users = vec![User { kind: UserKind::Ingress, name: "web".into(), names_it: true, serves: vec![] }];
        let error = held(&users);
        assert_eq!((error.reason.as_str(), error.existence), (HELD_BY_USERS, Existence::StillThere));
        assert!(error.message.contains("in use by Ingress web (named in the annotation blockwork.dev/certificates"), "{}", error.message);
        assert!(error.message.contains("remove the reference to this Cert from each user, or delete the users"), "{}", error.message);
    }
}
