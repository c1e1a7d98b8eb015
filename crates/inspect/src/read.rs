//! The reads: objects, their events and what they own, through the API server as any client
//! reads them (never the controller's memory), turned into [`Report`]s by [`crate::kinds`].

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use blockwork_cache::api::Cache;
use blockwork_cert::Cert;
use blockwork_cert::users::{Use, User, UserKind, ingress_use, tenant_use};
pub use blockwork_rotator::Keys;
use blockwork_tenant::DistributionTenant;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DynamicObject, ListParams, PartialObjectMeta};
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::kinds::{self, CacheObjects, RotatorObjects};
use crate::report::{Owned, Report};

/// The key rotator's annotations under its default prefix.
pub fn default_keys() -> Keys {
    #[allow(clippy::expect_used)]
    Keys::new(blockwork_rotator::DEFAULT_ANNOTATION_PREFIX).expect("the default prefix is a DNS subdomain")
}

/// Which kinds a command is about, as typed on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindArg {
    Cert,
    DistributionTenant,
    /// Ingresses that name Certs.
    Ingress,
    Cache,
    /// Rotator sources and targets.
    Secret,
}

impl KindArg {
    pub const ALL: [Self; 5] = [Self::Cert, Self::DistributionTenant, Self::Ingress, Self::Cache, Self::Secret];

    /// kubectl's names: singular, plural, short name, `kind.group`, any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        let lower = text.trim().to_ascii_lowercase();
        let base = lower.split('.').next().unwrap_or_default();
        match base {
            "cert" | "certs" => Ok(Self::Cert),
            "dt" | "distributiontenant" | "distributiontenants" | "tenant" | "tenants" => Ok(Self::DistributionTenant),
            "ing" | "ingress" | "ingresses" => Ok(Self::Ingress),
            "cache" | "caches" | "ch" => Ok(Self::Cache),
            "secret" | "secrets" | "rotator" => Ok(Self::Secret),
            _ => {
                Err(format!("unknown kind `{text}`: expected cert, dt (distributiontenant), ingress, cache or secret (the key rotator's)"))
            }
        }
    }
}

/// `KIND/NAME`, e.g. `cert/api-prod`.
pub fn parse_target(text: &str) -> Result<(KindArg, String), String> {
    let Some((kind, name)) = text.split_once('/') else {
        return Err(format!("expected KIND/NAME (e.g. cert/api-prod), got `{text}`"));
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!("expected KIND/NAME (e.g. cert/api-prod), got `{text}`"));
    }
    Ok((KindArg::parse(kind)?, name.to_owned()))
}

/// Where to look: one namespace, or all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespace(String),
}

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match scope {
        Scope::All => Api::all(client.clone()),
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
    }
}

/// A kind `status` could not list, and why; the others are listed all the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unlisted {
    /// The API server does not serve it: its CRD (named) is not installed.
    NotInstalled(&'static str),
    /// The reader may not list it (the resource, e.g. `certs.acm.blockwork.dev`, `secrets`).
    Forbidden(String),
}

impl Unlisted {
    /// One line under the table, with what to do.
    pub fn note(&self, scope: &Scope) -> String {
        match self {
            Self::NotInstalled(crd) => format!("(the CRD {crd} is not installed: `blockwork check`)"),
            Self::Forbidden(resource) => {
                let flag = match scope {
                    Scope::All => " -A".to_owned(),
                    Scope::Namespace(namespace) => format!(" -n {namespace}"),
                };
                format!("({resource} not listed: you may not list them (`kubectl auth can-i list {resource}{flag}`))")
            }
        }
    }

    fn of(error: kube::Error, crd: &'static str, resource: String) -> anyhow::Result<Self> {
        match error {
            kube::Error::Api(status) if status.code == 404 => Ok(Self::NotInstalled(crd)),
            kube::Error::Api(status) if status.code == 403 => Ok(Self::Forbidden(resource)),
            error => Err(error).with_context(|| format!("listing {resource}")),
        }
    }
}

