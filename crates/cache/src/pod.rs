//! Pure: the pod every replica of a Cache runs, as the StatefulSet's template.
//!
//! - **Restricted Pod Security.** Non-root (the official image's user, or the one set at
//!   install), no privilege escalation, every capability dropped, the runtime's seccomp profile,
//!   a read-only root file system: the servers write only to the `data` volume. The TLS key is
//!   readable by the pod's group only. No ServiceAccount token: a cache never calls the API.
//! - **Probes that mean something.** Readiness and liveness run the rendered probe script
//!   ([`render::probe_script`]), which asks the server itself (PING, memcached's `version`) and
//!   gives up after two seconds: a hung server leaves the Service within about 10 s and is
//!   restarted within about 35 s (30 s of failed liveness probes, then 5 s to exit). Sentinel
//!   is asked the same way. With Sentinel, a startup probe holds liveness off while a restarted
//!   server waits for a failover ([`crate::replication`]). The exporter has a liveness probe
//!   only: its trouble must never take a serving cache out of the Service.
//! - **Resources.** Memory request = limit = `spec.memory` (a cache evicts within its limit, and
//!   an equal request makes the scheduler reserve it); CPU requested as set at install, and
//!   limited only if set there.
//! - **Spread.** Replicas spread over nodes (preferred, or required at install) and over zones
//!   where the nodes are labelled; the PodDisruptionBudget keeps all but one during drains.

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction,
    LocalObjectReference, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, TCPSocketAction, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::{Cache, Engine};
use crate::auth::users::MONITOR;
use crate::auth::{AUTH_DIR, PodAuth, state, volumes};
use crate::render::{self, PROBE_ANSWER_SECONDS};
use crate::replication;
use crate::settings::{Settings, Spread};
use crate::shape::{self, CONFIG_DIR, DATA_DIR, MEMCACHED_LOOPBACK_PORT, SENTINEL_PORT, TLS_DIR, Topology};

/// The annotation on the pod template whose change rolls the pods: a hash of the ConfigMap.
pub const CONFIG_HASH_ANNOTATION: &str = "cache.blockwork.dev/config-hash";
/// With authentication, the generation of the passwords' Secret the pods mount.
pub const AUTH_GENERATION_ANNOTATION: &str = "cache.blockwork.dev/auth-generation";
/// Sentinel keeps only the topology in memory.
const SENTINEL_MEMORY: &str = "64Mi";
const SIDECAR_CPU: &str = "10m";
/// redis_exporter and memcached_exporter use 10-20 MiB.
const EXPORTER_MEMORY: &str = "48Mi";
/// How long a container that failed its liveness probe is given to exit before it is killed:
/// one that stopped answering for 30 s will not exit cleanly (a stopped process does not even
/// see SIGTERM), and every second of the pod's own 30 s grace period is a second more without
/// the server. A deleted pod still gets the 30 s, which a primary uses to let its replicas
/// catch up.
const HUNG_EXIT_SECONDS: i64 = 5;
/// Beyond the failover wait, for asking the Sentinels (2 s each) and starting the server.
const STARTUP_MARGIN_SECONDS: i32 = 35;

/// Whether an exporter runs beside each server: as set at install, except beside a memcached
/// that authenticates its clients, which memcached_exporter cannot (it has no password).
pub fn runs_exporter(cache: &Cache, settings: &Settings, auth: Option<PodAuth<'_>>) -> bool {
    settings.exporter && !(cache.spec.engine == Engine::Memcached && auth.is_some())
}

