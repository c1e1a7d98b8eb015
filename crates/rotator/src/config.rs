//! What the rotator is told at start-up: the annotation prefix, the namespaces it watches and
//! a few limits; and the annotation keys derived from the prefix.

use std::collections::BTreeMap;
use std::time::Duration;

use blockwork_runtime::policy::{self, AnnotationError};

/// The annotation prefix of the original k8s-tls-rotator, and the default.
pub const DEFAULT_ANNOTATION_PREFIX: &str = "rotator.gw.ei.telekom.de";

/// `reportingController` of the rotator's Events, and its field manager.
pub const CONTROLLER_NAME: &str = "blockwork-rotator";

/// The `app.kubernetes.io/managed-by` value the rotator wrote on its targets before every
/// Blockwork controller wrote the one value `blockwork` (`blockwork_runtime::labels`): targets
/// labelled so are still the rotator's, and get the new value at their next write.
pub const LEGACY_MANAGED_BY: &str = "blockwork-rotator";

/// Default upper bound of targets with their own last-rotation time series.
pub const DEFAULT_MAX_TRACKED_TARGETS: usize = 1000;

/// Flags and environment variables of the rotator, to flatten into the binary's `run` arguments
/// (argument ids are prefixed `rotator_`, so they do not clash with the binary's own).
///
/// `ROTATOR_NAMESPACES` (or `--rotator-namespaces`) wins over the binary's `--namespaces`; see
/// [`resolve_namespaces`].
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct RotatorArgs {
    /// Prefix of the rotator's annotations (`<prefix>/source-secret`, ...).
    #[arg(id = "rotator_annotation_prefix", long = "rotator-annotation-prefix", env = "ROTATOR_ANNOTATION_PREFIX", default_value = DEFAULT_ANNOTATION_PREFIX, value_name = "PREFIX")]
    pub annotation_prefix: String,

    /// Namespaces the rotator watches, comma separated; wins over `--namespaces` [default: those
    /// of `--namespaces`, else all].
    #[arg(
        id = "rotator_namespaces",
        long = "rotator-namespaces",
        env = "ROTATOR_NAMESPACES",
        value_delimiter = ',',
        value_name = "NAMESPACES"
    )]
    pub namespaces: Vec<String>,

    /// Most targets that get their own `last_rotation_timestamp_seconds` series; the rest are
    /// counted in `targets_not_tracked`.
    #[arg(id = "rotator_max_tracked_targets", long = "rotator-max-tracked-targets", env = "ROTATOR_MAX_TRACKED_TARGETS", default_value_t = DEFAULT_MAX_TRACKED_TARGETS, value_name = "N")]
    pub max_tracked_targets: usize,
}

impl Default for RotatorArgs {
    fn default() -> Self {
        Self {
            annotation_prefix: DEFAULT_ANNOTATION_PREFIX.to_owned(),
            namespaces: Vec::new(),
            max_tracked_targets: DEFAULT_MAX_TRACKED_TARGETS,
        }
    }
}

impl RotatorArgs {
    /// The arguments from the environment alone (`ROTATOR_ANNOTATION_PREFIX`,
    /// `ROTATOR_NAMESPACES`, `ROTATOR_MAX_TRACKED_TARGETS`), for a caller that has no flags.
    pub fn from_env() -> Result<Self, ConfigError> {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            args: RotatorArgs,
        }
        Only::try_parse_from(["rotator"]).map(|only| only.args).map_err(|e| ConfigError(e.to_string()))
    }
}

/// The namespaces to watch: the rotator's own list (`ROTATOR_NAMESPACES`) if it names any,
/// else the binary's `--namespaces`, else `None` for all namespaces. Blank entries are ignored.
pub fn resolve_namespaces(rotator: &[String], global: &[String]) -> Option<Vec<String>> {
    let clean = |list: &[String]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for ns in list.iter().map(|ns| ns.trim()).filter(|ns| !ns.is_empty()) {
            if !out.iter().any(|o| o == ns) {
                out.push(ns.to_owned());
            }
        }
        out
    };
    let own = clean(rotator);
    if !own.is_empty() {
        return Some(own);
    }
    let global = clean(global);
    if global.is_empty() { None } else { Some(global) }
}

/// A configuration the rotator refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid rotator configuration: {0}")]
pub struct ConfigError(pub String);

/// Everything [`crate::run`] needs besides the client, metrics and shutdown signal.
#[derive(Clone, Debug)]
pub struct Config {
    /// Annotation keys, from the prefix.
    pub keys: Keys,
    /// `None`: all namespaces (one cluster-wide watch); else one watch per namespace.
    pub namespaces: Option<Vec<String>>,
    /// Most reconciles at once per watch.
    pub concurrency: u16,
    /// See [`RotatorArgs::max_tracked_targets`].
    pub max_tracked_targets: usize,
    /// How soon a source whose target belongs to another source is looked at again (it may take
    /// the target over once the other source is gone).
    pub conflict_requeue: Duration,
    /// How soon a failed reconcile is retried (doubling up to 5 minutes per source).
    pub error_requeue: Duration,
    /// `reportingController` of the rotator's events.
    pub reporter: String,
}

