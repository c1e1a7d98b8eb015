#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn keys() -> Keys {
    Keys::default()
}

fn now() -> Timestamp {
    Timestamp::from_second(1_750_000_000).unwrap()
}

fn source(crt: &str, key: &str) -> Secret {
    let keys = keys();
    Secret {
        metadata: ObjectMeta {
            name: Some("source".into()),
            namespace: Some("ns".into()),
            uid: Some("source-uid".into()),
            resource_version: Some("10".into()),
            annotations: Some(BTreeMap::from([(keys.source.clone(), "true".into()), (keys.destination.clone(), "target".into())])),
            ..ObjectMeta::default()
        },
        type_: Some(TLS_TYPE.into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), ByteString(crt.as_bytes().to_vec())),
            ("tls.key".into(), ByteString(key.as_bytes().to_vec())),
        ])),
        ..Secret::default()
    }
}

fn run(source: &Secret, target: Option<&Secret>) -> Plan {
    run_with(source, target, false)
}

fn run_with(source: &Secret, target: Option<&Secret>, other_claim_active: bool) -> Plan {
    let keys = keys();
    plan(&Input { keys: &keys, source, target, other_claim_active, now: now() })
}

/// What the API server would hold after the plan's write (with a new resourceVersion).
fn written(plan: &Plan, rv: &str) -> Secret {
    let mut secret = plan.write.clone().expect("a write");
    secret.metadata.resource_version = Some(rv.into());
    secret
}

fn text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap().get(key).map(|b| b.0.clone()).unwrap_or_default()).unwrap()
}

fn slots(secret: &Secret) -> [String; 3] {
    [text(secret, "prev-tls.crt"), text(secret, "tls.crt"), text(secret, "next-tls.crt")]
}

fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.annotations().get(key).cloned()
}

#[test]
fn first_sight_puts_the_source_in_next_and_leaves_the_rest_empty() {
    let plan = run(&source("cert", "key"), None);
    assert_eq!(plan.action, Action::Create);
    let target = plan.write.unwrap();
    assert_eq!(target.metadata.name.as_deref(), Some("target"));
    assert_eq!(target.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(target.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(text(&target, "next-tls.crt"), "cert");
    assert_eq!(text(&target, "next-tls.key"), "key");
    assert_eq!(text(&target, "next-tls.kid"), "558ba4da-9628-5cb4-b244-ef833e84a53c");
    for key in ["tls.crt", "tls.key", "tls.kid", "prev-tls.crt", "prev-tls.key", "prev-tls.kid"] {
        assert!(target.data.as_ref().unwrap().contains_key(key), "{key} is present");
        assert_eq!(text(&target, key), "", "{key} is empty");
    }
    assert_eq!(target.data.as_ref().unwrap().len(), 9, "no jwks.json unless asked for");
    assert!(target.metadata.owner_references.is_none(), "never owned by the source");
    let keys = keys();
    assert_eq!(annotation(&target, &keys.source_name).as_deref(), Some("source"));
    assert_eq!(annotation(&target, &keys.source_resource_version).as_deref(), Some("10"));
    assert_eq!(annotation(&target, &keys.next_cert_sha256), Some(cert_sha256(b"cert")));
    assert_eq!(annotation(&target, &keys.rotations).as_deref(), Some("0"));
    assert_eq!(annotation(&target, &keys.last_rotation_time).as_deref(), Some("2025-06-15T15:06:40Z"));
    assert_eq!(target.labels().get(MANAGED_BY_LABEL).map(String::as_str), Some("blockwork"));
    assert_eq!(plan.kids.next, "558ba4da-9628-5cb4-b244-ef833e84a53c");
}

#[test]
fn each_change_of_the_source_rotates_once_like_the_original() {
    let mut target = written(&run(&source("cert", "key"), None), "1");
    for (i, expected) in [
        ["", "cert", "cert-rotation-1"],
        ["cert", "cert-rotation-1", "cert-rotation-2"],
        ["cert-rotation-1", "cert-rotation-2", "cert-rotation-3"],
    ]
    .iter()
    .enumerate()
    {
        let n = i + 1;
        let src = source(&format!("cert-rotation-{n}"), &format!("key-rotation-{n}"));
        let plan = run(&src, Some(&target));
        assert_eq!(plan.action, Action::Rotate);
        assert_eq!(plan.write.as_ref().unwrap().metadata.resource_version, target.metadata.resource_version, "precondition");
        target = written(&plan, &format!("{}", n + 1));
        assert_eq!(slots(&target), *expected);
        assert_eq!(text(&target, "next-tls.key"), format!("key-rotation-{n}"));
        assert_eq!(text(&target, "next-tls.kid"), kid(format!("cert-rotation-{n}").as_bytes()));
        assert_eq!(text(&target, "tls.kid"), kid(expected[1].as_bytes()));
        assert_eq!(text(&target, "prev-tls.kid"), kid(expected[0].as_bytes()));
        assert_eq!(annotation(&target, &keys().rotations), Some(n.to_string()));
        // Planning again from what was written: nothing to do.
        assert_eq!(run(&src, Some(&target)).action, Action::Unchanged);
    }
    assert_eq!(text(&target, "tls.kid"), kid(b"cert-rotation-2"));
}

#[test]
fn no_rotation_when_the_source_certificate_equals_next() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let mut changed = source("cert", "key");
    changed.metadata.resource_version = Some("11".into());
    changed.annotations_mut().insert("some-new-annotation".into(), "some-new-value".into());
    let plan = run(&changed, Some(&target));
    assert_eq!(plan.action, Action::Unchanged);
    assert!(plan.write.is_none(), "the target is not touched at all");
}

#[test]
fn a_hand_edited_next_slot_is_restored_without_rotating() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let target = written(&run(&source("cert-1", "key-1"), Some(&target)), "2");
    let mut edited = target.clone();
    edited.data.as_mut().unwrap().insert("next-tls.crt".into(), ByteString(b"tampered".to_vec()));
    let plan = run(&source("cert-1", "key-1"), Some(&edited));
    assert_eq!(plan.action, Action::Update, "{:?}", plan.reasons);
    let repaired = written(&plan, "3");
    assert_eq!(slots(&repaired), ["", "cert", "cert-1"]);
    assert_eq!(annotation(&repaired, &keys().rotations).as_deref(), Some("1"), "not counted as a rotation");
    assert!(plan.reasons.iter().any(|r| r.contains("next-tls was changed by hand")), "{:?}", plan.reasons);
}

