//! What the platform team decides once, at install, for the pods of every Cache: the images of
//! each engine and exporter (a registry mirror, a pinned digest), how they are pulled, the CPU
//! the servers ask for, how strictly replicas spread over nodes, whether an exporter runs beside
//! each server, and the user the containers run as.
//!
//! Who besides its clients reaches a Cache's pods, for their NetworkPolicies, is decided here too:
//! whether Blockwork applies them, where the operator runs, where Prometheus scrapes from.
//!
//! They are `blockwork run --cache-*` flags (the chart's `controllers.cache` values). Each is
//! checked when the process starts ([`Settings::from_args`]): a value no pod could run with
//! stops the operator with the flag named, instead of leaving every Cache unable to start.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use regex::Regex;

use crate::access::{Peer, Peers};
use crate::api::Engine;

/// The images the official projects publish, which a cluster with Docker Hub access pulls.
pub const DEFAULT_REDIS_IMAGE: &str = "redis:7.2";
pub const DEFAULT_VALKEY_IMAGE: &str = "valkey/valkey:8.0";
pub const DEFAULT_MEMCACHED_IMAGE: &str = "memcached:1.6";
pub const DEFAULT_REDIS_EXPORTER_IMAGE: &str = "oliver006/redis_exporter:v1.62.0";
pub const DEFAULT_MEMCACHED_EXPORTER_IMAGE: &str = "prom/memcached-exporter:v0.14.4";
/// What each server asks the scheduler for, unless told otherwise: a tenth of a core serves a
/// cache of modest traffic (Redis and memcached are network-bound, and Redis uses one core at
/// most); busier caches set more at install.
pub const DEFAULT_CPU_REQUEST: &str = "100m";

/// The user the official images run their server as: `redis` (999) in Redis' and Valkey's,
/// `memcache` (11211) in memcached's. The pod runs as it, so files the image owns stay readable.
pub fn official_user(engine: Engine) -> i64 {
    match engine {
        Engine::Redis | Engine::Valkey => 999,
        Engine::Memcached => 11211,
    }
}

/// How strictly the replicas of a Cache spread over nodes. Over zones they always spread as far
/// as the nodes are labelled (`topology.kubernetes.io/zone`), never refusing to schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Spread {
    /// The scheduler puts replicas on different nodes when it can, on the same node when it
    /// must (fewer nodes than replicas, the others full).
    #[default]
    Preferred,
    /// Never two replicas of a Cache on one node: a replica without a node of its own stays
    /// Pending, and the Cache says so.
    Required,
}

