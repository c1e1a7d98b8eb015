//! Where DNS management plugs in. The manager drives DNS through [`DnsRecords`] only: upsert the
//! CNAMEs of the tenant's domains to the routing endpoint, poll the change until it is in sync,
//! delete them after the tenant. A Route53 implementation (with STS AssumeRole for
//! `spec.dns.assumeRoleArn`) is to come; until then a tenant with `spec.dns` fails with
//! `DNSError` instead of being created without its records. [`NoDns`] is what a tenant without
//! `spec.dns` uses: nothing to write, always in sync.

use std::future::Future;

use blockwork_aws::AwsError;

use crate::api::DnsConfig;

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
/// after a crash. Errors should be classified with [`crate::errors::classify_dns`].
pub trait DnsRecords: Send + Sync + 'static {
    /// Creates or updates a CNAME `domain → target` for each domain.
    fn upsert(&self, config: &DnsConfig, domains: &[String], target: &str) -> impl Future<Output = Result<DnsChange, AwsError>> + Send;
    /// Deletes the CNAMEs; records already gone are not an error.
    fn delete(&self, config: &DnsConfig, domains: &[String], target: &str) -> impl Future<Output = Result<DnsChange, AwsError>> + Send;
    fn status(&self, config: &DnsConfig, change_id: &str) -> impl Future<Output = Result<DnsStatus, AwsError>> + Send;
}

/// DNS not managed (`spec.dns` absent): no records, nothing to wait for.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoDns;

impl DnsRecords for NoDns {
    async fn upsert(&self, _config: &DnsConfig, _domains: &[String], _target: &str) -> Result<DnsChange, AwsError> {
        Ok(DnsChange { change_id: None })
    }

    async fn delete(&self, _config: &DnsConfig, _domains: &[String], _target: &str) -> Result<DnsChange, AwsError> {
        Ok(DnsChange { change_id: None })
    }

    async fn status(&self, _config: &DnsConfig, _change_id: &str) -> Result<DnsStatus, AwsError> {
        Ok(DnsStatus::InSync)
    }
}
