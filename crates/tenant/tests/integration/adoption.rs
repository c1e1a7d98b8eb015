//! Adopting CloudFront tenants made outside Blockwork, and handing a tenant over from one object
//! to another (issue 31), against the real kube-apiserver and MiniStack through the fault
//! proxy, which counts every write the operator makes.

#![allow(clippy::unwrap_used, clippy::panic)]

use blockwork_aws::ownership::{TAG_OWNER as OWNER_TAG, TAG_OWNER_UID as OWNER_UID_TAG};
use std::time::Duration;

use crate::support::{Harness, condition, state};
use blockwork_runtime::ReconcileState;
use blockwork_tenant::api::{DriftPolicyName, TenantAdoption};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::fault_proxy::{Fault, Operation};
use kube::ResourceExt;

/// The operator's writes to CloudFront, by operation, as the proxy counted them.
fn writes(h: &Harness) -> [(&'static str, usize); 4] {
    ["CreateDistributionTenant", "UpdateDistributionTenant", "DeleteDistributionTenant", "TagResource"].map(|op| (op, h.proxy.calls(op)))
}

/// A tenant made straight in MiniStack (as the console or Terraform would), untagged; its id.
async fn made_outside(h: &Harness, name: &str, labels: &[&str], enabled: bool) -> String {
    let domains = labels
        .iter()
        .map(|label| aws_sdk_cloudfront::types::DomainItem::builder().domain(h.domain(label)).build().unwrap())
        .collect::<Vec<_>>();
    let created = h
        .aws
        .create_distribution_tenant()
        .name(name)
        .distribution_id(&h.distribution_id)
        .set_domains(Some(domains))
        .enabled(enabled)
        .send()
        .await
        .expect("the tenant is created in MiniStack");
    created.distribution_tenant().and_then(|t| t.id()).unwrap().to_owned()
}

fn adopting(spec: DistributionTenantSpec, id: &str) -> DistributionTenantSpec {
    DistributionTenantSpec { adopt: Some(TenantAdoption { tenant_id: id.to_owned() }), ..spec }
}

/// The ownership tags MiniStack holds on the tenant: (owner-uid, owner).
async fn tags(h: &Harness, name: &str) -> (Option<String>, Option<String>) {
    let (tenant, _) = h.aws_tenant(name).await.expect("the tenant exists");
    let tag = |key: &str| tenant.tags().and_then(|t| t.items().iter().find(|i| i.key() == key)).and_then(|i| i.value()).map(str::to_owned);
    (tag(OWNER_UID_TAG), tag(OWNER_TAG))
}

/// Another object's tags on the tenant, as another cluster adopting it writes them.
async fn taken_over_by(h: &Harness, name: &str, uid: &str) {
    let (tenant, _) = h.aws_tenant(name).await.expect("the tenant exists");
    let tag = |key: &str, value: &str| aws_sdk_cloudfront::types::Tag::builder().key(key).value(value).build().unwrap();
    let tags = aws_sdk_cloudfront::types::Tags::builder().items(tag(OWNER_UID_TAG, uid)).items(tag(OWNER_TAG, "elsewhere/shop")).build();
    h.aws.tag_resource().resource(tenant.arn().unwrap()).tags(tags).send().await.expect("the tenant is tagged");
}

#[tokio::test]
async fn a_matching_tenant_made_outside_is_adopted_writing_only_its_ownership_tags() {
    let h = Harness::start("dt-adopt").await;
    let id = made_outside(&h, "shop-adopt", &["www", "api"], true).await;
    h.create("shop-adopt", adopting(h.spec(&["api", "www"]), &id)).await;
    let object = h.wait_ready("shop-adopt").await;
    let status = object.status.as_ref().unwrap();
    assert_eq!(status.observation.id.as_deref(), Some(id.as_str()));
    assert!(status.observation.adopted, "{status:#?}");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 1)]
    );
    let namespaced = format!("{}/shop-adopt", h.namespace);
    assert_eq!(tags(&h, "shop-adopt").await, (object.uid(), Some(namespaced)));
}

#[tokio::test]
async fn a_crash_during_the_tag_write_ends_adopted_with_nothing_created() {
    let mut h = Harness::start("dt-adopt-crash").await;
    let id = made_outside(&h, "shop-crash", &["www"], true).await;
    h.proxy.inject(Operation::named("TagResource"), Fault::Latency(Duration::from_secs(2)), 1);
    h.create("shop-crash", adopting(h.spec(&["www"]), &id)).await;
    h.proxy.wait_for_calls("TagResource", 1).await;
    // kill -9 of the operator while the tag write is in flight: its status write never happens.
    h.controller.crash();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.start_controller().await;
    let object = h.wait_ready("shop-crash").await;
    assert!(object.status.as_ref().unwrap().observation.adopted);
    assert_eq!(tags(&h, "shop-crash").await.0, object.uid());
    let [creates, updates, deletes, tag_writes] = writes(&h);
    assert_eq!((creates.1, updates.1, deletes.1), (0, 0, 0));
    assert!((1..=2).contains(&tag_writes.1), "the write in flight, and at most one again: {tag_writes:?}");
}

