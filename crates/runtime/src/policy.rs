//! Per-object policies, read from annotations (seed 003's access permissions, Crossplane's
//! deletion and management policies, pause).
//!
//! One rule for every Blockwork annotation (these, and the rotator's under its own prefix): a
//! value is read with surrounding whitespace trimmed and compared with the documented values
//! ignoring ASCII case (`true`, `True` and ` TRUE ` are the same); anything else is an
//! [`AnnotationError`] naming the annotation, the value and what is accepted. So is a key under
//! `blockwork.dev/` that is none of the annotations the object's controller reads (a typo such
//! as `blockwork.dev/pause` would otherwise be ignored). A controller acts on no policy of an
//! object while one of its annotations is invalid — acting on a misspelt policy could delete
//! what the user meant to keep — and says so in a condition and a Warning event.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The prefix of the annotations that set per-object policies.
pub const PREFIX: &str = "blockwork.dev/";
/// `blockwork.dev/paused: "true"` stops all reconciling of one object, deletion included.
pub const PAUSED_ANNOTATION: &str = "blockwork.dev/paused";
/// Seed 003's permission letters: `C`reate, `U`pdate, `D`elete; read is implicit, so `R` or
/// `none` is read-only. Default `CUD`.
pub const ACCESS_ANNOTATION: &str = "blockwork.dev/access-permissions";
/// `Delete` or `Orphan`: what happens to the external resource when the object is deleted.
pub const DELETION_POLICY_ANNOTATION: &str = "blockwork.dev/deletion-policy";
/// `enforce`, `report` or `suspend`: what happens when the external resource drifts.
pub const DRIFT_POLICY_ANNOTATION: &str = "blockwork.dev/drift-policy";
/// The annotations the runtime reads on every object it reconciles.
pub const RUNTIME_ANNOTATIONS: &[&str] = &[PAUSED_ANNOTATION, ACCESS_ANNOTATION, DELETION_POLICY_ANNOTATION, DRIFT_POLICY_ANNOTATION];

/// What a yes/no annotation accepts.
pub const FLAG_VALUES: &str = "true or false";

/// An annotation whose key or value a controller cannot act on. Shown to the user as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}={value:?} is invalid: expected {expected}")]
pub struct AnnotationError {
    pub annotation: String,
    pub value: String,
    /// The accepted values, or the accepted annotations for a key nobody reads.
    pub expected: String,
}

impl AnnotationError {
    pub fn invalid(annotation: &str, value: &str, expected: impl Into<String>) -> Self {
        Self { annotation: annotation.to_owned(), value: value.to_owned(), expected: expected.into() }
    }
}

/// A yes/no annotation: `true` or `false` (see the module's rule).
pub fn parse_flag(annotation: &str, value: &str) -> Result<bool, AnnotationError> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(AnnotationError::invalid(annotation, value, FLAG_VALUES)),
    }
}

/// The first key under `prefix` (e.g. [`PREFIX`]) that is not in `known`, as an error listing
/// `known`.
pub fn unknown_annotation(annotations: &BTreeMap<String, String>, prefix: &str, known: &[&str]) -> Result<(), AnnotationError> {
    match annotations.iter().find(|(key, _)| key.starts_with(prefix) && !known.contains(&key.as_str())) {
        Some((key, value)) => Err(AnnotationError::invalid(key, value, format!("one of the annotations {}", known.join(", ")))),
        None => Ok(()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessPermissions {
    pub create: bool,
    pub update: bool,
    pub delete: bool,
}

impl AccessPermissions {
    pub const ALL: Self = Self { create: true, update: true, delete: true };
}

impl Default for AccessPermissions {
    fn default() -> Self {
        Self::ALL
    }
}

impl FromStr for AccessPermissions {
    type Err = AnnotationError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            AnnotationError::invalid(
                ACCESS_ANNOTATION,
                value,
                "a combination of the letters C (create), U (update), D (delete), or \"none\" for read-only",
            )
        };
        let trimmed = value.trim();
        if trimmed.eq_ignore_ascii_case("none") || trimmed.eq_ignore_ascii_case("r") {
            return Ok(Self { create: false, update: false, delete: false });
        }
        // An empty value is no documented value: read-only must be said (`none`), not implied.
        if trimmed.is_empty() {
            return Err(invalid());
        }
        let mut permissions = Self { create: false, update: false, delete: false };
        for letter in trimmed.chars() {
            match letter.to_ascii_uppercase() {
                'C' => permissions.create = true,
                'U' => permissions.update = true,
                'D' => permissions.delete = true,
                'R' => {}
                _ => return Err(invalid()),
            }
        }
        Ok(permissions)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Delete the external resource with the object.
    Delete,
    /// Keep the external resource; only the object goes.
    Orphan,
}

impl FromStr for DeletionPolicy {
    type Err = AnnotationError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("delete") => Ok(Self::Delete),
            v if v.eq_ignore_ascii_case("orphan") => Ok(Self::Orphan),
            _ => Err(AnnotationError::invalid(DELETION_POLICY_ANNOTATION, value, "Delete or Orphan")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriftPolicy {
    /// Push the spec back to the external resource.
    Enforce,
    /// Leave it, set `Synced=False` with reason `DriftDetected`.
    Report,
    /// Leave it, only record `status.driftDetected`.
    Suspend,
}

impl FromStr for DriftPolicy {
    type Err = AnnotationError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("enforce") => Ok(Self::Enforce),
            v if v.eq_ignore_ascii_case("report") => Ok(Self::Report),
            v if v.eq_ignore_ascii_case("suspend") => Ok(Self::Suspend),
            _ => Err(AnnotationError::invalid(DRIFT_POLICY_ANNOTATION, value, "enforce, report or suspend")),
        }
    }
}

impl fmt::Display for DriftPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Enforce => "enforce",
            Self::Report => "report",
            Self::Suspend => "suspend",
        })
    }
}

