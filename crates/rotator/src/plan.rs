//! The rotator's decision, as a pure function: given the source Secret, the target as read (if
//! any) and whether a competing claim on the target is live, what to write (if anything) and why.
//!
//! The write it plans is the commit point of a rotation: it carries the read target's
//! `resourceVersion`, so it succeeds only against the state it was planned from, and it records
//! (`next-cert-sha256`, `rotations`) that the source's certificate is now `next-tls`. Whoever
//! plans again after that write sees `next-tls.crt` equal to the source and does not rotate.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use blockwork_runtime::labels::MANAGED_BY;
pub use blockwork_runtime::labels::MANAGED_BY_LABEL;

use crate::config::{Keys, LEGACY_MANAGED_BY, is_dns_subdomain};
use crate::jwks::{self, JWKS_KEY};
use crate::kid::{cert_sha256, kid};

/// The type every target has.
pub const TLS_TYPE: &str = "kubernetes.io/tls";
/// The source's certificate and key.
pub const SOURCE_CRT: &str = "tls.crt";
pub const SOURCE_KEY: &str = "tls.key";

/// Whether `labels` mark one of the rotator's targets: Blockwork's managed-by label (every
/// target the rotator writes carries it), or the value the rotator wrote before
/// ([`LEGACY_MANAGED_BY`]), so that targets written by an earlier release are still recognized.
pub fn labelled_as_target(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY || value == LEGACY_MANAGED_BY)
}

/// The data keys of one slot of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotKeys {
    pub name: &'static str,
    pub crt: &'static str,
    pub key: &'static str,
    pub kid: &'static str,
}

pub const PREV: SlotKeys = SlotKeys { name: "prev-tls", crt: "prev-tls.crt", key: "prev-tls.key", kid: "prev-tls.kid" };
pub const CURRENT: SlotKeys = SlotKeys { name: "tls", crt: "tls.crt", key: "tls.key", kid: "tls.kid" };
pub const NEXT: SlotKeys = SlotKeys { name: "next-tls", crt: "next-tls.crt", key: "next-tls.key", kid: "next-tls.kid" };
/// prev, current, next: the order of the slots everywhere.
pub const SLOTS: [SlotKeys; 3] = [PREV, CURRENT, NEXT];

/// What the plan is made from.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub keys: &'a Keys,
    /// The source as just read (full object).
    pub source: &'a Secret,
    /// The target as just read, if it exists.
    pub target: Option<&'a Secret>,
    /// When [`claimant`] names another source: whether that source still exists, is a source,
    /// names this target and is not being deleted. Ignored otherwise.
    pub other_claim_active: bool,
    pub now: Timestamp,
}

/// What the plan does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// First sight: create the target with the source in `next-tls.*`.
    Create,
    /// `tls` → `prev-tls`, `next-tls` → `tls`, source → `next-tls`.
    Rotate,
    /// Write without rotating: adoption, repairs, JWKS or metadata changes (see reasons).
    Update,
    /// Nothing to write.
    Unchanged,
    /// Nothing may be written; the source needs a person's attention.
    Blocked(Blocked),
}

impl Action {
    /// The `result` label of `rotations_total`.
    pub fn result(&self) -> &'static str {
        match self {
            Self::Create => "created",
            Self::Rotate => "rotated",
            Self::Update => "updated",
            Self::Unchanged => "unchanged",
            Self::Blocked(_) => "blocked",
        }
    }
}

/// Why nothing may be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// `tls.crt` or `tls.key` missing or empty.
    InvalidSource(String),
    /// The destination annotation is missing, empty, not a Secret name, or the source itself.
    InvalidDestination(String),
    /// The target exists and was not made by a rotator (nor asked to be adopted).
    NotManaged(String),
    /// The target is rotated from another source that still claims it.
    Conflict { other: String },
    /// An annotation under the rotator's prefix, on the source or the target, that the rotator
    /// cannot act on (an unknown key, or a yes/no annotation that is neither true nor false).
    InvalidAnnotation(String),
}

