//! What the DistributionTenant controller (and the API server, by the CRD's schema and CEL)
//! refuses before anything is written, and the reads it makes before writing: against a real
//! kube-apiserver, MiniStack's CloudFront and ACM, and moto's Route53, through fault proxies.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use crate::support::{Harness, condition, quick_timing, state};
use blockwork_runtime::{DriftPolicy, ReconcileState, RequeuePolicy};
use blockwork_tenant::api::{CertificateRef, Customizations, DomainName, Parameter, ValidationTokenHost};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec, Timing};
use blockwork_testenv::aws::cnames;
use blockwork_testenv::fault_proxy::{Fault, Operation};
use kube::ResourceExt as _;

fn failed(tenant: &DistributionTenant) -> bool {
    state(tenant) == Some(ReconcileState::Failed)
}

/// Nothing was written for the tenant: no CloudFront tenant, no DNS record.
async fn nothing_written(h: &Harness) {
    assert_eq!(h.proxy.calls("CreateDistributionTenant") + h.proxy.calls("UpdateDistributionTenant"), 0, "{:?}", h.proxy.all_calls());
    assert_eq!(h.dns_proxy.calls("ChangeResourceRecordSets"), 0, "{:?}", h.dns_proxy.all_calls());
    assert!(cnames(&h.route53, &h.zone_id).await.is_empty());
}

#[tokio::test]
async fn tenant_without_a_certificate_on_a_default_certificate_distribution_is_refused_naming_both_fields() {
    let h = Harness::start("dt-v-default-cert").await;
    let distribution = h.distribution("default-cert", true, &[]).await;
    let spec = DistributionTenantSpec { distribution_id: distribution, ..h.dns_spec(&["www"], &h.zone_id, 300) };
    h.create("shop-default-cert", spec).await;
    let tenant = h.wait_for("shop-default-cert", "Failed", failed).await;
    let (status, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.contains("spec.customizations.certificate.arn") && message.contains("spec.managedCertificateRequest"), "{message}");
    nothing_written(&h).await;
}

#[tokio::test]
async fn tenant_with_a_managed_certificate_request_on_a_default_certificate_distribution_is_created() {
    let h = Harness::start("dt-v-default-managed").await;
    let distribution = h.distribution("default-managed", true, &[]).await;
    let spec = DistributionTenantSpec { distribution_id: distribution, ..h.managed_spec(&["www"], ValidationTokenHost::SelfHosted) };
    h.create("shop-default-managed", spec).await;
    h.wait_for("shop-default-managed", "certificate attached", |t| condition(t, "CertificateReady").is_some_and(|c| c.0 == "True")).await;
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1);
}

#[tokio::test]
async fn missing_required_parameter_is_refused_naming_it_and_a_parameter_with_a_default_is_not_required() {
    let h = Harness::start("dt-v-params").await;
    let distribution = h.distribution("params", false, &[("origin", true, None), ("path", true, Some("/"))]).await;
    h.create("shop-params", DistributionTenantSpec { distribution_id: distribution, ..h.spec(&["www"]) }).await;
    let tenant = h.wait_for("shop-params", "Failed", failed).await;
    let (_, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("\"origin\"") && !message.contains("\"path\""), "{message}");
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 0);

    // Given `origin` (and not `path`, which has a default), the tenant is created with it.
    h.merge("shop-params", serde_json::json!({"spec": {"parameters": [{"name": "origin", "value": "shop.example.net"}]}})).await;
    h.wait_ready("shop-params").await;
    let (aws, _) = h.aws_tenant("shop-params").await.unwrap();
    let sent: Vec<(&str, &str)> = aws.parameters().iter().map(|p| (p.name(), p.value())).collect();
    assert_eq!(sent, [("origin", "shop.example.net")]);
}

