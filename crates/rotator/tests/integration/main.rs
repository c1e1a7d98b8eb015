//! The integration tests of `blockwork-rotator`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod config_env;
mod explain;
mod overlays;
mod rotator;
mod support;
