//! One [`Report`] builder per kind: pure functions of the objects as read, and the time now.
//! Here is what only the kind knows — a Cert's validation records and expiry, a tenant's DNS and
//! managed certificate, a Cache's pods, a rotator target's key slots — written as notes with the
//! numbers a person needs.

use blockwork_aws::mask_accounts;
use blockwork_cache::api::{Cache, Phase};
use blockwork_cert::{Cert, CertState};
use blockwork_rotator::Keys;
use blockwork_tenant::DistributionTenant;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use kube::ResourceExt;

use crate::report::{self, ConditionView, ErrorView, Field, Kind, Origin, Owned, Policy, Reference, Report};
use crate::text::{age, ago_or_in};

/// How long ACM usually takes to issue once the validation records resolve.
pub const ACM_USUAL_MINUTES: i64 = 30;

/// A Cert: the runtime's status, the ACM certificate as last observed, its validation records.
pub fn cert(cert: &Cert, events: &[Event], now: Timestamp) -> Report {
    let mut report = Report::new(Kind::Cert, &cert.namespace().unwrap_or_default(), &cert.name_any());
    report.deleting = cert.metadata.deletion_timestamp.is_some();
    report::runtime_status(&mut report, cert.status.as_ref(), cert.metadata.generation);
    report.set_events(events);
    report.policies = report::runtime_policies(cert.annotations(), None, ("enforce", "the controller's"), "Delete");
    report.policies.push(Policy {
        name: "deleteOnRemoval",
        value: cert.spec.delete_on_removal.to_string(),
        origin: Origin::Spec,
        source: "spec.deleteOnRemoval; the ACM certificate and its records go with the Cert only when true".to_owned(),
    });
    let Some(status) = cert.status.as_ref() else { return report };
    let observation = &status.observation;
    report.operator_state = observation.state.map(|s| s.as_str().to_owned());
    match &observation.resolved_zone {
        Some(zone) => report.references.push(Reference {
            what: "hosted zone".into(),
            name: zone_name(zone.name.as_deref(), zone.id.as_deref()),
            state: "one of the controller's --dns-zones".into(),
            ok: true,
        }),
        None if cert.spec.dns_zone.is_some() || cert.spec.domain_name.is_some() => report.references.push(Reference {
            what: "hosted zone".into(),
            name: cert
                .spec
                .dns_zone
                .as_ref()
                .map(|z| zone_name(z.name.as_deref(), z.id.as_deref()))
                .unwrap_or_else(|| "(by domain)".into()),
            state: "not resolved yet".into(),
            ok: false,
        }),
        None => {}
    }
    if let Some(domain) = &observation.domain_name {
        report.observed.push(Field::new("domain", domain));
    }
    if !cert.spec.subject_alternative_names.is_empty() {
        report.observed.push(Field::new("alternative names", cert.spec.subject_alternative_names.join(", ")));
    }
    if let Some(arn) = &observation.certificate_arn {
        report.observed.push(Field::new("ARN", mask_accounts(arn)));
    }
    let acm_status = match (observation.cert_ready, observation.state) {
        (true, _) => Some("ISSUED"),
        (false, Some(CertState::Created | CertState::Validated)) => Some("PENDING_VALIDATION"),
        _ => None,
    };
    if let Some(acm_status) = acm_status {
        report.observed.push(Field::new("ACM status", acm_status));
    }
    if let Some(expiry) = &observation.expiration_date {
        report.observed.push(Field::new("expires", format!("{} ({})", expiry.0.strftime("%Y-%m-%d %H:%M UTC"), ago_or_in(expiry.0, now))));
    }
    if let Some(renewal) = &observation.renewal_status {
        report.observed.push(Field::new("renewal", renewal));
    }
    for record in &observation.validation_records {
        let written = if record.pending { "listed, not written yet" } else { "written" };
        let owner = if record.owned { "made by Blockwork" } else { "someone else's, shared" };
        report.observed.push(Field::new(
            "validation record",
            format!("{} CNAME {} in zone {} ({written}; {owner})", record.name, record.value, record.zone_id),
        ));
    }
    if !observation.previous_certificate_arns.is_empty() {
        report.observed.push(Field::new(
            "replaced certificates",
            format!("{} kept until the new one is issued", observation.previous_certificate_arns.len()),
        ));
    }
    report.notes.extend(cert_notes(cert, now));
    report
}

