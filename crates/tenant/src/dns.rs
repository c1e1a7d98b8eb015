//! DNS management. The manager drives DNS through [`DnsRecords`] only: upsert the CNAMEs of the
//! tenant's domains to the routing endpoint, poll the change until it is in sync, delete them
//! after the tenant (and when a domain leaves the spec), in a [`DnsZone`]: `spec.dns` and who
//! reaches the zone, as the namespace's grant says (ADR 0014: through the zone's role when it is
//! in another account). [`Route53`] is the implementation, over the process's Route 53 records
//! (`blockwork_aws::route53`: batched per hosted zone with every other controller's changes);
//! [`NoDns`] manages
//! nothing (a manager built without DNS fails tenants with `spec.dns` with `DNSError` rather
//! than creating them without their records).
//!
//! Ownership follows the layer's one rule. The domains whose CNAMEs the operator upserted are
//! kept in `status.dnsRecords` (or, for a create whose status write was lost, named by the
//! create-pending marker); a record is deleted only while it is still a CNAME to the tenant's
//! routing endpoint — the DELETE carries that value, so a record someone repointed (or replaced
//! by another type) is left alone.

use std::future::Future;
use std::sync::Arc;

use blockwork_aws::route53::{Deletion, Record, Records, Zone};
use blockwork_aws::{AwsError, Principal};

use tracing::info;

use crate::api::DnsConfig;

/// Where a tenant's records go: its `spec.dns`, and who reaches that hosted zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsZone {
    pub config: DnsConfig,
    pub principal: Principal,
}

/// A submitted record change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsChange {
    /// Route53's change id, kept in `status.dnsChangeId`; `None` when nothing was submitted.
    pub change_id: Option<String>,
}

/// Whether a change has reached every authoritative name server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsStatus {
    Pending,
    InSync,
}

/// CNAME records for the tenant's domains. Every call must be idempotent: each may be repeated
/// after a crash. Errors should be classified with [`crate::classify::classify_dns`].
pub trait DnsRecords: Send + Sync + 'static {
    /// Creates or updates a CNAME `domain → target` for each domain.
    fn upsert(&self, dns: &DnsZone, domains: &[String], target: &str) -> impl Future<Output = Result<DnsChange, AwsError>> + Send;
    /// Deletes the CNAMEs that still point at `target`; records already gone, or in a hosted
    /// zone that does not exist (never written, or gone with the zone), are not an error.
    fn delete(&self, dns: &DnsZone, domains: &[String], target: &str) -> impl Future<Output = Result<DnsChange, AwsError>> + Send;
    fn status(&self, dns: &DnsZone, change_id: &str) -> impl Future<Output = Result<DnsStatus, AwsError>> + Send;
}

/// DNS not managed (`spec.dns` absent): no records, nothing to wait for.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoDns;

impl DnsRecords for NoDns {
    async fn upsert(&self, _dns: &DnsZone, _domains: &[String], _target: &str) -> Result<DnsChange, AwsError> {
        Ok(DnsChange { change_id: None })
    }

    async fn delete(&self, _dns: &DnsZone, _domains: &[String], _target: &str) -> Result<DnsChange, AwsError> {
        Ok(DnsChange { change_id: None })
    }

    async fn status(&self, _dns: &DnsZone, _change_id: &str) -> Result<DnsStatus, AwsError> {
        Ok(DnsStatus::InSync)
    }
}

/// The process's Route 53 records, for the tenant controller.
pub struct Route53 {
    records: Arc<Records>,
}

impl Route53 {
    pub fn new(records: Arc<Records>) -> Self {
        Self { records }
    }
}

fn hosted_zone(dns: &DnsZone) -> Zone {
    Zone::new(&dns.config.hosted_zone_id, dns.principal.clone())
}

impl DnsRecords for Route53 {
    async fn upsert(&self, dns: &DnsZone, domains: &[String], target: &str) -> Result<DnsChange, AwsError> {
        let records = domains.iter().map(|domain| Record { name: domain.clone(), value: target.to_owned(), ttl: dns.config.ttl }).collect();
        let change_id = self.records.upsert(crate::CONTROLLER, &hosted_zone(dns), records).await?;
        info!(zone = %dns.config.hosted_zone_id, ?domains, "upserted CNAME records");
        Ok(DnsChange { change_id })
    }

    /// Only records that still point where this operator pointed them go, with their own TTL
    /// (the spec's may have changed since they were written): the AWS layer's ownership rule
    /// (`Records::delete`). A hosted zone that does not exist holds none of them.
    async fn delete(&self, dns: &DnsZone, domains: &[String], target: &str) -> Result<DnsChange, AwsError> {
        let records = domains.iter().map(|domain| Record { name: domain.clone(), value: target.to_owned(), ttl: dns.config.ttl }).collect();
        let deletions = self.records.delete(crate::CONTROLLER, &hosted_zone(dns), records).await?;
        let deleted: Vec<&str> = domains
            .iter()
            .zip(&deletions)
            .filter(|(_, deletion)| **deletion == Deletion::Deleted)
            .map(|(domain, _)| domain.as_str())
            .collect();
        info!(zone = %dns.config.hosted_zone_id, ?deleted, "deleted CNAME records (any other was not there pointing at the tenant)");
        Ok(DnsChange { change_id: None })
    }

    async fn status(&self, dns: &DnsZone, change_id: &str) -> Result<DnsStatus, AwsError> {
        let in_sync = self.records.in_sync(crate::CONTROLLER, &hosted_zone(dns), change_id).await?;
        Ok(if in_sync { DnsStatus::InSync } else { DnsStatus::Pending })
    }
}
