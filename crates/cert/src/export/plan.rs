//! Whether a Ready certificate's Secret must be written, and why: the pure decision of each look
//! (ADR 0016). The Secret is written the first time, after each renewal ACM made (its
//! certificate expires later than the one in the Secret: list-first, the account's listing tells),
//! for a new certificate (changed names) and for a changed template. A Secret someone else
//! changed or deleted is drift, repaired or left as the drift policy says; a Secret that is not
//! this Cert's is never written.

use blockwork_runtime::DriftPolicy;

use super::material::{Facts, Unusable};
use super::secret::Owner;
use crate::api::ExportStatus;

/// The Secret as one look read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub owner: Owner,
    pub resource_version: String,
    /// What its `tls.crt`, `tls.key` and `ca.crt` hold, if they are consistent.
    pub content: Result<Facts, Unusable>,
    /// Its type, labels and annotations are those the spec and the recorded export give it.
    pub metadata_intact: bool,
    /// The certificate its annotation names.
    pub certificate_arn: Option<String>,
}

/// What a look knows.
#[derive(Clone, Copy, Debug)]
pub struct Look<'a> {
    pub secret_name: &'a str,
    /// The certificate (Ready) and when ACM says it expires.
    pub certificate_arn: &'a str,
    pub not_after: Option<jiff::Timestamp>,
    /// What the status recorded of the last export.
    pub recorded: Option<&'a ExportStatus>,
    /// The Secret of that name; `None`: absent.
    pub secret: Option<&'a Seen>,
    /// The spec changed since it was last applied (a changed template is no drift).
    pub spec_changed: bool,
    pub drift: DriftPolicy,
}

/// Why the Secret is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// Never written for this certificate under this name.
    First,
    /// ACM renewed the certificate: it expires later than the one in the Secret.
    Renewed,
    /// The spec changed what the Secret carries besides the certificate (its template).
    SpecChanged,
    /// Someone changed or deleted it (drift policy enforce).
    Repair(String),
}

