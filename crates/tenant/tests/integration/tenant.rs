//! The DistributionTenant controller against a real kube-apiserver and MiniStack's CloudFront
//! tenant APIs, through a fault proxy.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::{DNS_ACCOUNT, DNS_ROLE, Harness, RETRIES, condition, quick_timing, state};
use blockwork_identity::{AwsIdentitySpec, HostedZoneGrant};
use blockwork_runtime::{DriftPolicy, ReconcileState};
use blockwork_tenant::api::{CertificateRef, Customizations, DriftPolicyName, ValidationTokenHost};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec, Timing};
use blockwork_testenv::aws::{cnames, delete_cname, delete_distribution, upsert_cname};
use blockwork_testenv::emulators::Emulator;
use blockwork_testenv::fault_proxy::{Fault, Operation};
use blockwork_testenv::harness::{TIMEOUT, eventually};
use kube::api::{DeleteParams, PostParams};

fn aws_domains(tenant: &aws_sdk_cloudfront::types::DistributionTenant) -> Vec<String> {
    let mut domains: Vec<String> = tenant.domains().iter().map(|d| d.domain().to_owned()).collect();
    domains.sort();
    domains
}

#[tokio::test]
async fn tenant_is_created_and_becomes_ready_with_its_aws_status() {
    let h = Harness::start("dt-create").await;
    h.create("shop-one", h.spec(&["www"])).await;
    let tenant = h.wait_ready("shop-one").await;
    let status = tenant.status.as_ref().unwrap();
    let (aws, e_tag) = h.aws_tenant("shop-one").await.expect("tenant exists in MiniStack");
    assert_eq!(status.observation.id.as_deref(), aws.id());
    assert_eq!(status.observation.arn.as_deref(), aws.arn());
    assert_eq!(status.observation.e_tag.as_deref(), Some(e_tag.as_str()));
    assert_eq!(status.observation.distribution_tenant_status.as_deref(), Some("Deployed"));
    assert!(status.observation.dns_target.as_deref().is_some_and(|t| t.ends_with(".cloudfront.net")), "{status:#?}");
    assert_eq!(condition(&tenant, "DNSReady").map(|c| (c.0, c.1)), Some(("True".to_owned(), "DNSNotConfigured".to_owned())));
    assert_eq!(aws_domains(&aws), [h.domain("www")]);
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1);
}

#[tokio::test]
async fn tenants_of_one_connection_group_share_one_lookup_of_its_routing_endpoint() {
    let h = Harness::start("dt-routing").await;
    h.create("shop-a", h.spec(&["a"])).await;
    h.create("shop-b", h.spec(&["b"])).await;
    h.create("shop-c", h.dns_spec(&["c"], &h.zone_id, 120)).await;
    for name in ["shop-a", "shop-b", "shop-c"] {
        let tenant = h.wait_ready(name).await;
        let target = tenant.status.as_ref().and_then(|s| s.observation.dns_target.as_deref());
        assert!(target.is_some_and(|t| t.ends_with(".cloudfront.net")), "{name}: {target:?}");
    }
    // Before a create the spec names no group (the account's default is listed); after it,
    // CloudFront reports the group's id (read by id). Each once, for all three tenants.
    let calls = h.proxy.all_calls();
    assert_eq!(h.proxy.calls("ListConnectionGroups"), 1, "{calls:?}");
    assert!(h.proxy.calls("GetConnectionGroup") <= 1, "{calls:?}");
}

#[tokio::test]
async fn spec_change_is_pushed_to_cloudfront() {
    let h = Harness::start("dt-update").await;
    h.create("shop-two", h.spec(&["www"])).await;
    h.wait_ready("shop-two").await;
    h.merge("shop-two", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}, {"domain": h.domain("api")}]}})).await;
    h.wait_ready_at("shop-two", 2).await;
    let (aws, _) = h.aws_tenant("shop-two").await.unwrap();
    let mut want = vec![h.domain("api"), h.domain("www")];
    want.sort();
    assert_eq!(aws_domains(&aws), want);
}

#[tokio::test]
async fn drift_is_repaired_under_enforce() {
    let h = Harness::start("dt-enforce").await;
    h.create("shop-three", h.spec(&["www"])).await;
    h.wait_ready("shop-three").await;
    h.set_enabled_outside("shop-three", false).await;
    let enabled =
        async || if h.aws_tenant("shop-three").await.unwrap().0.enabled().unwrap_or(true) { Ok(()) } else { Err("disabled".to_owned()) };
    eventually("the operator to re-enable the tenant", TIMEOUT, enabled).await;
    assert!(h.metrics_text().contains("cloudfront_tenant_operator_drift_detected_total 1"), "{}", h.metrics_text());
}

#[tokio::test]
async fn drift_is_reported_under_the_report_default() {
    let h = Harness::start_with("dt-report", DriftPolicy::Report).await;
    h.create("shop-four", h.spec(&["www"])).await;
    h.wait_ready("shop-four").await;
    h.set_enabled_outside("shop-four", false).await;
    let tenant =
        h.wait_for("shop-four", "Synced=False/DriftDetected", |t| condition(t, "Synced").is_some_and(|c| c.1 == "DriftDetected")).await;
    assert_eq!(tenant.status.as_ref().unwrap().drift_detected, Some(true));
    assert!(condition(&tenant, "Synced").unwrap().2.contains("enabled is false, want true"), "{:#?}", tenant.status);
    assert_eq!(h.aws_tenant("shop-four").await.unwrap().0.enabled(), Some(false), "report must not repair");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0);
}

