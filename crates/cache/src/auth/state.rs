//! Pure: the Secret Blockwork keeps a Cache's passwords in (`NAME-cache-auth`, owned by the
//! Cache), read into a [`State`] and written back from one. It is the record of a rotation (its
//! write, carrying the read `resourceVersion`, is each step's commit point) and what the pods
//! mount: the files each container reads, derived from the passwords.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::{Cache, Engine};
use crate::auth::api::RotationPhase;
use crate::auth::password::Password;
use crate::auth::users::{self, Passwords};
use crate::shape;

/// The application's passwords: previous (retiring), current (published), next (being added).
pub const PREVIOUS: &str = "app-password-previous";
pub const CURRENT: &str = "app-password";
pub const NEXT: &str = "app-password-next";
/// One password per internal user (never rotated, never published).
pub const REPLICATION: &str = "replication-password";
pub const SENTINEL: &str = "sentinel-password";
pub const MONITOR: &str = "monitor-password";
pub const OPERATOR: &str = "operator-password";
/// The files the pods mount, rendered from the passwords.
pub const SERVER_ACL: &str = "users.acl";
pub const SENTINEL_ACL: &str = "sentinel-users.acl";
pub const SENTINEL_AUTH: &str = "sentinel-auth.conf";
pub const REPLICATION_CONF: &str = "replication.conf";
pub const EXPORTER_PASSWORDS: &str = "exporter-passwords.json";
pub const MEMCACHED_AUTH: &str = "memcached.auth";

const PREFIX: &str = "cache.blockwork.dev/";
/// A random id made with the Secret: the pods carry it, so a Secret made anew (deleted by hand,
/// every password new) rolls them onto it.
pub const GENERATION: &str = "cache.blockwork.dev/auth-generation";
const NEXT_ADDED_AT: &str = "cache.blockwork.dev/next-added-at";
const PUBLISHED_AT: &str = "cache.blockwork.dev/published-at";
const SINCE: &str = "cache.blockwork.dev/last-rotation-time";
const ROTATIONS: &str = "cache.blockwork.dev/rotations";
const HANDLED_REQUEST: &str = "cache.blockwork.dev/rotate-request-handled";

/// What the Secret records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub generation: String,
    pub previous: Option<Password>,
    pub current: Password,
    pub next: Option<Password>,
    pub replication: Password,
    pub sentinel: Password,
    pub monitor: Password,
    pub operator: Password,
    /// When `next` was written: the pods' copy of the Secret follows within the kubelet's sync.
    pub next_added_at: Option<Timestamp>,
    /// When the binding Secret was seen publishing `current` while `previous` retires: the grace
    /// period counts from it.
    pub published_at: Option<Timestamp>,
    /// When the last rotation ended (or the Secret was made): the rotation period counts from it.
    pub since: Timestamp,
    pub rotations: u64,
    /// The last `blockwork.dev/rotate-requested-at` value a rotation was started for.
    pub handled_request: Option<String>,
}

