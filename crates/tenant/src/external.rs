//! The runtime's [`ExternalResource`] for a `DistributionTenant`: seed 001's flow on the runtime's
//! state machine. The runtime owns the finalizer, the three-way decision (spec vs last applied
//! spec), drift policies and requeues; these files make the CloudFront (and DNS) calls.
//!
//! - `verify` validates the spec, derives what the calls of the reconcile act on ([`Desired`]:
//!   the configuration the spec asks for, where its records are managed), reads the tenant (by
//!   id, else by name: a tenant created just before a crash is adopted), records id/ARN/ETag/status, follows the managed certificate and
//!   compares spec and tenant. A difference is `UpdateRequired` even while AWS is InProgress, so
//!   spec changes are pushed at once. A managed certificate still being validated keeps the
//!   tenant in progress, looked at again at the short interval. With `spec.dns` it follows the
//!   last record change until it is in sync. It writes nothing: once the tenant matches the
//!   spec, the deletion of records of removed domains is upkeep ([`TenantUpkeep`]) that the
//!   runtime gates by the plan and the access permissions and hands to `maintain`; an issued
//!   managed certificate's ARN is its spec patch.
//! - Before any write, `create` and `update` check the spec against the distribution it names
//!   (which must exist: no DNS record is written for a distribution that does not) and the
//!   certificate's names against the domains. Both are read through the AWS layer's caches
//!   (concurrent misses share one call): a DNS-first create spans several reconciles, and many
//!   tenants share one distribution.
//! - `create` writes DNS first when `spec.dns` is set, then creates the tenant.
//! - `update` upserts the records of the current domains, then pushes the spec with the last
//!   ETag; a stale ETag is re-read and retried at once.
//! - `create`, `update`, `maintain` and `delete` act on the [`Desired`] `verify` derived in the
//!   same reconcile (the runtime hands it down), never derive it again.
//! - Every call returns the conditions it decides (`DNSReady`, `CertificateReady`) beside its
//!   outcome; `asks` gives the object's `spec.driftPolicy`.
//! - `delete` takes one step per reconcile: disable, wait for Deployed, delete with the ETag,
//!   delete the DNS records. A tenant already gone is not an error.
//!
//! The files: [`manager`] (the manager, its caches and the CloudFront and ACM reads every call
//! shares), [`records`] (the DNS steps), [`deletion`] (the deletion steps), [`decisions`] (the pure
//! part: what the calls decide from what they read, and how they record it); the calls and the
//! runtime's trait are here.

mod adoption;
mod decisions;
mod deletion;
mod manager;
mod records;

use blockwork_identity::placement::AWS_IDENTITY_CHANGED;
use blockwork_runtime::{
    Asks, Conditions, DeleteOutcome, DriftPolicy, ExternalError, ExternalResource, MutateOutcome, Observed, Phase, Purpose, Request,
    Upkeep, VerifyOutcome, WithConditions,
};
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use crate::api::{CERTIFICATE_READY, DistributionTenant, DistributionTenantSpec, TenantObservation};
use crate::classify::{CallContext, validation};
use crate::cloudfront::{Acm, CloudFront, ObservedTenant, TenantWrite};
use crate::diff::{Change, change};
use crate::dns::{DnsRecords, DnsStatus};
use crate::lifecycle::{CertificateStep, DEPLOYED};
use crate::ownership::Claim;
use crate::validate::validate;

use adoption::claimant;
use decisions::{
    certificate_progress, cloudfront_validates, dns_condition, forget, marked_dns_domains, new_certificate_request, own_records, record,
    settled, upserted,
};
use manager::name_taken;
pub use manager::{CERTIFICATE_NAMES_TTL, DISTRIBUTION_TTL, Desired, MISSING_TTL, ROUTING_ENDPOINT_TTL, TenantManager, TenantUpkeep};