/// Lists a kind, or says why it could not.
async fn list<K>(client: &Client, scope: &Scope, crd: &'static str) -> anyhow::Result<Result<Vec<K>, Unlisted>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api::<K>(client, scope).list(&ListParams::default()).await {
        Ok(list) => Ok(Ok(list.items)),
        Err(error) => Ok(Err(Unlisted::of(error, crd, crd.to_owned())?)),
    }
}

/// The events about one object (by UID, so a deleted and re-created namesake's are left out).
pub async fn events_of<K: Resource<DynamicType = ()>>(client: &Client, object: &K) -> anyhow::Result<Vec<Event>> {
    let (Some(namespace), Some(uid)) = (object.meta().namespace.as_deref(), object.meta().uid.as_deref()) else {
        return Ok(Vec::new());
    };
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    Ok(events.list(&params).await.context("listing events")?.items)
}

/// Everything `blockwork status` shows, kind by kind; kinds the cluster does not serve or the
/// reader may not list are skipped (and said so in the second value).
pub async fn reports(
    client: &Client,
    scope: &Scope,
    kinds: &[KindArg],
    keys: &Keys,
    now: Timestamp,
) -> anyhow::Result<(Vec<Report>, Vec<Unlisted>)> {
    let mut reports = Vec::new();
    let mut unlisted = Vec::new();
    for kind in kinds {
        match kind {
            KindArg::Cert => match list::<Cert>(client, scope, "certs.acm.blockwork.dev").await? {
                Ok(certs) => {
                    let uses = uses(client, scope).await?;
                    reports.extend(certs.iter().map(|c| kinds::cert(c, &[], &users_of(c, &uses), now)));
                }
                Err(why) => unlisted.push(why),
            },
            KindArg::Ingress => match list::<Ingress>(client, scope, "ingresses.networking.k8s.io").await? {
                Ok(ingresses) => {
                    let certs = match list::<Cert>(client, scope, "certs.acm.blockwork.dev").await? {
                        Ok(certs) => certs,
                        // The Ingresses are shown without their Certs' states, and why is said
                        // once (with the Certs' own listing when they are shown too).
                        Err(why) => {
                            if !kinds.contains(&KindArg::Cert) {
                                unlisted.push(why);
                            }
                            Vec::new()
                        }
                    };
                    for ingress in ingresses.iter().filter(|i| kinds::concerns_blockwork(i)) {
                        let of_namespace: Vec<Cert> = certs.iter().filter(|c| c.namespace() == ingress.namespace()).cloned().collect();
                        reports.push(kinds::ingress(ingress, &of_namespace, &[], now));
                    }
                }
                Err(why) => unlisted.push(why),
            },
            KindArg::DistributionTenant => {
                match list::<DistributionTenant>(client, scope, "distributiontenants.cloudfront.blockwork.dev").await? {
                    Ok(tenants) => reports.extend(tenants.iter().map(|t| kinds::tenant(t, &[], &[], now))),
                    Err(why) => unlisted.push(why),
                }
            }
            KindArg::Cache => match list::<Cache>(client, scope, "caches.cache.blockwork.dev").await? {
                Ok(caches) => reports.extend(caches.iter().map(|c| kinds::cache(c, &[], &CacheObjects::default(), now))),
                Err(why) => unlisted.push(why),
            },
            KindArg::Secret => match rotator_reports(client, scope, keys, now).await? {
                Ok(rotator) => reports.extend(rotator),
                Err(why) => unlisted.push(why),
            },
        }
    }
    reports.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    Ok((reports, unlisted))
}

