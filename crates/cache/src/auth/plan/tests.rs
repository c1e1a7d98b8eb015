//! The rotation's steps, one behaviour each.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;

use super::*;
use crate::api::Engine;
use crate::auth::api::Auth;

const PROPAGATION: Duration = Duration::from_secs(90);

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).expect("a time")
}

fn cache(auth: Auth) -> Cache {
    let mut cache = crate::fixtures::cache(Engine::Redis);
    cache.spec.auth = Some(auth);
    cache
}

fn password(text: &str) -> Password {
    Password::parse(text.as_bytes()).expect("valid")
}

struct Case {
    cache: Cache,
    secret: Option<Secret>,
    given: Option<Password>,
    servers_in_step: bool,
    published: bool,
    now: Timestamp,
}

impl Case {
    fn new(cache: Cache) -> Self {
        Self { cache, secret: None, given: None, servers_in_step: true, published: true, now: at(1_000) }
    }

    fn plan(&self) -> Plan {
        plan(&Input {
            cache: &self.cache,
            required: true,
            secret: self.secret.as_ref(),
            given: self.given.as_ref(),
            servers_in_step: self.servers_in_step,
            published: self.published,
            propagation: PROPAGATION,
            now: self.now,
        })
    }

    /// Plans, and takes the write as the API server would store it.
    fn step(&mut self) -> Plan {
        let plan = self.plan();
        if let Some(mut write) = plan.write.clone() {
            let version: u64 = self.secret.as_ref().and_then(|s| s.metadata.resource_version.as_deref()?.parse().ok()).unwrap_or(0);
            write.metadata.resource_version = Some((version + 1).to_string());
            self.secret = Some(write);
        }
        plan
    }

    fn state(&self) -> State {
        State::read(self.secret.as_ref().expect("a Secret")).expect("readable")
    }
}

#[test]
fn first_sight_makes_every_password() {
    let mut case = Case::new(cache(Auth::default()));
    let plan = case.step();
    assert_eq!(plan.step, Step::Create);
    let write = plan.write.expect("a create");
    assert_eq!(write.metadata.resource_version, None, "a create carries no resourceVersion");
    assert_eq!(case.state().phase(), None);
    assert_eq!(case.plan().step, Step::Unchanged, "planned again from what it wrote: nothing to do");
}

#[test]
fn first_sight_takes_the_user_s_password() {
    let mut case = Case::new(cache(users_own()));
    case.given = Some(password("the-users-password"));
    case.step();
    assert_eq!(case.state().current, password("the-users-password"));
}

#[test]
fn a_requested_rotation_goes_through_every_step_and_no_password_is_ever_missing() {
    let mut case = Case::new(cache(Auth::default()));
    case.step();
    let first = case.state().current;
    case.cache.metadata.annotations = Some([(ROTATE_ANNOTATION.to_owned(), "2026-11-28T10:00:00Z".to_owned())].into());

    assert_eq!(case.step().step, Step::Start(Cause::Requested("2026-11-28T10:00:00Z".into())));
    let next = case.state().next.expect("a next password");
    assert_eq!(case.state().current, first, "clients keep the current one meanwhile");

    // The servers accept both, but the pods' copy of the Secret may be behind until the sync.
    case.now = at(1_000 + 89);
    assert_eq!(case.step().step, Step::Unchanged);
    case.now = at(1_000 + 90);
    assert_eq!(case.step().step, Step::Promote);
    assert_eq!((case.state().previous, case.state().current.clone()), (Some(first.clone()), next.clone()));

    case.now = at(1_100);
    assert_eq!(case.step().step, Step::Published);
    // Ten minutes of grace from the publication.
    case.now = at(1_100 + 599);
    assert_eq!(case.step().step, Step::Unchanged);
    assert_eq!(case.state().passwords().app, [first, next.clone()], "both accepted during the grace period");
    case.now = at(1_100 + 600);
    assert_eq!(case.step().step, Step::Retire);
    let done = case.state();
    assert_eq!((done.previous, done.next, done.current, done.rotations), (None, None, next, 1));
    assert_eq!(case.step().step, Step::Unchanged, "the request is handled once");
}

