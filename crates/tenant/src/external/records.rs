//! The DNS steps of the calls: the records first on create (seed 001's DNS-first), following the
//! last change until it is in sync, the records' target, and DNS errors as conditions.

use blockwork_aws::{AwsError, Principal};
use blockwork_runtime::{Conditions, ExternalError};
use kube::Resource;

use crate::api::{DistributionTenant, DistributionTenantSpec, TenantObservation};
use crate::classify::{CallContext, Category, classify_dns};
use crate::cloudfront::{Acm, CloudFront};
use crate::dns::{DnsRecords, DnsStatus};

use super::decisions::{dns_condition, dns_in_sync, upserted};
use super::manager::{ManagedDns, TenantManager};

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    pub(super) fn dns_error(&self, error: &AwsError, conditions: &mut Conditions, generation: Option<i64>) -> ExternalError {
        let classified = classify_dns(error);
        if let Some(error_type) = classified.error_type {
            self.metrics.error(error_type);
        }
        if classified.category == Category::TerminalDns {
            dns_condition(conditions, false, "DNSError", &classified.error.message, generation);
        }
        classified.error
    }

    /// DNS-first (seed 001): the records must be in sync before the tenant exists. `Ok(true)`
    /// when the tenant may be created now.
    pub(super) async fn dns_first(
        &self,
        principal: &Principal,
        dns: &ManagedDns<D>,
        domains: &[String],
        object: &DistributionTenant,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> Result<bool, ExternalError> {
        let spec = &object.spec;
        let generation = object.meta().generation;
        let group = spec.connection_group_id.as_deref();
        let context = CallContext { connection_group_lookup: group.is_some(), ..CallContext::default() };
        let target = match self.routing_endpoint(principal, group).await {
            Ok(target) => target,
            Err(error) => {
                let classified = self.cloudfront_error(&error, context);
                if classified.category == Category::TerminalDns {
                    dns_condition(conditions, false, "DNSError", &classified.error.message, generation);
                }
                return Err(classified.error);
            }
        };
        let previous_target = observation.dns_target.replace(target.clone());
        // What the last change upserted, not what is owned: `dns_records` also holds the domains
        // of a create-pending marker, which may never have been written (issue 15).
        let written =
            previous_target.as_deref() == Some(target.as_str()) && domains.iter().all(|d| observation.dns_change_domains.contains(d));
        let change_id = match observation.dns_change_id.clone() {
            Some(change_id) if written => change_id,
            _ => {
                let change =
                    dns.records.upsert(&dns.zone, domains, &target).await.map_err(|e| self.dns_error(&e, conditions, generation))?;
                upserted(observation, change, domains);
                dns_condition(conditions, false, "DNSRecordCreating", "the CNAME records were submitted", generation);
                return Ok(false);
            }
        };
        match dns.records.status(&dns.zone, &change_id).await.map_err(|e| self.dns_error(&e, conditions, generation))? {
            DnsStatus::InSync => {
                dns_condition(conditions, true, "DNSReady", "the CNAME records are propagated", generation);
                Ok(true)
            }
            DnsStatus::Pending => {
                dns_condition(conditions, false, "DNSPropagating", "waiting for the record change to be in sync", generation);
                Ok(false)
            }
        }
    }

    /// Steady state of the records: follows the last change until it is in sync; whether it is
    /// (`InSync` too when there is no change to follow).
    pub(super) async fn follow_dns(
        &self,
        dns: &ManagedDns<D>,
        object: &DistributionTenant,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> Result<DnsStatus, ExternalError> {
        let generation = object.meta().generation;
        let Some(change_id) = observation.dns_change_id.clone().filter(|_| !dns_in_sync(object)) else {
            return Ok(DnsStatus::InSync);
        };
        let status = dns.records.status(&dns.zone, &change_id).await.map_err(|e| self.dns_error(&e, conditions, generation))?;
        match status {
            DnsStatus::InSync => dns_condition(conditions, true, "DNSReady", "the CNAME records are propagated", generation),
            DnsStatus::Pending => {
                dns_condition(conditions, false, "DNSPropagating", "waiting for the record change to be in sync", generation);
            }
        }
        Ok(status)
    }

    /// The CNAME target the tenant's records point at: as recorded, else resolved again.
    pub(super) async fn dns_target(
        &self,
        principal: &Principal,
        spec: &DistributionTenantSpec,
        observation: &mut TenantObservation,
    ) -> Result<String, ExternalError> {
        if let Some(target) = &observation.dns_target {
            return Ok(target.clone());
        }
        let group = spec.connection_group_id.as_deref();
        let context = CallContext { connection_group_lookup: group.is_some(), ..CallContext::default() };
        let target = self.routing_endpoint(principal, group).await.map_err(|e| self.cloudfront_error(&e, context).error)?;
        observation.dns_target = Some(target.clone());
        Ok(target)
    }
}
