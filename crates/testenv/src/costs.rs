//! The hidden costs of a controller, counted where they are paid: AWS calls as the fault proxy
//! saw them, Kubernetes writes as the [`KubeProxy`] saw them, and reconciles as the runtime's
//! `blockwork_reconciles_total` counted them. A test runs its scenarios through a [`Table`],
//! which takes the counts before each step and once they settled after it, and prints the
//! differences as rows, so a refactoring can show that what one reconcile costs did not rise.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::fault_proxy::FaultProxy;
use crate::kube_proxy::KubeProxy;

/// Counts at one moment (or, from [`Costs::since`], over a scenario).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Reconciles of the controller, whatever their result.
    pub reconciles: u64,
    /// AWS calls by operation, faulted ones included.
    pub aws: BTreeMap<String, usize>,
    /// Kubernetes writes the API server saw, by what they wrote: `status`, `object` (metadata or
    /// spec of the custom resource), `event`, or the resource's plural (`configmaps`).
    pub writes: BTreeMap<String, usize>,
}

impl Costs {
    /// Reads the counters: `runtime` is the registry the controller's `RuntimeMetrics` were
    /// registered in (with the prefix `blockwork`).
    pub fn read(kube: &KubeProxy, aws: &[&FaultProxy], runtime: &Registry, controller: &str) -> Self {
        let mut calls = BTreeMap::new();
        for proxy in aws {
            for (operation, count) in proxy.all_calls() {
                *calls.entry(operation).or_default() += count;
            }
        }
        let mut writes = BTreeMap::new();
        for write in kube.writes().into_iter().filter(|w| w.forwarded) {
            *writes.entry(write_class(&write.path)).or_default() += 1;
        }
        Self { reconciles: reconciles(runtime, controller), aws: calls, writes }
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Self) -> Self {
        let minus = |now: &BTreeMap<String, usize>, then: &BTreeMap<String, usize>| {
            now.iter()
                .map(|(key, count)| (key.clone(), count.saturating_sub(then.get(key).copied().unwrap_or_default())))
                .filter(|(_, count)| *count > 0)
                .collect()
        };
        Self {
            reconciles: self.reconciles.saturating_sub(before.reconciles),
            aws: minus(&self.aws, &before.aws),
            writes: minus(&self.writes, &before.writes),
        }
    }

    pub fn aws_calls(&self) -> usize {
        self.aws.values().sum()
    }

    pub fn writes(&self) -> usize {
        self.writes.values().sum()
    }

    /// Writes of the custom resource itself: its status, its metadata or spec.
    pub fn object_writes(&self) -> usize {
        ["status", "object"].iter().map(|class| self.writes.get(*class).copied().unwrap_or_default()).sum()
    }

    /// `scenario | reconciles | AWS calls (by operation) | writes (by class)`, a Markdown row.
    pub fn row(&self, scenario: &str) -> String {
        let list = |counts: &BTreeMap<String, usize>| counts.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        format!(
            "| {scenario} | {} | {} ({}) | {} ({}) |",
            self.reconciles,
            self.aws_calls(),
            list(&self.aws),
            self.writes(),
            list(&self.writes)
        )
    }

    /// The header of [`Costs::row`]'s table.
    pub fn header() -> &'static str {
        "| scenario | reconciles | AWS calls | Kubernetes writes |\n|---|---|---|---|"
    }
}

/// The scenarios of one test, measured one after the other.
pub struct Table<R> {
    read: R,
    rows: Vec<String>,
}

impl<R: Fn() -> Costs> Table<R> {
    /// `read` takes the counts (say, a closure around [`Costs::read`]).
    pub fn new(read: R) -> Self {
        Self { read, rows: Vec::new() }
    }

    /// Runs `step` (the change and the wait for its outcome), waits until the counters settle
    /// (3 s without a change, at most 30 s) and adds its row; returns what the scenario cost.
    pub async fn measure(&mut self, scenario: &str, step: impl Future<Output = ()>) -> Costs {
        let before = (self.read)();
        step.await;
        let costs = settled(&self.read, Duration::from_secs(3), Duration::from_secs(30)).await.since(&before);
        self.rows.push(costs.row(scenario));
        costs
    }
}

impl<R> std::fmt::Display for Table<R> {
    /// The Markdown table: [`Costs::header`] and a row per scenario.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", Costs::header())?;
        self.rows.iter().try_for_each(|row| write!(f, "\n{row}"))
    }
}

/// Waits until the counters stop moving for `quiet` (background batches, requeues and events
/// of the scenario done), at most `limit`; returns the counts then.
async fn settled(read: impl Fn() -> Costs, quiet: Duration, limit: Duration) -> Costs {
    let deadline = tokio::time::Instant::now() + limit;
    let mut last = read();
    let mut still_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = read();
        if now != last {
            last = now;
            still_since = tokio::time::Instant::now();
        } else if still_since.elapsed() >= quiet || tokio::time::Instant::now() >= deadline {
            return last;
        }
    }
}

fn write_class(path: &str) -> String {
    let segments: Vec<&str> = path.split('?').next().unwrap_or_default().split('/').filter(|s| !s.is_empty()).collect();
    if segments.contains(&"events") {
        return "event".to_owned();
    }
    if segments.last() == Some(&"status") {
        return "status".to_owned();
    }
    // /api/v1/namespaces/N/configmaps/x or /apis/G/V/namespaces/N/plural/x
    match segments.iter().position(|s| *s == "namespaces") {
        Some(at) if segments.len() > at + 2 => {
            let plural = segments[at + 2];
            if segments[0] == "apis" && segments.get(1).is_some_and(|group| group.ends_with("blockwork.dev")) {
                "object".to_owned()
            } else {
                plural.to_owned()
            }
        }
        _ => segments.join("/"),
    }
}

fn reconciles(registry: &Registry, controller: &str) -> u64 {
    let text = crate::harness::metrics_text(registry);
    crate::harness::sum(&text, "blockwork_reconciles_total", &[("controller", controller)]) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_classed_by_what_they_wrote() {
        assert_eq!(write_class("/apis/acm.blockwork.dev/v1/namespaces/a/certs/web/status"), "status");
        assert_eq!(write_class("/apis/acm.blockwork.dev/v1/namespaces/a/certs/web"), "object");
        assert_eq!(write_class("/apis/events.k8s.io/v1/namespaces/a/events"), "event");
        assert_eq!(write_class("/api/v1/namespaces/a/configmaps/web-cert?fieldManager=x"), "configmaps");
    }
}