/// The pod template of `cache`'s StatefulSet; `config_hash` is the ConfigMap's; `auth` when the
/// servers authenticate their clients.
pub fn template(cache: &Cache, settings: &Settings, config_hash: String, auth: Option<PodAuth<'_>>) -> PodTemplateSpec {
    let engine = cache.spec.engine;
    let user = settings.user(engine);
    let mut containers = vec![server(cache, settings, auth.is_some())];
    if shape::has_sentinel(cache) {
        containers.push(sentinel(cache, settings, auth.is_some()));
    }
    if runs_exporter(cache, settings, auth) {
        containers.push(exporter(cache, settings, auth.is_some()));
    }
    let mut annotations: std::collections::BTreeMap<String, String> = [(CONFIG_HASH_ANNOTATION.to_owned(), config_hash)].into();
    if let Some(auth) = auth {
        annotations.insert(AUTH_GENERATION_ANNOTATION.to_owned(), auth.generation.to_owned());
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(shape::labels(cache)), annotations: Some(annotations), ..ObjectMeta::default() }),
        spec: Some(PodSpec {
            containers,
            volumes: Some(pod_volumes(cache, auth.is_some(), runs_exporter(cache, settings, auth))),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(user),
                run_as_group: Some(user),
                // Group-owns the volumes, so the TLS key needs no world-readable bit.
                fs_group: Some(user),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
                ..PodSecurityContext::default()
            }),
            automount_service_account_token: Some(false),
            // The namespace's Services as environment variables: nothing here reads them.
            enable_service_links: Some(false),
            image_pull_secrets: (!settings.image_pull_secrets.is_empty())
                .then(|| settings.image_pull_secrets.iter().map(|name| LocalObjectReference { name: name.clone() }).collect()),
            topology_spread_constraints: Some(spread(cache, settings.node_spread)),
            ..PodSpec::default()
        }),
    }
}

fn pod_volumes(cache: &Cache, authenticated: bool, exporter: bool) -> Vec<Volume> {
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource { name: shape::config_map_name(cache), ..ConfigMapVolumeSource::default() }),
            ..Volume::default()
        },
        Volume { name: "data".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
    ];
    if let Some(secret) = cache.spec.tls.as_ref().filter(|t| t.enabled).and_then(|t| t.secret_name.clone()) {
        volumes.push(Volume {
            name: "tls".into(),
            // Readable by the pod's group (fsGroup) only.
            secret: Some(SecretVolumeSource { secret_name: Some(secret), default_mode: Some(0o440), ..SecretVolumeSource::default() }),
            ..Volume::default()
        });
    }
    if authenticated {
        volumes.extend(volumes::all(cache, exporter));
    }
    volumes
}

fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount { name: volume.into(), mount_path: path.into(), read_only: read_only.then_some(true), ..VolumeMount::default() }
}

/// The mounts of the server and Sentinel: the rendered files, the data, TLS, and `auth` (the
/// passwords' files of the container's own volume) when clients authenticate.
fn mounts(cache: &Cache, auth: Option<&str>) -> Vec<VolumeMount> {
    let mut mounts = vec![mount("config", CONFIG_DIR, true), mount("data", DATA_DIR, false)];
    if shape::tls_enabled(cache) {
        mounts.push(mount("tls", TLS_DIR, true));
    }
    if let Some(volume) = auth {
        mounts.push(mount(volume, AUTH_DIR, true));
    }
    mounts
}

/// What every container runs with under the restricted Pod Security Standard.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..EnvVar::default() }
}