/// A Secret of ours that lacks what a State needs (edited by hand).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the Secret has no usable {}", .0.join(", "))]
pub struct Damaged(pub Vec<&'static str>);

impl State {
    /// A new State: every password new (the application's `current` given, from the user's
    /// Secret, or new too), made `now`.
    pub fn new(current: Option<Password>, now: Timestamp) -> Self {
        Self {
            generation: Password::generate().sha256()[..12].to_owned(),
            previous: None,
            current: current.unwrap_or_else(Password::generate),
            next: None,
            replication: Password::generate(),
            sentinel: Password::generate(),
            monitor: Password::generate(),
            operator: Password::generate(),
            next_added_at: None,
            published_at: None,
            since: now,
            rotations: 0,
            handled_request: None,
        }
    }

    /// Reads the Secret.
    pub fn read(secret: &Secret) -> Result<Self, Damaged> {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let mut missing = Vec::new();
        let mut required = |key: &'static str| match data.get(key).map(|value| Password::parse(&value.0)) {
            Some(Ok(password)) => Some(password),
            _ => {
                missing.push(key);
                None
            }
        };
        let (current, replication, sentinel, monitor, operator) =
            (required(CURRENT), required(REPLICATION), required(SENTINEL), required(MONITOR), required(OPERATOR));
        let annotations = secret.annotations();
        let generation = annotations.get(GENERATION).filter(|g| !g.is_empty()).cloned();
        if generation.is_none() {
            missing.push(GENERATION);
        }
        let since = time(annotations, SINCE);
        if since.is_none() {
            missing.push(SINCE);
        }
        let (Some(current), Some(replication), Some(sentinel), Some(monitor), Some(operator), Some(generation), Some(since)) =
            (current, replication, sentinel, monitor, operator, generation, since)
        else {
            return Err(Damaged(missing));
        };
        let optional = |key: &str| data.get(key).and_then(|value| Password::parse(&value.0).ok());
        Ok(Self {
            generation,
            previous: optional(PREVIOUS),
            current,
            next: optional(NEXT),
            replication,
            sentinel,
            monitor,
            operator,
            next_added_at: time(annotations, NEXT_ADDED_AT),
            published_at: time(annotations, PUBLISHED_AT),
            since,
            rotations: annotations.get(ROTATIONS).and_then(|r| r.parse().ok()).unwrap_or(0),
            handled_request: annotations.get(HANDLED_REQUEST).cloned(),
        })
    }

    /// The step a rotation is at, if one is under way.
    pub fn phase(&self) -> Option<RotationPhase> {
        match (&self.next, &self.previous, self.published_at) {
            (Some(_), _, _) => Some(RotationPhase::AddingNext),
            (None, Some(_), None) => Some(RotationPhase::Publishing),
            (None, Some(_), Some(_)) => Some(RotationPhase::RetiringPrevious),
            (None, None, _) => None,
        }
    }

    /// Every password, as the users' files want them.
    pub fn passwords(&self) -> Passwords {
        Passwords {
            app: [&self.previous, &Some(self.current.clone()), &self.next].into_iter().flatten().cloned().collect(),
            replication: self.replication.clone(),
            sentinel: self.sentinel.clone(),
            monitor: self.monitor.clone(),
            operator: self.operator.clone(),
        }
    }

    /// The Secret of `cache` that records this State, with the files its pods read (clients
    /// without a password served unless `required`).
    pub fn secret(&self, cache: &Cache, required: bool) -> Secret {
        let passwords = self.passwords();
        let mut data: BTreeMap<&str, String> = [
            (CURRENT, self.current.expose().to_owned()),
            (REPLICATION, self.replication.expose().to_owned()),
            (SENTINEL, self.sentinel.expose().to_owned()),
            (MONITOR, self.monitor.expose().to_owned()),
            (OPERATOR, self.operator.expose().to_owned()),
        ]
        .into();
        if let Some(previous) = &self.previous {
            data.insert(PREVIOUS, previous.expose().to_owned());
        }
        if let Some(next) = &self.next {
            data.insert(NEXT, next.expose().to_owned());
        }
        match cache.spec.engine {
            Engine::Redis | Engine::Valkey => {
                data.insert(SERVER_ACL, users::server_acl(&passwords, required));
                data.insert(SENTINEL_ACL, users::sentinel_acl(&passwords, required));
                data.insert(SENTINEL_AUTH, users::sentinel_auth(&passwords, &cache.name_any()));
                data.insert(REPLICATION_CONF, users::replication_conf(&passwords));
                data.insert(EXPORTER_PASSWORDS, users::exporter_passwords(&passwords, &exporter_address(cache)));
            }
            Engine::Memcached => {
                data.insert(MEMCACHED_AUTH, users::memcached_auth(&passwords));
            }
        }
        let mut annotations: BTreeMap<String, String> = [
            (GENERATION.to_owned(), self.generation.clone()),
            (SINCE.to_owned(), seconds(self.since)),
            (ROTATIONS.to_owned(), self.rotations.to_string()),
        ]
        .into();
        let times = [(NEXT_ADDED_AT, self.next_added_at), (PUBLISHED_AT, self.published_at)];
        annotations.extend(times.into_iter().filter_map(|(key, time)| Some((key.to_owned(), seconds(time?)))));
        if let Some(request) = &self.handled_request {
            annotations.insert(HANDLED_REQUEST.to_owned(), request.clone());
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(super::state_secret_name(cache)),
                namespace: cache.namespace(),
                labels: Some(shape::labels(cache)),
                annotations: Some(annotations),
                owner_references: cache.controller_owner_ref(&()).map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data.into_iter().map(|(key, value)| (key.to_owned(), ByteString(value.into_bytes()))).collect()),
            ..Secret::default()
        }
    }
}

