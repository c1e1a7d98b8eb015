//! The rotator's reports: a source Secret (whether its target holds its certificate, or why
//! not) and a target Secret (its key slots, who rotates it).

use blockwork_rotator::Keys;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::ResourceExt;

use crate::report::{ErrorView, Field, Kind, Origin, Policy, Reference, Report};
use crate::text::ago_or_in;

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