/// When Kubernetes pulls a Cache's images (spelled as in a pod's `imagePullPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PullPolicy {
    #[value(name = "Always")]
    Always,
    #[value(name = "IfNotPresent")]
    IfNotPresent,
    #[value(name = "Never")]
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// The `--cache-*` flags of `blockwork run` (ids prefixed `cache_`, so they do not clash with the
/// binary's own or another controller's).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct CacheArgs {
    /// Image of engine redis: `[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]`.
    #[arg(id = "cache_redis_image", long = "cache-redis-image", env = "BLOCKWORK_CACHE_REDIS_IMAGE", default_value = DEFAULT_REDIS_IMAGE, value_name = "IMAGE")]
    pub redis_image: String,
    /// Image of engine valkey.
    #[arg(id = "cache_valkey_image", long = "cache-valkey-image", env = "BLOCKWORK_CACHE_VALKEY_IMAGE", default_value = DEFAULT_VALKEY_IMAGE, value_name = "IMAGE")]
    pub valkey_image: String,
    /// Image of engine memcached.
    #[arg(id = "cache_memcached_image", long = "cache-memcached-image", env = "BLOCKWORK_CACHE_MEMCACHED_IMAGE", default_value = DEFAULT_MEMCACHED_IMAGE, value_name = "IMAGE")]
    pub memcached_image: String,
    /// Image of the Prometheus exporter beside redis and valkey servers (`--cache-exporter`).
    #[arg(id = "cache_redis_exporter_image", long = "cache-redis-exporter-image", env = "BLOCKWORK_CACHE_REDIS_EXPORTER_IMAGE", default_value = DEFAULT_REDIS_EXPORTER_IMAGE, value_name = "IMAGE")]
    pub redis_exporter_image: String,
    /// Image of the Prometheus exporter beside memcached servers (`--cache-exporter`).
    #[arg(id = "cache_memcached_exporter_image", long = "cache-memcached-exporter-image", env = "BLOCKWORK_CACHE_MEMCACHED_EXPORTER_IMAGE", default_value = DEFAULT_MEMCACHED_EXPORTER_IMAGE, value_name = "IMAGE")]
    pub memcached_exporter_image: String,
    /// When the images are pulled [default: Kubernetes' own: `Always` for `:latest` or no tag,
    /// else `IfNotPresent`].
    #[arg(
        id = "cache_image_pull_policy",
        long = "cache-image-pull-policy",
        env = "BLOCKWORK_CACHE_IMAGE_PULL_POLICY",
        value_enum,
        value_name = "POLICY"
    )]
    pub image_pull_policy: Option<PullPolicy>,
    /// Secrets the pods pull their images with, comma separated; each must exist in every
    /// namespace that has a Cache (Blockwork never copies a Secret between namespaces).
    #[arg(
        id = "cache_image_pull_secrets",
        long = "cache-image-pull-secrets",
        env = "BLOCKWORK_CACHE_IMAGE_PULL_SECRETS",
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub image_pull_secrets: Vec<String>,
    /// CPU each server container requests (the memory request and limit are the Cache's
    /// `spec.memory`).
    #[arg(id = "cache_cpu_request", long = "cache-cpu-request", env = "BLOCKWORK_CACHE_CPU_REQUEST", default_value = DEFAULT_CPU_REQUEST, value_name = "QUANTITY")]
    pub cpu_request: String,
    /// CPU limit of each server container [default: none, so a busy server is never throttled
    /// while the node has CPU to spare].
    #[arg(id = "cache_cpu_limit", long = "cache-cpu-limit", env = "BLOCKWORK_CACHE_CPU_LIMIT", value_name = "QUANTITY")]
    pub cpu_limit: Option<String>,
    /// How strictly the replicas of a Cache spread over nodes.
    #[arg(id = "cache_node_spread", long = "cache-node-spread", env = "BLOCKWORK_CACHE_NODE_SPREAD", value_enum, default_value_t = Spread::Preferred, value_name = "SPREAD")]
    pub node_spread: Spread,
    /// Run a Prometheus exporter beside every server (port `metrics` of the headless Service:
    /// 9121 for redis and valkey, 9150 for memcached).
    #[arg(id = "cache_exporter", long = "cache-exporter", env = "BLOCKWORK_CACHE_EXPORTER", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub exporter: bool,
    /// The user (and group) every container of a Cache runs as [default: the official image's:
    /// 999 for redis and valkey, 11211 for memcached]. Never 0: the pods are non-root.
    #[arg(id = "cache_run_as_user", long = "cache-run-as-user", env = "BLOCKWORK_CACHE_RUN_AS_USER", value_parser = clap::value_parser!(i64).range(1..=2_147_483_647), value_name = "UID")]
    pub run_as_user: Option<i64>,
    #[command(flatten)]
    pub network: NetworkPolicyArgs,
}

impl Default for CacheArgs {
    fn default() -> Self {
        Self {
            redis_image: DEFAULT_REDIS_IMAGE.to_owned(),
            valkey_image: DEFAULT_VALKEY_IMAGE.to_owned(),
            memcached_image: DEFAULT_MEMCACHED_IMAGE.to_owned(),
            redis_exporter_image: DEFAULT_REDIS_EXPORTER_IMAGE.to_owned(),
            memcached_exporter_image: DEFAULT_MEMCACHED_EXPORTER_IMAGE.to_owned(),
            image_pull_policy: None,
            image_pull_secrets: Vec::new(),
            cpu_request: DEFAULT_CPU_REQUEST.to_owned(),
            cpu_limit: None,
            node_spread: Spread::Preferred,
            exporter: false,
            run_as_user: None,
            network: NetworkPolicyArgs::default(),
        }
    }
}

