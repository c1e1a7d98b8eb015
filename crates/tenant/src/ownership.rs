//! The tenant's side of ADR 0017 (ownership, adoption, handover): the shared decision
//! ([`blockwork_aws::ownership::claim`]) with what is the tenant's own. Pure: the calls read the
//! tags and the status, this decides.
//!
//! - Tenants created before issue 31 carry only `blockwork.dev/owner` = their object's
//!   idempotency token; they are still that object's (an upgrade must not make every tenant
//!   foreign), so such a tag is read as the object's UID ([`read_as`]).
//! - Lost is sticky (`status.ownershipLost`), whatever the tags say later.
//! - What adopting a tenant requires of it ([`identity_differences`] always, the other settings
//!   unless the drift policy corrects them) is decided here, before the tags are written.

use blockwork_aws::ownership::{Approach, Owner, TAG_OWNER, TAG_OWNER_UID, Tagged, tagged};

use crate::diff::TenantConfig;

/// An object as the tags are compared with it.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub owner: Owner<'a>,
    /// The object's idempotency token: what tenants created before issue 31 were tagged with.
    pub token: &'a str,
}

/// The tags as the shared decision reads them: a tenant tagged before issue 31 with this
/// object's token alone is read as tagged with its UID.
pub fn read_as(tags: &[(String, String)], claimant: Claimant<'_>) -> Vec<(String, String)> {
    let value = |key: &str| tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    match (value(TAG_OWNER_UID), value(TAG_OWNER)) {
        (None, Some(token)) if token == claimant.token => {
            let mut read = tags.to_vec();
            read.push((TAG_OWNER_UID.to_owned(), claimant.owner.uid.to_owned()));
            read
        }
        _ => tags.to_vec(),
    }
}