/// The policies in force for one object: annotations over the operator's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policies {
    pub paused: bool,
    pub access: AccessPermissions,
    pub deletion: DeletionPolicy,
    pub drift: DriftPolicy,
}

impl Policies {
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
        default_deletion: DeletionPolicy,
        default_drift: DriftPolicy,
    ) -> Result<Self, AnnotationError> {
        unknown_annotation(annotations, PREFIX, RUNTIME_ANNOTATIONS)?;
        let paused = paused(annotations)?;
        let access = annotations.get(ACCESS_ANNOTATION).map(|v| v.parse()).transpose()?.unwrap_or_default();
        let deletion = annotations.get(DELETION_POLICY_ANNOTATION).map(|v| v.parse()).transpose()?.unwrap_or(default_deletion);
        let drift = annotations.get(DRIFT_POLICY_ANNOTATION).map(|v| v.parse()).transpose()?.unwrap_or(default_drift);
        Ok(Self { paused, access, deletion, drift })
    }

    /// Without the delete permission nothing is deleted, whatever the deletion policy says.
    pub fn deletes_external_resource(&self) -> bool {
        self.deletion == DeletionPolicy::Delete && self.access.delete
    }
}

/// Pause is read on its own, first: it must hold even when another annotation is invalid. An
/// invalid value (`yes`, `1`) is an error; the caller holds the object as if paused, since
/// whoever wrote it most likely meant to pause, and says which values are accepted.
pub fn paused(annotations: &BTreeMap<String, String>) -> Result<bool, AnnotationError> {
    annotations.get(PAUSED_ANNOTATION).map(|v| parse_flag(PAUSED_ANNOTATION, v)).transpose().map(Option::unwrap_or_default)
}

