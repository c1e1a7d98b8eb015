//! What a DistributionTenant with managed DNS costs in AWS calls, Kubernetes writes and
//! reconciles, scenario by scenario: the hidden costs a change of the runtime or the operator
//! must not raise (issue 13). Prints a table (`cargo test -p blockwork-tenant --test costs --
//! --nocapture`) and asserts the costs that are part of the design: one tenant created, one
//! update per spec change, nothing written to AWS by a resync of a Ready tenant, at most one write
//! of the object per reconcile.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::*;
use blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION;
use blockwork_runtime::{DriftPolicy, RuntimeMetrics};
use blockwork_tenant::{CONTROLLER, Timing};
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::costs::{Costs, Table};
use blockwork_testenv::kube_proxy::KubeProxy;
use prometheus_client::registry::Registry;
use serde_json::json;

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
    let mut runtime = Registry::with_prefix("blockwork");
    h.start_controller_with(kube.client().await.unwrap(), RuntimeMetrics::register(&mut runtime)).await;
    let mut table = Table::new(|| Costs::read(&kube, &[&h.proxy, &h.dns_proxy], &runtime, CONTROLLER));

    let created = table
        .measure("create → Ready (one domain, its CNAME)", async {
            h.create("shop", h.dns_spec(&["www"], &h.zone_id, 120)).await;
            h.wait_ready("shop").await;
        })
        .await;

    let requested = "2026-11-24T00:00:00Z";
    let resync = table
        .measure("steady-state resync (Ready, retry requested)", async {
            h.annotate("shop", RECONCILE_REQUESTED_ANNOTATION, Some(requested)).await;
            h.wait_for("shop", "resynced", |t| t.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(requested))
                .await;
        })
        .await;

    let added = table
        .measure("spec update: a domain added", async {
            h.merge("shop", json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}})).await;
            h.wait_ready_at("shop", 2).await;
        })
        .await;

    let removed = table
        .measure("spec update: a domain removed (its CNAME deleted)", async {
            h.merge("shop", json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await;
            h.wait_ready_at("shop", 3).await;
        })
        .await;
    let records = blockwork_testenv::aws::cnames(&h.route53, &h.zone_id).await;
    assert_eq!(records.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), [h.domain("www")], "{records:?}");

    let deleted = table
        .measure("deletion", async {
            h.delete_and_wait("shop").await;
        })
        .await;

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