#[test]
fn a_hand_edited_next_key_or_kid_is_restored() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let mut edited = target.clone();
    edited.data.as_mut().unwrap().insert("next-tls.key".into(), ByteString(b"other".to_vec()));
    edited.data.as_mut().unwrap().insert("tls.kid".into(), ByteString(b"bogus".to_vec()));
    let plan = run(&source("cert", "key"), Some(&edited));
    assert_eq!(plan.action, Action::Update);
    let repaired = written(&plan, "2");
    assert_eq!(text(&repaired, "next-tls.key"), "key");
    assert_eq!(text(&repaired, "tls.kid"), "");
    assert_eq!(plan.reasons.len(), 2, "{:?}", plan.reasons);
}

#[test]
fn hand_edits_of_current_and_prev_are_kept_and_their_kids_follow() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let target = written(&run(&source("cert-1", "key-1"), Some(&target)), "2");
    let mut edited = target.clone();
    edited.data.as_mut().unwrap().insert("tls.crt".into(), ByteString(b"replaced".to_vec()));
    let plan = run(&source("cert-1", "key-1"), Some(&edited));
    assert_eq!(plan.action, Action::Update);
    let after = written(&plan, "3");
    assert_eq!(text(&after, "tls.crt"), "replaced");
    assert_eq!(text(&after, "tls.kid"), kid(b"replaced"));
}

#[test]
fn other_data_keys_of_the_target_survive_rotations() {
    let mut target = written(&run(&source("cert", "key"), None), "1");
    target.data.as_mut().unwrap().insert("ca.crt".into(), ByteString(b"ca".to_vec()));
    assert_eq!(run(&source("cert", "key"), Some(&target)).action, Action::Unchanged);
    let after = written(&run(&source("cert-1", "key-1"), Some(&target)), "2");
    assert_eq!(text(&after, "ca.crt"), "ca");
}

#[test]
fn a_source_without_certificate_or_key_is_blocked() {
    for (crt, key, why) in [("", "key", "tls.crt"), ("cert", "", "tls.key"), ("", "", "tls.crt and tls.key")] {
        let plan = run(&source(crt, key), None);
        assert_eq!(plan.action, Action::Blocked(Blocked::InvalidSource(format!("{why} missing or empty"))));
        assert!(plan.write.is_none());
    }
    let mut no_data = source("cert", "key");
    no_data.data = Some(BTreeMap::from([("other-key".into(), ByteString(b"other-val".to_vec()))]));
    assert!(matches!(run(&no_data, None).action, Action::Blocked(Blocked::InvalidSource(_))));
    no_data.data = None;
    assert!(matches!(run(&no_data, None).action, Action::Blocked(Blocked::InvalidSource(_))));
}