/// The environment of the server and Sentinel: what the rendered scripts read (where the
/// passwords' files are, never a password).
fn environment(cache: &Cache, authenticated: bool) -> Vec<EnvVar> {
    let (server, cli) = match cache.spec.engine {
        Engine::Redis => ("redis-server", "redis-cli"),
        Engine::Valkey => ("valkey-server", "valkey-cli"),
        Engine::Memcached => ("memcached", ""),
    };
    let mut environment = vec![
        EnvVar {
            name: "POD_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), ..ObjectFieldSelector::default() }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        env("CACHE_NAME", cache.name_any()),
        env("CACHE_SERVER", server),
        env("CACHE_CLI", cli),
        env("CACHE_CONFIG_DIR", CONFIG_DIR),
        env("CACHE_DATA_DIR", DATA_DIR),
    ];
    if authenticated {
        environment.push(env("CACHE_AUTH_DIR", AUTH_DIR));
    }
    let port = shape::port(cache.spec.engine).to_string();
    if let Topology::Replicated { sentinel } = shape::topology(cache) {
        environment.extend([
            env("CACHE_PRIMARY_HOST", shape::pod_host(cache, 0)),
            env("CACHE_PRIMARY_PORT", port.clone()),
            // Kubernetes expands $(POD_NAME) from the variable above.
            env("CACHE_ANNOUNCE_HOST", format!("$(POD_NAME).{}", shape::pod_domain(cache))),
        ]);
        if sentinel {
            // Every pod's Sentinel, by the pod's stable name: a starting pod asks them all which
            // server is the primary (the Service would pick one, and only among ready pods).
            let sentinels: Vec<String> =
                (0..cache.spec.replicas).map(|i| format!("{}:{SENTINEL_PORT}", shape::pod_host(cache, i))).collect();
            environment.extend([
                env("CACHE_PORT", port),
                env("CACHE_SENTINEL_PORT", SENTINEL_PORT.to_string()),
                env("CACHE_SENTINELS", sentinels.join(" ")),
            ]);
        }
    }
    environment
}

/// `sh probe.sh QUESTION`: the kubelet waits a second longer than the script does, so the
/// script's own message, not a bare timeout, is what the pod's events show.
fn probe(question: &str, period: i32, failures: i32) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["sh".into(), format!("{CONFIG_DIR}/{}", render::PROBE_SCRIPT), question.into()]) }),
        period_seconds: Some(period),
        timeout_seconds: Some(PROBE_ANSWER_SECONDS + 1),
        failure_threshold: Some(failures),
        success_threshold: Some(1),
        ..Probe::default()
    }
}

/// Out of the Service after two unanswered questions 5 s apart.
fn readiness(question: &str) -> Option<Probe> {
    Some(probe(question, 5, 2))
}

/// Restarted after three unanswered questions 10 s apart, given [`HUNG_EXIT_SECONDS`] to exit.
fn liveness(question: &str) -> Option<Probe> {
    Some(Probe { termination_grace_period_seconds: Some(HUNG_EXIT_SECONDS), ..probe(question, 10, 3) })
}

/// With Sentinel, a starting server may wait for a failover before it serves
/// ([`replication::FAILOVER_WAIT_SECONDS`]): liveness counts only once it answers.
fn startup(cache: &Cache) -> Option<Probe> {
    let period = 2;
    shape::has_sentinel(cache)
        .then(|| probe("alive", period, (replication::FAILOVER_WAIT_SECONDS as i32 + STARTUP_MARGIN_SECONDS) / period))
}

fn resources(cpu_request: &Quantity, cpu_limit: Option<&Quantity>, memory: &str) -> ResourceRequirements {
    let memory = Quantity(memory.to_owned());
    let mut limits = vec![("memory".to_owned(), memory.clone())];
    limits.extend(cpu_limit.map(|cpu| ("cpu".to_owned(), cpu.clone())));
    ResourceRequirements {
        limits: Some(limits.into_iter().collect()),
        requests: Some([("cpu".to_owned(), cpu_request.clone()), ("memory".to_owned(), memory)].into()),
        ..ResourceRequirements::default()
    }
}

fn port(name: &str, number: i32) -> Option<Vec<ContainerPort>> {
    Some(vec![ContainerPort { name: Some(name.into()), container_port: number, ..ContainerPort::default() }])
}