/// A Cert waiting for ACM: for how long, which records are in which zone, what is usual.
fn cert_notes(cert: &Cert, now: Timestamp) -> Vec<String> {
    let Some(status) = cert.status.as_ref() else { return Vec::new() };
    let observation = &status.observation;
    let mut notes = Vec::new();
    let validating = matches!(observation.state, Some(CertState::Created | CertState::Validated)) && !observation.cert_ready;
    if validating {
        let since = status.reconcile_state_since.as_ref().map(|t| t.0);
        let waited = since.map(|s| format!(" for {}", age(s, now))).unwrap_or_default();
        let records = &observation.validation_records;
        let written: Vec<&str> = records.iter().filter(|r| !r.pending).map(|r| r.name.as_str()).collect();
        let zones: Vec<&str> = {
            let mut zones: Vec<&str> = records.iter().map(|r| r.zone_id.as_str()).collect();
            zones.dedup();
            zones
        };
        let domain = observation.domain_name.as_deref().unwrap_or("the domain");
        if records.is_empty() {
            notes.push(format!(
                "DNS validation of {domain} pending{waited}: ACM has not published the validation records yet (usually seconds after the request); the controller writes them on its next look."
            ));
        } else if written.len() < records.len() {
            notes.push(format!(
                "DNS validation of {domain} pending{waited}: {} of {} validation record(s) written to zone {}; the rest are written on the controller's next look.",
                written.len(),
                records.len(),
                zones.join(", ")
            ));
        } else {
            let overdue = since.is_some_and(|s| now.duration_since(s).as_secs() > ACM_USUAL_MINUTES * 60);
            let advice = if overdue {
                format!(
                    " That is longer than the usual {ACM_USUAL_MINUTES} min: check that zone {} is the one the public DNS delegates to (`dig CNAME {}`).",
                    zones.join(", "),
                    written.first().copied().unwrap_or(domain)
                )
            } else {
                String::new()
            };
            notes.push(format!(
                "DNS validation of {domain} pending{waited}: the CNAME {} is written in zone {}; ACM usually issues within {ACM_USUAL_MINUTES} min once it resolves, and the Cert fails after the controller's --validation-timeout (72 h by default).{advice}",
                written.join(", "),
                zones.join(", ")
            ));
        }
    }
    if let Some(expiry) = &observation.expiration_date {
        let days = expiry.0.duration_since(now).as_secs() / 86_400;
        if observation.cert_ready && days < 30 && observation.renewal_status.as_deref() != Some("SUCCESS") {
            notes.push(format!(
                "The certificate expires in {days} days and ACM has not renewed it (renewal: {}): ACM renews only certificates in use whose validation records still resolve.",
                observation.renewal_status.as_deref().unwrap_or("not started")
            ));
        }
    }
    notes
}

/// A validation record a Cert has written, as Route 53 answers for it at explain time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordNow {
    pub zone_id: String,
    pub name: String,
    /// The value ACM asked for.
    pub want: String,
    /// The CNAME's value in the zone now (`None`: no CNAME of that name); the error when Route 53
    /// could not be read.
    pub found: Result<Option<String>, String>,
    /// The change that wrote it, as Route 53 reports it now (`None`: the Cert records no change
    /// id for it — a record it did not write); the error when it could not be read.
    pub change: Option<Result<ChangeNow, String>>,
}

/// A Route 53 change as GetChange answers at explain time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeNow {
    pub id: String,
    /// INSYNC (every Route 53 name server answers with the change), else PENDING.
    pub in_sync: bool,
    pub submitted_at: Option<Timestamp>,
}

impl RecordNow {
    pub fn of(record: &blockwork_cert::ValidationRecordStatus, found: Result<Option<String>, String>) -> Self {
        Self { zone_id: record.zone_id.clone(), name: record.name.clone(), want: record.value.clone(), found, change: None }
    }
}

/// Route 53 applies a change on every name server within about a minute; a change PENDING
/// longer than this is unusual.
const ROUTE53_USUAL_MINUTES: i64 = 5;

/// What `explain` says of the validation records as Route 53 has them now: present with ACM's
/// value, missing, or with another value, and whether the change that wrote each is PENDING or
/// INSYNC (with its age) — never more than was read.
pub fn records_now_note(records: &[RecordNow], now: Timestamp) -> Option<String> {
    if records.is_empty() {
        return None;
    }
    let said: Vec<String> = records
        .iter()
        .map(|record| {
            let found = match &record.found {
                Ok(Some(value)) if same_name(value, &record.want) => {
                    format!("the CNAME {} is in zone {} with the value ACM asked for", record.name, record.zone_id)
                }
                Ok(Some(value)) => format!(
                    "the CNAME {} is in zone {} with the value {value}, not ACM's {}: someone else's record stands in the way (change it, or delete it and let the controller write it)",
                    record.name, record.zone_id, record.want
                ),
                Ok(None) => format!(
                    "the CNAME {} is NOT in zone {}: the controller writes it on its next look; if it stays missing, read the Cert's events and the operator's log for its Route 53 writes",
                    record.name, record.zone_id
                ),
                Err(error) => format!("the CNAME {} in zone {} could not be read: {error}", record.name, record.zone_id),
            };
            format!("{found}{}", change_said(record.change.as_ref(), now))
        })
        .collect();
    Some(format!("Route 53 now (read by explain): {}.", said.join("; ")))
}

/// ", and INSYNC (change C1, submitted 43m ago)" and the like, for [`records_now_note`].
fn change_said(change: Option<&Result<ChangeNow, String>>, now: Timestamp) -> String {
    let Some(change) = change else {
        return " (the Cert records no Route 53 change for it — a record it did not write, or wrote before Blockwork recorded change ids — so whether it is INSYNC is not checked)"
            .to_owned();
    };
    let change = match change {
        Ok(change) => change,
        Err(error) => return format!(" (whether its change is INSYNC could not be read: {error})"),
    };
    let id = change.id.trim_start_matches("/change/");
    let submitted = change.submitted_at.map(|at| format!(", submitted {} ago", age(at, now))).unwrap_or_default();
    if change.in_sync {
        return format!(", and INSYNC (change {id}{submitted}): every Route 53 name server answers with it");
    }
    let overdue = change.submitted_at.is_some_and(|at| now.duration_since(at).as_secs() > ROUTE53_USUAL_MINUTES * 60);
    let advice = if overdue {
        format!("; longer than the usual minute or so: check the AWS Health Dashboard for Route 53 and `aws route53 get-change --id {id}`")
    } else {
        "; Route 53 usually applies a change within a minute".to_owned()
    };
    format!(", and PENDING (change {id}{submitted}): not yet on every Route 53 name server{advice}")
}

