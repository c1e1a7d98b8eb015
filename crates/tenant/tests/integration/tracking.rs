//! A DistributionTenant created while its object changes or is deleted: the tenant and the DNS
//! records a create wrote are accounted for even when the status write that would record them is
//! refused (a 409: the object changed meanwhile) or never happens (the controller is killed).
//! Each race is forced: the fault proxy answers the call late, after it took effect, and the
//! test acts while the controller waits for the answer.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::Harness;
use blockwork_testenv::fault_proxy::{Fault, Operation};
use blockwork_testenv::harness::{TIMEOUT, eventually};
use kube::api::DeleteParams;

/// How long a call's answer is held while the test changes the object.
const HELD: Duration = Duration::from_secs(3);
/// Held for longer than the test: the controller is killed while it waits.
const FOREVER: Duration = Duration::from_secs(60);

impl Harness {
    /// Waits until the tenant exists in MiniStack (a create held by the proxy has taken effect).
    async fn wait_for_tenant(&self, name: &str) {
        let created = async || self.aws_tenant(name).await.ok_or("not in MiniStack".to_owned());
        eventually(&format!("the tenant {name} to be created"), TIMEOUT, created).await;
    }
}

#[tokio::test]
async fn a_tenant_deleted_while_its_records_are_written_leaves_no_record() {
    let h = Harness::start("trk-delete-dns").await;
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::SlowResponse(HELD), 1);
    h.create("trk-delete-dns", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
    h.delete_and_wait("trk-delete-dns").await;

    assert!(h.aws_tenant("trk-delete-dns").await.is_none());
    assert!(h.record_names().await.is_empty(), "no record is left");
}

#[tokio::test]
async fn a_tenant_deleted_while_it_is_created_is_deleted_with_its_records() {
    let h = Harness::start("trk-delete-tenant").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::SlowResponse(HELD), 1);
    h.create("trk-delete-tenant", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for_tenant("trk-delete-tenant").await;
    h.delete_and_wait("trk-delete-tenant").await;

    assert!(h.aws_tenant("trk-delete-tenant").await.is_none(), "the tenant was found by name and deleted");
    assert!(h.record_names().await.is_empty(), "no record is left");
}

#[tokio::test]
async fn a_domain_change_while_the_records_are_written_leaves_no_record_of_the_removed_domain() {
    let h = Harness::start("trk-domains").await;
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::SlowResponse(HELD), 1);
    h.create("trk-domains", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
    h.merge("trk-domains", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await;
    h.wait_ready_at("trk-domains", 2).await;

    h.wait_for_records(&[h.domain("www")]).await;
    let (tenant, _) = h.aws_tenant("trk-domains").await.unwrap();
    assert_eq!(tenant.domains().iter().map(|d| d.domain()).collect::<Vec<_>>(), [h.domain("www")]);
}

#[tokio::test]
async fn a_domain_change_while_the_tenant_is_created_ends_with_one_tenant_for_the_new_domains() {
    let h = Harness::start("trk-domains-tenant").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::SlowResponse(HELD), 1);
    h.create("trk-domains-tenant", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_for_tenant("trk-domains-tenant").await;
    h.merge("trk-domains-tenant", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await;
    let ready = h.wait_ready_at("trk-domains-tenant", 2).await;

    let (tenant, _) = h.aws_tenant("trk-domains-tenant").await.unwrap();
    assert_eq!(ready.status.unwrap().observation.id.as_deref(), tenant.id(), "the tenant created first, adopted");
    assert_eq!(tenant.domains().iter().map(|d| d.domain()).collect::<Vec<_>>(), [h.domain("www")]);
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1);
    h.wait_for_records(&[h.domain("www")]).await;
}

#[tokio::test]
async fn a_kill_between_the_record_write_and_its_status_write_then_deletion_leaves_no_record() {
    let mut h = Harness::start("trk-kill-dns").await;
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::SlowResponse(FOREVER), 1);
    h.create("trk-kill-dns", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for_records(&[h.domain("www")]).await;
    h.controller.crash();

    h.api().delete("trk-kill-dns", &DeleteParams::default()).await.unwrap();
    h.start_controller().await;
    h.wait_gone("trk-kill-dns").await;
    assert!(h.aws_tenant("trk-kill-dns").await.is_none());
    assert!(h.record_names().await.is_empty(), "no record is left");
}

#[tokio::test]
async fn a_kill_between_the_create_and_its_status_write_then_deletion_deletes_the_tenant_and_its_records() {
    let mut h = Harness::start("trk-kill-tenant").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::SlowResponse(FOREVER), 1);
    h.create("trk-kill-tenant", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for_tenant("trk-kill-tenant").await;
    h.controller.crash();

    h.api().delete("trk-kill-tenant", &DeleteParams::default()).await.unwrap();
    h.start_controller().await;
    h.wait_gone("trk-kill-tenant").await;
    assert!(h.aws_tenant("trk-kill-tenant").await.is_none(), "the tenant was found by name and deleted");
    assert!(h.record_names().await.is_empty(), "no record is left");
}

#[tokio::test]
async fn a_domain_added_to_a_ready_tenant_gets_its_record() {
    let h = Harness::start("trk-add-ready").await;
    h.create("trk-add-ready", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_ready_at("trk-add-ready", 1).await;
    h.merge("trk-add-ready", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}})).await;
    h.wait_ready_at("trk-add-ready", 2).await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
}

#[tokio::test]
async fn a_domain_added_while_the_tenant_is_created_gets_its_record() {
    let h = Harness::start("trk-add-creating").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::SlowResponse(HELD), 1);
    h.create("trk-add-creating", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for_tenant("trk-add-creating").await;
    h.merge("trk-add-creating", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}})).await;
    h.wait_ready_at("trk-add-creating", 2).await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
}

/// Found by the reliability campaign's fault soak (issue 15): a domain added while the first
/// records propagated was counted as written (the create-pending marker's domains are owned for
/// cleanup), so its record was never written and the tenant went Ready without it.
#[tokio::test]
async fn a_domain_added_while_the_first_records_propagate_gets_its_record() {
    let h = Harness::start("trk-add-propagating").await;
    h.dns_proxy.inject(Operation::named("GetChange"), Fault::PendingChange, 2);
    h.create("trk-add-propagating", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for_records(&[h.domain("www")]).await;
    h.merge("trk-add-propagating", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}}))
        .await;
    h.wait_ready_at("trk-add-propagating", 2).await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
}