/// A flag no pod could run with.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{flag} {value:?}: {why}")]
pub struct InvalidSetting {
    pub flag: &'static str,
    pub value: String,
    pub why: &'static str,
}

/// The settings every Cache's pods are built with, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub redis_image: String,
    pub valkey_image: String,
    pub memcached_image: String,
    pub redis_exporter_image: String,
    pub memcached_exporter_image: String,
    pub image_pull_policy: Option<PullPolicy>,
    pub image_pull_secrets: Vec<String>,
    pub cpu_request: Quantity,
    pub cpu_limit: Option<Quantity>,
    pub node_spread: Spread,
    pub exporter: bool,
    pub run_as_user: Option<i64>,
    /// Whom every Cache's NetworkPolicy lets in besides its clients; `None`: no NetworkPolicy.
    pub network_policies: Option<Peers>,
}

impl Default for Settings {
    /// The flags' defaults.
    fn default() -> Self {
        #[allow(clippy::expect_used)]
        Self::from_args(&CacheArgs::default()).expect("the defaults are valid")
    }
}

impl Settings {
    pub fn from_args(args: &CacheArgs) -> Result<Self, InvalidSetting> {
        let image = |flag: &'static str, value: &str| -> Result<String, InvalidSetting> {
            if IMAGE_REFERENCE.is_match(value) {
                Ok(value.to_owned())
            } else {
                Err(InvalidSetting {
                    flag,
                    value: value.to_owned(),
                    why: "not an image reference: [REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST], lowercase repository",
                })
            }
        };
        let cpu = |flag: &'static str, value: &str| -> Result<Quantity, InvalidSetting> {
            if CPU_QUANTITY.is_match(value) && value.chars().any(|c| c.is_ascii_digit() && c != '0') {
                Ok(Quantity(value.to_owned()))
            } else {
                Err(InvalidSetting { flag, value: value.to_owned(), why: "not a positive CPU quantity, e.g. 100m or 0.5 or 2" })
            }
        };
        let secrets = args.image_pull_secrets.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>();
        if let Some(bad) = secrets.iter().find(|s| !DNS_SUBDOMAIN.is_match(s) || s.len() > 253) {
            return Err(InvalidSetting {
                flag: "cache-image-pull-secrets",
                value: bad.clone(),
                why: "not a Secret name (lowercase letters, digits, '-' and '.')",
            });
        }
        Ok(Self {
            redis_image: image("cache-redis-image", &args.redis_image)?,
            valkey_image: image("cache-valkey-image", &args.valkey_image)?,
            memcached_image: image("cache-memcached-image", &args.memcached_image)?,
            redis_exporter_image: image("cache-redis-exporter-image", &args.redis_exporter_image)?,
            memcached_exporter_image: image("cache-memcached-exporter-image", &args.memcached_exporter_image)?,
            image_pull_policy: args.image_pull_policy,
            image_pull_secrets: secrets,
            cpu_request: cpu("cache-cpu-request", &args.cpu_request)?,
            cpu_limit: args.cpu_limit.as_deref().map(|limit| cpu("cache-cpu-limit", limit)).transpose()?,
            node_spread: args.node_spread,
            exporter: args.exporter,
            run_as_user: args.run_as_user,
            network_policies: args.network.peers()?,
        })
    }

    /// The server image of `engine`.
    pub fn image(&self, engine: Engine) -> &str {
        match engine {
            Engine::Redis => &self.redis_image,
            Engine::Valkey => &self.valkey_image,
            Engine::Memcached => &self.memcached_image,
        }
    }

    /// The exporter image beside servers of `engine`.
    pub fn exporter_image(&self, engine: Engine) -> &str {
        match engine {
            Engine::Redis | Engine::Valkey => &self.redis_exporter_image,
            Engine::Memcached => &self.memcached_exporter_image,
        }
    }

    /// The user the containers of a Cache of `engine` run as.
    pub fn user(&self, engine: Engine) -> i64 {
        self.run_as_user.unwrap_or_else(|| official_user(engine))
    }

    /// Every image a Cache may run, by what it is for: what `blockwork check` reports.
    pub fn images(&self) -> [(&'static str, &str); 5] {
        [
            ("redis", &self.redis_image),
            ("valkey", &self.valkey_image),
            ("memcached", &self.memcached_image),
            ("redis exporter", &self.redis_exporter_image),
            ("memcached exporter", &self.memcached_exporter_image),
        ]
    }
}

