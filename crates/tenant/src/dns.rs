//! DNS management. The manager drives DNS through [`DnsRecords`] only: upsert the CNAMEs of the
//! tenant's domains to the routing endpoint, poll the change until it is in sync, delete them
//! after the tenant (and when a domain leaves the spec). [`Route53`] is the implementation, with
//! STS AssumeRole for `spec.dns.assumeRoleArn`; [`NoDns`] manages nothing (a manager built
//! without DNS fails tenants with `spec.dns` with `DNSError` rather than creating them without
//! their records).
//!
//! Ownership: the operator deletes only records it wrote, known twice over. The domains whose
//! CNAMEs it upserted are kept in `status.dnsRecords`, and before deleting one it reads the record
//! back and deletes it only if it is still a CNAME to the tenant's routing endpoint: a record
//! someone repointed (or replaced by another type) is left alone.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use aws_config::SdkConfig;
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ChangeStatus, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_aws::{AwsError, ErrorClass, classify_sdk_error};

use tracing::info;

use crate::api::DnsConfig;
use crate::metrics::TenantMetrics;

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

/// Assumed-role credentials are used until this long before they expire.
const CREDENTIAL_MARGIN: Duration = Duration::from_secs(300);
/// The STS session name, as it shows in the other account's CloudTrail.
const SESSION_NAME: &str = "blockwork-tenant-dns";

/// Route53 with the operator's own credentials, or, for a zone in another account
/// (`spec.dns.assumeRoleArn`), with the role's: STS AssumeRole, the credentials cached per role
/// until shortly before they expire. The role is used for Route53 only.
pub struct Route53 {
    config: SdkConfig,
    own: aws_sdk_route53::Client,
    sts: aws_sdk_sts::Client,
    roles: Mutex<HashMap<String, (aws_sdk_route53::Client, SystemTime)>>,
    metrics: Arc<TenantMetrics>,
}

impl Route53 {
    /// `config` is the SDK configuration for Route53 and STS (its endpoint override included).
    pub fn new(config: &SdkConfig, metrics: Arc<TenantMetrics>) -> Self {
        Self {
            config: config.clone(),
            own: aws_sdk_route53::Client::new(config),
            sts: aws_sdk_sts::Client::new(config),
            roles: Mutex::default(),
            metrics,
        }
    }

    async fn timed<T>(&self, operation: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let output = call.await;
        self.metrics.aws_call(operation, started.elapsed());
        output
    }

    /// The client for the zone: the operator's, or one with the assumed role's credentials.
    async fn client(&self, config: &DnsConfig) -> Result<aws_sdk_route53::Client, AwsError> {
        let Some(role) = &config.assume_role_arn else {
            return Ok(self.own.clone());
        };
        let cached = self.roles.lock().unwrap_or_else(PoisonError::into_inner).get(role).cloned();
        if let Some((client, expires)) = cached
            && SystemTime::now() + CREDENTIAL_MARGIN < expires
        {
            return Ok(client);
        }
        let output = self
            .sts
            .assume_role()
            .role_arn(role)
            .role_session_name(SESSION_NAME)
            .send()
            .await
            .map_err(|e| classify_sdk_error("AssumeRole", &e))?;
        let Some(credentials) = output.credentials() else {
            return Err(AwsError {
                operation: "AssumeRole",
                code: None,
                class: ErrorClass::Retryable,
                message: "STS returned no credentials".to_owned(),
            });
        };
        let expires = SystemTime::try_from(*credentials.expiration()).unwrap_or_else(|_| SystemTime::now());
        let provider = aws_sdk_route53::config::Credentials::new(
            credentials.access_key_id(),
            credentials.secret_access_key(),
            Some(credentials.session_token().to_owned()),
            Some(expires),
            "AssumeRole",
        );
        let route53 = aws_sdk_route53::config::Builder::from(&self.config).credentials_provider(provider).build();
        let client = aws_sdk_route53::Client::from_conf(route53);
        self.roles.lock().unwrap_or_else(PoisonError::into_inner).insert(role.clone(), (client.clone(), expires));
        Ok(client)
    }

    async fn change(&self, client: &aws_sdk_route53::Client, zone: &str, changes: Vec<Change>) -> Result<DnsChange, AwsError> {
        if changes.is_empty() {
            return Ok(DnsChange { change_id: None });
        }
        let batch = ChangeBatch::builder()
            .set_changes(Some(changes))
            .comment("blockwork DistributionTenant")
            .build()
            .map_err(|e| build_error("ChangeResourceRecordSets", &e))?;
        let output = self
            .timed("Route53ChangeResourceRecordSets", client.change_resource_record_sets().hosted_zone_id(zone).change_batch(batch).send())
            .await
            .map_err(|e| classify_sdk_error("ChangeResourceRecordSets", &e))?;
        Ok(DnsChange { change_id: output.change_info().map(|c| c.id().to_owned()) })
    }