/// Rotator sources, and targets no listed source rotates (orphaned or foreign ones the
/// rotator's label marks).
async fn rotator_reports(client: &Client, scope: &Scope, keys: &Keys, now: Timestamp) -> anyhow::Result<Result<Vec<Report>, Unlisted>> {
    // Metadata only: no Secret's data passes unless it is a source or a target.
    let listed = match scope {
        Scope::All => Api::all(client.clone()),
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
    }
    .list_metadata(&ListParams::default())
    .await;
    let metas: Vec<PartialObjectMeta<Secret>> = match listed {
        Ok(list) => list.items,
        Err(error) => return Ok(Err(Unlisted::of(error, "secrets", "secrets".to_owned())?)),
    };
    let mut reports = Vec::new();
    let mut rotated = BTreeSet::new();
    for meta in metas.iter().filter(|m| keys.is_source(m.annotations())) {
        let namespace = meta.namespace().unwrap_or_default();
        let Some(source) = Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(&meta.name_any()).await? else { continue };
        let objects = rotator_objects(client, &source, keys, false).await?;
        if let Some(target) = &objects.target {
            rotated.insert((namespace.clone(), target.name_any()));
        }
        reports.push(kinds::rotator_source(&source, keys, &objects, now));
    }
    // Other Blockwork objects carry the managed-by label too: a target also carries its claim.
    let managed = |m: &PartialObjectMeta<Secret>| {
        blockwork_rotator::plan::labelled_as_target(m.labels()) && keys.claimed_by(m.annotations()).is_some()
    };
    for meta in metas.iter().filter(|m| managed(m)) {
        let namespace = meta.namespace().unwrap_or_default();
        if rotated.contains(&(namespace.clone(), meta.name_any())) {
            continue;
        }
        let Some(target) = Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(&meta.name_any()).await? else { continue };
        let events = events_of(client, &target).await?;
        reports.push(kinds::rotator_target(&target, keys, &events, now));
    }
    Ok(Ok(reports))
}

/// A source's target and events; `with_target_events` for `explain`, which shows the writes too.
async fn rotator_objects(client: &Client, source: &Secret, keys: &Keys, with_target_events: bool) -> anyhow::Result<RotatorObjects> {
    let namespace = source.namespace().unwrap_or_default();
    let target = match source.annotations().get(&keys.destination).map(|d| d.trim()) {
        Some(name) if !name.is_empty() && name != source.name_any() => {
            Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(name).await.ok().flatten()
        }
        _ => None,
    };
    let source_events = events_of(client, source).await?;
    let target_events = match &target {
        Some(target) if with_target_events => events_of(client, target).await?,
        _ => Vec::new(),
    };
    Ok(RotatorObjects { target, source_events, target_events })
}

/// Everything `blockwork explain` tells about one object.
pub async fn report(client: &Client, namespace: &str, kind: KindArg, name: &str, keys: &Keys, now: Timestamp) -> anyhow::Result<Report> {
    let not_found = || anyhow::anyhow!("{} {name} not found in namespace {namespace}", kind_name(kind));
    match kind {
        KindArg::Cert => {
            let cert = get::<Cert>(client, namespace, name).await?.ok_or_else(not_found)?;
            let events = events_of(client, &cert).await?;
            let uses = uses(client, &Scope::Namespace(namespace.to_owned())).await?;
            let mut report = kinds::cert(&cert, &events, &users_of(&cert, &uses), now);
            report.owned.extend(published_configmap(client, &cert).await?);
            Ok(report)
        }
        KindArg::DistributionTenant => {
            let tenant = get::<DistributionTenant>(client, namespace, name).await?.ok_or_else(not_found)?;
            let events = events_of(client, &tenant).await?;
            let certs = certs_of_namespace(client, namespace).await?;
            Ok(kinds::tenant(&tenant, &events, &certs, now))
        }
        KindArg::Ingress => {
            let ingress = get::<Ingress>(client, namespace, name).await?.ok_or_else(not_found)?;
            let events = events_of(client, &ingress).await?;
            let certs = certs_of_namespace(client, namespace).await?;
            Ok(kinds::ingress(&ingress, &certs, &events, now))
        }
        KindArg::Cache => {
            let cache = get::<Cache>(client, namespace, name).await?.ok_or_else(not_found)?;
            let events = events_of(client, &cache).await?;
            let objects = cache_objects(client, &cache).await?;
            Ok(kinds::cache(&cache, &events, &objects, now))
        }
        KindArg::Secret => {
            let secret = get::<Secret>(client, namespace, name).await?.ok_or_else(not_found)?;
            if keys.is_source(secret.annotations()) {
                let objects = rotator_objects(client, &secret, keys, true).await?;
                return Ok(kinds::rotator_source(&secret, keys, &objects, now));
            }
            let labelled = blockwork_rotator::plan::labelled_as_target(secret.labels())
                && secret.type_.as_deref() == Some(blockwork_rotator::plan::TLS_TYPE);
            if labelled || keys.claimed_by(secret.annotations()).is_some() {
                let events = events_of(client, &secret).await?;
                return Ok(kinds::rotator_target(&secret, keys, &events, now));
            }
            bail!(
                "secret {name} is neither a key rotator source (annotation {}: \"true\") nor a target it writes (annotation {}, label {}={})",
                keys.source,
                keys.source_name,
                blockwork_runtime::MANAGED_BY_LABEL,
                blockwork_runtime::MANAGED_BY
            )
        }
    }
}

