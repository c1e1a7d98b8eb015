//! Cert benchmark: 1,000 Certs created at once against the local control plane and moto, with
//! the operator's default rate limits (ACM 5/s burst 10, Route53 3/s burst 5 per hosted zone).
//!
//!     cargo bench -p blockwork-cert --bench thousand
//!
//! The cert controller runs in a child process (this binary again, `--child`, release build) so
//! that its memory is its own; it reaches moto through a fault proxy in the parent that counts
//! every AWS call by operation (and injects nothing). The parent creates the hosted zones and
//! the Certs, polls until all are Ready, and prints the time, the AWS calls, the operator's
//! throttling events (from its own metrics, which the child writes to a file every second), its
//! VmRSS/VmHWM, the lower bound the rate limits allow, and the AWS calls made in a quiet window
//! after all are Ready. Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use blockwork_cert::{Cert, CertArgs, CertConfig, CertMetrics, CertSpec, CertState};
use blockwork_runtime::RuntimeMetrics;
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::measure::{MeasuredChild, mib};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, CustomResourceExt as _};
use prometheus_client::registry::Registry;

const CERTS: usize = 1_000;
/// Hosted zones the Certs are spread over (round robin): Route53's quota is per zone.
const ZONES: usize = 8;
/// The operator's defaults (`blockwork run`).
const CONCURRENCY: u16 = 3;
const ACM_RATE: f64 = 5.0;
const ACM_BURST: f64 = 10.0;
const ROUTE53_RATE: f64 = 3.0;
const ROUTE53_BURST: f64 = 5.0;
/// How long the AWS calls are counted after every Cert is Ready.
const QUIET: Duration = Duration::from_secs(120);
const ACM_OPERATIONS: [&str; 6] = [
    "RequestCertificate",
    "DescribeCertificate",
    "ListCertificates",
    "ListTagsForCertificate",
    "DeleteCertificate",
    "AddTagsToCertificate",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if args.iter().any(|a| a == "--child") {
        runtime.block_on(child());
    } else if args.iter().any(|a| a == "--bench") {
        runtime.block_on(bench());
    } else {
        println!("the cert benchmark runs with `cargo bench -p blockwork-cert --bench thousand`");
    }
}

/// The child: the cert controller with the default flags, over all namespaces, until killed;
/// its metrics go to `BENCH_METRICS_FILE` every second.
async fn child() {
    let client = Client::try_default().await.unwrap();
    let args = CertArgs {
        dns_zones: std::env::var("BENCH_DNS_ZONES").unwrap(),
        aws_endpoint_url: Some(std::env::var("BENCH_AWS_ENDPOINT").unwrap()),
        aws_region: Some("us-east-1".into()),
        ..CertArgs::default()
    };
    let config = CertConfig::from_args(&args).unwrap();
    let mut registry = Registry::default();
    let metrics = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
    let runtime_metrics = RuntimeMetrics::register(registry.sub_registry_with_prefix("blockwork"));
    let registry = Arc::new(registry);
    let file = PathBuf::from(std::env::var("BENCH_METRICS_FILE").unwrap());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            let partial = file.with_extension("partial");
            std::fs::write(&partial, text).unwrap();
            std::fs::rename(&partial, &file).unwrap();
        }
    });
    blockwork_cert::run(client, config, runtime_metrics, metrics, None, CONCURRENCY, std::future::pending()).await.unwrap();
}

/// The bench binary itself in `--child` mode: the cert controller.
fn spawn_operator(kubeconfig: &Path, zones: &str, endpoint: &str, metrics_file: &Path) -> MeasuredChild {
    MeasuredChild::spawn(
        Command::new(std::env::current_exe().unwrap())
            .arg("--child")
            .env("KUBECONFIG", kubeconfig)
            .env("BENCH_DNS_ZONES", zones)
            .env("BENCH_AWS_ENDPOINT", endpoint)
            .env("BENCH_METRICS_FILE", metrics_file)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    )
    .unwrap()
}

/// The sum of every sample of `name` in the text exposition `text`.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, value| sum + value)
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

async fn ready_count(api: &Api<Cert>) -> usize {
    let certs = api.list(&ListParams::default()).await.unwrap();
    certs.items.iter().filter(|c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready)).count()
}

fn calls_by_operation(proxy: &FaultProxy) -> BTreeMap<String, usize> {
    proxy.all_calls().into_iter().collect()
}