#[tokio::test]
async fn drift_is_only_recorded_under_suspend() {
    let h = Harness::start("dt-suspend").await;
    h.create_annotated("shop-five", h.spec(&["www"]), "suspend").await;
    h.wait_ready("shop-five").await;
    h.set_enabled_outside("shop-five", false).await;
    let tenant = h.wait_for("shop-five", "drift recorded", |t| t.status.as_ref().and_then(|s| s.drift_detected) == Some(true)).await;
    assert_eq!(condition(&tenant, "Synced").map(|c| c.0), Some("True".to_owned()));
    assert_eq!(h.aws_tenant("shop-five").await.unwrap().0.enabled(), Some(false), "suspend must not repair");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0);
}

#[tokio::test]
async fn tenant_deleted_in_aws_is_recreated_under_enforce() {
    let h = Harness::start("dt-gone").await;
    h.create("shop-six", h.spec(&["www"])).await;
    let first = h.wait_ready("shop-six").await.status.unwrap().observation.id.unwrap();
    h.delete_outside("shop-six").await;
    let tenant = h
        .wait_for("shop-six", "Ready with a new tenant", |t| {
            t.status.as_ref().and_then(|s| s.observation.id.as_deref()).is_some_and(|id| id != first)
                && condition(t, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
    let (aws, _) = h.aws_tenant("shop-six").await.expect("recreated in MiniStack");
    assert_eq!(aws.id(), tenant.status.unwrap().observation.id.as_deref());
}

#[tokio::test]
async fn deleting_the_object_disables_then_deletes_the_tenant() {
    let h = Harness::start("dt-delete").await;
    h.create("shop-seven", h.spec(&["www"])).await;
    h.wait_ready("shop-seven").await;
    h.delete_and_wait("shop-seven").await;
    assert!(h.aws_tenant("shop-seven").await.is_none(), "the tenant is deleted in MiniStack");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 1, "disabled once before the delete");
    assert_eq!(h.proxy.calls("DeleteDistributionTenant"), 1, "CloudFront never saw a delete of an enabled tenant");
}

#[tokio::test]
async fn object_whose_tenant_is_already_gone_is_released() {
    let h = Harness::start("dt-delete-gone").await;
    h.create("shop-eight", h.spec(&["www"])).await;
    h.wait_ready("shop-eight").await;
    h.delete_outside("shop-eight").await;
    h.delete_and_wait("shop-eight").await;
    assert_eq!(h.proxy.calls("DeleteDistributionTenant"), 0);
}

#[tokio::test]
async fn throttled_call_is_not_retried_before_the_throttle_floor() {
    let h = Harness::start("dt-throttle").await;
    h.create("shop-nine", h.spec(&["www"])).await;
    h.wait_ready("shop-nine").await;
    // The layer retries throttling (twice in these tests): three in a row reach the operator.
    h.proxy.inject(Operation::named("GetDistributionTenant"), Fault::Throttling, RETRIES + 1);
    let tenant = h.wait_for("shop-nine", "Synced=False/Throttling", |t| condition(t, "Synced").is_some_and(|c| c.1 == "Throttling")).await;
    assert_eq!(condition(&tenant, "Synced").unwrap().2, "Rate exceeded", "the AWS message is kept");
    let calls = h.proxy.calls("GetDistributionTenant");
    // The steady-state requeue is 1 s in these tests; throttling holds off for 54-66 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(h.proxy.calls("GetDistributionTenant"), calls, "no call before the throttle floor");
    assert!(
        h.metrics_text().contains("cloudfront_tenant_operator_reconcile_errors_total{error_type=\"throttling\"} 1"),
        "{}",
        h.metrics_text()
    );
}

#[tokio::test]
async fn stale_etag_is_refetched_and_the_update_retried_at_once() {
    let h = Harness::start("dt-etag").await;
    h.create("shop-ten", h.spec(&["www"])).await;
    h.wait_ready("shop-ten").await;
    let stale = Fault::Custom {
        status: 412,
        code: "PreconditionFailed".to_owned(),
        message: "The precondition given in one or more of the request-header fields evaluated to false.".to_owned(),
    };
    h.proxy.inject(Operation::named("UpdateDistributionTenant"), stale, 1);
    let gets_before = h.proxy.calls("GetDistributionTenant");
    h.merge("shop-ten", serde_json::json!({"spec": {"enabled": false}})).await;
    h.wait_ready_at("shop-ten", 2).await;
    assert_eq!(h.aws_tenant("shop-ten").await.unwrap().0.enabled(), Some(false));
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 2, "the rejected update and its immediate retry");
    assert!(h.proxy.calls("GetDistributionTenant") >= gets_before + 2, "verify and the ETag re-fetch");
    assert!(!h.metrics_text().contains("reconcile_errors_total{"), "an ETag mismatch is not an error: {}", h.metrics_text());
}

#[tokio::test]
async fn access_denied_on_create_fails_with_the_sanitized_aws_message() {
    let h = Harness::start("dt-denied").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::AccessDenied, 1);
    h.create("shop-eleven", h.spec(&["www"])).await;
    let tenant = h.wait_for("shop-eleven", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!(reason, "AccessDenied");
    assert_eq!(message, "User: [ARN] is not authorized to perform this action");
    assert!(h.metrics_text().contains("error_type=\"access_denied\"} 1"), "{}", h.metrics_text());
    // Terminal, yet retried on the Failed interval: the next create goes through.
    h.wait_ready("shop-eleven").await;
}

#[tokio::test]
async fn certificate_outside_us_east_1_fails_validation_without_calling_cloudfront() {
    let h = Harness::start("dt-invalid").await;
    let spec = DistributionTenantSpec {
        customizations: Some(Customizations {
            certificate: Some(CertificateRef {
                arn: Some("arn:aws:acm:eu-west-1:123456789012:certificate/abc".to_owned()),
                cert_ref: None,
            }),
            ..Customizations::default()
        }),
        ..h.spec(&["www"])
    };
    h.create("shop-twelve", spec).await;
    let tenant = h.wait_for("shop-twelve", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("us-east-1"), "{message}");
    assert!(h.proxy.all_calls().is_empty(), "{:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn invalid_tenant_names_are_rejected_by_the_api_server() {
    let h = Harness::start("dt-names").await;
    for name in ["ab", "-shop", "shop-", &"a".repeat(129)] {
        let result = h.api().create(&PostParams::default(), &DistributionTenant::new(name, h.spec(&["www"]))).await;
        let error = result.err().unwrap_or_else(|| panic!("{name} was accepted"));
        assert!(error.to_string().contains("CloudFront tenant name") || error.to_string().contains("metadata.name"), "{name}: {error}");
    }
}

#[tokio::test]
async fn dns_ttl_defaults_to_300_and_is_bounded() {
    let h = Harness::start("dt-ttl").await;
    let mut object = serde_json::to_value(DistributionTenant::new("shop-ttl", h.spec(&["www"]))).unwrap();
    object["spec"]["dns"] = serde_json::json!({"provider": "route53", "hostedZoneId": "Z1"});
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &kube::api::ApiResource::erase::<DistributionTenant>(&()),
    );
    let created = api.create(&PostParams::default(), &serde_json::from_value(object.clone()).unwrap()).await.unwrap();
    assert_eq!(created.data["spec"]["dns"]["ttl"], 300);
    object["metadata"]["name"] = serde_json::json!("shop-ttl-low");
    object["spec"]["dns"]["ttl"] = serde_json::json!(59);
    assert!(api.create(&PostParams::default(), &serde_json::from_value(object.clone()).unwrap()).await.is_err(), "ttl 59 accepted");
    object["spec"]["dns"]["ttl"] = serde_json::json!(172801);
    assert!(api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.is_err(), "ttl 172801 accepted");
}

#[tokio::test]
async fn certificate_not_covering_every_domain_is_a_san_mismatch() {
    let h = Harness::start("dt-san").await;
    let arn = h.certificate(&[h.domain("www")]).await;
    let spec = DistributionTenantSpec {
        customizations: Some(Customizations {
            certificate: Some(CertificateRef { arn: Some(arn), cert_ref: None }),
            ..Customizations::default()
        }),
        ..h.spec(&["www", "api"])
    };
    h.create("shop-san", spec).await;
    let tenant = h.wait_for("shop-san", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    let (_, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!(reason, "CertificateSANMismatch");
    assert!(message.contains(&h.domain("api")) && !message.contains(&h.domain("www")), "{message}");
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 0);
}

#[tokio::test]
async fn wildcard_certificate_covering_every_domain_is_attached() {
    let h = Harness::start("dt-wildcard").await;
    let arn = h.certificate(&[h.domain("*")]).await;
    let spec = DistributionTenantSpec {
        customizations: Some(Customizations {
            certificate: Some(CertificateRef { arn: Some(arn.clone()), cert_ref: None }),
            ..Customizations::default()
        }),
        ..h.spec(&["www", "api"])
    };
    h.create("shop-wildcard", spec).await;
    h.wait_ready("shop-wildcard").await;
    let (aws, _) = h.aws_tenant("shop-wildcard").await.unwrap();
    assert_eq!(aws.customizations().and_then(|c| c.certificate()).map(|c| c.arn()), Some(arn.as_str()));
}

#[tokio::test]
async fn server_error_is_retried_with_backoff_and_counted() {
    let h = Harness::start("dt-retry").await;
    h.create("shop-retry", h.spec(&["www"])).await;
    h.wait_ready("shop-retry").await;
    // The layer retries a 5xx (twice in these tests) before the operator sees it.
    h.proxy.inject(Operation::named("GetDistributionTenant"), Fault::ServerError(500), RETRIES + 1);
    h.wait_for("shop-retry", "Synced=False/InternalFailure", |t| condition(t, "Synced").is_some_and(|c| c.1 == "InternalFailure")).await;
    h.wait_for("shop-retry", "Synced again", |t| condition(t, "Synced").is_some_and(|c| c.0 == "True")).await;
    let text = h.metrics_text();
    assert!(text.contains("error_type=\"retryable\"} 1"), "{text}");
    assert!(
        text.contains(&format!(
            r#"blockwork_aws_calls_total{{service="cloudfront",operation="GetDistributionTenant",result="retryable",identity="operator"}} {}"#,
            RETRIES + 1
        )),
        "every attempt is counted: {text}"
    );
}

#[tokio::test]
async fn invalid_argument_with_cloudfront_validation_is_domain_validation_pending_and_retried() {
    let h = Harness::start("dt-dvp").await;
    let pending = Fault::Custom {
        status: 400,
        code: "InvalidArgument".to_owned(),
        message: "The domain could not be validated: CNAME not resolvable".to_owned(),
    };
    h.proxy.inject(Operation::named("CreateDistributionTenant"), pending, 1);
    let spec = h.managed_spec(&["www"], ValidationTokenHost::Cloudfront);
    h.create("shop-dvp", spec).await;
    let tenant = h
        .wait_for("shop-dvp", "DomainValidationPending", |t| condition(t, "Ready").is_some_and(|c| c.1 == "DomainValidationPending"))
        .await;
    assert!(condition(&tenant, "Ready").unwrap().2.contains("CNAME not resolvable"), "the AWS message is kept");
    assert!(h.metrics_text().contains("error_type=\"domain_validation_pending\"} 1"), "{}", h.metrics_text());
    h.wait_ready("shop-dvp").await;
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 2);
}

#[tokio::test]
async fn domain_taken_by_another_tenant_is_a_terminal_domain_conflict() {
    let h = Harness::start("dt-conflict").await;
    h.create("shop-first", h.spec(&["www"])).await;
    h.wait_ready("shop-first").await;
    h.create("shop-second", h.spec(&["www"])).await;
    let tenant = h.wait_for("shop-second", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    assert_eq!(condition(&tenant, "Ready").map(|c| c.1), Some("CNAMEAlreadyExists".to_owned()));
    assert!(h.metrics_text().contains("error_type=\"domain_conflict\"}"), "{}", h.metrics_text());
}

#[tokio::test]
async fn missing_connection_group_is_terminal() {
    let h = Harness::start("dt-group").await;
    let spec = DistributionTenantSpec { connection_group_id: Some("cg_missing".to_owned()), ..h.spec(&["www"]) };
    h.create("shop-group", spec).await;
    let tenant = h.wait_for("shop-group", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    assert_eq!(condition(&tenant, "Ready").map(|c| c.1), Some("ConnectionGroupNotFound".to_owned()));
    assert!(h.metrics_text().contains("error_type=\"connection_group_not_found\"}"), "{}", h.metrics_text());
}

#[tokio::test]
async fn crash_after_disabling_still_deletes_the_tenant() {
    let mut h = Harness::start("dt-crash-disable").await;
    h.create("shop-crash-a", h.spec(&["www"])).await;
    h.wait_ready("shop-crash-a").await;
    // Every delete fails, so the controller is stopped with the tenant disabled but not deleted.
    h.proxy.inject(Operation::named("DeleteDistributionTenant"), Fault::ServerError(500), usize::MAX);
    h.api().delete("shop-crash-a", &DeleteParams::default()).await.unwrap();
    h.proxy.wait_for_calls("DeleteDistributionTenant", 1).await;
    h.controller.crash();
    assert_eq!(h.aws_tenant("shop-crash-a").await.unwrap().0.enabled(), Some(false));
    h.proxy.clear();
    h.start_controller().await;
    h.wait_gone("shop-crash-a").await;
    assert!(h.aws_tenant("shop-crash-a").await.is_none(), "nothing leaked");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0, "an already disabled tenant is not disabled again");
}

#[tokio::test]
async fn crash_during_the_delete_call_still_deletes_the_tenant_and_releases_the_object() {
    let mut h = Harness::start("dt-crash-delete").await;
    h.create("shop-crash-b", h.spec(&["www"])).await;
    h.wait_ready("shop-crash-b").await;
    h.proxy.inject(Operation::named("DeleteDistributionTenant"), Fault::Latency(Duration::from_secs(2)), 1);
    h.api().delete("shop-crash-b", &DeleteParams::default()).await.unwrap();
    h.proxy.wait_for_calls("DeleteDistributionTenant", 1).await;
    // The controller dies with the delete in flight: whether it lands or not, nothing recorded it.
    h.controller.crash();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.start_controller().await;
    h.wait_gone("shop-crash-b").await;
    assert!(h.aws_tenant("shop-crash-b").await.is_none(), "nothing leaked");
}

#[tokio::test]
async fn tenant_of_the_same_name_made_by_someone_else_is_neither_adopted_nor_deleted() {
    let h = Harness::start("dt-taken").await;
    let domain = aws_sdk_cloudfront::types::DomainItem::builder().domain(h.domain("theirs")).build().unwrap();
    h.aws
        .create_distribution_tenant()
        .name("shop-taken")
        .distribution_id(&h.distribution_id)
        .domains(domain)
        .send()
        .await
        .expect("someone else's tenant is created in MiniStack");
    h.create("shop-taken", h.spec(&["www"])).await;
    let tenant = h.wait_for("shop-taken", "Failed", |t| state(t) == Some(ReconcileState::Failed)).await;
    assert_eq!(condition(&tenant, "Ready").map(|c| c.1), Some("TenantNameTaken".to_owned()));
    h.delete_and_wait("shop-taken").await;
    let (theirs, _) = h.aws_tenant("shop-taken").await.expect("their tenant is still there");
    assert_eq!(aws_domains(&theirs), [h.domain("theirs")]);
    assert_eq!(h.proxy.calls("UpdateDistributionTenant") + h.proxy.calls("DeleteDistributionTenant"), 0);
}

#[tokio::test]
async fn crash_during_the_create_call_ends_with_one_ready_tenant() {
    let mut h = Harness::start("dt-crash-create").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::Latency(Duration::from_secs(2)), 1);
    h.create("shop-crash-c", h.spec(&["www"])).await;
    h.proxy.wait_for_calls("CreateDistributionTenant", 1).await;
    h.controller.crash();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.start_controller().await;
    let tenant = h.wait_ready("shop-crash-c").await;
    let (aws, _) = h.aws_tenant("shop-crash-c").await.expect("the tenant exists");
    assert_eq!(tenant.status.unwrap().observation.id.as_deref(), aws.id(), "the object owns the one tenant");
}

#[tokio::test]
async fn spec_drift_policy_report_beats_the_enforce_default() {
    let h = Harness::start("dt-spec-report").await;
    h.create("shop-spec-report", DistributionTenantSpec { drift_policy: Some(DriftPolicyName::Report), ..h.spec(&["www"]) }).await;
    h.wait_ready("shop-spec-report").await;
    h.set_enabled_outside("shop-spec-report", false).await;
    let tenant = h
        .wait_for("shop-spec-report", "Synced=False/DriftDetected", |t| condition(t, "Synced").is_some_and(|c| c.1 == "DriftDetected"))
        .await;
    assert_eq!(tenant.status.as_ref().unwrap().drift_detected, Some(true));
    assert_eq!(h.aws_tenant("shop-spec-report").await.unwrap().0.enabled(), Some(false), "report must not repair");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0);
}