impl Config {
    /// From the rotator's arguments and the binary's `--namespaces` (see [`resolve_namespaces`]).
    pub fn new(args: &RotatorArgs, global_namespaces: &[String], concurrency: u16) -> Result<Self, ConfigError> {
        if args.max_tracked_targets == 0 {
            return Err(ConfigError("--rotator-max-tracked-targets must be at least 1".into()));
        }
        Ok(Self {
            keys: Keys::new(&args.annotation_prefix)?,
            namespaces: resolve_namespaces(&args.namespaces, global_namespaces),
            concurrency: concurrency.max(1),
            max_tracked_targets: args.max_tracked_targets,
            conflict_requeue: Duration::from_secs(300),
            error_requeue: Duration::from_secs(2),
            reporter: CONTROLLER_NAME.to_owned(),
        })
    }
}

/// The annotation keys under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub prefix: String,
    /// On a source: `"true"` marks it (seed: `source-secret`).
    pub source: String,
    /// On a source: the target's name (seed: `destination-secret-name`).
    pub destination: String,
    /// On a source: `"true"` adds `jwks.json` to the target.
    pub jwks: String,
    /// On an existing Secret: `"true"` lets the rotator take it over as a target.
    pub adopt: String,
    /// The finalizer the original operator put on sources; removed when seen.
    pub legacy_finalizer: String,
    /// On a target: the source it is rotated from (the ownership claim).
    pub source_name: String,
    /// On a target: the source's resourceVersion at the last write.
    pub source_resource_version: String,
    /// On a target: SHA-256 (hex) of `next-tls.crt` as the rotator last wrote it.
    pub next_cert_sha256: String,
    /// On a target: RFC 3339 time of the last rotation (or of the creation).
    pub last_rotation_time: String,
    /// On a target: rotations made by the rotator.
    pub rotations: String,
}

impl Keys {
    /// Keys under `prefix` (a DNS subdomain, like `rotator.gw.ei.telekom.de`; a trailing `/` is
    /// ignored).
    pub fn new(prefix: &str) -> Result<Self, ConfigError> {
        let prefix = prefix.trim().trim_end_matches('/');
        if !is_dns_subdomain(prefix) {
            return Err(ConfigError(format!("annotation prefix `{prefix}` is not a DNS subdomain (like rotator.gw.ei.telekom.de)")));
        }
        let key = |name: &str| format!("{prefix}/{name}");
        Ok(Self {
            prefix: prefix.to_owned(),
            source: key("source-secret"),
            destination: key("destination-secret-name"),
            jwks: key("jwks"),
            adopt: key("adopt"),
            legacy_finalizer: key("finalizer"),
            source_name: key("source"),
            source_resource_version: key("source-resource-version"),
            next_cert_sha256: key("next-cert-sha256"),
            last_rotation_time: key("last-rotation-time"),
            rotations: key("rotations"),
        })
    }

    /// Whether annotations mark a source: `source-secret` is `true`. Yes/no annotations follow
    /// the rule of every Blockwork annotation (`blockwork_runtime::policy`): `true` or `false`,
    /// any case, surrounding spaces ignored. (The original compares with exactly `"true"`, so it
    /// silently ignores `"True"`.)
    pub fn is_source(&self, annotations: &BTreeMap<String, String>) -> bool {
        matches!(self.flag(annotations, &self.source), Ok(true))
    }

    /// A yes/no annotation (`source-secret`, `jwks`, `adopt`); absent is `false`.
    pub fn flag(&self, annotations: &BTreeMap<String, String>, key: &str) -> Result<bool, AnnotationError> {
        annotations.get(key).map(|value| policy::parse_flag(key, value)).transpose().map(Option::unwrap_or_default)
    }

    /// Every annotation under the prefix is one the rotator knows, and each yes/no annotation is
    /// `true` or `false`. The first that is not, as an error naming what is accepted.
    pub fn check(&self, annotations: &BTreeMap<String, String>) -> Result<(), AnnotationError> {
        let known = [
            &self.source,
            &self.destination,
            &self.jwks,
            &self.adopt,
            &self.source_name,
            &self.source_resource_version,
            &self.next_cert_sha256,
            &self.last_rotation_time,
            &self.rotations,
        ]
        .map(String::as_str);
        // `blockwork retry` requests a reconcile of a source with the runtime's annotation: known
        // too when the rotator's prefix is `blockwork.dev`.
        let known: Vec<&str> = known.into_iter().chain([policy::RECONCILE_REQUESTED_ANNOTATION]).collect();
        policy::unknown_annotation(annotations, &format!("{}/", self.prefix), &known)?;
        for flag in [&self.source, &self.jwks, &self.adopt] {
            self.flag(annotations, flag)?;
        }
        Ok(())
    }

