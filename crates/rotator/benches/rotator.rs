//! Rotator benchmark: memory with 10,000 unrelated and 100 annotated Secrets, and the latency
//! from a source update to the target written, over 200 rotations, against the local control
//! plane of `blockwork-testenv`.
//!
//!     cargo bench -p blockwork-rotator --bench rotator
//!
//! The rotator runs in a child process (this binary again, `--child rotator`) so that its
//! resident memory is its own; the parent creates the Secrets, reads the child's
//! `/proc/<pid>/status` and times the rotations through a watch on the targets. For comparison
//! the child can also run the caches a naive controller would keep (`--child full-cache`: a
//! reflector of every Secret; `--child metadata-cache`: a reflector of every Secret's metadata).
//!
//! The second table runs the full binary as it runs in a cluster (`blockwork run
//! --controllers=rotator --log-format=json`, release build, built by this bench with `cargo build
//! --release -p blockwork` unless `BLOCKWORK_BIN` names one): its idle memory before any Secret
//! exists, then, started after the Secrets exist, its memory and start-up CPU once it has
//! settled, the latency of 200 rotations and its CPU per rotation, and its memory after a restart
//! with twice the unrelated Secrets. `ROTATOR_BENCH_COMPARE="<command> <args>…"` adds a column
//! for another rotator run the same way (e.g. a build of the original Go operator): it gets 100
//! sources of its own, annotated with the prefix [`COMPARE_PREFIX`], beside ours.
//! Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use blockwork_rotator::{Config, Metrics, RotatorArgs};
use blockwork_testenv::measure::{MeasuredChild, mib};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt as _;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use prometheus_client::registry::Registry;
use serde_json::json;

const UNRELATED: usize = 10_000;
const SOURCES: usize = 100;
const ROTATIONS: usize = 200;
const SETTLE: Duration = Duration::from_secs(5);
/// Annotation prefix of the comparison operator's own sources (`ROTATOR_BENCH_COMPARE`).
const COMPARE_PREFIX: &str = "rotator.compare.bench";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        runtime.block_on(child(&args[i + 1]));
    } else if args.iter().any(|a| a == "--bench") {
        runtime.block_on(bench());
    } else {
        println!("the rotator benchmark runs with `cargo bench -p blockwork-rotator --bench rotator`");
    }
}

/// The child: one of the three modes, until killed.
async fn child(mode: &str) {
    let client = blockwork_runtime::client::infer().await.unwrap();
    match mode {
        "rotator" => {
            let mut registry = Registry::default();
            let metrics = Metrics::register(&mut registry);
            let config = Config::new(&RotatorArgs::default(), &[], 4).unwrap();
            blockwork_rotator::run(client, config, metrics, std::future::pending()).await.unwrap();
        }
        "full-cache" => hold(Api::<Secret>::all(client)).await,
        "metadata-cache" => hold(Api::<PartialObjectMeta<Secret>>::all(client)).await,
        other => panic!("unknown child mode {other}"),
    }
}

/// Keeps a reflector of everything `api` lists, printing its size once it is complete.
async fn hold<K>(api: Api<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default())).default_backoff().touched_objects();
    let printer = async {
        reader.wait_until_ready().await.unwrap();
        eprintln!("cache holds {} objects", reader.len());
    };
    let drain = stream.for_each(|_| std::future::ready(()));
    futures::join!(printer, drain);
}

/// The bench binary itself in `--child mode`.
fn spawn_child(mode: &str, kubeconfig: &Path) -> MeasuredChild {
    MeasuredChild::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args(["--child", mode])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    )
    .unwrap()
}

/// A rotator binary run as it runs in a cluster, with its own sources.
struct Operator {
    label: String,
    program: PathBuf,
    args: Vec<String>,
    keys: blockwork_rotator::Keys,
    namespace: String,
}

impl Operator {
    /// `blockwork run --controllers=rotator` with the flags of `config/rotator/manager.yaml`,
    /// except leader election (a killed leader's Lease would hold up the next start) and with
    /// loopback ports for the probes and metrics.
    fn blockwork(namespace: String) -> Self {
        let port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let args = vec![
            "run".to_owned(),
            "--controllers=rotator".to_owned(),
            "--log-format=json".to_owned(),
            format!("--health-probe-bind-address={}", port()),
            format!("--metrics-bind-address={}", port()),
        ];
        Self { label: "blockwork".to_owned(), program: blockwork_binary(), args, keys: blockwork_rotator::Keys::default(), namespace }
    }

