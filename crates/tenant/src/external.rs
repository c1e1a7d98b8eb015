//! The runtime's [`ExternalResource`] for a `DistributionTenant`: seed 001's flow on the runtime's
//! state machine. The runtime owns the finalizer, the three-way decision (spec vs last applied
//! spec), drift policies and requeues; this file makes the CloudFront (and DNS) calls.
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

use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::cache::Cached;
use blockwork_aws::{AwsError, AwsMetrics};
use blockwork_runtime::status::condition;
use blockwork_runtime::{
    Asks, Conditions, DeleteOutcome, DriftPolicy, ExternalError, ExternalResource, MutateOutcome, Observed, Phase, Purpose, Request,
    Upkeep, VerifyOutcome, WithConditions,
};
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::api::{
    CERTIFICATE_READY, DNS_READY, DistributionTenant, DistributionTenantSpec, DnsConfig, ManagedCertificateRequest, TenantObservation,
    ValidationTokenHost,
};
use crate::classify::{CallContext, Category, Classified, classify_cloudfront, classify_dns, validation};
use crate::cloudfront::{Acm, CloudFront, ObservedTenant, TenantWrite};
use crate::diff::{Change, TenantConfig, change};
use crate::dns::{DnsChange, DnsRecords, DnsStatus};
use crate::lifecycle::{self, CertificateStep, DEPLOYED, DeletionStep, certificate_step, deletion_step};
use crate::metrics::TenantMetrics;
use crate::validate::{DistributionRules, check_certificate_coverage, validate, validate_against};

/// How often a stale ETag is re-read and the write retried within one call before the runtime's
/// backoff takes over: another writer racing us that often is not a transient race any more.
const ETAG_ATTEMPTS: usize = 3;

/// How long a distribution's rules are reused. Tenants of one distribution, and the reconciles of
/// one DNS-first create, share one GetDistribution a minute; a change to the distribution (a
/// parameter given a default) is seen within a minute.
pub const DISTRIBUTION_TTL: Duration = Duration::from_secs(60);
/// How long a certificate's names are reused: longer than a DNS-first create takes, so its
/// coverage is read once per create. Only imported certificates can change names, by re-import.
pub const CERTIFICATE_NAMES_TTL: Duration = Duration::from_secs(600);
/// How long a connection group's routing endpoint is reused. CloudFront assigns it with the
/// group and never changes it; the account's *default* group could be replaced, which this sees
/// within ten minutes. Without it every tenant of the default group listed the account's groups
/// after its create and again at its first verify.
pub const ROUTING_ENDPOINT_TTL: Duration = Duration::from_secs(600);
/// Distributions and certificates remembered at most; each entry is a few hundred bytes.
const CACHE_ENTRIES: u64 = 1000;

