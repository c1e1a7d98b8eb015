//! Suite 1 of the reliability campaign, bounded for CI: `blockwork run` killed with SIGKILL at
//! random moments (seeded; the seed is printed) and started again while Certs,
//! DistributionTenants, Caches and rotator sources are created, changed and deleted. The full
//! scale runs in `benches/campaign.rs`; `docs/reliability.md` has the figures.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use blockwork_reliability::report::seed;
use blockwork_reliability::suites::{self, RandomKills, Scale};
use blockwork_reliability::workload::Counts;
use blockwork_testenv::commands::blockwork_binary;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_leave_everything_converged_with_nothing_duplicated_left_behind_or_leaked() {
    let counts = Counts { certs: 20, tenants: 5, caches: 3, sources: 3 };
    let scale = Scale { seed: seed(), counts, drive: Duration::from_secs(60), converge: Duration::from_secs(150) };
    let suite = RandomKills {
        scale,
        kill_after: (Duration::from_secs(3), Duration::from_secs(12)),
        restart_after: (Duration::from_secs(1), Duration::from_secs(3)),
    };
    let report = suites::random_kills(&blockwork_binary().unwrap(), suite).await.unwrap();
    println!("{}", report.markdown());
    assert!(report.passed(), "{}", report.markdown());
}
