//! Cert benchmark: 1,000 Certs created at once against the local control plane and moto, behind
//! a fault proxy that throttles as AWS does (AWS's own buckets: `Quotas::aws()`, unscaled), with
//! the operator's defaults (AWS's quotas × 0.8, concurrency 3).
//!
//!     cargo bench -p blockwork-cert --bench thousand
//!
//! The cert controller runs in a child process (this binary again, `--child`, release build) so
//! that its memory is its own; its metrics go to a file every second. The parent creates 8
//! hosted zones and the Certs (round robin), and reports:
//!
//! 1. the time until all are Ready, against the **floor** the operator's quotas allow for the
//!    minimal calls (RequestCertificate and one DescribeCertificate per Cert, Route 53 batched),
//!    and until every validation record is written; AWS calls by operation; throttling answers
//!    (the proxy's, i.e. AWS's view, and the operator's own metric);
//! 2. the **steady state**: AWS calls in a quiet window (`BENCH_QUIET_SECS`, default 600) per
//!    Ready certificate and hour, while behind the operator's back one certificate is revoked,
//!    one expires and one's managed renewal fails (the fault proxy answers as ACM does for
//!    them), and the time until each Cert says so is measured;
//! 3. memory with 2,500 Certs (ACM's default quota per account and region): `BENCH_EXTRA_CERTS`
//!    (default 1,500) more are created and the child's VmRSS/VmHWM read when all are Ready.
//!
//! `BENCH_TRACES=1` runs the controller with its traces exported to a real collector (Jaeger),
//! as `blockwork run` exports them with `OTEL_EXPORTER_OTLP_ENDPOINT`: the same figures with
//! traces on, to compare with a run without.
//!
//! `BENCH_CERTS` changes the first count and `BENCH_QUOTA` the account's quotas, in the proxy and
//! the operator alike, as `--aws-quota` takes them (for development: e.g.
//! `acm.RequestCertificate=50,acm.DescribeCertificate=50` reaches 2,500 Certs in a minute);
//! `BENCH_QUOTA_SCALE` scales both sets of buckets (`benches/support`). Not run by `cargo test`
//! (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use blockwork_aws::quota::{Override, Service};
use blockwork_cert::{Cert, CertArgs, CertSpec, CertState};
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::measure::{MeasuredChild, mib};
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, PostParams};
use support::{CONCURRENCY, env_or, metric_sum};

/// Hosted zones the Certs are spread over (round robin), in one account.
const ZONES: usize = 8;
/// docs/benchmarks.md before the AWS layer (the same command): time until 1,000 Ready, and
/// AWS calls per Ready certificate and hour at steady state.
const BEFORE_READY_SECONDS: f64 = 627.0;
const BEFORE_CALLS_PER_CERTIFICATE_HOUR: f64 = 0.97;

/// `BENCH_QUOTA`: the account's quotas where they differ from AWS's defaults.
fn quota_overrides() -> Vec<Override> {
    std::env::var("BENCH_QUOTA")
        .unwrap_or_default()
        .split(',')
        .filter(|entry| !entry.is_empty())
        .map(|entry| entry.parse().unwrap())
        .collect()
}

fn main() {
    support::main("thousand", child(), bench());
}

/// The child: the cert controller with the default flags and the bench's hosted zones.
async fn child() {
    let args = CertArgs { dns_zones: std::env::var("BENCH_DNS_ZONES").unwrap(), ..CertArgs::default() };
    support::controller(args, quota_overrides(), blockwork_identity::Settings::default()).await;
}

/// `BENCH_TRACES=1`: the controller exports its traces to a real collector (Jaeger, as the
/// integration tests start it), for the overhead of traces on against off.
async fn traces_endpoint() -> Option<String> {
    if std::env::var("BENCH_TRACES").is_ok_and(|v| v == "1") {
        Some(blockwork_testenv::collector::jaeger().await.unwrap().otlp_http())
    } else {
        None
    }
}

