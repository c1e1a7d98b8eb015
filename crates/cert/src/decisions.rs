//! The Cert operator's decisions as pure functions: which domains and zones a spec asks for,
//! the ACM idempotency token, how to find a certificate whose request was never recorded, when
//! the certificate listing tells enough and when DescribeCertificate is needed, which
//! validation records to write and which go with a replaced certificate, what an ACM status
//! means for the object. No I/O here; each rule has unit tests. The admission rules are in
//! [`crate::admission`].

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::api::{CertSpec, CertState, ValidationRecordStatus};
use crate::zones::{Zone, ZoneError, ZoneRegistry, base_domain, normalize};
use blockwork_aws::acm::{AcmStatus, Certificate, Freshness, Summary, ValidationRecord};

/// The seed's validation timeout: a certificate still pending after this fails.
pub const DEFAULT_VALIDATION_TIMEOUT: Duration = Duration::from_secs(72 * 3600);

/// What a spec asks ACM for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// The primary domain, lowercase, without a trailing dot.
    pub domain: String,
    /// Additional names, normalized, without duplicates or the primary, in spec order.
    pub sans: Vec<String>,
    /// The primary domain's zone.
    pub zone: Zone,
    /// Every name (primary first) with the zone its validation record goes into.
    pub zones: Vec<(String, Zone)>,
    /// A public certificate that ExportCertificate may export (`spec.export`).
    pub exportable: bool,
    /// The ACM Private CA of a private certificate (`spec.certificateAuthorityArn`).
    pub authority: Option<String>,
}

/// `{serviceName}-{environment}.{zone}`: the domain when the spec does not set one.
pub fn generated_fqdn(spec: &CertSpec, zone: &Zone) -> String {
    format!("{}-{}.{}", spec.service_name, spec.environment, zone.name)
}

/// The primary domain and zone, SANs and their zones; an error names the first domain that has
/// no zone.
pub fn desired(spec: &CertSpec, registry: &ZoneRegistry) -> Result<Desired, ZoneError> {
    let explicit = spec.domain_name.as_deref().map(normalize);
    let zone = registry.resolve_primary(spec.dns_zone.as_ref(), explicit.as_deref())?.clone();
    let domain = explicit.unwrap_or_else(|| generated_fqdn(spec, &zone));
    let mut sans: Vec<String> = Vec::new();
    for san in spec.subject_alternative_names.iter().map(|s| normalize(s)) {
        if san != domain && !sans.contains(&san) {
            sans.push(san);
        }
    }
    let mut zones = vec![(domain.clone(), zone.clone())];
    for san in &sans {
        zones.push((san.clone(), registry.resolve_san(san)?.clone()));
    }
    Ok(Desired { domain, sans, zone, zones, exportable: spec.export.is_some(), authority: spec.certificate_authority_arn.clone() })
}

/// The IdempotencyToken for RequestCertificate: 32 hex characters (ACM allows `\w{1,32}`),
/// from the runtime's UID-derived token, when the create-pending marker was written (seconds
/// since the epoch) and the requested names. Every attempt of one create sends the same token,
/// so a request repeated after a crash or a lost status write returns the first certificate.
/// Another create sends another: changed names, and also the same names asked for again later
/// (after a change and back), for which ACM would otherwise return, for an hour, the first
/// certificate, deleted since perhaps.
pub fn acm_token(object_token: &str, marked_at: i64, desired: &Desired) -> String {
    let mut names = desired.sans.clone();
    names.sort();
    let mut hasher = Sha256::new();
    hasher.update(object_token.as_bytes());
    hasher.update(b"\0");
    hasher.update(marked_at.to_string().as_bytes());
    hasher.update(b"\0");
    hasher.update(desired.domain.as_bytes());
    for name in &names {
        hasher.update(b"\0");
        hasher.update(name.as_bytes());
    }
    // Only when asked for: the token of a plain certificate stays what it was before these
    // options existed (a create under way across an upgrade finds its certificate).
    if desired.exportable {
        hasher.update(b"\0export");
    }
    if let Some(authority) = &desired.authority {
        hasher.update(b"\0");
        hasher.update(authority.as_bytes());
    }
    hex::encode(&hasher.finalize()[..16])
}

