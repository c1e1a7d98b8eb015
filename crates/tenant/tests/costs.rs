//! What a DistributionTenant with managed DNS costs in AWS calls, Kubernetes writes and
//! reconciles, scenario by scenario: the hidden costs a change of the runtime or the operator
//! must not raise (issue 13). Prints a table (`cargo test -p blockwork-tenant --test costs --
//! --nocapture`) and asserts the costs that are part of the design: one tenant created, one
//! update per spec change, nothing written to AWS by a resync of a Ready tenant, at most one write
//! of the object per reconcile.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::Aws;
use blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION;
use blockwork_runtime::{Context, ControllerConfig, DriftPolicy, RuntimeMetrics};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, GROUP, TenantManager, TenantMetrics, Timing};
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::costs::{Costs, Table};
use blockwork_testenv::kube_proxy::KubeProxy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use prometheus_client::registry::Registry;
use serde_json::json;
use support::*;

/// Quick looks while AWS works, an hour once Ready: what remains after a scenario is its cost.
fn costs_timing() -> Timing {
    blockwork_tenant::timing(Duration::from_secs(1), Duration::from_secs(3600), Duration::from_secs(2), Duration::from_secs(60))
}

#[tokio::test]
async fn a_tenant_with_dns_costs_what_its_design_says_from_create_to_deletion() {
    let mut h = Harness::start_configured("dt-costs", DriftPolicy::Enforce, costs_timing()).await;
    // The harness's controller talks to the API server directly; this one goes through a proxy
    // that counts its writes.
    h.controller.crash();
    let kube = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    let client = kube.client().await.unwrap();
    let mut runtime = Registry::with_prefix("blockwork");
    let runtime_metrics = RuntimeMetrics::register(&mut runtime);
    let metrics = TenantMetrics::register(&mut Registry::default());
    let aws =
        Aws::with_sdk_config(h.aws_config(), blockwork_testenv::aws::sdk_config(&h.proxy.endpoint()).await, Arc::clone(&h.aws_metrics));
    let manager =
        TenantManager::new(Sdk::new(&aws), Some(Route53::new(aws.records())), DriftPolicy::Enforce, costs_timing(), metrics, aws.metrics());
    let context = Context::new(client.clone(), manager, ControllerConfig::new(CONTROLLER, GROUP), runtime_metrics);
    let api: Api<DistributionTenant> = Api::namespaced(client, &h.namespace);
    let controller = tokio::spawn(blockwork_runtime::run(api, context, 4, std::future::pending()));
    let mut table = Table::new(|| Costs::read(&kube, &[&h.proxy, &h.dns_proxy], &runtime, CONTROLLER));
    let at_generation = |generation: i64| {
        move |t: &DistributionTenant| {
            t.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
                && condition(t, "Ready").is_some_and(|c| c.0 == "True")
        }
    };

    let created = table
        .measure("create → Ready (one domain, its CNAME)", async {
            h.create("shop", h.dns_spec(&["www"], &h.zone_id, 120)).await;
            h.wait_ready("shop").await;
        })
        .await;

    let requested = "2026-11-24T00:00:00Z";
    let resync = table
        .measure("steady-state resync (Ready, retry requested)", async {
            let annotation = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_ANNOTATION: requested}}});
            h.api().patch("shop", &PatchParams::default(), &Patch::Merge(annotation)).await.unwrap();
            h.wait_for("shop", "resynced", |t| t.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(requested))
                .await;
        })
        .await;

    let added = table
        .measure("spec update: a domain added", async {
            let domains = json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}});
            h.api().patch("shop", &PatchParams::default(), &Patch::Merge(domains)).await.unwrap();
            h.wait_for("shop", "Ready at generation 2", at_generation(2)).await;
        })
        .await;

    let removed = table
        .measure("spec update: a domain removed (its CNAME deleted)", async {
            let domains = json!({"spec": {"domains": [{"domain": h.domain("www")}]}});
            h.api().patch("shop", &PatchParams::default(), &Patch::Merge(domains)).await.unwrap();
            h.wait_for("shop", "Ready at generation 3", at_generation(3)).await;
        })
        .await;
    let records = blockwork_testenv::aws::cnames(&h.route53, &h.zone_id).await;
    assert_eq!(records.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), [h.domain("www")], "{records:?}");

    let deleted = table
        .measure("deletion", async {
            h.api().delete("shop", &DeleteParams::default()).await.unwrap();
            h.wait_gone("shop").await;
        })
        .await;
    controller.abort();

    println!("{table}");
    assert_eq!(created.aws.get("CreateDistributionTenant"), Some(&1), "{created:?}");
    assert_eq!(added.aws.get("UpdateDistributionTenant"), Some(&1), "{added:?}");
    assert_eq!(removed.aws.get("UpdateDistributionTenant"), Some(&1), "{removed:?}");
    assert!(deleted.aws.contains_key("DeleteDistributionTenant"), "{deleted:?}");
    let mutating = ["CreateDistributionTenant", "UpdateDistributionTenant", "DeleteDistributionTenant", "ChangeResourceRecordSets"];
    assert!(mutating.iter().all(|op| !resync.aws.contains_key(*op)), "a resync of a Ready tenant writes nothing to AWS: {resync:?}");
    for costs in [&created, &resync, &added, &removed, &deleted] {
        assert!(costs.object_writes() as u64 <= costs.reconciles, "at most one write of the object per reconcile: {costs:?}");
    }
}
