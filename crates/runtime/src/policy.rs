//! Per-object policies, read from annotations (seed 003's access permissions, Crossplane's
//! deletion and management policies, pause).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// `blockwork.dev/paused: "true"` stops all reconciling of one object, deletion included.
pub const PAUSED_ANNOTATION: &str = "blockwork.dev/paused";
/// Seed 003's permission letters: `C`reate, `U`pdate, `D`elete; read is implicit, so `R` or
/// `none` is read-only. Default `CUD`.
pub const ACCESS_ANNOTATION: &str = "blockwork.dev/access-permissions";
/// `Delete` or `Orphan`: what happens to the external resource when the object is deleted.
pub const DELETION_POLICY_ANNOTATION: &str = "blockwork.dev/deletion-policy";
/// `enforce`, `report` or `suspend`: what happens when the external resource drifts.
pub const DRIFT_POLICY_ANNOTATION: &str = "blockwork.dev/drift-policy";

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
    type Err = PolicyError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let trimmed = value.trim();
        if trimmed.eq_ignore_ascii_case("none") || trimmed.eq_ignore_ascii_case("r") {
            return Ok(Self { create: false, update: false, delete: false });
        }
        let mut permissions = Self { create: false, update: false, delete: false };
        for letter in trimmed.chars() {
            match letter.to_ascii_uppercase() {
                'C' => permissions.create = true,
                'U' => permissions.update = true,
                'D' => permissions.delete = true,
                'R' => {}
                _ => {
                    return Err(PolicyError::invalid(
                        ACCESS_ANNOTATION,
                        value,
                        "a combination of the letters C (create), U (update), D (delete), or \"none\" for read-only",
                    ));
                }
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
    type Err = PolicyError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("delete") => Ok(Self::Delete),
            v if v.eq_ignore_ascii_case("orphan") => Ok(Self::Orphan),
            _ => Err(PolicyError::invalid(DELETION_POLICY_ANNOTATION, value, "Delete or Orphan")),
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
    type Err = PolicyError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("enforce") => Ok(Self::Enforce),
            v if v.eq_ignore_ascii_case("report") => Ok(Self::Report),
            v if v.eq_ignore_ascii_case("suspend") => Ok(Self::Suspend),
            _ => Err(PolicyError::invalid(DRIFT_POLICY_ANNOTATION, value, "enforce, report or suspend")),
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

/// An annotation with a value the runtime cannot act on. Shown to the user as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}={value:?} is invalid: expected {expected}")]
pub struct PolicyError {
    pub annotation: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl PolicyError {
    fn invalid(annotation: &'static str, value: &str, expected: &'static str) -> Self {
        Self { annotation, value: value.to_owned(), expected }
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
    ) -> Result<Self, PolicyError> {
        let paused = is_paused(annotations);
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

/// Pause is read on its own: it never fails to parse (anything but `true` is not paused), and it
/// must hold even when another annotation is invalid.
pub fn is_paused(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(PAUSED_ANNOTATION).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether deleting the object deletes the external resource. Reads only the annotations that
/// decide it (access and deletion policy), so a misspelt drift policy cannot block deletion.
pub fn deletes_on_delete(annotations: &BTreeMap<String, String>, default_deletion: DeletionPolicy) -> Result<bool, PolicyError> {
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

    fn policies(pairs: &[(&str, &str)]) -> Result<Policies, PolicyError> {
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
        assert_eq!(deletes(&[(DELETION_POLICY_ANNOTATION, "Orpahn")]).map_err(|e| e.annotation), Err(DELETION_POLICY_ANNOTATION));
        assert_eq!(deletes(&[(ACCESS_ANNOTATION, "CUX")]).map_err(|e| e.annotation), Err(ACCESS_ANNOTATION));
    }

    #[test]
    fn paused_only_when_exactly_true() {
        assert!(!policies(&[(PAUSED_ANNOTATION, "yes")]).expect("valid").paused);
        assert!(policies(&[(PAUSED_ANNOTATION, " TRUE ")]).expect("valid").paused);
    }
}