/// Tag keys on every certificate the operator requests: what lets it find its certificate
/// again (adoption after a lost status) and tells people in the AWS console who owns it.
pub const TAG_OWNER_UID: &str = blockwork_aws::ownership::TAG_OWNER_UID;
pub const TAG_OWNER: &str = blockwork_aws::ownership::TAG_OWNER;
pub const TAG_MANAGED_BY: &str = "blockwork.dev/managed-by";
/// The ACM idempotency token the certificate was requested with: identifies the request, so the
/// certificate a create-pending marker names is found exactly, and no other of the object's.
pub const TAG_TOKEN: &str = "blockwork.dev/request-token";

/// The value of a tag, if the certificate has it.
pub fn tag<'a>(tags: &'a [(String, String)], key: &str) -> Option<&'a str> {
    tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Whether a certificate's tags name the object with this UID as its owner: the one thing about
/// a certificate that never changes with the object's spec, checked before deleting anything.
pub fn owned_by(tags: &[(String, String)], uid: &str) -> bool {
    !uid.is_empty() && tag(tags, TAG_OWNER_UID) == Some(uid)
}

/// ACM returns the first certificate for a repeated token for an hour; a create older than this
/// margin is looked for in a current listing rather than repeated.
pub const TOKEN_WINDOW: Duration = Duration::from_secs(50 * 60);

/// What the create-pending marker's spec (JSON) asked for. A marker without its spec (written
/// by an earlier version) is taken to be for the current spec; `None` when the marker's spec no
/// longer resolves (the operator's zones changed since).
pub fn marked_desired(marked_spec: Option<&str>, current: &CertSpec, registry: &ZoneRegistry) -> Option<Desired> {
    let parsed;
    let spec = match marked_spec {
        Some(json) => {
            parsed = serde_json::from_str::<CertSpec>(json).ok()?;
            &parsed
        }
        None => current,
    };
    desired(spec, registry).ok()
}

/// How current the listing must be to look for the certificate a create-pending marker names
/// (a create whose result never reached the status). Current when not finding it leads to an
/// action that would lose it: releasing a deleted Cert, writing the marker again for changed
/// names, or repeating the request after ACM's token window. Otherwise a recent listing will do,
/// as the request repeated with the same token returns the certificate anyway.
pub fn marked_lookup(deleting: bool, names_changed: bool, marked_at: jiff::Timestamp, now: jiff::Timestamp) -> Freshness {
    let window = jiff::SignedDuration::try_from(TOKEN_WINDOW).unwrap_or(jiff::SignedDuration::MAX);
    if deleting || names_changed || now.duration_since(marked_at) > window { Freshness::Current } else { Freshness::Recent }
}

/// The names (normalized) of the validation records a certificate uses.
pub fn record_names(certificate: &Certificate) -> HashSet<String> {
    certificate.validations.iter().filter_map(|v| v.record.as_ref()).map(|r| normalize(&r.name)).collect()
}

/// The tracked validation records that no certificate staying with the Cert uses (`needed`:
/// their record names): they go with the certificates that were replaced.
pub fn unneeded_records(tracked: &[ValidationRecordStatus], needed: &HashSet<String>) -> Vec<ValidationRecordStatus> {
    tracked.iter().filter(|r| !needed.contains(&normalize(&r.name))).cloned().collect()
}

/// The owner tags, deterministic per object: ACM honours an idempotency token only when the
/// tags are the same too.
pub fn owner_tags(namespace: &str, name: &str, uid: &str, token: &str) -> Vec<(String, String)> {
    vec![
        (TAG_MANAGED_BY.to_owned(), "blockwork-cert".to_owned()),
        (TAG_OWNER.to_owned(), format!("{namespace}/{name}")),
        (TAG_OWNER_UID.to_owned(), uid.to_owned()),
        (TAG_TOKEN.to_owned(), token.to_owned()),
    ]
}

