//! Pure: what a reconcile's authentication tells: the `Authenticated` condition, `status.auth`,
//! and the events of a rotation's steps. No password, ever: users, Secrets' names, times.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::runtime::events::EventType;

use blockwork_runtime::status::condition;

use crate::api::Cache;
use crate::auth::api::{AuthStatus, RotationPhase};
use crate::auth::plan::{self, Cause, Step};
use crate::auth::servers::Outcome;
use crate::auth::state::State;
use crate::auth::users::APP;
use crate::auth::{self, Mode, Open, ROTATE_ANNOTATION};

/// The condition type: whether clients must authenticate.
pub const AUTHENTICATED: &str = "Authenticated";

/// Added to the Ready condition's message of a Cache that authenticates nobody.
pub const OPEN_NOTE: &str = "it serves every client without a password (see the Authenticated condition)";

/// The `Authenticated` condition: True while every client must authenticate (reason
/// `PasswordRequired`, `PasswordRotating` during a rotation, `PasswordSyncFailed` when a server
/// could not be brought in step), False while some are served without a password (why:
/// `AuthenticationDisabled`, `AuthenticationNotConfigured`, `AuthenticationOptional`).
pub fn authenticated(cache: &Cache, mode: Mode, state: Option<&State>, outcome: &Outcome, generation: Option<i64>) -> Condition {
    let binding = auth::binding_secret_name(cache);
    let (status, reason, message) = match mode {
        Mode::Open(Open::Disabled) => (
            false,
            "AuthenticationDisabled",
            "auth.enabled is false: anyone who reaches the Service reads and writes everything".to_owned(),
        ),
        Mode::Open(Open::NotConfigured) => (
            false,
            "AuthenticationNotConfigured",
            "this Cache served without a password before Blockwork had authentication, and keeps doing so until spec.auth is set: anyone who reaches the Service reads and writes everything (docs/cache.md, \"Moving a Cache to authentication\")".to_owned(),
        ),
        Mode::Optional => (
            false,
            "AuthenticationOptional",
            format!(
                "auth.required is false: clients may authenticate as {APP} (Secret {binding}) and clients without a password are still served; set it to true once every client has moved"
            ),
        ),
        Mode::Required if !outcome.failed.is_empty() => {
            let failed: Vec<String> = outcome.failed.iter().map(|(pod, why)| format!("{pod}: {why}")).collect();
            (
                true,
                "PasswordSyncFailed",
                format!("clients must authenticate, but the operator could not bring every server in step with the passwords: {}", failed.join("; ")),
            )
        }
        Mode::Required => match state.and_then(State::phase) {
            Some(phase) => (true, "PasswordRotating", format!("clients authenticate as {APP} (Secret {binding}); {}", rotating(cache, phase, state))),
            None => (true, "PasswordRequired", format!("clients authenticate as {APP}: the binding Secret {binding} has the password")),
        },
    };
    condition(AUTHENTICATED, status, reason, &message, generation)
}

fn rotating(cache: &Cache, phase: RotationPhase, state: Option<&State>) -> String {
    match phase {
        RotationPhase::AddingNext => "rotating: every server learns the next password before it is published".to_owned(),
        RotationPhase::Publishing => "rotating: the binding Secret publishes the new password".to_owned(),
        RotationPhase::RetiringPrevious => {
            let until = state.and_then(|s| s.published_at).map(|at| plan::after(at, plan::grace(cache)));
            match until {
                Some(until) => format!("rotating: the previous password works until {until}, for clients to read the new one"),
                None => "rotating: the previous password works for the grace period".to_owned(),
            }
        }
    }
}

/// `status.auth` after the reconcile.
pub fn status(cache: &Cache, mode: Mode, state: Option<&State>) -> AuthStatus {
    let Some(state) = state.filter(|_| mode.issues_passwords()) else {
        return AuthStatus::default();
    };
    let phase = state.phase();
    AuthStatus {
        user: Some(APP.to_owned()),
        rotations: state.rotations,
        last_rotation_time: (state.rotations > 0).then_some(Time(state.since)),
        rotation: phase,
        previous_retires_at: match phase {
            Some(RotationPhase::RetiringPrevious) => state.published_at.map(|at| Time(plan::after(at, plan::grace(cache)))),
            _ => None,
        },
        last_handled_rotate_at: state
            .handled_request
            .clone()
            .filter(|handled| cache.annotations().get(ROTATE_ANNOTATION).map(|value| value.trim()) == Some(handled.as_str())),
    }
}