fn same_name(a: &str, b: &str) -> bool {
    a.trim_end_matches('.').eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// The written validation records of a Cert waiting for ACM (none for any other Cert).
pub fn records_to_read(cert: &Cert) -> Vec<&blockwork_cert::ValidationRecordStatus> {
    let Some(status) = cert.status.as_ref() else { return Vec::new() };
    let observation = &status.observation;
    let validating = matches!(observation.state, Some(CertState::Created | CertState::Validated)) && !observation.cert_ready;
    if !validating {
        return Vec::new();
    }
    observation.validation_records.iter().filter(|r| !r.pending).collect()
}

/// The ConfigMap a Cert publishes its certificate's ARN in (`blockwork_cert::publish`), as read
/// (`None`: it does not exist), against what the Cert would publish now.
pub fn published(cert: &Cert, configmap: Option<&ConfigMap>) -> Option<Owned> {
    let name = blockwork_cert::publish::configmap_name(&cert.name_any())?;
    let observation = cert.status.as_ref().map(|s| &s.observation);
    let issued = observation.is_some_and(|o| o.cert_ready);
    let want = observation.and_then(blockwork_cert::publish::data);
    let (state, ready) = match configmap {
        None if !issued => ("not published until the certificate is issued".to_owned(), false),
        None => ("missing: the controller writes it on its next look at the Cert".to_owned(), false),
        Some(found) if !blockwork_cert::publish::owned_by(found, &cert.uid().unwrap_or_default()) => {
            ("someone else's: the certificate ARN is not published there (rename or delete it)".to_owned(), false)
        }
        Some(found) if found.data == want => {
            let keys: Vec<&str> = found.data.iter().flatten().map(|(k, _)| k.as_str()).collect();
            (format!("published: {}", keys.join(", ")), true)
        }
        Some(_) => ("out of date: the controller rewrites it on its next look at the Cert".to_owned(), false),
    };
    Some(Owned { kind: "ConfigMap".into(), name, state, ready })
}

fn zone_name(name: Option<&str>, id: Option<&str>) -> String {
    match (name, id) {
        (Some(name), Some(id)) => format!("{name} ({id})"),
        (Some(one), None) | (None, Some(one)) => one.to_owned(),
        (None, None) => "(unnamed)".to_owned(),
    }
}

/// A DistributionTenant: the runtime's status, the tenant in CloudFront, its DNS and managed
/// certificate. `certs` are the Certs of its namespace as read: the one whose ACM certificate the
/// tenant names, if any, is a dependency, shown with its state.
pub fn tenant(tenant: &DistributionTenant, events: &[Event], certs: &[Cert], now: Timestamp) -> Report {
    let mut report = Report::new(Kind::DistributionTenant, &tenant.namespace().unwrap_or_default(), &tenant.name_any());
    report.deleting = tenant.metadata.deletion_timestamp.is_some();
    report::runtime_status(&mut report, tenant.status.as_ref(), tenant.metadata.generation);
    report.set_events(events);
    let spec = &tenant.spec;
    let spec_drift = spec.drift_policy.map(|p| ("spec.driftPolicy", blockwork_runtime::DriftPolicy::from(p).to_string()));
    report.policies = report::runtime_policies(
        tenant.annotations(),
        spec_drift,
        ("enforce", "the controller's --drift-policy (enforce unless set)"),
        "Delete",
    );
    let conditions = report.conditions.clone();
    let condition = |type_: &str| conditions.iter().find(|c| c.type_ == type_).cloned();
    report.references.push(Reference {
        what: "distribution".into(),
        name: spec.distribution_id.clone(),
        state: match report.last_error.as_ref().map(|e| e.reason.as_str()) {
            Some("DistributionNotFound") => "not found".into(),
            _ => "named in spec.distributionId".into(),
        },
        ok: report.last_error.as_ref().is_none_or(|e| e.reason != "DistributionNotFound"),
    });
    if let Some(group) = &spec.connection_group_id {
        let missing = report.last_error.as_ref().is_some_and(|e| e.reason == "ConnectionGroupNotFound");
        report.references.push(Reference {
            what: "connection group".into(),
            name: group.clone(),
            state: if missing { "not found".into() } else { "named in spec.connectionGroupId".into() },
            ok: !missing,
        });
    }
    if let Some(certificate) = spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()) {
        let certificate_ready = condition(blockwork_tenant::api::CERTIFICATE_READY);
        report.references.push(Reference {
            what: "certificate".into(),
            name: mask_accounts(&certificate.arn),
            state: certificate_ready.as_ref().map(|c| c.reason.clone()).unwrap_or_else(|| "named in the spec".into()),
            ok: certificate_ready.as_ref().is_none_or(ConditionView::is_true),
        });
        let issuing = certs
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.observation.certificate_arn.as_deref()) == Some(certificate.arn.as_str()));
        if let Some(issuing) = issuing {
            report.references.push(cert_reference(issuing, now));
        }
    }
    if let Some(dns) = &spec.dns {
        let dns_ready = condition(blockwork_tenant::api::DNS_READY);
        report.references.push(Reference {
            what: "hosted zone".into(),
            name: dns.hosted_zone_id.clone(),
            state: dns_ready.as_ref().map(|c| format!("{} ({})", c.reason, c.message)).unwrap_or_else(|| "not written yet".into()),
            ok: dns_ready.as_ref().is_some_and(ConditionView::is_true),
        });
    }
    report.observed.push(Field::new("domains", spec.domains.iter().map(|d| d.domain.as_str()).collect::<Vec<_>>().join(", ")));
    let Some(status) = tenant.status.as_ref() else { return report };
    let observation = &status.observation;
    if let Some(id) = &observation.id {
        report.observed.push(Field::new("tenant id", id));
    }
    if let Some(arn) = &observation.arn {
        report.observed.push(Field::new("ARN", mask_accounts(arn)));
    }
    if let Some(aws_status) = &observation.distribution_tenant_status {
        report.observed.push(Field::new("CloudFront status", aws_status));
    }
    if let Some(target) = &observation.dns_target {
        report.observed.push(Field::new("DNS target", target));
    }
    if !observation.dns_records.is_empty() {
        report.observed.push(Field::new("DNS records (CNAME, made by Blockwork)", observation.dns_records.join(", ")));
    }
    if let Some(change) = &observation.dns_change_id {
        report.observed.push(Field::new("last Route53 change", change));
    }
    if let Some(certificate_status) = &observation.managed_certificate_status {
        report.observed.push(Field::new("managed certificate", certificate_status));
    }
    if let Some(arn) = &observation.certificate_arn {
        report.observed.push(Field::new("managed certificate ARN", mask_accounts(arn)));
    }
    if let Some(dns) =
        condition(blockwork_tenant::api::DNS_READY).filter(|c| c.reason == "DNSPropagating" || c.reason == "DNSRecordCreating")
    {
        report.notes.push(format!(
            "DNS change {} submitted to zone {} {} and not INSYNC yet; Route53 usually takes under a minute.",
            observation.dns_change_id.as_deref().unwrap_or("(unknown)"),
            spec.dns.as_ref().map(|d| d.hosted_zone_id.as_str()).unwrap_or("?"),
            ago_or_in(dns.since, now)
        ));
    }
    if observation.distribution_tenant_status.as_deref() == Some("InProgress") {
        report.notes.push("CloudFront is deploying the tenant's last change (InProgress, usually a few minutes).".to_owned());
    }
    report
}