fn server(cache: &Cache, settings: &Settings, authenticated: bool) -> Container {
    let command = match cache.spec.engine {
        Engine::Memcached if !authenticated => {
            vec!["sh".to_owned(), "-c".to_owned(), format!("exec memcached $(cat {CONFIG_DIR}/memcached.args)")]
        }
        // With authentication memcached's start script also reloads its auth file.
        _ => vec!["sh".to_owned(), format!("{CONFIG_DIR}/start.sh")],
    };
    Container {
        name: "cache".into(),
        image: Some(settings.image(cache.spec.engine).to_owned()),
        image_pull_policy: settings.image_pull_policy.map(|p| p.as_str().to_owned()),
        command: Some(command),
        env: Some(environment(cache, authenticated)),
        ports: port("cache", shape::port(cache.spec.engine)),
        readiness_probe: readiness("ready"),
        liveness_probe: liveness("alive"),
        startup_probe: startup(cache),
        resources: Some(resources(&settings.cpu_request, settings.cpu_limit.as_ref(), &cache.spec.memory)),
        security_context: Some(restricted()),
        volume_mounts: Some(mounts(cache, authenticated.then_some(volumes::SERVER))),
        ..Container::default()
    }
}

fn sentinel(cache: &Cache, settings: &Settings, authenticated: bool) -> Container {
    Container {
        name: "sentinel".into(),
        image: Some(settings.image(cache.spec.engine).to_owned()),
        image_pull_policy: settings.image_pull_policy.map(|p| p.as_str().to_owned()),
        command: Some(vec!["sh".to_owned(), format!("{CONFIG_DIR}/sentinel.sh")]),
        env: Some(environment(cache, authenticated)),
        ports: port("sentinel", SENTINEL_PORT),
        readiness_probe: readiness("sentinel"),
        liveness_probe: liveness("sentinel"),
        resources: Some(resources(&Quantity(SIDECAR_CPU.into()), None, SENTINEL_MEMORY)),
        security_context: Some(restricted()),
        volume_mounts: Some(mounts(cache, authenticated.then_some(volumes::SENTINEL))),
        ..Container::default()
    }
}

/// The Prometheus exporter beside the server, scraping it over loopback (memcached's plain
/// loopback listener with TLS; redis over TLS without verifying, as the probes do; as `monitor`,
/// its password from its password file, when clients authenticate).
fn exporter(cache: &Cache, settings: &Settings, authenticated: bool) -> Container {
    let engine = cache.spec.engine;
    let listen = format!("--web.listen-address=:{}", shape::exporter_port(engine));
    let mut args = match engine {
        Engine::Redis | Engine::Valkey if shape::tls_enabled(cache) => {
            vec![format!("--redis.addr=rediss://127.0.0.1:{}", shape::port(engine)), "--skip-tls-verification".into(), listen]
        }
        Engine::Redis | Engine::Valkey => vec![format!("--redis.addr=redis://127.0.0.1:{}", shape::port(engine)), listen],
        Engine::Memcached => {
            let port = if shape::tls_enabled(cache) { MEMCACHED_LOOPBACK_PORT } else { shape::port(engine) };
            vec![format!("--memcached.address=127.0.0.1:{port}"), listen]
        }
    };
    if authenticated {
        args.extend([format!("--redis.user={MONITOR}"), format!("--redis.password-file={AUTH_DIR}/{}", state::EXPORTER_PASSWORDS)]);
    }
    Container {
        name: "exporter".into(),
        image: Some(settings.exporter_image(engine).to_owned()),
        image_pull_policy: settings.image_pull_policy.map(|p| p.as_str().to_owned()),
        args: Some(args),
        ports: port("metrics", shape::exporter_port(engine)),
        // No readiness probe: the exporter's trouble must not take the cache out of the Service.
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::String("metrics".into()), ..TCPSocketAction::default() }),
            period_seconds: Some(10),
            timeout_seconds: Some(PROBE_ANSWER_SECONDS + 1),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        resources: Some(resources(&Quantity(SIDECAR_CPU.into()), None, EXPORTER_MEMORY)),
        security_context: Some(restricted()),
        volume_mounts: authenticated.then(|| vec![mount(volumes::EXPORTER, AUTH_DIR, true)]),
        ..Container::default()
    }
}

