//! Pure: the passwords' Secret as the pods mount it: one volume per container that reads it,
//! each with only that container's files.

use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume};

use crate::api::{Cache, Engine};
use crate::auth::{self, MONITOR_FILE, state};
use crate::shape::{self, Topology};

/// The server's volume (a StatefulSet whose pods have none runs without authentication).
pub const SERVER: &str = auth::AUTH_VOLUME;
/// The Sentinel's.
pub const SENTINEL: &str = "sentinel-auth";
/// The exporter's.
pub const EXPORTER: &str = "exporter-auth";

/// The passwords' Secret, once per container that reads it, each with only the files it reads
/// (readable by the pod's group only): the server's users and `monitor`'s password (and, for a
/// replica, how it authenticates to its primary), the Sentinel's users and credentials, the
/// exporter's password file (when it runs).
pub fn all(cache: &Cache, exporter: bool) -> Vec<Volume> {
    let secret = auth::state_secret_name(cache);
    let volume = |name: &str, files: &[(&str, &str)]| Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.clone()),
            items: Some(files.iter().map(|(key, path)| KeyToPath { key: (*key).into(), path: (*path).into(), mode: None }).collect()),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    let monitor = (state::MONITOR, MONITOR_FILE);
    match cache.spec.engine {
        Engine::Memcached => vec![volume(SERVER, &[(state::MEMCACHED_AUTH, state::MEMCACHED_AUTH), monitor])],
        Engine::Redis | Engine::Valkey => {
            let mut server = vec![(state::SERVER_ACL, state::SERVER_ACL), monitor];
            if shape::topology(cache) != Topology::Standalone {
                server.push((state::REPLICATION_CONF, state::REPLICATION_CONF));
            }
            let mut volumes = vec![volume(SERVER, &server)];
            if shape::has_sentinel(cache) {
                volumes.push(volume(
                    SENTINEL,
                    &[(state::SENTINEL_ACL, state::SENTINEL_ACL), (state::SENTINEL_AUTH, state::SENTINEL_AUTH), monitor],
                ));
            }
            if exporter {
                volumes.push(volume(EXPORTER, &[(state::EXPORTER_PASSWORDS, state::EXPORTER_PASSWORDS)]));
            }
            volumes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(volumes: &[Volume], name: &str) -> Vec<(String, String)> {
        let volume = volumes.iter().find(|v| v.name == name).expect("the volume");
        volume.secret.as_ref().and_then(|s| s.items.clone()).unwrap_or_default().into_iter().map(|i| (i.key, i.path)).collect()
    }

    #[test]
    fn a_standalone_server_mounts_its_users_and_the_monitor_password_and_memcached_its_auth_file() {
        let redis = all(&crate::fixtures::cache(Engine::Redis), true);
        assert_eq!(redis.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), [SERVER, EXPORTER], "no Sentinel, no replication");
        assert_eq!(
            files(&redis, SERVER),
            [("users.acl".into(), "users.acl".into()), ("monitor-password".into(), "monitor.password".into())]
        );
        let memcached = all(&crate::fixtures::cache(Engine::Memcached), false);
        assert_eq!(files(&memcached, SERVER)[0], ("memcached.auth".into(), "memcached.auth".into()));
        assert_eq!(all(&crate::fixtures::cache(Engine::Redis), false).len(), 1, "no exporter, no exporter's volume");
    }
}