/// A Cert another object depends on: its state and whether it is Ready, in a few words.
fn cert_reference(issuing: &Cert, now: Timestamp) -> Reference {
    let report = cert(issuing, &[], now);
    let since = report.state_since.map(|s| format!(" for {}", age(s, now))).unwrap_or_default();
    let ready = report.ready == Some(true);
    let why = report
        .last_error
        .as_ref()
        .map(|e| format!(": {}", e.reason))
        .or_else(|| report.condition("Ready").filter(|c| !c.is_true()).map(|c| format!(": {}", c.reason)))
        .unwrap_or_default();
    Reference {
        what: "Cert".into(),
        name: report.name.clone(),
        state: format!(
            "{}{since}, {}{why} (`blockwork explain {}`)",
            report.state,
            if ready { "Ready" } else { "not Ready" },
            report.reference()
        ),
        ok: ready,
    }
}

/// What a Cache owns and references, as read.
#[derive(Clone, Debug, Default)]
pub struct CacheObjects {
    pub stateful_set: Option<StatefulSet>,
    pub services: Vec<Service>,
    pub pods: Vec<Pod>,
    /// The TLS Secret the spec names, if it names one: `None` when it does not exist.
    pub tls_secret: Option<Option<Secret>>,
}

/// A Cache: its phase and conditions, the StatefulSet, Services and pods it owns, its TLS Secret.
pub fn cache(cache: &Cache, events: &[Event], objects: &CacheObjects, now: Timestamp) -> Report {
    let mut report = Report::new(Kind::Cache, &cache.namespace().unwrap_or_default(), &cache.name_any());
    report.deleting = cache.metadata.deletion_timestamp.is_some();
    report.set_events(events);
    let status = cache.status.clone().unwrap_or_default();
    report.state = status.phase.map(|p| format!("{p:?}")).unwrap_or_else(|| "New".to_owned());
    report.conditions = status.conditions.iter().map(ConditionView::from_condition).collect();
    report.ready = Some(status.phase == Some(Phase::Ready));
    report.state_since = report.condition("Ready").map(|c| c.since);
    report.behind = report::behind(cache.metadata.generation, status.observed_generation);
    report.message = report.condition("Ready").map(|c| c.message.clone()).filter(|m| !m.is_empty());
    // What the controller waits out (`status.lastError`: class and the latest retry); else a
    // failing condition it records no retry for (PrimaryKnown, a pause).
    report.last_error = status.last_error.as_ref().map(ErrorView::from_last_error).or_else(|| {
        report.conditions.iter().find(|c| !c.is_true() && c.type_ != "Ready").map(|c| ErrorView {
            reason: c.reason.clone(),
            message: c.message.clone(),
            class: None,
            since: Some(c.since),
            attempts: None,
            retry_at: None,
        })
    });
    let paused = cache.annotations().get(blockwork_runtime::policy::PAUSED_ANNOTATION);
    report.policies.push(match paused {
        Some(value) => Policy {
            name: "paused",
            value: value.trim().to_owned(),
            origin: Origin::Annotation,
            source: blockwork_runtime::policy::PAUSED_ANNOTATION.to_owned(),
        },
        None => Policy { name: "paused", value: "false".into(), origin: Origin::Default, source: "not annotated".into() },
    });
    report.observed.push(Field::new("engine", format!("{:?}", cache.spec.engine).to_lowercase()));
    report.observed.push(Field::new("replicas", format!("{} ready of {}", status.ready_replicas, cache.spec.replicas)));
    if let Some(endpoint) = &status.endpoint {
        report.observed.push(Field::new("endpoint", endpoint));
    }
    if let Some(primary) = &status.primary {
        // Whether Sentinel said so at the last look, or this is the last primary known.
        let current = report.condition(blockwork_cache::sentinel::PRIMARY_KNOWN).is_none_or(|c| c.is_true());
        report.observed.push(Field::new("primary", if current { primary.clone() } else { format!("{primary} (last known)") }));
    }
    if let Some(failover) = &status.last_failover {
        let when = crate::text::ago_or_in(failover.time.0, now);
        report.observed.push(Field::new("last failover", format!("{} → {}, {when} ({})", failover.from, failover.to, failover.time.0)));
    }
    if let Some(name) = blockwork_cache::refs::tls_secret_name(cache) {
        let (state, ok) = match &objects.tls_secret {
            Some(Some(secret)) => {
                let data = secret.data.clone().unwrap_or_default();
                let missing: Vec<&str> =
                    ["tls.crt", "tls.key"].into_iter().filter(|k| data.get(*k).is_none_or(|v| v.0.is_empty())).collect();
                if missing.is_empty() {
                    ("exists with tls.crt and tls.key".to_owned(), true)
                } else {
                    (format!("lacks {}", missing.join(", ")), false)
                }
            }
            Some(None) => ("does not exist (read now)".to_owned(), false),
            None => ("not read".to_owned(), false),
        };
        report.references.push(Reference { what: "TLS Secret".into(), name: name.to_owned(), state, ok });
    }
    if let Some(sts) = &objects.stateful_set {
        let sts_status = sts.status.clone().unwrap_or_default();
        let wanted = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready = sts_status.ready_replicas.unwrap_or(0);
        report.owned.push(Owned {
            kind: "StatefulSet".into(),
            name: sts.name_any(),
            state: format!("{ready}/{wanted} ready, {} created", sts_status.replicas),
            ready: ready >= wanted,
        });
    } else {
        report.owned.push(Owned {
            kind: "StatefulSet".into(),
            name: blockwork_cache::shape::resource_name(cache),
            state: "missing".into(),
            ready: false,
        });
    }
    for service in &objects.services {
        let headless = service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
        report.owned.push(Owned {
            kind: "Service".into(),
            name: service.name_any(),
            state: if headless { "headless".into() } else { "exists".into() },
            ready: true,
        });
    }
    for pod in &objects.pods {
        let (state, ready) = pod_state(pod, now);
        report.owned.push(Owned { kind: "Pod".into(), name: pod.name_any(), state, ready });
    }
    if status.phase != Some(Phase::Ready) && objects.pods.is_empty() && objects.stateful_set.is_some() {
        report.notes.push(
            "The StatefulSet has no pods: nothing has created them yet (is the cluster's controller-manager running? a quota or an admission webhook refusing them shows in `kubectl describe statefulset`)."
                .to_owned(),
        );
    }
    report
}