/// The event of a rotation's step, if it has one: type, reason, note.
pub fn event(cache: &Cache, step: &Step, state: &State) -> Option<(EventType, &'static str, String)> {
    let binding = auth::binding_secret_name(cache);
    Some(match step {
        Step::Start(cause) => {
            let why = match cause {
                Cause::Period => "auth.rotationPeriod passed".to_owned(),
                Cause::Requested(at) => format!("requested at {at} (blockwork rotate)"),
                Cause::Given => format!("the password Secret {} holds a new password", auth_secret_ref(cache)),
            };
            (EventType::Normal, "PasswordRotationStarted", format!("{why}: every server learns the next password before it is published"))
        }
        Step::Promote => (
            EventType::Normal,
            "PasswordPublished",
            format!("every server accepts the new password: the binding Secret {binding} publishes it, the previous one keeps working"),
        ),
        Step::Retire => (
            EventType::Normal,
            "PreviousPasswordRetired",
            format!("the grace period is over: only the current password works (rotation {})", state.rotations),
        ),
        Step::RequestIgnored(at) => (
            EventType::Warning,
            "RotationNotApplicable",
            format!(
                "a rotation was requested at {at}, but the password is yours (auth.secretRef {}): change it in that Secret to rotate it",
                auth_secret_ref(cache)
            ),
        ),
        Step::Reset(damaged) => (
            EventType::Warning,
            "AuthSecretReset",
            format!(
                "the Secret {} was made anew ({damaged}): every password is new, and the pods restart with them",
                auth::state_secret_name(cache)
            ),
        ),
        Step::Create | Step::Published | Step::Refresh | Step::Unchanged => return None,
    })
}

fn auth_secret_ref(cache: &Cache) -> String {
    cache.spec.auth.as_ref().and_then(|auth| auth.secret_ref.as_ref()).map(|r| r.name.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Engine;

    fn cache() -> Cache {
        crate::fixtures::cache(Engine::Redis)
    }

    #[test]
    fn an_open_cache_says_so_and_why() {
        let disabled = authenticated(&cache(), Mode::Open(Open::Disabled), None, &Outcome::default(), Some(1));
        assert_eq!((disabled.status.as_str(), disabled.reason.as_str()), ("False", "AuthenticationDisabled"));
        let old = authenticated(&cache(), Mode::Open(Open::NotConfigured), None, &Outcome::default(), Some(1));
        assert_eq!(old.reason, "AuthenticationNotConfigured");
        assert!(old.message.contains("until spec.auth is set"), "{}", old.message);
    }

    #[test]
    fn a_protected_cache_names_its_user_and_binding_secret_never_a_password() {
        let state = State::new(None, jiff::Timestamp::UNIX_EPOCH);
        let condition = authenticated(&cache(), Mode::Required, Some(&state), &Outcome::default(), Some(1));
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("True", "PasswordRequired"));
        assert!(
            condition.message.contains("c-cache-binding") && !condition.message.contains(state.current.expose()),
            "{}",
            condition.message
        );
    }

    #[test]
    fn a_server_out_of_step_is_named() {
        let outcome = Outcome { changed: Vec::new(), failed: vec![("c-cache-1.h:6379".into(), "connection refused".into())] };
        let condition = authenticated(&cache(), Mode::Required, None, &outcome, Some(1));
        assert_eq!(condition.reason, "PasswordSyncFailed");
        assert!(condition.message.contains("c-cache-1.h:6379: connection refused"), "{}", condition.message);
    }

    #[test]
    fn the_status_says_where_a_rotation_is() {
        let mut state = State::new(None, jiff::Timestamp::UNIX_EPOCH);
        state.previous = Some(crate::auth::password::Password::generate());
        state.published_at = Some(jiff::Timestamp::from_second(1_000).expect("a time"));
        let status = status(&cache(), Mode::Required, Some(&state));
        assert_eq!(status.rotation, Some(RotationPhase::RetiringPrevious));
        assert_eq!(status.previous_retires_at.map(|t| t.0.as_second()), Some(1_600));
        assert_eq!(status.user.as_deref(), Some("app"));
    }
}
