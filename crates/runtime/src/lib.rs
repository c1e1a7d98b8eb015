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
//! ([`namespaces`]) and one graceful shutdown ([`shutdown`]).

pub mod backoff;
pub mod events;
pub mod labels;
pub mod machine;
pub mod manager;
pub mod metrics;
pub mod namespaces;
pub mod outcome;
pub mod policy;
pub mod rbac;
pub mod reconciler;
pub mod shutdown;
pub mod status;

pub use backoff::RequeuePolicy;
pub use events::Publisher;
pub use labels::{MANAGED_BY, MANAGED_BY_LABEL};
pub use manager::{DependencyRef, ExternalResource, Request, default_requeue_policy};
pub use metrics::RuntimeMetrics;
pub use namespaces::{Namespaces, run_in};
pub use outcome::{DeleteOutcome, ErrorClass, ExternalError, MutateOutcome, VerifyOutcome};
pub use policy::{DeletionPolicy, DriftPolicy};
pub use reconciler::{Context, ControllerConfig, idempotency_token, reconcile, run};
pub use status::{ManagedStatus, ReconcileState};