/// The `--cache-*` flags of the NetworkPolicies (flattened into [`CacheArgs`]).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct NetworkPolicyArgs {
    /// Isolate every Cache's pods with a NetworkPolicy: clients from the Cache's namespace (and
    /// those `spec.access` names) only, plus the operator and the scrapers. Turn off only where
    /// nothing enforces NetworkPolicies; then no policy is applied and none is needed in RBAC.
    #[arg(id = "cache_network_policies", long = "cache-network-policies", env = "BLOCKWORK_CACHE_NETWORK_POLICIES", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub enabled: bool,
    /// The namespace the operator's pods run in (the chart sets the release's).
    #[arg(
        id = "cache_operator_namespace",
        long = "cache-operator-namespace",
        env = "BLOCKWORK_CACHE_OPERATOR_NAMESPACE",
        default_value = "blockwork-system",
        value_name = "NAMESPACE"
    )]
    pub operator_namespace: String,
    /// The labels of the operator's pods, `key=value` comma separated (the chart sets its pods').
    #[arg(
        id = "cache_operator_pod_labels",
        long = "cache-operator-pod-labels",
        env = "BLOCKWORK_CACHE_OPERATOR_POD_LABELS",
        default_value = "app.kubernetes.io/name=blockwork",
        value_name = "LABELS"
    )]
    pub operator_pod_labels: String,
    /// The namespace of the pods that scrape the exporters (`--cache-exporter`)
    /// [default: any namespace].
    #[arg(
        id = "cache_metrics_scraper_namespace",
        long = "cache-metrics-scraper-namespace",
        env = "BLOCKWORK_CACHE_METRICS_SCRAPER_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub scraper_namespace: Option<String>,
    /// The labels of the pods that scrape the exporters, `key=value` comma separated; empty:
    /// every pod of that namespace (Prometheus Operator's pods carry the default).
    #[arg(
        id = "cache_metrics_scraper_pod_labels",
        long = "cache-metrics-scraper-pod-labels",
        env = "BLOCKWORK_CACHE_METRICS_SCRAPER_POD_LABELS",
        default_value = "app.kubernetes.io/name=prometheus",
        value_name = "LABELS"
    )]
    pub scraper_pod_labels: String,
}

impl Default for NetworkPolicyArgs {
    fn default() -> Self {
        Self {
            enabled: true,
            operator_namespace: "blockwork-system".into(),
            operator_pod_labels: "app.kubernetes.io/name=blockwork".into(),
            scraper_namespace: None,
            scraper_pod_labels: "app.kubernetes.io/name=prometheus".into(),
        }
    }
}

impl NetworkPolicyArgs {
    /// The peers every Cache's NetworkPolicy lets in; `None` when NetworkPolicies are off.
    pub fn peers(&self) -> Result<Option<Peers>, InvalidSetting> {
        let operator = Peer {
            namespace: Some(namespace("cache-operator-namespace", &self.operator_namespace)?),
            labels: labels("cache-operator-pod-labels", &self.operator_pod_labels)?,
        };
        let scraper = Peer {
            namespace: self.scraper_namespace.as_deref().map(|name| namespace("cache-metrics-scraper-namespace", name)).transpose()?,
            labels: labels("cache-metrics-scraper-pod-labels", &self.scraper_pod_labels)?,
        };
        Ok(self.enabled.then_some(Peers { operator, scraper }))
    }
}

