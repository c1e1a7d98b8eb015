//! Blockwork's reliability campaign (issue 15): suites that do to `blockwork run` what production
//! does — kill it at random, fail a fifth of its AWS calls, cut its watches and restart its API
//! server, kill its leader — while a seeded workload of Certs, DistributionTenants, Caches and
//! key-rotator sources is created, changed and deleted, and then check that everything converged
//! with nothing duplicated, left behind or leaked. Each suite is a function taking its scale, so
//! CI runs a bounded version (`tests/`) and the benchmark the long one (`benches/campaign.rs`);
//! `docs/reliability.md` publishes the figures and the commands.
//!
//! Everything runs against the real kube-apiserver, moto and MiniStack of `blockwork-testenv`,
//! and the operator is the workspace's `blockwork` binary (`blockwork_testenv::commands::blockwork_binary`).

pub mod observe;
pub mod operator;
pub mod report;
pub mod suites;
pub mod workload;
pub mod world;
