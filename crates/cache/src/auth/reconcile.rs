//! The passwords in a reconcile: what is read and written in the API server around the Cache's
//! own objects. Before them ([`before`]): whether the Cache authenticates, the user's password,
//! the passwords' Secret (made on first sight). After them ([`after`]): the running servers
//! brought in step ([`servers`]), the binding Secret published, and a rotation's next step
//! ([`plan`]) written. The decisions are the pure modules'; this one only reads and writes.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
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

/// What authentication needs before the Cache's objects are applied. (No `Debug`: it holds a
/// Secret's data.)
pub struct Before {
    pub mode: Mode,
    /// The user's password (`auth.secretRef`), or why it cannot be used.
    pub given: Result<Option<Password>, Unresolved>,
    /// The passwords' Secret as read or just made, and what it records (while the Cache issues
    /// passwords and they exist).
    pub secret: Option<(Secret, State)>,
    /// The passwords' Secret was made in this reconcile: on first sight ([`Step::Create`]) or
    /// anew, every password new ([`Step::Reset`]).
    pub made: Option<Step>,
}

impl Before {
    pub fn state(&self) -> Option<&State> {
        self.secret.as_ref().map(|(_, state)| state)
    }
}

/// Reads whether `cache` authenticates (its StatefulSet only when `spec.auth` is not set), the
/// user's password, and the passwords' Secret, which it makes on first sight (and anew when it
/// lost what it needs) and empties when authentication is turned off.
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
        return Ok(Before { mode, given: Ok(None), secret: None, made: None });
    }
    let given = match refs::password_secret_name(cache) {
        Some(name) => refs::given_password(cache, secrets.get_opt(name).await?.as_ref()),
        None => Ok(None),
    };
    let read = secrets.get_opt(&name).await?;
    let readable = read.as_ref().and_then(|secret| State::read(secret).ok().map(|state| (secret.clone(), state)));
    if let Some(secret) = readable {
        return Ok(Before { mode, given, secret: Some(secret), made: None });
    }
    if refs::password_secret_name(cache).is_some() && !matches!(given, Ok(Some(_))) {
        // The password is the user's, and unusable: nothing to make the Secret with yet.
        return Ok(Before { mode, given, secret: None, made: None });
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
    let written = write(&secrets, &plan).await?;
    Ok(Before { mode, given, secret: written.map(|secret| (secret, plan.state)), made: Some(plan.step) })
}

/// Brings the servers (and Sentinels) at `hosts` in step with `state` (memcached: checks them).
async fn ask(cache: &Cache, hosts: &[String], state: &State, mode: Mode, tls: Option<&Tls>) -> Outcome {
    let port = shape::port(cache.spec.engine) as u16;
    match cache.spec.engine {
        Engine::Redis | Engine::Valkey => servers::sync_redis(hosts, shape::has_sentinel(cache), port, state, mode.required(), tls).await,
        Engine::Memcached => servers::check_memcached(hosts, port, state, tls).await,
    }
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
#[derive(Default)]
pub struct After {
    /// What the servers said (nothing when they were not asked: no change since they were).
    pub outcome: Outcome,
    /// The rotation's step, and the State after it.
    pub plan: Option<Plan>,
}

/// For each Cache, what its servers were last found in step with (the passwords' Secret and
/// the ready pods' containers): while that holds, they are not asked again.
#[derive(Debug, Default)]
pub struct InStep(Mutex<HashMap<ObjectRef<Cache>, u64>>);

impl InStep {
    fn holds(&self, cache: &ObjectRef<Cache>, fingerprint: u64) -> bool {
        self.0.lock().is_ok_and(|known| known.get(cache) == Some(&fingerprint))
    }

    fn record(&self, cache: ObjectRef<Cache>, fingerprint: Option<u64>) {
        if let Ok(mut known) = self.0.lock() {
            match fingerprint {
                Some(fingerprint) => known.insert(cache, fingerprint),
                None => known.remove(&cache),
            };
        }
    }
}

/// The stable names of the ready pods of `cache` among `pods`, and a fingerprint of what the
/// operator would find on them with `secret` (its resourceVersion) in `mode`: which pods, which
/// container starts (a restarted server reads the Secret's file, which may be behind).
pub fn ready_pods(cache: &Cache, pods: &[Arc<Pod>], secret: &str, mode: Mode) -> (Vec<String>, u64) {
    let (namespace, name) = (cache.namespace(), cache.name_any());
    let mut ready: Vec<&Pod> = pods
        .iter()
        .filter(|pod| pod.namespace() == namespace && pod.labels().get(shape::INSTANCE_LABEL) == Some(&name))
        .filter(|pod| {
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|pod| &**pod)
        .collect();
    ready.sort_by_key(|pod| pod.name_any());
    let mut hasher = std::hash::DefaultHasher::new();
    (secret, format!("{mode:?}")).hash(&mut hasher);
    let mut hosts = Vec::new();
    for pod in ready {
        let Some(ordinal) = pod.name_any().rsplit('-').next().and_then(|o| o.parse().ok()) else { continue };
        hosts.push(shape::pod_host(cache, ordinal));
        (pod.name_any(), pod.metadata.uid.clone()).hash(&mut hasher);
        for container in pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()) {
            (&container.name, container.restart_count).hash(&mut hasher);
        }
    }
    (hosts, hasher.finish())
}

/// Publishes the binding Secret (`ca` the TLS Secret's, for clients to verify with), brings the
/// ready ones of `pods` in step with the passwords (asked only when something changed since
/// they were found so, and with TLS only with a CA to verify them with: the passwords would
/// travel to an unverified server), and writes a rotation's next step.
#[allow(clippy::too_many_arguments)]
pub async fn after(
    client: &Client,
    cache: &Cache,
    before: &Before,
    pods: &[Arc<Pod>],
    in_step: &InStep,
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
    let key = ObjectRef::from_obj(cache);
    let (hosts, fingerprint) = ready_pods(cache, pods, &secret.resource_version().unwrap_or_default(), before.mode);
    let unverifiable =
        |why: String| Outcome { changed: Vec::new(), failed: vec![(refs::tls_secret_name(cache).unwrap_or_default().to_owned(), why)] };
    let outcome = if in_step.holds(&key, fingerprint) || hosts.is_empty() {
        Outcome::default()
    } else {
        match (shape::tls_enabled(cache), ca) {
            (false, _) => ask(cache, &hosts, state, before.mode, None).await,
            (true, None) => unverifiable("no ca.crt to verify the servers with".to_owned()),
            (true, Some(ca)) => match Tls::new(ca, &binding::service_host(cache)) {
                Ok(tls) => ask(cache, &hosts, state, before.mode, Some(&tls)).await,
                Err(why) => unverifiable(why),
            },
        }
    };
    in_step.record(key, outcome.in_step().then_some(fingerprint));
    let plan = plan::plan(&plan::Input {
        cache,
        required: before.mode.required(),
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