#[tokio::test]
async fn a_tenant_that_differs_is_refused_naming_every_difference_and_nothing_is_written() {
    let h = Harness::start("dt-adopt-diff").await;
    let id = made_outside(&h, "shop-diff", &["www"], false).await;
    let spec = DistributionTenantSpec { drift_policy: Some(DriftPolicyName::Report), ..adopting(h.spec(&["www", "api"]), &id) };
    h.create("shop-diff", spec).await;
    let object = h.wait_for("shop-diff", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&object, "Ready").unwrap();
    assert_eq!(reason, "AdoptionMismatch", "{message}");
    assert!(message.contains("domains are") && message.contains("enabled is false, want true"), "{message}");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 0)]
    );
    assert_eq!(tags(&h, "shop-diff").await, (None, None));
}

#[tokio::test]
async fn under_enforce_settings_that_differ_are_corrected_once_the_tenant_is_adopted() {
    let h = Harness::start("dt-adopt-fix").await;
    let id = made_outside(&h, "shop-fix", &["www"], false).await;
    h.create("shop-fix", adopting(h.spec(&["www"]), &id)).await;
    h.wait_ready("shop-fix").await;
    let (tenant, _) = h.aws_tenant("shop-fix").await.unwrap();
    assert_eq!(tenant.enabled(), Some(true));
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 1), ("DeleteDistributionTenant", 0), ("TagResource", 1)]
    );
}

#[tokio::test]
async fn a_tenant_id_that_is_not_in_the_namespaces_account_is_refused_and_nothing_is_created() {
    let h = Harness::start("dt-adopt-none").await;
    h.create("shop-none", adopting(h.spec(&["www"]), "dt_2wjDZi3hD1ivOXf6rpZJOSNE1AB")).await;
    let object = h.wait_for("shop-none", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&object, "Ready").unwrap();
    assert_eq!(reason, "AdoptionRefused", "{message}");
    assert!(message.contains("spec.adopt.tenantId dt_2wjDZi3hD1ivOXf6rpZJOSNE1AB"), "{message}");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 0)]
    );
    assert!(h.aws_tenant("shop-none").await.is_none(), "no tenant was created");
}

#[tokio::test]
async fn the_same_manifest_finding_another_objects_tenant_is_told_how_to_adopt_it() {
    let h = Harness::start("dt-adopt-advice").await;
    let id = made_outside(&h, "shop-advice", &["www"], true).await;
    h.create("shop-advice", h.spec(&["www"])).await;
    let object = h.wait_for("shop-advice", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&object, "Ready").unwrap();
    assert_eq!(reason, "TenantNameTaken", "{message}");
    assert!(message.contains(&format!("set spec.adopt.tenantId to {id}")), "{message}");
}

#[tokio::test]
async fn a_tenant_another_object_took_over_is_lost_left_alone_and_released_without_deleting() {
    let h = Harness::start("dt-lost").await;
    h.create("shop-lost", h.spec(&["www"])).await;
    h.wait_ready("shop-lost").await;
    taken_over_by(&h, "shop-lost", "the-other-clusters-uid").await;
    // Drift the new owner would repair: this object must not touch it.
    h.set_enabled_outside("shop-lost", false).await;
    let object = h.wait_for("shop-lost", "OwnershipLost", |t| condition(t, "Ready").is_some_and(|c| c.1 == "OwnershipLost")).await;
    assert!(object.status.as_ref().unwrap().observation.ownership_lost);
    let told = h.wait_for_event("shop-lost", "OwnershipLost").await;
    assert_eq!(told.len(), 1, "{told:?}");
    h.delete_and_wait("shop-lost").await;
    let (tenant, _) = h.aws_tenant("shop-lost").await.expect("the tenant is still there");
    assert_eq!(tenant.enabled(), Some(false), "left as its new owner's drift left it");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 1), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 0)]
    );
    assert_eq!(tags(&h, "shop-lost").await.0.as_deref(), Some("the-other-clusters-uid"));
}

