//! The deletion steps, one per reconcile: disable the tenant, wait for Deployed, delete it with
//! its ETag, delete its DNS records.

use blockwork_runtime::{Conditions, DeleteOutcome, ExternalError, Request, VerifyOutcome};
use kube::Resource;

use crate::api::{DistributionTenant, TenantObservation};
use crate::classify::{CallContext, Category};
use crate::cloudfront::{Acm, CloudFront, TenantWrite};
use crate::diff::TenantConfig;
use crate::dns::DnsRecords;
use crate::lifecycle::{DeletionStep, deletion_step};

use super::decisions::{dns_records_remain, forget, observed, record};
use super::manager::{Desired, ETAG_ATTEMPTS, TENANT_NAME_TAKEN, TenantManager};

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    pub(super) async fn verify_deletion(
        &self,
        request: &Request<'_, DistributionTenant>,
        observation: &mut TenantObservation,
    ) -> VerifyOutcome {
        let tenant = match self.observe(request.object, request.idempotency_token, observation).await {
            Ok(tenant) => tenant,
            // Not ours: nothing of this object's to delete.
            Err(error) if error.reason == TENANT_NAME_TAKEN => return VerifyOutcome::Missing,
            Err(error) => return VerifyOutcome::Error(error),
        };
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

    pub(super) async fn deleting(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> DeleteOutcome {
        let object = request.object;
        let tenant = match self.observe(object, request.idempotency_token, observation).await {
            Ok(tenant) => tenant,
            Err(error) if error.reason == TENANT_NAME_TAKEN => return DeleteOutcome::Succeeded,
            Err(error) => return DeleteOutcome::Error(error),
        };
        if let Some(tenant) = &tenant {
            record(observation, tenant);
        }
        let dns_remain = dns_records_remain(&object.spec, observation);
        match (deletion_step(tenant.as_ref().map(observed), dns_remain), tenant) {
            (DeletionStep::Disable, Some(tenant)) => {
                let disabled = TenantConfig { enabled: false, ..tenant.config.clone() };
                let write = TenantWrite { config: &disabled, managed_certificate_request: None };
                match self.update_with_etag(&tenant.id, tenant.e_tag.clone(), write).await {
                    Ok(updated) => {
                        record(observation, &updated);
                        DeleteOutcome::AwaitingVerification
                    }
                    Err(error) => DeleteOutcome::Error(error),
                }
            }
            (DeletionStep::DeleteTenant, Some(tenant)) => match self.delete_with_etag(&tenant.id, tenant.e_tag.clone()).await {
                Ok(()) => {
                    forget(observation);
                    if dns_remain { DeleteOutcome::AwaitingVerification } else { DeleteOutcome::Succeeded }
                }
                Err(error) => DeleteOutcome::Error(error),
            },
            (DeletionStep::DeleteDns, _) => {
                let Some(dns) = &request.derived.dns else {
                    return DeleteOutcome::Succeeded;
                };
                let target = match self.dns_target(&object.spec, observation).await {
                    Ok(target) => target,
                    Err(error) => return DeleteOutcome::Error(error),
                };
                let owned = observation.dns_records.clone();
                match dns.records.delete(&dns.zone, &owned, &target).await {
                    Ok(_) => {
                        observation.dns_records.clear();
                        observation.dns_change_id = None;
                        observation.dns_change_domains.clear();
                        DeleteOutcome::Succeeded
                    }
                    Err(error) => DeleteOutcome::Error(self.dns_error(&error, conditions, object.meta().generation)),
                }
            }
            (DeletionStep::WaitForDeployed, _) => DeleteOutcome::AwaitingVerification,
            (DeletionStep::Done, _) | (DeletionStep::Disable | DeletionStep::DeleteTenant, None) => DeleteOutcome::Succeeded,
        }
    }

    async fn delete_with_etag(&self, id: &str, e_tag: Option<String>) -> Result<(), ExternalError> {
        let mut e_tag = e_tag;
        for _ in 0..ETAG_ATTEMPTS {
            let current = match e_tag.take() {
                Some(tag) => tag,
                None => self.refetch_etag(id).await?,
            };
            match self.cloudfront.delete_tenant(id, &current).await {
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
