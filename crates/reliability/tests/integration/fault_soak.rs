//! Suite 2 of the reliability campaign, bounded for CI: a fifth of the operator's AWS calls fail
//! — throttling with each service's real code, 500 and 503, calls that never answer, reset
//! connections, answers that come late after the call took effect — for the whole run, while the
//! same workload runs against a second operator whose calls do not fail. The full scale runs in
//! `benches/campaign.rs`; `docs/reliability.md` has the figures.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use blockwork_reliability::report::seed;
use blockwork_reliability::suites::{self, FaultSoak, Scale};
use blockwork_reliability::workload::Counts;
use blockwork_testenv::commands::blockwork_binary;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifth_of_aws_calls_failing_never_shows_as_failed_and_everything_converges() {
    let counts = Counts { certs: 12, tenants: 4, caches: 2, sources: 2 };
    let scale = Scale { seed: seed(), counts, drive: Duration::from_secs(45), converge: Duration::from_secs(150) };
    let suite = FaultSoak { scale, rate: 0.2, slow: Duration::from_secs(2) };
    let report = suites::fault_soak(&blockwork_binary().unwrap(), suite).await.unwrap();
    println!("{}", report.markdown());
    assert!(report.passed(), "{}", report.markdown());
}
