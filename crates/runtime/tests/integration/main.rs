//! The integration tests of `blockwork-runtime`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod lifecycle;
mod support;