#[test]
fn an_emptied_source_never_rotates_an_empty_key_in() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let plan = run(&source("", ""), Some(&target));
    assert!(matches!(plan.action, Action::Blocked(Blocked::InvalidSource(_))));
    assert!(plan.write.is_none());
}

#[test]
fn bad_destinations_are_blocked() {
    let keys = keys();
    for (value, expected) in [(None, "no "), (Some(""), "no "), (Some("Not_A_Name"), "not a valid"), (Some("source"), "itself")] {
        let mut src = source("cert", "key");
        match value {
            Some(v) => src.annotations_mut().insert(keys.destination.clone(), v.into()),
            None => src.annotations_mut().remove(&keys.destination),
        };
        let plan = run(&src, None);
        match &plan.action {
            Action::Blocked(Blocked::InvalidDestination(why)) => assert!(why.contains(expected), "{why}"),
            other => panic!("{value:?}: {other:?}"),
        }
    }
}

fn foreign_target() -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("target".into()),
            namespace: Some("ns".into()),
            resource_version: Some("5".into()),
            ..ObjectMeta::default()
        },
        type_: Some(TLS_TYPE.into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), ByteString(b"someone-elses".to_vec())),
            ("tls.key".into(), ByteString(b"key".to_vec())),
        ])),
        ..Secret::default()
    }
}

#[test]
fn a_target_not_made_by_a_rotator_is_left_alone() {
    let plan = run(&source("cert", "key"), Some(&foreign_target()));
    assert!(matches!(plan.action, Action::Blocked(Blocked::NotManaged(_))), "{:?}", plan.action);
    assert!(plan.write.is_none());
}

#[test]
fn a_target_can_be_handed_over_by_annotation() {
    let mut target = foreign_target();
    target.annotations_mut().insert(keys().adopt, "true".into());
    let plan = run(&source("cert", "key"), Some(&target));
    assert_eq!(plan.action, Action::Rotate, "the source differs from the (missing) next slot");
    let after = written(&plan, "6");
    assert_eq!(slots(&after), ["someone-elses", "", "cert"]);
    assert_eq!(annotation(&after, &keys().source_name).as_deref(), Some("source"));
}

#[test]
fn a_target_of_another_type_is_never_adopted() {
    let mut target = foreign_target();
    target.type_ = Some("Opaque".into());
    target.annotations_mut().insert(keys().adopt, "true".into());
    assert!(matches!(run(&source("cert", "key"), Some(&target)).action, Action::Blocked(Blocked::NotManaged(_))));
}

/// A target as the original operator left it: its layout, a controller owner reference to the
/// source, no annotations; the source with the original's finalizer.
fn legacy() -> (Secret, Secret) {
    let mut src = source("cert-1", "key-1");
    src.metadata.finalizers = Some(vec![keys().legacy_finalizer]);
    let mut target = run(&source("cert", "key"), None).write.unwrap();
    target.metadata.annotations = None;
    target.metadata.labels = None;
    target.metadata.resource_version = Some("3".into());
    let data = target.data.as_mut().unwrap();
    data.insert("prev-tls.crt".into(), ByteString(Vec::new()));
    data.insert("tls.crt".into(), ByteString(b"cert".to_vec()));
    data.insert("tls.key".into(), ByteString(b"key".to_vec()));
    data.insert("tls.kid".into(), ByteString(kid(b"cert").into_bytes()));
    data.insert("next-tls.crt".into(), ByteString(b"cert-1".to_vec()));
    data.insert("next-tls.key".into(), ByteString(b"key-1".to_vec()));
    data.insert("next-tls.kid".into(), ByteString(kid(b"cert-1").into_bytes()));
    target.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Secret".into(),
        name: "source".into(),
        uid: "source-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    (src, target)
}

