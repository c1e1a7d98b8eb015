//! A Cert's report: the runtime's status, the ACM certificate as last observed, its validation
//! records (as listed, and as Route 53 answers for them at explain time), the ConfigMap it
//! publishes its certificate's ARN in, and the Secret it exports its certificate into (its
//! metadata only, against ACM's serial read at explain time).

use blockwork_aws::mask_accounts;
use blockwork_cert::users::User;
use blockwork_cert::{Cert, CertState};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::ResourceExt;
use kube::core::PartialObjectMeta;

use crate::kinds::deletion::left_to_delete;
use crate::report::{self, Field, Kind, Origin, Owned, Policy, Reference, Report};
use crate::text::{age, ago_or_in};

/// How long ACM usually takes to issue once the validation records resolve.
pub const ACM_USUAL_MINUTES: i64 = 30;

/// A Cert: the runtime's status, the ACM certificate as last observed, its validation records,
/// and `users`, the objects that use it (`blockwork_cert::users`, as read: what holds its
/// deletion and the certificates it replaced).
pub fn cert(cert: &Cert, events: &[Event], users: &[User], now: Timestamp) -> Report {
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
    if let Some(exported) = &observation.export {
        report.observed.push(Field::new(
            "exported",
            format!(
                "into Secret {} (serial {}, expires {}; exported {} ago)",
                exported.secret_name,
                exported.serial,
                exported.not_after.0.strftime("%Y-%m-%d %H:%M UTC"),
                age(exported.exported_at.0, now)
            ),
        ));
    }
    for arn in &observation.previous_certificate_arns {
        let serving = blockwork_cert::users::serving(users, arn);
        let kept = if serving.is_empty() {
            "kept until the new one is issued, then deleted".to_owned()
        } else {
            format!("kept while {} serve(s) it; deleted once none does", blockwork_cert::users::listed(&serving))
        };
        report.observed.push(Field::new("replaced certificate", format!("{} ({kept})", mask_accounts(arn))));
    }
    report.used_by = users
        .iter()
        .map(|user| Reference { what: user.kind.as_str().into(), name: user.name.clone(), state: user.how(), ok: true })
        .collect();
    report.notes.extend(cert_notes(cert, now));
    if report.deleting {
        report.notes.push(if users.is_empty() { deletion_note(cert) } else { held_note(users) });
    }
    report
}

/// A Cert being deleted while in use: who holds it, and the ways out.
fn held_note(users: &[User]) -> String {
    let users: Vec<&User> = users.iter().collect();
    format!(
        "Being deleted, and held: {} use(s) it, so the Cert and its certificate stay until no user is left. Two ways out: remove the reference to this Cert from each user (a tenant's spec.customizations.certificate.certRef, an Ingress's blockwork.dev/certificates), or delete the users; the Cert finishes at once. blockwork.dev/deletion-policy=Orphan releases it now and keeps its certificate.",
        blockwork_cert::users::listed(&users)
    )
}

