//! Cache pods as a platform runs them (issue 29): in namespaces enforcing the restricted Pod
//! Security Standard, with the images set at install (the node's, under the suite's own
//! references), probes that take a hung server out of the Service and restart it, an exporter
//! beside each server, and a status that says why pods cannot start.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, ensure};
use blockwork_e2e::eventually;
use serde_json::Value;

use super::{POD_TIMEOUT, Suite, apply_cache, cache_ready, endpoint, items, redis_set_get, text};

/// The chart values every install of the suite carries: the node's images
/// (scripts/node-images) as a mirror's, and the exporters on, scraped from the suite's client
/// pod's namespace as a Prometheus' would be.
pub const NODE_IMAGES: &[&str] = &[
    "controllers.cache.registry=localhost/blockwork-node",
    "controllers.cache.images.redis.repository=redis",
    "controllers.cache.images.redis.tag=7.0.15",
    "controllers.cache.images.valkey.repository=valkey",
    "controllers.cache.images.valkey.tag=9.1.2",
    "controllers.cache.images.memcached.repository=memcached",
    "controllers.cache.images.memcached.tag=1.6.18",
    "controllers.cache.images.redisExporter.repository=redis-exporter",
    "controllers.cache.images.memcachedExporter.repository=memcached-exporter",
    "controllers.cache.exporter.enabled=true",
    "controllers.cache.exporter.scrapedFrom.namespace=e2e-client",
];

/// The values of the upgrade's install that no Cache pod can run with: a memcached image the
/// node does not have (and no registry to pull it from), and as redis the node's memcached
/// image, which has the shell to run `start.sh` but no `redis-server`, so the container exits.
pub const BROKEN_IMAGE_VALUES: &[&str] = &[
    "controllers.cache.images.memcached.tag=absent",
    "controllers.cache.images.redis.repository=memcached",
    "controllers.cache.images.redis.tag=1.6.18",
];
const ABSENT_MEMCACHED_IMAGE: &str = "localhost/blockwork-node/memcached:absent";

/// The pid, on this host, of the process `command` of container `container` of `pod` (as
/// read): the suite runs on the node's host, where a container's processes are in its cgroup,
/// which the container's id names. (Not by the environment: Redis and Valkey rewrite their
/// process title over it.)
fn process_of(pod: &Value, container: &str, command: &str) -> Result<u32> {
    let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let id = statuses.iter().find(|c| c["name"] == container).map(|c| text(&c["containerID"])).unwrap_or_default();
    let id = id.rsplit("://").next().filter(|id| !id.is_empty()).ok_or_else(|| anyhow!("container {container} has no id yet"))?;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        if cmdline.starts_with(command.as_bytes()) && cgroup.contains(id) {
            return Ok(pid);
        }
    }
    Err(anyhow!("no {command} process in container {container} ({id}) on this host"))
}

fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill").args([signal, &pid.to_string()]).status()?;
    ensure!(status.success(), "kill {signal} {pid}");
    Ok(())
}

/// Whether the Service `service` has a ready endpoint (its EndpointSlices).
fn has_ready_endpoint(suite: &Suite, namespace: &str, service: &str) -> Result<bool> {
    let slices = suite.node.get_json(&["endpointslices", "-n", namespace, "-l", &format!("kubernetes.io/service-name={service}")])?;
    Ok(items(&slices).iter().flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default()).any(|e| e["conditions"]["ready"] == true))
}

/// The metrics a pod's exporter serves, through the headless Service's port `metrics`.
fn scrape(suite: &Suite, host: &str, port: u16) -> Result<String> {
    eventually(&format!("{host}:{port}/metrics"), Duration::from_secs(60), || {
        Ok(suite.client(&["wget", "-qO-", &format!("http://{host}:{port}/metrics")]).ok().filter(|m| !m.is_empty()))
    })
}