/// Route 53's answer now for the validation records a Cert waiting for ACM has written: one
/// listing of each zone (`route53:ListResourceRecordSets`) and one `route53:GetChange` of each
/// change the Cert records (both read-only) through the AWS layer `blockwork run` builds from
/// the same flags. Nothing for a Cert that waits for no record.
pub async fn records_now(
    client: &Client,
    namespace: &str,
    name: &str,
    aws: &blockwork_aws::AwsArgs,
) -> anyhow::Result<Vec<kinds::RecordNow>> {
    let Some(cert) = get::<Cert>(client, namespace, name).await? else { return Ok(Vec::new()) };
    if kinds::records_to_read(&cert).is_empty() {
        return Ok(Vec::new());
    }
    let (config, _deprecations) = aws.config().map_err(|e| anyhow::anyhow!("{e}"))?;
    let layer = blockwork_aws::Aws::new(config, std::sync::Arc::new(blockwork_aws::AwsMetrics::register(&mut Default::default(), &[])));
    // A reader without AWS access waits no longer than this for what is a hint.
    const READ_FOR: std::time::Duration = std::time::Duration::from_secs(10);
    match tokio::time::timeout(READ_FOR, records_in_route53(&layer, &cert)).await {
        Ok(records) => Ok(records),
        Err(_) => {
            let silent = format!("no answer from Route 53 within {}s (check the AWS credentials and --aws-* flags)", READ_FOR.as_secs());
            Ok(kinds::records_to_read(&cert)
                .into_iter()
                .map(|record| kinds::RecordNow {
                    change: record.change_id.as_ref().map(|_| Err(silent.clone())),
                    ..kinds::RecordNow::of(record, Err(silent.clone()))
                })
                .collect())
        }
    }
}

/// The Secret an exporting Cert writes, as its metadata reads (never its data: `explain` holds
/// no key), against ACM's serial of the certificate read now (DescribeCertificate, read-only,
/// through the AWS layer `blockwork run` builds from the same flags). Nothing for a Cert that
/// does not export, or where the reader may not read Secrets.
pub async fn export_now(client: &Client, namespace: &str, name: &str, aws: &blockwork_aws::AwsArgs) -> anyhow::Result<Option<Owned>> {
    let Some(cert) = get::<Cert>(client, namespace, name).await? else { return Ok(None) };
    if cert.spec.export.is_none() {
        return Ok(None);
    }
    let (config, _deprecations) = aws.config().map_err(|e| anyhow::anyhow!("{e}"))?;
    let layer = blockwork_aws::Aws::new(config, std::sync::Arc::new(blockwork_aws::AwsMetrics::register(&mut Default::default(), &[])));
    export_in(&layer, client, &cert).await
}

/// [`export_now`] through a given AWS layer. ACM's serial is left unsaid when AWS does not
/// answer within a few seconds (a reader without AWS access).
pub async fn export_in(layer: &std::sync::Arc<blockwork_aws::Aws>, client: &Client, cert: &Cert) -> anyhow::Result<Option<Owned>> {
    let Some(export) = &cert.spec.export else { return Ok(None) };
    let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &cert.namespace().unwrap_or_default());
    let found = match api.get_metadata_opt(&export.secret_name).await {
        Ok(found) => found,
        Err(kube::Error::Api(status)) if status.code == 403 => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading the Secret {}", export.secret_name)),
    };
    let serial = match cert.status.as_ref().and_then(|s| s.observation.certificate_arn.as_deref()) {
        Some(arn) => {
            // As the reader's own credentials, as the records are read (see records_in_route53).
            let reader = blockwork_aws::Principal::operator();
            let acm = blockwork_aws::acm::Acm::new(
                layer,
                blockwork_cert::CONTROLLER,
                None,
                reader.clone(),
                blockwork_aws::acm::AcmConfig::default(),
            );
            const READ_FOR: std::time::Duration = std::time::Duration::from_secs(10);
            tokio::time::timeout(READ_FOR, acm.describe(&reader, arn)).await.ok().and_then(Result::ok).and_then(|c| c.serial)
        }
        None => None,
    };
    Ok(kinds::exported_secret(cert, found.as_ref(), serial.as_deref()))
}