#[tokio::test]
async fn spec_drift_policy_suspend_only_records_drift() {
    let h = Harness::start("dt-spec-suspend").await;
    h.create("shop-spec-suspend", DistributionTenantSpec { drift_policy: Some(DriftPolicyName::Suspend), ..h.spec(&["www"]) }).await;
    h.wait_ready("shop-spec-suspend").await;
    h.set_enabled_outside("shop-spec-suspend", false).await;
    let tenant =
        h.wait_for("shop-spec-suspend", "drift recorded", |t| t.status.as_ref().and_then(|s| s.drift_detected) == Some(true)).await;
    assert_eq!(condition(&tenant, "Synced").map(|c| c.0), Some("True".to_owned()));
    assert_eq!(h.aws_tenant("shop-spec-suspend").await.unwrap().0.enabled(), Some(false), "suspend must not repair");
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0);
}

#[tokio::test]
async fn spec_drift_policy_enforce_beats_the_report_default() {
    let h = Harness::start_with("dt-spec-enforce", DriftPolicy::Report).await;
    h.create("shop-spec-enforce", DistributionTenantSpec { drift_policy: Some(DriftPolicyName::Enforce), ..h.spec(&["www"]) }).await;
    h.wait_ready("shop-spec-enforce").await;
    h.set_enabled_outside("shop-spec-enforce", false).await;
    let enabled = async || {
        if h.aws_tenant("shop-spec-enforce").await.unwrap().0.enabled().unwrap_or(true) { Ok(()) } else { Err("disabled".to_owned()) }
    };
    eventually("the operator to re-enable the tenant", TIMEOUT, enabled).await;
}