fn namespace(flag: &'static str, value: &str) -> Result<String, InvalidSetting> {
    if DNS_LABEL.is_match(value) && value.len() <= 63 {
        Ok(value.to_owned())
    } else {
        Err(InvalidSetting { flag, value: value.to_owned(), why: "not a namespace name (a DNS-1123 label)" })
    }
}

/// `key=value,...` as a label map; empty for an empty value.
fn labels(flag: &'static str, value: &str) -> Result<BTreeMap<String, String>, InvalidSetting> {
    let invalid = |why| InvalidSetting { flag, value: value.to_owned(), why };
    let name = |name: &str| LABEL_NAME.is_match(name) && name.len() <= 63;
    let mut labels = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let (key, label) = pair.split_once('=').ok_or_else(|| invalid("not `key=value` pairs, comma separated"))?;
        let key_is_valid = match key.split_once('/') {
            Some((prefix, key_name)) => DNS_SUBDOMAIN.is_match(prefix) && prefix.len() <= 253 && name(key_name),
            None => name(key),
        };
        if !key_is_valid {
            return Err(invalid("a key is not a label key ([PREFIX/]NAME, NAME of at most 63 characters)"));
        }
        if !label.is_empty() && !name(label) {
            return Err(invalid("a value is not a label value (at most 63 letters, digits, '-', '_' or '.')"));
        }
        labels.insert(key.to_owned(), label.to_owned());
    }
    Ok(labels)
}

/// The grammar of an image reference (the distribution project's `reference` package, which
/// containerd and the kubelet parse with): an optional registry host (a dot, a colon or
/// `localhost` tells it from a path component) with an optional port, lowercase path components
/// separated by `/`, an optional tag, an optional digest. Written out here rather than taken
/// from a crate: the crates that parse it bring four proc-macro crates for this one check.
static IMAGE_REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    let component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    let host = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)";
    let tag = r"[\w][\w.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    #[allow(clippy::expect_used)]
    Regex::new(&format!("^(?:{host}/)?{component}(?:/{component})*(?::{tag})?(?:@{digest})?$")).expect("a valid expression")
});

/// A Kubernetes quantity as CPU is written: a decimal number with an optional SI suffix (`m`
/// for thousandths of a core).
static CPU_QUANTITY: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:m|k|M|G)?$").expect("a valid expression")
});

/// A Secret's name, a label key's prefix: a DNS-1123 subdomain.
static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").expect("a valid expression")
});

/// A namespace's name: a DNS-1123 label (of at most 63 characters).
static DNS_LABEL: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("a valid expression")
});

/// A label's value, or its key's name (of at most 63 characters).
static LABEL_NAME: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$").expect("a valid expression")
});

#[cfg(test)]
mod tests {
    use super::*;

    fn with(change: impl FnOnce(&mut CacheArgs)) -> Result<Settings, InvalidSetting> {
        let mut args = CacheArgs::default();
        change(&mut args);
        Settings::from_args(&args)
    }

    #[test]
    fn the_defaults_are_the_official_images() {
        let settings = Settings::default();
        assert_eq!(settings.image(Engine::Redis), "redis:7.2");
        assert_eq!(settings.exporter_image(Engine::Valkey), DEFAULT_REDIS_EXPORTER_IMAGE);
        assert_eq!((settings.user(Engine::Valkey), settings.user(Engine::Memcached)), (999, 11211));
        assert_eq!(settings.cpu_request, Quantity("100m".into()));
        assert!(!settings.exporter);
    }

