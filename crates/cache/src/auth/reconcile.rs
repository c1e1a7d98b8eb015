//! The passwords in a reconcile: what is read and written in the API server around the Cache's
//! own objects. Before them ([`before`]): whether the Cache authenticates, the user's password,
//! the passwords' Secret (made on first sight). After them ([`after`]): the running servers
//! brought in step ([`servers`]), the binding Secret published, and a rotation's next step
//! ([`plan`]) written. The decisions are the pure modules'; this one only reads and writes.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use blockwork_runtime::trace;

use crate::api::{Cache, Engine};
use crate::auth::password::Password;
use crate::auth::plan::{self, Plan, Step};
use crate::auth::servers::{self, Outcome, Tls};
use crate::auth::state::State;
use crate::auth::{self, Mode, binding};
use crate::children;
use crate::refs::{self, Unresolved};
use crate::shape;

/// What authentication needs before the Cache's objects are applied.
#[derive(Clone, Debug)]
pub struct Before {
    pub mode: Mode,
    /// The user's password (`auth.secretRef`), or why it cannot be used.
    pub given: Result<Option<Password>, Unresolved>,
    /// The passwords' Secret as read or just made, and what it records (while the Cache issues
    /// passwords and they exist).
    pub secret: Option<(Secret, State)>,
    /// The Secret was made anew (it lacked what it needs): every password is new.
    pub reset: bool,
}

impl Before {
    pub fn state(&self) -> Option<&State> {
        self.secret.as_ref().map(|(_, state)| state)
    }
}

/// Reads whether `cache` authenticates (its StatefulSet only when `spec.auth` is not set), the
/// user's password, and the passwords' Secret, which it makes on first sight (and anew when it
/// lost what it needs) and removes when authentication is turned off.
pub async fn before(client: &Client, cache: &Cache, now: Timestamp) -> Result<Before, kube::Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let running = match cache.spec.auth {
        None => Api::<StatefulSet>::namespaced(client.clone(), &namespace).get_opt(&shape::resource_name(cache)).await?,
        Some(_) => None,
    };
    let mode = auth::mode(cache, running.as_ref());
    let name = auth::state_secret_name(cache);
    if !mode.issues_passwords() {
        if mode == Mode::Open(auth::Open::Disabled) {
            // Authentication turned off: its passwords go (a Cache made open never had any). The
            // Secret is emptied, not deleted (no controller deletes Secrets); it goes with the Cache.
            if let Some(mut secret) = secrets.get_opt(&name).await?.filter(|s| s.data.as_ref().is_some_and(|d| !d.is_empty())) {
                secret.data = None;
                secret.metadata.managed_fields = None;
                trace::kubernetes_write("replace", "child", "Secret", secrets.replace(&name, &PostParams::default(), &secret)).await?;
            }
        }
        return Ok(Before { mode, given: Ok(None), secret: None, reset: false });
    }
    let given = match refs::password_secret_name(cache) {
        Some(name) => refs::given_password(cache, secrets.get_opt(name).await?.as_ref()),
        None => Ok(None),
    };
    let read = secrets.get_opt(&name).await?;
    let readable = read.as_ref().and_then(|secret| State::read(secret).ok().map(|state| (secret.clone(), state)));
    if let Some(secret) = readable {
        return Ok(Before { mode, given, secret: Some(secret), reset: false });
    }
    if refs::password_secret_name(cache).is_some() && !matches!(given, Ok(Some(_))) {
        // The password is the user's, and unusable: nothing to make the Secret with yet.
        return Ok(Before { mode, given, secret: None, reset: false });
    }
    let plan = plan::plan(&plan::Input {
        cache,
        required: mode.required(),
        secret: read.as_ref(),
        given: given.as_ref().ok().and_then(Option::as_ref),
        servers_in_step: false,
        published: false,
        propagation: Duration::ZERO,
        now,
    });
    let reset = matches!(plan.step, Step::Reset(_));
    let written = write(&secrets, &plan).await?;
    Ok(Before { mode, given, secret: written.map(|secret| (secret, plan.state)), reset })
}

/// Creates or replaces the passwords' Secret as `plan` says; the Secret as stored.
async fn write(secrets: &Api<Secret>, plan: &Plan) -> Result<Option<Secret>, kube::Error> {
    let Some(secret) = &plan.write else { return Ok(None) };
    let stored = if secret.metadata.resource_version.is_some() {
        trace::kubernetes_write("replace", "child", "Secret", secrets.replace(&secret.name_any(), &PostParams::default(), secret)).await?
    } else {
        trace::kubernetes_write("create", "child", "Secret", secrets.create(&PostParams::default(), secret)).await?
    };
    Ok(Some(stored))
}

/// What happened after the Cache's objects were applied.
#[derive(Clone, Debug, Default)]
pub struct After {
    /// What the servers said (nothing when they were not asked: no change since they were).
    pub outcome: Outcome,
    /// The rotation's step, and the State after it.
    pub plan: Option<Plan>,
}

/// How the operator reaches the servers of a Cache.
pub struct Servers<'a> {
    /// The stable names of the ready pods.
    pub hosts: &'a [String],
    pub tls: Option<&'a Tls>,
    /// Nothing changed since they were last found in step: not asked again.
    pub known_in_step: bool,
}

/// Brings the servers in step with the passwords, publishes the binding Secret (`ca` the TLS
/// Secret's, for clients to verify with) and writes a rotation's next step.
pub async fn after(
    client: &Client,
    cache: &Cache,
    before: &Before,
    servers: Servers<'_>,
    ca: Option<&[u8]>,
    propagation: Duration,
    now: Timestamp,
) -> Result<After, kube::Error> {
    let namespace = cache.namespace().unwrap_or_default();
    let primary = cache.status.as_ref().and_then(|status| status.primary.as_deref());
    let binding = binding::secret(cache, before.state(), ca, primary);
    children::apply_secret(client, &namespace, &binding).await.map_err(|failed| failed.error)?;
    let Some((secret, state)) = &before.secret else {
        return Ok(After::default());
    };
    let required = before.mode.required();
    let outcome = if servers.known_in_step {
        Outcome::default()
    } else {
        let port = shape::port(cache.spec.engine) as u16;
        match cache.spec.engine {
            Engine::Redis | Engine::Valkey => {
                servers::sync_redis(servers.hosts, shape::has_sentinel(cache), port, state, required, servers.tls).await
            }
            Engine::Memcached => servers::check_memcached(servers.hosts, port, state, servers.tls).await,
        }
    };
    let plan = plan::plan(&plan::Input {
        cache,
        required,
        secret: Some(secret),
        given: before.given.as_ref().ok().and_then(Option::as_ref),
        servers_in_step: outcome.in_step(),
        // Applied above, from the same State.
        published: true,
        propagation,
        now,
    });
    write(&Api::namespaced(client.clone(), &namespace), &plan).await?;
    Ok(After { outcome, plan: Some(plan) })
}