#[tokio::test]
async fn issued_managed_certificate_is_written_into_the_spec_once_and_pushed_to_cloudfront() {
    let h = Harness::start("dt-managed").await;
    let spec = h.managed_spec(&["www"], ValidationTokenHost::SelfHosted);
    h.create("shop-managed", spec).await;
    let tenant =
        h.wait_for("shop-managed", "certificate attached", |t| condition(t, "CertificateReady").is_some_and(|c| c.0 == "True")).await;
    let status = tenant.status.as_ref().unwrap();
    assert_eq!(status.observation.managed_certificate_status.as_deref(), Some("issued"));
    let arn = status.observation.certificate_arn.clone().expect("the managed certificate's ARN is in status");
    assert_eq!(tenant.spec.certificate_arn(), Some(arn.as_str()), "the operator wrote the ARN into the spec");
    assert_eq!(tenant.metadata.generation, Some(2), "exactly one spec write");
    assert_eq!(condition(&tenant, "CertificateReady").unwrap().1, "CertificateAttached");
    let (aws, _) = h.aws_tenant("shop-managed").await.unwrap();
    assert_eq!(aws.customizations().and_then(|c| c.certificate()).map(|c| c.arn().to_owned()), Some(arn));
    assert!(h.proxy.calls("UpdateDistributionTenant") >= 1, "the next reconcile pushed the spec to CloudFront");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.api().get("shop-managed").await.unwrap().metadata.generation, Some(2), "and never wrote the spec again");
}