/// Every metric of the exporters' prefixes the chart's dashboard reads.
fn dashboard_metrics(prefix: &str) -> Result<Vec<String>> {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
        blockwork_e2e::workspace().join("charts/blockwork/files/dashboards/blockwork.json"),
    )?)?;
    let mut names: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = text(&target["expr"]).replace("$__rate_interval", "5m").replace("$__range", "6h").replace("$job", ".*");
            let selectors = blockwork_testenv::promql::selectors(&expr).map_err(|e| anyhow!("{e}"))?;
            names.extend(selectors.into_iter().filter_map(|s| s.name).filter(|n| n.starts_with(prefix)));
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The exporter at `host:port` serves every metric of `prefix` the chart's dashboard reads.
pub fn exporter_serves_the_dashboard(suite: &Suite, host: &str, port: u16, prefix: &str) -> Result<()> {
    let wanted = dashboard_metrics(prefix)?;
    ensure!(!wanted.is_empty(), "the dashboard reads no {prefix} metric");
    let missing = eventually(&format!("{host}:{port} serves the dashboard's {prefix} metrics"), Duration::from_secs(60), || {
        let metrics = scrape(suite, host, port)?;
        let missing: Vec<&String> = wanted.iter().filter(|name| !metrics.contains(&format!("\n{name}"))).collect();
        Ok(missing.is_empty().then_some(()))
    });
    missing.with_context(|| format!("the dashboard reads {wanted:?}"))
}

/// A Valkey Cache in a restricted namespace: Ready with the image set at install, running as
/// 999, serving at its endpoint, its exporter scraped. Then its server hangs (SIGSTOP from the
/// host): the readiness probe takes it out of the Service, the liveness probe has it restarted,
/// and it serves again.
pub fn valkey_serves_and_a_hung_server_is_restarted(suite: &Suite) -> Result<()> {
    let namespace = suite.new_namespace("valkey")?;
    apply_cache(suite, &namespace, "store", "{engine: valkey, memory: 64Mi}")?;
    let status = cache_ready(suite, &namespace, "store")?;
    let (host, port) = endpoint(&status)?;
    redis_set_get(suite, &host, &port, "valkey:1", &[])?;

    let pod = suite.node.get_json(&["pod", "-n", &namespace, "store-cache-0"])?;
    let images: Vec<String> = pod["spec"]["containers"].as_array().into_iter().flatten().map(|c| text(&c["image"])).collect();
    ensure!(
        images == ["localhost/blockwork-node/valkey:9.1.2", "localhost/blockwork-node/redis-exporter:v1.62.0"],
        "the pod runs {images:?}, not the images set at install"
    );
    ensure!(pod["spec"]["securityContext"]["runAsUser"] == 999, "the pod runs as {}", pod["spec"]["securityContext"]);
    let version = suite.client(&["redis-cli", "-h", &host, "-p", &port, "info", "server"])?;
    ensure!(version.contains("valkey_version:9.1.2"), "not valkey 9.1.2: {version}");

    let pod_host = format!("store-cache-0.store-cache-headless.{namespace}.svc.cluster.local");
    let metrics = scrape(suite, &pod_host, 9121)?;
    ensure!(metrics.contains("redis_up 1"), "the exporter does not reach its server:\n{metrics}");

    let server = process_of(&pod, "cache", "valkey-server")?;
    let restarts = |pod: &Value| {
        pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "cache")
            .map(|c| c["restartCount"].as_u64().unwrap_or(0))
    };
    let before = restarts(&pod).unwrap_or(0);
    let hung = Instant::now();
    signal(server, "-STOP")?;
    eventually("the hung server out of the Service", Duration::from_secs(60), || {
        Ok((!has_ready_endpoint(suite, &namespace, "store-cache")?).then_some(()))
    })?;
    println!("e2e: the hung valkey left the Service after {:.1} s", hung.elapsed().as_secs_f64());
    let event = eventually("the hung server restarted", Duration::from_secs(120), || {
        let pod = suite.node.get_json(&["pod", "-n", &namespace, "store-cache-0"])?;
        Ok(restarts(&pod).filter(|n| *n > before))
    });
    if event.is_err() {
        // Never leave a stopped process behind.
        let _ = signal(server, "-CONT");
    }
    event?;
    println!("e2e: the hung valkey was restarted after {:.1} s", hung.elapsed().as_secs_f64());
    let status = cache_ready(suite, &namespace, "store")?;
    let (host, port) = endpoint(&status)?;
    redis_set_get(suite, &host, &port, "valkey:2", &[])?;
    ensure!(has_ready_endpoint(suite, &namespace, "store-cache")?, "the restarted server is not back in the Service");
    suite.node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}

