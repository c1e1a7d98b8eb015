//! The integration tests of `blockwork-cert`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod accounts;
mod adoption;
mod alerts;
mod costs;
mod expiry_and_renewal;
mod explain;
mod export;
mod iam;
mod jwks;
mod lifecycle;
mod metrics;
mod private_ca;
mod publish;
mod support;
mod tracking;
mod upkeep;