async fn bench() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    plane.install_crds(&[Cert::crd()]).await.unwrap();
    let namespace = plane.namespace("bench-certs").await.unwrap();
    let client = plane.client();
    let moto = blockwork_testenv::emulators::moto().await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint()).await.unwrap();
    let zones = create_zones(&moto.endpoint(), &namespace).await;
    let zone_flag = zones.iter().map(|(name, id)| format!("{name}:{id}")).collect::<Vec<_>>().join(",");
    let metrics_file = plane.dir().join("cert-bench-metrics.txt");
    let _ = std::fs::remove_file(&metrics_file);

    let operator = spawn_operator(plane.kubeconfig_path(), &zone_flag, &proxy.endpoint(), &metrics_file);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, _) = operator.memory().unwrap();

    let api: Api<Cert> = Api::namespaced(client.clone(), &namespace);
    let started = Instant::now();
    futures::stream::iter(0..CERTS)
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
    let created_in = started.elapsed();
    eprintln!("created {CERTS} Certs in {created_in:.1?}");

    let mut peak_rss = 0;
    let mut last_report = Instant::now();
    let all_ready = loop {
        let ready = ready_count(&api).await;
        peak_rss = peak_rss.max(operator.memory().unwrap().0);
        if ready == CERTS {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: {ready} Ready", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "only {ready} of {CERTS} Certs are Ready after an hour");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let calls = calls_by_operation(&proxy);
    let (rss_ready, hwm_ready) = operator.memory().unwrap();
    let cpu = operator.cpu_seconds().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = std::fs::read_to_string(&metrics_file).unwrap();
    let throttled = metric_sum(&metrics, "cert_operator_throttling_events_total");
    let waits = metric_sum(&metrics, "cert_operator_rate_limit_wait_seconds_sum");
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=blockwork"))
        .await
        .unwrap()
        .items
        .len();

    eprintln!("all Ready; counting AWS calls for {} s of steady state", QUIET.as_secs());
    let before_quiet = proxy.all_calls().values().sum::<usize>();
    tokio::time::sleep(QUIET).await;
    let quiet_calls = proxy.all_calls().values().sum::<usize>() - before_quiet;
    let (rss_end, hwm_end) = operator.memory().unwrap();
    operator.kill();

    let acm: usize = calls.iter().filter(|(op, _)| ACM_OPERATIONS.contains(&op.as_str())).map(|(_, n)| n).sum();
    let route53: usize = calls.iter().filter(|(op, _)| !ACM_OPERATIONS.contains(&op.as_str())).map(|(_, n)| n).sum();
    // The fewest calls a Cert can cost: RequestCertificate and one DescribeCertificate (for the
    // validation record, and the issued certificate when ACM is quick; a slower ACM needs a
    // second one); a lookup and an UPSERT of the record. Plus one listing for adoption, shared.
    let minimal_acm = 2 * CERTS + 1;
    let minimal_route53_per_zone = 2 * CERTS.div_ceil(ZONES);
    let bound = |calls: usize, rate: f64, burst: f64| ((calls as f64 - burst).max(0.0) / rate).max(0.0);
    let lower_minimal = bound(minimal_acm, ACM_RATE, ACM_BURST).max(bound(minimal_route53_per_zone, ROUTE53_RATE, ROUTE53_BURST));
    let lower_made = bound(acm, ACM_RATE, ACM_BURST).max(bound(route53.div_ceil(ZONES), ROUTE53_RATE, ROUTE53_BURST));

    println!();
    println!("| {CERTS} Certs created at once ({ZONES} hosted zones, concurrency {CONCURRENCY}, default rate limits) | |");
    println!("|---|---|");
    println!("| Certs created (API server) | {:.1} s |", created_in.as_secs_f64());
    println!("| time until all Ready | {:.0} s |", all_ready.as_secs_f64());
    println!(
        "| lower bound from the rate limits, minimal calls ({minimal_acm} ACM at {ACM_RATE}/s burst {ACM_BURST}; {minimal_route53_per_zone} Route53 per zone at {ROUTE53_RATE}/s burst {ROUTE53_BURST}) | {lower_minimal:.0} s |"
    );
    println!("| lower bound from the rate limits, for the calls actually made | {lower_made:.0} s |");
    for (operation, count) in &calls {
        println!("| AWS calls: {operation} | {count} ({:.2} per Cert) |", *count as f64 / CERTS as f64);
    }
    println!("| AWS calls: ACM total / Route53 total | {acm} / {route53} |");
    println!("| throttling events (cert_operator_throttling_events_total) | {throttled} |");
    println!("| time spent waiting for rate-limiter tokens, summed over calls | {waits:.0} s |");
    println!("| ConfigMaps published | {configmaps} |");
    println!(
        "| operator VmRSS: idle / peak sampled / when all Ready / after the quiet window | {} / {} / {} / {} |",
        mib(idle_rss),
        mib(peak_rss),
        mib(rss_ready),
        mib(rss_end)
    );
    println!("| operator VmHWM: when all Ready / at the end | {} / {} |", mib(hwm_ready), mib(hwm_end));
    println!("| operator CPU until all Ready | {cpu:.1} s |");
    println!("| AWS calls in the {} s after all were Ready | {quiet_calls} |", QUIET.as_secs());
}
