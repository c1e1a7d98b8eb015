//! Cert benchmark across AWS accounts (ADR 0014): 8 namespaces, each mapped by an AwsIdentity to
//! a role in an account of its own, 300 Certs each, all created at once against the local
//! control plane and a moto whose AssumeRole switches accounts, behind the fault proxy, which
//! tells the accounts apart, checks each role's ExternalId and throttles as AWS does: AWS's own
//! buckets (`Quotas::aws()`, unscaled unless `BENCH_QUOTA_SCALE` says), one set per account.
//!
//!     cargo bench -p blockwork-cert --bench accounts
//!
//! One cert controller (this binary again, `--child`, release build, the operator's defaults:
//! AWS's quotas × 0.8, concurrency 3 per AwsIdentity, unmapped namespaces refused) serves all
//! the namespaces, so its memory is measured alone; its metrics go to a file every second
//! (`benches/support`). Each account's Certs use
//! a hosted zone in that account, granted by its mapping. The parent reports the time until all
//! are Ready against the **floor** one account's quotas allow for the minimal calls (the accounts
//! have buckets of their own, so 8 accounts should take about as long as one), the time each
//! account's Certs took, AWS calls by operation, throttling answers (the proxy's, i.e. AWS's
//! view, and the operator's own metric) and the operator's memory.
//!
//! `BENCH_ACCOUNTS` (default 8) and `BENCH_CERTS_PER_ACCOUNT` (default 300) change the sizes.
//! `BENCH_QUOTA_SCALE` (default 1) runs at that fraction of AWS's quotas: the proxy's buckets
//! (AWS's) and the operator's (its share, × 0.8) are both scaled by it, so the floor grows by
//! 1 / factor while the AWS calls per second the emulator must answer shrink by the factor. On a
//! machine where one moto cannot answer 8 accounts at AWS's full rates (about 64 calls/s), e.g.
//!
//!     BENCH_QUOTA_SCALE=0.05 BENCH_CERTS_PER_ACCOUNT=30 cargo bench -p blockwork-cert --bench accounts
//!     BENCH_QUOTA_SCALE=0.05 BENCH_CERTS_PER_ACCOUNT=30 BENCH_ACCOUNTS=1 cargo bench -p blockwork-cert --bench accounts
//!
//! compare 8 accounts with one at a call rate the emulator keeps up with.
//! Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use blockwork_aws::quota::Service;
use blockwork_cert::{Cert, CertArgs, CertSpec, CertState};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant, Settings, Unmapped};
use blockwork_testenv::aws::{as_role, fresh_account, hosted_zone};
use blockwork_testenv::emulators::accounts_moto;
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::measure::mib;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, PostParams};
use support::{CONCURRENCY, metric_sum};

/// The cluster name in session names.
const CLUSTER: &str = "bench";

fn main() {
    support::main("accounts", child(), bench());
}

/// The child: the cert controller with the default flags and unmapped namespaces refused.
async fn child() {
    support::controller(CertArgs::default(), Vec::new(), Settings { cluster: CLUSTER.to_owned(), unmapped: Unmapped::Refuse }).await;
}

/// A team: its namespace, mapped to a role in an account of its own with a hosted zone there.
struct Team {
    namespace: String,
    zone_name: String,
    identity: AwsIdentity,
}

impl Team {
    async fn new(plane: &blockwork_testenv::control_plane::ControlPlane, index: usize, endpoint: &str, proxy: &FaultProxy) -> Self {
        let namespace = plane.namespace(&format!("bench-acct-{index}")).await.unwrap();
        let account = fresh_account();
        let role = format!("arn:aws:iam::{account}:role/blockwork-bench");
        let external_id = format!("ext-{namespace}");
        proxy.accounts().require_external_id(&role, &external_id);
        let route53 = aws_sdk_route53::Client::new(&as_role(endpoint, &role).await);
        let zone_name = format!("{namespace}.bench");
        let zone_id = hosted_zone(&route53, &zone_name).await;
        let identity = AwsIdentity::new(
            &format!("bench-{namespace}"),
            AwsIdentitySpec {
                namespaces: vec![namespace.clone()],
                role_arn: Some(role),
                external_id: Some(external_id),
                hosted_zones: vec![HostedZoneGrant { id: zone_id, name: zone_name.clone(), ..HostedZoneGrant::default() }],
            },
        );
        Self { namespace, zone_name, identity }
    }
}

