//! The pure part of the calls: what they decide from what they read (whether a write settled,
//! where the managed certificate stands, which records are owned) and how they record it in the
//! observation and conditions. Unit-tested here.

use blockwork_runtime::status::condition;
use blockwork_runtime::{Conditions, MutateOutcome, Request};

use crate::api::{
    CERTIFICATE_READY, DNS_READY, DistributionTenant, DistributionTenantSpec, ManagedCertificateRequest, TenantObservation,
    ValidationTokenHost,
};
use crate::cloudfront::ObservedTenant;
use crate::diff::TenantConfig;
use crate::dns::{DnsChange, DnsStatus};
use crate::lifecycle::{self, CertificateStep, DEPLOYED, certificate_step};

/// Done once CloudFront deployed the tenant, the write's record change (`records`) is in sync
/// and, when it manages the certificate, the tenant uses the one named in the spec; otherwise
/// `verify` follows up at the short interval (a managed certificate is requested by the write,
/// and issued minutes later; Route 53 takes about a minute).
pub(super) fn settled(
    tenant: &ObservedTenant,
    spec: &DistributionTenantSpec,
    desired: &TenantConfig,
    observation: &TenantObservation,
    records: DnsStatus,
) -> MutateOutcome {
    let spec_certificate = spec.certificate_arn();
    let certificate_settled = spec.managed_certificate_request.is_none()
        || spec_certificate.is_some_and(|arn| tenant.config.certificate_arn.as_deref() == Some(arn));
    // Records of domains the spec no longer has go after a verify (`TenantUpkeep`), at the short
    // interval while not Ready; Ready at once, they would wait for the Ready interval, an hour
    // (found by the reliability campaign, issue 15).
    let records_settled = spec.dns.is_none() || observation.dns_records.iter().all(|d| desired.domains.contains(d));
    if tenant.status.as_deref() == Some(DEPLOYED) && certificate_settled && records_settled && records == DnsStatus::InSync {
        MutateOutcome::Succeeded
    } else {
        MutateOutcome::AwaitingVerification
    }
}

pub(super) fn observed(tenant: &ObservedTenant) -> lifecycle::Observed<'_> {
    lifecycle::Observed { enabled: tenant.config.enabled, status: tenant.status.as_deref() }
}

/// Where the managed certificate stands, from its status as last read and the certificate the
/// tenant uses now (`attached`); sets `CertificateReady`. After a write too, so that the
/// condition says Attached without waiting for the next verify.
pub(super) fn certificate_progress(
    spec: &DistributionTenantSpec,
    observation: &mut TenantObservation,
    conditions: &mut Conditions,
    attached: Option<&str>,
    generation: Option<i64>,
) -> CertificateStep {
    let spec_arn = spec.certificate_arn();
    let details = observation.managed_certificate_status.as_deref().map(|status| (status, observation.certificate_arn.as_deref()));
    let step = certificate_step(spec.managed_certificate_request.is_some(), details, spec_arn, attached);
    if let Some((ready, reason, message)) = step.condition() {
        conditions.set(condition(CERTIFICATE_READY, ready, reason, &message, generation));
    }
    step
}

/// The tenant as CloudFront answered (a read or a write), including the certificate it serves:
/// a Cert keeps that certificate while a tenant uses it.
pub(super) fn record(observation: &mut TenantObservation, tenant: &ObservedTenant) {
    observation.id = Some(tenant.id.clone());
    observation.arn.clone_from(&tenant.arn);
    observation.e_tag.clone_from(&tenant.e_tag);
    observation.distribution_tenant_status.clone_from(&tenant.status);
    observation.certificate_in_use.clone_from(&tenant.config.certificate_arn);
}

/// The tenant is gone: what described it goes too (DNS fields stay until the records go).
pub(super) fn forget(observation: &mut TenantObservation) {
    observation.id = None;
    observation.arn = None;
    observation.e_tag = None;
    observation.distribution_tenant_status = None;
    observation.certificate_in_use = None;
}

pub(super) fn dns_records_remain(spec: &DistributionTenantSpec, observation: &TenantObservation) -> bool {
    spec.dns.is_some() && !observation.dns_records.is_empty()
}

