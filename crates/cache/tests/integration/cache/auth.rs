//! A Cache's authentication against a real API server (issue 39): the passwords are in a Secret
//! the Cache owns and in no other object, status or event; the binding Secret publishes the
//! application's; a Cache that served without a password stays open until moved; rotations,
//! the user's own password Secret, turning authentication off; the schema's refusals; and what
//! authentication costs a reconcile. Real servers run the rendered files in servers.rs.

use std::time::Duration;

use blockwork_cache::api::{Cache, Engine, HighAvailability};
use blockwork_cache::build;
use blockwork_cache::settings::{CacheArgs, Settings};
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::kube_proxy::KubeProxy;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{Harness, cache, condition, rejection, warnings};

fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).map(|value| String::from_utf8_lossy(&value.0).into_owned())
}

/// Every password the passwords' Secret of Cache `name` holds.
async fn passwords_of(h: &Harness, name: &str) -> Vec<String> {
    let secret =
        h.eventually("the passwords' Secret", async || h.api_of::<Secret>().get_opt(&format!("{name}-cache-auth")).await.unwrap()).await;
    let state = blockwork_cache::auth::state::State::read(&secret).unwrap();
    [
        Some(&state.current),
        state.next.as_ref(),
        state.previous.as_ref(),
        Some(&state.replication),
        Some(&state.sentinel),
        Some(&state.monitor),
        Some(&state.operator),
    ]
    .into_iter()
    .flatten()
    .map(|password| password.expose().to_owned())
    .collect()
}

/// A new Cache without `spec.auth` authenticates its clients: the passwords are in a Secret it
/// owns, the binding Secret publishes the application's, and none is in the ConfigMap, the
/// StatefulSet, the Cache's status or its events.
#[tokio::test]
async fn a_new_cache_authenticates_and_no_password_is_in_its_objects_status_or_events() {
    let h = Harness::start("cache-auth-new").await;
    let mut c = cache("ha", Engine::Redis, "64Mi", 3);
    c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let (status, reason, message) = h
        .eventually("Authenticated=True", async || condition(&h.api().get("ha").await.unwrap(), "Authenticated").filter(|c| c.0 == "True"))
        .await;
    assert_eq!(reason, "PasswordRequired");
    assert!(message.contains("ha-cache-binding"), "{status} {message}");
    let passwords = passwords_of(&h, "ha").await;
    let binding = h.eventually("the binding Secret", async || h.api_of::<Secret>().get_opt("ha-cache-binding").await.unwrap()).await;
    assert_eq!(binding.type_.as_deref(), Some("servicebinding.io/redis"));
    assert_eq!(secret_value(&binding, "password").as_deref(), Some(passwords[0].as_str()));
    assert_eq!(secret_value(&binding, "sentinel.master").as_deref(), Some("ha"));
    for secret in [&binding, &h.api_of::<Secret>().get("ha-cache-auth").await.unwrap()] {
        assert_eq!(secret.owner_references()[0].kind, "Cache", "deleted with the Cache");
    }
    let cache = h.api().get("ha").await.unwrap();
    assert_eq!(cache.status.as_ref().and_then(|s| s.binding.as_ref()).map(|b| b.name.as_str()), Some("ha-cache-binding"));
    assert_eq!(cache.status.as_ref().and_then(|s| s.auth.as_ref()).and_then(|a| a.user.as_deref()), Some("app"));

    let config_map = serde_json::to_string(&h.api_of::<ConfigMap>().get("ha-cache-config").await.unwrap()).unwrap();
    let stateful_set = h.api_of::<StatefulSet>().get("ha-cache").await.unwrap();
    let volumes: Vec<String> =
        stateful_set.spec.as_ref().unwrap().template.spec.as_ref().unwrap().volumes.iter().flatten().map(|v| v.name.clone()).collect();
    assert!(volumes.contains(&"auth".to_owned()) && volumes.contains(&"sentinel-auth".to_owned()), "{volumes:?}");
    let events =
        serde_json::to_string(&h.api_of::<k8s_openapi::api::events::v1::Event>().list(&Default::default()).await.unwrap()).unwrap();
    let (stateful_set, status) = (serde_json::to_string(&stateful_set).unwrap(), serde_json::to_string(&cache.status).unwrap());
    for password in &passwords {
        for (what, text) in
            [("the ConfigMap", &config_map), ("the StatefulSet", &stateful_set), ("the status", &status), ("an event", &events)]
        {
            assert!(!text.contains(password.as_str()), "a password is in {what}");
        }
    }
}

