//! The deletion steps, one per reconcile: disable the tenant, wait for Deployed, delete it with
//! its ETag, delete its DNS records. Every answer is read in the runtime's one vocabulary
//! (`blockwork_runtime::Existence`): a tenant found gone at any step is forgotten and the records
//! are deleted in the same call; records in a hosted zone that does not exist are gone; only
//! answers that leave something unknown fail the call, naming what.

use blockwork_aws::Principal;
use blockwork_aws::mask_accounts;
use blockwork_identity::placement::AWS_IDENTITY_CHANGED;
use blockwork_runtime::{Conditions, DeleteOutcome, Existence, ExternalError, Request, VerifyOutcome};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::{DistributionTenant, TenantObservation};
use crate::classify::{CallContext, Category};
use crate::cloudfront::{Acm, CloudFront, ObservedTenant, TenantWrite};
use crate::diff::TenantConfig;
use crate::dns::DnsRecords;
use crate::lifecycle::{DeletionStep, deletion_step};
use crate::ownership::is_ours;

use super::adoption::{claimant, someone_elses};
use super::decisions::{dns_records_remain, forget, observed, record};
use super::manager::{Desired, ETAG_ATTEMPTS, TenantManager};

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    pub(super) async fn verify_deletion(
        &self,
        principal: &Principal,
        request: &Request<'_, DistributionTenant>,
        observation: &mut TenantObservation,
    ) -> VerifyOutcome {
        let tenant = match self.observe(principal, request.object, claimant(request), observation).await {
            Ok(tenant) => tenant,
            // Not ours: nothing of this object's to delete.
            Err(error) if someone_elses(&error) => return VerifyOutcome::Missing,
            Err(error) => return VerifyOutcome::Error(error.concerning(tenant_named(request.object, observation))),
        };
        // Lost to another object, or never adopted: released, nothing deleted (neither the
        // tenant nor a record: the owner may share them).
        if let Some(foreign) = tenant.as_ref().filter(|tenant| !deletes(request, tenant, observation)) {
            info!(tenant = %request.object.name_any(), id = %foreign.id, "not this object's tenant: released without deleting it or its records");
            return VerifyOutcome::Missing;
        }
        if let Some(tenant) = &tenant {
            record(observation, tenant);
        }
        let step = deletion_step(tenant.as_ref().map(observed), dns_records_remain(&request.object.spec, observation));
        match step {
            DeletionStep::Done => VerifyOutcome::Missing,
            DeletionStep::WaitForDeployed => VerifyOutcome::Deleting,
            DeletionStep::Disable => VerifyOutcome::InProgress("disabling the tenant before deleting it".to_owned()),
            DeletionStep::DeleteTenant => VerifyOutcome::InProgress("deleting the tenant".to_owned()),
            DeletionStep::DeleteDns => VerifyOutcome::InProgress("deleting the tenant's DNS records".to_owned()),
        }
    }

    /// A tenant being deleted while held by a mapping change: released without touching either
    /// account; a Warning event names what stays in the old one (accounts masked).
    pub(super) async fn release_held(&self, request: &Request<'_, DistributionTenant>, observation: &mut TenantObservation) {
        let tenant = observation.arn.as_deref().map_or_else(|| "its tenant".to_owned(), |arn| format!("tenant {}", mask_accounts(arn)));
        let before = observation.aws_identity.as_deref().unwrap_or("it acted as before");
        let records = if observation.dns_records.is_empty() {
            String::new()
        } else {
            format!(" and the CNAME records of {}", observation.dns_records.join(", "))
        };
        let note = format!(
            "released without deleting: its namespace acts in another account now; {tenant}{records} stay in the account of AwsIdentity {before}: delete them there, or map the namespace back and delete the DistributionTenant again"
        );
        self.events.publish(&request.object.object_ref(&()), EventType::Warning, AWS_IDENTITY_CHANGED, "Release", &note).await;
        warn!(tenant = %request.object.name_any(), "{note}");
        forget(observation);
        observation.dns_records.clear();
    }

    pub(super) async fn deleting(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> DeleteOutcome {
        let object = request.object;
        let principal = &request.derived.principal;
        let tenant = match self.observe(principal, object, claimant(request), observation).await {
            Ok(tenant) => tenant,
            Err(error) if someone_elses(&error) => return DeleteOutcome::Succeeded,
            Err(error) => return DeleteOutcome::Error(error.concerning(tenant_named(object, observation))),
        };
        // Taken over since verify read it: nothing of it is this object's to delete any more.
        if tenant.as_ref().is_some_and(|tenant| !deletes(request, tenant, observation)) {
            return DeleteOutcome::Succeeded;
        }
        if let Some(tenant) = &tenant {
            record(observation, tenant);
        }
        let dns_remain = dns_records_remain(&object.spec, observation);
        let step = deletion_step(tenant.as_ref().map(observed), dns_remain);
        let done = match (step, tenant) {
            (DeletionStep::Disable, Some(tenant)) => self.disable(principal, &tenant, observation).await,
            (DeletionStep::DeleteTenant, Some(tenant)) => {
                self.delete_with_etag(principal, &tenant.id, tenant.e_tag.clone()).await.map(|()| DeleteOutcome::Succeeded)
            }
            (DeletionStep::WaitForDeployed, _) => Ok(DeleteOutcome::AwaitingVerification),
            (DeletionStep::DeleteDns | DeletionStep::Done, _) | (DeletionStep::Disable | DeletionStep::DeleteTenant, None) => {
                Ok(DeleteOutcome::Succeeded)
            }
        };
        let deleted_now = match done {
            // Disabling: the next look waits for Deployed.
            Ok(DeleteOutcome::AwaitingVerification) => return DeleteOutcome::AwaitingVerification,
            Ok(_) => step == DeletionStep::DeleteTenant,
            // Gone since it was read (deleted outside, or by a racing reconcile): its records
            // follow in this call.
            Err(error) if error.existence == Existence::Gone => false,
            Err(error) => return DeleteOutcome::Error(error.concerning(tenant_named(object, observation))),
        };
        forget(observation);
        // A tenant this call deleted is looked at once more before its records go (seed 001's
        // one step per reconcile).
        if deleted_now && dns_remain {
            return DeleteOutcome::AwaitingVerification;
        }
        match self.delete_records(request, observation, conditions).await {
            Ok(()) => DeleteOutcome::Succeeded,
            Err(error) => DeleteOutcome::Error(error),
        }
    }

    async fn disable(
        &self,
        principal: &Principal,
        tenant: &ObservedTenant,
        observation: &mut TenantObservation,
    ) -> Result<DeleteOutcome, ExternalError> {
        let disabled = TenantConfig { enabled: false, ..tenant.config.clone() };
        let write = TenantWrite { config: &disabled, managed_certificate_request: None };
        let updated = self.update_with_etag(principal, &tenant.id, tenant.e_tag.clone(), write).await?;
        record(observation, &updated);
        Ok(DeleteOutcome::AwaitingVerification)
    }

    /// Deletes the CNAMEs the object owns, each only while it still points at the tenant's
    /// routing endpoint. Records in a hosted zone that does not exist are gone with it (never
    /// written, or deleted with the zone): the DNS implementation says so as success.
    async fn delete_records(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> Result<(), ExternalError> {
        let object = request.object;
        let Some(dns) = &request.derived.dns else { return Ok(()) };
        if observation.dns_records.is_empty() {
            return Ok(());
        }
        let owned = observation.dns_records.clone();
        let what = format!("the CNAME records of {} in hosted zone {}", owned.join(", "), dns.zone.config.hosted_zone_id);
        let group = object.spec.connection_group_id.as_deref();
        let target = match observation.dns_target.clone() {
            Some(target) => Some(target),
            None => match self.routing_endpoint(&request.derived.principal, group).await {
                Ok(target) => Some(target),
                // No routing endpoint was recorded and the connection group does not exist: no
                // record can be told to be ours (the ownership rule needs the value written),
                // and none was written without one (a connection group id with a typo).
                Err(error) if error.existence() == Existence::Gone => {
                    warn!(tenant = %object.name_any(), records = ?owned, "the connection group does not exist: no record can be ours; none deleted");
                    None
                }
                Err(error) => {
                    let context = CallContext { connection_group_lookup: group.is_some(), ..CallContext::default() };
                    return Err(self.cloudfront_error(&error, context).error.concerning(format!("the routing endpoint {what} point at")));
                }
            },
        };
        if let Some(target) = target {
            dns.records
                .delete(&dns.zone, &owned, &target)
                .await
                .map_err(|e| self.dns_error(&e, conditions, object.meta().generation).concerning(&what))?;
        }
        observation.dns_records.clear();
        observation.dns_change_id = None;
        observation.dns_change_domains.clear();
        Ok(())
    }

    async fn delete_with_etag(&self, principal: &Principal, id: &str, e_tag: Option<String>) -> Result<(), ExternalError> {
        let mut e_tag = e_tag;
        for _ in 0..ETAG_ATTEMPTS {
            let current = match e_tag.take() {
                Some(tag) => tag,
                None => self.refetch_etag(principal, id).await?,
            };
            match self.cloudfront.delete_tenant(principal, id, &current).await {
                Ok(()) => return Ok(()),
                Err(error) => {
                    let classified = self.cloudfront_error(&error, CallContext::default());
                    match classified.category {
                        Category::EtagMismatch => {}
                        Category::NotFound => return Ok(()),
                        _ => return Err(classified.error),
                    }
                }
            }
        }
        Err(ExternalError::retryable("PreconditionFailed", "the tenant kept changing while it was being deleted; retrying"))
    }
}

/// Whether deleting the object deletes `tenant`: only while the tags say it is this object's
/// and it did not lose it (lost is for good, whatever the tags say now).
fn deletes<D>(request: &Request<'_, DistributionTenant, D>, tenant: &ObservedTenant, observation: &TenantObservation) -> bool {
    is_ours(&tenant.tags, claimant(request)) && !observation.ownership_lost
}

/// "distribution tenant shop (id T1)", for the errors of a deletion.
fn tenant_named(object: &DistributionTenant, observation: &TenantObservation) -> String {
    match &observation.id {
        Some(id) => format!("distribution tenant {} (id {id})", object.name_any()),
        None => format!("distribution tenant {}", object.name_any()),
    }
}
