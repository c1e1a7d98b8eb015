//! Blockwork's single binary, `blockwork`: `blockwork crds` prints the CRDs of every controller,
//! `blockwork run` runs the controllers with health and metrics servers and leader election.
//!
//! Operators plug in through [`controllers::registered`].

pub mod cli;
pub mod controllers;
pub mod crds;
pub mod leader;
pub mod run;
pub mod server;
pub mod shutdown;
pub mod telemetry;
