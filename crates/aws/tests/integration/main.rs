//! The integration tests of `blockwork-aws`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod classify;
mod layer;