    /// The operator of `ROTATOR_BENCH_COMPARE`, if set; its sources use [`COMPARE_PREFIX`].
    fn compare(namespace: String) -> Option<Self> {
        let command = std::env::var("ROTATOR_BENCH_COMPARE").ok().filter(|c| !c.trim().is_empty())?;
        let mut words = command.split_whitespace().map(str::to_owned);
        let program = PathBuf::from(words.next()?);
        let label = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Some(Self { label, program, args: words.collect(), keys: blockwork_rotator::Keys::new(COMPARE_PREFIX).unwrap(), namespace })
    }

    fn spawn(&self, kubeconfig: &Path) -> MeasuredChild {
        MeasuredChild::spawn(
            Command::new(&self.program)
                .args(&self.args)
                .env("KUBECONFIG", kubeconfig)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .unwrap()
    }
}

/// `BLOCKWORK_BIN`, or the release build of the `blockwork` binary (built now, into the same
/// target directory).
fn blockwork_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BLOCKWORK_BIN") {
        return path.into();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["build", "--release", "-p", "blockwork", "--bin", "blockwork", "--message-format=json"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "building the blockwork binary failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|message| message["executable"].as_str().map(PathBuf::from))
        .rfind(|path| path.file_name().is_some_and(|name| name == "blockwork"))
        .expect("cargo names the blockwork executable")
}

/// Waits until `child` has used no CPU for 2 s (initial lists and catch-up done); returns the CPU
/// seconds it used so far.
async fn settle(child: &MeasuredChild) -> f64 {
    let started = Instant::now();
    let mut last = child.cpu_seconds().unwrap();
    let mut quiet = 0;
    while quiet < 4 {
        assert!(started.elapsed() < Duration::from_secs(300), "the operator never settled");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = child.cpu_seconds().unwrap();
        // One clock tick (10 ms) in 500 ms is a timer or the runtime's housekeeping, not work.
        quiet = if now - last <= 0.011 { quiet + 1 } else { 0 };
        last = now;
    }
    last
}

fn cert(i: usize) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![format!("key-{i}.bench.example")]).unwrap().self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Certificates, each one used once.
struct Certs(usize);

impl Certs {
    fn next(&mut self) -> (String, String) {
        self.0 += 1;
        cert(self.0)
    }
}

fn secret(name: &str, annotations: BTreeMap<String, String>, data: BTreeMap<String, ByteString>, type_: &str) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), annotations: Some(annotations), ..ObjectMeta::default() },
        type_: Some(type_.into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn tls_data((crt, key): &(String, String)) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        ("tls.crt".to_owned(), ByteString(crt.clone().into_bytes())),
        ("tls.key".to_owned(), ByteString(key.clone().into_bytes())),
    ])
}

/// `SOURCES` sources `source-<i>` naming `target-<i>`, half of them with the JWKS opt-in; returns
/// each target's expected `next-tls.crt`.
async fn create_sources(api: &Api<Secret>, keys: &blockwork_rotator::Keys, certs: &mut Certs) -> BTreeMap<String, String> {
    let mut expected = BTreeMap::new();
    let sources: Vec<Secret> = (0..SOURCES)
        .map(|i| {
            let mut annotations =
                BTreeMap::from([(keys.source.clone(), "true".to_owned()), (keys.destination.clone(), format!("target-{i}"))]);
            if i % 2 == 0 {
                annotations.insert(keys.jwks.clone(), "true".into());
            }
            let pair = certs.next();
            expected.insert(format!("target-{i}"), pair.0.clone());
            secret(&format!("source-{i}"), annotations, tls_data(&pair), "kubernetes.io/tls")
        })
        .collect();
    create_all(api, sources).await;
    expected
}

async fn create_all(api: &Api<Secret>, secrets: Vec<Secret>) {
    futures::stream::iter(secrets)
        .map(|s| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &s).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
}

