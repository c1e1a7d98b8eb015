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
//! Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use blockwork_rotator::{Config, Metrics, RotatorArgs};
use blockwork_testenv::measure::{MeasuredChild, mib};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Client, ResourceExt as _};
use prometheus_client::registry::Registry;
use serde_json::json;

const UNRELATED: usize = 10_000;
const SOURCES: usize = 100;
const ROTATIONS: usize = 200;
const SETTLE: Duration = Duration::from_secs(5);

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
    let client = Client::try_default().await.unwrap();
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

fn cert(i: usize) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![format!("key-{i}.bench.example")]).unwrap().self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn secret(name: &str, annotations: BTreeMap<String, String>, data: BTreeMap<String, ByteString>, type_: &str) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), annotations: Some(annotations), ..ObjectMeta::default() },
        type_: Some(type_.into()),
        data: Some(data),
        ..Secret::default()
    }
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
        let targets = api.list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=blockwork-rotator")).await.unwrap();
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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
    println!("rotator benchmark: {SOURCES} sources, {UNRELATED} unrelated Secrets, {ROTATIONS} rotations");

    // 1. The rotator with only the sources.
    let certs: Vec<(String, String)> = (0..2 * SOURCES + ROTATIONS).map(cert).collect();
    let mut expected = BTreeMap::new();
    let sources: Vec<Secret> = (0..SOURCES)
        .map(|i| {
            let mut annotations =
                BTreeMap::from([(keys.source.clone(), "true".to_owned()), (keys.destination.clone(), format!("target-{i}"))]);
            if i % 2 == 0 {
                annotations.insert(keys.jwks.clone(), "true".into());
            }
            expected.insert(format!("target-{i}"), certs[i].0.clone());
            let data = BTreeMap::from([
                ("tls.crt".to_owned(), ByteString(certs[i].0.clone().into_bytes())),
                ("tls.key".to_owned(), ByteString(certs[i].1.clone().into_bytes())),
            ]);
            secret(&format!("source-{i}"), annotations, data, "kubernetes.io/tls")
        })
        .collect();
    let rotator = spawn_child("rotator", &kubeconfig);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rotator.memory().unwrap();
    let started = Instant::now();
    create_all(&sources_api, sources).await;
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
    for i in 0..SOURCES {
        let (crt, key) = &certs[SOURCES + ROTATIONS + i];
        let patch = json!({ "data": { "tls.crt": b64(crt), "tls.key": b64(key) } });
        sources_api.patch(&format!("source-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        expected.insert(format!("target-{i}"), crt.clone());
    }
    let started = Instant::now();
    let rotator = spawn_child("rotator", &kubeconfig);
    wait_for_targets(&sources_api, &expected).await;
    let catch_up = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let restarted = rotator.memory().unwrap();

    // 4. Latency: 200 rotations, one at a time, timed from just before the source update to the
    //    watch event of the target with the new certificate in next-tls.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<u8>, Instant)>();
    let watch_api = sources_api.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().labels("app.kubernetes.io/managed-by=blockwork-rotator");
        let mut stream = std::pin::pin!(watcher::watcher(watch_api, config).applied_objects());
        while let Some(Ok(target)) = stream.next().await {
            let next = target.data.as_ref().and_then(|d| d.get("next-tls.crt")).map(|c| c.0.clone()).unwrap_or_default();
            let _ = tx.send((target.name_any(), next, Instant::now()));
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    while rx.try_recv().is_ok() {}
    let cpu_at_rotations = rotator.cpu_seconds().unwrap();
    let mut latencies = Vec::with_capacity(ROTATIONS);
    for r in 0..ROTATIONS {
        let i = r % SOURCES;
        let (crt, key) = &certs[SOURCES + r];
        let patch = json!({ "data": { "tls.crt": b64(crt), "tls.key": b64(key) } });
        let started = Instant::now();
        sources_api.patch(&format!("source-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let target = format!("target-{i}");
        loop {
            let (name, next, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
            if name == target && next == crt.as_bytes() {
                latencies.push(at - started);
                break;
            }
        }
    }
    let cpu_rotations = rotator.cpu_seconds().unwrap() - cpu_at_rotations;
    let after_rotations = rotator.memory().unwrap();
    watch.abort();
    rotator.kill();
    latencies.sort();
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;

    // 5. What caching every Secret would cost, in the same cluster.
    let mut naive = Vec::new();
    for mode in ["full-cache", "metadata-cache"] {
        let cache = spawn_child(mode, &kubeconfig);
        tokio::time::sleep(Duration::from_secs(15)).await;
        naive.push((mode, cache.memory().unwrap()));
        cache.kill();
    }

    // 6. Twice as many unrelated Secrets, and a restart: memory does not follow their number.
    let more_ns = plane.namespace("bench-unrelated-more").await.unwrap();
    create_unrelated(&Api::namespaced(client.clone(), &more_ns)).await;
    let rotator = spawn_child("rotator", &kubeconfig);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let doubled = rotator.memory().unwrap();
    rotator.kill();

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
    println!("| p50 | {:.1} ms |", ms(percentile(&latencies, 50.0)));
    println!("| p99 | {:.1} ms |", ms(percentile(&latencies, 99.0)));
    println!("| mean | {:.1} ms |", ms(mean));
    println!("| min / max | {:.1} / {:.1} ms |", ms(latencies[0]), ms(latencies[latencies.len() - 1]));
    println!("| rotator CPU for the {ROTATIONS} rotations | {cpu_rotations:.2} s |");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}