/// Caches that served without a password before Blockwork had authentication (here: the objects
/// the release before built, made while the Cache was paused) keep serving without one, with
/// nothing of theirs rewritten; the documented move then takes them to authentication, and
/// requiring it rolls no pod.
#[tokio::test]
async fn a_cache_that_served_without_a_password_stays_open_until_moved_and_requiring_rolls_no_pod() {
    let h = Harness::start("cache-auth-upgrade").await;
    let mut c = cache("old", Engine::Redis, "64Mi", 1);
    c.metadata.annotations = Some([("blockwork.dev/paused".to_owned(), "true".to_owned())].into());
    let created = h.api().create(&PostParams::default(), &c).await.unwrap();
    let before = build::desired(&created, &Settings::default(), None).unwrap();
    let applied = h.api_of::<StatefulSet>().create(&PostParams::default(), &before.stateful_set).await.unwrap();
    h.api_of::<ConfigMap>().create(&PostParams::default(), &before.config_map).await.unwrap();
    h.annotate("old", "blockwork.dev/paused", None).await;

    let (_, reason, message) = h
        .eventually("Authenticated=False", async || {
            condition(&h.api().get("old").await.unwrap(), "Authenticated").filter(|c| c.0 == "False")
        })
        .await;
    assert_eq!(reason, "AuthenticationNotConfigured", "{message}");
    let binding = h.eventually("the binding Secret", async || h.api_of::<Secret>().get_opt("old-cache-binding").await.unwrap()).await;
    assert_eq!(secret_value(&binding, "password"), None, "an open Cache publishes no password");
    assert!(h.api_of::<Secret>().get_opt("old-cache-auth").await.unwrap().is_none(), "no passwords made");
    let kept = h.api_of::<StatefulSet>().get("old-cache").await.unwrap();
    assert_eq!(kept.spec.as_ref().unwrap().template, applied.spec.as_ref().unwrap().template, "its pods do not roll");

    // The move: passwords issued while clients without one are still served.
    h.merge("old", json!({"spec": {"auth": {"required": false}}})).await;
    h.eventually("AuthenticationOptional", async || {
        condition(&h.api().get("old").await.unwrap(), "Authenticated").filter(|c| c.1 == "AuthenticationOptional")
    })
    .await;
    let acl = h.eventually("the passwords' Secret", async || h.api_of::<Secret>().get_opt("old-cache-auth").await.unwrap()).await;
    assert!(secret_value(&acl, "users.acl").unwrap().contains("user default on nopass"), "clients without a password still served");
    let optional = h
        .eventually("the pods with the passwords' files", async || {
            let stateful_set = h.api_of::<StatefulSet>().get("old-cache").await.unwrap();
            let template = stateful_set.spec.unwrap().template;
            template.spec.as_ref().unwrap().volumes.iter().flatten().any(|v| v.name == "auth").then_some(template)
        })
        .await;
    assert!(secret_value(&h.api_of::<Secret>().get("old-cache-binding").await.unwrap(), "password").is_some());

    // Every client moved: required. The servers turn the default user off at run time.
    h.merge("old", json!({"spec": {"auth": {"required": true}}})).await;
    h.eventually("PasswordRequired", async || {
        condition(&h.api().get("old").await.unwrap(), "Authenticated").filter(|c| c.1 == "PasswordRequired")
    })
    .await;
    h.eventually("the default user off in the ACL file", async || {
        let secret = h.api_of::<Secret>().get("old-cache-auth").await.unwrap();
        secret_value(&secret, "users.acl").unwrap().contains("user default off").then_some(())
    })
    .await;
    let required = h.api_of::<StatefulSet>().get("old-cache").await.unwrap().spec.unwrap().template;
    assert_eq!(required, optional, "requiring authentication rolls no pod");
}