    #[test]
    fn image_references_with_a_mirror_a_port_or_a_digest_are_taken() {
        for image in [
            "mirror.example.com/library/redis:7.2.5",
            "localhost:5000/cache/valkey@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "registry.internal:443/team/memcached:1.6-alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "localhost/blockwork-node/redis:7.0.15",
            "redis",
        ] {
            assert_eq!(with(|a| a.redis_image = image.into()).map(|s| s.redis_image), Ok(image.to_owned()));
        }
    }

    #[test]
    fn a_value_that_is_no_image_reference_names_its_flag() {
        for image in ["", "Redis:7.2", "redis 7.2", "redis:", "redis@sha256:short", "https://mirror/redis:7"] {
            let error = with(|a| a.memcached_image = image.into()).expect_err(image);
            assert_eq!(error.flag, "cache-memcached-image", "{image}");
        }
    }

    #[test]
    fn cpu_must_be_a_positive_quantity() {
        assert_eq!(with(|a| a.cpu_limit = Some("1.5".into())).map(|s| s.cpu_limit), Ok(Some(Quantity("1.5".into()))));
        for cpu in ["0", "0m", "-1", "100Mi", "lots", ""] {
            let error = with(|a| a.cpu_request = cpu.into()).expect_err(cpu);
            assert_eq!(error.flag, "cache-cpu-request", "{cpu}");
        }
    }

    #[test]
    fn pull_secrets_are_secret_names_and_blanks_are_dropped() {
        assert_eq!(
            with(|a| a.image_pull_secrets = vec!["regcred".into(), " ".into()]).map(|s| s.image_pull_secrets),
            Ok(vec!["regcred".into()])
        );
        assert_eq!(with(|a| a.image_pull_secrets = vec!["Reg_Cred".into()]).expect_err("invalid").flag, "cache-image-pull-secrets");
    }

    #[test]
    fn no_peers_when_network_policies_are_off() {
        assert_eq!(NetworkPolicyArgs { enabled: false, ..NetworkPolicyArgs::default() }.peers(), Ok(None));
    }

    #[test]
    fn peers_set_at_install_are_checked_naming_the_flag() {
        let invalid = |args: NetworkPolicyArgs| args.peers().expect_err("invalid").flag;
        assert_eq!(
            invalid(NetworkPolicyArgs { operator_namespace: "Blockwork".into(), ..NetworkPolicyArgs::default() }),
            "cache-operator-namespace"
        );
        assert_eq!(
            invalid(NetworkPolicyArgs { operator_pod_labels: "app".into(), ..NetworkPolicyArgs::default() }),
            "cache-operator-pod-labels"
        );
        assert_eq!(
            invalid(NetworkPolicyArgs { scraper_pod_labels: "app=pro metheus".into(), ..NetworkPolicyArgs::default() }),
            "cache-metrics-scraper-pod-labels"
        );
        assert_eq!(
            invalid(NetworkPolicyArgs { scraper_namespace: Some("-".into()), ..NetworkPolicyArgs::default() }),
            "cache-metrics-scraper-namespace"
        );
        let labels = NetworkPolicyArgs {
            operator_pod_labels: "app.kubernetes.io/name=blockwork, app.kubernetes.io/instance=ops".into(),
            scraper_pod_labels: String::new(),
            ..NetworkPolicyArgs::default()
        }
        .peers()
        .expect("valid")
        .expect("on");
        let expected: BTreeMap<String, String> =
            [("app.kubernetes.io/name".into(), "blockwork".into()), ("app.kubernetes.io/instance".into(), "ops".into())].into();
        assert_eq!(labels.operator.labels, expected);
        assert!(labels.scraper.labels.is_empty(), "every pod of the scrapers' namespace");
    }

    #[test]
    fn a_user_of_its_own_applies_to_every_engine() {
        let settings = with(|a| a.run_as_user = Some(1001)).expect("valid");
        assert_eq!((settings.user(Engine::Redis), settings.user(Engine::Memcached)), (1001, 1001));
    }
}