pub struct TenantManager<C, D> {
    cloudfront: C,
    /// The DNS implementation for tenants with `spec.dns`; `None`: such tenants fail with
    /// `DNSError` (DNS management is not available in this build). Shared with each reconcile's
    /// [`Desired`].
    dns: Option<Arc<D>>,
    metrics: Arc<TenantMetrics>,
    /// By distribution id; a distribution that does not exist is not remembered.
    distributions: Cached<String, DistributionRules>,
    /// By certificate ARN: its domain name and subject alternative names.
    certificate_names: Cached<String, Vec<String>>,
    /// By connection group id (`""`: the account's default group): its routing endpoint.
    routing_endpoints: Cached<String, String>,
}

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    /// `aws_metrics`: where the caches count their hits and misses.
    pub fn new(cloudfront: C, dns: Option<D>, metrics: Arc<TenantMetrics>, aws_metrics: &Arc<AwsMetrics>) -> Self {
        Self {
            cloudfront,
            dns: dns.map(Arc::new),
            metrics,
            distributions: Cached::new(aws_metrics, crate::CONTROLLER, "cloudfront-distribution", DISTRIBUTION_TTL, CACHE_ENTRIES),
            certificate_names: Cached::new(aws_metrics, crate::CONTROLLER, "acm-certificate-names", CERTIFICATE_NAMES_TTL, CACHE_ENTRIES),
            routing_endpoints: Cached::new(
                aws_metrics,
                crate::CONTROLLER,
                "cloudfront-routing-endpoint",
                ROUTING_ENDPOINT_TTL,
                CACHE_ENTRIES,
            ),
        }
    }

    /// Everything checked before a write beyond the spec alone: the spec against its
    /// distribution (which must exist), and the certificate's coverage of the domains. The spec
    /// alone is validated once per reconcile, by `verify`: the runtime calls `create` and `update`
    /// only after `verify` of the same reconcile, and it returns `Missing` or `UpdateRequired`
    /// only for a valid spec.
    async fn check_before_writing(&self, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
        let distribution = self.distribution(&spec.distribution_id).await?;
        validate_against(spec, &distribution).map_err(|invalid| validation(&invalid).error)?;
        self.check_coverage(spec).await
    }

    /// The distribution's rules, cached for [`DISTRIBUTION_TTL`]; concurrent reconciles of
    /// tenants of one distribution share one read. Failures are not cached.
    async fn distribution(&self, id: &str) -> Result<DistributionRules, ExternalError> {
        let read = async {
            match self.cloudfront.distribution(id).await {
                Ok(Some(rules)) => Ok(rules),
                // Not counted: like any invalid spec, it needs the user, not AWS.
                Ok(None) => Err(ExternalError::terminal(
                    DISTRIBUTION_NOT_FOUND,
                    format!("distribution {id} does not exist: check spec.distributionId (nothing was written for it)"),
                )),
                Err(error) => Err(self.cloudfront_error(&error, CallContext::default()).error),
            }
        };
        self.distributions.get_or_load(id, read).await
    }

    /// Classifies and counts a failed CloudFront call.
    fn cloudfront_error(&self, error: &AwsError, context: CallContext) -> Classified {
        let classified = classify_cloudfront(error, context);
        if let Some(error_type) = classified.error_type {
            self.metrics.error(error_type);
        }
        classified
    }

    fn dns_error(&self, error: &AwsError, conditions: &mut Conditions, generation: Option<i64>) -> ExternalError {
        let classified = classify_dns(error);
        if let Some(error_type) = classified.error_type {
            self.metrics.error(error_type);
        }
        if classified.category == Category::TerminalDns {
            dns_condition(conditions, false, "DNSError", &classified.error.message, generation);
        }
        classified.error
    }

    /// Writes the tenant, re-reading it and retrying at once when the ETag is stale (seed 001:
    /// ETag mismatch → re-fetch and retry, not counted as an error).
    async fn update_with_etag(&self, id: &str, e_tag: Option<String>, write: TenantWrite<'_>) -> Result<ObservedTenant, ExternalError> {
        let mut e_tag = e_tag;
        for _ in 0..ETAG_ATTEMPTS {
            let current = match e_tag.take() {
                Some(tag) => tag,
                None => self.refetch_etag(id).await?,
            };
            match self.cloudfront.update_tenant(id, &current, write).await {
                Ok(tenant) => return Ok(tenant),
                Err(error) => {
                    let classified = self.cloudfront_error(&error, CallContext::default());
                    if classified.category != Category::EtagMismatch {
                        return Err(classified.error);
                    }
                }
            }
        }
        Err(ExternalError::retryable("PreconditionFailed", "the tenant kept changing while it was being updated; retrying"))
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

    async fn refetch_etag(&self, id: &str) -> Result<String, ExternalError> {
        match self.cloudfront.get_tenant(id).await {
            Ok(Some(ObservedTenant { e_tag: Some(tag), .. })) => Ok(tag),
            Ok(Some(_)) => Err(ExternalError::retryable("MissingETag", "CloudFront returned the tenant without an ETag")),
            Ok(None) => Err(ExternalError::not_found("EntityNotFound", "the distribution tenant no longer exists")),
            Err(error) => Err(self.cloudfront_error(&error, CallContext::default()).error),
        }
    }

    /// Reads the tenant by its id, else by name (CloudFront accepts either). Found by name, it
    /// must carry this object's owner tag: `Err(TenantNameTaken)` otherwise, so that a tenant
    /// someone else made is never adopted, updated or deleted.
    async fn observe(
        &self,
        object: &DistributionTenant,
        idempotency_token: &str,
        observation: &TenantObservation,
    ) -> Result<Option<ObservedTenant>, ExternalError> {
        let by_name = observation.id.is_none();
        let identifier = observation.id.clone().unwrap_or_else(|| object.name_any());
        let tenant =
            self.cloudfront.get_tenant(&identifier).await.map_err(|error| self.cloudfront_error(&error, CallContext::default()).error)?;
        match tenant {
            Some(tenant) if by_name && tenant.owner.as_deref() != Some(idempotency_token) => Err(name_taken(&identifier)),
            other => Ok(other),
        }
    }

    /// The spec's certificate must name every domain (seed 001: `CertificateSANMismatch`).
    /// Checked before each create and update, not on every verify: ACM is asked only when
    /// something is about to be written, and its answer is reused for
    /// [`CERTIFICATE_NAMES_TTL`], so a DNS-first create reads it once. A certificate CloudFront
    /// manages was requested for the tenant's domains, so it is not checked (as in seed 001).
    async fn check_coverage(&self, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
        if spec.managed_certificate_request.is_some() {
            return Ok(());
        }
        let Some(arn) = spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()).map(|c| c.arn.as_str()) else {
            return Ok(());
        };
        let names = match self.certificate_names.get_or_load(arn, self.cloudfront.certificate_names(arn)).await {
            Ok(names) => names,
            // A certificate that does not exist will not start to by retrying.
            Err(error) if error.class == blockwork_aws::ErrorClass::NotFound => {
                return Err(ExternalError::terminal("CertificateNotFound", format!("the certificate was not found: {}", error.message)));
            }
            Err(error) => return Err(self.cloudfront_error(&error, CallContext::default()).error),
        };
        check_certificate_coverage(spec, &names).map_err(|mismatch| validation(&mismatch).error)
    }

    /// What the calls of one reconcile act on, derived from the spec once, by `verify`.
    fn desired(&self, spec: &DistributionTenantSpec) -> Desired<D> {
        let dns = match (&spec.dns, &self.dns) {
            (Some(zone), Some(records)) => Some(ManagedDns { records: Arc::clone(records), zone: zone.clone() }),
            _ => None,
        };
        Desired { config: TenantConfig::desired(spec), dns }
    }

    async fn follow_certificate(
        &self,
        spec: &DistributionTenantSpec,
        tenant: &ObservedTenant,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
        generation: Option<i64>,
    ) -> Result<CertificateStep, ExternalError> {
        if spec.managed_certificate_request.is_none() {
            observation.managed_certificate_status = None;
            return Ok(CertificateStep::NotRequested);
        }
        let details =
            self.cloudfront.managed_certificate(&tenant.id).await.map_err(|e| self.cloudfront_error(&e, CallContext::default()).error)?;
        observation.managed_certificate_status = details.as_ref().map(|d| d.status.clone());
        observation.certificate_arn = details.and_then(|d| d.arn);
        let step = certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), generation);
        if let CertificateStep::Failed { status } = step {
            return Err(ExternalError::terminal("CertificateFailed", format!("the managed certificate is {status}")));
        }
        Ok(step)
    }

    /// The connection group's routing endpoint (`None`: the account's default group), cached
    /// for [`ROUTING_ENDPOINT_TTL`]; concurrent lookups of one group share one call.
    async fn routing_endpoint(&self, connection_group_id: Option<&str>) -> Result<String, AwsError> {
        let group = connection_group_id.unwrap_or_default();
        self.routing_endpoints.get_or_load(group, self.cloudfront.routing_endpoint(connection_group_id)).await
    }

    /// Best effort: the CNAME target users (or the DNS step) point the domains at.
    async fn resolve_dns_target(&self, connection_group_id: Option<&str>, observation: &mut TenantObservation) {
        if observation.dns_target.is_some() {
            return;
        }
        match self.routing_endpoint(connection_group_id).await {
            Ok(target) => observation.dns_target = Some(target),
            Err(error) => {
                // Not worth failing the reconcile: the next verify tries again.
                warn!(%error, "could not resolve the tenant's routing endpoint");
            }
        }
    }

    async fn verify_deletion(&self, request: &Request<'_, DistributionTenant>, observation: &mut TenantObservation) -> VerifyOutcome {
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

    /// DNS-first (seed 001): the records must be in sync before the tenant exists. `Ok(true)`
    /// when the tenant may be created now.
    async fn dns_first(
        &self,
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
        let target = match self.routing_endpoint(group).await {
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

    /// Steady state of the records: follows the last change until it is in sync.
    async fn follow_dns(
        &self,
        dns: &ManagedDns<D>,
        object: &DistributionTenant,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
    ) -> Result<(), ExternalError> {
        let generation = object.meta().generation;
        if let Some(change_id) = observation.dns_change_id.clone()
            && !dns_in_sync(object)
        {
            match dns.records.status(&dns.zone, &change_id).await.map_err(|e| self.dns_error(&e, conditions, generation))? {
                DnsStatus::InSync => dns_condition(conditions, true, "DNSReady", "the CNAME records are propagated", generation),
                DnsStatus::Pending => {
                    dns_condition(conditions, false, "DNSPropagating", "waiting for the record change to be in sync", generation);
                }
            }
        }
        Ok(())
    }

    /// What `verify` reports of a tenant it found, once its certificate and the spec's
    /// differences are known.
    fn outcome(&self, tenant: &ObservedTenant, certificate: &CertificateStep, change: Change) -> VerifyOutcome {
        // Not Ready before its certificate is: looked at again at the short interval (the
        // Verifying state's), so the issued ARN is attached within one interval of issuance.
        if let CertificateStep::Pending { status } = certificate
            && change == Change::InSync
        {
            return VerifyOutcome::InProgress(format!("the tenant waits for its managed certificate, which is {status}"));
        }
        match change {
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

    /// The CNAME target the tenant's records point at: as recorded, else resolved again.
    async fn dns_target(&self, spec: &DistributionTenantSpec, observation: &mut TenantObservation) -> Result<String, ExternalError> {
        if let Some(target) = &observation.dns_target {
            return Ok(target.clone());
        }
        let group = spec.connection_group_id.as_deref();
        let context = CallContext { connection_group_lookup: group.is_some(), ..CallContext::default() };
        let target = self.routing_endpoint(group).await.map_err(|e| self.cloudfront_error(&e, context).error)?;
        observation.dns_target = Some(target.clone());
        Ok(target)
    }
}

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
            return self.verify_deletion(request, observation).await.into();
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
        let tenant = match self.observe(object, request.idempotency_token, observation).await {
            Ok(Some(tenant)) => tenant,
            Ok(None) => {
                forget(observation);
                return VerifyOutcome::Missing.into();
            }
            Err(error) => return VerifyOutcome::Error(error).into(),
        };
        record(observation, &tenant);
        self.resolve_dns_target(tenant.config.connection_group_id.as_deref(), observation).await;
        let certificate = match self.follow_certificate(spec, &tenant, observation, conditions, generation).await {
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
        if let Some(dns) = &desired.dns {
            if let Err(error) = self.follow_dns(dns, object, observation, conditions).await {
                return Observed { spec_patch, ..VerifyOutcome::Error(error).into() };
            }
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
        Observed { upkeep, spec_patch, ..self.outcome(&tenant, &certificate, change).into() }
    }

    async fn maintaining(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        conditions: &mut Conditions,
        work: TenantUpkeep,
    ) -> Result<(), ExternalError> {
        let TenantUpkeep::DeleteRecords { domains, target } = work;
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
        if let Err(error) = self.check_before_writing(spec).await {
            return MutateOutcome::Error(error);
        }
        let desired = request.derived;
        if let Some(dns) = &desired.dns {
            match self.dns_first(dns, &desired.domains(), object, observation, conditions).await {
                Ok(true) => {}
                Ok(false) => return MutateOutcome::AwaitingVerification,
                Err(error) => return MutateOutcome::Error(error),
            }
        }
        let write = TenantWrite { config: &desired.config, managed_certificate_request: spec.managed_certificate_request.as_ref() };
        let context = CallContext { creating: true, cloudfront_validates: cloudfront_validates(spec), ..CallContext::default() };
        match self.cloudfront.create_tenant(&name, request.idempotency_token, write).await {
            Ok(tenant) => {
                record(observation, &tenant);
                certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), object.meta().generation);
                // A Deployed tenant is Ready at once: the target must be in this status write.
                self.resolve_dns_target(tenant.config.connection_group_id.as_deref(), observation).await;
                settled(&tenant, spec, &desired.config, observation)
            }
            // The tenant name is taken: by our own create that crashed before its status write
            // (verify missed it only if it landed after the read), so adopt it by name.
            Err(error) if error.code.as_deref() == Some("EntityAlreadyExists") => match self.cloudfront.get_tenant(&name).await {
                Ok(Some(tenant)) if tenant.owner.as_deref() != Some(request.idempotency_token) => MutateOutcome::Error(name_taken(&name)),
                Ok(Some(tenant)) => {
                    record(observation, &tenant);
                    MutateOutcome::AwaitingVerification
                }
                Ok(None) => MutateOutcome::Error(self.cloudfront_error(&error, context).error),
                Err(error) => MutateOutcome::Error(self.cloudfront_error(&error, CallContext::default()).error),
            },
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
        if let Err(error) = self.check_before_writing(spec).await {
            return MutateOutcome::Error(error);
        }
        let Some(id) = observation.id.clone() else {
            return MutateOutcome::Error(ExternalError::retryable("NotObserved", "the tenant's id is not known yet"));
        };
        let desired = request.derived;
        if let Some(dns) = &desired.dns {
            // Seed 001: upsert the records of the current domains, then push the tenant; records
            // of removed domains go once the tenant no longer has them (`TenantUpkeep`).
            let generation = object.meta().generation;
            observation.dns_target = None;
            let target = match self.dns_target(spec, observation).await {
                Ok(target) => target,
                Err(error) => return MutateOutcome::Error(error),
            };
            let domains = desired.domains();
            match dns.records.upsert(&dns.zone, &domains, &target).await {
                Ok(change) => {
                    upserted(observation, change, &domains);
                    dns_condition(conditions, false, "DNSRecordCreating", "the CNAME records were submitted", generation);
                }
                Err(error) => return MutateOutcome::Error(self.dns_error(&error, conditions, generation)),
            }
        }
        // Each request makes CloudFront request a new certificate: send it only when it is new.
        let request = new_certificate_request(spec, request.spec_change.last_applied.as_ref());
        let write = TenantWrite { config: &desired.config, managed_certificate_request: request };
        match self.update_with_etag(&id, observation.e_tag.clone(), write).await {
            Ok(tenant) => {
                // The connection group may have changed: the next verify resolves the target again
                // (with DNS managed, it was resolved for the upsert above).
                if desired.dns.is_none() {
                    observation.dns_target = None;
                }
                record(observation, &tenant);
                certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), object.meta().generation);
                settled(&tenant, spec, &desired.config, observation)
            }
            Err(error) => MutateOutcome::Error(error),
        }
    }

    async fn deleting(
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
        let desired = self.desired(&request.object.spec);
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

    /// `spec.driftPolicy`, over the operator's `--drift-policy` (the annotation beats both).
    fn asks(&self, object: &DistributionTenant) -> Asks {
        Asks { drift_policy: object.spec.drift_policy.map(DriftPolicy::from), dependencies: Vec::new() }
    }
}

/// What `verify` derives from the spec once per reconcile, and the runtime hands to the calls
/// after it (`ExternalResource::Derived`): they act on the same value instead of deriving it again.
pub struct Desired<D> {
    /// The tenant configuration the spec asks for.
    config: TenantConfig,
    /// Where the tenant's CNAME records are managed: `None` without `spec.dns` (or without DNS
    /// management in this controller, which `verify` reports as an error: no call follows).
    dns: Option<ManagedDns<D>>,
}

impl<D> Desired<D> {
    /// The spec's domains in their normal form, each once.
    fn domains(&self) -> Vec<String> {
        self.config.domains.iter().cloned().collect()
    }
}

/// The records' hosted zone (`spec.dns`) and the DNS implementation that writes them.
struct ManagedDns<D> {
    records: Arc<D>,
    zone: DnsConfig,
}

/// The writes `verify` finds needed, which the runtime allows or holds
/// (`blockwork_runtime::machine::upkeep_runs`) and `maintain` does.
#[derive(Debug)]
pub enum TenantUpkeep {
    /// The CNAME records of domains that left the spec, pointing at `target`: deleted once the
    /// tenant no longer serves them, finishing the update that removed them (so it takes the
    /// update permission). A read-only tenant keeps them.
    DeleteRecords { domains: Vec<String>, target: String },
}

const TENANT_NAME_TAKEN: &str = "TenantNameTaken";
const DISTRIBUTION_NOT_FOUND: &str = "DistributionNotFound";

fn name_taken(name: &str) -> ExternalError {
    ExternalError::terminal(
        TENANT_NAME_TAKEN,
        format!(
            "a distribution tenant named {name} exists that this object did not create; it is left alone (rename the object or delete that tenant)"
        ),
    )
}

/// Done once CloudFront deployed the tenant and, when it manages the certificate, the tenant
/// uses the one named in the spec; otherwise `verify` follows up at the short interval (a
/// managed certificate is requested by the write, and issued minutes later).
fn settled(
    tenant: &ObservedTenant,
    spec: &DistributionTenantSpec,
    desired: &TenantConfig,
    observation: &TenantObservation,
) -> MutateOutcome {
    let spec_certificate = spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()).map(|c| c.arn.as_str());
    let certificate_settled = spec.managed_certificate_request.is_none()
        || spec_certificate.is_some_and(|arn| tenant.config.certificate_arn.as_deref() == Some(arn));
    // Records of domains the spec no longer has go after a verify (`TenantUpkeep`), at the short
    // interval while not Ready; Ready at once, they would wait for the Ready interval, an hour
    // (found by the reliability campaign, issue 15).
    let records_settled = spec.dns.is_none() || observation.dns_records.iter().all(|d| desired.domains.contains(d));
    if tenant.status.as_deref() == Some(DEPLOYED) && certificate_settled && records_settled {
        MutateOutcome::Succeeded
    } else {
        MutateOutcome::AwaitingVerification
    }
}

fn observed(tenant: &ObservedTenant) -> lifecycle::Observed<'_> {
    lifecycle::Observed { enabled: tenant.config.enabled, status: tenant.status.as_deref() }
}