#[tokio::test]
async fn parameter_the_distribution_does_not_declare_is_refused_naming_it() {
    let h = Harness::start("dt-v-unknown").await;
    let distribution = h.distribution("unknown", false, &[("origin", false, None)]).await;
    let spec = DistributionTenantSpec {
        distribution_id: distribution,
        parameters: vec![Parameter { name: "colour".to_owned(), value: "blue".to_owned() }],
        ..h.dns_spec(&["www"], &h.zone_id, 300)
    };
    h.create("shop-unknown", spec).await;
    let tenant = h.wait_for("shop-unknown", "Failed", failed).await;
    let message = condition(&tenant, "Ready").unwrap().2;
    assert!(message.contains("\"colour\"") && message.contains("\"origin\""), "names the unknown and the declared: {message}");
    nothing_written(&h).await;
}

#[tokio::test]
async fn distribution_that_does_not_exist_gets_no_dns_record() {
    let h = Harness::start("dt-v-no-dist").await;
    let spec = DistributionTenantSpec { distribution_id: "E0NOSUCHDIST".to_owned(), ..h.dns_spec(&["www"], &h.zone_id, 300) };
    h.create("shop-no-dist", spec).await;
    let tenant = h.wait_for("shop-no-dist", "Failed", failed).await;
    let (_, reason, message) = condition(&tenant, "Ready").unwrap();
    assert_eq!(reason, "DistributionNotFound");
    assert!(message.contains("E0NOSUCHDIST") && message.contains("spec.distributionId"), "{message}");
    assert!(h.proxy.calls("GetDistribution") >= 1, "{:?}", h.proxy.all_calls());
    nothing_written(&h).await;
}

#[tokio::test]
async fn distribution_is_read_once_for_the_dns_first_creates_of_two_tenants() {
    let h = Harness::start("dt-v-dist-cache").await;
    h.create("shop-cache-a", h.dns_spec(&["a"], &h.zone_id, 300)).await;
    h.create("shop-cache-b", h.dns_spec(&["b"], &h.zone_id, 300)).await;
    h.wait_ready("shop-cache-a").await;
    h.wait_ready("shop-cache-b").await;
    // Each DNS-first create spans several reconciles (records written, then their change
    // followed until in sync), each checking the spec before writing.
    assert!(h.dns_proxy.calls("GetChange") >= 1, "{:?}", h.dns_proxy.all_calls());
    assert_eq!(h.proxy.calls("GetDistribution"), 1, "{:?}", h.proxy.all_calls());
}

/// Issue 37: tenants created while the distribution read they share fails (a 503 outage of
/// GetDistribution) say from their first look what they wait for, AWS's answer and since when —
/// in one status write, not one per retry — and are made once it answers.
#[tokio::test]
async fn tenants_created_while_their_distribution_read_fails_say_what_they_wait_for_in_one_status_write() {
    let h = Harness::start("dt-v-dist-outage").await;
    h.proxy.inject(Operation::named("GetDistribution"), Fault::ServerError(503), usize::MAX);
    let names = ["shop-outage-a", "shop-outage-b", "shop-outage-c"];
    for (name, label) in names.iter().zip(["a", "b", "c"]) {
        h.create(name, h.spec(&[label])).await;
    }
    let waiting = |tenant: &DistributionTenant| condition(tenant, "Synced").is_some_and(|(_, reason, _)| reason == "SharedCallFailing");
    let mut written = Vec::new();
    for name in names {
        let tenant = h.wait_for(name, "waiting on the distribution read", waiting).await;
        let (_, _, message) = condition(&tenant, "Synced").unwrap();
        let distribution = format!("the CloudFront distribution {}", h.distribution_id);
        for said in [distribution.as_str(), "ServiceUnavailable", "has been failing since"] {
            assert!(message.contains(said), "{said}: {message}");
        }
        assert_eq!(condition(&tenant, "Ready").map(|c| c.1), Some("SharedCallFailing".to_owned()));
        assert_eq!(tenant.status.as_ref().and_then(|s| s.last_error.clone()), None, "no retry count: the wait is the read's");
        written.push(tenant.resource_version());
    }
    // The outage goes on through several retries of every tenant: none is written again.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (name, version) in names.iter().zip(&written) {
        assert_eq!(&h.get(name).await.unwrap().resource_version(), version, "{name} was written again while it waited");
    }
    h.proxy.clear();
    for name in names {
        h.wait_ready(name).await;
    }
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), names.len(), "each tenant made once, after the read answered");
}