/// One replica per node (preferred or required, as set at install) and per zone where nodes are
/// labelled with one (preferred: a node without the label is still a place to run).
fn spread(cache: &Cache, nodes: Spread) -> Vec<TopologySpreadConstraint> {
    let constraint = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        label_selector: Some(LabelSelector { match_labels: Some(shape::selector(cache)), ..LabelSelector::default() }),
        ..TopologySpreadConstraint::default()
    };
    let on_nodes = match nodes {
        Spread::Preferred => "ScheduleAnyway",
        Spread::Required => "DoNotSchedule",
    };
    vec![constraint("kubernetes.io/hostname", on_nodes), constraint("topology.kubernetes.io/zone", "ScheduleAnyway")]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HighAvailability, Tls};
    use crate::settings::CacheArgs;

    fn cache(engine: Engine, replicas: i32) -> Cache {
        let mut cache = crate::fixtures::cache(engine);
        cache.spec.memory = "512Mi".into();
        cache.spec.replicas = replicas;
        cache
    }

    fn ha(engine: Engine) -> Cache {
        let mut c = cache(engine, 3);
        c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
        c
    }

    fn pod(cache: &Cache, settings: &Settings) -> PodSpec {
        template(cache, settings, "hash".into(), None).spec.expect("a pod")
    }

    fn settings(change: impl FnOnce(&mut CacheArgs)) -> Settings {
        let mut args = CacheArgs::default();
        change(&mut args);
        Settings::from_args(&args).expect("valid")
    }

    fn env_value(container: &Container, name: &str) -> Option<String> {
        container.env.as_ref()?.iter().find(|e| e.name == name)?.value.clone()
    }

    #[test]
    fn every_container_runs_as_the_restricted_standard_asks() {
        let settings = settings(|a| a.exporter = true);
        for engine in [Engine::Redis, Engine::Valkey, Engine::Memcached] {
            let pod = pod(&if engine == Engine::Memcached { cache(engine, 2) } else { ha(engine) }, &settings);
            let security = pod.security_context.as_ref().expect("a pod security context");
            assert_eq!(security.run_as_non_root, Some(true));
            assert_eq!(security.seccomp_profile.as_ref().map(|s| s.type_.as_str()), Some("RuntimeDefault"));
            assert!(security.run_as_user.is_some_and(|uid| uid > 0));
            for container in &pod.containers {
                assert_eq!(container.security_context, Some(restricted()), "{engine:?}/{}", container.name);
            }
            assert_eq!(pod.automount_service_account_token, Some(false));
        }
    }

    #[test]
    fn the_pods_run_as_the_official_images_users_unless_told_otherwise() {
        let uid = |engine, settings: &Settings| pod(&cache(engine, 1), settings).security_context.and_then(|s| s.run_as_user);
        assert_eq!(uid(Engine::Redis, &Settings::default()), Some(999));
        assert_eq!(uid(Engine::Memcached, &Settings::default()), Some(11211));
        assert_eq!(uid(Engine::Memcached, &settings(|a| a.run_as_user = Some(1001))), Some(1001));
    }

    #[test]
    fn the_only_writable_place_is_the_data_volume() {
        let server = &pod(&cache(Engine::Redis, 1), &Settings::default()).containers[0];
        let writable: Vec<&str> =
            server.volume_mounts.iter().flatten().filter(|m| m.read_only != Some(true)).map(|m| m.mount_path.as_str()).collect();
        assert_eq!(writable, [DATA_DIR]);
        assert_eq!(server.security_context.as_ref().and_then(|s| s.read_only_root_filesystem), Some(true));
    }

    #[test]
    fn the_tls_key_is_readable_by_the_pod_s_group_only() {
        let mut c = cache(Engine::Redis, 1);
        c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        let pod = pod(&c, &Settings::default());
        let secret = pod.volumes.iter().flatten().find_map(|v| v.secret.clone()).expect("the TLS volume");
        assert_eq!((secret.secret_name.as_deref(), secret.default_mode), (Some("s"), Some(0o440)));
        assert_eq!(pod.security_context.and_then(|s| s.fs_group), Some(999));
    }

    #[test]
    fn servers_and_sentinels_are_probed_by_the_rendered_script() {
        let pod = pod(&ha(Engine::Valkey), &Settings::default());
        let command = |probe: &Option<Probe>| probe.as_ref().and_then(|p| p.exec.as_ref()).and_then(|e| e.command.clone()).expect("exec");
        let (server, sentinel) = (&pod.containers[0], &pod.containers[1]);
        assert_eq!(command(&server.readiness_probe), ["sh", "/etc/blockwork-cache/probe.sh", "ready"]);
        assert_eq!(command(&server.liveness_probe), ["sh", "/etc/blockwork-cache/probe.sh", "alive"]);
        assert_eq!(command(&sentinel.readiness_probe), ["sh", "/etc/blockwork-cache/probe.sh", "sentinel"]);
        let ready = server.readiness_probe.clone().expect("readiness");
        assert_eq!((ready.period_seconds, ready.failure_threshold, ready.timeout_seconds), (Some(5), Some(2), Some(3)));
        assert_eq!(env_value(sentinel, "CACHE_CLI").as_deref(), Some("valkey-cli"));
    }

    #[test]
    fn a_hung_server_is_given_five_seconds_to_exit_not_the_pod_s_thirty() {
        let pod = pod(&ha(Engine::Redis), &Settings::default());
        for container in &pod.containers {
            let liveness = container.liveness_probe.as_ref().expect("liveness");
            assert_eq!(liveness.termination_grace_period_seconds, Some(5), "{}", container.name);
        }
        assert_eq!(pod.termination_grace_period_seconds, None, "a deleted pod keeps the default 30 s");
    }

    #[test]
    fn with_sentinel_liveness_waits_for_a_server_that_waits_for_a_failover() {
        let server = pod(&ha(Engine::Redis), &Settings::default()).containers.remove(0);
        let startup = server.startup_probe.expect("a startup probe");
        let allowed = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
        assert!(allowed as u32 > replication::FAILOVER_WAIT_SECONDS + 30, "{allowed} s");
        assert_eq!(pod(&cache(Engine::Redis, 3), &Settings::default()).containers[0].startup_probe, None);
    }

    #[test]
    fn with_sentinel_a_pod_knows_every_pod_s_sentinel_by_its_stable_name() {
        let server = pod(&ha(Engine::Redis), &Settings::default()).containers.remove(0);
        assert_eq!(
            env_value(&server, "CACHE_SENTINELS").as_deref(),
            Some(
                "c-cache-0.c-cache-headless.ns.svc.cluster.local:26379 c-cache-1.c-cache-headless.ns.svc.cluster.local:26379 c-cache-2.c-cache-headless.ns.svc.cluster.local:26379"
            )
        );
        assert_eq!(env_value(&server, "CACHE_PORT").as_deref(), Some("6379"));
    }

    #[test]
    fn memory_is_requested_and_limited_as_the_spec_says_and_cpu_as_set_at_install() {
        let server = &pod(&cache(Engine::Memcached, 1), &Settings::default()).containers[0];
        let resources = server.resources.clone().expect("resources");
        let (requests, limits) = (resources.requests.expect("requests"), resources.limits.expect("limits"));
        assert_eq!((requests["memory"].0.as_str(), limits["memory"].0.as_str()), ("512Mi", "512Mi"));
        assert_eq!(requests["cpu"].0, "100m");
        assert!(!limits.contains_key("cpu"), "no CPU limit unless set at install");
        let limited = &pod(&cache(Engine::Memcached, 1), &settings(|a| a.cpu_limit = Some("2".into()))).containers[0];
        assert_eq!(limited.resources.as_ref().and_then(|r| r.limits.as_ref()).map(|l| l["cpu"].0.as_str()), Some("2"));
    }

    #[test]
    fn replicas_spread_over_nodes_and_zones() {
        let constraints = |settings: &Settings| pod(&ha(Engine::Redis), settings).topology_spread_constraints.expect("constraints");
        let preferred = constraints(&Settings::default());
        let keys: Vec<(&str, &str)> = preferred.iter().map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str())).collect();
        assert_eq!(keys, [("kubernetes.io/hostname", "ScheduleAnyway"), ("topology.kubernetes.io/zone", "ScheduleAnyway")]);
        assert_eq!(preferred[0].label_selector.as_ref().and_then(|s| s.match_labels.clone()), Some(shape::selector(&ha(Engine::Redis))));
        let required = constraints(&settings(|a| a.node_spread = Spread::Required));
        assert_eq!(required[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!(required[1].when_unsatisfiable, "ScheduleAnyway", "nodes without a zone label still take replicas");
    }

    #[test]
    fn images_pull_policy_and_pull_secrets_come_from_the_settings() {
        let settings = settings(|a| {
            a.valkey_image = "mirror.example.com/valkey@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into();
            a.image_pull_policy = Some(crate::settings::PullPolicy::Always);
            a.image_pull_secrets = vec!["mirror".into()];
            a.exporter = true;
        });
        let pod = pod(&ha(Engine::Valkey), &settings);
        let images: Vec<&str> = pod.containers.iter().filter_map(|c| c.image.as_deref()).collect();
        assert_eq!(images, [settings.valkey_image.as_str(), settings.valkey_image.as_str(), settings.redis_exporter_image.as_str()]);
        assert!(pod.containers.iter().all(|c| c.image_pull_policy.as_deref() == Some("Always")));
        assert_eq!(pod.image_pull_secrets, Some(vec![LocalObjectReference { name: "mirror".into() }]));
        assert_eq!(
            template(&cache(Engine::Redis, 1), &Settings::default(), String::new(), None).spec.and_then(|s| s.image_pull_secrets),
            None
        );
    }

    #[test]
    fn the_exporter_scrapes_its_server_over_loopback_and_has_no_readiness_probe() {
        let settings = settings(|a| a.exporter = true);
        let mut memcached = cache(Engine::Memcached, 1);
        memcached.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
        let exporter = pod(&memcached, &settings).containers.pop().expect("the exporter");
        assert_eq!(exporter.args, Some(vec!["--memcached.address=127.0.0.1:11212".into(), "--web.listen-address=:9150".into()]));
        assert_eq!(exporter.readiness_probe, None);
        assert!(exporter.liveness_probe.is_some());
        let redis = pod(&cache(Engine::Redis, 1), &settings).containers.pop().expect("the exporter");
        assert_eq!(redis.args.as_ref().map(|a| a[0].as_str()), Some("--redis.addr=redis://127.0.0.1:6379"));
        assert_eq!(pod(&cache(Engine::Redis, 1), &Settings::default()).containers.len(), 1, "no exporter unless set at install");
    }

    #[test]
    fn replicas_find_the_primary_through_the_headless_service() {
        let mut c = ha(Engine::Redis);
        c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: false });
        let pod = pod(&c, &Settings::default());
        let server = &pod.containers[0];
        assert_eq!(env_value(server, "CACHE_PRIMARY_HOST").as_deref(), Some("c-cache-0.c-cache-headless.ns.svc.cluster.local"));
        assert_eq!(env_value(server, "CACHE_ANNOUNCE_HOST").as_deref(), Some("$(POD_NAME).c-cache-headless.ns.svc.cluster.local"));
        assert_eq!(pod.containers.len(), 1, "no Sentinel without autoFailover");
        assert_eq!(
            env_value(
                &template(&cache(Engine::Redis, 2), &Settings::default(), String::new(), None).spec.expect("a pod").containers[0],
                "CACHE_PRIMARY_HOST"
            ),
            None
        );
    }

    fn authenticated(cache: &Cache, settings: &Settings) -> PodSpec {
        template(cache, settings, "hash".into(), Some(PodAuth { generation: "g1" })).spec.expect("a pod")
    }

    fn mounted(container: &Container) -> Vec<(String, String)> {
        container.volume_mounts.iter().flatten().map(|m| (m.name.clone(), m.mount_path.clone())).collect()
    }

    fn files(pod: &PodSpec, volume: &str) -> Vec<String> {
        let volume = pod.volumes.iter().flatten().find(|v| v.name == volume).expect("the volume");
        volume.secret.as_ref().and_then(|s| s.items.clone()).unwrap_or_default().into_iter().map(|item| item.path).collect()
    }

    #[test]
    fn each_container_mounts_only_the_password_files_it_reads() {
        let pod = authenticated(&ha(Engine::Redis), &settings(|a| a.exporter = true));
        let auth = ("auth".to_owned(), AUTH_DIR.to_owned());
        assert!(mounted(&pod.containers[0]).contains(&auth));
        assert_eq!(files(&pod, "auth"), ["users.acl", "monitor.password", "replication.conf"]);
        assert!(mounted(&pod.containers[1]).contains(&("sentinel-auth".to_owned(), AUTH_DIR.to_owned())));
        assert_eq!(files(&pod, "sentinel-auth"), ["sentinel-users.acl", "sentinel-auth.conf", "monitor.password"]);
        assert_eq!(mounted(&pod.containers[2]), [("exporter-auth".to_owned(), AUTH_DIR.to_owned())]);
        assert_eq!(files(&pod, "exporter-auth"), ["exporter-passwords.json"]);
        let secret = pod.volumes.iter().flatten().find(|v| v.name == "auth").and_then(|v| v.secret.clone()).expect("a Secret");
        assert_eq!((secret.secret_name.as_deref(), secret.default_mode), (Some("c-cache-auth"), Some(0o440)));
    }

    #[test]
    fn no_password_is_in_the_pod_spec_only_where_its_files_are() {
        let pod = authenticated(&ha(Engine::Valkey), &settings(|a| a.exporter = true));
        let server = &pod.containers[0];
        assert_eq!(env_value(server, "CACHE_AUTH_DIR").as_deref(), Some(AUTH_DIR));
        assert!(pod.containers.iter().flat_map(|c| c.env.iter().flatten()).all(|e| e.value_from.is_none() || e.name == "POD_NAME"));
        let exporter = pod.containers.last().expect("the exporter");
        assert!(
            exporter.args.as_ref().is_some_and(|a| a.contains(&"--redis.user=monitor".to_owned())
                && a.contains(&format!("--redis.password-file={AUTH_DIR}/exporter-passwords.json"))),
            "{:?}",
            exporter.args
        );
    }

    #[test]
    fn an_authenticated_memcached_runs_its_start_script_and_no_exporter() {
        let pod = authenticated(&cache(Engine::Memcached, 1), &settings(|a| a.exporter = true));
        assert_eq!(pod.containers.len(), 1, "memcached_exporter cannot authenticate");
        assert_eq!(pod.containers[0].command, Some(vec!["sh".to_owned(), "/etc/blockwork-cache/start.sh".to_owned()]));
        assert_eq!(files(&pod, "auth"), ["memcached.auth", "monitor.password"]);
    }

    #[test]
    fn the_pods_carry_the_generation_of_the_passwords_secret() {
        let template = template(&cache(Engine::Redis, 1), &Settings::default(), "hash".into(), Some(PodAuth { generation: "g1" }));
        assert_eq!(template.metadata.and_then(|m| m.annotations).expect("annotations")[AUTH_GENERATION_ANNOTATION], "g1");
    }
}
