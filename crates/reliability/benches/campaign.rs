//! The reliability campaign at full scale, for `docs/reliability.md`:
//!
//!     cargo bench -p blockwork-reliability --bench campaign -- [kills|soak|api|failover ...]
//!
//! With no suite named, all four run, one after the other. `BLOCKWORK_SEED` repeats a run;
//! `BLOCKWORK_DRIVE_MINUTES` (default 20) sets how long the workload's plan is spread over.
//! Each suite prints its seed first and a Markdown table of its figures at the end. The operator
//! is the release build of `blockwork`. Not run by `cargo test` (it exits at once without
//! `--bench`).

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use blockwork_reliability::report::{Report, seed};
use blockwork_reliability::suites::{self, ApiTrouble, FaultSoak, LeaderFailover, RandomKills, Scale};
use blockwork_reliability::workload::Counts;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if !std::env::args().any(|a| a == "--bench") {
        println!("the reliability campaign runs with `cargo bench -p blockwork-reliability --bench campaign`");
        return ExitCode::SUCCESS;
    }
    let minutes: u64 = std::env::var("BLOCKWORK_DRIVE_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(20);
    let drive = Duration::from_secs(minutes * 60);
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let binary = match blockwork_testenv::commands::blockwork_binary() {
        Ok(binary) => binary,
        Err(e) => {
            println!("no blockwork binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let binary = binary.as_path();
    let mut passed = true;
    runtime.block_on(async {
        let large = Counts { certs: 200, tenants: 50, caches: 10, sources: 10 };
        let scale = |counts| Scale { seed: seed(), counts, drive, converge: Duration::from_secs(20 * 60) };
        let mut reports: Vec<anyhow::Result<Report>> = Vec::new();
        if wanted("kills") {
            let suite = RandomKills {
                scale: scale(large),
                kill_after: (Duration::from_secs(5), Duration::from_secs(60)),
                restart_after: (Duration::from_secs(1), Duration::from_secs(5)),
            };
            reports.push(suites::random_kills(binary, suite).await);
        }
        if wanted("soak") {
            let suite = FaultSoak { scale: scale(large), rate: 0.2, slow: Duration::from_secs(3) };
            reports.push(suites::fault_soak(binary, suite).await);
        }
        if wanted("api") {
            let counts = Counts { certs: 50, tenants: 10, caches: 5, sources: 5 };
            let suite = ApiTrouble { scale: Scale { drive: drive / 4, ..scale(counts) }, trouble: Duration::from_secs(180), rate: 0.2 };
            reports.push(suites::api_trouble(binary, suite).await);
        }
        if wanted("failover") {
            let counts = Counts { certs: 100, tenants: 20, caches: 5, sources: 5 };
            let suite = LeaderFailover { scale: Scale { drive: drive / 2, ..scale(counts) }, kills_under_load: 20, quiet_kills: 5 };
            reports.push(suites::leader_failover(binary, suite).await);
        }
        for report in reports {
            match report {
                Ok(report) => {
                    passed &= report.passed();
                    println!("\n{}", report.markdown());
                }
                Err(e) => {
                    passed = false;
                    println!("\nthe suite could not run: {e:#}");
                }
            }
        }
    });
    if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