#[tokio::test]
async fn certificate_names_are_read_once_per_dns_first_create() {
    let h = Harness::start("dt-v-san-once").await;
    let arn = h.certificate(&[h.domain("www")]).await;
    let spec = DistributionTenantSpec {
        customizations: Some(Customizations {
            certificate: Some(CertificateRef { arn: Some(arn), cert_ref: None }),
            ..Customizations::default()
        }),
        ..h.dns_spec(&["www"], &h.zone_id, 300)
    };
    h.create("shop-san-once", spec).await;
    h.wait_ready("shop-san-once").await;
    assert!(h.dns_proxy.calls("GetChange") >= 1, "the create spanned reconciles: {:?}", h.dns_proxy.all_calls());
    assert_eq!(h.proxy.calls("DescribeCertificate"), 1, "{:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn pending_managed_certificate_is_looked_at_again_at_the_short_interval_then_the_long_one() {
    // A steady-state interval no test would wait for: only the short one can attach the ARN.
    let timing = Timing { ready: RequeuePolicy::fixed(Duration::from_secs(120)), ..quick_timing() };
    let h = Harness::start_configured("dt-v-pending-cert", DriftPolicy::Enforce, timing).await;
    h.proxy.inject(Operation::named("GetManagedCertificateDetails"), Fault::PendingCertificate, 3);
    let spec = h.managed_spec(&["www"], ValidationTokenHost::SelfHosted);
    h.create("shop-pending-cert", spec).await;
    let pending = h
        .wait_for("shop-pending-cert", "waiting for its certificate", |t| {
            condition(t, "CertificateReady").is_some_and(|c| c.1 == "CertificatePending")
                && condition(t, "Ready").is_some_and(|c| c.2.contains("pending-validation"))
        })
        .await;
    assert_eq!(condition(&pending, "Ready").unwrap().0, "False", "not Ready while its certificate is pending");
    let attached = h
        .wait_for("shop-pending-cert", "Ready with the certificate attached", |t| {
            condition(t, "CertificateReady").is_some_and(|c| c.0 == "True") && condition(t, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
    assert!(attached.spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()).is_some(), "the ARN is in the spec");
    assert!(h.proxy.calls("GetManagedCertificateDetails") >= 4, "three pending answers, then issued");
    // Attached: back to the steady-state interval.
    let calls = h.proxy.calls("GetManagedCertificateDetails");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(h.proxy.calls("GetManagedCertificateDetails"), calls, "looked at again before the steady-state interval");
}

#[tokio::test]
async fn trailing_dot_domain_is_the_same_domain_in_cloudfront_and_route53() {
    let h = Harness::start("dt-v-dot").await;
    let mut spec = h.dns_spec(&["www"], &h.zone_id, 300);
    spec.domains = vec![DomainName { domain: format!("{}.", h.domain("www")) }];
    h.create("shop-dot", spec).await;
    let tenant = h.wait_ready("shop-dot").await;
    let (aws, _) = h.aws_tenant("shop-dot").await.unwrap();
    assert_eq!(aws.domains().iter().map(|d| d.domain()).collect::<Vec<_>>(), [h.domain("www")]);
    let records: Vec<String> = cnames(&h.route53, &h.zone_id).await.into_iter().map(|r| r.0).collect();
    assert_eq!(records, [h.domain("www")]);
    assert_eq!(tenant.status.unwrap().observation.dns_records, [h.domain("www")]);
}

#[tokio::test]
async fn domains_a_public_ca_refuses_are_refused_before_anything_is_written() {
    let h = Harness::start("dt-v-alabel").await;
    let suffix = format!("{}.example.com", h.namespace);
    for (name, domains, says) in [
        ("undecodable", vec![format!("xn--zz.{suffix}")], "spec.domains[0]: label \"xn--zz\""),
        ("symbol", vec![format!("xn--n3h.{suffix}")], "spec.domains[0]: label \"xn--n3h\""),
        ("reserved", vec![format!("zz--shop.{suffix}")], "spec.domains[0]: label \"zz--shop\""),
    ] {
        let mut spec = h.dns_spec(&["www"], &h.zone_id, 300);
        spec.domains = domains.into_iter().map(|domain| DomainName { domain }).collect();
        h.create(name, spec).await;
        let tenant = h.wait_for(name, "Failed", failed).await;
        let (_, reason, message) = condition(&tenant, "Ready").unwrap();
        assert_eq!(reason, "InvalidSpec");
        assert!(message.starts_with(says), "{name}: {message}");
    }
    assert!(h.proxy.all_calls().is_empty(), "{:?}", h.proxy.all_calls());
    nothing_written(&h).await;
}

/// Creates the tenant as the JSON `spec`, returning the API server's refusal.
async fn refused(h: &Harness, name: &str, spec: serde_json::Value) -> String {
    let mut object = serde_json::to_value(DistributionTenant::new(name, h.spec(&["www"]))).unwrap();
    object["spec"] = spec;
    h.refusal(&serde_json::from_value(object).unwrap()).await
}

#[tokio::test]
async fn duplicate_domains_are_refused_by_the_api_server() {
    let h = Harness::start("dt-v-dup").await;
    let www = h.domain("www");
    let message =
        refused(&h, "shop-dup", serde_json::json!({"distributionId": h.distribution_id, "domains": [{"domain": www}, {"domain": www}]}))
            .await;
    assert!(message.contains("spec.domains") && message.contains("Duplicate value"), "{message}");
}

#[tokio::test]
async fn assume_role_arn_that_is_not_an_iam_role_is_refused_by_the_api_server() {
    let h = Harness::start("dt-v-role").await;
    for arn in ["arn:aws:iam::123456789012:user/dns", "arn:aws:sts::123456789012:assumed-role/dns/x", "dns-role"] {
        let spec = serde_json::json!({
            "distributionId": h.distribution_id,
            "domains": [{"domain": h.domain("www")}],
            "dns": {"provider": "route53", "hostedZoneId": h.zone_id, "assumeRoleArn": arn},
        });
        let message = refused(&h, "shop-role", spec).await;
        assert!(message.contains("dns.assumeRoleArn must be an IAM role ARN"), "{arn}: {message}");
    }
}

#[tokio::test]
async fn geo_locations_that_are_not_iso_3166_alpha_2_codes_are_refused_by_the_api_server() {
    let h = Harness::start("dt-v-geo").await;
    for location in ["UK", "XX", "de", "DEU"] {
        let spec = serde_json::json!({
            "distributionId": h.distribution_id,
            "domains": [{"domain": h.domain("www")}],
            "customizations": {"geoRestrictions": {"restrictionType": "whitelist", "locations": ["FR", location]}},
        });
        let message = refused(&h, "shop-geo", spec).await;
        assert!(message.contains("spec.customizations.geoRestrictions.locations"), "{location}: {message}");
    }
    let duplicate = serde_json::json!({
        "distributionId": h.distribution_id,
        "domains": [{"domain": h.domain("www")}],
        "customizations": {"geoRestrictions": {"restrictionType": "whitelist", "locations": ["FR", "FR"]}},
    });
    assert!(refused(&h, "shop-geo", duplicate).await.contains("Duplicate value"));
}