/// A pod's readiness in a few words, with why it is not ready where the pod says.
pub fn pod_state(pod: &Pod, now: Timestamp) -> (String, bool) {
    let status = pod.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
    if ready {
        let started = status.start_time.as_ref().map(|t| format!(", up {}", age(t.0, now))).unwrap_or_default();
        return (format!("{phase}, ready{started}"), true);
    }
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref()).map(|w| w.reason.clone().unwrap_or_default()));
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| format!("{}: {}", c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()));
    let why = waiting.or(unschedulable).map(|w| format!(" ({w})")).unwrap_or_default();
    (format!("{phase}, not ready{why}"), false)
}

/// The rotator's view of a source Secret and its target.
#[derive(Clone, Debug, Default)]
pub struct RotatorObjects {
    /// The target the source names, if it exists.
    pub target: Option<Secret>,
    /// The events about the source: why the rotator writes nothing, as warnings.
    pub source_events: Vec<Event>,
    /// The events about the target: each write the rotator makes (read for `explain` only).
    pub target_events: Vec<Event>,
}

/// Reasons the rotator gives when it writes nothing.
const BLOCKED: &[&str] = &["InvalidSource", "InvalidDestination", "TargetNotManaged", "TargetConflict", "InvalidAnnotation", "WriteFailed"];