impl Blocked {
    /// The `reason` label of `errors_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Self::InvalidSource(_) => "invalid_source",
            Self::InvalidDestination(_) => "invalid_destination",
            Self::NotManaged(_) => "target_not_managed",
            Self::Conflict { .. } => "target_conflict",
            Self::InvalidAnnotation(_) => "invalid_annotation",
        }
    }

    /// The event reason.
    pub fn event_reason(&self) -> &'static str {
        match self {
            Self::InvalidSource(_) => "InvalidSource",
            Self::InvalidDestination(_) => "InvalidDestination",
            Self::NotManaged(_) => "TargetNotManaged",
            Self::Conflict { .. } => "TargetConflict",
            Self::InvalidAnnotation(_) => "InvalidAnnotation",
        }
    }
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidSource(why) => write!(f, "the source is not usable: {why}"),
            Self::InvalidDestination(why) => write!(f, "the destination is not usable: {why}"),
            Self::NotManaged(why) => write!(f, "the target exists and is not managed by the rotator: {why}"),
            Self::Conflict { other } => write!(f, "the target is rotated from source {other}, which still names it"),
            Self::InvalidAnnotation(why) => write!(f, "{why}; nothing is written until it is fixed"),
        }
    }
}

/// The key ids of the target's slots after the plan (empty for an empty slot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kids {
    pub prev: String,
    pub current: String,
    pub next: String,
}

/// The decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub action: Action,
    /// The target's name, when the destination annotation gives a valid one.
    pub target_name: Option<String>,
    /// The Secret to create ([`Action::Create`]) or to replace ([`Action::Rotate`],
    /// [`Action::Update`]); a replacement carries the read target's resourceVersion.
    pub write: Option<Secret>,
    /// Why an update is written, in words for events.
    pub reasons: Vec<String>,
    /// Certificates left out of `jwks.json`, with why.
    pub warnings: Vec<String>,
    /// Remove the original operator's finalizer from the source (after the write).
    pub remove_legacy_finalizer: bool,
    /// Key ids after the write (or as they are, when nothing is written).
    pub kids: Kids,
}

/// Who claims a target: a rotator's `source` annotation, else the original operator's
/// controller owner reference to a Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    Annotation(String),
    OwnerReference(String),
}

impl Claim {
    pub fn source(&self) -> &str {
        match self {
            Self::Annotation(name) | Self::OwnerReference(name) => name,
        }
    }
}

/// The claim on a target, if any.
pub fn claimant(keys: &Keys, target: &Secret) -> Option<Claim> {
    if let Some(name) = keys.claimed_by(target.annotations()) {
        return Some(Claim::Annotation(name.to_owned()));
    }
    target.owner_references().iter().find(|r| is_secret_ref(r) && r.controller == Some(true)).map(|r| Claim::OwnerReference(r.name.clone()))
}

fn is_secret_ref(reference: &OwnerReference) -> bool {
    reference.kind == "Secret" && reference.api_version == "v1"
}

fn bytes<'a>(data: &'a BTreeMap<String, ByteString>, key: &str) -> &'a [u8] {
    data.get(key).map_or(&[], |b| b.0.as_slice())
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Pair {
    crt: Vec<u8>,
    key: Vec<u8>,
}

impl Pair {
    fn read(data: &BTreeMap<String, ByteString>, slot: SlotKeys) -> Self {
        Self { crt: bytes(data, slot.crt).to_vec(), key: bytes(data, slot.key).to_vec() }
    }
}