/// Where the managed certificate stands, from its status as last read and the certificate the
/// tenant uses now (`attached`); sets `CertificateReady`. After a write too, so that the
/// condition says Attached without waiting for the next verify.
fn certificate_progress(
    spec: &DistributionTenantSpec,
    observation: &mut TenantObservation,
    conditions: &mut Conditions,
    attached: Option<&str>,
    generation: Option<i64>,
) -> CertificateStep {
    let spec_arn = spec.customizations.as_ref().and_then(|c| c.certificate.as_ref()).map(|c| c.arn.as_str());
    let details = observation.managed_certificate_status.as_deref().map(|status| (status, observation.certificate_arn.as_deref()));
    let step = certificate_step(spec.managed_certificate_request.is_some(), details, spec_arn, attached);
    if let Some((ready, reason, message)) = step.condition() {
        conditions.set(condition(CERTIFICATE_READY, ready, reason, &message, generation));
    }
    step
}

fn record(observation: &mut TenantObservation, tenant: &ObservedTenant) {
    observation.id = Some(tenant.id.clone());
    observation.arn.clone_from(&tenant.arn);
    observation.e_tag.clone_from(&tenant.e_tag);
    observation.distribution_tenant_status.clone_from(&tenant.status);
}

/// The tenant is gone: what described it goes too (DNS fields stay until the records go).
fn forget(observation: &mut TenantObservation) {
    observation.id = None;
    observation.arn = None;
    observation.e_tag = None;
    observation.distribution_tenant_status = None;
}

