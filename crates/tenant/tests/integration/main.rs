//! The integration tests of `blockwork-tenant`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod accounts;
mod adoption;
mod costs;
mod explain;
mod support;
mod tenant;
mod tracking;
mod upkeep;
mod validation;