/// [`records_now`] through a given AWS layer: each record's zone listed, and each change read
/// once however many records it wrote.
pub async fn records_in_route53(layer: &std::sync::Arc<blockwork_aws::Aws>, cert: &Cert) -> Vec<kinds::RecordNow> {
    let said = |e: blockwork_aws::AwsError| {
        blockwork_aws::mask_accounts(&format!("{}: {}", e.code.as_deref().unwrap_or("no error code"), e.message))
    };
    let records = kinds::records_to_read(cert);
    let mut changes: std::collections::HashMap<(String, String), Result<kinds::ChangeNow, String>> = std::collections::HashMap::new();
    let mut now = Vec::new();
    for record in records {
        let zone = blockwork_aws::route53::Zone::new(&record.zone_id, blockwork_aws::Principal::operator());
        let found = layer
            .records()
            .lookup(blockwork_cert::CONTROLLER, &zone, std::slice::from_ref(&record.name))
            .await
            .map(|found| found.into_iter().flatten().next().map(|r| r.value))
            .map_err(said);
        let mut record_now = kinds::RecordNow::of(record, found);
        if let Some(id) = &record.change_id {
            let key = (zone.id.clone(), id.clone());
            if !changes.contains_key(&key) {
                let change =
                    layer.records().change(blockwork_cert::CONTROLLER, &zone, id).await.map_err(said).map(|state| kinds::ChangeNow {
                        id: id.clone(),
                        in_sync: state.in_sync,
                        submitted_at: state.submitted_at.and_then(|at| Timestamp::try_from(at).ok()),
                    });
                changes.insert(key.clone(), change);
            }
            record_now.change = changes.get(&key).cloned();
        }
        now.push(record_now);
    }
    now
}

/// The ConfigMap a Cert publishes its ARN in, as read; nothing where the reader may not read
/// ConfigMaps.
async fn published_configmap(client: &Client, cert: &Cert) -> anyhow::Result<Option<Owned>> {
    let Some(name) = blockwork_cert::publish::configmap_name(&cert.name_any()) else { return Ok(None) };
    match Api::<ConfigMap>::namespaced(client.clone(), &cert.namespace().unwrap_or_default()).get_opt(&name).await {
        Ok(found) => Ok(kinds::published(cert, found.as_ref())),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading the ConfigMap {name}")),
    }
}

/// The Certs of a namespace, for the one a tenant's certificate may come from: none where the
/// Cert CRD is not installed or the reader may not list them (a tenant needs no Cert).
async fn certs_of_namespace(client: &Client, namespace: &str) -> anyhow::Result<Vec<Cert>> {
    match Api::<Cert>::namespaced(client.clone(), namespace).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => Ok(Vec::new()),
        Err(error) => Err(error).context("listing certs"),
    }
}

/// An object that may use Certs, and how (`blockwork_cert::users`), by namespace.
type Uses = Vec<(String, UserKind, String, Use)>;

/// How the DistributionTenants and Ingresses of `scope` use Certs, as the Cert controller reads
/// them; kinds the cluster does not serve or the reader may not list are left out.
async fn uses(client: &Client, scope: &Scope) -> anyhow::Result<Uses> {
    let mut uses = Vec::new();
    if let Ok(tenants) = list::<DistributionTenant>(client, scope, "distributiontenants.cloudfront.blockwork.dev").await? {
        for tenant in tenants {
            let untyped: DynamicObject = serde_json::from_value(serde_json::to_value(&tenant)?)?;
            uses.push((tenant.namespace().unwrap_or_default(), UserKind::DistributionTenant, tenant.name_any(), tenant_use(&untyped)));
        }
    }
    if let Ok(ingresses) = list::<Ingress>(client, scope, "ingresses.networking.k8s.io").await? {
        for ingress in ingresses {
            uses.push((ingress.namespace().unwrap_or_default(), UserKind::Ingress, ingress.name_any(), ingress_use(&ingress)));
        }
    }
    Ok(uses)
}

