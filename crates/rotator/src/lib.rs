//! The key rotator: keeps a `kubernetes.io/tls` target Secret holding the previous, current and
//! next key pair (`prev-tls.*`, `tls.*`, `next-tls.*`) of a source Secret that cert-manager
//! renews, for authorization servers that serve a JWK set. A drop-in for the original
//! k8s-tls-rotator (same annotations, layout and key ids), with exactly-once rotations, events,
//! annotations, an optional `jwks.json`, bounded metrics, and a memory that does not follow the
//! number of Secrets (only `kubernetes.io/tls` Secrets are watched in full, and only the few it
//! works with are kept).
//!
//! Pipeline per source: [`Rotator::observe_cached`] (source and target from the cache) or
//! [`Rotator::observe`] (read them) → [`plan::plan`] (pure) → [`Rotator::apply`] (one write, the
//! commit point) → [`Rotator::report`] (logs, metrics, and events that wait until the rotator is idle).
//! See `docs/rotator.md`.
//!
//! It runs as the `rotator` controller of `blockwork run`, with [`RotatorArgs`] flattened into
//! that command's flags.

mod cache;
pub mod config;
pub mod controller;
pub mod failure;
pub mod jwks;
pub mod kid;
pub mod metrics;
mod outbox;
pub mod plan;
mod queue;

pub use config::{Config, ConfigError, DEFAULT_ANNOTATION_PREFIX, Keys, RotatorArgs, resolve_namespaces};
pub use controller::{Error, Observation, Outcome, Rotator, run};
pub use metrics::Metrics;
pub use plan::{Action, Blocked, Plan};

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The cluster permissions the rotator needs (see `blockwork rbac`; the Kustomize overlays grant
/// the same, which `tests/integration/overlays.rs` checks). Never `delete`: targets hold signing keys.
pub fn rbac() -> Vec<PolicyRule> {
    vec![blockwork_runtime::rbac::rule("", &["secrets"], &["get", "list", "watch", "create", "update", "patch"])]
}
