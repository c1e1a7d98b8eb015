//! The workload every suite drives: Certs, DistributionTenants, Caches and key-rotator sources
//! created, updated and deleted in a seeded order, and the check that everything ended as its
//! spec says — on the Kubernetes side (Ready at the current generation, or gone) and on the AWS
//! side (exactly one certificate per live Cert by owner tag, one CloudFront tenant per live
//! DistributionTenant, DNS records of live objects only, foreign records untouched).
//!
//! Names carry the workload's `tag`, so two workloads can share a hosted zone and an account.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::world::World;

/// How many objects of each kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub certs: usize,
    pub tenants: usize,
    pub caches: usize,
    pub sources: usize,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.certs + self.tenants + self.caches + self.sources
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Cert,
    Tenant,
    Cache,
    Source,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

/// One step of the plan: what to do to which object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    op: Op,
    kind: Kind,
    index: usize,
}

#[derive(Clone, Debug, Default)]
struct Tracked {
    uid: Option<String>,
    created: bool,
    deleted: bool,
    /// Updates applied.
    version: u32,
}

pub fn cert_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("acm.blockwork.dev", "v1", "Cert"), "certs")
}

pub fn tenant_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant"),
        "distributiontenants",
    )
}

pub fn cache_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cache.blockwork.dev", "v1beta1", "Cache"), "caches")
}

const ROTATOR: &str = "rotator.gw.ei.telekom.de";
const MEMORY: [&str; 3] = ["64Mi", "128Mi", "96Mi"];

/// What the check found, by kind of problem; empty when everything converged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Objects not (yet) as their spec says: `Cert ns/c1: state Verifying at generation 2 of 3`.
    pub unconverged: Vec<String>,
    /// Deleted objects still present (a finalizer never removed).
    pub stuck: Vec<String>,
    /// More than one certificate or tenant for one object.
    pub duplicates: Vec<String>,
    /// Certificates, tenants, records or published ConfigMaps of deleted objects (or replaced
    /// names) still there.
    pub leftovers: Vec<String>,
    /// Foreign records changed or deleted.
    pub foreign: Vec<String>,
}

impl Findings {
    pub fn is_empty(&self) -> bool {
        self.unconverged.is_empty()
            && self.stuck.is_empty()
            && self.duplicates.is_empty()
            && self.leftovers.is_empty()
            && self.foreign.is_empty()
    }

    pub fn summary(&self) -> String {
        let mut lines = Vec::new();
        for (what, items) in [
            ("not converged", &self.unconverged),
            ("stuck finalizers", &self.stuck),
            ("duplicates", &self.duplicates),
            ("left behind", &self.leftovers),
            ("foreign records touched", &self.foreign),
        ] {
            if !items.is_empty() {
                let shown: Vec<&str> = items.iter().take(20).map(String::as_str).collect();
                lines.push(format!("{} {what}: {}{}", items.len(), shown.join("; "), if items.len() > 20 { "; ..." } else { "" }));
            }
        }
        lines.join("\n")
    }
}

pub struct Workload {
    pub tag: String,
    pub namespace: String,
    pub counts: Counts,
    client: Client,
    zone: String,
    zone_id: String,
    distribution_id: String,
    connection_group_id: String,
    tenant_certificate: String,
    plan: Vec<Step>,
    objects: BTreeMap<(Kind, usize), Tracked>,
    /// Every PEM certificate each source had, in order.
    source_versions: BTreeMap<usize, Vec<String>>,
    /// Every domain a Cert or tenant of this workload ever named.
    domains: BTreeSet<String>,
    pub steps_done: usize,
}