#[tokio::test]
async fn operator_conditions_are_in_status_conditions_beside_ready_and_synced() {
    let h = Harness::start("dt-conditions").await;
    h.create("shop-conditions", h.spec(&["www"])).await;
    h.wait_ready("shop-conditions").await;
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &kube::api::ApiResource::erase::<DistributionTenant>(&()),
    );
    let raw = api.get("shop-conditions").await.unwrap();
    let types: Vec<&str> = raw.data["status"]["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    assert!(types.contains(&"DNSReady") && types.contains(&"Ready") && types.contains(&"Synced"), "{types:?}");
    assert!(raw.data["status"].get("tenantConditions").is_none(), "{:#?}", raw.data["status"]);
}

#[tokio::test]
async fn dns_records_are_in_sync_before_the_tenant_is_created() {
    let h = Harness::start("dt-dns-first").await;
    h.proxy.inject(Operation::named("CreateDistributionTenant"), Fault::Latency(Duration::from_secs(2)), 1);
    h.create("shop-dns", h.dns_spec(&["www", "api"], &h.zone_id, 120)).await;
    h.proxy.wait_for_calls("CreateDistributionTenant", 1).await;
    // The create call is in flight: the records must already be there, and their change polled.
    let records = cnames(&h.route53, &h.zone_id).await;
    assert_eq!(records.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), [h.domain("api"), h.domain("www")]);
    assert!(records.iter().all(|r| r.1.ends_with(".cloudfront.net") && r.2 == 120), "{records:?}");
    assert!(h.dns_proxy.calls("GetChange") >= 1, "INSYNC was confirmed first: {:?}", h.dns_proxy.all_calls());
    let tenant = h.wait_ready("shop-dns").await;
    let status = tenant.status.as_ref().unwrap();
    assert_eq!(condition(&tenant, "DNSReady").map(|c| (c.0, c.1)), Some(("True".to_owned(), "DNSReady".to_owned())));
    assert!(status.observation.dns_change_id.is_some());
    assert_eq!(status.observation.dns_target.as_deref(), Some(records[0].1.as_str()));
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1);
}