/// Whether an existing certificate matches what the spec asks for (ACM certificates cannot be
/// changed: a difference means a new certificate).
pub fn names_differ(certificate: &Certificate, desired: &Desired) -> Option<String> {
    if let Some(difference) = primary_differs(&certificate.domain, desired) {
        return Some(difference);
    }
    let mut have: Vec<String> = certificate.sans.iter().map(|s| normalize(s)).filter(|s| *s != desired.domain).collect();
    have.sort();
    have.dedup();
    let mut want = desired.sans.clone();
    want.sort();
    (have != want)
        .then(|| format!("the certificate's alternative names are [{}], the spec asks for [{}]", have.join(", "), want.join(", ")))
}

/// Whether an existing (described) certificate is not the one the spec asks for: other names, or
/// issued otherwise (exportable or not, public or from another private CA). Any difference means a
/// new certificate: none of these can be changed on an ACM certificate.
pub fn certificate_differs(certificate: &Certificate, desired: &Desired) -> Option<String> {
    names_differ(certificate, desired).or_else(|| issuance_differs(certificate, desired))
}

/// How a certificate was issued against how the spec asks for it: from which private CA (none
/// for a public one), and for a public one whether it is exportable (a private one always is).
pub fn issuance_differs(certificate: &Certificate, desired: &Desired) -> Option<String> {
    if certificate.authority != desired.authority {
        return Some(match (&certificate.authority, &desired.authority) {
            (None, Some(_)) => "the certificate is public; the spec asks for one from a private CA".to_owned(),
            (Some(_), None) => "the certificate is from a private CA; the spec asks for a public one".to_owned(),
            _ => "the certificate is from another private CA than the spec names".to_owned(),
        });
    }
    if desired.authority.is_none() && certificate.exportable != desired.exportable {
        return Some(match desired.exportable {
            true => "the certificate was requested without export; spec.export needs an exportable one".to_owned(),
            false => "the certificate is exportable (charged at each renewal); the spec no longer exports it".to_owned(),
        });
    }
    None
}

/// Why a look at a listed certificate needs DescribeCertificate too; `None`: the listing's
/// summary tells all it needs (the steady state, and waiting for ACM to issue).
pub fn description_needed(summary: &Summary, spec_changed: bool, records_known: bool, now: jiff::Timestamp) -> Option<&'static str> {
    if spec_changed {
        return Some("the alternative names are only described");
    }
    match summary.status {
        AcmStatus::PendingValidation if !records_known => Some("the validation records are only described"),
        AcmStatus::Failed => Some("the failure reason is only described"),
        AcmStatus::Issued if summary.renewing(now) => Some("the renewal status is only described"),
        _ => None,
    }
}

/// The certificate as far as its summary tells: no alternative names, validation records,
/// renewal status, serial or export option (those need DescribeCertificate).
pub fn listed(summary: &Summary) -> Certificate {
    Certificate {
        arn: summary.arn.clone(),
        domain: summary.domain.clone(),
        sans: Vec::new(),
        status: summary.status.clone(),
        created_at: summary.created_at,
        not_after: summary.not_after,
        in_use_by: Vec::new(),
        renewal_status: None,
        failure_reason: None,
        validations: Vec::new(),
        serial: None,
        exportable: false,
        authority: None,
    }
}

/// Whether the status lists a validation record for every name of the spec (ACM names each
/// `_<token>.<name>`, a wildcard's after its base name), so the records need not be described
/// again.
pub fn records_known(desired: &Desired, tracked: &[ValidationRecordStatus]) -> bool {
    desired.zones.iter().all(|(name, zone)| {
        let suffix = format!(".{}", base_domain(name));
        tracked.iter().any(|r| r.zone_id == zone.id && normalize(&r.name).starts_with('_') && normalize(&r.name).ends_with(&suffix))
    })
}

/// Whether a certificate for `domain` is for another primary domain than the spec's.
pub fn primary_differs(domain: &str, desired: &Desired) -> Option<String> {
    (normalize(domain) != desired.domain).then(|| format!("the certificate is for {domain} but the spec asks for {}", desired.domain))
}

/// A validation record to write: the CNAME ACM asked for, in the zone of its domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRecord {
    pub zone_id: String,
    pub record: ValidationRecord,
}