impl Workload {
    /// A seeded plan: every object created once (in a shuffled order), about half of them
    /// updated and a quarter deleted along the way.
    pub fn new(world: &World, client: Client, namespace: &str, tag: &str, counts: Counts, seed: u64) -> Self {
        let plan = plan(counts, seed);
        Self {
            tag: tag.to_owned(),
            namespace: namespace.to_owned(),
            counts,
            client,
            zone: world.zone.name.clone(),
            zone_id: world.zone.id.clone(),
            distribution_id: world.distribution_id.clone(),
            connection_group_id: world.connection_group_id.clone(),
            tenant_certificate: world.tenant_certificate.clone(),
            plan,
            objects: BTreeMap::new(),
            source_versions: BTreeMap::new(),
            domains: BTreeSet::new(),
            steps_done: 0,
        }
    }

    pub fn steps(&self) -> usize {
        self.plan.len()
    }

    /// Runs the plan, spread evenly over `duration`.
    pub async fn drive(&mut self, duration: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        let interval = duration.checked_div(self.plan.len().max(1) as u32).unwrap_or_default();
        for (i, step) in self.plan.clone().into_iter().enumerate() {
            sleep_until(started + interval * i as u32).await;
            self.apply(step).await.with_context(|| format!("{step:?}"))?;
            self.steps_done += 1;
        }
        Ok(())
    }

    async fn apply(&mut self, step: Step) -> anyhow::Result<()> {
        let tracked = self.objects.entry((step.kind, step.index)).or_default().clone();
        let version = match step.op {
            Op::Create => 0,
            Op::Update => tracked.version + 1,
            Op::Delete => tracked.version,
        };
        let name = self.name(step.kind, step.index);
        match (step.op, step.kind) {
            (Op::Delete, Kind::Source) => {}
            (Op::Delete, kind) => {
                self.api(kind).delete(&name, &DeleteParams::default()).await.with_context(|| format!("deleting {name}"))?;
            }
            (Op::Create, Kind::Source) | (Op::Update, Kind::Source) => {
                let pem = self.source_secret(step.index, version).await?;
                self.source_versions.entry(step.index).or_default().push(pem);
            }
            (Op::Create, kind) => {
                let object = self.object(kind, step.index, version);
                let created = self.api(kind).create(&PostParams::default(), &serde_json::from_value(object)?).await?;
                self.objects.entry((kind, step.index)).or_default().uid = created.uid();
            }
            (Op::Update, kind) => {
                let patch = json!({"spec": self.object(kind, step.index, version)["spec"]});
                self.api(kind)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .with_context(|| format!("updating {name}"))?;
            }
        }
        let entry = self.objects.entry((step.kind, step.index)).or_default();
        entry.created = true;
        entry.version = version;
        entry.deleted |= step.op == Op::Delete;
        Ok(())
    }

    fn name(&self, kind: Kind, index: usize) -> String {
        let tag = &self.tag;
        match kind {
            Kind::Cert => format!("c{index}"),
            Kind::Tenant => format!("{tag}-t{index}"),
            Kind::Cache => format!("k{index}"),
            Kind::Source => format!("s{index}"),
        }
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        let resource = match kind {
            Kind::Cert => cert_resource(),
            Kind::Tenant => tenant_resource(),
            Kind::Cache => cache_resource(),
            Kind::Source => ApiResource::erase::<Secret>(&()),
        };
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
    }

    /// A Cert's names at `version`: its generated primary domain, and from the first update on a
    /// SAN that changes with every update (so each update is a new certificate).
    fn cert_names(&self, index: usize, version: u32) -> (String, Vec<String>) {
        let primary = format!("c{index}-{}.{}", self.tag, self.zone);
        let sans = if version == 0 { Vec::new() } else { vec![format!("c{index}-{}-v{version}.{}", self.tag, self.zone)] };
        (primary, sans)
    }

    /// A tenant's domains at `version`: a second one on odd versions.
    fn tenant_domains(&self, index: usize, version: u32) -> Vec<String> {
        let base = format!("{}-t{index}", self.tag);
        let mut domains = vec![format!("{base}.{}", self.zone)];
        if version % 2 == 1 {
            domains.push(format!("{base}-b.{}", self.zone));
        }
        domains
    }

