//! The integration tests of `blockwork`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod account_ids;
mod accounts;
mod chart;
mod cli;
mod crds;
mod hostile;
mod image;
mod self_managed_certificates;
mod shared_aws_quotas;
mod traces;
mod two_clusters;
mod webhooks;
mod why_stuck;
