//! The integration tests of `blockwork-webhook`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod reload;