fn dns_records_remain(spec: &DistributionTenantSpec, observation: &TenantObservation) -> bool {
    spec.dns.is_some() && !observation.dns_records.is_empty()
}

/// The spec's domains in their normal form (a trailing dot names the same record), each once.
fn domains(spec: &DistributionTenantSpec) -> Vec<String> {
    TenantConfig::desired(spec).domains.into_iter().collect()
}

/// The spec's managed-certificate request if the last applied spec did not carry the same one.
fn new_certificate_request<'a>(
    spec: &'a DistributionTenantSpec,
    last_applied: Option<&DistributionTenantSpec>,
) -> Option<&'a ManagedCertificateRequest> {
    let requested = spec.managed_certificate_request.as_ref()?;
    let applied = last_applied.and_then(|applied| applied.managed_certificate_request.as_ref());
    (applied != Some(requested)).then_some(requested)
}

fn cloudfront_validates(spec: &DistributionTenantSpec) -> bool {
    spec.managed_certificate_request.as_ref().is_some_and(|r| r.validation_token_host == ValidationTokenHost::Cloudfront)
}

fn dns_condition(conditions: &mut Conditions, ready: bool, reason: &str, message: &str, generation: Option<i64>) {
    conditions.set(condition(DNS_READY, ready, reason, message, generation));
}

