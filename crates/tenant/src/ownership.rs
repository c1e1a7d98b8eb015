//! Who a CloudFront tenant belongs to, and what an object does about it (issue 31, ADR 0017's
//! ownership rules for tenants). Pure: the calls read the tags and the status, this decides.
//!
//! The tags on the tenant are the one authority: `blockwork.dev/owner-uid` names the owning
//! object's UID, `blockwork.dev/owner` its `<namespace>/<name>` for people. Tenants created
//! before issue 31 carry only `blockwork.dev/owner` = the object's idempotency token; they are
//! still their object's (an upgrade must not make every tenant foreign).
//!
//! Taking a tenant over is explicit (`spec.adopt.tenantId`) and is a tag write, last writer
//! wins; every object re-reads the tags before it acts, and one that finds another owner on a
//! tenant it held is `OwnershipLost` for good (sticky in its status): it never writes the
//! tenant, its records, or takes it back. So two objects adopting at once end with one owner.

use crate::diff::TenantConfig;

/// The tag naming the owning object's UID: the authoritative owner.
pub const OWNER_UID_TAG: &str = "blockwork.dev/owner-uid";

/// The tag naming the owning object as `<namespace>/<name>`; before issue 31, its idempotency
/// token.
pub const OWNER_TAG: &str = "blockwork.dev/owner";

/// The ownership tags as found on a tenant, or as written for an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerTags {
    /// [`OWNER_UID_TAG`].
    pub uid: Option<String>,
    /// [`OWNER_TAG`].
    pub owner: Option<String>,
}

impl OwnerTags {
    /// The tags that make an object the owner.
    pub fn of(uid: &str, namespace: &str, name: &str) -> Self {
        Self { uid: Some(uid.to_owned()), owner: Some(format!("{namespace}/{name}")) }
    }
}

/// An object as the tags are compared with it.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub uid: &'a str,
    /// The object's idempotency token: what tenants created before issue 31 were tagged with.
    pub token: &'a str,
}

/// Whose the tenant is, by its tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The object's own.
    This,
    /// Another object's (another cluster's, or another namespace's).
    Other,
    /// Nobody's: made outside Blockwork (console, Terraform) or its tags removed.
    Nobody,
}

pub fn owner(tags: &OwnerTags, claimant: Claimant<'_>) -> Owner {
    match (tags.uid.as_deref(), tags.owner.as_deref()) {
        (Some(uid), _) if uid == claimant.uid => Owner::This,
        (Some(_), _) => Owner::Other,
        (None, Some(token)) if token == claimant.token => Owner::This,
        (None, Some(_)) => Owner::Other,
        (None, None) => Owner::Nobody,
    }
}

/// What an object does with the tenant it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Its own: act on it as the spec and the policies say.
    Owned,
    /// Take it over: write the ownership tags, nothing else, then read it again.
    Adopt,
    /// Not taken over: it differs from the spec where adoption cannot change it (or the drift
    /// policy would not), every difference named.
    Mismatch(Vec<String>),
    /// It held the tenant and another object took it: hands off, for good.
    Lost,
    /// Found by name, someone else's, and not named by `spec.adopt`: left alone.
    NameTaken,
}

/// What the object knows of the tenant before this read.
#[derive(Clone, Copy, Debug)]
pub struct Held {
    /// It acted on the tenant as its own: created it, or adopted it.
    pub held: bool,
    /// It found another owner on it before (`status.ownershipLost`).
    pub lost: bool,
    /// `spec.adopt.tenantId` names this tenant.
    pub adopting: bool,
}

/// The decision, from the tags' owner, what the object held, and the differences between spec
/// and tenant: `identity` (name, distribution, domains: adoption never changes them) and
/// `correctable` (the rest), which the drift policy corrects after adoption when it is
/// `enforce`.
pub fn claim(owner: Owner, held: Held, identity: Vec<String>, correctable: Vec<String>, corrects_drift: bool) -> Claim {
    if held.lost {
        return Claim::Lost;
    }
    match owner {
        Owner::This => Claim::Owned,
        // Held and now someone else's: taken over (the tag is last-writer-wins).
        Owner::Other if held.held => Claim::Lost,
        // Held and untagged (tags removed outside): tagged again, no other owner to fight.
        Owner::Nobody if held.held => Claim::Adopt,
        Owner::Other | Owner::Nobody if !held.adopting => Claim::NameTaken,
        Owner::Other | Owner::Nobody => {
            let mut differences = identity;
            if !corrects_drift {
                differences.extend(correctable);
            }
            if differences.is_empty() { Claim::Adopt } else { Claim::Mismatch(differences) }
        }
    }
}