/// The users of `cert` among `uses`.
fn users_of(cert: &Cert, uses: &Uses) -> Vec<User> {
    let observation = cert.status.as_ref().map(|s| &s.observation);
    let arns: Vec<&str> =
        observation.iter().flat_map(|o| o.certificate_arn.iter().chain(&o.previous_certificate_arns)).map(String::as_str).collect();
    let namespace = cert.namespace().unwrap_or_default();
    let of_namespace = uses.iter().filter(|(ns, ..)| *ns == namespace).map(|(_, kind, name, used)| (*kind, name.as_str(), used.clone()));
    blockwork_cert::users::users_of(cert, &arns, of_namespace)
}

pub fn kind_name(kind: KindArg) -> &'static str {
    match kind {
        KindArg::Cert => "Cert",
        KindArg::DistributionTenant => "DistributionTenant",
        KindArg::Ingress => "Ingress",
        KindArg::Cache => "Cache",
        KindArg::Secret => "Secret",
    }
}

async fn get<K>(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Option<K>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match Api::<K>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(found) => Ok(found),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            bail!("the API server does not serve {} (is Blockwork's CRD installed? `blockwork check`)", K::plural(&()))
        }
        Err(error) => Err(error).with_context(|| format!("reading {} {name}", K::kind(&()))),
    }
}

/// The StatefulSet, Services and pods of a Cache, and its TLS Secret.
async fn cache_objects(client: &Client, cache: &Cache) -> anyhow::Result<CacheObjects> {
    let namespace = cache.namespace().unwrap_or_default();
    let name = blockwork_cache::shape::resource_name(cache);
    let stateful_set = Api::<StatefulSet>::namespaced(client.clone(), &namespace).get_opt(&name).await?;
    let mut services = Vec::new();
    for service in [name.clone(), blockwork_cache::shape::headless_name(cache)] {
        if let Some(found) = Api::<Service>::namespaced(client.clone(), &namespace).get_opt(&service).await? {
            services.push(found);
        }
    }
    let selector = format!("app.kubernetes.io/name=cache,app.kubernetes.io/instance={}", cache.name_any());
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace).list(&ListParams::default().labels(&selector)).await?.items;
    let tls_secret = match blockwork_cache::refs::tls_secret_name(cache) {
        Some(secret) => Some(Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(secret).await?),
        None => None,
    };
    Ok(CacheObjects { stateful_set, services, pods, tls_secret })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        for (text, kind) in [
            ("cert", KindArg::Cert),
            ("Certs", KindArg::Cert),
            ("certs.acm.blockwork.dev", KindArg::Cert),
            ("dt", KindArg::DistributionTenant),
            ("DistributionTenant", KindArg::DistributionTenant),
            ("ch", KindArg::Cache),
            ("secret", KindArg::Secret),
        ] {
            assert_eq!(KindArg::parse(text), Ok(kind), "{text}");
        }
        assert!(KindArg::parse("pod").expect_err("not a Blockwork kind").contains("expected cert, dt"));
    }

    #[test]
    fn a_kind_not_listed_says_why_and_what_to_run() {
        let scope = Scope::Namespace("team-a".into());
        assert_eq!(
            Unlisted::Forbidden("secrets".into()).note(&scope),
            "(secrets not listed: you may not list them (`kubectl auth can-i list secrets -n team-a`))"
        );
        assert!(Unlisted::NotInstalled("caches.cache.blockwork.dev").note(&Scope::All).contains("`blockwork check`"));
    }

    #[test]
    fn a_target_is_kind_slash_name() {
        assert_eq!(parse_target("cert/api-prod"), Ok((KindArg::Cert, "api-prod".to_owned())));
        assert!(parse_target("api-prod").is_err());
        assert!(parse_target("cert/").is_err());
        assert!(parse_target("cert/a/b").is_err());
    }
}