#[test]
fn the_next_password_is_not_published_before_every_server_accepts_it() {
    let mut case = Case::new(cache(Auth::default()));
    case.step();
    case.cache.metadata.annotations = Some([(ROTATE_ANNOTATION.to_owned(), "now".to_owned())].into());
    case.step();
    case.servers_in_step = false;
    case.now = at(5_000);
    assert_eq!(case.step().step, Step::Unchanged);
    assert!(case.state().next.is_some());
    case.servers_in_step = true;
    assert_eq!(case.step().step, Step::Promote);
}

#[test]
fn the_grace_period_counts_from_the_publication_not_the_promotion() {
    let mut case = Case::new(cache(Auth::default()));
    case.step();
    case.cache.metadata.annotations = Some([(ROTATE_ANNOTATION.to_owned(), "now".to_owned())].into());
    case.step();
    case.now = at(2_000);
    case.step();
    // The binding Secret could not be written for an hour (the operator was down, say).
    case.published = false;
    case.now = at(6_000);
    assert_eq!(case.step().step, Step::Unchanged);
    case.published = true;
    assert_eq!(case.step().step, Step::Published);
    case.now = at(6_000 + 599);
    assert_eq!(case.step().step, Step::Unchanged, "clients get their whole grace period");
}

#[test]
fn a_rotation_period_starts_a_rotation_when_it_has_passed() {
    let mut case = Case::new(cache(Auth { rotation_period: Some("24h".into()), ..Auth::default() }));
    let plan = case.step();
    assert_eq!(plan.look_again, Some(at(1_000 + 86_400)));
    case.now = at(1_000 + 86_399);
    assert_eq!(case.step().step, Step::Unchanged);
    case.now = at(1_000 + 86_400);
    assert_eq!(case.step().step, Step::Start(Cause::Period));
}

fn users_own() -> Auth {
    Auth { secret_ref: Some(crate::auth::api::SecretReference { name: "mine".into() }), ..Auth::default() }
}

#[test]
fn a_new_password_in_the_user_s_secret_is_rotated_in() {
    let mut case = Case::new(cache(users_own()));
    case.given = Some(password("first-password"));
    case.step();
    case.given = Some(password("second-password"));
    assert_eq!(case.step().step, Step::Start(Cause::Given));
    assert_eq!(case.state().next, Some(password("second-password")));
    // Changed again before it was in: the newest is added instead.
    case.given = Some(password("third-password"));
    assert_eq!(case.step().step, Step::Start(Cause::Given));
    assert_eq!(case.state().next, Some(password("third-password")));
}

#[test]
fn a_requested_rotation_of_the_user_s_own_password_is_answered_and_not_done() {
    let mut case = Case::new(cache(users_own()));
    case.given = Some(password("first-password"));
    case.step();
    case.cache.metadata.annotations = Some([(ROTATE_ANNOTATION.to_owned(), "now".to_owned())].into());
    assert_eq!(case.step().step, Step::RequestIgnored("now".into()));
    assert_eq!((case.state().next, case.step().step), (None, Step::Unchanged));
}

#[test]
fn a_secret_edited_by_hand_is_made_anew_with_a_new_generation() {
    let mut case = Case::new(cache(Auth::default()));
    case.step();
    let generation = case.state().generation;
    case.secret.as_mut().and_then(|s| s.data.as_mut()).expect("data").remove(crate::auth::state::OPERATOR);
    assert!(matches!(case.step().step, Step::Reset(_)));
    assert_ne!(case.state().generation, generation);
}

#[test]
fn a_file_that_differs_from_the_passwords_is_written_again_without_a_rotation() {
    let mut case = Case::new(cache(Auth::default()));
    case.step();
    let current = case.state().current;
    case.secret
        .as_mut()
        .and_then(|s| s.data.as_mut())
        .expect("data")
        .insert("users.acl".into(), k8s_openapi::ByteString(b"user default on nopass".to_vec()));
    let plan = case.step();
    assert_eq!(plan.step, Step::Refresh);
    assert_eq!(plan.write.and_then(|w| w.metadata.resource_version).as_deref(), Some("1"), "a replace of what was read");
    assert_eq!(case.state().current, current);
}