/// The validation records of a certificate, one per (zone, name): a wildcard and its base
/// domain share a record, as do names ACM validates together. `complete` is false while ACM has
/// not yet published a record for every domain (it takes a few seconds after the request).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordPlan {
    /// By zone id, in a stable order.
    pub by_zone: BTreeMap<String, Vec<ValidationRecord>>,
    pub complete: bool,
}

impl RecordPlan {
    pub fn records(&self) -> impl Iterator<Item = PlannedRecord> + '_ {
        self.by_zone.iter().flat_map(|(zone, records)| records.iter().map(|r| PlannedRecord { zone_id: zone.clone(), record: r.clone() }))
    }
}

pub fn plan_records(certificate: &Certificate, desired: &Desired) -> Result<RecordPlan, ZoneError> {
    let mut plan = RecordPlan { complete: true, ..RecordPlan::default() };
    for validation in &certificate.validations {
        let Some(record) = &validation.record else {
            plan.complete = false;
            continue;
        };
        let domain = normalize(&validation.domain);
        let zone = desired
            .zones
            .iter()
            .find(|(name, _)| *name == domain || base_domain(name) == base_domain(&domain))
            .map(|(_, zone)| zone)
            .ok_or_else(|| ZoneError::NoZoneFor(domain.clone()))?;
        let records = plan.by_zone.entry(zone.id.clone()).or_default();
        // Kept as ACM wrote it: Route53 deletes only on an exact match of the value.
        if !records.iter().any(|r| normalize(&r.name) == normalize(&record.name)) {
            records.push(record.clone());
        }
    }
    if certificate.validations.is_empty() {
        plan.complete = false;
    }
    Ok(plan)
}

/// What an ACM certificate's state means for the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assessment {
    /// Issued and usable.
    Ready,
    /// Waiting for DNS validation.
    Validating,
    /// Needs a person.
    Failed { reason: &'static str, message: String },
}

/// Maps ACM's status (and, while pending, the time since the request against the validation
/// timeout) to what the object shows.
pub fn assess(certificate: &Certificate, now: jiff::Timestamp, validation_timeout: Duration) -> Assessment {
    let failed = |reason, message: String| Assessment::Failed { reason, message };
    match &certificate.status {
        AcmStatus::Issued => Assessment::Ready,
        AcmStatus::PendingValidation => {
            if validation_timed_out(certificate.created_at, now, validation_timeout) {
                return failed(
                    "ValidationTimedOut",
                    format!("ACM has not validated {} within {}", certificate.domain, humanize(validation_timeout)),
                );
            }
            Assessment::Validating
        }
        AcmStatus::Failed => match certificate.failure_reason.as_deref().and_then(|r| crate::authority::failure(r).map(|m| (r, m))) {
            Some((reason, meaning)) => {
                failed("CertificateAuthorityFailed", format!("the private CA could not issue the certificate ({reason}): {meaning}"))
            }
            None => failed(
                "ValidationFailed",
                format!("ACM could not issue the certificate: {}", certificate.failure_reason.as_deref().unwrap_or("no reason given")),
            ),
        },
        AcmStatus::ValidationTimedOut => failed("ValidationTimedOut", "ACM gave up validating the certificate (72 hours)".to_owned()),
        AcmStatus::Revoked => failed("Revoked", "the certificate was revoked".to_owned()),
        AcmStatus::Expired => failed("Expired", "the certificate expired (ACM did not renew it)".to_owned()),
        AcmStatus::Inactive => failed("Inactive", "the certificate is inactive".to_owned()),
        AcmStatus::Other(status) => failed("UnknownStatus", format!("ACM reports the unknown status {status}")),
    }
}

/// The operator's state for an assessment; `records_in_place` separates Created from Validated.
pub fn cert_state(assessment: &Assessment, records_in_place: bool) -> CertState {
    match assessment {
        Assessment::Ready => CertState::Ready,
        Assessment::Validating if records_in_place => CertState::Validated,
        Assessment::Validating => CertState::Created,
        Assessment::Failed { .. } => CertState::Failed,
    }
}