    fn object(&mut self, kind: Kind, index: usize, version: u32) -> Value {
        let name = self.name(kind, index);
        match kind {
            Kind::Cert => {
                let (primary, sans) = self.cert_names(index, version);
                self.domains.insert(primary);
                self.domains.extend(sans.iter().cloned());
                json!({
                    "apiVersion": "acm.blockwork.dev/v1", "kind": "Cert", "metadata": {"name": name},
                    "spec": {"serviceName": format!("c{index}"), "environment": self.tag, "deleteOnRemoval": true, "subjectAlternativeNames": sans},
                })
            }
            Kind::Tenant => {
                let domains = self.tenant_domains(index, version);
                self.domains.extend(domains.iter().cloned());
                json!({
                    "apiVersion": "cloudfront.blockwork.dev/v1alpha1", "kind": "DistributionTenant", "metadata": {"name": name},
                    "spec": {
                        "distributionId": self.distribution_id,
                        "connectionGroupId": self.connection_group_id,
                        "domains": domains.iter().map(|d| json!({"domain": d})).collect::<Vec<_>>(),
                        "customizations": {"certificate": {"arn": self.tenant_certificate}},
                        "dns": {"provider": "route53", "hostedZoneId": self.zone_id, "ttl": 60},
                    },
                })
            }
            // Sources are Secrets, written by `source_secret`.
            Kind::Cache | Kind::Source => json!({
                "apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache", "metadata": {"name": name},
                "spec": {"engine": "redis", "memory": MEMORY[version as usize % MEMORY.len()], "replicas": 1},
            }),
        }
    }

