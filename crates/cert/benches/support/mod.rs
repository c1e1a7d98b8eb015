//! What the Cert benchmarks share: the binary's two modes (the bench, and `--child`: the cert
//! controller in a process of its own, so that its memory and CPU are its own), the control plane
//! with the CRDs the controller needs, the child's metrics file, and its optional traces.
//!
//! `BENCH_QUOTA_SCALE` (a factor in (0, 1], default 1) runs a bench at that fraction of AWS's
//! quotas: the fault proxy enforces AWS's buckets scaled by it ([`aws_quotas`]) and the operator
//! holds its usual share of them (the safety factor) scaled by it too ([`operator_aws_args`]), so
//! that every rate, the floor and the ratio of the operator's share to AWS's stay as in
//! production while the emulators answer fewer calls per second. The child reads it from the
//! environment it inherits.
//!
//! The controller reads every namespace's grant from the AwsIdentities (ADR 0014), so the
//! AwsIdentity CRD is installed even when no mapping exists: without it the mappings are never
//! read and every Cert waits, refused as `AwsIdentitiesNotRead`.

// Each bench binary uses its part of this module.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::quota::{DEFAULT_SAFETY_FACTOR, Override, Quotas};
use blockwork_aws::{Aws, AwsArgs, AwsMetrics, Seed};
use blockwork_cert::{Cert, CertArgs, CertConfig, CertMetrics};
use blockwork_identity::{AwsIdentity, Settings};
use blockwork_runtime::RuntimeMetrics;
use blockwork_testenv::control_plane::ControlPlane;
use blockwork_testenv::measure::MeasuredChild;
use kube::{Client, CustomResourceExt as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use prometheus_client::registry::Registry;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The allocator of the `blockwork` binary (its main.rs), so that the child's memory is the
/// operator's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The operator's default (`blockwork run`).
pub const CONCURRENCY: u16 = 3;

/// Where the child writes its metrics every second (the text exposition).
const METRICS_FILE: &str = "BENCH_METRICS_FILE";
/// The child's AWS endpoint (the fault proxy).
const AWS_ENDPOINT: &str = "BENCH_AWS_ENDPOINT";
/// The fraction of AWS's quotas the bench runs at (see the module's header).
pub const QUOTA_SCALE: &str = "BENCH_QUOTA_SCALE";
/// Set: the child exports its traces over OTLP/HTTP to this collector, as `blockwork run` does
/// with `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub const TRACES_ENDPOINT: &str = "BENCH_TRACES_ENDPOINT";

/// `cargo bench` runs the binary with `--bench`; the bench runs it again with `--child`;
/// `cargo test --all-targets` runs it with neither, and it does nothing.
pub fn main(name: &str, child: impl Future<Output = ()>, bench: impl Future<Output = ()>) {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if args.iter().any(|a| a == "--child") {
        runtime.block_on(child);
    } else if args.iter().any(|a| a == "--bench") {
        runtime.block_on(bench);
    } else {
        println!("this benchmark runs with `cargo bench -p blockwork-cert --bench {name}` (minutes, hundreds of Certs)");
    }
}

pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `BENCH_QUOTA_SCALE`, 1 when unset; a value outside (0, 1] stops the bench.
pub fn quota_scale() -> f64 {
    let Ok(text) = std::env::var(QUOTA_SCALE) else { return 1.0 };
    let scale: f64 = text.parse().unwrap_or_else(|_| panic!("{QUOTA_SCALE}={text:?} is not a number"));
    assert!(scale.is_finite() && scale > 0.0 && scale <= 1.0, "{QUOTA_SCALE} must be in (0, 1], not {scale}");
    scale
}

/// The buckets the fault proxy enforces: AWS's, with `overrides` (an account's raised quotas),
/// scaled by `BENCH_QUOTA_SCALE`.
pub fn aws_quotas(overrides: &[Override]) -> Quotas {
    Quotas::aws().with(overrides).scaled(quota_scale()).unwrap()
}

/// The child's AWS settings: the operator's defaults with `overrides`, its safety factor scaled
/// by `BENCH_QUOTA_SCALE`; also what the bench computes the operator's floor from.
pub fn operator_aws_args(overrides: Vec<Override>) -> AwsArgs {
    AwsArgs { quotas: overrides, safety_factor: DEFAULT_SAFETY_FACTOR * quota_scale(), ..AwsArgs::default() }
}

/// The test control plane with the Cert and AwsIdentity CRDs.
pub async fn control_plane() -> &'static ControlPlane {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    plane.install_crds(&[Cert::crd(), AwsIdentity::crd()]).await.unwrap();
    plane
}

