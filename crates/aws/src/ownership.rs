//! Who owns an AWS resource Blockwork manages, and what an object may do with one it finds
//! (ADR 0017). The tags on the resource are the record: `blockwork.dev/owner-uid` names the one
//! authoritative owner (a Kubernetes object's UID, unique across clusters), and
//! `blockwork.dev/owner` its `<namespace>/<name>` for people and for telling "the same manifest
//! in another cluster" apart from a stranger. Pure: the kinds read the tags, ask [`claim`], and
//! act; the condition reasons below are shared by every kind that adopts.

/// The owning object's UID: the one authoritative owner.
pub const TAG_OWNER_UID: &str = "blockwork.dev/owner-uid";
/// The owning object's `<namespace>/<name>`.
pub const TAG_OWNER: &str = "blockwork.dev/owner";

/// Ready=False: the resource to adopt differs from the spec; the message names every difference.
pub const ADOPTION_MISMATCH: &str = "AdoptionMismatch";
/// Ready=False: the resource to adopt is in an account, or uses a zone, the namespace is not
/// granted (or is of the wrong kind); nothing was written.
pub const ADOPTION_REFUSED: &str = "AdoptionRefused";
/// Ready=False: another object (e.g. in another cluster) took the resource over; this object no
/// longer acts on it, and is released on deletion without deleting anything in AWS.
pub const OWNERSHIP_LOST: &str = "OwnershipLost";
/// Ready=False: a resource for exactly this spec exists, owned by an object of the same
/// namespace and name elsewhere (the same manifest in another cluster); nothing is created (it
/// would be a duplicate) until the object adopts it.
pub const OWNED_ELSEWHERE: &str = "OwnedElsewhere";

/// The Kubernetes object that holds or claims a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub uid: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Owner<'_> {
    /// The ownership tags this object writes on a resource it creates or adopts.
    pub fn tags(&self) -> Vec<(String, String)> {
        vec![(TAG_OWNER.to_owned(), self.reference()), (TAG_OWNER_UID.to_owned(), self.uid.to_owned())]
    }

    /// `<namespace>/<name>`, as the owner tag holds it.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Whom a resource's tags name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tagged {
    /// No owner UID: made outside Blockwork (console, Terraform, another operator).
    Nobody,
    /// This object.
    Us,
    /// Another object: its `<namespace>/<name>` if the tags say.
    Other { owner: Option<String> },
}

/// Whom `tags` name, from `me`'s point of view. An empty UID (an object not stored yet) is
/// never an owner.
pub fn tagged(tags: &[(String, String)], me: &Owner<'_>) -> Tagged {
    let value = |key: &str| tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    match value(TAG_OWNER_UID).filter(|uid| !uid.is_empty()) {
        None => Tagged::Nobody,
        Some(uid) if !me.uid.is_empty() && uid == me.uid => Tagged::Us,
        Some(_) => Tagged::Other { owner: value(TAG_OWNER).map(str::to_owned) },
    }
}

/// How the object came to look at the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approach {
    /// Its status holds the resource: it created or adopted it earlier.
    Held,
    /// Its spec names the resource to adopt (e.g. `spec.adopt.certificateArn`), and it does
    /// not hold it yet.
    Adopting,
    /// It looks for a resource of its own that matches its spec (its status was lost, or it is
    /// about to create one).
    Finding,
}

/// What the object may do with the resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Its own: act on it.
    Ours,
    /// Write this object's ownership tags (and nothing else), then read them back at the next
    /// look before acting: when two objects adopt at once the last tag write wins, and the
    /// other finds itself [`Claim::Lost`].
    Adopt,
    /// Held, but another object's now: stop acting on it (no update, no delete). Sticky: the
    /// object never takes it back by itself; the user acts (ADR 0017).
    Lost { by: Option<String> },
    /// Found for this spec, owned by an object of the same namespace and name elsewhere (the
    /// same manifest in another cluster): neither create a duplicate nor take it silently.
    OwnedElsewhere { by: String },
    /// Someone else's resource that merely looks alike: not this object's concern.
    NotOurs,
}

