//! Blockwork's single binary, `blockwork`: `blockwork crds` prints the CRDs of every controller,
//! `blockwork rbac` prints their least-privilege RBAC, `blockwork run` runs the controllers with
//! health and metrics servers and leader election, `blockwork remove-finalizers` releases their
//! objects for uninstalling.
//!
//! Operators plug in through [`controllers::registered`].

// A controller's reconcile future nests the AWS SDK's futures under the decorators and the
// operator's own calls; computing its layout takes more than the default 128 query levels.
#![recursion_limit = "256"]

pub mod certificates;
pub mod chart;
pub mod cli;
pub mod controllers;
pub mod crds;
pub mod finalizers;
pub mod leader;
pub mod rbac;
pub mod run;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod traces;
pub mod webhooks;