/// `blockwork rotate` starts a rotation; with no pod running, nothing stands in the way but the
/// Secret's propagation: the new password is published, the previous one retires after the
/// grace period, which the status dates.
#[tokio::test]
async fn a_requested_rotation_publishes_a_new_password_and_dates_the_previous_one_s_retirement() {
    let settings = Settings::from_args(&CacheArgs { secret_propagation: "2s".into(), ..CacheArgs::default() }).unwrap();
    let h = Harness::start_with_settings("cache-auth-rotate", settings).await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Valkey, "64Mi", 1)).await.unwrap();
    h.eventually("PasswordRequired", async || {
        condition(&h.api().get("c").await.unwrap(), "Authenticated").filter(|c| c.1 == "PasswordRequired")
    })
    .await;
    let first = secret_value(&h.api_of::<Secret>().get("c-cache-binding").await.unwrap(), "password").unwrap();

    let rotated =
        blockwork_inspect::actions::rotate(&h.client, &h.namespace, blockwork_inspect::read::KindArg::Cache, "c", Duration::from_secs(30))
            .await
            .unwrap();
    assert!(matches!(rotated, blockwork_inspect::actions::Rotated::Started { .. }), "{rotated:?}");
    let published = h
        .eventually("the new password published", async || {
            let password = secret_value(&h.api_of::<Secret>().get("c-cache-binding").await.unwrap(), "password")?;
            (password != first).then_some(password)
        })
        .await;
    let status = h
        .eventually("RetiringPrevious", async || {
            let auth = h.api().get("c").await.unwrap().status?.auth?;
            (auth.rotation == Some(blockwork_cache::api::RotationPhase::RetiringPrevious)).then_some(auth)
        })
        .await;
    let retires = status.previous_retires_at.unwrap().0.duration_since(jiff::Timestamp::now()).as_secs();
    assert!((500..=600).contains(&retires), "the default grace period: 10 minutes from the publication ({retires} s left)");
    let acl = secret_value(&h.api_of::<Secret>().get("c-cache-auth").await.unwrap(), "users.acl").unwrap();
    let hash = |p: &str| blockwork_cache::auth::password::Password::parse(p.as_bytes()).unwrap().sha256();
    assert!(acl.contains(&hash(&first)) && acl.contains(&hash(&published)), "both accepted during the grace period");
    let (_, reason, _) = condition(&h.api().get("c").await.unwrap(), "Authenticated").unwrap();
    assert_eq!(reason, "PasswordRotating");
    h.wait_for_event("c", "PasswordPublished").await;
}

/// The user's own password (`auth.secretRef`): missing, the Cache says so and makes none; then
/// it is the password, and a new value in the Secret is rotated in.
#[tokio::test]
async fn the_user_s_password_secret_is_the_password_and_a_new_value_is_rotated_in() {
    let settings = Settings::from_args(&CacheArgs { secret_propagation: "1s".into(), ..CacheArgs::default() }).unwrap();
    let h = Harness::start_with_settings("cache-auth-given", settings).await;
    let mut c = cache("c", Engine::Memcached, "64Mi", 1);
    c.spec.auth = Some(blockwork_cache::api::Auth {
        secret_ref: Some(blockwork_cache::api::SecretReference { name: "mine".into() }),
        ..blockwork_cache::api::Auth::default()
    });
    h.api().create(&PostParams::default(), &c).await.unwrap();
    let (_, reason, message) = h
        .eventually("ResolvedRefs=False", async || condition(&h.api().get("c").await.unwrap(), "ResolvedRefs").filter(|c| c.0 == "False"))
        .await;
    assert_eq!(reason, "AuthSecretNotFound", "{message}");
    assert!(h.api_of::<Secret>().get_opt("c-cache-auth").await.unwrap().is_none(), "no password made up in place of the user's");

    let mine = |password: &str| Secret {
        metadata: kube::api::ObjectMeta { name: Some("mine".into()), ..Default::default() },
        data: Some([("password".to_owned(), ByteString(password.as_bytes().to_vec()))].into()),
        ..Default::default()
    };
    h.api_of::<Secret>().create(&PostParams::default(), &mine("short")).await.unwrap();
    let (_, reason, message) = h
        .eventually("AuthSecretInvalid", async || {
            condition(&h.api().get("c").await.unwrap(), "ResolvedRefs").filter(|c| c.1 == "AuthSecretInvalid")
        })
        .await;
    assert!(message.contains("5 characters") && !message.contains("short"), "{reason}: {message}");
    h.api_of::<Secret>().replace("mine", &PostParams::default(), &mine("the-first-password")).await.unwrap();
    h.eventually("the user's password published", async || {
        let binding = h.api_of::<Secret>().get_opt("c-cache-binding").await.unwrap()?;
        (secret_value(&binding, "password")? == "the-first-password").then_some(())
    })
    .await;
    h.api_of::<Secret>().replace("mine", &PostParams::default(), &mine("the-second-password")).await.unwrap();
    h.eventually("the new value rotated in and published", async || {
        let binding = h.api_of::<Secret>().get_opt("c-cache-binding").await.unwrap()?;
        (secret_value(&binding, "password")? == "the-second-password").then_some(())
    })
    .await;
    let auth = secret_value(&h.api_of::<Secret>().get("c-cache-auth").await.unwrap(), "memcached.auth").unwrap();
    assert!(auth.contains("app:the-first-password\n") && auth.contains("app:the-second-password\n"), "both work during the grace period");
}