/// Decides. See the module documentation and `docs/rotator.md` for each rule.
pub fn plan(input: &Input<'_>) -> Plan {
    let Input { keys, source, target, other_claim_active, now } = *input;
    let has_legacy_finalizer = source.finalizers().contains(&keys.legacy_finalizer);
    let source_uid = source.metadata.uid.clone().unwrap_or_default();
    let finish = |mut plan: Plan| {
        let after = plan.write.as_ref().or(target);
        plan.remove_legacy_finalizer = has_legacy_finalizer && !after.is_some_and(|t| owned_by_uid(t, &source_uid));
        if plan.kids == Kids::default() {
            plan.kids = after.map(kids_of).unwrap_or_default();
        }
        plan
    };
    let blocked = |target_name: Option<String>, why: Blocked| {
        finish(Plan {
            action: Action::Blocked(why),
            target_name,
            write: None,
            reasons: Vec::new(),
            warnings: Vec::new(),
            remove_legacy_finalizer: false,
            kids: Kids::default(),
        })
    };

    let source_name = source.name_any();
    let target_name = match source.annotations().get(&keys.destination).map(|d| d.trim()) {
        None | Some("") => {
            // A misspelt destination key is the likelier cause than a missing one: name it.
            let why = match keys.check(source.annotations()) {
                Err(invalid) => Blocked::InvalidAnnotation(invalid.to_string()),
                Ok(()) => Blocked::InvalidDestination(format!("no {} annotation", keys.destination)),
            };
            return blocked(None, why);
        }
        Some(name) if !is_dns_subdomain(name) => {
            return blocked(None, Blocked::InvalidDestination(format!("`{name}` is not a valid Secret name")));
        }
        Some(name) if name == source_name => {
            return blocked(None, Blocked::InvalidDestination("it names the source itself".into()));
        }
        Some(name) => name.to_owned(),
    };

    if source.metadata.deletion_timestamp.is_some() {
        return finish(release(target, &source_uid, target_name));
    }
    if let Err(invalid) = keys.check(source.annotations()) {
        return blocked(Some(target_name), Blocked::InvalidAnnotation(invalid.to_string()));
    }

    let empty = BTreeMap::new();
    let source_data = source.data.as_ref().unwrap_or(&empty);
    let incoming = Pair::read(source_data, SlotKeys { name: "source", crt: SOURCE_CRT, key: SOURCE_KEY, kid: "" });
    let missing: Vec<&str> = [(SOURCE_CRT, &incoming.crt), (SOURCE_KEY, &incoming.key)]
        .into_iter()
        .filter(|(_, value)| value.is_empty())
        .map(|(key, _)| key)
        .collect();
    if !missing.is_empty() {
        return blocked(Some(target_name), Blocked::InvalidSource(format!("{} missing or empty", missing.join(" and "))));
    }

    let wants_jwks = matches!(keys.flag(source.annotations(), &keys.jwks), Ok(true));
    let Some(target) = target else {
        return finish(create(keys, source, &target_name, incoming, wants_jwks, now));
    };

    let mut reasons = Vec::new();
    let claim = claimant(keys, target);
    match &claim {
        Some(Claim::Annotation(owner)) if *owner == source_name => {}
        Some(Claim::OwnerReference(owner)) if *owner == source_name => {
            reasons.push("adopted the target of the original operator (owner reference to this source)".to_owned());
        }
        Some(other) => {
            if other_claim_active {
                return blocked(Some(target_name), Blocked::Conflict { other: other.source().to_owned() });
            }
            reasons.push(format!("took the target over from source {}, which no longer names it", other.source()));
        }
        None => {
            let data = target.data.as_ref().unwrap_or(&empty);
            let adopt = match keys.flag(target.annotations(), &keys.adopt) {
                Ok(adopt) => adopt,
                Err(invalid) => {
                    return blocked(
                        Some(target_name.clone()),
                        Blocked::InvalidAnnotation(format!("on the target {target_name}: {invalid}")),
                    );
                }
            };
            if adopt {
                reasons.push(format!("adopted the target on request ({})", keys.adopt));
            } else if SLOTS.iter().all(|s| data.contains_key(s.crt) && data.contains_key(s.key) && data.contains_key(s.kid)) {
                reasons.push("adopted a target with the original operator's layout".to_owned());
            } else {
                return blocked(
                    Some(target_name),
                    Blocked::NotManaged(format!(
                        "it has no {} annotation; annotate it {}=true to hand it over",
                        keys.source_name, keys.adopt
                    )),
                );
            }
        }
    }
    let target_type = target.type_.as_deref().unwrap_or("Opaque");
    if target_type != TLS_TYPE {
        return blocked(Some(target_name), Blocked::NotManaged(format!("it has type {target_type}, not {TLS_TYPE}")));
    }

    let data = target.data.as_ref().unwrap_or(&empty);
    let [mut prev, mut current, mut next] = SLOTS.map(|slot| Pair::read(data, slot));
    let incoming_sha = cert_sha256(&incoming.crt);
    let claimed_by_us = matches!(&claim, Some(Claim::Annotation(owner)) if *owner == source_name);
    let recorded_next = target.annotations().get(&keys.next_cert_sha256);
    let rotate = if next.crt == incoming.crt {
        if next.key != incoming.key {
            reasons.push("next-tls.key differed from the source's tls.key; restored from the source".to_owned());
            next.key = incoming.key;
        }
        false
    } else if claimed_by_us && recorded_next == Some(&incoming_sha) {
        // The rotator already put this certificate in next-tls; someone changed next-tls since.
        reasons.push("next-tls was changed by hand; restored from the source without rotating".to_owned());
        next = incoming;
        false
    } else {
        prev = std::mem::take(&mut current);
        current = std::mem::take(&mut next);
        next = incoming;
        true
    };

    let mut desired = data.clone();
    for (slot, pair) in SLOTS.iter().zip([&prev, &current, &next]) {
        let id = kid(&pair.crt);
        if !rotate && Pair::read(data, *slot) == *pair {
            match data.get(slot.kid) {
                None => reasons.push(format!("added the missing {}", slot.kid)),
                Some(old) if old.0 != id.as_bytes() => reasons.push(format!("{} did not match {}; recomputed", slot.kid, slot.crt)),
                Some(_) => {}
            }
            for key in [slot.crt, slot.key] {
                if !data.contains_key(key) {
                    reasons.push(format!("added the missing {key}"));
                }
            }
        }
        desired.insert(slot.crt.to_owned(), ByteString(pair.crt.clone()));
        desired.insert(slot.key.to_owned(), ByteString(pair.key.clone()));
        desired.insert(slot.kid.to_owned(), ByteString(id.into_bytes()));
    }
    let warnings = set_jwks(&mut desired, wants_jwks);
    if !rotate {
        match (data.get(JWKS_KEY), desired.get(JWKS_KEY)) {
            (None, Some(_)) => reasons.push(format!("added {JWKS_KEY} ({} is true)", keys.jwks)),
            (Some(_), None) => reasons.push(format!("removed {JWKS_KEY} ({} is not true)", keys.jwks)),
            (Some(old), Some(new)) if old != new => reasons.push(format!("{JWKS_KEY} did not match the keys; rendered again")),
            _ => {}
        }
    }

    let mut annotations = target.annotations().clone();
    annotations.insert(keys.source_name.clone(), source_name);
    annotations.insert(keys.next_cert_sha256.clone(), cert_sha256(&next.crt));
    let rotations: u64 = target.annotations().get(&keys.rotations).and_then(|r| r.parse().ok()).unwrap_or(0);
    if rotate {
        annotations.insert(keys.rotations.clone(), (rotations + 1).to_string());
        annotations.insert(keys.last_rotation_time.clone(), seconds(now));
    } else {
        annotations.entry(keys.rotations.clone()).or_insert_with(|| "0".to_owned());
    }
    let mut labels = target.labels().clone();
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    let owner_references: Vec<OwnerReference> = target.owner_references().iter().filter(|r| !is_secret_ref(r)).cloned().collect();
    if owner_references.len() != target.owner_references().len() {
        reasons.push("removed the owner reference to a Secret so that deleting a source never deletes the target".to_owned());
    }

    let mut compare = annotations.clone();
    compare.insert(keys.source_resource_version.clone(), String::new());
    let mut old = target.annotations().clone();
    old.insert(keys.source_resource_version.clone(), String::new());
    let metadata_changed = compare != old || labels != *target.labels();
    if !rotate && desired == *data && !metadata_changed && owner_references.len() == target.owner_references().len() {
        return finish(Plan {
            action: Action::Unchanged,
            target_name: Some(target_name),
            write: None,
            reasons,
            warnings,
            remove_legacy_finalizer: false,
            kids: Kids::default(),
        });
    }
    if !rotate && reasons.is_empty() {
        reasons.push("recorded the rotator's annotations and label".to_owned());
    }
    annotations.insert(keys.source_resource_version.clone(), source.resource_version().unwrap_or_default());

    let mut write = target.clone();
    write.metadata.annotations = Some(annotations);
    write.metadata.labels = Some(labels);
    write.metadata.owner_references = if owner_references.is_empty() { None } else { Some(owner_references) };
    write.metadata.managed_fields = None;
    write.string_data = None;
    let kids = kids_of_data(&desired);
    write.data = Some(desired);
    finish(Plan {
        action: if rotate { Action::Rotate } else { Action::Update },
        target_name: Some(target_name),
        write: Some(write),
        reasons,
        warnings,
        remove_legacy_finalizer: false,
        kids,
    })
}

