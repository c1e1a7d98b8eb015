//! The integration tests of `blockwork-reliability`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod api_trouble;
mod fault_soak;
mod fuzz;
mod leader_failover;
mod random_kills;