    /// Writes source `index` with a new key pair; returns its certificate.
    async fn source_secret(&self, index: usize, version: u32) -> anyhow::Result<String> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(vec![format!("s{index}-v{version}.{}", self.zone)])?;
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("s{index} v{version}"));
        let certificate = params.self_signed(&key)?.pem();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("s{index}"), "annotations": {
                format!("{ROTATOR}/source-secret"): "true",
                format!("{ROTATOR}/destination-secret-name"): format!("s{index}-keys"),
            }},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": certificate, "tls.key": key.serialize_pem()},
        });
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = PatchParams::apply("reliability-driver").force();
        api.patch(&format!("s{index}"), &params, &Patch::Apply(&secret)).await.context("writing a source Secret")?;
        Ok(certificate)
    }

    /// Updates every live object once, in a seeded order.
    pub async fn change_all(&mut self, seed: u64) -> anyhow::Result<()> {
        let mut live: Vec<Step> = self
            .objects
            .iter()
            .filter(|(_, t)| t.created && !t.deleted)
            .map(|(&(kind, index), _)| Step { op: Op::Update, kind, index })
            .collect();
        live.shuffle(&mut StdRng::seed_from_u64(seed));
        for step in live {
            self.apply(step).await.with_context(|| format!("{step:?}"))?;
        }
        Ok(())
    }

    /// Objects created so far.
    pub fn created_objects(&self) -> usize {
        self.objects.values().filter(|o| o.created).count()
    }

    /// Polls [`Self::check`] until it finds nothing or `timeout` passes; returns how long it
    /// took (None: never converged) and the last findings.
    pub async fn await_convergence(&self, world: &World, timeout: Duration) -> anyhow::Result<(Option<Duration>, Findings)> {
        let started = Instant::now();
        loop {
            let findings = self.check(world).await?;
            if findings.is_empty() {
                return Ok((Some(started.elapsed()), findings));
            }
            if started.elapsed() > timeout {
                return Ok((None, findings));
            }
            sleep(Duration::from_secs(2)).await;
        }
    }

    /// Everything that is not as the specs say. The Kubernetes side first; the AWS side only once
    /// that converged (it lists every certificate and its tags).
    pub async fn check(&self, world: &World) -> anyhow::Result<Findings> {
        let mut findings = Findings::default();
        let mut live_certs: BTreeMap<String, Value> = BTreeMap::new();
        let mut tenant_targets: BTreeMap<String, String> = BTreeMap::new();
        for ((kind, index), tracked) in &self.objects {
            if !tracked.created {
                continue;
            }
            let name = self.name(*kind, *index);
            let what = format!("{kind:?} {}/{name}", self.namespace);
            if *kind == Kind::Source {
                if let Err(problem) = self.rotation(*index).await? {
                    findings.unconverged.push(format!("{what}: {problem}"));
                }
                continue;
            }
            let object = self.api(*kind).get_opt(&name).await?;
            match (tracked.deleted, object) {
                (true, None) => {
                    // The finalizer removes it (this control plane runs no garbage collector, as
                    // a cluster without kube-controller-manager's would not).
                    if *kind == Kind::Cert
                        && let Some(published) = self.published(&name).await?
                    {
                        findings.leftovers.push(format!("{what} (deleted): its ConfigMap {published}"));
                    }
                }
                (true, Some(_)) => findings.stuck.push(format!("{what}: still present after deletion")),
                (false, None) => findings.unconverged.push(format!("{what}: missing")),
                (false, Some(object)) => {
                    if let Some(problem) = self.unconverged(*kind, *index, tracked.version, &object).await? {
                        findings.unconverged.push(format!("{what}: {problem}"));
                    }
                    if *kind == Kind::Cert {
                        live_certs.insert(name, object.data["status"].clone());
                    } else if *kind == Kind::Tenant {
                        tenant_targets.insert(name, object.data["status"]["dnsTarget"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        }
        if !findings.unconverged.is_empty() || !findings.stuck.is_empty() {
            return Ok(findings);
        }
        self.check_certificates(world, &live_certs, &mut findings).await?;
        self.check_tenants(world, &mut findings).await?;
        self.check_records(world, &live_certs, &tenant_targets, &mut findings).await?;
        Ok(findings)
    }

    /// The name of the ConfigMap Cert `name` publishes its ARN in, if it exists.
    async fn published(&self, name: &str) -> anyhow::Result<Option<String>> {
        let Some(published) = blockwork_cert::publish::configmap_name(name) else { return Ok(None) };
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(maps.get_opt(&published).await?.map(|_| published))
    }

    /// Why a live object is not as its spec says, if it is not.
    async fn unconverged(&self, kind: Kind, index: usize, version: u32, object: &DynamicObject) -> anyhow::Result<Option<String>> {
        let status = &object.data["status"];
        let generation = object.metadata.generation;
        let observed = status["observedGeneration"].as_i64();
        if observed != generation {
            return Ok(Some(format!("observed generation {observed:?} of {generation:?}: {}", brief(status))));
        }
        let problem = match kind {
            Kind::Cert => {
                let (primary, _) = self.cert_names(index, version);
                if status["state"] != "Ready" || !ready(status) {
                    Some(format!("not Ready: {}", brief(status)))
                } else if status["domainName"] != primary.as_str() {
                    Some(format!("domain {} instead of {primary}", status["domainName"]))
                } else if status["previousCertificateArns"].as_array().is_some_and(|a| !a.is_empty()) {
                    Some("replaced certificates not deleted yet".to_owned())
                } else {
                    None
                }
            }
            Kind::Tenant => (!ready(status)).then(|| format!("not Ready: {}", brief(status))),
            Kind::Cache => {
                let sets: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
                let name = format!("{}-cache", self.name(kind, index));
                match sets.get_opt(&name).await? {
                    Some(_) => None,
                    None => Some(format!("no StatefulSet {name}")),
                }
            }
            Kind::Source => None,
        };
        Ok(problem)
    }

    /// A source's target holds its latest certificate as next, and (prev, current, next) are
    /// versions of the source in order: each change rotated at most once.
    async fn rotation(&self, index: usize) -> anyhow::Result<Result<(), String>> {
        let versions = self.source_versions.get(&index).cloned().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let Some(target) = secrets.get_opt(&format!("s{index}-keys")).await? else { return Ok(Err("no target Secret".to_owned())) };
        let data = target.data.unwrap_or_default();
        let text = |key: &str| data.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
        let (prev, current, next) = (text("prev-tls.crt"), text("tls.crt"), text("next-tls.crt"));
        if Some(&next) != versions.last() {
            return Ok(Err(format!("next-tls.crt is not the latest of {} versions", versions.len())));
        }
        let position = |pem: &str| versions.iter().position(|v| v == pem);
        let chain: Vec<Option<usize>> = [&prev, &current, &next].iter().filter(|p| !p.is_empty()).map(|p| position(p)).collect();
        if chain.iter().any(Option::is_none) {
            return Ok(Err("the target holds a certificate the source never had".to_owned()));
        }
        if !chain.windows(2).all(|w| w[0] < w[1]) {
            return Ok(Err(format!("the key set is not in rotation order (versions {chain:?}): a change rotated twice")));
        }
        Ok(Ok(()))
    }

    async fn check_certificates(&self, world: &World, live: &BTreeMap<String, Value>, findings: &mut Findings) -> anyhow::Result<()> {
        let mut owned: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (arn, owner) in world.certificates().await? {
            if let Some(owner) = owner {
                owned.entry(owner).or_default().push(arn);
            }
        }
        for ((kind, index), tracked) in &self.objects {
            let (Kind::Cert, Some(uid)) = (kind, &tracked.uid) else { continue };
            let name = self.name(*kind, *index);
            let arns = owned.get(uid).cloned().unwrap_or_default();
            match live.get(&name) {
                None if !arns.is_empty() => findings.leftovers.push(format!("Cert {name} (deleted): certificates {arns:?}")),
                None => {}
                Some(status) => {
                    let current = status["certificateArn"].as_str().unwrap_or_default();
                    if arns.len() > 1 {
                        findings.duplicates.push(format!("Cert {name}: {} certificates owned, status names {current}", arns.len()));
                    } else if arns.first().map(String::as_str) != Some(current) {
                        findings.unconverged.push(format!("Cert {name}: owns {arns:?}, status names {current}"));
                    } else {
                        let (primary, sans) = self.cert_names(*index, tracked.version);
                        let mut wanted: Vec<String> = std::iter::once(primary).chain(sans).collect();
                        wanted.sort();
                        let names = world.certificate_names(current).await?;
                        if names != wanted {
                            findings.unconverged.push(format!("Cert {name}: certificate for {names:?}, spec wants {wanted:?}"));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn check_tenants(&self, world: &World, findings: &mut Findings) -> anyhow::Result<()> {
        let tenants = world.tenants().await?;
        for ((kind, index), tracked) in &self.objects {
            if *kind != Kind::Tenant || !tracked.created {
                continue;
            }
            let name = self.name(*kind, *index);
            match (tracked.deleted, tenants.get(&name)) {
                (true, Some(_)) => findings.leftovers.push(format!("CloudFront tenant {name} of a deleted DistributionTenant")),
                (true, None) => {}
                (false, None) => findings.unconverged.push(format!("CloudFront tenant {name} missing")),
                (false, Some((_, count))) if *count > 1 => findings.duplicates.push(format!("{count} CloudFront tenants named {name}")),
                (false, Some((domains, _))) => {
                    let mut wanted = self.tenant_domains(*index, tracked.version);
                    wanted.sort();
                    if *domains != wanted {
                        findings.unconverged.push(format!("CloudFront tenant {name} has {domains:?}, spec wants {wanted:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The zone holds the foreign records unchanged, a CNAME to its target for every domain of a
    /// live tenant, the validation records live Certs list, and no other record of a domain this
    /// workload ever used.
    async fn check_records(
        &self,
        world: &World,
        live_certs: &BTreeMap<String, Value>,
        tenant_targets: &BTreeMap<String, String>,
        findings: &mut Findings,
    ) -> anyhow::Result<()> {
        let records = world.records().await?;
        for foreign in &world.foreign_records {
            if !records.contains(foreign) {
                findings.foreign.push(format!("{} {} {} changed or deleted", foreign.kind, foreign.name, foreign.value));
            }
        }
        let mut expected: BTreeMap<String, Option<String>> = BTreeMap::new();
        // Which tenant each expected record is for, to say what its status claims when it is missing.
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        for ((kind, index), tracked) in &self.objects {
            if *kind == Kind::Tenant && tracked.created && !tracked.deleted {
                let name = self.name(*kind, *index);
                let target = tenant_targets.get(&name).cloned();
                for domain in self.tenant_domains(*index, tracked.version) {
                    expected.insert(format!("{domain}."), target.clone());
                    owners.insert(format!("{domain}."), name.clone());
                }
            }
        }
        for status in live_certs.values() {
            for record in status["validationRecords"].as_array().into_iter().flatten() {
                let name = record["name"].as_str().unwrap_or_default();
                expected.insert(format!("{}.", name.trim_end_matches('.')), None);
            }
        }
        for (name, target) in &expected {
            match records.iter().find(|r| &r.name == name && r.kind == "CNAME") {
                None => {
                    let claim = match owners.get(name) {
                        Some(tenant) => match self.api(Kind::Tenant).get_opt(tenant).await? {
                            Some(object) => format!(
                                " (DistributionTenant {tenant}: dnsRecords {}, {})",
                                object.data["status"]["dnsRecords"],
                                brief(&object.data["status"])
                            ),
                            None => format!(" (DistributionTenant {tenant} is gone)"),
                        },
                        None => String::new(),
                    };
                    findings.unconverged.push(format!("no CNAME {name}{claim}"));
                }
                Some(found) => {
                    if let Some(target) = target
                        && found.value.trim_end_matches('.') != target.trim_end_matches('.')
                    {
                        findings.unconverged.push(format!("CNAME {name} points to {}, not {target}", found.value));
                    }
                }
            }
        }
        for record in &records {
            let bare = record.name.trim_end_matches('.');
            let domain = match bare.split_once('.') {
                Some((label, rest)) if label.starts_with('_') => rest,
                _ => bare,
            };
            let ours = self.domains.contains(domain);
            if ours && !expected.contains_key(&record.name) && !world.foreign_records.contains(record) {
                findings.leftovers.push(format!("{} {} of a deleted object or a replaced name", record.kind, record.name));
            }
        }
        Ok(())
    }

    pub async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut versions = BTreeMap::new();
        let mut statuses = BTreeMap::new();
        for kind in [Kind::Cert, Kind::Tenant, Kind::Cache] {
            for object in self.api(kind).list(&Default::default()).await? {
                let key = format!("{kind:?} {}", object.name_any());
                versions.insert(key.clone(), object.resource_version().unwrap_or_default());
                statuses.insert(key, object.data["status"].clone());
            }
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        for secret in secrets.list(&Default::default()).await? {
            if secret.name_any().ends_with("-keys") {
                versions.insert(format!("Secret {}", secret.name_any()), secret.resource_version().unwrap_or_default());
            }
        }
        let sets: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
        for set in sets.list(&Default::default()).await? {
            versions.insert(format!("StatefulSet {}", set.name_any()), set.resource_version().unwrap_or_default());
        }
        // The rest of what the Cache controller applies (and re-applies on every reconcile).
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        for map in maps.list(&Default::default()).await? {
            versions.insert(format!("ConfigMap {}", map.name_any()), map.resource_version().unwrap_or_default());
        }
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        for service in services.list(&Default::default()).await? {
            versions.insert(format!("Service {}", service.name_any()), service.resource_version().unwrap_or_default());
        }
        Ok(Snapshot { versions, statuses })
    }
}

/// The workload's objects at one moment, for the quiet-period checks: each object's
/// resourceVersion (kind and name as the key), and the custom objects' statuses.
pub struct Snapshot {
    pub versions: BTreeMap<String, String>,
    statuses: BTreeMap<String, Value>,
}

impl Snapshot {
    /// The objects of `before` written (or gone) since.
    pub fn written_since(&self, before: &Snapshot) -> Vec<String> {
        before.versions.iter().filter(|(key, version)| self.versions.get(*key) != Some(*version)).map(|(key, _)| key.clone()).collect()
    }

    /// Each of `written`, with what its status gained or lost since `before`.
    pub fn describe(&self, before: &Snapshot, written: &[String]) -> String {
        written.iter().map(|key| format!("\n  {key}: {}", status_differences(before.statuses.get(key), self.statuses.get(key)))).collect()
    }
}

/// The status fields that differ between two reads of one object (`field: before -> after`), or
/// why there is nothing to compare.
fn status_differences(before: Option<&Value>, after: Option<&Value>) -> String {
    let (Some(Value::Object(before)), Some(Value::Object(after))) = (before, after) else {
        return "no status to compare (not a custom object, or created or deleted meanwhile)".to_owned();
    };
    let shown = |value: Option<&Value>| value.map_or_else(|| "(absent)".to_owned(), ToString::to_string);
    let fields: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let differences: Vec<String> = fields
        .into_iter()
        .filter(|field| before.get(*field) != after.get(*field))
        .map(|field| format!("status.{field}: {} -> {}", shown(before.get(field)), shown(after.get(field))))
        .collect();
    if differences.is_empty() { "the status is unchanged (metadata or spec written)".to_owned() } else { differences.join("; ") }
}

/// The seeded plan: every object created once (in a shuffled order), about half of them updated
/// and a quarter deleted along the way (sources are updated, never deleted).
fn plan(counts: Counts, seed: u64) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut creates: Vec<Step> =
        [(Kind::Cert, counts.certs), (Kind::Tenant, counts.tenants), (Kind::Cache, counts.caches), (Kind::Source, counts.sources)]
            .iter()
            .flat_map(|&(kind, n)| (0..n).map(move |index| Step { op: Op::Create, kind, index }))
            .collect();
    creates.shuffle(&mut rng);
    let mut plan = Vec::new();
    let mut created: Vec<Step> = Vec::new();
    let mut deleted: BTreeSet<(Kind, usize)> = BTreeSet::new();
    let changes = counts.total() * 3 / 4;
    let mut creates = creates.into_iter();
    let mut changes_left = changes;
    loop {
        let create_next = changes_left == 0 || (created.len() < counts.total() && rng.random_bool(0.6));
        if create_next {
            match creates.next() {
                Some(step) => {
                    created.push(step);
                    plan.push(step);
                }
                None if changes_left == 0 => break,
                None => {}
            }
            continue;
        }
        changes_left -= 1;
        let live: Vec<&Step> = created.iter().filter(|s| !deleted.contains(&(s.kind, s.index))).collect();
        let Some(target) = live.get(rng.random_range(0..live.len().max(1))).copied().copied() else { continue };
        // Sources are never deleted: the rotator keeps targets (they hold signing keys).
        let delete = target.kind != Kind::Source && deleted.len() < counts.total() / 4 && rng.random_bool(1.0 / 3.0);
        if delete {
            deleted.insert((target.kind, target.index));
            plan.push(Step { op: Op::Delete, ..target });
        } else {
            plan.push(Step { op: Op::Update, ..target });
        }
    }
    plan
}

fn ready(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The state and the Ready condition's reason and message, for findings.
fn brief(status: &Value) -> String {
    let ready = status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned().unwrap_or(Value::Null);
    let state = status["state"].as_str().or_else(|| status["reconcileState"].as_str()).unwrap_or("-");
    let message: String = ready["message"].as_str().unwrap_or_default().chars().take(160).collect();
    format!("{state}, Ready={} {}: {message}", ready["status"].as_str().unwrap_or("-"), ready["reason"].as_str().unwrap_or("-"))
}

async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(at).await;
}