/// Turning authentication off removes the passwords (the Secret that held them is emptied: no
/// controller deletes a Secret), and says the Cache is open; turning it on again makes new ones.
#[tokio::test]
async fn disabling_authentication_removes_the_passwords_and_says_the_cache_is_open() {
    let h = Harness::start("cache-auth-off").await;
    h.api().create(&PostParams::default(), &cache("c", Engine::Redis, "64Mi", 1)).await.unwrap();
    let before = passwords_of(&h, "c").await;
    h.merge("c", json!({"spec": {"auth": {"enabled": false}}})).await;
    h.eventually("the passwords gone", async || {
        let secret = h.api_of::<Secret>().get("c-cache-auth").await.unwrap();
        secret.data.is_none_or(|d| d.is_empty()).then_some(())
    })
    .await;
    let (_, reason, _) = h
        .eventually("AuthenticationDisabled", async || {
            condition(&h.api().get("c").await.unwrap(), "Authenticated").filter(|c| c.1 == "AuthenticationDisabled")
        })
        .await;
    assert_eq!(reason, "AuthenticationDisabled");
    assert_eq!(secret_value(&h.api_of::<Secret>().get("c-cache-binding").await.unwrap(), "password"), None);
    h.merge("c", json!({"spec": {"auth": {"enabled": true}}})).await;
    h.eventually("PasswordRequired", async || {
        condition(&h.api().get("c").await.unwrap(), "Authenticated").filter(|c| c.1 == "PasswordRequired")
    })
    .await;
    let after = passwords_of(&h, "c").await;
    assert!(after.iter().all(|p| !before.contains(p)), "new passwords");
    assert!(warnings(&h, "c", "AuthSecretReset").await.is_empty(), "turning it on again is no reset");
}

#[tokio::test]
async fn the_schema_refuses_what_authentication_cannot_do_with_its_message() {
    let h = Harness::start("cache-auth-invalid").await;
    for (spec, expected) in [
        (
            json!({"engine": "memcached", "memory": "64Mi", "auth": {"required": false}}),
            "memcached cannot serve clients with and without a password",
        ),
        (
            json!({"engine": "redis", "memory": "64Mi", "auth": {"secretRef": {"name": "mine"}, "rotationPeriod": "720h"}}),
            "with auth.secretRef the password is yours",
        ),
        (json!({"engine": "redis", "memory": "64Mi", "auth": {"rotationPeriod": "30m"}}), "auth.rotationPeriod must be at least 1h"),
        (json!({"engine": "redis", "memory": "64Mi", "auth": {"gracePeriod": "10s"}}), "auth.gracePeriod must be at least 1m"),
        (
            json!({"engine": "redis", "memory": "64Mi", "auth": {"rotationPeriod": "1h", "gracePeriod": "2h"}}),
            "auth.rotationPeriod must be longer than auth.gracePeriod",
        ),
        (json!({"engine": "redis", "memory": "64Mi", "auth": {"enabled": false, "rotationPeriod": "24h"}}), "need auth.enabled"),
        (json!({"engine": "redis", "memory": "64Mi", "auth": {"rotationPeriod": "a week"}}), "spec.auth.rotationPeriod"),
    ] {
        let message = rejection(&h, "bad", spec.clone()).await;
        assert!(message.contains(expected), "{spec}: {message}");
    }
}