/// First sight: next-tls is the source, the other slots are empty.
fn create(keys: &Keys, source: &Secret, target_name: &str, incoming: Pair, wants_jwks: bool, now: Timestamp) -> Plan {
    let mut data = BTreeMap::new();
    for slot in [PREV, CURRENT] {
        for key in [slot.crt, slot.key, slot.kid] {
            data.insert(key.to_owned(), ByteString(Vec::new()));
        }
    }
    data.insert(NEXT.kid.to_owned(), ByteString(kid(&incoming.crt).into_bytes()));
    let next_sha = cert_sha256(&incoming.crt);
    data.insert(NEXT.crt.to_owned(), ByteString(incoming.crt));
    data.insert(NEXT.key.to_owned(), ByteString(incoming.key));
    let warnings = set_jwks(&mut data, wants_jwks);
    let annotations = BTreeMap::from([
        (keys.source_name.clone(), source.name_any()),
        (keys.source_resource_version.clone(), source.resource_version().unwrap_or_default()),
        (keys.next_cert_sha256.clone(), next_sha),
        (keys.last_rotation_time.clone(), seconds(now)),
        (keys.rotations.clone(), "0".to_owned()),
    ]);
    let kids = kids_of_data(&data);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(target_name.to_owned()),
            namespace: source.namespace(),
            annotations: Some(annotations),
            labels: Some(BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())])),
            ..ObjectMeta::default()
        },
        type_: Some(TLS_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    };
    Plan {
        action: Action::Create,
        target_name: Some(target_name.to_owned()),
        write: Some(secret),
        reasons: Vec::new(),
        warnings,
        remove_legacy_finalizer: false,
        kids,
    }
}

