//! What a Cert costs in AWS calls, Kubernetes writes and reconciles, scenario by scenario: the
//! hidden costs a change of the runtime or the operator must not raise (issue 13). Prints a
//! table (`cargo test -p blockwork-cert --test costs -- --nocapture`) and asserts the costs that
//! are part of the design: one certificate requested per create, nothing written to AWS by a
//! resync of a Ready Cert, at most one write of the object per reconcile.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::*;
use blockwork_cert::{CONTROLLER, CertSpec, CertState};
use blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION;
use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::costs::{Costs, Table};
use blockwork_testenv::harness::{TIMEOUT, eventually, metrics_text, sum};
use blockwork_testenv::kube_proxy::KubeProxy;
use serde_json::json;

#[tokio::test]
async fn a_cert_costs_what_its_design_says_from_create_to_deletion() {
    // ACM's listing sweep runs on its own clock while nothing waits for an issuance: an hour
    // here, so that what remains is what the reconciles cost (the busy sweeps while a
    // certificate is being issued are counted: a Cert waiting for issuance pays for them).
    let mut h = Harness::start_with("costs", &["main"], |config, _| config.acm.sweep = Duration::from_secs(3600)).await;
    // The harness's controller talks to the API server directly; this one goes through a proxy
    // that counts its writes.
    h.controller.crash();
    let kube = KubeProxy::start(control_plane().await.unwrap()).await.unwrap();
    h.start_controller_with(kube.client().await.unwrap()).await;
    let mut table = Table::new(|| Costs::read(&kube, &[&h.proxy], &h.runtime_registry, CONTROLLER));

    let created = table
        .measure("create → Ready (records written)", async {
            h.create("api", CertSpec { delete_on_removal: true, ..spec("api", "dev") }).await;
            h.wait_for_records_written("api").await;
        })
        .await;

    let requested = "2026-11-24T00:00:00Z";
    let resync = table
        .measure("steady-state resync (Ready, retry requested)", async {
            h.annotate("api", RECONCILE_REQUESTED_ANNOTATION, Some(requested)).await;
            h.wait_for("api", "resynced", |c| c.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(requested))
                .await;
        })
        .await;

    // A new process (a restart, a leader failover) with the Cert Ready: its first look reads
    // the shared listing, and no tag (its ownership check comes at its point of the interval).
    h.controller.crash();
    let reconciles = || sum(&metrics_text(&h.runtime_registry), "blockwork_reconciles_total", &[("controller", CONTROLLER)]);
    let before = reconciles();
    // Started, not yet run: the test's runtime runs it once the measure awaits.
    h.controller.start(h.controller_run(kube.client().await.unwrap()).await);
    let restarted = table
        .measure("restart (a new process), Ready", async {
            eventually("the new process's look", TIMEOUT, async || {
                let looked = reconciles();
                if looked > before { Ok(()) } else { Err(format!("{looked} reconciles")) }
            })
            .await;
        })
        .await;

    let domain = format!("api-qa.{}", h.zones[0].name);
    let updated = table
        .measure("spec update (new domain → new certificate)", async {
            h.merge("api", json!({"spec": {"environment": "qa"}})).await;
            h.wait_for("api", "Ready for the new domain", |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.observation.state == Some(CertState::Ready)
                        && s.observation.domain_name.as_deref() == Some(domain.as_str())
                        && s.observation.validation_records.iter().all(|r| !r.pending)
                })
            })
            .await;
        })
        .await;

    let deleted = table
        .measure("deletion (deleteOnRemoval)", async {
            h.delete_and_wait("api").await;
        })
        .await;

    println!("{table}");
    assert_eq!(created.aws.get("RequestCertificate"), Some(&1), "{created:?}");
    assert_eq!(updated.aws.get("RequestCertificate"), Some(&1), "{updated:?}");
    assert_eq!(deleted.aws.get("DeleteCertificate"), Some(&1), "{deleted:?}");
    let mutating = ["RequestCertificate", "DeleteCertificate", "ChangeResourceRecordSets", "AddTagsToCertificate"];
    assert!(mutating.iter().all(|op| !resync.aws.contains_key(*op)), "a resync of a Ready Cert writes nothing to AWS: {resync:?}");
    assert!(mutating.iter().all(|op| !restarted.aws.contains_key(*op)), "a restart writes nothing to AWS: {restarted:?}");
    assert_eq!(created.aws.get("ListTagsForCertificate"), None, "the tags its own request wrote are not read back: {created:?}");
    assert_eq!(restarted.aws.get("ListTagsForCertificate"), None, "a restart reads no tags: {restarted:?}");
    assert!(restarted.reconciles >= 1, "{restarted:?}");
    for costs in [&created, &resync, &restarted, &updated, &deleted] {
        assert!(costs.object_writes() as u64 <= costs.reconciles, "at most one write of the object per reconcile: {costs:?}");
    }
}