/// A source Secret: whether its target holds its certificate as next-tls, or why not.
pub fn rotator_source(source: &Secret, keys: &Keys, objects: &RotatorObjects, now: Timestamp) -> Report {
    let mut report = Report::new(Kind::RotatorSource, &source.namespace().unwrap_or_default(), &source.name_any());
    report.deleting = source.metadata.deletion_timestamp.is_some();
    report.set_events(&[objects.source_events.as_slice(), objects.target_events.as_slice()].concat());
    let annotations = source.annotations();
    let destination = annotations.get(&keys.destination).map(|d| d.trim().to_owned());
    let source_crt = secret_bytes(source, "tls.crt");
    let target = objects.target.as_ref();
    let claimed = target.and_then(|t| keys.claimed_by(t.annotations())).map(str::to_owned);
    let in_sync = target.is_some_and(|t| {
        claimed.as_deref() == Some(source.name_any().as_str())
            && !source_crt.is_empty()
            && t.annotations().get(&keys.next_cert_sha256).map(String::as_str)
                == Some(blockwork_rotator::kid::cert_sha256(&source_crt).as_str())
    });
    let last_rotation = target.and_then(|t| t.annotations().get(&keys.last_rotation_time)).and_then(|t| t.parse::<Timestamp>().ok());
    // The newest warning about the source that no later write answered.
    let blocked = report
        .events
        .iter()
        .find(|e| BLOCKED.contains(&e.reason.as_str()))
        .filter(|e| e.is_warning() && !(in_sync && e.last_seen <= last_rotation))
        .cloned();
    report.state = match (&blocked, in_sync) {
        (Some(_), _) if !in_sync => "Blocked".to_owned(),
        (_, true) => "InSync".to_owned(),
        _ => "Pending".to_owned(),
    };
    report.ready = Some(in_sync);
    report.state_since = if in_sync { last_rotation } else { blocked.as_ref().and_then(|e| e.last_seen) };
    if let Some(event) = blocked.filter(|_| !in_sync) {
        // The rotator's note starts with the class and the retry delay (blockwork_rotator::failure);
        // an older rotator's has neither.
        let (retry, message) = match blockwork_rotator::failure::parse(&event.note) {
            Some((retry, message)) => (Some(retry), message.to_owned()),
            None => (None, event.note.clone()),
        };
        report.message = Some(message.clone());
        report.last_error = Some(ErrorView {
            reason: event.reason.clone(),
            message,
            class: retry.map(|r| format!("{:?}", r.class)),
            since: event.last_seen,
            attempts: Some(u32::try_from(event.count).unwrap_or(1)),
            retry_at: retry.zip(event.last_seen).and_then(|(r, seen)| seen.checked_add(r.after).ok()),
        });
    }
    report.policies.push(Policy {
        name: "jwks",
        value: annotations.get(&keys.jwks).map(|v| v.trim().to_owned()).unwrap_or_else(|| "false".into()),
        origin: if annotations.contains_key(&keys.jwks) { Origin::Annotation } else { Origin::Default },
        source: keys.jwks.clone(),
    });
    match (&destination, target) {
        (None, _) => report.references.push(Reference {
            what: "target".into(),
            name: "(none)".into(),
            state: format!("no {} annotation", keys.destination),
            ok: false,
        }),
        (Some(name), None) => {
            report.references.push(Reference { what: "target".into(), name: name.clone(), state: "does not exist yet".into(), ok: false })
        }
        (Some(name), Some(_)) => {
            let state = match claimed.as_deref() {
                Some(owner) if owner == source.name_any() => {
                    if in_sync {
                        "rotated from this source; next-tls is this source's certificate".to_owned()
                    } else {
                        "rotated from this source; behind it".to_owned()
                    }
                }
                Some(other) => format!("rotated from another source, {other}"),
                None => "exists and is not managed by a rotator".to_owned(),
            };
            report.references.push(Reference { what: "target".into(), name: name.clone(), state, ok: in_sync });
        }
    }
    if !source_crt.is_empty() {
        report.observed.push(Field::new("source certificate", describe_certificate(&source_crt, now)));
    }
    if let Some(target) = target {
        report.observed.extend(slots(target, now));
    }
    report
}

/// A target Secret: its key slots, who rotates it, when it last rotated.
pub fn rotator_target(target: &Secret, keys: &Keys, events: &[Event], now: Timestamp) -> Report {
    let mut report = Report::new(Kind::RotatorTarget, &target.namespace().unwrap_or_default(), &target.name_any());
    report.set_events(events);
    let annotations = target.annotations();
    let last_rotation = annotations.get(&keys.last_rotation_time).and_then(|t| t.parse::<Timestamp>().ok());
    let source_deleted = report.events.first().is_some_and(|e| e.reason == "SourceDeleted");
    report.state = match (keys.claimed_by(annotations), source_deleted) {
        (Some(_), true) => "Orphaned".to_owned(),
        (Some(_), false) => "Managed".to_owned(),
        (None, _) => "NotManaged".to_owned(),
    };
    report.ready = Some(report.state == "Managed");
    report.state_since = last_rotation;
    if let Some(source) = keys.claimed_by(annotations) {
        report.references.push(Reference {
            what: "source".into(),
            name: source.to_owned(),
            state: if source_deleted { "deleted; this target no longer rotates".into() } else { "rotates this target".into() },
            ok: !source_deleted,
        });
    }
    if let Some(rotations) = annotations.get(&keys.rotations) {
        report.observed.push(Field::new("rotations", rotations));
    }
    if let Some(at) = last_rotation {
        report.observed.push(Field::new("last rotation", format!("{} ({})", at.strftime("%Y-%m-%d %H:%M UTC"), ago_or_in(at, now))));
    }
    report.observed.extend(slots(target, now));
    report
}