/// Where the exporter beside each server scrapes it (redis_exporter's password file is keyed by it).
pub fn exporter_address(cache: &Cache) -> String {
    let scheme = if shape::tls_enabled(cache) { "rediss" } else { "redis" };
    format!("{scheme}://127.0.0.1:{}", shape::port(cache.spec.engine))
}

/// Whether `secret`'s annotations and data are those of `desired` (ours only: others' are kept).
pub fn holds(secret: &Secret, desired: &Secret) -> bool {
    let ours = |s: &Secret| -> BTreeMap<String, String> {
        s.annotations().iter().filter(|(k, _)| k.starts_with(PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    secret.data == desired.data && ours(secret) == ours(desired)
}

fn time(annotations: &BTreeMap<String, String>, key: &str) -> Option<Timestamp> {
    annotations.get(key).and_then(|value| value.parse().ok())
}

/// RFC 3339 in whole seconds, UTC.
fn seconds(time: Timestamp) -> String {
    Timestamp::from_second(time.as_second()).unwrap_or(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::cache;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("a time")
    }

    #[test]
    fn a_state_reads_back_as_it_was_written() {
        let mut state = State::new(None, at(1_000));
        state.next = Some(Password::generate());
        state.next_added_at = Some(at(2_000));
        state.rotations = 3;
        state.handled_request = Some("2026-01-01T00:00:00Z".into());
        let secret = state.secret(&cache(Engine::Redis), true);
        assert_eq!(State::read(&secret), Ok(state.clone()));
        assert_eq!(state.phase(), Some(RotationPhase::AddingNext));
    }

    #[test]
    fn the_secret_is_owned_by_the_cache_and_carries_the_engine_s_files() {
        let secret = State::new(None, at(1_000)).secret(&cache(Engine::Memcached), true);
        assert_eq!(secret.metadata.name.as_deref(), Some("c-cache-auth"));
        assert_eq!(secret.owner_references()[0].kind, "Cache");
        let keys: Vec<&str> = secret.data.as_ref().expect("data").keys().map(String::as_str).collect();
        assert!(keys.contains(&MEMCACHED_AUTH) && !keys.contains(&SERVER_ACL), "{keys:?}");
        let redis = State::new(None, at(1_000)).secret(&cache(Engine::Valkey), true);
        assert!(redis.data.expect("data").contains_key(SERVER_ACL));
    }

    #[test]
    fn a_secret_without_a_password_is_damaged_and_says_which() {
        let mut secret = State::new(None, at(1_000)).secret(&cache(Engine::Redis), true);
        secret.data.as_mut().expect("data").remove(OPERATOR);
        assert_eq!(State::read(&secret), Err(Damaged(vec![OPERATOR])));
    }

    #[test]
    fn the_phase_follows_the_slots() {
        let mut state = State::new(None, at(1_000));
        assert_eq!(state.phase(), None);
        state.previous = Some(Password::generate());
        assert_eq!(state.phase(), Some(RotationPhase::Publishing));
        state.published_at = Some(at(1_010));
        assert_eq!(state.phase(), Some(RotationPhase::RetiringPrevious));
    }
}