/// The calls, each noting the conditions it decides in `conditions` (the implementation of
/// [`ExternalResource`] below returns them).
impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    async fn verifying(
        &self,
        request: &Request<'_, DistributionTenant>,
        desired: &Desired<D>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> Observed<TenantUpkeep> {
        let object = request.object;
        if object.spec.dns.is_some() {
            own_records(observation, &marked_dns_domains(request));
        }
        if request.phase == Phase::Deleting {
            return self.verify_deletion(&desired.principal, request, observation).await.into();
        }
        let spec = &object.spec;
        let generation = object.meta().generation;
        if let Err(invalid) = validate(&object.name_any(), spec) {
            return VerifyOutcome::Error(validation(&invalid).error).into();
        }
        if spec.dns.is_some() && desired.dns.is_none() {
            let error = ExternalError::terminal(
                "DNSError",
                "spec.dns is set but this controller runs without DNS management; remove spec.dns and manage the CNAMEs yourself",
            );
            dns_condition(conditions, false, "DNSError", &error.message, generation);
            return VerifyOutcome::Error(error).into();
        }
        if spec.dns.is_none() {
            dns_condition(conditions, true, "DNSNotConfigured", "spec.dns is not set; DNS is not managed", generation);
            // Records written while spec.dns was set are no longer managed (see docs/tenant.md).
            observation.dns_records.clear();
            observation.dns_change_id = None;
            observation.dns_change_domains.clear();
        }
        let principal = &desired.principal;
        let tenant = match self.observe(principal, object, claimant(request), observation).await {
            Ok(Some(tenant)) => tenant,
            // Adoption never creates: the tenant it names is not in the namespace's account.
            Ok(None) if adoption::still_adopting(spec, observation) => {
                return VerifyOutcome::Error(adoption::not_found(spec, desired)).into();
            }
            Ok(None) => {
                forget(observation);
                return VerifyOutcome::Missing.into();
            }
            Err(error) => return VerifyOutcome::Error(error).into(),
        };
        match adoption::claim_of(request, &desired.config, &tenant, observation) {
            Claim::Owned => observation.adopted |= spec.adopt.is_some(),
            Claim::Adopt => return adoption::adopting(&tenant),
            Claim::Mismatch(differences) => return VerifyOutcome::Error(adoption::mismatch(&tenant, &differences)).into(),
            Claim::Lost { by } => return VerifyOutcome::Error(self.lost(request, observation, &tenant, by.as_deref()).await).into(),
            // Neither held nor the one `spec.adopt` names (which gave its name, not its id).
            Claim::OwnedElsewhere { .. } | Claim::NameTaken => {
                let error = adoption::not_ours_by_name(&tenant, claimant(request));
                return VerifyOutcome::Error(error.unwrap_or_else(|| name_taken(&object.name_any(), &tenant.id))).into();
            }
        }
        record(observation, &tenant);
        self.resolve_dns_target(principal, tenant.config.connection_group_id.as_deref(), observation).await;
        let certificate = match self.follow_certificate(principal, spec, &tenant, observation, conditions, generation).await {
            Ok(step) => step,
            Err(error) => return VerifyOutcome::Error(error).into(),
        };
        // An issued managed certificate goes into the spec (seed 001: one write, pushed to
        // CloudFront by the next reconcile as a spec change).
        let spec_patch = match &certificate {
            CertificateStep::Attach { arn } => Some(serde_json::json!({ "customizations": { "certificate": { "arn": arn } } })),
            _ => None,
        };
        let change = change(desired.config.differences(&tenant.config), request.spec_change.changed);
        let mut upkeep = Vec::new();
        let mut records = DnsStatus::InSync;
        if let Some(dns) = &desired.dns {
            records = match self.follow_dns(dns, object, observation, conditions).await {
                Ok(status) => status,
                Err(error) => return Observed { spec_patch, ..VerifyOutcome::Error(error).into() },
            };
            // Once the tenant matches the spec (CloudFront no longer serves a removed domain),
            // the records of domains that left the spec go: they finish the update that removed
            // them.
            let removed: Vec<String> = observation.dns_records.iter().filter(|d| !desired.config.domains.contains(*d)).cloned().collect();
            if change == Change::InSync
                && !removed.is_empty()
                && let Some(target) = observation.dns_target.clone()
            {
                upkeep.push(Upkeep { purpose: Purpose::FinishUpdate, work: TenantUpkeep::DeleteRecords { domains: removed, target } });
            }
        }
        Observed { upkeep, spec_patch, ..self.outcome(&tenant, &certificate, records, change).into() }
    }

    async fn maintaining(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
        work: TenantUpkeep,
    ) -> Result<(), ExternalError> {
        let (domains, target) = match work {
            TenantUpkeep::DeleteRecords { domains, target } => (domains, target),
            TenantUpkeep::Adopt { arn } => return self.adopt(request, observation, &arn).await,
        };
        let Some(dns) = &request.derived.dns else { return Ok(()) };
        dns.records
            .delete(&dns.zone, &domains, &target)
            .await
            .map_err(|e| self.dns_error(&e, conditions, request.object.meta().generation))?;
        observation.dns_records.retain(|d| !domains.contains(d));
        Ok(())
    }

    async fn creating(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> MutateOutcome {
        let object = request.object;
        let spec = &object.spec;
        let name = object.name_any();
        let desired = request.derived;
        let principal = &desired.principal;
        if let Err(error) = self.check_before_writing(principal, spec).await {
            return MutateOutcome::Error(error);
        }
        if let Some(dns) = &desired.dns {
            match self.dns_first(principal, dns, &desired.domains(), object, observation, conditions).await {
                Ok(true) => {}
                Ok(false) => return MutateOutcome::AwaitingVerification,
                Err(error) => return MutateOutcome::Error(error),
            }
        }
        let write = TenantWrite { config: &desired.config, managed_certificate_request: spec.managed_certificate_request.as_ref() };
        let context = CallContext { creating: true, cloudfront_validates: cloudfront_validates(spec), ..CallContext::default() };
        self.creating_tenant(principal, &name).await;
        match self.cloudfront.create_tenant(principal, &name, &claimant(request).owner.tags(), write).await {
            Ok(tenant) => {
                record(observation, &tenant);
                certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), object.meta().generation);
                // A Deployed tenant is Ready at once: the target must be in this status write.
                self.resolve_dns_target(principal, tenant.config.connection_group_id.as_deref(), observation).await;
                // DNS-first: the records were in sync before the tenant was created.
                settled(&tenant, spec, &desired.config, observation, DnsStatus::InSync)
            }
            // The tenant name is taken: by our own create that crashed before its status write
            // (verify missed it only if it landed after the read), so adopt it by name.
            Err(error) if error.code.as_deref() == Some("EntityAlreadyExists") => {
                match self.cloudfront.get_tenant(principal, &name).await {
                    Ok(Some(tenant)) => match adoption::not_ours_by_name(&tenant, claimant(request)) {
                        Some(error) => MutateOutcome::Error(error),
                        None => {
                            record(observation, &tenant);
                            MutateOutcome::AwaitingVerification
                        }
                    },
                    Ok(None) => MutateOutcome::Error(self.cloudfront_error(&error, context).error),
                    Err(error) => MutateOutcome::Error(self.cloudfront_error(&error, CallContext::default()).error),
                }
            }
            Err(error) => MutateOutcome::Error(self.cloudfront_error(&error, context).error),
        }
    }

    async fn updating(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> MutateOutcome {
        let object = request.object;
        let spec = &object.spec;
        let desired = request.derived;
        let principal = &desired.principal;
        if let Err(error) = self.check_before_writing(principal, spec).await {
            return MutateOutcome::Error(error);
        }
        let Some(id) = observation.id.clone() else {
            return MutateOutcome::Error(ExternalError::retryable("NotObserved", "the tenant's id is not known yet"));
        };
        // The records' change this update submits, followed by `verify` until it is in sync.
        let mut records = DnsStatus::InSync;
        if let Some(dns) = &desired.dns {
            // Seed 001: upsert the records of the current domains, then push the tenant; records
            // of removed domains go once the tenant no longer has them (`TenantUpkeep`).
            let generation = object.meta().generation;
            observation.dns_target = None;
            let target = match self.dns_target(principal, spec, observation).await {
                Ok(target) => target,
                Err(error) => return MutateOutcome::Error(error),
            };
            let domains = desired.domains();
            match dns.records.upsert(&dns.zone, &domains, &target).await {
                Ok(change) => {
                    if change.change_id.is_some() {
                        records = DnsStatus::Pending;
                    }
                    upserted(observation, change, &domains);
                    dns_condition(conditions, false, "DNSRecordCreating", "the CNAME records were submitted", generation);
                }
                Err(error) => return MutateOutcome::Error(self.dns_error(&error, conditions, generation)),
            }
        }
        // Each request makes CloudFront request a new certificate: send it only when it is new.
        let request = new_certificate_request(spec, request.spec_change.last_applied.as_ref());
        let write = TenantWrite { config: &desired.config, managed_certificate_request: request };
        match self.update_with_etag(principal, &id, observation.e_tag.clone(), write).await {
            Ok(tenant) => {
                // The connection group may have changed: the next verify resolves the target again
                // (with DNS managed, it was resolved for the upsert above).
                if desired.dns.is_none() {
                    observation.dns_target = None;
                }
                record(observation, &tenant);
                certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), object.meta().generation);
                settled(&tenant, spec, &desired.config, observation, records)
            }
            Err(error) => MutateOutcome::Error(error),
        }
    }

    /// What `verify` reports of a tenant it found, once its certificate, its records' last change
    /// and the spec's differences are known.
    fn outcome(&self, tenant: &ObservedTenant, certificate: &CertificateStep, records: DnsStatus, change: Change) -> VerifyOutcome {
        // Not Ready before its certificate is: looked at again at the short interval (the
        // Verifying state's), so the issued ARN is attached within one interval of issuance.
        if let CertificateStep::Pending { status } = certificate
            && change == Change::InSync
        {
            return VerifyOutcome::InProgress(format!("the tenant waits for its managed certificate, which is {status}"));
        }
        match change {
            // An update's records are followed like CloudFront's deployment: Ready with its
            // domains resolving, and DNSReady never left saying "submitted" until the next look.
            Change::InSync if tenant.status.as_deref() == Some(DEPLOYED) && records == DnsStatus::Pending => {
                VerifyOutcome::InProgress("the tenant waits for its CNAME records' change to be in sync".to_owned())
            }
            Change::InSync if tenant.status.as_deref() == Some(DEPLOYED) => VerifyOutcome::Ready,
            Change::InSync => VerifyOutcome::InProgress(format!(
                "the tenant is {}; waiting for Deployed",
                tenant.status.as_deref().unwrap_or("in an unknown state")
            )),
            Change::SpecChanged(differences) => VerifyOutcome::UpdateRequired(differences.join("; ")),
            Change::Drift(differences) => {
                self.metrics.drift();
                VerifyOutcome::UpdateRequired(differences.join("; "))
            }
        }
    }
}