/// The spec's domains in their normal form (a trailing dot names the same record), each once.
fn domains(spec: &DistributionTenantSpec) -> Vec<String> {
    TenantConfig::desired(spec).domains.into_iter().collect()
}

/// The spec's managed-certificate request if the last applied spec did not carry the same one.
pub(super) fn new_certificate_request<'a>(
    spec: &'a DistributionTenantSpec,
    last_applied: Option<&DistributionTenantSpec>,
) -> Option<&'a ManagedCertificateRequest> {
    let requested = spec.managed_certificate_request.as_ref()?;
    let applied = last_applied.and_then(|applied| applied.managed_certificate_request.as_ref());
    (applied != Some(requested)).then_some(requested)
}

pub(super) fn cloudfront_validates(spec: &DistributionTenantSpec) -> bool {
    spec.managed_certificate_request.as_ref().is_some_and(|r| r.validation_token_host == ValidationTokenHost::Cloudfront)
}

pub(super) fn dns_condition(conditions: &mut Conditions, ready: bool, reason: &str, message: &str, generation: Option<i64>) {
    conditions.set(condition(DNS_READY, ready, reason, message, generation));
}

/// Whether the object's status says its records are in sync (then the change is not polled again).
pub(super) fn dns_in_sync(object: &DistributionTenant) -> bool {
    object.status.as_ref().and_then(|s| s.condition(DNS_READY)).is_some_and(|c| c.status == "True" && c.reason == "DNSReady")
}

/// The domains whose records a create under the create-pending marker may have written: its
/// status write (which lists them in `dnsRecords`) may have been refused or never made. They are
/// owned like written ones; deleting one that was never written finds nothing to delete, and a
/// record is deleted only while it still points at the tenant's routing endpoint. The tenant
/// itself needs no such care: it is found again by its name and owner tag.
pub(super) fn marked_dns_domains(request: &Request<'_, DistributionTenant>) -> Vec<String> {
    request
        .create_pending
        .and_then(|marker| marker.spec.as_deref())
        .and_then(|spec| serde_json::from_str::<DistributionTenantSpec>(spec).ok())
        .filter(|spec| spec.dns.is_some())
        .map(|spec| domains(&spec))
        .unwrap_or_default()
}

/// Records a successful upsert of `domains`: owned from now on, and what `change` wrote.
pub(super) fn upserted(observation: &mut TenantObservation, change: DnsChange, domains: &[String]) {
    own_records(observation, domains);
    observation.dns_change_id = change.change_id;
    observation.dns_change_domains = domains.to_vec();
}