/// Whether the object's status says its records are in sync (then the change is not polled again).
fn dns_in_sync(object: &DistributionTenant) -> bool {
    object.status.as_ref().and_then(|s| s.condition(DNS_READY)).is_some_and(|c| c.status == "True" && c.reason == "DNSReady")
}

/// The domains whose records a create under the create-pending marker may have written: its
/// status write (which lists them in `dnsRecords`) may have been refused or never made. They are
/// owned like written ones; deleting one that was never written finds nothing to delete, and a
/// record is deleted only while it still points at the tenant's routing endpoint. The tenant
/// itself needs no such care: it is found again by its name and owner tag.
fn marked_dns_domains(request: &Request<'_, DistributionTenant>) -> Vec<String> {
    request
        .create_pending
        .and_then(|marker| marker.spec.as_deref())
        .and_then(|spec| serde_json::from_str::<DistributionTenantSpec>(spec).ok())
        .filter(|spec| spec.dns.is_some())
        .map(|spec| domains(&spec))
        .unwrap_or_default()
}

/// Records a successful upsert of `domains`: owned from now on, and what `change` wrote.
fn upserted(observation: &mut TenantObservation, change: DnsChange, domains: &[String]) {
    own_records(observation, domains);
    observation.dns_change_id = change.change_id;
    observation.dns_change_domains = domains.to_vec();
}

/// Adds `domains` to the records this operator owns, keeping ones not yet cleaned up.
fn own_records(observation: &mut TenantObservation, domains: &[String]) {
    for domain in domains {
        if !observation.dns_records.contains(domain) {
            observation.dns_records.push(domain.clone());
        }
    }
    observation.dns_records.sort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TransparencyPreference;

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
        let tenant = ObservedTenant {
            id: "T1".to_owned(),
            owner: None,
            arn: None,
            e_tag: None,
            status: Some(DEPLOYED.to_owned()),
            config: TenantConfig::desired(&spec),
        };
        let mut observation = TenantObservation {
            dns_records: vec!["api.example.com".to_owned(), "www.example.com".to_owned()],
            ..TenantObservation::default()
        };
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation), MutateOutcome::AwaitingVerification);
        observation.dns_records = vec!["www.example.com".to_owned()];
        assert_eq!(settled(&tenant, &spec, &tenant.config, &observation), MutateOutcome::Succeeded);
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