async fn create_zones(endpoint: &str, namespace: &str) -> Vec<(String, String)> {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sts::config::Credentials::new("test", "test", None, None, "bench"))
        .load()
        .await;
    let route53 = aws_sdk_route53::Client::new(&sdk);
    let mut zones = Vec::new();
    for i in 0..ZONES {
        let name = format!("z{i}.{namespace}.bench");
        let zone =
            route53.create_hosted_zone().name(&name).caller_reference(format!("{name}-{}", std::process::id())).send().await.unwrap();
        zones.push((name, zone.hosted_zone.unwrap().id.trim_start_matches("/hostedzone/").to_owned()));
    }
    zones
}

/// (Ready, Ready with every validation record written).
async fn progress(api: &Api<Cert>) -> (usize, usize) {
    let certs = api.list(&ListParams::default()).await.unwrap();
    let ready: Vec<&Cert> =
        certs.items.iter().filter(|c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready)).collect();
    let written = ready
        .iter()
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                !s.observation.validation_records.is_empty() && s.observation.validation_records.iter().all(|r| !r.pending)
            })
        })
        .count();
    (ready.len(), written)
}

async fn create_certs(api: &Api<Cert>, zones: &[(String, String)], range: std::ops::Range<usize>) {
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            let zone = zones[i % ZONES].0.clone();
            async move {
                let spec = CertSpec {
                    service_name: format!("svc{i}"),
                    environment: "bench".into(),
                    dns_zone: Some(blockwork_cert::DnsZoneRef { id: None, name: Some(zone) }),
                    ..CertSpec::default()
                };
                api.create(&PostParams::default(), &Cert::new(&format!("cert-{i}"), spec)).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
}

/// Polls until `count` Certs are Ready and (second value) have their records written; returns
/// when each happened, and the peak RSS sampled meanwhile.
async fn wait_all(api: &Api<Cert>, count: usize, started: Instant, operator: &MeasuredChild) -> (Duration, Duration, u64) {
    let mut peak_rss = 0;
    let mut ready_at = None;
    let mut last_report = Instant::now();
    loop {
        let (ready, written) = progress(api).await;
        peak_rss = peak_rss.max(operator.memory().unwrap().0);
        if ready >= count && ready_at.is_none() {
            ready_at = Some(started.elapsed());
        }
        if let (Some(ready_at), true) = (ready_at, written >= count) {
            return (ready_at, started.elapsed(), peak_rss);
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: {ready} Ready, {written} with their records written", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "only {ready} of {count} Certs are Ready after an hour");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether a Cert shows what happened to its certificate.
type Shows = fn(&Cert) -> bool;

fn failed(cert: &Cert) -> bool {
    cert.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Failed)
}

fn renewal_shown(cert: &Cert) -> bool {
    cert.status.as_ref().and_then(|s| s.observation.renewal_status.as_deref()) == Some("FAILED")
}

fn calls_by_operation(proxy: &FaultProxy) -> BTreeMap<String, usize> {
    proxy.all_calls().into_iter().collect()
}

async fn bench() {
    let certs = usize::try_from(env_or("BENCH_CERTS", 1000)).unwrap();
    let extra = usize::try_from(env_or("BENCH_EXTRA_CERTS", 1500)).unwrap();
    let quiet = Duration::from_secs(env_or("BENCH_QUIET_SECS", 600));

    let plane = support::control_plane().await;
    let namespace = plane.namespace("bench-certs").await.unwrap();
    let client = plane.client();
    let moto = blockwork_testenv::emulators::moto().await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint()).await.unwrap();
    let zones = create_zones(&moto.endpoint(), &namespace).await;
    // From now on the proxy throttles as AWS would (AWS's own quotas, not the operator's share).
    proxy.enforce_quotas(support::aws_quotas(&quota_overrides()));
    let zone_flag = zones.iter().map(|(name, id)| format!("{name}:{id}")).collect::<Vec<_>>().join(",");
    let metrics_file = plane.dir().join("cert-bench-metrics.txt");
    let traces = traces_endpoint().await;
    let mut env = vec![("BENCH_DNS_ZONES", zone_flag.as_str())];
    if let Some(endpoint) = &traces {
        env.push((support::TRACES_ENDPOINT, endpoint));
    }
    let operator = support::spawn_operator(plane.kubeconfig_path(), &proxy.endpoint(), Some(&metrics_file), &env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, _) = operator.memory().unwrap();

    // 1. N Certs at once.
    let api: Api<Cert> = Api::namespaced(client.clone(), &namespace);
    let started = Instant::now();
    create_certs(&api, &zones, 0..certs).await;
    let created_in = started.elapsed();
    eprintln!("created {certs} Certs in {created_in:.1?}");
    let (all_ready, all_written, peak_rss) = wait_all(&api, certs, started, &operator).await;
    let calls = calls_by_operation(&proxy);
    let throttled_by_aws: usize = proxy.all_throttled().values().sum();
    let (rss_ready, hwm_ready) = operator.memory().unwrap();
    let cpu = operator.cpu_seconds().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = std::fs::read_to_string(&metrics_file).unwrap();
    let throttled = metric_sum(&metrics, "blockwork_aws_throttling_events_total");
    let waits = metric_sum(&metrics, "blockwork_aws_limiter_wait_seconds_sum");

    // The floor the operator's quotas allow for the minimal calls.
    let (config, _) = support::operator_aws_args(quota_overrides()).config().unwrap();
    let acm = config.quotas.service(Service::Acm);
    let n = u64::try_from(certs).unwrap();
    let floor_request = acm.operation("RequestCertificate").seconds_for(n);
    let floor_describe = acm.operation("DescribeCertificate").seconds_for(n);
    let floor = floor_request.max(floor_describe);
    let made = |operation: &str| calls.get(operation).copied().unwrap_or(0);

    // 2. Steady state; behind the operator's back one certificate is revoked, one expires and
    // one's managed renewal fails.
    eprintln!("all Ready; counting AWS calls for {} s of steady state", quiet.as_secs());
    let arn = |name: &'static str| {
        let api = api.clone();
        async move { api.get(name).await.unwrap().status.unwrap().observation.certificate_arn.unwrap() }
    };
    let (revoked, expired, renewal_failed) = (arn("cert-0").await, arn("cert-1").await, arn("cert-2").await);
    let before_quiet = proxy.all_calls();
    let quiet_started = Instant::now();
    proxy.set_certificate_status(&revoked, "REVOKED");
    proxy.set_certificate_status(&expired, "EXPIRED");
    proxy.fail_renewal(&renewal_failed);
    let watched: [(&str, Shows); 3] = [("cert-0", failed), ("cert-1", failed), ("cert-2", renewal_shown)];
    let mut noticed: [Option<Duration>; 3] = [None; 3];
    while quiet_started.elapsed() < quiet {
        for ((name, shows), noticed) in watched.iter().zip(noticed.iter_mut()) {
            if noticed.is_none() && shows(&api.get(name).await.unwrap()) {
                *noticed = Some(quiet_started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let after_quiet = proxy.all_calls();
    let quiet_by_operation: BTreeMap<&String, usize> = after_quiet
        .iter()
        .map(|(operation, count)| (operation, count - before_quiet.get(operation).copied().unwrap_or(0)))
        .filter(|(_, count)| *count > 0)
        .collect();
    let quiet_calls: usize = quiet_by_operation.values().sum();
    // The revoked and the expired one are no longer Ready.
    let ready_hours = (certs as f64 - 2.0) * quiet.as_secs_f64() / 3600.0;
    let (rss_quiet, _) = operator.memory().unwrap();

    // 3. Memory with 2,500 Certs.
    let rss_total = if extra > 0 {
        let started = Instant::now();
        create_certs(&api, &zones, certs..certs + extra).await;
        // The revoked and the expired one stay Failed.
        wait_all(&api, certs + extra - 2, started, &operator).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        Some(operator.memory().unwrap())
    } else {
        None
    };
    let throttled_at_end: usize = proxy.all_throttled().values().sum();
    operator.kill();

    let traced = if traces.is_some() { "traces exported to Jaeger" } else { "traces off" };
    println!();
    println!(
        "| {certs} Certs created at once ({ZONES} hosted zones in one account, concurrency {CONCURRENCY}, default quotas; the proxy throttles with AWS's; {traced}) | now | before the AWS layer |"
    );
    println!("|---|---|---|");
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {} | |", support::load_average());
    println!("| Certs created (API server) | {:.1} s | |", created_in.as_secs_f64());
    println!("| **time until all Ready** | **{:.0} s** | {BEFORE_READY_SECONDS:.0} s |", all_ready.as_secs_f64());
    println!(
        "| floor from the operator's quotas, minimal calls ({certs} RequestCertificate at {} → {floor_request:.0} s; {certs} DescribeCertificate at {} → {floor_describe:.0} s) | {floor:.0} s | |",
        acm.operation("RequestCertificate"),
        acm.operation("DescribeCertificate")
    );
    println!("| all Ready / floor | {:.2} | |", all_ready.as_secs_f64() / floor);
    println!("| time until every validation record is written | {:.0} s | |", all_written.as_secs_f64());
    for (operation, count) in &calls {
        println!("| AWS calls: {operation} | {count} ({:.3} per Cert) | |", *count as f64 / certs as f64);
    }
    println!("| ChangeResourceRecordSets per Cert | {:.3} | 1.00 |", made("ChangeResourceRecordSets") as f64 / certs as f64);
    println!("| throttling answers from the proxy (AWS's buckets) | {throttled_by_aws} | |");
    println!("| throttling events (operator's metric) | {throttled} | 0 |");
    println!("| time calls waited for the operator's buckets, summed | {waits:.0} s | |");
    println!(
        "| operator VmRSS: idle / peak sampled / when all Ready | {} / {} / {} | 19.4 / 36.7 / 36.7 MiB |",
        mib(idle_rss),
        mib(peak_rss),
        mib(rss_ready)
    );
    println!("| operator VmHWM when all Ready | {} | |", mib(hwm_ready));
    println!("| operator CPU until all Ready | {cpu:.1} s | 8.9 s |");
    println!(
        "| steady state: AWS calls in {} s with {} Ready certificates | {quiet_calls} ({:.4} per Ready certificate and hour) | {BEFORE_CALLS_PER_CERTIFICATE_HOUR} per certificate and hour |",
        quiet.as_secs(),
        certs - 2,
        quiet_calls as f64 / ready_hours
    );
    for (operation, count) in &quiet_by_operation {
        println!("| steady state: {operation} | {count} | |");
    }
    for ((what, seen), noticed) in [
        ("revoked behind the operator's back: its Cert Failed", "Failed"),
        ("expired behind the operator's back: its Cert Failed", "Failed"),
        ("whose managed renewal failed: its Cert's renewalStatus FAILED", "shown"),
    ]
    .iter()
    .zip(noticed)
    {
        match noticed {
            Some(after) => println!("| a certificate {what} after | {:.0} s | up to an hour |", after.as_secs_f64()),
            None => println!("| a certificate {what} after | not {seen} within {} s | up to an hour |", quiet.as_secs()),
        }
    }
    println!("| operator VmRSS after the quiet window | {} | |", mib(rss_quiet));
    if let Some((rss, hwm)) = rss_total {
        println!("| operator VmRSS / VmHWM with {} Certs, all Ready | {} / {} | |", certs + extra, mib(rss), mib(hwm));
    }
    println!("| throttling answers from the proxy, whole run | {throttled_at_end} | |");
}
