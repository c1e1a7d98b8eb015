//! Suite 4 of the reliability campaign, bounded for CI: two `blockwork run --leader-elect`
//! replicas; the leader is killed with SIGKILL again and again, while the workload runs and then
//! while nothing changes. Each takeover must come within 15 s (a 12 s lease and a 2 s retry
//! period); no AWS resource may be created twice, and a new leader must not write again what its
//! predecessor wrote (writes are counted by a proxy in front of the API server).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use blockwork_reliability::report::seed;
use blockwork_reliability::suites::{self, LeaderFailover, Scale};
use blockwork_reliability::workload::Counts;
use blockwork_testenv::commands::blockwork_binary;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_the_lease_with_nothing_created_or_written_twice() {
    let counts = Counts { certs: 12, tenants: 3, caches: 2, sources: 2 };
    let scale = Scale { seed: seed(), counts, drive: Duration::from_secs(45), converge: Duration::from_secs(150) };
    let suite = LeaderFailover { scale, kills_under_load: 2, quiet_kills: 1 };
    let report = suites::leader_failover(&blockwork_binary().unwrap(), suite).await.unwrap();
    println!("{}", report.markdown());
    assert!(report.passed(), "{}", report.markdown());
}