/// prev-tls, tls and next-tls of a target: key id and certificate expiry.
fn slots(target: &Secret, now: Timestamp) -> Vec<Field> {
    blockwork_rotator::plan::SLOTS
        .iter()
        .map(|slot| {
            let kid = String::from_utf8_lossy(&secret_bytes(target, slot.kid)).into_owned();
            let crt = secret_bytes(target, slot.crt);
            let value = if crt.is_empty() {
                "(empty)".to_owned()
            } else {
                format!("kid {}, {}", if kid.is_empty() { "(none)" } else { kid.as_str() }, describe_certificate(&crt, now))
            };
            Field::new(slot.name, value)
        })
        .collect()
}

fn secret_bytes(secret: &Secret, key: &str) -> Vec<u8> {
    secret.data.as_ref().and_then(|d| d.get(key)).map(|b| b.0.clone()).unwrap_or_default()
}

/// "expires 2027-01-02 (in 40 days)" for the first PEM certificate, or why it cannot be read.
pub fn describe_certificate(pem: &[u8], now: Timestamp) -> String {
    match certificate_expiry(pem) {
        Some(expiry) => format!("expires {} ({})", expiry.strftime("%Y-%m-%d %H:%M UTC"), ago_or_in(expiry, now)),
        None => "not a PEM X.509 certificate".to_owned(),
    }
}