impl<C: CloudFront + Acm, D: DnsRecords> ExternalResource for TenantManager<C, D> {
    type Object = DistributionTenant;
    type Observation = TenantObservation;
    type Upkeep = TenantUpkeep;
    type Derived = Desired<D>;

    /// Also removes `CertificateReady` when the spec no longer asks for a managed certificate.
    async fn verify(
        &self,
        request: &Request<'_, DistributionTenant>,
        observation: &mut TenantObservation,
    ) -> Observed<TenantUpkeep, Desired<D>> {
        let mut conditions = Conditions::default();
        if request.object.spec.managed_certificate_request.is_none() {
            conditions.remove(CERTIFICATE_READY);
        }
        let (desired, refused) = self.desired(request.object, observation).await;
        if let Some(identity) = &desired.identity {
            observation.aws_identity = Some(identity.clone());
        }
        if let Some(error) = refused {
            let outcome = match request.phase {
                // Held by a mapping change and deleted: released without touching either account.
                Phase::Deleting if error.reason == AWS_IDENTITY_CHANGED => {
                    self.release_held(request, observation).await;
                    VerifyOutcome::Missing
                }
                _ if adoption::still_adopting(&request.object.spec, observation) => VerifyOutcome::Error(adoption::refused(error)),
                _ => VerifyOutcome::Error(error),
            };
            return Observed { outcome, upkeep: Vec::new(), conditions, spec_patch: None, derived: desired };
        }
        let Observed { outcome, upkeep, spec_patch, .. } = self.verifying(request, &desired, observation, &mut conditions).await;
        Observed { outcome, upkeep, conditions, spec_patch, derived: desired }
    }