/// Valkey with `highAvailability` and Sentinel (valkey-server --sentinel) in a restricted
/// namespace: three Ready pods, Sentinel names pod 0, and a write reaches both replicas.
pub fn valkey_with_sentinel_replicates(suite: &Suite) -> Result<()> {
    let namespace = suite.new_namespace("valkey-ha")?;
    apply_cache(suite, &namespace, "ha", "{engine: valkey, memory: 64Mi, replicas: 3, highAvailability: {enabled: true}}")?;
    let status = cache_ready(suite, &namespace, "ha")?;
    let (service, _) = endpoint(&status)?;
    let primary = eventually("Sentinel names the primary", POD_TIMEOUT, || {
        let reply = suite.client(&["redis-cli", "-h", &service, "-p", "26379", "--raw", "sentinel", "get-master-addr-by-name", "ha"])?;
        Ok(reply.lines().next().filter(|h| !h.is_empty()).map(str::to_owned))
    })?;
    ensure!(primary.starts_with("ha-cache-0."), "the first primary is {primary}, not pod 0");
    ensure!(suite.client(&["redis-cli", "-h", &primary, "set", "order", "paid"])?.trim() == "OK", "SET on the primary");
    let acknowledged = suite.client(&["redis-cli", "-h", &primary, "wait", "2", "10000"])?;
    ensure!(acknowledged.trim() == "2", "replicas acknowledging the write: {acknowledged:?}");
    // The primary's exporter, with replicas connected: every series the dashboard reads.
    exporter_serves_the_dashboard(suite, &primary, 9121, "redis_")?;
    eventually("the status names the primary", Duration::from_secs(90), || {
        let cache = suite.node.get_json(&["cache", "-n", &namespace, "ha"])?;
        Ok((cache["status"]["primary"] == "ha-cache-0").then_some(()))
    })?;
    suite.node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}

/// A namespace whose ResourceQuota a Cache's pod does not fit: the StatefulSet controller's
/// refusal is the Cache's Ready reason and a Warning event on the Cache, within a minute.
pub fn a_refused_pod_is_the_cache_s_reason(suite: &Suite) -> Result<()> {
    let namespace = suite.new_namespace("quota")?;
    suite.node.kubectl_with_input(
        &["apply", "-f", "-"],
        &format!("apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: small, namespace: {namespace}}}\nspec: {{hard: {{requests.memory: 32Mi}}}}\n"),
    )?;
    let applied = Instant::now();
    apply_cache(suite, &namespace, "big", "{engine: memcached, memory: 64Mi}")?;
    let message = ready_reason_within_a_minute(suite, &namespace, "big", "QuotaExceeded")?;
    println!("e2e: the Cache said QuotaExceeded {:.1} s after it was applied", applied.elapsed().as_secs_f64());
    ensure!(message.contains("exceeded quota: small"), "{message}");
    let events = suite.node.kubectl(&["-n", &namespace, "get", "events", "--field-selector", "reason=QuotaExceeded", "-o", "name"])?;
    ensure!(!events.trim().is_empty(), "no QuotaExceeded event in {namespace}");
    suite.node.kubectl(&["delete", "namespace", &namespace, "--wait=false"])?;
    Ok(())
}

/// After an install with [`BROKEN_IMAGE_VALUES`]: the memcached Cache `pulling`'s pod takes
/// the new image (an image set at install reaches the existing Caches) and the kubelet's real
/// pull failure is its Ready reason; the redis Cache `crashing`, applied then, runs a server
/// that is not there, and its real crash loop is its reason; each within a minute.
pub fn broken_images_are_the_caches_reasons(suite: &Suite, namespace: &str, pulling: &str) -> Result<()> {
    let installed = Instant::now();
    apply_cache(suite, namespace, "crashing", "{engine: redis, memory: 64Mi}")?;
    let message = ready_reason_within_a_minute(suite, namespace, pulling, "ImagePullFailed")?;
    println!("e2e: the Cache said ImagePullFailed {:.1} s after the install", installed.elapsed().as_secs_f64());
    ensure!(message.contains(&format!("cannot pull image {ABSENT_MEMCACHED_IMAGE} of container cache")), "{message}");
    let message = ready_reason_within_a_minute(suite, namespace, "crashing", "ContainerCrashing")?;
    println!("e2e: the crashing Cache said ContainerCrashing {:.1} s after the install", installed.elapsed().as_secs_f64());
    ensure!(message.contains("container cache of pod crashing-cache-0 keeps crashing: exited with code 127"), "{message}");
    Ok(())
}

/// Waits up to a minute for the Cache's Ready condition to have `reason`; its message.
fn ready_reason_within_a_minute(suite: &Suite, namespace: &str, name: &str, reason: &str) -> Result<String> {
    eventually(&format!("the Cache {name} says {reason}"), Duration::from_secs(60), || {
        let cache = suite.node.get_json(&["cache", "-n", namespace, name])?;
        let ready = cache["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready").cloned();
        Ok(ready.filter(|c| c["reason"] == reason).map(|c| text(&c["message"])))
    })
    .with_context(|| format!("no {reason} within a minute"))
}