#[tokio::test]
async fn a_tenant_created_before_issue_31_with_the_token_tag_is_still_its_objects() {
    let h = Harness::start("dt-legacy").await;
    h.create("shop-legacy", h.spec(&["www"])).await;
    let object = h.wait_ready("shop-legacy").await;
    // What the operator wrote before issue 31: only `blockwork.dev/owner` = the object's token.
    let (tenant, _) = h.aws_tenant("shop-legacy").await.unwrap();
    let arn = tenant.arn().unwrap().to_owned();
    h.aws
        .untag_resource()
        .resource(&arn)
        .tag_keys(aws_sdk_cloudfront::types::TagKeys::builder().items(OWNER_UID_TAG).build())
        .send()
        .await
        .unwrap();
    let token = blockwork_runtime::idempotency_token(&object.uid().unwrap());
    let tag = aws_sdk_cloudfront::types::Tag::builder().key(OWNER_TAG).value(token).build().unwrap();
    h.aws.tag_resource().resource(&arn).tags(aws_sdk_cloudfront::types::Tags::builder().items(tag).build()).send().await.unwrap();
    h.set_enabled_outside("shop-legacy", false).await;
    let enabled = async || match h.aws_tenant("shop-legacy").await.unwrap().0.enabled() {
        Some(true) => Ok(()),
        other => Err(format!("enabled {other:?}")),
    };
    blockwork_testenv::harness::eventually("the operator to repair its tenant's drift", blockwork_testenv::harness::TIMEOUT, enabled).await;
    h.delete_and_wait("shop-legacy").await;
    assert!(h.aws_tenant("shop-legacy").await.is_none(), "deleted as its own");
}

#[tokio::test]
async fn deleting_an_object_whose_adoption_was_refused_deletes_nothing() {
    let h = Harness::start("dt-adopt-gone").await;
    let id = made_outside(&h, "shop-keep", &["www"], true).await;
    h.create("shop-keep", adopting(h.spec(&["other"]), &id)).await;
    h.wait_for("shop-keep", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    h.delete_and_wait("shop-keep").await;
    assert!(h.aws_tenant("shop-keep").await.is_some(), "the tenant it never adopted stays");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 0)]
    );
}

/// `spec.adopt.tenantId` takes an id: an ARN is refused by the API server, naming the field.
#[tokio::test]
async fn an_arn_as_tenant_id_is_refused_by_the_api_server() {
    let h = Harness::start("dt-adopt-arn").await;
    let arn = "arn:aws:cloudfront::123456789012:distribution-tenant/dt_2wjDZi3hD1ivOXf6rpZJOSNE1AB";
    let object = DistributionTenant::new("shop-arn", adopting(h.spec(&["www"]), arn));
    let api = kube::Api::<DistributionTenant>::namespaced(h.client.clone(), &h.namespace);
    let refused = api.create(&kube::api::PostParams::default(), &object).await.expect_err("refused");
    assert!(refused.to_string().contains("spec.adopt.tenantId"), "{refused}");
}

/// A tenant's total of CloudFront writes as both "clusters" made them: two namespaces of the
/// test API server stand for two clusters (two objects of one name, two UIDs, two controllers,
/// each with its own AWS layer and fault proxy), against the one MiniStack account.
fn writes_of_both(a: &Harness, b: &Harness) -> [(&'static str, usize); 4] {
    let (a, b) = (writes(a), writes(b));
    [0, 1, 2, 3].map(|i| (a[i].0, a[i].1 + b[i].1))
}

fn lost(tenant: &DistributionTenant) -> bool {
    condition(tenant, "Ready").is_some_and(|c| c.1 == "OwnershipLost")
}

#[tokio::test]
async fn moving_a_tenant_to_another_cluster_hands_it_over_and_the_old_object_lets_go() {
    let old = Harness::start("dt-move-old").await;
    let new = Harness::start("dt-move-new").await;
    old.create("shop-move", old.spec(&["www"])).await;
    let held = old.wait_ready("shop-move").await;
    let id = held.status.as_ref().and_then(|s| s.observation.id.clone()).unwrap();
    // The same manifest in the new cluster, with the adoption set.
    new.create("shop-move", adopting(old.spec(&["www"]), &id)).await;
    let adopted = new.wait_ready("shop-move").await;
    assert_eq!(tags(&new, "shop-move").await.0, adopted.uid());
    let gone = old.wait_for("shop-move", "OwnershipLost", lost).await;
    assert!(gone.status.as_ref().unwrap().observation.ownership_lost);
    // The old cluster's object goes, deleting nothing; the new one keeps acting on the tenant.
    old.delete_and_wait("shop-move").await;
    assert!(new.aws_tenant("shop-move").await.is_some(), "the tenant stays");
    new.set_enabled_outside("shop-move", false).await;
    let repaired = async || match new.aws_tenant("shop-move").await.unwrap().0.enabled() {
        Some(true) => Ok(()),
        other => Err(format!("enabled {other:?}")),
    };
    blockwork_testenv::harness::eventually("the new owner to repair drift", blockwork_testenv::harness::TIMEOUT, repaired).await;
    assert_eq!(
        writes(&old),
        [("CreateDistributionTenant", 1), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 0)]
    );
    assert_eq!(
        writes(&new),
        [("CreateDistributionTenant", 0), ("UpdateDistributionTenant", 1), ("DeleteDistributionTenant", 0), ("TagResource", 1)]
    );
}