/// True when a certificate requested at `created_at` is pending for longer than `timeout`.
/// Without a request time (ACM always has one) there is nothing to measure from.
pub fn validation_timed_out(created_at: Option<jiff::Timestamp>, now: jiff::Timestamp, timeout: Duration) -> bool {
    let Some(created_at) = created_at else { return false };
    let Ok(timeout) = jiff::SignedDuration::try_from(timeout) else { return false };
    now.duration_since(created_at) > timeout
}

/// A renewal worth telling the user about: ACM renews on its own, but a FAILED renewal means
/// the certificate will expire.
pub fn renewal_message(renewal_status: Option<&str>) -> Option<String> {
    match renewal_status {
        Some("FAILED") => Some("ACM could not renew the certificate; check its validation records".to_owned()),
        Some("PENDING_VALIDATION") => Some("ACM is renewing the certificate and waits for DNS validation".to_owned()),
        _ => None,
    }
}

/// What a person must know while ACM's managed renewal has failed (the certificate will expire
/// unless its validation records are put back or the cause ACM names is fixed).
pub fn renewal_failed(renewal_status: Option<&str>) -> Option<String> {
    renewal_message(renewal_status).filter(|_| renewal_status == Some("FAILED"))
}

fn humanize(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs.is_multiple_of(3600) { format!("{} hours", secs / 3600) } else { format!("{secs} seconds") }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::api::DnsZoneRef;
    use blockwork_aws::acm::DomainValidation;

    fn zones() -> ZoneRegistry {
        "example.com:Z1,staging.example.com:Z2,other.org:Z3".parse().unwrap()
    }

    fn spec(service: &str, env: &str) -> CertSpec {
        CertSpec { service_name: service.into(), environment: env.into(), ..CertSpec::default() }
    }

    fn certificate(domain: &str, sans: &[&str], status: AcmStatus) -> Certificate {
        Certificate {
            arn: "arn:aws:acm:us-east-1:123456789012:certificate/x".into(),
            domain: domain.into(),
            sans: sans.iter().map(|s| (*s).to_owned()).collect(),
            status,
            created_at: Some(jiff::Timestamp::from_second(1_700_000_000).unwrap()),
            not_after: None,
            in_use_by: Vec::new(),
            renewal_status: None,
            failure_reason: None,
            validations: Vec::new(),
            serial: None,
            exportable: false,
            authority: None,
        }
    }

    fn validation(domain: &str, name: &str) -> DomainValidation {
        DomainValidation {
            domain: domain.into(),
            status: None,
            record: Some(ValidationRecord { name: format!("{name}."), value: format!("{name}.acm-validations.aws.") }),
        }
    }

    #[test]
    fn fqdn_is_service_environment_zone_unless_domain_name_is_set() {
        let d = desired(&spec("api", "prod"), &zones()).unwrap();
        assert_eq!(d.domain, "api-prod.example.com");
        assert_eq!(d.zone.id, "Z1");
        let explicit = CertSpec { domain_name: Some("WWW.Staging.Example.com.".into()), ..spec("api", "prod") };
        let d = desired(&explicit, &zones()).unwrap();
        assert_eq!((d.domain.as_str(), d.zone.id.as_str()), ("www.staging.example.com", "Z2"));
    }

    #[test]
    fn explicit_zone_picks_the_generated_domain_s_zone() {
        let with_zone = CertSpec { dns_zone: Some(DnsZoneRef { id: None, name: Some("other.org".into()) }), ..spec("api", "dev") };
        assert_eq!(desired(&with_zone, &zones()).unwrap().domain, "api-dev.other.org");
    }

    #[test]
    fn sans_are_normalized_deduplicated_and_zoned_one_by_one() {
        let multi = CertSpec {
            subject_alternative_names: vec![
                "api-prod.example.com".into(),
                "A.other.org".into(),
                "a.other.org".into(),
                "b.staging.example.com".into(),
            ],
            ..spec("api", "prod")
        };
        let d = desired(&multi, &zones()).unwrap();
        assert_eq!(d.sans, ["a.other.org", "b.staging.example.com"]);
        let zone_ids: Vec<_> = d.zones.iter().map(|(n, z)| (n.as_str(), z.id.as_str())).collect();
        assert_eq!(zone_ids, [("api-prod.example.com", "Z1"), ("a.other.org", "Z3"), ("b.staging.example.com", "Z2")]);
        let outside = CertSpec { subject_alternative_names: vec!["x.nowhere.net".into()], ..spec("api", "prod") };
        assert_eq!(desired(&outside, &zones()), Err(ZoneError::NoZoneFor("x.nowhere.net".into())));
    }

    #[test]
    fn acm_token_is_stable_fits_acm_and_changes_with_the_names_and_the_marker() {
        let d = desired(&spec("api", "prod"), &zones()).unwrap();
        let object = "0123456789abcdef0123456789abcdef";
        let token = acm_token(object, 1_700_000_000, &d);
        assert_eq!(token.len(), 32);
        assert!(token.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(token, acm_token(object, 1_700_000_000, &d), "every attempt of one create");
        assert_ne!(token, acm_token("ffffffffffffffffffffffffffffffff", 1_700_000_000, &d));
        assert_ne!(token, acm_token(object, 1_700_000_001, &d), "the same names asked for again later");
        let other = desired(&spec("api", "dev"), &zones()).unwrap();
        assert_ne!(token, acm_token(object, 1_700_000_000, &other));
        let mut reordered = d.clone();
        reordered.sans = vec!["b.example.com".into(), "a.example.com".into()];
        let mut ordered = d.clone();
        ordered.sans = vec!["a.example.com".into(), "b.example.com".into()];
        assert_eq!(acm_token("t", 0, &reordered), acm_token("t", 0, &ordered), "SAN order does not matter");
    }

    #[test]
    fn ownership_is_the_owner_uid_tag_whatever_the_names() {
        let tags = owner_tags("team", "api", "uid-1", "t0k");
        assert!(owned_by(&tags, "uid-1"));
        assert!(!owned_by(&tags, "uid-2"));
        assert!(!owned_by(&[], ""), "an object without a UID owns nothing");
        assert_eq!(tag(&tags, TAG_TOKEN), Some("t0k"));
    }

    #[test]
    fn the_marker_s_spec_says_what_an_unrecorded_request_asked_for() {
        let current = CertSpec { subject_alternative_names: vec!["b.example.com".into()], ..spec("api", "prod") };
        let marked = serde_json::to_string(&spec("api", "prod")).unwrap();
        assert_eq!(marked_desired(Some(&marked), &current, &zones()).unwrap().sans, Vec::<String>::new());
        assert_eq!(marked_desired(None, &current, &zones()).unwrap().sans, ["b.example.com"], "an older marker: the current spec");
        let elsewhere = serde_json::to_string(&CertSpec { domain_name: Some("a.nowhere.net".into()), ..spec("api", "prod") }).unwrap();
        assert_eq!(marked_desired(Some(&elsewhere), &current, &zones()), None);
        assert_eq!(marked_desired(Some("not json"), &current, &zones()), None);
    }

    #[test]
    fn an_unrecorded_request_is_looked_for_in_a_current_listing_when_missing_it_would_lose_it() {
        let marked_at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let soon = marked_at + jiff::SignedDuration::from_mins(5);
        let late = marked_at + jiff::SignedDuration::from_mins(55);
        assert_eq!(marked_lookup(false, false, marked_at, soon), Freshness::Recent, "a repeated request returns it");
        assert_eq!(marked_lookup(true, false, marked_at, soon), Freshness::Current, "before releasing a deleted Cert");
        assert_eq!(marked_lookup(false, true, marked_at, soon), Freshness::Current, "before marking other names");
        assert_eq!(marked_lookup(false, false, marked_at, late), Freshness::Current, "after ACM forgets the token");
    }

    fn summary(status: AcmStatus, not_after: Option<jiff::Timestamp>) -> Summary {
        Summary {
            arn: "arn:1".into(),
            domain: "api-prod.example.com".into(),
            status,
            created_at: None,
            not_after,
            in_use: false,
            revoked_at: None,
        }
    }

    #[test]
    fn the_listing_tells_enough_while_waiting_for_acm_and_at_steady_state() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let in_a_year = Some(now + jiff::SignedDuration::from_hours(24 * 365));
        assert_eq!(description_needed(&summary(AcmStatus::Issued, in_a_year), false, true, now), None);
        assert_eq!(description_needed(&summary(AcmStatus::PendingValidation, None), false, true, now), None);
        assert_eq!(description_needed(&summary(AcmStatus::Revoked, in_a_year), false, true, now), None, "revoked says enough");
    }

    #[test]
    fn what_only_describe_has_is_described() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let in_a_month = Some(now + jiff::SignedDuration::from_hours(24 * 30));
        let in_a_year = Some(now + jiff::SignedDuration::from_hours(24 * 365));
        assert!(description_needed(&summary(AcmStatus::PendingValidation, None), false, false, now).is_some(), "records");
        assert!(description_needed(&summary(AcmStatus::Failed, None), false, true, now).is_some(), "the reason");
        assert!(description_needed(&summary(AcmStatus::Issued, in_a_month), false, true, now).is_some(), "renewing");
        assert!(description_needed(&summary(AcmStatus::Issued, in_a_year), true, true, now).is_some(), "names changed");
    }

    #[test]
    fn records_are_known_when_every_name_of_the_spec_has_one_in_its_zone() {
        let d = desired(
            &CertSpec { subject_alternative_names: vec!["*.api-prod.example.com".into(), "www.other.org".into()], ..spec("api", "prod") },
            &zones(),
        )
        .unwrap();
        let record = |zone: &str, name: &str| ValidationRecordStatus {
            zone_id: zone.into(),
            name: name.into(),
            value: "v".into(),
            owned: true,
            pending: false,
            change_id: None,
        };
        let primary = record("Z1", "_a.api-prod.example.com.");
        assert!(!records_known(&d, std::slice::from_ref(&primary)));
        assert!(records_known(&d, &[primary.clone(), record("Z3", "_b.www.other.org.")]), "the wildcard shares its base name's record");
        assert!(!records_known(&d, &[primary, record("Z1", "_b.www.other.org.")]), "in the wrong zone");
    }

    #[test]
    fn records_no_staying_certificate_uses_go_with_the_replaced_ones() {
        let mut cert = certificate("api-prod.example.com", &[], AcmStatus::Issued);
        cert.validations = vec![validation("api-prod.example.com", "_a.api-prod.example.com")];
        let record = |name: &str| ValidationRecordStatus {
            zone_id: "Z1".into(),
            name: format!("{name}."),
            value: "v".into(),
            owned: true,
            pending: false,
            change_id: None,
        };
        let tracked = [record("_a.api-prod.example.com"), record("_b.www.example.com")];
        let unneeded = unneeded_records(&tracked, &record_names(&cert));
        assert_eq!(unneeded, [record("_b.www.example.com")]);
    }

    #[test]
    fn owner_tags_name_the_object() {
        let tags = owner_tags("team", "api", "uid-1", "t0k");
        assert!(tags.contains(&(TAG_TOKEN.to_owned(), "t0k".to_owned())));
        assert!(tags.contains(&(TAG_OWNER.to_owned(), "team/api".to_owned())));
        assert!(tags.contains(&(TAG_OWNER_UID.to_owned(), "uid-1".to_owned())));
    }

    #[test]
    fn name_differences_are_detected_ignoring_case_order_and_the_primary_in_the_san_list() {
        let d = desired(&CertSpec { subject_alternative_names: vec!["b.example.com".into()], ..spec("api", "prod") }, &zones()).unwrap();
        assert_eq!(
            names_differ(&certificate("api-prod.example.com", &["api-prod.example.com", "B.example.com"], AcmStatus::Issued), &d),
            None
        );
        assert!(names_differ(&certificate("api-prod.example.com", &["api-prod.example.com"], AcmStatus::Issued), &d).is_some());
        assert!(names_differ(&certificate("api-dev.example.com", &["b.example.com"], AcmStatus::Issued), &d).is_some());
    }

    #[test]
    fn validation_records_go_to_each_domain_s_zone_once() {
        let d = desired(
            &CertSpec { subject_alternative_names: vec!["*.api-prod.example.com".into(), "www.other.org".into()], ..spec("api", "prod") },
            &zones(),
        )
        .unwrap();
        let mut cert = certificate("api-prod.example.com", &[], AcmStatus::PendingValidation);
        cert.validations = vec![
            validation("api-prod.example.com", "_a.api-prod.example.com"),
            validation("*.api-prod.example.com", "_a.api-prod.example.com"),
            validation("www.other.org", "_b.www.other.org"),
        ];
        let plan = plan_records(&cert, &d).unwrap();
        assert!(plan.complete);
        let planned: Vec<_> = plan.records().map(|p| (p.zone_id, normalize(&p.record.name))).collect();
        assert_eq!(planned, [("Z1".to_owned(), "_a.api-prod.example.com".to_owned()), ("Z3".to_owned(), "_b.www.other.org".to_owned())]);
    }

    #[test]
    fn record_plan_is_incomplete_until_acm_publishes_every_record() {
        let d = desired(&spec("api", "prod"), &zones()).unwrap();
        let mut cert = certificate("api-prod.example.com", &[], AcmStatus::PendingValidation);
        assert!(!plan_records(&cert, &d).unwrap().complete, "no validation options yet");
        cert.validations = vec![DomainValidation { domain: "api-prod.example.com".into(), status: None, record: None }];
        assert!(!plan_records(&cert, &d).unwrap().complete);
    }

    #[test]
    fn acm_statuses_map_to_states() {
        let now = jiff::Timestamp::from_second(1_700_000_100).unwrap();
        let timeout = DEFAULT_VALIDATION_TIMEOUT;
        let assessed = |status| assess(&certificate("a.example.com", &[], status), now, timeout);
        assert_eq!(cert_state(&assessed(AcmStatus::Issued), true), CertState::Ready);
        assert_eq!(cert_state(&assessed(AcmStatus::PendingValidation), false), CertState::Created);
        assert_eq!(cert_state(&assessed(AcmStatus::PendingValidation), true), CertState::Validated);
        for (status, reason) in [
            (AcmStatus::Failed, "ValidationFailed"),
            (AcmStatus::Revoked, "Revoked"),
            (AcmStatus::Expired, "Expired"),
            (AcmStatus::ValidationTimedOut, "ValidationTimedOut"),
            (AcmStatus::Inactive, "Inactive"),
        ] {
            let assessment = assessed(status);
            assert!(matches!(&assessment, Assessment::Failed { reason: r, .. } if *r == reason), "{assessment:?}");
            assert_eq!(cert_state(&assessment, true), CertState::Failed);
        }
    }

    #[test]
    fn pending_validation_fails_after_the_timeout() {
        let cert = certificate("a.example.com", &[], AcmStatus::PendingValidation);
        let created = cert.created_at.unwrap();
        let just_before = created + jiff::SignedDuration::from_hours(71);
        let after = created + jiff::SignedDuration::from_hours(73);
        assert_eq!(assess(&cert, just_before, DEFAULT_VALIDATION_TIMEOUT), Assessment::Validating);
        assert!(matches!(assess(&cert, after, DEFAULT_VALIDATION_TIMEOUT), Assessment::Failed { reason: "ValidationTimedOut", .. }));
        assert!(!validation_timed_out(None, after, DEFAULT_VALIDATION_TIMEOUT));
    }

    #[test]
    fn failed_renewals_are_reported() {
        assert!(renewal_message(Some("FAILED")).is_some());
        assert!(renewal_message(Some("SUCCESS")).is_none());
        assert!(renewal_message(None).is_none());
        assert!(renewal_failed(Some("FAILED")).is_some());
        assert!(renewal_failed(Some("PENDING_VALIDATION")).is_none());
    }

    #[test]
    fn a_trailing_dot_names_the_same_domain() {
        let absolute = CertSpec { domain_name: Some("api.k8s.example.com.".into()), ..spec("api", "prod") };
        let relative = CertSpec { domain_name: Some("api.k8s.example.com".into()), ..spec("api", "prod") };
        assert_eq!(desired(&absolute, &zones()).map(|d| d.domain), desired(&relative, &zones()).map(|d| d.domain));
    }
}