/// The child: the cert controller with `args`, the AWS `quotas` where they differ from AWS's and
/// the mapping `settings`, over all namespaces, the operator's defaults otherwise, until killed.
pub async fn controller(args: CertArgs, quotas: Vec<Override>, settings: Settings) {
    if let Ok(endpoint) = std::env::var(TRACES_ENDPOINT) {
        export_traces(&endpoint);
    }
    let client = Client::try_default().await.unwrap();
    let config = CertConfig::from_args(&args).unwrap();
    let aws_args =
        AwsArgs { endpoint_url: Some(std::env::var(AWS_ENDPOINT).unwrap()), region: Some("us-east-1".into()), ..operator_aws_args(quotas) };
    let (aws_config, _) = aws_args.config().unwrap();
    let mut registry = Registry::default();
    let metrics = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
    let runtime_metrics = RuntimeMetrics::register(registry.sub_registry_with_prefix("blockwork"));
    let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Cert]));
    if let Ok(file) = std::env::var(METRICS_FILE) {
        tokio::spawn(write_metrics(Arc::new(registry), PathBuf::from(file)));
    }
    let aws = Aws::new(aws_config, aws_metrics);
    let identities = blockwork_identity::Identities::new(client.clone(), settings);
    blockwork_cert::run(
        client,
        config,
        aws,
        identities,
        runtime_metrics,
        metrics,
        blockwork_runtime::Namespaces::All,
        CONCURRENCY,
        std::future::pending(),
    )
    .await;
}

/// Blockwork's spans to the collector at `endpoint`, as `blockwork run` exports them (its
/// `telemetry.rs`: the spans of `blockwork_runtime::trace::TARGET`, batched).
fn export_traces(endpoint: &str) {
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(format!("{endpoint}/v1/traces")).build().unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_batch_exporter(exporter).build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("blockwork"))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.target() == blockwork_runtime::trace::TARGET));
    tracing_subscriber::registry().with(layer).init();
    blockwork_runtime::trace::enable();
    // The child is killed, never stopped: the provider lives as long as the process.
    std::mem::forget(provider);
}

async fn write_metrics(registry: Arc<Registry>, file: PathBuf) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let partial = file.with_extension("partial");
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, &file).unwrap();
    }
}

/// The bench binary itself in `--child` mode against the API server of `kubeconfig` and AWS at
/// `endpoint`, with `env` (its own settings) and, when `metrics_file` is given, its metrics there.
pub fn spawn_operator(kubeconfig: &Path, endpoint: &str, metrics_file: Option<&Path>, env: &[(&str, &str)]) -> MeasuredChild {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .arg("--child")
        .env("KUBECONFIG", kubeconfig)
        .env(AWS_ENDPOINT, endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(file) = metrics_file {
        let _ = std::fs::remove_file(file);
        command.env(METRICS_FILE, file);
    }
    MeasuredChild::spawn(&mut command).unwrap()
}

/// The sum of every sample of `name` in the text exposition `text`.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.split(" # ").next()?.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, value| sum + value)
}

/// The load average (1, 5, 15 minutes): the machine is shared, and every figure says how busy
/// it was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}