/// What the deletion of a Cert still deletes: with deleteOnRemoval its certificates, then the
/// validation records it wrote; without, nothing.
fn deletion_note(cert: &Cert) -> String {
    if !cert.spec.delete_on_removal {
        return "Being deleted: the ACM certificate and its validation records are kept (deleteOnRemoval is false); nothing to delete."
            .to_owned();
    }
    let observation = cert.status.as_ref().map(|s| &s.observation);
    let mut left: Vec<String> = observation
        .map(|o| {
            o.certificate_arn
                .iter()
                .chain(&o.previous_certificate_arns)
                .map(|arn| format!("the ACM certificate {}", mask_accounts(arn)))
                .collect()
        })
        .unwrap_or_default();
    let records: Vec<String> = observation
        .map(|o| o.validation_records.iter().filter(|r| r.owned).map(|r| format!("{} in hosted zone {}", r.name, r.zone_id)).collect())
        .unwrap_or_default();
    if !records.is_empty() {
        left.push(format!("the validation records {}", records.join(", ")));
    }
    left_to_delete(&left)
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
    if let (Some(acm), Some(exported)) = (&observation.expiration_date, &observation.export)
        && acm.0 > exported.not_after.0
    {
        notes.push(format!(
            "ACM renewed the certificate (it now expires {}) but Secret {} still holds the one before (expires {}): the controller exports it again once the certificate listing's next sweep shows the renewal (5 minutes by default); if this lasts, see the Exported condition.",
            acm.0.strftime("%Y-%m-%d"),
            exported.secret_name,
            exported.not_after.0.strftime("%Y-%m-%d")
        ));
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

/// The Secret a Cert exports its certificate into (`spec.export`), as its metadata reads
/// (`None`: it does not exist), against ACM's serial read at explain time (`None`: not read).
pub fn exported_secret(cert: &Cert, found: Option<&PartialObjectMeta<Secret>>, acm_serial: Option<&str>) -> Option<Owned> {
    use blockwork_cert::export::secret::{ANNOTATION_EXPORTED_AT, ANNOTATION_SERIAL, LABEL_CERT_UID};
    let export = cert.spec.export.as_ref()?;
    let issued = cert.status.as_ref().is_some_and(|s| s.observation.cert_ready);
    let (state, ready) = match found {
        None if !issued => ("not written until the certificate is issued".to_owned(), false),
        None => (
            "missing: the controller writes it again at once (drift-policy enforce), or says why in the Exported condition".to_owned(),
            false,
        ),
        Some(found) if found.labels().get(LABEL_CERT_UID) != cert.uid().as_ref() => {
            ("someone else's: never overwritten (delete it, or choose another spec.export.secretName)".to_owned(), false)
        }
        Some(found) => {
            let serial = found.annotations().get(ANNOTATION_SERIAL).map_or("(none)", String::as_str);
            let at = found.annotations().get(ANNOTATION_EXPORTED_AT).map(|t| format!(", exported at {t}")).unwrap_or_default();
            match acm_serial {
                Some(acm) if same_serial(acm, serial) => (format!("exported: serial {serial}, the same as ACM's{at}"), true),
                Some(acm) => (
                    format!(
                        "serial {serial}, but ACM's certificate is serial {acm}: it lags ACM's renewal until the listing's next sweep{at}"
                    ),
                    false,
                ),
                None => (format!("exported: serial {serial} (ACM's not read){at}"), true),
            }
        }
    };
    Some(Owned { kind: "Secret".into(), name: export.secret_name.clone(), state, ready })
}

/// Whether two serial numbers are the same: ACM shows them as hex bytes separated by colons (moto
/// as a decimal number); leading zeros and case aside.
pub fn same_serial(a: &str, b: &str) -> bool {
    let hex = |serial: &str| -> Option<String> {
        let digits: String = if serial.contains(':') || serial.chars().any(|c| c.is_ascii_alphabetic()) {
            serial.chars().filter(char::is_ascii_hexdigit).collect::<String>().to_ascii_lowercase()
        } else {
            decimal_to_hex(serial)?
        };
        Some(digits.trim_start_matches('0').to_owned())
    };
    hex(a).is_some_and(|a| hex(b).is_some_and(|b| a == b))
}

/// A decimal number of any length in hex (lowercase), by long division.
fn decimal_to_hex(decimal: &str) -> Option<String> {
    let mut digits: Vec<u32> = decimal.trim().chars().map(|c| c.to_digit(10)).collect::<Option<_>>()?;
    let mut hex = Vec::new();
    while digits.iter().any(|d| *d != 0) {
        let mut remainder = 0;
        for digit in &mut digits {
            let value = remainder * 10 + *digit;
            *digit = value / 16;
            remainder = value % 16;
        }
        hex.push(char::from_digit(remainder, 16)?);
    }
    Some(hex.iter().rev().collect())
}

fn zone_name(name: Option<&str>, id: Option<&str>) -> String {
    match (name, id) {
        (Some(name), Some(id)) => format!("{name} ({id})"),
        (Some(one), None) | (None, Some(one)) => one.to_owned(),
        (None, None) => "(unnamed)".to_owned(),
    }
}

/// A Cert another object depends on: its state and whether it is Ready, in a few words.
pub(super) fn cert_reference(issuing: &Cert, now: Timestamp) -> Reference {
    let report = cert(issuing, &[], &[], now);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::fixtures::{at, validating_cert};

    fn user(kind: blockwork_cert::users::UserKind, name: &str, serves: &[&str]) -> User {
        User { kind, name: name.into(), names_it: serves.is_empty(), serves: serves.iter().map(|s| (*s).to_owned()).collect() }
    }

    #[test]
    fn a_cert_being_deleted_while_in_use_names_its_users_and_the_ways_out() {
        let mut held = validating_cert(false);
        held.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)));
        let users = [
            user(blockwork_cert::users::UserKind::DistributionTenant, "shop", &[]),
            user(blockwork_cert::users::UserKind::Ingress, "web", &[]),
        ];
        let report = cert(&held, &[], &users, at(60));
        let used: Vec<(&str, &str)> = report.used_by.iter().map(|u| (u.what.as_str(), u.name.as_str())).collect();
        assert_eq!(used, [("DistributionTenant", "shop"), ("Ingress", "web")]);
        let note = report.notes.last().expect("a note");
        assert!(
            note.starts_with(
                "Being deleted, and held: DistributionTenant shop (named in spec.customizations.certificate.certRef), Ingress web"
            ),
            "{note}"
        );
        assert!(note.contains("remove the reference to this Cert from each user") && note.contains("or delete the users"), "{note}");
        assert!(cert(&held, &[], &[], at(60)).notes.last().is_some_and(|n| !n.contains("held")), "no user, the usual deletion note");
    }

    #[test]
    fn a_replaced_certificate_a_user_still_serves_is_said_to_be_kept_for_it() {
        const OLD: &str = "arn:aws:acm:us-east-1:123456789012:certificate/old";
        let mut replacing = validating_cert(false);
        if let Some(status) = replacing.status.as_mut() {
            status.observation.previous_certificate_arns = vec![OLD.into()];
        }
        let users = [user(blockwork_cert::users::UserKind::DistributionTenant, "shop", &[OLD])];
        let report = cert(&replacing, &[], &users, at(60));
        let kept = report.observed.iter().find(|f| f.label == "replaced certificate").expect("listed");
        assert_eq!(
            kept.value,
            "arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/old (kept while DistributionTenant shop (serves arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/old) serve(s) it; deleted once none does)"
        );
    }

    #[test]
    fn a_cert_waiting_longer_than_acm_usually_takes_says_where_to_look() {
        let report = cert(&validating_cert(false), &[], &[], at(43 * 60));
        let note = report.notes.first().expect("a note");
        assert!(
            note.starts_with(
                "DNS validation of api-prod.k8s.example.com pending for 43m: the CNAME _x.api-prod.k8s.example.com. is written in zone Z123"
            ),
            "{note}"
        );
        assert!(note.contains("longer than the usual 30 min") && note.contains("`dig CNAME _x.api-prod.k8s.example.com.`"), "{note}");
        assert!(!cert(&validating_cert(false), &[], &[], at(10 * 60)).notes[0].contains("longer than the usual"), "10 minutes is usual");
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
        let report = cert(&validating_cert(true), &[], &[], at(60));
        assert!(report.notes[0].contains("0 of 1 validation record(s) written to zone Z123"), "{:?}", report.notes);
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

    #[test]
    fn an_exported_secret_is_shown_with_its_serial_against_acm_s_and_someone_else_s_is_named() {
        use blockwork_cert::export::secret::{ANNOTATION_SERIAL, LABEL_CERT_UID};
        let mut cert = validating_cert(false);
        cert.metadata.uid = Some("uid-1".into());
        cert.spec.export = Some(blockwork_cert::api::ExportSpec { secret_name: "api-tls".into(), secret_template: None });
        assert!(exported_secret(&cert, None, None).expect("exports").state.starts_with("not written until"));
        if let Some(status) = cert.status.as_mut() {
            status.observation.cert_ready = true;
        }
        let mut found: PartialObjectMeta<Secret> = PartialObjectMeta::default();
        found.metadata.labels = Some([(LABEL_CERT_UID.to_owned(), "uid-1".to_owned())].into());
        found.metadata.annotations = Some([(ANNOTATION_SERIAL.to_owned(), "0a:bc".to_owned())].into());
        let current = exported_secret(&cert, Some(&found), Some("0a:bc")).expect("exports");
        assert_eq!((current.kind.as_str(), current.name.as_str(), current.ready), ("Secret", "api-tls", true));
        assert!(current.state.contains("serial 0a:bc, the same as ACM's"), "{current:?}");
        let lagging = exported_secret(&cert, Some(&found), Some("0f:00")).expect("exports");
        assert!(!lagging.ready && lagging.state.contains("ACM's certificate is serial 0f:00"), "{lagging:?}");
        found.metadata.labels = None;
        assert!(exported_secret(&cert, Some(&found), Some("0a:bc")).expect("exports").state.starts_with("someone else's"));
        assert!(exported_secret(&cert, None, None).expect("exports").state.starts_with("missing"));
    }

    #[test]
    fn serials_compare_whether_acm_shows_them_in_hex_or_moto_in_decimal() {
        assert!(same_serial("0a:bc:01", "AB:C01"));
        assert!(same_serial("703489", "0a:bc:01"), "703489 is 0xabc01");
        assert!(!same_serial("0a:bc:02", "703489"));
        let big = "1461501637330902918203684832716283019655932542975";
        assert!(same_serial(big, "ff:".repeat(20).trim_end_matches(':')), "2^160 - 1");
    }
}