#[test]
fn a_target_of_the_original_operator_is_adopted_without_rotating() {
    let (src, target) = legacy();
    let plan = run(&src, Some(&target));
    assert_eq!(plan.action, Action::Update, "{:?}", plan.reasons);
    let after = written(&plan, "4");
    assert_eq!(slots(&after), ["", "cert", "cert-1"], "same keys, same kids");
    assert!(after.metadata.owner_references.is_none(), "the owner reference is dropped");
    assert!(plan.remove_legacy_finalizer, "the finalizer goes once the owner reference is gone");
    assert_eq!(annotation(&after, &keys().source_name).as_deref(), Some("source"));
    assert_eq!(annotation(&after, &keys().rotations).as_deref(), Some("0"));
    assert_eq!(run(&source("cert-1", "key-1"), Some(&after)).action, Action::Unchanged);
}

#[test]
fn a_target_with_the_original_layout_but_no_owner_is_adopted() {
    let (src, mut target) = legacy();
    target.metadata.owner_references = None;
    let plan = run(&src, Some(&target));
    assert_eq!(plan.action, Action::Update);
    assert!(plan.reasons.iter().any(|r| r.contains("layout")), "{:?}", plan.reasons);
}

#[test]
fn the_finalizer_stays_while_an_untouched_target_is_still_owned() {
    let (mut src, target) = legacy();
    src.data.as_mut().unwrap().insert("tls.key".into(), ByteString(Vec::new()));
    let plan = run(&src, Some(&target));
    assert!(matches!(plan.action, Action::Blocked(_)));
    assert!(!plan.remove_legacy_finalizer);
}

#[test]
fn a_source_being_deleted_never_rotates_and_frees_its_target() {
    let (mut src, target) = legacy();
    src.metadata.deletion_timestamp = Some(Time(now()));
    src.data.as_mut().unwrap().insert("tls.crt".into(), ByteString(b"cert-2".to_vec()));
    let plan = run(&src, Some(&target));
    assert_eq!(plan.action, Action::Update);
    let after = written(&plan, "4");
    assert_eq!(slots(&after), slots(&target), "no rotation");
    assert!(after.metadata.owner_references.is_none());
    assert!(plan.remove_legacy_finalizer);

    let managed = written(&run(&source("cert", "key"), None), "1");
    let plan = run(&src, Some(&managed));
    assert_eq!(plan.action, Action::Unchanged);
    assert!(plan.write.is_none());
}

#[test]
fn a_target_claimed_by_a_live_source_is_a_conflict() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let mut other = source("other-cert", "other-key");
    other.metadata.name = Some("other".into());
    let plan = run_with(&other, Some(&target), true);
    assert_eq!(plan.action, Action::Blocked(Blocked::Conflict { other: "source".into() }));
    assert!(plan.write.is_none());
}

#[test]
fn a_target_whose_source_is_gone_is_taken_over_and_keeps_rotating() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let mut other = source("other-cert", "other-key");
    other.metadata.name = Some("other".into());
    let plan = run_with(&other, Some(&target), false);
    assert_eq!(plan.action, Action::Rotate);
    let after = written(&plan, "2");
    assert_eq!(slots(&after), ["", "cert", "other-cert"]);
    assert_eq!(annotation(&after, &keys().source_name).as_deref(), Some("other"));
    assert!(plan.reasons.iter().any(|r| r.contains("took the target over")));
}

