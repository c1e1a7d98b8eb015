//! The DNS record of a domain that left a DistributionTenant's spec is deleted once the tenant no
//! longer serves it, and only as the object's annotations allow (ADR 0001, docs/tenant.md: it
//! finishes an update, so it takes the `U` access permission): against the real kube-apiserver,
//! MiniStack and moto (whose tenant names are global: each test names its own), annotations in, Route 53 records and conditions out.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::{Harness, condition};
use aws_sdk_cloudfront::types::DomainItem;
use blockwork_runtime::policy::ACCESS_ANNOTATION;
use serde_json::json;

/// Sets the tenant's domains in CloudFront behind the operator's back, keeping the rest.
async fn set_domains_outside(h: &Harness, name: &str, domains: &[String]) {
    let (tenant, e_tag) = h.aws_tenant(name).await.expect("tenant exists in MiniStack");
    let items = domains.iter().map(|d| DomainItem::builder().domain(d).build().unwrap()).collect();
    let update = h.aws.update_distribution_tenant().id(tenant.id().unwrap()).if_match(e_tag);
    let update = update.distribution_id(tenant.distribution_id().unwrap()).set_domains(Some(items));
    update.enabled(tenant.enabled().unwrap_or(true)).send().await.expect("tenant is changed in MiniStack");
}

#[tokio::test]
async fn a_read_only_tenant_keeps_the_record_of_a_removed_domain_until_it_may_update() {
    let h = Harness::start("dt-upkeep-read-only").await;
    h.create("upkeep-ro", h.dns_spec(&["www", "api"], &h.zone_id, 60)).await;
    h.wait_ready("upkeep-ro").await;
    let both = [h.domain("api"), h.domain("www")];
    h.wait_for_records(&both).await;
    h.annotate("upkeep-ro", ACCESS_ANNOTATION, Some("R")).await;
    // The user removes api from the spec; read-only, the operator refuses to push it…
    let generation = h.merge("upkeep-ro", json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await.metadata.generation.unwrap();
    h.wait_for("upkeep-ro", "refusing the update", |t| condition(t, "Ready").is_some_and(|c| c.1 == "UpdateNotPermitted")).await;
    // …so the user removes it in CloudFront by hand: the tenant matches the spec again.
    set_domains_outside(&h, "upkeep-ro", &[h.domain("www")]).await;
    h.wait_ready_at("upkeep-ro", generation).await;
    let writes = h.dns_proxy.calls("ChangeResourceRecordSets");
    // Looks go on; none deletes the record.
    h.proxy.wait_for_calls("GetDistributionTenant", h.proxy.calls("GetDistributionTenant") + 3).await;
    assert_eq!(h.record_names().await, both, "a read-only tenant deletes no record");
    assert_eq!(h.dns_proxy.calls("ChangeResourceRecordSets"), writes, "{:?}", h.dns_proxy.all_calls());

    // The same tenant with the update permission: the removed domain's record goes.
    h.annotate("upkeep-ro", ACCESS_ANNOTATION, None).await;
    h.wait_for_records(&[h.domain("www")]).await;
}

#[tokio::test]
async fn a_tenant_under_the_report_drift_policy_still_deletes_the_record_of_a_domain_removed_from_its_spec() {
    let h = Harness::start("dt-upkeep-report").await;
    h.create_annotated("upkeep-report", h.dns_spec(&["www", "api"], &h.zone_id, 60), "report").await;
    h.wait_ready("upkeep-report").await;
    h.wait_for_records(&[h.domain("api"), h.domain("www")]).await;
    let generation =
        h.merge("upkeep-report", json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await.metadata.generation.unwrap();
    h.wait_ready_at("upkeep-report", generation).await;
    h.wait_for_records(&[h.domain("www")]).await;
    let (tenant, _) = h.aws_tenant("upkeep-report").await.unwrap();
    assert_eq!(tenant.domains().iter().map(|d| d.domain()).collect::<Vec<_>>(), [h.domain("www")], "CloudFront no longer serves api");
}
