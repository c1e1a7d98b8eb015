//! Pure: the Secret an application mounts to connect to a Cache, as the Service Binding for
//! Kubernetes specification (servicebinding.io) has a provisioned service expose it: the Cache's
//! `status.binding.name` names it, its type is `servicebinding.io/redis` (valkey too: its
//! clients are Redis clients) or `servicebinding.io/memcached`, and each key is a file of the
//! mounted Secret:
//!
//! | key | |
//! |---|---|
//! | `type`, `provider` | `redis` or `memcached`; `blockwork` |
//! | `host`, `port` | the Service; with replication, the primary's pod (followed through failovers) |
//! | `username`, `password` | `app` and its current password (rotations replace it) |
//! | `ssl` | `true` with TLS, and then `ca.crt`: the CA of the TLS Secret |
//! | `sentinel.master`, `sentinel.nodes`, `sentinel.username`, `sentinel.password` | with Sentinel: its master name, every pod's Sentinel (`host:26379,...`), and the same user |
//!
//! An application that re-reads the files when they change (the kubelet updates a mounted
//! Secret within its sync period) follows rotations and failovers without a restart.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::{Cache, Engine};
use crate::auth::state::State;
use crate::auth::users::APP;
use crate::shape::{self, SENTINEL_PORT, Topology};

pub const PROVIDER: &str = "blockwork";

/// The binding Secret of `cache`: its passwords' `state` when clients authenticate, the TLS
/// Secret's `ca` when it serves TLS, the `primary` pod Sentinel reports when it has one.
pub fn secret(cache: &Cache, state: Option<&State>, ca: Option<&[u8]>, primary: Option<&str>) -> Secret {
    let kind = match cache.spec.engine {
        Engine::Redis | Engine::Valkey => "redis",
        Engine::Memcached => "memcached",
    };
    let port = shape::port(cache.spec.engine).to_string();
    let host = match shape::topology(cache) {
        Topology::Standalone => service_host(cache),
        // Writes go to the primary; Sentinel-aware clients ask the Sentinels instead.
        Topology::Replicated { sentinel } => {
            let ordinal = if sentinel { primary.and_then(|pod| pod.rsplit('-').next()?.parse().ok()).unwrap_or(0) } else { 0 };
            shape::pod_host(cache, ordinal)
        }
    };
    let tls = shape::tls_enabled(cache);
    let mut data: BTreeMap<&str, Vec<u8>> = [
        ("type", kind.into()),
        ("provider", PROVIDER.into()),
        ("host", host.into_bytes()),
        ("port", port.into_bytes()),
        ("ssl", tls.to_string().into_bytes()),
    ]
    .into();
    if let Some(ca) = ca.filter(|_| tls) {
        data.insert("ca.crt", ca.to_vec());
    }
    if let Some(state) = state {
        data.insert("username", APP.into());
        data.insert("password", state.current.expose().as_bytes().to_vec());
    }
    if shape::has_sentinel(cache) {
        let nodes: Vec<String> = (0..cache.spec.replicas).map(|i| format!("{}:{SENTINEL_PORT}", shape::pod_host(cache, i))).collect();
        data.insert("sentinel.master", cache.name_any().into_bytes());
        data.insert("sentinel.nodes", nodes.join(",").into_bytes());
        if let Some(state) = state {
            data.insert("sentinel.username", APP.into());
            data.insert("sentinel.password", state.current.expose().as_bytes().to_vec());
        }
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(super::binding_secret_name(cache)),
            namespace: cache.namespace(),
            labels: Some(shape::labels(cache)),
            owner_references: cache.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some(format!("servicebinding.io/{kind}")),
        data: Some(data.into_iter().map(|(key, value)| (key.to_owned(), ByteString(value))).collect()),
        ..Secret::default()
    }
}

/// The client Service's DNS name.
pub fn service_host(cache: &Cache) -> String {
    format!("{}.{}.svc.cluster.local", shape::resource_name(cache), cache.namespace().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HighAvailability, Tls};
    use crate::auth::password::Password;

    fn value(secret: &Secret, key: &str) -> Option<String> {
        secret.data.as_ref()?.get(key).map(|v| String::from_utf8_lossy(&v.0).into_owned())
    }

    fn cache(engine: Engine) -> Cache {
        crate::fixtures::cache(engine)
    }

    #[test]
    fn an_authenticated_cache_publishes_its_service_user_and_current_password() {
        let state = State::new(Some(Password::parse(b"current-password").expect("valid")), jiff::Timestamp::UNIX_EPOCH);
        let secret = secret(&cache(Engine::Redis), Some(&state), None, None);
        assert_eq!(secret.type_.as_deref(), Some("servicebinding.io/redis"));
        assert_eq!(value(&secret, "host").as_deref(), Some("c-cache.ns.svc.cluster.local"));
        assert_eq!(value(&secret, "port").as_deref(), Some("6379"));
        assert_eq!(value(&secret, "username").as_deref(), Some("app"));
        assert_eq!(value(&secret, "password").as_deref(), Some("current-password"));
        assert_eq!((value(&secret, "ssl").as_deref(), value(&secret, "ca.crt")), (Some("false"), None));
        assert_eq!(secret.owner_references()[0].kind, "Cache");
    }

    #[test]
    fn an_open_cache_publishes_where_it_is_and_no_password() {
        let secret = secret(&cache(Engine::Memcached), None, None, None);
        assert_eq!(secret.type_.as_deref(), Some("servicebinding.io/memcached"));
        assert_eq!(value(&secret, "port").as_deref(), Some("11211"));
        assert_eq!((value(&secret, "username"), value(&secret, "password")), (None, None));
    }

    #[test]
    fn with_tls_the_binding_carries_the_ca() {
        let mut tls = cache(Engine::Valkey);
        tls.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        let secret = secret(&tls, None, Some(b"CA PEM"), None);
        assert_eq!((value(&secret, "ssl").as_deref(), value(&secret, "ca.crt").as_deref()), (Some("true"), Some("CA PEM")));
    }

    #[test]
    fn with_sentinel_the_host_is_the_primary_and_every_sentinel_is_listed() {
        let mut ha = cache(Engine::Redis);
        ha.spec.replicas = 3;
        ha.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        let state = State::new(None, jiff::Timestamp::UNIX_EPOCH);
        let secret = secret(&ha, Some(&state), None, Some("c-cache-2"));
        assert_eq!(value(&secret, "host").as_deref(), Some("c-cache-2.c-cache-headless.ns.svc.cluster.local"));
        assert_eq!(value(&secret, "sentinel.master").as_deref(), Some("c"));
        let nodes = value(&secret, "sentinel.nodes").expect("nodes");
        assert_eq!(nodes.split(',').count(), 3);
        assert!(nodes.starts_with("c-cache-0.c-cache-headless.ns.svc.cluster.local:26379,"), "{nodes}");
        assert_eq!(value(&secret, "sentinel.password"), value(&secret, "password"));
        let first = super::secret(&ha, Some(&state), None, None);
        assert_eq!(value(&first, "host").as_deref(), Some("c-cache-0.c-cache-headless.ns.svc.cluster.local"), "pod 0 until Sentinel says");
    }
}