/// The differences adoption never corrects: the tenant's name (CloudFront cannot rename one) and
/// what `TenantConfig::identity_differences` names.
pub fn identity_differences(name: &str, observed_name: Option<&str>, desired: &TenantConfig, observed: &TenantConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(observed_name) = observed_name
        && observed_name != name
    {
        out.push(format!("name is {observed_name:?}, want {name:?} (metadata.name is the tenant's name)"));
    }
    out.extend(desired.identity_differences(observed));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Claimant<'static> = Claimant { uid: "uid-a", token: "token-a" };

    fn tags(uid: Option<&str>, owner: Option<&str>) -> OwnerTags {
        OwnerTags { uid: uid.map(str::to_owned), owner: owner.map(str::to_owned) }
    }

    fn held(held: bool, lost: bool, adopting: bool) -> Held {
        Held { held, lost, adopting }
    }

    #[test]
    fn the_uid_tag_decides_the_owner() {
        assert_eq!(owner(&tags(Some("uid-a"), Some("ns/a")), ME), Owner::This);
        assert_eq!(owner(&tags(Some("uid-b"), Some("ns/a")), ME), Owner::Other);
    }

    #[test]
    fn a_tenant_tagged_with_the_token_before_issue_31_is_still_its_objects() {
        assert_eq!(owner(&tags(None, Some("token-a")), ME), Owner::This);
        assert_eq!(owner(&tags(None, Some("token-b")), ME), Owner::Other);
    }

    #[test]
    fn an_untagged_tenant_is_nobodys() {
        assert_eq!(owner(&OwnerTags::default(), ME), Owner::Nobody);
    }

    #[test]
    fn a_tenant_found_by_name_that_is_not_ours_is_left_alone() {
        assert_eq!(claim(Owner::Other, held(false, false, false), vec![], vec![], true), Claim::NameTaken);
        assert_eq!(claim(Owner::Nobody, held(false, false, false), vec![], vec![], true), Claim::NameTaken);
    }

    #[test]
    fn a_matching_tenant_named_by_spec_adopt_is_adopted_from_nobody_or_another_object() {
        assert_eq!(claim(Owner::Nobody, held(false, false, true), vec![], vec![], false), Claim::Adopt);
        assert_eq!(claim(Owner::Other, held(false, false, true), vec![], vec![], false), Claim::Adopt);
    }

    #[test]
    fn identity_differences_refuse_adoption_whatever_the_drift_policy() {
        let refused = claim(Owner::Nobody, held(false, false, true), vec!["domains".to_owned()], vec![], true);
        assert_eq!(refused, Claim::Mismatch(vec!["domains".to_owned()]));
    }

    #[test]
    fn other_differences_refuse_adoption_unless_the_drift_policy_corrects_them() {
        let differences = || vec!["enabled".to_owned()];
        assert_eq!(claim(Owner::Nobody, held(false, false, true), vec![], differences(), true), Claim::Adopt);
        assert_eq!(claim(Owner::Nobody, held(false, false, true), vec![], differences(), false), Claim::Mismatch(differences()));
    }

    #[test]
    fn a_held_tenant_another_object_tagged_is_lost() {
        assert_eq!(claim(Owner::Other, held(true, false, true), vec![], vec![], true), Claim::Lost);
        assert_eq!(claim(Owner::Other, held(true, false, false), vec![], vec![], true), Claim::Lost);
    }

    #[test]
    fn lost_is_sticky_even_when_the_tags_name_the_object_again() {
        assert_eq!(claim(Owner::This, held(true, true, true), vec![], vec![], true), Claim::Lost);
    }

    #[test]
    fn a_held_tenant_whose_tags_were_removed_is_tagged_again() {
        assert_eq!(claim(Owner::Nobody, held(true, false, false), vec![], vec![], false), Claim::Adopt);
    }

    #[test]
    fn a_different_name_is_named_as_a_difference() {
        let config = TenantConfig::default();
        assert_eq!(identity_differences("shop", Some("shop"), &config, &config), Vec::<String>::new());
        assert_eq!(
            identity_differences("shop", Some("old-shop"), &config, &config),
            ["name is \"old-shop\", want \"shop\" (metadata.name is the tenant's name)"]
        );
    }
}