    /// The source a target names (non-empty), if any.
    pub fn claimed_by<'a>(&self, annotations: &'a BTreeMap<String, String>) -> Option<&'a str> {
        annotations.get(&self.source_name).map(String::as_str).filter(|s| !s.is_empty())
    }
}

impl Default for Keys {
    fn default() -> Self {
        // The default prefix is a valid subdomain.
        Self::new(DEFAULT_ANNOTATION_PREFIX).unwrap_or_else(|_| unreachable_default())
    }
}

#[allow(clippy::panic)]
fn unreachable_default() -> Keys {
    panic!("the default annotation prefix is valid")
}

/// RFC 1123 subdomain: what Kubernetes accepts as a Secret name or an annotation prefix.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn rotator_namespaces_win_over_the_global_flag() {
        assert_eq!(resolve_namespaces(&strings(&["a", "b"]), &strings(&["x"])), Some(strings(&["a", "b"])));
        assert_eq!(resolve_namespaces(&[], &strings(&["x", "y"])), Some(strings(&["x", "y"])));
        assert_eq!(resolve_namespaces(&strings(&[""]), &strings(&["x"])), Some(strings(&["x"])), "an empty variable is unset");
        assert_eq!(resolve_namespaces(&[], &[]), None, "all namespaces when neither is set");
        assert_eq!(resolve_namespaces(&strings(&[" a ", "a", ""]), &[]), Some(strings(&["a"])));
    }

    #[test]
    fn keys_follow_the_prefix() {
        let keys = Keys::default();
        assert_eq!(keys.source, "rotator.gw.ei.telekom.de/source-secret");
        assert_eq!(keys.destination, "rotator.gw.ei.telekom.de/destination-secret-name");
        assert_eq!(keys.legacy_finalizer, "rotator.gw.ei.telekom.de/finalizer");
        let custom = Keys::new("keys.example.com/").unwrap();
        assert_eq!(custom.source, "keys.example.com/source-secret");
        assert!(Keys::new("Not Valid").is_err());
        assert!(Keys::new("").is_err());
    }

    #[test]
    fn true_in_any_case_marks_a_source() {
        let keys = Keys::default();
        let mut annotations = BTreeMap::new();
        assert!(!keys.is_source(&annotations));
        for (value, source) in [("True", true), (" TRUE", true), ("true", true), ("false", false), ("yes", false)] {
            annotations.insert(keys.source.clone(), value.to_owned());
            assert_eq!(keys.is_source(&annotations), source, "{value}");
        }
    }

    #[test]
    fn a_flag_that_is_neither_true_nor_false_is_an_error_naming_the_accepted_values() {
        let keys = Keys::default();
        for flag in [&keys.source, &keys.jwks, &keys.adopt] {
            let error = keys.check(&BTreeMap::from([(flag.clone(), "yes".to_owned())])).expect_err("yes");
            assert_eq!(error.annotation, *flag);
            assert!(error.to_string().contains("expected true or false"), "{error}");
        }
    }

    #[test]
    fn an_annotation_under_the_prefix_the_rotator_does_not_know_is_an_error() {
        let keys = Keys::default();
        let typo = keys.source.replace("source-secret", "source-secrets");
        let error = keys.check(&BTreeMap::from([(typo.clone(), "true".to_owned())])).expect_err("typo");
        assert_eq!(error.annotation, typo);
        assert!(error.expected.contains(&keys.source) && error.expected.contains(&keys.destination), "{error}");
        let written = BTreeMap::from([(keys.rotations.clone(), "3".to_owned()), ("example.com/x".to_owned(), "y".to_owned())]);
        assert_eq!(keys.check(&written), Ok(()), "what the rotator writes, and other prefixes, are fine");
    }

    #[test]
    fn a_retry_request_is_known_under_the_blockwork_prefix_too() {
        let keys = Keys::new("blockwork.dev").expect("a valid prefix");
        let requested = BTreeMap::from([(policy::RECONCILE_REQUESTED_ANNOTATION.to_owned(), "2026-11-23T22:00:00Z".to_owned())]);
        assert_eq!(keys.check(&requested), Ok(()));
        let typo = BTreeMap::from([("blockwork.dev/reconcile-requested".to_owned(), "now".to_owned())]);
        assert!(keys.check(&typo).is_err(), "other unknown annotations under the prefix still are errors");
    }

    #[test]
    fn config_rejects_zero_tracked_targets() {
        let args = RotatorArgs { max_tracked_targets: 0, ..RotatorArgs::default() };
        assert!(Config::new(&args, &[], 1).is_err());
        let config = Config::new(&RotatorArgs::default(), &strings(&["ns"]), 0).unwrap();
        assert_eq!(config.concurrency, 1);
        assert_eq!(config.namespaces, Some(strings(&["ns"])));
    }

    #[test]
    fn subdomains() {
        assert!(is_dns_subdomain("target"));
        assert!(is_dns_subdomain("stargate-jwk-dest"));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("Target"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }
}