/// What authentication costs a reconcile, counted at a proxy in front of the API server: reads
/// and writes of a new Cache until it is applied and of a steady-state reconcile (`blockwork
/// retry`), open and authenticating, and of a rotation until the new password is published. Prints
/// the table docs/benchmarks.md keeps (`-- --nocapture`); asserts what the design says: a
/// steady-state reconcile of an authenticating Cache writes nothing more than an open one's, and
/// a rotation writes the passwords' Secret once per step and the binding Secret once.
#[tokio::test]
async fn what_authentication_costs_a_reconcile_and_a_rotation() {
    let proxy = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let settings = Settings::from_args(&CacheArgs { secret_propagation: "1s".into(), ..CacheArgs::default() }).unwrap();
    let h = Harness::start_with("cache-auth-costs", proxy.client().await.unwrap(), settings).await;
    let since = |before: (usize, usize, usize), proxy: &KubeProxy| {
        let counts = proxy.counts();
        (
            counts.get("read").copied().unwrap_or(0) - before.0,
            counts.get("write").copied().unwrap_or(0) - before.1,
            proxy.writes().len() - before.2,
        )
    };
    let mark = |proxy: &KubeProxy| {
        let counts = proxy.counts();
        (counts.get("read").copied().unwrap_or(0), counts.get("write").copied().unwrap_or(0), proxy.writes().len())
    };
    let writes_of = |from: usize, proxy: &KubeProxy| -> Vec<String> {
        proxy.writes()[from..]
            .iter()
            .map(|w| format!("{} {}", w.method, w.path.rsplit("/namespaces/").next().unwrap_or_default()))
            .collect()
    };
    let mut rows = Vec::new();
    let mut steady = Vec::new();
    for (name, auth) in [("open", json!({"enabled": false})), ("authenticating", json!({}))] {
        let before = mark(&proxy);
        let object = json!({"apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache", "metadata": {"name": name}, "spec": {"engine": "redis", "memory": "64Mi", "auth": auth}});
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(h.client.clone(), &h.namespace, &kube::api::ApiResource::erase::<Cache>(&()));
        api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
        h.eventually("applied, Authenticated said", async || {
            let cache = h.api().get(name).await.unwrap();
            (condition(&cache, "Synced").is_some_and(|c| c.0 == "True") && condition(&cache, "Authenticated").is_some()).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (reads, writes, _) = since(before, &proxy);
        rows.push(format!("| {name}: create → applied | {reads} | {writes} | |"));

        let before = mark(&proxy);
        let started = std::time::Instant::now();
        h.annotate(name, "blockwork.dev/reconcile-requested-at", Some("2026-11-28T00:00:00Z")).await;
        h.eventually("the retry handled", async || {
            h.api().get(name).await.unwrap().status?.last_handled_reconcile_at.filter(|at| at == "2026-11-28T00:00:00Z")
        })
        .await;
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (reads, writes, _) = since(before, &proxy);
        let written = writes_of(before.2, &proxy);
        rows.push(format!(
            "| {name}: steady-state reconcile (retry) | {reads} | {writes}: {} | {} ms |",
            written.join(", "),
            took.as_millis()
        ));
        steady.push((writes, written));
    }
    let (open_writes, authenticating_writes) = (&steady[0], &steady[1]);
    assert!(
        authenticating_writes.0 <= open_writes.0,
        "an authenticating Cache's steady-state reconcile writes more: {:?} against {:?}",
        authenticating_writes.1,
        open_writes.1
    );

    let before = mark(&proxy);
    let started = std::time::Instant::now();
    let first = secret_value(&h.api_of::<Secret>().get("authenticating-cache-binding").await.unwrap(), "password").unwrap();
    h.annotate("authenticating", "blockwork.dev/rotate-requested-at", Some("2026-11-28T00:00:00Z")).await;
    h.eventually("RetiringPrevious", async || {
        let auth = h.api().get("authenticating").await.unwrap().status?.auth?;
        (auth.rotation == Some(blockwork_cache::api::RotationPhase::RetiringPrevious)).then_some(())
    })
    .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (reads, writes, _) = since(before, &proxy);
    let written = writes_of(before.2, &proxy);
    rows.push(format!(
        "| rotation: requested → published (propagation 1 s) | {reads} | {writes}: {} | {} ms |",
        written.join(", "),
        took.as_millis()
    ));
    assert_ne!(secret_value(&h.api_of::<Secret>().get("authenticating-cache-binding").await.unwrap(), "password").unwrap(), first);
    let count = |suffix: &str| written.iter().filter(|w| w.ends_with(suffix)).count();
    assert_eq!(count("secrets/authenticating-cache-auth"), 3, "one write per step (started, promoted, published): {written:?}");
    assert_eq!(count("secrets/authenticating-cache-binding"), 1, "the binding Secret written once: {written:?}");
    println!("| scenario | reads | writes | time |\n|---|---|---|---|\n{}", rows.join("\n"));
}
