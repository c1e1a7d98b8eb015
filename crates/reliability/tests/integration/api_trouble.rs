//! Suite 3 of the reliability campaign, bounded for CI: between the operator and kube-apiserver a
//! proxy cuts every watch every few seconds, answers watches `410 Gone`, answers a fifth of the
//! requests with 429, 500, 503 or a lost answer, and kube-apiserver itself is restarted — first
//! while nothing changes (nothing may be written), then while every object changes once (all must
//! converge, without a restart of the operator). Own test binary: it restarts the API server.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Duration;

use blockwork_reliability::report::seed;
use blockwork_reliability::suites::{self, ApiTrouble, Scale};
use blockwork_reliability::workload::Counts;
use blockwork_testenv::commands::blockwork_binary;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_trouble_causes_no_write_and_no_restart_and_changes_still_converge() {
    let counts = Counts { certs: 8, tenants: 3, caches: 2, sources: 2 };
    let scale = Scale { seed: seed(), counts, drive: Duration::from_secs(20), converge: Duration::from_secs(150) };
    let suite = ApiTrouble { scale, trouble: Duration::from_secs(30), rate: 0.2 };
    let report = suites::api_trouble(&blockwork_binary().unwrap(), suite).await.unwrap();
    println!("{}", report.markdown());
    assert!(report.passed(), "{}", report.markdown());
}