fn ready(cert: &Cert) -> bool {
    cert.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready)
}

fn records_written(cert: &Cert) -> bool {
    cert.status
        .as_ref()
        .is_some_and(|s| !s.observation.validation_records.is_empty() && s.observation.validation_records.iter().all(|r| !r.pending))
}

/// By namespace: (Ready Certs, Ready Certs with every validation record written).
async fn progress_by_namespace(api: &Api<Cert>) -> BTreeMap<String, (usize, usize)> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for cert in api.list(&ListParams::default()).await.unwrap().items.iter().filter(|c| ready(c)) {
        let count = counts.entry(cert.metadata.namespace.clone().unwrap_or_default()).or_default();
        count.0 += 1;
        count.1 += usize::from(records_written(cert));
    }
    counts
}

async fn bench() {
    let accounts = usize::try_from(support::env_or("BENCH_ACCOUNTS", 8)).unwrap();
    let per_account = usize::try_from(support::env_or("BENCH_CERTS_PER_ACCOUNT", 300)).unwrap();
    let total = accounts * per_account;
    let scale = support::quota_scale();

    let plane = support::control_plane().await;
    let client = plane.client();
    let moto = accounts_moto().await.unwrap().endpoint();
    let proxy = FaultProxy::start(&moto).await.unwrap();
    let mut teams = Vec::new();
    for index in 0..accounts {
        teams.push(Team::new(plane, index, &moto, &proxy).await);
    }
    let identities: Api<AwsIdentity> = Api::all(client.clone());
    for team in &teams {
        identities.create(&PostParams::default(), &team.identity).await.unwrap();
    }
    // From now on the proxy throttles as AWS would, each account with its own buckets.
    proxy.enforce_quotas(support::aws_quotas(&[]));
    let metrics_file = plane.dir().join("cert-accounts-bench-metrics.txt");
    let operator = support::spawn_operator(plane.kubeconfig_path(), &proxy.endpoint(), Some(&metrics_file), &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, _) = operator.memory().unwrap();

    // All the accounts' Certs at once, interleaved.
    let started = Instant::now();
    futures::stream::iter(0..total)
        .map(|i| {
            let team = &teams[i % accounts];
            let api: Api<Cert> = Api::namespaced(client.clone(), &team.namespace);
            let name = format!("cert-{}", i / accounts);
            let spec = CertSpec {
                service_name: name.clone(),
                environment: "bench".into(),
                domain_name: Some(format!("{name}.{}", team.zone_name)),
                ..CertSpec::default()
            };
            async move { api.create(&PostParams::default(), &Cert::new(&name, spec)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
    let created_in = started.elapsed();
    eprintln!("created {total} Certs in {accounts} namespaces in {created_in:.1?}");

    let all: Api<Cert> = Api::all(client.clone());
    let mut account_ready: BTreeMap<String, Duration> = BTreeMap::new();
    let mut all_ready = None;
    let mut peak_rss = 0;
    let mut last_report = Instant::now();
    let all_written = loop {
        let counts = progress_by_namespace(&all).await;
        peak_rss = peak_rss.max(operator.memory().unwrap().0);
        for team in &teams {
            if counts.get(&team.namespace).is_some_and(|c| c.0 >= per_account) {
                account_ready.entry(team.namespace.clone()).or_insert_with(|| started.elapsed());
            }
        }
        if account_ready.len() == accounts && all_ready.is_none() {
            all_ready = Some(started.elapsed());
        }
        if all_ready.is_some() && counts.values().map(|c| c.1).sum::<usize>() >= total {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "{:>5.0} s: (Ready, with records written) by account {:?}",
                started.elapsed().as_secs_f64(),
                counts.values().collect::<Vec<_>>()
            );
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "not all {total} Certs are Ready after an hour: {counts:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let all_ready = all_ready.unwrap_or_default();
    let calls: BTreeMap<String, usize> = proxy.all_calls().into_iter().collect();
    let throttled_by_aws: usize = proxy.all_throttled().values().sum();
    let (rss_ready, hwm_ready) = operator.memory().unwrap();
    let cpu = operator.cpu_seconds().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = std::fs::read_to_string(&metrics_file).unwrap();
    let throttled = metric_sum(&metrics, "blockwork_aws_throttling_events_total");
    let waits = metric_sum(&metrics, "blockwork_aws_limiter_wait_seconds_sum");
    // The emulator's own speed: how long one call took once the operator's buckets let it go.
    let call_seconds = metric_sum(&metrics, "blockwork_aws_call_duration_seconds_sum");
    let call_count = metric_sum(&metrics, "blockwork_aws_call_duration_seconds_count");
    operator.kill();

    // One account's floor: its share of ACM's quotas for the minimal calls.
    let (config, _) = support::operator_aws_args(Vec::new()).config().unwrap();
    let acm = config.quotas.service(Service::Acm);
    let n = u64::try_from(per_account).unwrap();
    let floor_request = acm.operation("RequestCertificate").seconds_for(n);
    let floor_describe = acm.operation("DescribeCertificate").seconds_for(n);
    let floor = floor_request.max(floor_describe);
    let (fastest, slowest) =
        (account_ready.values().min().copied().unwrap_or_default(), account_ready.values().max().copied().unwrap_or_default());

    println!();
    println!(
        "| {accounts} accounts × {per_account} Certs created at once (one namespace and AwsIdentity per account, a hosted zone in each; one process, concurrency {CONCURRENCY} per AwsIdentity, the operator's default share of the quotas; the proxy throttles with AWS's buckets per account; both × {scale}) | |"
    );
    println!("|---|---|");
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {} |", support::load_average());
    println!("| Certs created (API server) | {:.1} s |", created_in.as_secs_f64());
    println!("| **time until all {total} Ready** | **{:.0} s** |", all_ready.as_secs_f64());
    println!(
        "| one account's floor from the operator's quotas, minimal calls ({per_account} RequestCertificate at {} → {floor_request:.0} s; {per_account} DescribeCertificate at {} → {floor_describe:.0} s) | {floor:.0} s |",
        acm.operation("RequestCertificate"),
        acm.operation("DescribeCertificate")
    );
    println!("| all Ready / one account's floor | {:.2} |", all_ready.as_secs_f64() / floor);
    println!("| an account's Certs all Ready: first / last account | {:.0} s / {:.0} s |", fastest.as_secs_f64(), slowest.as_secs_f64());
    for (namespace, time) in &account_ready {
        println!("| {namespace}: all its Certs Ready | {:.0} s |", time.as_secs_f64());
    }
    println!("| time until every validation record is written | {:.0} s |", all_written.as_secs_f64());
    for (operation, count) in &calls {
        println!("| AWS calls: {operation} | {count} ({:.3} per Cert) |", *count as f64 / total as f64);
    }
    println!("| throttling answers from the proxy (AWS's buckets, per account) | {throttled_by_aws} |");
    println!("| throttling events (operator's metric) | {throttled} |");
    println!("| time calls waited for the operator's buckets, summed | {waits:.0} s |");
    println!(
        "| AWS calls per second until all Ready / mean time of one call (after the operator's buckets) | {:.1} / {:.0} ms |",
        calls.values().sum::<usize>() as f64 / all_ready.as_secs_f64(),
        1000.0 * call_seconds / call_count.max(1.0)
    );
    println!("| operator VmRSS: idle / peak sampled / when all Ready | {} / {} / {} |", mib(idle_rss), mib(peak_rss), mib(rss_ready));
    println!("| operator VmHWM when all Ready | {} |", mib(hwm_ready));
    println!("| operator CPU until all Ready | {cpu:.1} s |");
}