impl Why {
    /// The `why` label of `exports_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Renewed => "renewed",
            Self::SpecChanged => "spec_changed",
            Self::Repair(_) => "repair",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to write. `adopt`: the status should record the Secret as found (written by a look
    /// whose status write was lost, or its resourceVersion moved by a change that kept all that
    /// matters).
    Current {
        adopt: Option<Facts>,
    },
    Write(Why),
    /// A Secret of that name that is not this Cert's: never written.
    Conflict(Owner),
    /// Someone changed or deleted it and the drift policy (report, suspend) leaves it.
    LeaveDrifted(String),
}

pub fn decide(look: &Look<'_>) -> Decision {
    let recorded = look.recorded.filter(|r| r.secret_name == look.secret_name && r.certificate_arn == look.certificate_arn);
    let drifted = |what: String| match look.drift {
        DriftPolicy::Enforce => Decision::Write(Why::Repair(what)),
        DriftPolicy::Report | DriftPolicy::Suspend => Decision::LeaveDrifted(what),
    };
    let Some(seen) = look.secret else {
        return match recorded {
            Some(_) => drifted("the Secret was deleted".to_owned()),
            None => Decision::Write(Why::First),
        };
    };
    if seen.owner != Owner::This {
        return Decision::Conflict(seen.owner.clone());
    }
    let renewed = |facts: &Facts| look.not_after.is_some_and(|acm| acm > facts.not_after);
    match (&seen.content, recorded) {
        (Ok(facts), Some(recorded)) if facts.serial == recorded.serial => {
            if !seen.metadata_intact {
                return match look.spec_changed {
                    true => Decision::Write(Why::SpecChanged),
                    false => drifted("its labels, annotations or type were changed".to_owned()),
                };
            }
            if renewed(facts) {
                return Decision::Write(Why::Renewed);
            }
            let moved = seen.resource_version != recorded.resource_version;
            Decision::Current { adopt: moved.then(|| facts.clone()) }
        }
        // A later export of the same certificate, whole and as written: a look whose status this
        // one has not read yet wrote it (its watch event can outrun the status write into the
        // cache). Adopted; anything else in its place is someone else's.
        (Ok(facts), Some(recorded))
            if seen.certificate_arn.as_deref() == Some(look.certificate_arn)
                && seen.metadata_intact
                && facts.not_after > recorded.not_after.0
                && !renewed(facts) =>
        {
            Decision::Current { adopt: Some(facts.clone()) }
        }
        (Ok(_), Some(_)) => drifted("it holds another certificate than the one exported".to_owned()),
        (Err(why), Some(_)) => drifted(why.to_string()),
        // Ours, but the status does not record it for this certificate: a new certificate (its
        // names changed), a new Secret name, or a status write lost after the Secret's. The
        // last is adopted when the Secret holds this certificate, current and whole.
        (Ok(facts), None) => {
            let this_certificate = seen.certificate_arn.as_deref() == Some(look.certificate_arn);
            if this_certificate && seen.metadata_intact && !renewed(facts) {
                Decision::Current { adopt: Some(facts.clone()) }
            } else {
                Decision::Write(Why::First)
            }
        }
        (Err(_), None) => Decision::Write(Why::First),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/a";

    fn at(days: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + days * 86_400).unwrap()
    }

    fn facts(serial: &str, expires: i64) -> Facts {
        Facts { serial: serial.into(), not_before: at(expires - 395), not_after: at(expires) }
    }

    fn recorded(serial: &str) -> ExportStatus {
        ExportStatus {
            secret_name: "api-tls".into(),
            certificate_arn: ARN.into(),
            serial: serial.into(),
            not_after: Time(at(30)),
            exported_at: Time(at(-365)),
            resource_version: "7".into(),
        }
    }

    fn seen(content: Result<Facts, Unusable>) -> Seen {
        Seen { owner: Owner::This, resource_version: "7".into(), content, metadata_intact: true, certificate_arn: Some(ARN.into()) }
    }

    fn look<'a>(recorded: Option<&'a ExportStatus>, secret: Option<&'a Seen>, drift: DriftPolicy) -> Look<'a> {
        Look { secret_name: "api-tls", certificate_arn: ARN, not_after: Some(at(30)), recorded, secret, spec_changed: false, drift }
    }

    #[test]
    fn a_secret_never_written_is_written() {
        assert_eq!(decide(&look(None, None, DriftPolicy::Enforce)), Decision::Write(Why::First));
        assert_eq!(decide(&look(None, None, DriftPolicy::Suspend)), Decision::Write(Why::First), "writing it first is no drift");
    }

    #[test]
    fn the_secret_as_written_is_current_and_costs_nothing() {
        let (recorded, seen) = (recorded("0a"), seen(Ok(facts("0a", 30))));
        assert_eq!(decide(&look(Some(&recorded), Some(&seen), DriftPolicy::Enforce)), Decision::Current { adopt: None });
    }

    #[test]
    fn a_renewal_acm_made_is_exported_under_every_drift_policy() {
        let (recorded, seen) = (recorded("0a"), seen(Ok(facts("0a", 30))));
        for policy in [DriftPolicy::Enforce, DriftPolicy::Report, DriftPolicy::Suspend] {
            let renewed = Look { not_after: Some(at(395)), ..look(Some(&recorded), Some(&seen), policy) };
            assert_eq!(decide(&renewed), Decision::Write(Why::Renewed), "{policy}");
        }
    }

    #[test]
    fn a_deleted_or_edited_secret_is_repaired_under_enforce_and_left_under_report_and_suspend() {
        let recorded = recorded("0a");
        let edited = seen(Err(Unusable::KeyMismatch));
        let replaced = seen(Ok(facts("ff", 30)));
        let relabelled = Seen { metadata_intact: false, ..seen(Ok(facts("0a", 30))) };
        for secret in [None, Some(&edited), Some(&replaced), Some(&relabelled)] {
            assert!(matches!(decide(&look(Some(&recorded), secret, DriftPolicy::Enforce)), Decision::Write(Why::Repair(_))), "{secret:?}");
            for policy in [DriftPolicy::Report, DriftPolicy::Suspend] {
                assert!(matches!(decide(&look(Some(&recorded), secret, policy)), Decision::LeaveDrifted(_)), "{policy}: {secret:?}");
            }
        }
    }

    #[test]
    fn a_secret_that_is_not_this_cert_s_is_never_written() {
        for owner in [Owner::Foreign, Owner::OtherCert] {
            let theirs = Seen { owner: owner.clone(), ..seen(Ok(facts("0a", 30))) };
            for recorded in [None, Some(recorded("0a"))] {
                assert_eq!(decide(&look(recorded.as_ref(), Some(&theirs), DriftPolicy::Enforce)), Decision::Conflict(owner.clone()));
            }
        }
    }

    #[test]
    fn a_changed_template_is_written_not_reported_as_drift() {
        let (recorded, seen) = (recorded("0a"), Seen { metadata_intact: false, ..seen(Ok(facts("0a", 30))) });
        let changed = Look { spec_changed: true, ..look(Some(&recorded), Some(&seen), DriftPolicy::Report) };
        assert_eq!(decide(&changed), Decision::Write(Why::SpecChanged));
    }

    #[test]
    fn a_secret_written_by_a_look_whose_status_was_lost_is_adopted_not_exported_again() {
        let seen = seen(Ok(facts("0a", 30)));
        assert_eq!(decide(&look(None, Some(&seen), DriftPolicy::Enforce)), Decision::Current { adopt: Some(facts("0a", 30)) });
    }

    #[test]
    fn a_new_certificate_or_a_new_secret_name_is_written_into_a_secret_of_this_cert() {
        let old = Seen { certificate_arn: Some("arn:aws:acm:us-east-1:123456789012:certificate/old".into()), ..seen(Ok(facts("01", 30))) };
        let recorded_old = ExportStatus { certificate_arn: "arn:aws:acm:us-east-1:123456789012:certificate/old".into(), ..recorded("01") };
        assert_eq!(decide(&look(Some(&recorded_old), Some(&old), DriftPolicy::Suspend)), Decision::Write(Why::First));
        let other_name = ExportStatus { secret_name: "old-tls".into(), ..recorded("0a") };
        assert_eq!(decide(&look(Some(&other_name), None, DriftPolicy::Report)), Decision::Write(Why::First));
    }

    #[test]
    fn a_later_export_written_by_a_look_whose_status_is_not_read_yet_is_adopted_not_repaired() {
        let recorded = recorded("0a");
        let renewed = Look { not_after: Some(at(395)), ..look(Some(&recorded), None, DriftPolicy::Enforce) };
        let written = Seen { resource_version: "9".into(), ..seen(Ok(facts("0b", 395))) };
        assert_eq!(decide(&Look { secret: Some(&written), ..renewed }), Decision::Current { adopt: Some(facts("0b", 395)) });
        // An older certificate, or one whose metadata was changed, is someone else's doing.
        let older = seen(Ok(facts("0c", 10)));
        assert!(matches!(decide(&Look { secret: Some(&older), ..renewed }), Decision::Write(Why::Repair(_))));
        let relabelled = Seen { metadata_intact: false, ..written.clone() };
        assert!(matches!(decide(&Look { secret: Some(&relabelled), ..renewed }), Decision::Write(Why::Repair(_))));
    }

    #[test]
    fn a_harmless_change_of_the_secret_is_recorded_without_an_export() {
        let recorded = recorded("0a");
        let touched = Seen { resource_version: "9".into(), ..seen(Ok(facts("0a", 30))) };
        assert_eq!(
            decide(&look(Some(&recorded), Some(&touched), DriftPolicy::Enforce)),
            Decision::Current { adopt: Some(facts("0a", 30)) }
        );
    }
}
