//! Blockwork's runtime: a generic reconciler for any external resource managed by
//! create/read/update/delete calls (seed 003), with Crossplane's safety lessons.
//!
//! An operator implements [`ExternalResource`] — the calls to its own API — for a custom
//! resource whose status is a [`ManagedStatus`]; [`run`] does the Kubernetes side: finalizer,
//! state machine, dependencies, access/deletion/drift policies, pause, crash-safe creation,
//! conditions, events, backoff with jitter and metrics. See `docs/adr/0001-runtime.md`.
//!
//! Every controller of the binary, whether it runs on [`run`] or on kube's `Controller` directly
//! (Cache, the key rotator), shares the runtime's host pieces: one way to publish an Event
//! ([`events::Publisher`]), one managed-by label ([`labels`]), one per-namespace fan-out
//! ([`namespaces`]), one graceful shutdown ([`shutdown`]) and one backoff per watch
//! ([`watches`]).

pub mod admission;
pub mod backoff;
pub mod client;
mod conclusion;
pub mod context;
pub mod controller;
mod dependencies;
pub mod error;
pub mod events;
pub mod labels;
pub mod machine;
pub mod metrics;
pub mod namespaces;
pub mod outcome;
pub mod policy;
pub mod rbac;
mod reconcile;
pub mod resource;
pub mod shares;
pub mod shutdown;
pub mod status;
pub mod timing;
pub mod trace;
pub mod watches;
mod writes;

pub use backoff::RequeuePolicy;
pub use context::{Context, ControllerConfig};
pub use controller::run;
pub use events::Publisher;
pub use labels::{MANAGED_BY, MANAGED_BY_LABEL};
pub use metrics::RuntimeMetrics;
pub use namespaces::{Namespaces, run_in};
pub use outcome::{
    Conditions, DeleteOutcome, ErrorClass, Existence, ExternalError, MutateOutcome, Observed, Purpose, Upkeep, VerifyOutcome,
    WithConditions,
};
pub use policy::{DeletionPolicy, DriftPolicy};
pub use reconcile::{idempotency_token, reconcile};
pub use resource::{Asks, DependencyRef, ExternalResource, Phase, Report, Request, SpecChange};
pub use status::{ManagedStatus, ReconcileState};
pub use timing::Timing;