/// Adds `domains` to the records this operator owns, keeping ones not yet cleaned up; the
/// records an adopted tenant came with stay shared (never owned, so never deleted).
pub(super) fn own_records(observation: &mut TenantObservation, domains: &[String]) {
    for domain in domains {
        if !observation.dns_records.contains(domain) && !observation.dns_shared.contains(domain) {
            observation.dns_records.push(domain.clone());
        }
    }
    observation.dns_records.sort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TransparencyPreference;
    use blockwork_runtime::{DriftPolicy, Phase};

    /// Found by the reliability campaign (issue 15): a domain removed before the tenant was
    /// created kept its record for an hour, because the create made the tenant Ready at once.
    #[test]
    fn a_deployed_tenant_is_not_settled_while_records_of_removed_domains_remain() {
        let spec = DistributionTenantSpec {
            domains: vec![crate::api::DomainName { domain: "www.example.com".to_owned() }],
            dns: Some(crate::api::DnsConfig {
                provider: crate::api::DnsProvider::Route53,
                hosted_zone_id: "Z1".to_owned(),
                assume_role_arn: None,
                ttl: 300,
            }),
            ..with_request(None)
        };
        let tenant = deployed(&spec);
        let mut observation = TenantObservation {
            dns_records: vec!["api.example.com".to_owned(), "www.example.com".to_owned()],
            ..TenantObservation::default()
        };
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation, DnsStatus::InSync), MutateOutcome::AwaitingVerification);
        observation.dns_records = vec!["www.example.com".to_owned()];
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation, DnsStatus::InSync), MutateOutcome::Succeeded);
    }

    /// Found by the leader-failover suite: an update's record change left `DNSReady` saying
    /// "submitted" beside `Ready` until the next look, 5 minutes later (or a new leader's).
    #[test]
    fn a_deployed_tenant_is_not_settled_while_its_record_change_is_pending() {
        let spec = with_request(None);
        let tenant = deployed(&spec);
        let observation = TenantObservation::default();
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation, DnsStatus::Pending), MutateOutcome::AwaitingVerification);
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation, DnsStatus::InSync), MutateOutcome::Succeeded);
    }

    /// CloudFront's tenant as `spec` says, Deployed.
    fn deployed(spec: &DistributionTenantSpec) -> ObservedTenant {
        ObservedTenant {
            id: "T1".to_owned(),
            name: None,
            tags: Vec::new(),
            arn: None,
            e_tag: None,
            status: Some(DEPLOYED.to_owned()),
            config: TenantConfig::desired(spec),
        }
    }

    fn with_request(request: Option<ManagedCertificateRequest>) -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: "E1".to_owned(),
            managed_certificate_request: request,
            ..DistributionTenantSpec::default()
        }
    }

    #[test]
    fn a_create_pending_marker_names_the_dns_records_its_create_may_have_written() {
        let dns = serde_json::from_value(serde_json::json!({"provider": "route53", "hostedZoneId": "Z1"})).expect("parses");
        let domain = |d: &str| crate::api::DomainName { domain: d.to_owned() };
        let marked = DistributionTenantSpec {
            domains: vec![domain("a.example.com"), domain("b.example.com")],
            dns: Some(dns),
            ..with_request(None)
        };
        let object = DistributionTenant::new("shop", DistributionTenantSpec { domains: vec![domain("a.example.com")], ..marked.clone() });
        let marker = |spec: &DistributionTenantSpec| blockwork_runtime::status::CreatePending {
            token: "t".to_owned(),
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            spec: Some(serde_json::to_string(spec).expect("serializes")),
        };
        let without_dns = DistributionTenantSpec { dns: None, ..marked.clone() };
        let (with_dns, without_dns) = (marker(&marked), marker(&without_dns));
        let policies = blockwork_runtime::policy::Policies::from_annotations(
            &Default::default(),
            blockwork_runtime::DeletionPolicy::Delete,
            DriftPolicy::Enforce,
        )
        .expect("no annotations are valid");
        let spec_change = blockwork_runtime::SpecChange { changed: true, last_applied: None };
        let request = |create_pending| Request {
            object: &object,
            phase: Phase::Live,
            policies: &policies,
            spec_change: &spec_change,
            dependencies: &[],
            idempotency_token: "t",
            create_pending,
            derived: &(),
        };
        assert_eq!(marked_dns_domains(&request(Some(&with_dns))), ["a.example.com", "b.example.com"]);
        assert!(marked_dns_domains(&request(Some(&without_dns))).is_empty(), "no DNS management, no records");
        assert!(marked_dns_domains(&request(None)).is_empty());
    }

    #[test]
    fn records_an_adopted_tenant_came_with_are_never_owned_even_once_written() {
        let mut observation = TenantObservation { dns_shared: vec!["www.example.com".to_owned()], ..TenantObservation::default() };
        upserted(
            &mut observation,
            DnsChange { change_id: Some("C1".to_owned()) },
            &["api.example.com".to_owned(), "www.example.com".to_owned()],
        );
        assert_eq!(observation.dns_records, ["api.example.com"]);
    }

    #[test]
    fn certificate_request_already_applied_is_not_sent_again() {
        let spec = with_request(Some(ManagedCertificateRequest::default()));
        assert_eq!(new_certificate_request(&spec, Some(&spec.clone())), None);
    }

    #[test]
    fn new_or_changed_certificate_request_is_sent() {
        let spec = with_request(Some(ManagedCertificateRequest {
            certificate_transparency_logging_preference: Some(TransparencyPreference::Disabled),
            ..ManagedCertificateRequest::default()
        }));
        let before = with_request(Some(ManagedCertificateRequest::default()));
        assert!(new_certificate_request(&spec, Some(&before)).is_some());
        assert!(new_certificate_request(&spec, None).is_some());
    }
}