    /// The CNAME record set of `domain`, if the zone has one.
    async fn cname(&self, client: &aws_sdk_route53::Client, zone: &str, domain: &str) -> Result<Option<ResourceRecordSet>, AwsError> {
        let output = client
            .list_resource_record_sets()
            .hosted_zone_id(zone)
            .start_record_name(domain)
            .start_record_type(RrType::Cname)
            .max_items(1)
            .send()
            .await
            .map_err(|e| classify_sdk_error("ListResourceRecordSets", &e))?;
        Ok(output.resource_record_sets().iter().find(|set| set.r#type() == &RrType::Cname && same_name(set.name(), domain)).cloned())
    }
}

impl DnsRecords for Route53 {
    async fn upsert(&self, config: &DnsConfig, domains: &[String], target: &str) -> Result<DnsChange, AwsError> {
        let client = self.client(config).await?;
        let mut changes = Vec::with_capacity(domains.len());
        for domain in domains {
            let record = ResourceRecord::builder().value(target).build().map_err(|e| build_error("ChangeResourceRecordSets", &e))?;
            let set = ResourceRecordSet::builder()
                .name(domain)
                .r#type(RrType::Cname)
                .ttl(config.ttl)
                .resource_records(record)
                .build()
                .map_err(|e| build_error("ChangeResourceRecordSets", &e))?;
            let change = Change::builder()
                .action(ChangeAction::Upsert)
                .resource_record_set(set)
                .build()
                .map_err(|e| build_error("ChangeResourceRecordSets", &e))?;
            changes.push(change);
        }
        let change = self.change(&client, &config.hosted_zone_id, changes).await?;
        info!(zone = %config.hosted_zone_id, ?domains, "upserted CNAME records");
        Ok(change)
    }

    async fn delete(&self, config: &DnsConfig, domains: &[String], target: &str) -> Result<DnsChange, AwsError> {
        let client = self.client(config).await?;
        let mut changes = Vec::new();
        for domain in domains {
            // Only a record that still points where this operator pointed it.
            let Some(set) = self.cname(&client, &config.hosted_zone_id, domain).await? else {
                info!(zone = %config.hosted_zone_id, domain, "no CNAME record to delete");
                continue;
            };
            if !set.resource_records().iter().all(|r| same_name(r.value(), target)) {
                info!(zone = %config.hosted_zone_id, domain, "the CNAME record points elsewhere: kept");
                continue;
            }
            let change = Change::builder()
                .action(ChangeAction::Delete)
                .resource_record_set(set)
                .build()
                .map_err(|e| build_error("ChangeResourceRecordSets", &e))?;
            changes.push(change);
        }
        let deleted = changes.len();
        let change = self.change(&client, &config.hosted_zone_id, changes).await?;
        info!(zone = %config.hosted_zone_id, ?domains, deleted, "deleted CNAME records");
        Ok(change)
    }

    async fn status(&self, config: &DnsConfig, change_id: &str) -> Result<DnsStatus, AwsError> {
        let client = self.client(config).await?;
        let output = self
            .timed("Route53GetChange", client.get_change().id(change_id).send())
            .await
            .map_err(|e| classify_sdk_error("GetChange", &e))?;
        match output.change_info().map(|c| c.status()) {
            Some(ChangeStatus::Insync) => Ok(DnsStatus::InSync),
            _ => Ok(DnsStatus::Pending),
        }
    }
}

/// DNS names as Route53 returns them: with a trailing dot, `*` escaped as `\052`, any case.
fn same_name(returned: &str, name: &str) -> bool {
    let normal = |n: &str| blockwork_aws::dns_name::normalize(&n.replace("\\052", "*"));
    normal(returned) == normal(name)
}

fn build_error(operation: &'static str, error: &aws_sdk_route53::error::BuildError) -> AwsError {
    AwsError { operation, code: None, class: ErrorClass::Terminal, message: format!("invalid request: {error}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_compare_as_route53_returns_them() {
        assert!(same_name("www.example.com.", "www.example.com"));
        assert!(same_name("\\052.example.com.", "*.example.com"));
        assert!(same_name("WWW.Example.com", "www.example.com."));
        assert!(!same_name("api.example.com.", "www.example.com"));
    }
}