/// Whether the tags make the tenant this object's: what it may delete.
pub fn is_ours(tags: &[(String, String)], claimant: Claimant<'_>) -> bool {
    tagged(&read_as(tags, claimant), &claimant.owner) == Tagged::Us
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
    /// It held the tenant and another object took it (`by`, its `<namespace>/<name>` if the tags
    /// say): hands off, for good.
    Lost { by: Option<String> },
    /// Found by name, owned by the same `<namespace>/<name>` elsewhere (the same manifest in
    /// another cluster): neither taken silently nor duplicated.
    OwnedElsewhere { by: String },
    /// Found by name, someone else's: left alone.
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

/// The differences between spec and tenant that matter to an adoption: `identity` (name,
/// distribution, domains: adoption never changes them) and `settings` (the rest), which the
/// drift policy corrects after adoption when it is `enforce` (`corrects_drift`).
#[derive(Clone, Debug, Default)]
pub struct Differences {
    pub identity: Vec<String>,
    pub settings: Vec<String>,
    pub corrects_drift: bool,
}

/// The decision: ADR 0017's table, then, for an adoption, the differences.
pub fn claim(tags: &[(String, String)], claimant: Claimant<'_>, held: Held, differences: Differences) -> Claim {
    let tags = read_as(tags, claimant);
    if held.lost {
        let by = tags.iter().find(|(key, _)| key == TAG_OWNER).map(|(_, owner)| owner.clone());
        return Claim::Lost { by };
    }
    let approach = match (held.held, held.adopting) {
        (true, _) => Approach::Held,
        (false, true) => Approach::Adopting,
        (false, false) => Approach::Finding,
    };
    match blockwork_aws::ownership::claim(approach, &tags, &claimant.owner) {
        blockwork_aws::ownership::Claim::Ours => Claim::Owned,
        blockwork_aws::ownership::Claim::Lost { by } => Claim::Lost { by },
        blockwork_aws::ownership::Claim::OwnedElsewhere { by } => Claim::OwnedElsewhere { by },
        blockwork_aws::ownership::Claim::NotOurs => Claim::NameTaken,
        blockwork_aws::ownership::Claim::Adopt => {
            let Differences { mut identity, settings, corrects_drift } = differences;
            if !corrects_drift {
                identity.extend(settings);
            }
            if identity.is_empty() { Claim::Adopt } else { Claim::Mismatch(identity) }
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

    const ME: Claimant<'static> = Claimant { owner: Owner { uid: "uid-a", namespace: "team", name: "shop" }, token: "token-a" };

    fn tags(uid: Option<&str>, owner: Option<&str>) -> Vec<(String, String)> {
        let mut tags = Vec::new();
        tags.extend(uid.map(|uid| (TAG_OWNER_UID.to_owned(), uid.to_owned())));
        tags.extend(owner.map(|owner| (TAG_OWNER.to_owned(), owner.to_owned())));
        tags
    }

    fn held(held: bool, lost: bool, adopting: bool) -> Held {
        Held { held, lost, adopting }
    }

    fn none() -> Differences {
        Differences { corrects_drift: true, ..Differences::default() }
    }

    #[test]
    fn a_tenant_tagged_with_the_token_before_issue_31_is_still_its_objects() {
        assert!(is_ours(&tags(None, Some("token-a")), ME));
        assert!(!is_ours(&tags(None, Some("token-b")), ME));
        assert_eq!(claim(&tags(None, Some("token-a")), ME, held(false, false, false), none()), Claim::Owned, "found by name");
    }

    #[test]
    fn a_tenant_found_by_name_that_is_someone_elses_is_left_alone() {
        assert_eq!(claim(&tags(Some("uid-b"), Some("other/web")), ME, held(false, false, false), none()), Claim::NameTaken);
        assert_eq!(claim(&tags(None, None), ME, held(false, false, false), none()), Claim::NameTaken);
    }

    #[test]
    fn the_same_manifests_tenant_in_another_cluster_is_owned_elsewhere() {
        let claimed = claim(&tags(Some("uid-old"), Some("team/shop")), ME, held(false, false, false), none());
        assert_eq!(claimed, Claim::OwnedElsewhere { by: "team/shop".to_owned() });
    }

    #[test]
    fn a_matching_tenant_named_by_spec_adopt_is_adopted_from_nobody_or_another_object() {
        assert_eq!(claim(&tags(None, None), ME, held(false, false, true), none()), Claim::Adopt);
        assert_eq!(claim(&tags(Some("uid-b"), Some("team/shop")), ME, held(false, false, true), none()), Claim::Adopt);
    }

    #[test]
    fn identity_differences_refuse_adoption_whatever_the_drift_policy() {
        let differences = Differences { identity: vec!["domains".to_owned()], ..none() };
        assert_eq!(claim(&[], ME, held(false, false, true), differences), Claim::Mismatch(vec!["domains".to_owned()]));
    }

    #[test]
    fn other_differences_refuse_adoption_unless_the_drift_policy_corrects_them() {
        let differences = |corrects_drift| Differences { settings: vec!["enabled".to_owned()], corrects_drift, ..Differences::default() };
        assert_eq!(claim(&[], ME, held(false, false, true), differences(true)), Claim::Adopt);
        assert_eq!(claim(&[], ME, held(false, false, true), differences(false)), Claim::Mismatch(vec!["enabled".to_owned()]));
    }

    #[test]
    fn a_held_tenant_another_object_tagged_is_lost() {
        let claimed = claim(&tags(Some("uid-b"), Some("other/shop")), ME, held(true, false, true), none());
        assert_eq!(claimed, Claim::Lost { by: Some("other/shop".to_owned()) });
    }

    #[test]
    fn lost_is_sticky_even_when_the_tags_name_the_object_again() {
        assert!(matches!(claim(&tags(Some("uid-a"), Some("team/shop")), ME, held(true, true, true), none()), Claim::Lost { .. }));
    }

    #[test]
    fn a_held_tenant_whose_tags_were_removed_stays_its_objects_but_is_not_deleted() {
        assert_eq!(claim(&[], ME, held(true, false, false), none()), Claim::Owned);
        assert!(!is_ours(&[], ME));
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