#[tokio::test]
async fn pending_dns_change_is_waited_for_before_the_tenant_is_created() {
    let h = Harness::start("dt-dns-pending").await;
    h.dns_proxy.inject(Operation::named("GetChange"), Fault::PendingChange, 2);
    h.create("shop-pending", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_for("shop-pending", "DNSPropagating", |t| condition(t, "DNSReady").is_some_and(|c| c.1 == "DNSPropagating")).await;
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 0, "no tenant while the records are PENDING");
    h.wait_ready("shop-pending").await;
    assert!(h.dns_proxy.calls("GetChange") >= 3, "two PENDING answers, then INSYNC: {:?}", h.dns_proxy.all_calls());
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1);
}

#[tokio::test]
async fn record_of_a_domain_removed_from_the_spec_is_deleted() {
    let h = Harness::start("dt-dns-orphan").await;
    h.create("shop-orphan", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_ready("shop-orphan").await;
    h.merge("shop-orphan", serde_json::json!({"spec": {"domains": [{"domain": h.domain("www")}]}})).await;
    let orphan_gone = async || {
        let names: Vec<String> = cnames(&h.route53, &h.zone_id).await.into_iter().map(|r| r.0).collect();
        if names == [h.domain("www")] { Ok(()) } else { Err(format!("{names:?}")) }
    };
    eventually("the orphaned record to go", TIMEOUT, orphan_gone).await;
    let tenant = h
        .wait_for("shop-orphan", "one owned record", |t| {
            t.status.as_ref().is_some_and(|s| s.observation.dns_records.len() == 1 && s.observed_generation == Some(2))
        })
        .await;
    assert_eq!(tenant.status.unwrap().observation.dns_records, [h.domain("www")]);
    let (aws, _) = h.aws_tenant("shop-orphan").await.unwrap();
    assert_eq!(aws_domains(&aws), [h.domain("www")]);
}

#[tokio::test]
async fn deleting_the_object_deletes_only_the_records_it_created() {
    let h = Harness::start("dt-dns-delete").await;
    upsert_cname(&h.route53, &h.zone_id, &h.domain("other"), "someone.example.net").await;
    h.create("shop-dns-delete", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_ready("shop-dns-delete").await;
    // Someone repoints one of the tenant's records: it is theirs now.
    upsert_cname(&h.route53, &h.zone_id, &h.domain("api"), "elsewhere.example.net").await;
    h.delete_and_wait("shop-dns-delete").await;
    assert!(h.aws_tenant("shop-dns-delete").await.is_none());
    let left: Vec<(String, String)> = cnames(&h.route53, &h.zone_id).await.into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        left,
        [(h.domain("api"), "elsewhere.example.net".to_owned()), (h.domain("other"), "someone.example.net".to_owned())],
        "only the record still pointing at CloudFront was deleted"
    );
}

#[tokio::test]
async fn cross_account_role_is_assumed_for_route53_only_and_cached() {
    let mut h = Harness::start("dt-dns-role").await;
    let moto = Emulator::multi_account_moto().await.unwrap();
    h.use_dns_emulator(&moto.endpoint()).await;
    let (theirs, their_zone) = h.other_account_zone(&moto.endpoint()).await;
    // The namespace acts with the operator's own credentials, and reaches the zone of the DNS
    // account through its role, as its mapping grants.
    let zone = HostedZoneGrant {
        id: their_zone.clone(),
        name: format!("{}.example.com", h.namespace),
        role_arn: Some(DNS_ROLE.to_owned()),
        ..HostedZoneGrant::default()
    };
    h.map(AwsIdentitySpec { namespaces: vec![h.namespace.clone()], hosted_zones: vec![zone], ..AwsIdentitySpec::default() }).await;
    let mut spec = h.dns_spec(&["www"], &their_zone, 300);
    spec.dns.as_mut().unwrap().assume_role_arn = Some(DNS_ROLE.to_owned());
    h.create("shop-role", spec).await;
    h.wait_ready("shop-role").await;
    let records = cnames(&theirs, &their_zone).await;
    assert_eq!(records.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), [h.domain("www")], "in account {DNS_ACCOUNT}'s zone");
    let own = h.route53.list_hosted_zones().send().await.unwrap();
    assert!(own.hosted_zones().iter().all(|z| !z.id().ends_with(&their_zone)), "the zone is not in the operator's account");
    assert!(cnames(&h.route53, &h.zone_id).await.is_empty(), "nothing was written with the operator's own credentials");
    assert_eq!(h.dns_proxy.calls("AssumeRole"), 1, "credentials are cached: {:?}", h.dns_proxy.all_calls());
    let sessions: Vec<String> = h.dns_proxy.accounts().assumed().into_iter().map(|r| r.session_name).collect();
    assert_eq!(sessions, [format!("blockwork.blockwork.{}", h.namespace)], "the session names the cluster and the namespace");
    assert!(h.dns_proxy.calls("ChangeResourceRecordSets") + h.dns_proxy.calls("GetChange") >= 2);
    assert_eq!(h.proxy.calls("AssumeRole"), 0, "CloudFront calls never use the role");
}