/// The not-after time of the first certificate in a PEM bundle.
pub fn certificate_expiry(pem: &[u8]) -> Option<Timestamp> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let certificate = pem.parse_x509().ok()?;
    Timestamp::from_second(certificate.validity().not_after.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_cert::api::ValidationRecordStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("valid")
    }

    fn validating_cert(pending: bool) -> Cert {
        let mut cert =
            Cert::new("api", blockwork_cert::CertSpec { service_name: "api".into(), environment: "prod".into(), ..Default::default() });
        cert.metadata.namespace = Some("team-a".into());
        let mut status = blockwork_cert::CertStatus {
            reconcile_state: Some(blockwork_runtime::ReconcileState::Verifying),
            reconcile_state_since: Some(Time(at(0))),
            ..Default::default()
        };
        status.observation.state = Some(CertState::Validated);
        status.observation.domain_name = Some("api-prod.k8s.example.com".into());
        status.observation.validation_records = vec![ValidationRecordStatus {
            zone_id: "Z123".into(),
            name: "_x.api-prod.k8s.example.com.".into(),
            value: "_y.acm-validations.aws.".into(),
            owned: true,
            pending,
            change_id: None,
        }];
        cert.status = Some(status);
        cert
    }

    #[test]
    fn a_cert_waiting_longer_than_acm_usually_takes_says_where_to_look() {
        let report = cert(&validating_cert(false), &[], at(43 * 60));
        let note = report.notes.first().expect("a note");
        assert!(
            note.starts_with(
                "DNS validation of api-prod.k8s.example.com pending for 43m: the CNAME _x.api-prod.k8s.example.com. is written in zone Z123"
            ),
            "{note}"
        );
        assert!(note.contains("longer than the usual 30 min") && note.contains("`dig CNAME _x.api-prod.k8s.example.com.`"), "{note}");
        assert!(!cert(&validating_cert(false), &[], at(10 * 60)).notes[0].contains("longer than the usual"), "10 minutes is usual");
    }

    fn written_by(change: Result<ChangeNow, String>) -> Vec<RecordNow> {
        let record = &validating_cert(false).status.expect("a status").observation.validation_records[0];
        vec![RecordNow { change: Some(change), ..RecordNow::of(record, Ok(Some("_y.acm-validations.aws".into()))) }]
    }

    #[test]
    fn an_insync_change_is_named_with_its_zone_and_age() {
        let change = ChangeNow { id: "/change/C1".into(), in_sync: true, submitted_at: Some(at(0)) };
        let note = records_now_note(&written_by(Ok(change)), at(43 * 60)).expect("a note");
        assert!(
            note.contains("the CNAME _x.api-prod.k8s.example.com. is in zone Z123 with the value ACM asked for, and INSYNC (change C1, submitted 43m ago)"),
            "{note}"
        );
    }

    #[test]
    fn a_change_pending_for_minutes_says_where_to_look_and_a_fresh_one_does_not() {
        let change = ChangeNow { id: "/change/C1".into(), in_sync: false, submitted_at: Some(at(0)) };
        let fresh = records_now_note(&written_by(Ok(change.clone())), at(30)).expect("a note");
        assert!(
            fresh.contains("and PENDING (change C1, submitted 30s ago)") && fresh.contains("usually applies a change within a minute"),
            "{fresh}"
        );
        let stuck = records_now_note(&written_by(Ok(change)), at(7 * 60)).expect("a note");
        assert!(stuck.contains("`aws route53 get-change --id C1`"), "{stuck}");
    }

    #[test]
    fn a_change_that_cannot_be_read_is_said_so_not_guessed() {
        let note = records_now_note(&written_by(Err("AccessDenied: no".into())), at(60)).expect("a note");
        assert!(note.contains("whether its change is INSYNC could not be read: AccessDenied: no"), "{note}");
        assert!(!note.contains("and INSYNC") && !note.contains("and PENDING"), "{note}");
    }

    #[test]
    fn a_record_not_written_yet_is_counted() {
        let report = cert(&validating_cert(true), &[], at(60));
        assert!(report.notes[0].contains("0 of 1 validation record(s) written to zone Z123"), "{:?}", report.notes);
    }

    #[test]
    fn a_tenant_names_the_cert_its_certificate_comes_from_and_that_cert_s_wait() {
        const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/abc";
        let mut issuing = validating_cert(false);
        if let Some(status) = issuing.status.as_mut() {
            status.observation.certificate_arn = Some(ARN.into());
        }
        let mut other = validating_cert(false);
        other.metadata.name = Some("web".into());
        let shop = DistributionTenant::new(
            "shop",
            blockwork_tenant::api::DistributionTenantSpec {
                distribution_id: "E123".into(),
                customizations: Some(blockwork_tenant::api::Customizations {
                    certificate: Some(blockwork_tenant::api::CertificateRef { arn: ARN.into() }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let report = tenant(&shop, &[], &[other, issuing], at(43 * 60));
        let cert = report.references.iter().find(|r| r.what == "Cert").expect("the Cert is a dependency");
        assert_eq!(cert.name, "api");
        assert_eq!(cert.state, "Verifying for 43m, not Ready (`blockwork explain cert/api`)");
        assert!(!cert.ok);
        let unrelated = tenant(&shop, &[], &[validating_cert(false)], at(0));
        assert!(unrelated.references.iter().all(|r| r.what != "Cert"), "a Cert of another certificate is no dependency");
    }

    #[test]
    fn a_cert_s_configmap_is_published_only_once_issued_and_only_if_it_is_the_cert_s() {
        let mut cert = validating_cert(false);
        cert.metadata.uid = Some("uid-1".into());
        let pending = published(&cert, None).expect("a name");
        assert_eq!((pending.name.as_str(), pending.ready), ("api-certificate", false));
        assert!(pending.state.starts_with("not published until"), "{pending:?}");

        if let Some(status) = cert.status.as_mut() {
            status.observation.cert_ready = true;
            status.observation.certificate_arn = Some("arn:aws:acm:us-east-1:123456789012:certificate/abc".into());
        }
        assert!(published(&cert, None).expect("a name").state.starts_with("missing"));
        let ours = blockwork_cert::publish::configmap(&cert, &cert.status.as_ref().expect("a status").observation)
            .expect("publishable")
            .expect("an ARN to publish");
        let current = published(&cert, Some(&ours)).expect("a name");
        assert_eq!((current.state.as_str(), current.ready), ("published: certificateArn, domainName", true));
        let mut stale = ours.clone();
        stale.data = Some([("certificateArn".to_owned(), "arn:aws:acm:us-east-1:123456789012:certificate/old".to_owned())].into());
        assert!(published(&cert, Some(&stale)).expect("a name").state.starts_with("out of date"));
        let mut theirs = ours;
        theirs.metadata.owner_references = None;
        assert!(published(&cert, Some(&theirs)).expect("a name").state.starts_with("someone else's"));
    }

    fn failed_over_cache(primary_known: bool) -> Cache {
        let mut cache: Cache = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ha", "namespace": "team-a"},
            "spec": {"engine": "redis", "memory": "64Mi", "replicas": 3, "highAvailability": {"enabled": true}},
            "status": {"phase": "Ready", "readyReplicas": 3, "primary": "ha-cache-1",
                       "lastFailover": {"time": "1970-01-01T00:01:40Z", "from": "ha-cache-0", "to": "ha-cache-1"}},
        }))
        .expect("a Cache");
        let known = blockwork_runtime::status::condition("PrimaryKnown", primary_known, "SentinelReported", "", Some(1));
        cache.status.as_mut().expect("a status").conditions.push(known);
        cache
    }

    #[test]
    fn a_cache_names_its_primary_and_its_last_failover() {
        let report = cache(&failed_over_cache(true), &[], &CacheObjects::default(), at(400));
        let observed: Vec<(&str, &str)> = report.observed.iter().map(|f| (f.label.as_str(), f.value.as_str())).collect();
        assert!(observed.contains(&("primary", "ha-cache-1")), "{observed:?}");
        assert!(observed.contains(&("last failover", "ha-cache-0 → ha-cache-1, 5m ago (1970-01-01T00:01:40Z)")), "{observed:?}");
    }

    #[test]
    fn a_primary_sentinel_no_longer_confirms_is_the_last_known() {
        let report = cache(&failed_over_cache(false), &[], &CacheObjects::default(), at(400));
        assert!(report.observed.iter().any(|f| f.label == "primary" && f.value == "ha-cache-1 (last known)"), "{:?}", report.observed);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status})).expect("a pod")
    }

    #[test]
    fn a_pod_says_why_it_is_not_ready() {
        let pulling = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
            {"name": "redis", "image": "redis", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}
        ]}));
        assert_eq!(pod_state(&pulling, at(0)), ("Pending, not ready (ImagePullBackOff)".to_owned(), false));
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes have enough memory"}
        ]}));
        assert_eq!(pod_state(&unschedulable, at(0)).0, "Pending, not ready (Unschedulable: 0/3 nodes have enough memory)");
        let ready = pod(
            serde_json::json!({"phase": "Running", "startTime": "1970-01-01T00:00:00Z", "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(pod_state(&ready, at(7200)), ("Running, ready, up 2h".to_owned(), true));
    }
}