/// Whether deleting the object deletes the external resource. Reads only the annotations that
/// decide it (access and deletion policy, and keys nobody reads, which may be a misspelt
/// deletion policy), so a misspelt drift policy cannot block deletion.
pub fn deletes_on_delete(annotations: &BTreeMap<String, String>, default_deletion: DeletionPolicy) -> Result<bool, AnnotationError> {
    unknown_annotation(annotations, PREFIX, RUNTIME_ANNOTATIONS)?;
    let access: AccessPermissions = annotations.get(ACCESS_ANNOTATION).map(|v| v.parse()).transpose()?.unwrap_or_default();
    let deletion = annotations.get(DELETION_POLICY_ANNOTATION).map(|v| v.parse()).transpose()?.unwrap_or(default_deletion);
    Ok(deletion == DeletionPolicy::Delete && access.delete)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn policies(pairs: &[(&str, &str)]) -> Result<Policies, AnnotationError> {
        Policies::from_annotations(&annotations(pairs), DeletionPolicy::Orphan, DriftPolicy::Enforce)
    }

    #[test]
    fn defaults_apply_without_annotations() {
        let p = policies(&[]).expect("no annotations are valid");
        assert_eq!(
            p,
            Policies { paused: false, access: AccessPermissions::ALL, deletion: DeletionPolicy::Orphan, drift: DriftPolicy::Enforce }
        );
    }

    #[test]
    fn permission_letters_combine_in_any_order_and_case() {
        assert_eq!("dc".parse::<AccessPermissions>(), Ok(AccessPermissions { create: true, update: false, delete: true }));
        assert_eq!("U".parse::<AccessPermissions>(), Ok(AccessPermissions { create: false, update: true, delete: false }));
    }

    #[test]
    fn none_and_r_mean_read_only() {
        let read_only = AccessPermissions { create: false, update: false, delete: false };
        assert_eq!("none".parse::<AccessPermissions>(), Ok(read_only));
        assert_eq!("R".parse::<AccessPermissions>(), Ok(read_only));
    }

    #[test]
    fn unknown_permission_letter_is_an_error_naming_the_annotation() {
        let err = "CX".parse::<AccessPermissions>().expect_err("X is not a permission");
        assert!(err.to_string().contains(ACCESS_ANNOTATION), "{err}");
        assert!(err.to_string().contains("\"CX\""), "{err}");
    }

    #[test]
    fn annotations_override_operator_defaults() {
        let p = policies(&[(DELETION_POLICY_ANNOTATION, "Delete"), (DRIFT_POLICY_ANNOTATION, "report"), (PAUSED_ANNOTATION, "true")])
            .expect("valid annotations");
        assert_eq!((p.deletion, p.drift, p.paused), (DeletionPolicy::Delete, DriftPolicy::Report, true));
    }

    #[test]
    fn invalid_drift_policy_is_rejected() {
        let err = policies(&[(DRIFT_POLICY_ANNOTATION, "sometimes")]).expect_err("not a policy");
        assert_eq!(err.annotation, DRIFT_POLICY_ANNOTATION);
    }

    #[test]
    fn missing_delete_permission_orphans_despite_delete_policy() {
        let p = policies(&[(DELETION_POLICY_ANNOTATION, "Delete"), (ACCESS_ANNOTATION, "CU")]).expect("valid");
        assert!(!p.deletes_external_resource());
    }

    #[test]
    fn deletion_reads_only_the_access_and_deletion_annotations() {
        let deletes = |pairs: &[(&str, &str)]| deletes_on_delete(&annotations(pairs), DeletionPolicy::Delete);
        assert_eq!(deletes(&[(DRIFT_POLICY_ANNOTATION, "sometimes")]), Ok(true), "an invalid drift policy does not matter here");
        assert_eq!(deletes(&[(ACCESS_ANNOTATION, "CU")]), Ok(false));
        assert_eq!(deletes(&[(DELETION_POLICY_ANNOTATION, "Orphan")]), Ok(false));
        assert_eq!(
            deletes(&[(DELETION_POLICY_ANNOTATION, "Orpahn")]).map_err(|e| e.annotation),
            Err(DELETION_POLICY_ANNOTATION.to_owned())
        );
        assert_eq!(deletes(&[(ACCESS_ANNOTATION, "CUX")]).map_err(|e| e.annotation), Err(ACCESS_ANNOTATION.to_owned()));
    }

    #[test]
    fn paused_is_true_or_false_in_any_case() {
        assert_eq!(paused(&annotations(&[(PAUSED_ANNOTATION, " TRUE ")])), Ok(true));
        assert_eq!(paused(&annotations(&[(PAUSED_ANNOTATION, "False")])), Ok(false));
        assert_eq!(paused(&annotations(&[])), Ok(false));
    }

    #[test]
    fn a_paused_value_other_than_true_or_false_is_an_error_naming_the_accepted_values() {
        for value in ["yes", "1", "on", ""] {
            let err = paused(&annotations(&[(PAUSED_ANNOTATION, value)])).expect_err(value);
            assert_eq!((err.annotation.as_str(), err.value.as_str()), (PAUSED_ANNOTATION, value));
            assert!(err.to_string().contains("expected true or false"), "{err}");
        }
        assert!(policies(&[(PAUSED_ANNOTATION, "yes")]).is_err());
    }

    #[test]
    fn a_key_under_the_prefix_that_nobody_reads_is_an_error_listing_the_annotations() {
        let err = policies(&[("blockwork.dev/pause", "true")]).expect_err("a typo of paused");
        assert_eq!(err.annotation, "blockwork.dev/pause");
        assert!(err.expected.contains(PAUSED_ANNOTATION) && err.expected.contains(DRIFT_POLICY_ANNOTATION), "{err}");
        assert!(policies(&[("cache.blockwork.dev/other", "x"), ("example.com/blockwork.dev", "x")]).is_ok(), "other prefixes are not ours");
    }

    #[test]
    fn a_misspelt_deletion_policy_key_is_not_a_deletion() {
        let deletes = deletes_on_delete(&annotations(&[("blockwork.dev/deletion-polcy", "Orphan")]), DeletionPolicy::Delete);
        assert_eq!(deletes.map_err(|e| e.annotation), Err("blockwork.dev/deletion-polcy".to_owned()));
    }

    #[test]
    fn an_empty_access_value_is_not_read_only_but_an_error() {
        assert!("".parse::<AccessPermissions>().is_err());
        assert!(" ".parse::<AccessPermissions>().is_err());
    }

    #[test]
    fn flags_accept_true_and_false_only() {
        assert_eq!(parse_flag("k", "True"), Ok(true));
        assert_eq!(parse_flag("k", " false"), Ok(false));
        assert_eq!(parse_flag("k", "yes").map_err(|e| e.expected), Err(FLAG_VALUES.to_owned()));
    }
}