#[tokio::test]
async fn two_clusters_adopting_one_tenant_at_once_end_with_exactly_one_owner() {
    let a = Harness::start("dt-race-a").await;
    let b = Harness::start("dt-race-b").await;
    let id = made_outside(&a, "shop-race", &["www"], true).await;
    let spec = adopting(a.spec(&["www"]), &id);
    tokio::join!(a.create("shop-race", spec.clone()), b.create("shop-race", spec));
    let ready = |t: &DistributionTenant| condition(t, "Ready").is_some_and(|c| c.0 == "True");
    let both = async || (a.get("shop-race").await.unwrap(), b.get("shop-race").await.unwrap());
    let one_owner = async || {
        let (x, y) = both().await;
        match (lost(&x), lost(&y), ready(&x), ready(&y)) {
            (true, false, _, true) | (false, true, true, _) => Ok((lost(&x), lost(&y))),
            state => Err(format!("(lost, lost, ready, ready) = {state:?}")),
        }
    };
    let settled = blockwork_testenv::harness::eventually("one owner, one lost", blockwork_testenv::harness::TIMEOUT, one_owner).await;
    let tagged = tags(&a, "shop-race").await;
    // No flapping: five more looks of each (one a second) change nothing.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let (x, y) = both().await;
    assert_eq!((lost(&x), lost(&y)), settled, "lost is sticky, the owner stays the owner");
    let owner = if lost(&x) { y.uid() } else { x.uid() };
    assert_eq!(tagged.0, owner, "the tags name the owner");
    assert_eq!(tags(&a, "shop-race").await, tagged, "and keep naming it");
    let [creates, updates, deletes, tag_writes] = writes_of_both(&a, &b);
    assert_eq!((creates.1, updates.1, deletes.1), (0, 0, 0));
    assert!((1..=2).contains(&tag_writes.1), "each object tags at most once: {tag_writes:?}");
}

#[tokio::test]
async fn the_same_manifest_in_a_new_cluster_creates_nothing_and_adopts_the_tenant_once_told() {
    let h = Harness::start("dt-new-cluster").await;
    h.create("shop-new", h.spec(&["www"])).await;
    let held = h.wait_ready("shop-new").await;
    let id = held.status.as_ref().and_then(|s| s.observation.id.clone()).unwrap();
    let new = h.second_cluster().await;
    new.objects.create(&kube::api::PostParams::default(), &DistributionTenant::new("shop-new", h.spec(&["www"]))).await.unwrap();
    let owned_elsewhere = async || {
        let object = new.objects.get("shop-new").await.map_err(|e| e.to_string())?;
        match condition(&object, "Ready") {
            Some((_, reason, message)) if reason == "OwnedElsewhere" => Ok(message),
            other => Err(format!("{other:?}")),
        }
    };
    let message = blockwork_testenv::harness::eventually("OwnedElsewhere", blockwork_testenv::harness::TIMEOUT, owned_elsewhere).await;
    assert!(message.contains(&format!("set spec.adopt.tenantId to {id}")), "{message}");
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1, "no second tenant is created for the same manifest");
    // The documented move: the new cluster's manifest names the tenant to adopt.
    let patch = serde_json::json!({ "spec": { "adopt": { "tenantId": id } } });
    new.objects.patch("shop-new", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    let adopted = async || {
        let object = new.objects.get("shop-new").await.map_err(|e| e.to_string())?;
        match condition(&object, "Ready") {
            Some((status, ..)) if status == "True" => Ok(object),
            other => Err(format!("{other:?}")),
        }
    };
    let adopted = blockwork_testenv::harness::eventually("adopted in the new cluster", blockwork_testenv::harness::TIMEOUT, adopted).await;
    assert_eq!(tags(&h, "shop-new").await, (adopted.uid(), Some(format!("{}/shop-new", h.namespace))));
    h.wait_for("shop-new", "OwnershipLost in the old cluster", lost).await;
    h.delete_and_wait("shop-new").await;
    assert!(h.aws_tenant("shop-new").await.is_some(), "the old cluster's object goes, the tenant stays");
    assert_eq!(
        writes(&h),
        [("CreateDistributionTenant", 1), ("UpdateDistributionTenant", 0), ("DeleteDistributionTenant", 0), ("TagResource", 1)]
    );
}