/// Waits until every target's next-tls.crt is its source's certificate.
async fn wait_for_targets(api: &Api<Secret>, expected: &BTreeMap<String, String>) -> Duration {
    let started = Instant::now();
    loop {
        let targets = api.list(&kube::api::ListParams::default()).await.unwrap();
        let done = expected
            .iter()
            .filter(|(target, crt)| {
                targets.items.iter().any(|t| {
                    t.name_any() == **target && t.data.as_ref().and_then(|d| d.get("next-tls.crt")).is_some_and(|c| c.0 == crt.as_bytes())
                })
            })
            .count();
        if done == expected.len() {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(300), "only {done} of {} targets are up to date", expected.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// 10,000 Secrets the rotator has no business with: 2 KiB of data each, every other one with the
/// annotation `kubectl apply` leaves (its whole manifest, data included; 3 KB here).
async fn create_unrelated(api: &Api<Secret>) {
    let payload = ByteString((0..2048).map(|i| (i % 251) as u8).collect());
    let unrelated: Vec<Secret> = (0..UNRELATED)
        .map(|i| {
            let mut annotations = BTreeMap::new();
            if i % 2 == 0 {
                annotations.insert("kubectl.kubernetes.io/last-applied-configuration".to_owned(), "x".repeat(3000));
            }
            secret(&format!("unrelated-{i}"), annotations, BTreeMap::from([("payload".to_owned(), payload.clone())]), "Opaque")
        })
        .collect();
    create_all(api, unrelated).await;
}

/// Renews every source while nothing rotates them.
async fn renew_all(api: &Api<Secret>, expected: &mut BTreeMap<String, String>, certs: &mut Certs) {
    for i in 0..SOURCES {
        let (crt, key) = certs.next();
        let patch = json!({ "data": { "tls.crt": b64(&crt), "tls.key": b64(&key) } });
        api.patch(&format!("source-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        expected.insert(format!("target-{i}"), crt);
    }
}

/// What `ROTATIONS` rotations, one at a time, cost the rotator running as `child`.
struct Rotations {
    /// Sorted.
    latencies: Vec<Duration>,
    cpu_seconds: f64,
}

impl Rotations {
    /// Each source renewed in turn, timed from just before the source's PATCH to the watch event
    /// of its target with the new certificate in next-tls.
    async fn run(api: &Api<Secret>, child: &MeasuredChild, certs: &mut Certs) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<u8>, Instant)>();
        let watch_api = api.clone();
        let watch = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(watch_api, watcher::Config::default()).applied_objects());
            while let Some(Ok(target)) = stream.next().await {
                let next = target.data.as_ref().and_then(|d| d.get("next-tls.crt")).map(|c| c.0.clone()).unwrap_or_default();
                let _ = tx.send((target.name_any(), next, Instant::now()));
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        while rx.try_recv().is_ok() {}
        let cpu_before = child.cpu_seconds().unwrap();
        let mut latencies = Vec::with_capacity(ROTATIONS);
        for r in 0..ROTATIONS {
            let i = r % SOURCES;
            let (crt, key) = certs.next();
            let patch = json!({ "data": { "tls.crt": b64(&crt), "tls.key": b64(&key) } });
            let started = Instant::now();
            api.patch(&format!("source-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            let target = format!("target-{i}");
            loop {
                let (name, next, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
                if name == target && next == crt.as_bytes() {
                    latencies.push(at - started);
                    break;
                }
            }
        }
        // Count the work that follows the last write (the events, which wait until the rotator
        // is idle): at least 1 s, then until a quarter second passes without any CPU.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut cpu = child.cpu_seconds().unwrap();
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = child.cpu_seconds().unwrap();
            if now == cpu {
                break;
            }
            cpu = now;
        }
        let cpu_seconds = cpu - cpu_before;
        watch.abort();
        latencies.sort();
        Self { latencies, cpu_seconds }
    }

    fn p(&self, percentile: f64) -> f64 {
        let rank = ((percentile / 100.0) * self.latencies.len() as f64).ceil() as usize;
        ms(self.latencies[rank.clamp(1, self.latencies.len()) - 1])
    }

    fn mean(&self) -> f64 {
        ms(self.latencies.iter().sum::<Duration>() / self.latencies.len() as u32)
    }

    fn min(&self) -> f64 {
        ms(self.latencies[0])
    }

    fn max(&self) -> f64 {
        ms(self.latencies[self.latencies.len() - 1])
    }

    fn cpu_per_rotation_ms(&self) -> f64 {
        self.cpu_seconds * 1000.0 / ROTATIONS as f64
    }
}

/// One full binary's figures, for the second table.
#[derive(Default)]
struct BinaryRun {
    idle: (u64, u64),
    start_cpu: f64,
    started: (u64, u64),
    rotations: Option<Rotations>,
    after_rotations: (u64, u64),
    doubled: (u64, u64),
}

async fn bench() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let kubeconfig = plane.kubeconfig_path().to_owned();
    let client = plane.client();
    let keys = blockwork_rotator::Keys::default();
    let sources_ns = plane.namespace("bench-sources").await.unwrap();
    let unrelated_ns = plane.namespace("bench-unrelated").await.unwrap();
    let sources_api: Api<Secret> = Api::namespaced(client.clone(), &sources_ns);
    let unrelated_api: Api<Secret> = Api::namespaced(client.clone(), &unrelated_ns);
    let mut certs = Certs(0);
    let mut operators = vec![Operator::blockwork(sources_ns.clone())];
    if let Some(compare) = Operator::compare(plane.namespace("bench-compare").await.unwrap()) {
        operators.push(compare);
    }
    let labels: Vec<&str> = operators.iter().map(|o| o.label.as_str()).collect();
    println!("rotator benchmark: {SOURCES} sources, {UNRELATED} unrelated Secrets, {ROTATIONS} rotations; binaries: {labels:?}");
    let mut runs: Vec<BinaryRun> = operators.iter().map(|_| BinaryRun::default()).collect();

    // 0. Each full binary before any Secret exists.
    for (operator, run) in operators.iter().zip(&mut runs) {
        let child = operator.spawn(&kubeconfig);
        settle(&child).await;
        run.idle = child.memory().unwrap();
    }

    // 1. The rotator with only the sources.
    let rotator = spawn_child("rotator", &kubeconfig);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rotator.memory().unwrap();
    let started = Instant::now();
    let mut expected = create_sources(&sources_api, &keys, &mut certs).await;
    wait_for_targets(&sources_api, &expected).await;
    let first_sight = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let only_sources = rotator.memory().unwrap();
    rotator.kill();

    // 2. Restarted with only the sources (and their targets) in the cluster: the baseline of a
    //    start-up.
    let rotator = spawn_child("rotator", &kubeconfig);
    tokio::time::sleep(SETTLE).await;
    let restarted_small = rotator.memory().unwrap();

    // 3. 10,000 unrelated Secrets stream past the running rotator.
    let started = Instant::now();
    create_unrelated(&unrelated_api).await;
    let created_in = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let cpu_streamed = rotator.cpu_seconds().unwrap();
    let with_unrelated = rotator.memory().unwrap();
    rotator.kill();

    // 4. Every source renewed while the rotator is down; a fresh rotator lists all 10,200
    //    Secrets and catches up with 100 rotations.
    renew_all(&sources_api, &mut expected, &mut certs).await;
    let started = Instant::now();
    let rotator = spawn_child("rotator", &kubeconfig);
    wait_for_targets(&sources_api, &expected).await;
    let catch_up = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let restarted = rotator.memory().unwrap();

    // 5. Latency: 200 rotations, one at a time.
    let library = Rotations::run(&sources_api, &rotator, &mut certs).await;
    let after_rotations = rotator.memory().unwrap();
    rotator.kill();

    // 6. What caching every Secret would cost, in the same cluster.
    let mut naive = Vec::new();
    for mode in ["full-cache", "metadata-cache"] {
        let cache = spawn_child(mode, &kubeconfig);
        tokio::time::sleep(Duration::from_secs(15)).await;
        naive.push((mode, cache.memory().unwrap()));
        cache.kill();
    }

    // 7. Each full binary started after its Secrets exist, as in a cluster: a comparison
    //    operator's sources are created and get their targets first (from a run not measured).
    for operator in operators.iter().skip(1) {
        let api = Api::namespaced(client.clone(), &operator.namespace);
        let expected = create_sources(&api, &operator.keys, &mut certs).await;
        let child = operator.spawn(&kubeconfig);
        wait_for_targets(&api, &expected).await;
        child.kill();
    }
    for (operator, run) in operators.iter().zip(&mut runs) {
        let api = Api::namespaced(client.clone(), &operator.namespace);
        let child = operator.spawn(&kubeconfig);
        run.start_cpu = settle(&child).await;
        run.started = child.memory().unwrap();
        run.rotations = Some(Rotations::run(&api, &child, &mut certs).await);
        run.after_rotations = child.memory().unwrap();
    }

    // 8. Twice as many unrelated Secrets, and a restart: memory does not follow their number.
    let more_ns = plane.namespace("bench-unrelated-more").await.unwrap();
    create_unrelated(&Api::namespaced(client.clone(), &more_ns)).await;
    let rotator = spawn_child("rotator", &kubeconfig);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let doubled = rotator.memory().unwrap();
    rotator.kill();
    for (operator, run) in operators.iter().zip(&mut runs) {
        let child = operator.spawn(&kubeconfig);
        settle(&child).await;
        run.doubled = child.memory().unwrap();
    }

    println!();
    println!("| phase | VmRSS | VmHWM (peak) |");
    println!("|---|---|---|");
    println!("| rotator started, no Secrets yet | {} | {} |", mib(idle.0), mib(idle.1));
    println!(
        "| {SOURCES} sources created, their {SOURCES} targets written ({:.1} s) | {} | {} |",
        first_sight.as_secs_f64(),
        mib(only_sources.0),
        mib(only_sources.1)
    );
    println!("| restarted with those {} Secrets only | {} | {} |", 2 * SOURCES, mib(restarted_small.0), mib(restarted_small.1));
    println!(
        "| + {UNRELATED} unrelated Secrets created while it runs ({:.0} s; its CPU {cpu_streamed:.1} s) | {} | {} |",
        created_in.as_secs_f64(),
        mib(with_unrelated.0),
        mib(with_unrelated.1)
    );
    println!(
        "| restarted after {SOURCES} renewals while down: initial list of {} Secrets, {SOURCES} catch-up rotations in {:.1} s | {} | {} |",
        UNRELATED + 2 * SOURCES,
        catch_up.as_secs_f64(),
        mib(restarted.0),
        mib(restarted.1)
    );
    println!("| after {ROTATIONS} more rotations | {} | {} |", mib(after_rotations.0), mib(after_rotations.1));
    println!(
        "| restarted with {} more unrelated Secrets ({} in all) | {} | {} |",
        UNRELATED,
        2 * UNRELATED + 2 * SOURCES,
        mib(doubled.0),
        mib(doubled.1)
    );
    for (mode, (rss, hwm)) in &naive {
        println!("| for comparison, `--child {mode}`: a reflector of every Secret | {} | {} |", mib(*rss), mib(*hwm));
    }
    println!();
    println!("| latency, source update → target written ({ROTATIONS} rotations, one at a time) | |");
    println!("|---|---|");
    println!("| p50 | {:.1} ms |", library.p(50.0));
    println!("| p99 | {:.1} ms |", library.p(99.0));
    println!("| mean | {:.1} ms |", library.mean());
    println!("| min / max | {:.1} / {:.1} ms |", library.min(), library.max());
    println!("| rotator CPU per rotation | {:.2} ms |", library.cpu_per_rotation_ms());

    println!();
    let in_cluster = UNRELATED + 2 * SOURCES * operators.len();
    println!("| full binary | {} |", labels.join(" | "));
    println!("|---|{}", "---|".repeat(operators.len()));
    let row = |what: String, cell: &dyn Fn(&BinaryRun) -> String| {
        println!("| {what} | {} |", runs.iter().map(cell).collect::<Vec<_>>().join(" | "));
    };
    row("idle, before any Secret exists: VmRSS".into(), &|r| mib(r.idle.0));
    row(format!("started with {in_cluster} Secrets in the cluster, settled: VmRSS (peak)"), &|r| {
        format!("{} ({})", mib(r.started.0), mib(r.started.1))
    });
    row("CPU to start and settle".into(), &|r| format!("{:.2} s", r.start_cpu));
    row(format!("latency p50 / p99 ({ROTATIONS} rotations)"), &|r| {
        r.rotations.as_ref().map(|x| format!("{:.1} / {:.1} ms", x.p(50.0), x.p(99.0))).unwrap_or_default()
    });
    row("latency mean / max".into(), &|r| r.rotations.as_ref().map(|x| format!("{:.1} / {:.1} ms", x.mean(), x.max())).unwrap_or_default());
    row("CPU per rotation".into(), &|r| r.rotations.as_ref().map(|x| format!("{:.2} ms", x.cpu_per_rotation_ms())).unwrap_or_default());
    row(format!("after the {ROTATIONS} rotations: VmRSS (peak)"), &|r| {
        format!("{} ({})", mib(r.after_rotations.0), mib(r.after_rotations.1))
    });
    row(format!("restarted with {} unrelated Secrets: VmRSS (peak)", 2 * UNRELATED), &|r| {
        format!("{} ({})", mib(r.doubled.0), mib(r.doubled.1))
    });
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}
