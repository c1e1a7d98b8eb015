//! The integration tests of `blockwork-inspect`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod import;
mod permissions;
mod reasons;
mod records_now;