/// The confused deputy, closed (ADR 0014): a namespace no mapping grants a role names one that
/// trusts the operator. It is refused naming the field, before any AWS call.
#[tokio::test]
async fn a_role_the_namespace_is_not_granted_is_refused_before_any_aws_call() {
    let h = Harness::start("dt-hostile-role").await;
    let mut spec = h.dns_spec(&["www"], &h.zone_id, 300);
    spec.dns.as_mut().unwrap().assume_role_arn = Some("arn:aws:iam::999999999999:role/OrganizationAccountAccessRole".to_owned());
    h.create("shop-hostile", spec).await;
    let refused =
        h.wait_for("shop-hostile", "Synced=False/NotGranted", |t| condition(t, "Synced").is_some_and(|c| c.1 == "NotGranted")).await;
    let message = condition(&refused, "Synced").unwrap().2;
    assert!(message.starts_with("spec.dns.assumeRoleArn") && message.contains("assume no role"), "{message}");
    assert!(!message.contains("999999999999"), "{message}");
    assert!(h.dns_proxy.all_calls().is_empty(), "nothing reached Route 53 or STS: {:?}", h.dns_proxy.all_calls());
    assert!(h.proxy.all_calls().is_empty(), "nothing reached CloudFront: {:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn route53_throttling_and_prior_request_not_complete_are_retried_after_the_floor() {
    let timing = Timing { throttle_floor: Duration::from_secs(3), ..quick_timing() };
    let h = Harness::start_configured("dt-dns-throttle", DriftPolicy::Enforce, timing).await;
    // More than the layer's retries absorb, so that the operator's throttle floor shows.
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::PriorRequestNotComplete, RETRIES + 1);
    h.dns_proxy.inject(Operation::named("GetChange"), Fault::Throttling, RETRIES + 1);
    h.create("shop-dns-throttle", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    // The zone's batches are shared with every object writing to it (issue 37): their
    // throttling is a wait, told in the same words at every retry.
    let backing_off = |t: &DistributionTenant| condition(t, "Synced").is_some_and(|c| c.1 == "AccountBackingOff");
    let tenant = h.wait_for("shop-dns-throttle", "Synced=False/AccountBackingOff", backing_off).await;
    let message = condition(&tenant, "Synced").unwrap().2;
    for said in [format!("hosted zone {}", h.zone_id), "throttling it since".to_owned(), "Route 53 was still processing".to_owned()] {
        assert!(message.contains(&said), "{said} (the AWS message is kept): {message}");
    }
    let calls = h.dns_proxy.calls("ChangeResourceRecordSets");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.dns_proxy.calls("ChangeResourceRecordSets"), calls, "no retry before the throttle floor");
    // The runtime's error backoff grows with each failure in the Creating state: allow for it.
    let ready = async || match condition(&h.api().get("shop-dns-throttle").await.unwrap(), "Ready") {
        Some(c) if c.0 == "True" => Ok(()),
        _ => Err(format!("{:?}", h.dns_proxy.all_calls())),
    };
    eventually("shop-dns-throttle to be Ready", Duration::from_secs(90), ready).await;
    assert_eq!(h.dns_proxy.calls("ChangeResourceRecordSets"), RETRIES + 2, "PriorRequestNotComplete (retried), then accepted");
    assert!(h.dns_proxy.calls("GetChange") >= RETRIES + 2, "Throttling (retried), then INSYNC");
    assert!(h.metrics_text().contains("error_type=\"dns_throttling\"} 2"), "{}", h.metrics_text());
}

#[tokio::test]
async fn crash_while_deleting_the_records_still_deletes_them_and_releases_the_object() {
    let mut h = Harness::start("dt-dns-crash").await;
    h.create("shop-dns-crash", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_ready("shop-dns-crash").await;
    // Every record change fails from now on: the tenant goes, its records cannot.
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::ServerError(500), usize::MAX);
    h.api().delete("shop-dns-crash", &DeleteParams::default()).await.unwrap();
    h.dns_proxy.wait_for_calls("ChangeResourceRecordSets", 2).await;
    h.controller.crash();
    assert!(h.aws_tenant("shop-dns-crash").await.is_none(), "the tenant went first");
    assert_eq!(cnames(&h.route53, &h.zone_id).await.len(), 1, "the record is still there");
    h.dns_proxy.clear();
    h.start_controller().await;
    h.wait_gone("shop-dns-crash").await;
    assert!(cnames(&h.route53, &h.zone_id).await.is_empty(), "nothing leaked");
}

// --- deleting never hangs on what does not exist (issue 26) -----------------------------------

/// A hosted zone id with a typo: the DNS-first step fails, the record is listed as the object's
/// (listed before it is written), and the deletion finds the zone does not exist — so no record
/// of the object's can either — and releases the object at its first look.
#[tokio::test]
async fn a_tenant_whose_hosted_zone_never_existed_is_released_at_its_first_deletion_look() {
    let h = Harness::start("dt-gone-zone").await;
    h.create("shop-typo", h.dns_spec(&["www"], "Z0TYPOTYPOTYPO", 300)).await;
    let failed = h.wait_for("shop-typo", "DNSError", |t| condition(t, "DNSReady").is_some_and(|c| c.1 == "DNSError")).await;
    assert!(condition(&failed, "DNSReady").unwrap().2.contains("No hosted zone found"), "{:?}", failed.status);
    assert_eq!(failed.status.unwrap().observation.dns_records, [h.domain("www")], "listed before it is written");
    let listed = h.dns_proxy.calls("ListResourceRecordSets");
    h.delete_and_wait("shop-typo").await;
    assert_eq!(h.dns_proxy.calls("ListResourceRecordSets") - listed, 1, "one look at the zone, then released");
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 0, "nothing was ever created");
}

