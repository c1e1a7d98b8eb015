//! Cert export benchmark (issue 30): 500 Certs exporting their certificate into Secrets, created
//! at once against the local control plane and moto, behind a fault proxy that throttles as AWS
//! does (AWS's own buckets), with the operator's defaults (AWS's quotas × 0.8, concurrency 3,
//! `--export-secrets`).
//!
//!     cargo bench -p blockwork-cert --bench exporting
//!
//! The cert controller runs in a child process (this binary again, `--child`, release build) so
//! that its memory is its own; it reaches the API server through a proxy that counts its
//! requests. The parent reports:
//!
//! 1. the time until every Secret is written, against the floor the operator's quotas allow for
//!    the minimal calls (RequestCertificate, DescribeCertificate and ExportCertificate per Cert),
//!    and AWS calls by operation;
//! 2. the **steady state** over a quiet window (`BENCH_QUIET_SECS`, default 600): AWS calls and
//!    Kubernetes requests per exporting Cert and hour, while ACM renews `BENCH_RENEWALS` (default
//!    10) certificates behind the operator's back (the fault proxy), with the time until each
//!    Secret holds the renewed certificate;
//! 3. the child's VmRSS: idle, peak, when all are exported, after the quiet window.
//!
//! `BENCH_CERTS` changes the count; `BENCH_QUOTA_SCALE` scales AWS's buckets and the operator's
//! share of them alike (`benches/support`). Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use blockwork_aws::quota::Service;
use blockwork_cert::api::ExportSpec;
use blockwork_cert::{Cert, CertArgs, CertSpec};
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::kube_proxy::KubeProxy;
use blockwork_testenv::measure::mib;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, PostParams};
use support::{CONCURRENCY, env_or};

const ZONES: usize = 4;

fn main() {
    support::main("exporting", child(), bench());
}

/// The cert controller with the default flags, the bench's hosted zones and `--export-secrets`.
async fn child() {
    let args = CertArgs { dns_zones: std::env::var("BENCH_DNS_ZONES").unwrap(), export_secrets: true, ..CertArgs::default() };
    support::controller(args, Vec::new(), blockwork_identity::Settings::default()).await;
}

/// How many Certs have their Secret written (`status.export`), and with which serial each.
async fn exported(api: &Api<Cert>) -> BTreeMap<String, String> {
    let certs = api.list(&ListParams::default()).await.unwrap();
    certs
        .items
        .into_iter()
        .filter_map(|c| {
            let serial = c.status.as_ref()?.observation.export.as_ref()?.serial.clone();
            Some((c.metadata.name?, serial))
        })
        .collect()
}

