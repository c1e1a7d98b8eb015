//! Authentication of a Cache's clients, and the connection Secret applications mount
//! (docs/cache.md, "Security"; docs/adr/0020-cache-authentication.md).
//!
//! - [`api`]: `spec.auth`, `status.auth`, `status.binding`.
//! - [`mode`](Mode): whether a Cache authenticates its clients, from its spec and, for a Cache
//!   without `spec.auth`, from what it already runs (one that served without a password before
//!   Blockwork knew authentication keeps doing so: upgrading breaks no client).
//! - [`password`], [`users`], [`state`]: the passwords, who may do what, the Secret they are
//!   kept in and the files the pods read from it; [`plan`]: a rotation's next step.
//! - [`servers`]: the operator's one I/O with the servers: it keeps the passwords of running
//!   servers and Sentinels in step with the Secret, and checks that they are.
//! - [`binding`]: the servicebinding.io Secret applications mount.

pub mod api;
pub mod binding;
pub mod password;
pub mod plan;
pub mod reconcile;
pub mod servers;
pub mod state;
pub mod status;
pub mod users;
pub mod volumes;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

use crate::api::{Cache, Engine};

/// `blockwork rotate` writes the time here; a new value starts a rotation.
pub const ROTATE_ANNOTATION: &str = "blockwork.dev/rotate-requested-at";
/// Where the pods mount the files of the passwords' Secret (read-only; each container only the
/// files it reads).
pub const AUTH_DIR: &str = "/etc/blockwork-cache/auth";
/// `monitor`'s password, in `AUTH_DIR`: the probes and the start scripts authenticate with it.
pub const MONITOR_FILE: &str = "monitor.password";
/// The pod's volume of the server's files: a StatefulSet whose pods have none runs without
/// authentication.
pub const AUTH_VOLUME: &str = "auth";
/// The default `auth.gracePeriod`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// What a Cache's pods are built with when they authenticate clients: the generation of the
/// passwords' Secret they mount (a Secret made anew rolls them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodAuth<'a> {
    pub generation: &'a str,
}

/// How a Cache treats clients without a password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Everyone is served; nobody has a password.
    Open(Open),
    /// Passwords are issued and accepted, and clients without one are still served
    /// (`auth.required: false`).
    Optional,
    /// Every client authenticates.
    Required,
}

/// Why a Cache serves without a password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// `auth.enabled: false`.
    Disabled,
    /// No `spec.auth`, and its servers ran without authentication before Blockwork had it.
    NotConfigured,
}

impl Mode {
    /// Passwords exist (the servers know them, the binding Secret has one).
    pub fn issues_passwords(self) -> bool {
        !matches!(self, Self::Open(_))
    }

    pub fn required(self) -> bool {
        self == Self::Required
    }
}

/// How `cache` treats clients: as `spec.auth` says; without it, as a new Cache (authentication
/// required) unless `running` (its StatefulSet as read) serves without authentication: then it
/// was made before Blockwork had authentication, and stays open until `spec.auth` is set.
pub fn mode(cache: &Cache, running: Option<&StatefulSet>) -> Mode {
    match &cache.spec.auth {
        Some(auth) if !auth.enabled => Mode::Open(Open::Disabled),
        // The schema refuses `required: false` for memcached (it cannot serve both at once).
        Some(auth) if !auth.required && cache.spec.engine != Engine::Memcached => Mode::Optional,
        Some(_) => Mode::Required,
        None if running.is_some_and(|running| !authenticates(running)) => Mode::Open(Open::NotConfigured),
        None => Mode::Required,
    }
}

/// Whether the pods of `stateful_set` authenticate their clients.
fn authenticates(stateful_set: &StatefulSet) -> bool {
    let volumes = stateful_set.spec.as_ref().and_then(|spec| spec.template.spec.as_ref()).and_then(|pod| pod.volumes.as_ref());
    volumes.is_some_and(|volumes| volumes.iter().any(|volume| volume.name == AUTH_VOLUME))
}

/// The Secret of a Cache's passwords: `NAME-cache-auth`.
pub fn state_secret_name(cache: &Cache) -> String {
    format!("{}-cache-auth", cache.name_any())
}

/// The binding Secret applications mount: `NAME-cache-binding`.
pub fn binding_secret_name(cache: &Cache) -> String {
    format!("{}-cache-binding", cache.name_any())
}

/// A duration as the schema takes it (`720h`, `1h30m`, `90s`).
pub fn duration(text: &str) -> Option<Duration> {
    let parsed: jiff::SignedDuration = text.parse().ok()?;
    Duration::try_from(parsed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::api::Auth;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, Volume};

    fn cache(engine: Engine, auth: Option<Auth>) -> Cache {
        let mut cache = crate::fixtures::cache(engine);
        cache.spec.auth = auth;
        cache
    }

    fn running(volumes: &[&str]) -> StatefulSet {
        let volumes = volumes.iter().map(|name| Volume { name: (*name).into(), ..Volume::default() }).collect();
        StatefulSet {
            spec: Some(StatefulSetSpec {
                template: PodTemplateSpec { spec: Some(PodSpec { volumes: Some(volumes), ..PodSpec::default() }), ..Default::default() },
                ..StatefulSetSpec::default()
            }),
            ..StatefulSet::default()
        }
    }

    #[test]
    fn a_new_cache_without_spec_auth_authenticates_its_clients() {
        assert_eq!(mode(&cache(Engine::Redis, None), None), Mode::Required);
        assert_eq!(mode(&cache(Engine::Redis, None), Some(&running(&["config", "data", AUTH_VOLUME]))), Mode::Required);
    }

    #[test]
    fn a_cache_that_served_without_a_password_before_keeps_serving_so() {
        assert_eq!(mode(&cache(Engine::Memcached, None), Some(&running(&["config", "data"]))), Mode::Open(Open::NotConfigured));
        let enabled = Auth::default();
        assert_eq!(mode(&cache(Engine::Memcached, Some(enabled)), Some(&running(&["config", "data"]))), Mode::Required);
    }

    #[test]
    fn spec_auth_says_what_it_says() {
        let disabled = Auth { enabled: false, ..Auth::default() };
        assert_eq!(mode(&cache(Engine::Redis, Some(disabled)), None), Mode::Open(Open::Disabled));
        let optional = Auth { required: false, ..Auth::default() };
        assert_eq!(mode(&cache(Engine::Valkey, Some(optional.clone())), None), Mode::Optional);
        assert_eq!(mode(&cache(Engine::Memcached, Some(optional)), None), Mode::Required);
    }

    #[test]
    fn durations_are_read_as_the_schema_writes_them() {
        assert_eq!(duration("720h"), Some(Duration::from_secs(720 * 3600)));
        assert_eq!(duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(duration("soon"), None);
    }
}