/// Route 53 deletes only an empty zone: someone deleted the records, then the zone. The tenant
/// goes, and the records, gone with their zone, do not hold the object.
#[tokio::test]
async fn records_whose_hosted_zone_was_deleted_after_they_were_written_do_not_hold_the_deletion() {
    let h = Harness::start("dt-zone-deleted").await;
    h.create("shop-zone", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_ready("shop-zone").await;
    delete_cname(&h.route53, &h.zone_id, &h.domain("www")).await;
    h.route53.delete_hosted_zone().id(&h.zone_id).send().await.expect("the empty zone is deleted");
    h.delete_and_wait("shop-zone").await;
    assert!(h.aws_tenant("shop-zone").await.is_none(), "the tenant is deleted");
}

/// The tenant and then its distribution were deleted in AWS: nothing is left to disable or
/// delete but the records, which go before the object is released.
#[tokio::test]
async fn a_tenant_whose_distribution_was_deleted_in_aws_is_released_with_its_records_deleted() {
    let h = Harness::start("dt-dist-deleted").await;
    let distribution = h.distribution("retired", false, &[]).await;
    let spec = DistributionTenantSpec { distribution_id: distribution.clone(), ..h.dns_spec(&["www"], &h.zone_id, 300) };
    h.create("shop-retired", spec).await;
    h.wait_ready("shop-retired").await;
    h.delete_outside("shop-retired").await;
    delete_distribution(&h.aws, &distribution).await;
    h.delete_and_wait("shop-retired").await;
    assert!(h.record_names().await.is_empty(), "the record went before the object");
    assert_eq!(h.proxy.calls("DeleteDistributionTenant"), 0);
}

/// Someone deleted one of the tenant's records: the deletion of the others is not held by it.
#[tokio::test]
async fn a_record_someone_already_deleted_does_not_hold_the_deletion() {
    let h = Harness::start("dt-record-gone").await;
    h.create("shop-record", h.dns_spec(&["www", "api"], &h.zone_id, 300)).await;
    h.wait_ready("shop-record").await;
    delete_cname(&h.route53, &h.zone_id, &h.domain("api")).await;
    h.delete_and_wait("shop-record").await;
    assert!(h.record_names().await.is_empty(), "the other record is deleted");
    assert!(h.aws_tenant("shop-record").await.is_none());
}

/// Access denied on deleting the records leaves their existence unknown: the object keeps its
/// finalizer and, past `deletion_blocked_after`, says so (what is unknown, sanitized, and the two
/// ways out) in `Synced` and an event; allowed again, the deletion finishes on its own.
#[tokio::test]
async fn access_denied_on_deleting_the_records_keeps_the_object_and_says_so_then_finishes_once_allowed() {
    let timing = Timing { deletion_blocked_after: Duration::from_secs(2), ..quick_timing() };
    let h = Harness::start_configured("dt-delete-denied", DriftPolicy::Enforce, timing).await;
    h.create("shop-denied", h.dns_spec(&["www"], &h.zone_id, 300)).await;
    h.wait_ready("shop-denied").await;
    h.dns_proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::AccessDenied, usize::MAX);
    h.api().delete("shop-denied", &DeleteParams::default()).await.unwrap();
    let blocked = h.wait_for("shop-denied", "DeletionBlocked", |t| condition(t, "Synced").is_some_and(|c| c.1 == "DeletionBlocked")).await;
    let message = condition(&blocked, "Synced").unwrap().2;
    let what = format!("the CNAME records of {} in hosted zone {}", h.domain("www"), h.zone_id);
    assert!(message.contains(&what) && message.contains("is not authorized"), "names what is unknown: {message}");
    assert!(message.contains("blockwork.dev/deletion-policy=Orphan") && message.contains("grant it"), "{message}");
    assert!(!message.contains("123456789012"), "no account id: {message}");
    let events = h.wait_for_event("shop-denied", "DeletionBlocked").await;
    assert!(events.iter().all(|e| e.type_ == "Warning" && e.note.contains(&what) && !e.note.contains("123456789012")), "{events:?}");
    assert_eq!(h.record_names().await, [h.domain("www")], "kept while unknown");
    h.dns_proxy.clear();
    h.wait_gone("shop-denied").await;
    assert!(h.record_names().await.is_empty(), "deleted once allowed");
}

/// The namespace of such a tenant is deleted, as `kubectl delete namespace` does: the namespace
/// controller (kube-controller-manager's) deletes the tenant and waits for its finalizer, and
/// the namespace goes.
#[tokio::test]
async fn deleting_the_namespace_of_a_tenant_whose_hosted_zone_never_existed_completes() {
    let h = Harness::start("dt-ns-typo").await;
    h.plane.start_namespace_controller().await.expect("kube-controller-manager starts");
    h.create("shop-typo", h.dns_spec(&["www"], "Z0TYPOTYPOTYPO", 300)).await;
    h.wait_for("shop-typo", "DNSError", |t| condition(t, "DNSReady").is_some_and(|c| c.1 == "DNSError")).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(h.client.clone());
    namespaces.delete(&h.namespace, &DeleteParams::default()).await.unwrap();
    eventually("the namespace to be deleted", Duration::from_secs(60), async || match namespaces.get_opt(&h.namespace).await {
        Ok(None) => Ok(()),
        Ok(Some(namespace)) => Err(format!("{:?}", namespace.status)),
        Err(error) => Err(error.to_string()),
    })
    .await;
}
