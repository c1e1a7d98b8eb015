//! The integration tests of `blockwork-cache`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod cache;
mod pods;
mod servers;
mod support;