    /// Deletes the DNS records of domains that left the spec, once the runtime allows it (see
    /// [`TenantUpkeep`]).
    async fn maintain(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        work: TenantUpkeep,
    ) -> WithConditions<Result<(), ExternalError>> {
        WithConditions::gathered(async |conditions| self.maintaining(request, observation, conditions, work).await).await
    }

    async fn create(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
    ) -> WithConditions<MutateOutcome> {
        WithConditions::gathered(async |conditions| self.creating(request, observation, conditions).await).await
    }

    async fn update(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
    ) -> WithConditions<MutateOutcome> {
        WithConditions::gathered(async |conditions| self.updating(request, observation, conditions).await).await
    }

    async fn delete(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
    ) -> WithConditions<DeleteOutcome> {
        WithConditions::gathered(async |conditions| self.deleting(request, observation, conditions).await).await
    }

    /// `spec.driftPolicy`, over the operator's `--drift-policy` (the annotation beats both), and
    /// the Cert `spec.customizations.certificate.certRef` names.
    fn asks(&self, object: &DistributionTenant) -> Asks {
        Asks {
            drift_policy: object.spec.drift_policy.map(DriftPolicy::from),
            dependencies: crate::cert_ref::dependency(&object.spec).into_iter().collect(),
        }
    }

    /// What a tenant reads of its Cert ([`crate::cert_ref::view`]): its other status writes (its
    /// validation records written, say) wake no tenant.
    fn dependency_view(dependency: &DynamicObject) -> serde_json::Value {
        crate::cert_ref::view(dependency)
    }

    /// The Cert's certificate ARN in `customizations.certificate.arn`, once CloudFront's rules
    /// for it are checked ([`crate::cert_ref`]).
    fn resolve(&self, object: &DistributionTenant, dependencies: &[DynamicObject]) -> Result<DistributionTenantSpec, ExternalError> {
        crate::cert_ref::resolve(&object.spec, dependencies)
    }

    /// The namespace's AwsIdentity: each account's tenants have reconciles in flight of their
    /// own (`blockwork_runtime::shares`).
    async fn share(&self, object: &DistributionTenant) -> String {
        self.identity_of(object).await
    }
}