async fn bench() {
    let certs = usize::try_from(env_or("BENCH_CERTS", 500)).unwrap();
    let quiet = Duration::from_secs(env_or("BENCH_QUIET_SECS", 600));
    let renewals = usize::try_from(env_or("BENCH_RENEWALS", 10)).unwrap().min(certs);

    let plane = support::control_plane().await;
    let namespace = plane.namespace("bench-export").await.unwrap();
    let client = plane.client();
    let moto = blockwork_testenv::emulators::moto().await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint()).await.unwrap();
    let mut zones = Vec::new();
    for i in 0..ZONES {
        let name = format!("z{i}.{namespace}.bench");
        zones.push((blockwork_testenv::aws::hosted_zone_at(&moto.endpoint(), &name).await, name));
    }
    proxy.enforce_quotas(support::aws_quotas(&[]));
    let zone_flag = zones.iter().map(|(id, name)| format!("{name}:{id}")).collect::<Vec<_>>().join(",");
    let kube = KubeProxy::start(plane).await.unwrap();
    let operator = support::spawn_operator(kube.kubeconfig_path(), &proxy.endpoint(), None, &[("BENCH_DNS_ZONES", &zone_flag)]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, _) = operator.memory().unwrap();

    // 1. N exporting Certs at once.
    let api: Api<Cert> = Api::namespaced(client.clone(), &namespace);
    let started = Instant::now();
    futures::stream::iter(0..certs)
        .map(|i| {
            let (api, zone) = (api.clone(), zones[i % ZONES].1.clone());
            async move {
                let spec = CertSpec {
                    service_name: format!("svc{i}"),
                    environment: "bench".into(),
                    dns_zone: Some(blockwork_cert::DnsZoneRef { id: None, name: Some(zone) }),
                    export: Some(ExportSpec { secret_name: format!("svc{i}-tls"), secret_template: None }),
                    ..CertSpec::default()
                };
                api.create(&PostParams::default(), &Cert::new(&format!("cert-{i}"), spec)).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
    let mut peak_rss = 0;
    let mut last_report = Instant::now();
    loop {
        let done = exported(&api).await.len();
        peak_rss = peak_rss.max(operator.memory().unwrap().0);
        if done >= certs {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: {done} of {certs} exported", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "only {done} of {certs} exported after an hour");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let all_exported = started.elapsed();
    let calls: BTreeMap<String, usize> = proxy.all_calls().into_iter().collect();
    let (rss_exported, hwm_exported) = operator.memory().unwrap();
    let cpu = operator.cpu_seconds().unwrap();
    let (config, _) = support::operator_aws_args(Vec::new()).config().unwrap();
    let acm = config.quotas.service(Service::Acm);
    let n = u64::try_from(certs).unwrap();
    let floor = ["RequestCertificate", "DescribeCertificate", "ExportCertificate"]
        .iter()
        .map(|op| acm.operation(op).seconds_for(n))
        .fold(0.0, f64::max);

    // 2. Steady state, while ACM renews some certificates.
    eprintln!("all exported in {all_exported:.0?}; steady state for {} s with {renewals} renewals", quiet.as_secs());
    kube.record_requests();
    let before = proxy.all_calls();
    let quiet_started = Instant::now();
    let mut renewed = BTreeMap::new();
    for i in 0..renewals {
        let name = format!("cert-{i}");
        let arn = api.get(&name).await.unwrap().status.unwrap().observation.certificate_arn.unwrap();
        renewed.insert(name, (proxy.renew_certificate(&arn).await.unwrap().serial, None::<Duration>));
    }
    while quiet_started.elapsed() < quiet {
        let now = exported(&api).await;
        for (name, (serial, seen)) in &mut renewed {
            if seen.is_none() && now.get(name) == Some(serial) {
                *seen = Some(quiet_started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let after = proxy.all_calls();
    let requests = kube.take_requests();
    let quiet_calls: BTreeMap<&String, usize> =
        after.iter().map(|(op, count)| (op, count - before.get(op).copied().unwrap_or(0))).filter(|(_, count)| *count > 0).collect();
    let total_quiet: usize = quiet_calls.values().sum();
    let cert_hours = certs as f64 * quiet.as_secs_f64() / 3600.0;
    // The bench's own reads of the Certs go straight to the API server; these are the operator's.
    let secret_gets = requests.iter().filter(|r| r.starts_with("GET ") && r.contains("/secrets/")).count();
    let secret_writes = requests.iter().filter(|r| !r.starts_with("GET ") && r.contains("/secrets")).count();
    let (rss_quiet, hwm_quiet) = operator.memory().unwrap();
    operator.kill();

    let load = support::load_average();
    println!();
    println!(
        "| {certs} exporting Certs created at once ({ZONES} hosted zones, concurrency {CONCURRENCY}, default quotas; the proxy throttles with AWS's) | |"
    );
    println!("|---|---|");
    println!("| **time until every Secret is written** | **{:.0} s** |", all_exported.as_secs_f64());
    println!("| floor from the operator's quotas (RequestCertificate, DescribeCertificate, ExportCertificate per Cert) | {floor:.0} s |");
    for (operation, count) in &calls {
        println!("| AWS calls until then: {operation} | {count} ({:.3} per Cert) |", *count as f64 / certs as f64);
    }
    println!("| operator CPU until then | {cpu:.1} s |");
    println!(
        "| **steady state: AWS calls per exporting Cert and hour** ({} s, {renewals} renewals among them) | **{:.4}** ({total_quiet} calls) |",
        quiet.as_secs(),
        total_quiet as f64 / cert_hours
    );
    for (operation, count) in &quiet_calls {
        println!("| steady state: {operation} | {count} |");
    }
    println!(
        "| steady state: the operator's Secret GETs / writes per exporting Cert and hour | {:.3} / {:.3} |",
        secret_gets as f64 / cert_hours,
        secret_writes as f64 / cert_hours
    );
    let seen: Vec<f64> = renewed.values().filter_map(|(_, seen)| seen.map(|d| d.as_secs_f64())).collect();
    let slowest = seen.iter().copied().fold(0.0, f64::max);
    println!(
        "| renewals exported into their Secret | {} of {renewals}, the slowest after {slowest:.0} s (the listing sweeps every 5 min) |",
        seen.len()
    );
    println!(
        "| operator VmRSS: idle / peak sampled / all exported / after the quiet window | {} / {} / {} / {} |",
        mib(idle_rss),
        mib(peak_rss),
        mib(rss_exported),
        mib(rss_quiet)
    );
    println!("| operator VmHWM: all exported / after the quiet window | {} / {} |", mib(hwm_exported), mib(hwm_quiet));
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {load} |");
}