/// A source being deleted: never rotate; keep the target, dropping an owner reference to the
/// source (the original operator's) so that garbage collection does not delete it.
fn release(target: Option<&Secret>, source_uid: &str, target_name: String) -> Plan {
    let mut plan = Plan {
        action: Action::Unchanged,
        target_name: Some(target_name),
        write: None,
        reasons: vec!["the source is being deleted; the target is kept and no longer rotates".to_owned()],
        warnings: Vec::new(),
        remove_legacy_finalizer: false,
        kids: Kids::default(),
    };
    if let Some(target) = target.filter(|t| owned_by_uid(t, source_uid)) {
        let mut write = target.clone();
        let refs: Vec<OwnerReference> =
            target.owner_references().iter().filter(|r| !(is_secret_ref(r) && r.uid == source_uid)).cloned().collect();
        write.metadata.owner_references = if refs.is_empty() { None } else { Some(refs) };
        write.metadata.managed_fields = None;
        plan.action = Action::Update;
        plan.write = Some(write);
        plan.reasons.push("removed the owner reference to the source so that its deletion does not delete the target".to_owned());
    }
    plan
}

fn owned_by_uid(target: &Secret, uid: &str) -> bool {
    !uid.is_empty() && target.owner_references().iter().any(|r| is_secret_ref(r) && r.uid == uid)
}

/// Sets or removes `jwks.json` from the slots in `data`; returns the skipped certificates.
fn set_jwks(data: &mut BTreeMap<String, ByteString>, wanted: bool) -> Vec<String> {
    if !wanted {
        data.remove(JWKS_KEY);
        return Vec::new();
    }
    let kids = SLOTS.map(|slot| String::from_utf8_lossy(bytes(data, slot.kid)).into_owned());
    let slots: Vec<jwks::Slot<'_>> =
        SLOTS.iter().zip(&kids).map(|(slot, kid)| jwks::Slot { name: slot.name, cert: bytes(data, slot.crt), kid }).collect();
    let rendered = jwks::render(&slots);
    data.insert(JWKS_KEY.to_owned(), ByteString(rendered.json));
    rendered.skipped
}

fn kids_of_data(data: &BTreeMap<String, ByteString>) -> Kids {
    let text = |key: &str| String::from_utf8_lossy(bytes(data, key)).into_owned();
    Kids { prev: text(PREV.kid), current: text(CURRENT.kid), next: text(NEXT.kid) }
}

fn kids_of(target: &Secret) -> Kids {
    target.data.as_ref().map(kids_of_data).unwrap_or_default()
}

/// RFC 3339 in whole seconds, UTC.
fn seconds(now: Timestamp) -> String {
    Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}

#[cfg(test)]
mod tests;