#[test]
fn jwks_follows_the_opt_in() {
    let mut src = source("not-a-pem", "key");
    src.annotations_mut().insert(keys().jwks, "true".into());
    let plan = run(&src, None);
    let target = written(&plan, "1");
    assert_eq!(text(&target, "jwks.json"), r#"{"keys":[]}"#);
    assert_eq!(plan.warnings, ["next-tls.crt: no PEM CERTIFICATE block"]);

    let plain = source("not-a-pem", "key");
    let plan = run(&plain, Some(&target));
    assert_eq!(plan.action, Action::Update);
    assert!(!written(&plan, "2").data.unwrap().contains_key("jwks.json"));

    let bare = written(&run(&plain, None), "1");
    let plan = run(&src, Some(&bare));
    assert_eq!(plan.action, Action::Update);
    assert!(plan.reasons.iter().any(|r| r.contains("added jwks.json")), "{:?}", plan.reasons);
}

#[test]
fn a_source_that_changes_back_rotates_again() {
    let target = written(&run(&source("a", "ka"), None), "1");
    let target = written(&run(&source("b", "kb"), Some(&target)), "2");
    let plan = run(&source("a", "ka"), Some(&target));
    assert_eq!(plan.action, Action::Rotate, "a is not next, so it is a change");
    assert_eq!(slots(&written(&plan, "3")), ["a", "b", "a"]);
}

#[test]
fn a_stale_plan_carries_the_resource_version_it_was_made_from() {
    let target = written(&run(&source("cert", "key"), None), "1");
    let first = run(&source("cert-1", "key-1"), Some(&target));
    let second = run(&source("cert-1", "key-1"), Some(&target));
    assert_eq!(first, second, "the same view plans the same write");
    assert_eq!(second.write.unwrap().metadata.resource_version.as_deref(), Some("1"), "so the API server accepts only one of them");
}

#[test]
fn a_jwks_value_other_than_true_or_false_blocks_the_source_naming_the_accepted_values() {
    let mut src = source("cert", "key");
    src.annotations_mut().insert(keys().jwks, "yes".into());
    let plan = run(&src, None);
    let Action::Blocked(blocked @ Blocked::InvalidAnnotation(_)) = &plan.action else { panic!("{:?}", plan.action) };
    assert!(blocked.to_string().contains(&keys().jwks) && blocked.to_string().contains("true or false"), "{blocked}");
    assert_eq!((blocked.event_reason(), blocked.metric_reason()), ("InvalidAnnotation", "invalid_annotation"));
    assert!(plan.write.is_none());
}

/// Found by the reliability campaign's hostile corpus (issue 15): `destination-secret` (without
/// `-name`) was reported as a missing destination, which hid the typo.
#[test]
fn a_misspelt_destination_key_is_named_not_reported_as_a_missing_destination() {
    let mut src = source("cert", "key");
    let destination = src.annotations_mut().remove(&keys().destination).unwrap();
    src.annotations_mut().insert(keys().destination.replace("-name", ""), destination);
    let plan = run(&src, None);
    let Action::Blocked(blocked @ Blocked::InvalidAnnotation(_)) = &plan.action else { panic!("{:?}", plan.action) };
    assert!(blocked.to_string().contains(&keys().destination.replace("-name", "")), "{blocked}");
}

#[test]
fn a_misspelt_rotator_annotation_on_the_source_blocks_it() {
    let mut src = source("cert", "key");
    src.annotations_mut().insert(keys().jwks.replace("jwks", "jwk"), "true".into());
    let plan = run(&src, None);
    assert!(
        matches!(&plan.action, Action::Blocked(Blocked::InvalidAnnotation(why)) if why.contains("/jwk\"") || why.contains("/jwk=")),
        "{:?}",
        plan.action
    );
}

#[test]
fn flags_are_read_in_any_case() {
    let mut src = source("not-a-pem", "key");
    src.annotations_mut().insert(keys().jwks, "True".into());
    assert!(written(&run(&src, None), "1").data.unwrap().contains_key("jwks.json"));
    let mut target = foreign_target();
    target.annotations_mut().insert(keys().adopt, "TRUE".into());
    assert_eq!(run(&source("cert", "key"), Some(&target)).action, Action::Rotate);
}

#[test]
fn an_adopt_value_other_than_true_or_false_on_the_target_blocks_the_source() {
    let mut target = foreign_target();
    target.annotations_mut().insert(keys().adopt, "yes".into());
    let plan = run(&source("cert", "key"), Some(&target));
    assert!(
        matches!(&plan.action, Action::Blocked(Blocked::InvalidAnnotation(why)) if why.contains("on the target target") && why.contains(&keys().adopt)),
        "{:?}",
        plan.action
    );
}

#[test]
fn a_target_labelled_by_an_earlier_release_stays_the_rotators_and_gets_the_one_label_value() {
    let mut target = written(&run(&source("cert", "key"), None), "1");
    target.labels_mut().insert(MANAGED_BY_LABEL.to_owned(), LEGACY_MANAGED_BY.to_owned());
    assert!(labelled_as_target(target.labels()));
    let plan = run(&source("cert", "key"), Some(&target));
    assert_eq!(plan.action, Action::Update, "no rotation, only the label");
    let after = written(&plan, "2");
    assert_eq!(slots(&after), slots(&target));
    assert_eq!(after.labels().get(MANAGED_BY_LABEL).map(String::as_str), Some("blockwork"));
    assert!(labelled_as_target(after.labels()));
}

#[test]
fn other_managed_by_values_are_no_targets() {
    let labels = |value: &str| BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), value.to_owned())]);
    assert!(labelled_as_target(&labels("blockwork")));
    assert!(!labelled_as_target(&labels("Helm")));
    assert!(!labelled_as_target(&BTreeMap::new()));
}