/// The claim decision: what `me`, approaching a resource so, may do with it given its tags.
///
/// - Held: ours stays ours, and so does one whose tags someone removed (nobody else claims it;
///   it is not deleted by a Cert whose tag is missing, though); another owner means it was
///   taken over: lost.
/// - Adopting: the user named the resource, so whoever owned it before, this object takes it
///   (the previous owner finds itself lost).
/// - Finding: only what is ours is ours; one owned by the same `<namespace>/<name>` with
///   another UID is the same manifest elsewhere.
pub fn claim(approach: Approach, tags: &[(String, String)], me: &Owner<'_>) -> Claim {
    match (approach, tagged(tags, me)) {
        (_, Tagged::Us) => Claim::Ours,
        (Approach::Held, Tagged::Nobody) => Claim::Ours,
        (Approach::Adopting, _) => Claim::Adopt,
        (Approach::Held, Tagged::Other { owner }) => Claim::Lost { by: owner },
        (Approach::Finding, Tagged::Other { owner: Some(owner) }) if owner == me.reference() => Claim::OwnedElsewhere { by: owner },
        (Approach::Finding, _) => Claim::NotOurs,
    }
}

/// Who took a lost resource, for a condition's message: the other object's `<namespace>/<name>`
/// (a name, never an account), or that the tags do not say.
pub fn taken_by(by: Option<&str>) -> String {
    match by {
        Some(owner) => format!("another Blockwork object, {owner} (in this or another cluster)"),
        None => "another Blockwork object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Owner<'static> = Owner { uid: "uid-me", namespace: "team", name: "api" };

    fn tags(uid: Option<&str>, owner: Option<&str>) -> Vec<(String, String)> {
        let mut tags = vec![("env".to_owned(), "prod".to_owned())];
        tags.extend(uid.map(|uid| (TAG_OWNER_UID.to_owned(), uid.to_owned())));
        tags.extend(owner.map(|owner| (TAG_OWNER.to_owned(), owner.to_owned())));
        tags
    }

    #[test]
    fn a_resource_tagged_with_the_object_s_uid_is_ours_however_it_is_approached() {
        for approach in [Approach::Held, Approach::Adopting, Approach::Finding] {
            assert_eq!(claim(approach, &tags(Some("uid-me"), Some("team/api")), &ME), Claim::Ours, "{approach:?}");
        }
    }

    #[test]
    fn a_held_resource_another_object_tagged_is_lost_and_names_the_taker() {
        let claimed = claim(Approach::Held, &tags(Some("uid-other"), Some("team/api")), &ME);
        assert_eq!(claimed, Claim::Lost { by: Some("team/api".to_owned()) });
    }

    #[test]
    fn a_held_resource_whose_tags_were_removed_stays_ours() {
        assert_eq!(claim(Approach::Held, &tags(None, None), &ME), Claim::Ours);
    }

    #[test]
    fn adopting_takes_a_resource_made_outside_blockwork_or_owned_by_another_object() {
        assert_eq!(claim(Approach::Adopting, &tags(None, None), &ME), Claim::Adopt);
        assert_eq!(claim(Approach::Adopting, &tags(Some("uid-other"), Some("other/web")), &ME), Claim::Adopt);
    }

    #[test]
    fn finding_the_same_manifest_s_resource_elsewhere_is_owned_elsewhere_not_ours() {
        let claimed = claim(Approach::Finding, &tags(Some("uid-old-cluster"), Some("team/api")), &ME);
        assert_eq!(claimed, Claim::OwnedElsewhere { by: "team/api".to_owned() });
    }

    #[test]
    fn finding_a_stranger_s_or_an_untagged_resource_is_not_our_concern() {
        assert_eq!(claim(Approach::Finding, &tags(Some("uid-other"), Some("other/web")), &ME), Claim::NotOurs);
        assert_eq!(claim(Approach::Finding, &tags(Some("uid-other"), None), &ME), Claim::NotOurs);
        assert_eq!(claim(Approach::Finding, &tags(None, Some("team/api")), &ME), Claim::NotOurs);
    }

    #[test]
    fn an_object_without_a_uid_owns_nothing() {
        let unstored = Owner { uid: "", ..ME };
        assert_eq!(tagged(&tags(Some(""), Some("team/api")), &unstored), Tagged::Nobody);
        assert_eq!(tagged(&tags(Some("uid-x"), None), &unstored), Tagged::Other { owner: None });
    }

    #[test]
    fn the_ownership_tags_name_the_uid_and_the_namespaced_name() {
        let written = ME.tags();
        assert!(written.contains(&(TAG_OWNER_UID.to_owned(), "uid-me".to_owned())));
        assert!(written.contains(&(TAG_OWNER.to_owned(), "team/api".to_owned())));
        assert_eq!(tagged(&written, &ME), Tagged::Us);
    }

    #[test]
    fn the_taker_is_named_by_namespace_and_name_only() {
        assert!(taken_by(Some("team/api")).contains("team/api"));
        assert_eq!(taken_by(None), "another Blockwork object");
    }
}
