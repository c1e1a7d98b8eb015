//! What the DistributionTenant benchmarks share: the binary's mode, the control plane with the
//! CRDs the controller needs, the tenant controller in the bench process with the operator's
//! defaults and its mapping follower (as `blockwork run` has it), and the proxies' counts.
//!
//! The controller reads every namespace's grant from the AwsIdentities (ADR 0014), so the
//! AwsIdentity CRD is installed even when no mapping exists: without it the mappings are never
//! read and every tenant waits, refused as `AwsIdentitiesNotRead`.

// Each bench binary uses its part of this module (and of the tests' fixtures).
#![allow(dead_code)]

#[path = "../../tests/integration/support/mod.rs"]
pub mod fixtures;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use blockwork_aws::quota::Service;
use blockwork_aws::{Aws, AwsArgs, AwsMetrics, Endpoint, Seed};
use blockwork_identity::{AwsIdentity, Identities, Settings};
use blockwork_runtime::{Context, ControllerConfig, Namespaces, RuntimeMetrics};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, GROUP, TenantManager, TenantMetrics};
use blockwork_testenv::aws::sdk_config;
use blockwork_testenv::control_plane::ControlPlane;
use blockwork_testenv::fault_proxy::FaultProxy;
use kube::Api;
use kube::CustomResourceExt as _;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

/// The operator's default (`blockwork run`).
pub const CONCURRENCY: u16 = 3;

/// `cargo bench` runs the binary with `--bench`; `cargo test --all-targets` without, and it
/// does nothing.
pub fn main(name: &str, bench: impl Future<Output = ()>) {
    if std::env::args().any(|a| a == "--bench") {
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(bench);
    } else {
        println!("this benchmark runs with `cargo bench -p blockwork-tenant --bench {name}` (minutes, 200 tenants)");
    }
}

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The test control plane with the DistributionTenant and AwsIdentity CRDs.
pub async fn control_plane() -> &'static ControlPlane {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    plane.install_crds(&[DistributionTenant::crd(), AwsIdentity::crd()]).await.unwrap();
    plane
}

/// The tenant controller, running in this process until aborted.
pub struct Controller {
    pub aws_metrics: Arc<AwsMetrics>,
    task: JoinHandle<()>,
}

impl Controller {
    /// The tenant controller over `namespaces` with the operator's defaults (AWS's quotas × 0.8,
    /// seed 001's intervals, [`CONCURRENCY`]) and the mapping `settings`: CloudFront and ACM
    /// through `proxy`, Route 53 and STS through `dns_proxy`.
    pub async fn start(
        plane: &ControlPlane,
        proxy: &FaultProxy,
        dns_proxy: &FaultProxy,
        settings: Settings,
        namespaces: Namespaces,
    ) -> Self {
        let (mut config, _) = AwsArgs { region: Some("us-east-1".into()), ..AwsArgs::default() }.config().unwrap();
        let endpoint = |service, url: String| Endpoint { controller: None, service, url };
        config.endpoints = vec![
            endpoint(Service::CloudFront, proxy.endpoint()),
            endpoint(Service::Acm, proxy.endpoint()),
            endpoint(Service::Route53, dns_proxy.endpoint()),
            endpoint(Service::Sts, dns_proxy.endpoint()),
        ];
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(registry.sub_registry_with_prefix(blockwork_tenant::metrics::PREFIX));
        let runtime_metrics = RuntimeMetrics::register(&mut registry);
        let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Tenant]));
        let aws = Aws::with_sdk_config(config, sdk_config(&dns_proxy.endpoint()).await, Arc::clone(&aws_metrics));
        let identities = Identities::new(plane.client(), settings);
        let manager =
            TenantManager::new(Sdk::new(&aws), Some(Route53::new(aws.records())), Arc::clone(&identities), metrics, &aws, plane.client());
        let config = ControllerConfig::new(CONTROLLER, GROUP).with_timing(blockwork_tenant::default_timing());
        let context = Context::new(plane.client(), manager, config, runtime_metrics);
        let client = plane.client();
        let task = tokio::spawn(async move {
            let mappings = blockwork_identity::wake::follow(Arc::clone(&context), identities, Vec::new(), |o| o.aws_identity.as_deref());
            let run = blockwork_runtime::run_in(&namespaces, |scope| {
                let api: Api<DistributionTenant> = blockwork_runtime::namespaces::api(&client, scope.as_deref());
                blockwork_runtime::run(api, Arc::clone(&context), CONCURRENCY, std::future::pending())
            });
            tokio::join!(mappings, run);
        });
        Self { aws_metrics, task }
    }

    /// Throttling answers the operator saw (`blockwork_aws_throttling_events_total`) for
    /// `operations`.
    pub fn throttled<'a>(&self, operations: impl Iterator<Item = &'a String>) -> u64 {
        operations
            .map(|op| {
                [Service::CloudFront, Service::Route53, Service::Acm, Service::Sts]
                    .iter()
                    .map(|s| self.aws_metrics.throttling_events(*s, op))
                    .sum::<u64>()
            })
            .sum()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

/// `of` (calls or throttling answers by operation) summed over `proxies`.
pub fn merged(proxies: &[&FaultProxy], of: impl Fn(&FaultProxy) -> HashMap<String, usize>) -> BTreeMap<String, usize> {
    let mut all = BTreeMap::new();
    for proxy in proxies {
        for (operation, count) in of(proxy) {
            *all.entry(operation).or_default() += count;
        }
    }
    all
}

/// The load average (1, 5, 15 minutes): the machine is shared, and every figure says how busy
/// it was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}
