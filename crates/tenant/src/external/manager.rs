//! The tenant manager: the CloudFront and ACM clients, the DNS implementation, the caches, and
//! the reads (and ETag-guarded writes) every call shares.

use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::cache::Cached;
use blockwork_aws::{AwsError, AwsMetrics};
use blockwork_runtime::{Conditions, ExternalError};
use kube::ResourceExt;
use tracing::warn;

use crate::api::{DistributionTenant, DistributionTenantSpec, DnsConfig, TenantObservation};
use crate::classify::{CallContext, Category, Classified, classify_cloudfront, validation};
use crate::cloudfront::{Acm, CloudFront, ObservedTenant, TenantWrite};
use crate::diff::TenantConfig;
use crate::dns::DnsRecords;
use crate::lifecycle::CertificateStep;
use crate::metrics::TenantMetrics;
use crate::validate::{DistributionRules, check_certificate_coverage, validate_against};

use super::decisions::certificate_progress;

/// How often a stale ETag is re-read and the write retried within one call before the runtime's
/// backoff takes over: another writer racing us that often is not a transient race any more.
pub(super) const ETAG_ATTEMPTS: usize = 3;

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
    pub(super) cloudfront: C,
    /// The DNS implementation for tenants with `spec.dns`; `None`: such tenants fail with
    /// `DNSError` (DNS management is not available in this build). Shared with each reconcile's
    /// [`Desired`].
    dns: Option<Arc<D>>,
    pub(super) metrics: Arc<TenantMetrics>,
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
    pub(super) async fn check_before_writing(&self, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
        let distribution = self.distribution(&spec.distribution_id).await?;
        validate_against(spec, &distribution).map_err(|invalid| validation(&invalid).error)?;
        self.check_coverage(spec).await
    }

    /// The distribution's rules, cached for [`DISTRIBUTION_TTL`]; concurrent reconciles of
    /// tenants of one distribution share one read. Failures are not cached.
    pub(super) async fn distribution(&self, id: &str) -> Result<DistributionRules, ExternalError> {
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
    pub(super) fn cloudfront_error(&self, error: &AwsError, context: CallContext) -> Classified {
        let classified = classify_cloudfront(error, context);
        if let Some(error_type) = classified.error_type {
            self.metrics.error(error_type);
        }
        classified
    }

    /// Writes the tenant, re-reading it and retrying at once when the ETag is stale (seed 001:
    /// ETag mismatch → re-fetch and retry, not counted as an error).
    pub(super) async fn update_with_etag(
        &self,
        id: &str,
        e_tag: Option<String>,
        write: TenantWrite<'_>,
    ) -> Result<ObservedTenant, ExternalError> {
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

    pub(super) async fn refetch_etag(&self, id: &str) -> Result<String, ExternalError> {
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
    pub(super) async fn observe(
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
    pub(super) async fn check_coverage(&self, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
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
    pub(super) fn desired(&self, spec: &DistributionTenantSpec) -> Desired<D> {
        let dns = match (&spec.dns, &self.dns) {
            (Some(zone), Some(records)) => Some(ManagedDns { records: Arc::clone(records), zone: zone.clone() }),
            _ => None,
        };
        Desired { config: TenantConfig::desired(spec), dns }
    }

    pub(super) async fn follow_certificate(
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
    pub(super) async fn routing_endpoint(&self, connection_group_id: Option<&str>) -> Result<String, AwsError> {
        let group = connection_group_id.unwrap_or_default();
        self.routing_endpoints.get_or_load(group, self.cloudfront.routing_endpoint(connection_group_id)).await
    }

    /// Best effort: the CNAME target users (or the DNS step) point the domains at.
    pub(super) async fn resolve_dns_target(&self, connection_group_id: Option<&str>, observation: &mut TenantObservation) {
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
}

/// What `verify` derives from the spec once per reconcile, and the runtime hands to the calls
/// after it (`ExternalResource::Derived`): they act on the same value instead of deriving it again.
pub struct Desired<D> {
    /// The tenant configuration the spec asks for.
    pub(super) config: TenantConfig,
    /// Where the tenant's CNAME records are managed: `None` without `spec.dns` (or without DNS
    /// management in this controller, which `verify` reports as an error: no call follows).
    pub(super) dns: Option<ManagedDns<D>>,
}

impl<D> Desired<D> {
    /// The spec's domains in their normal form, each once.
    pub(super) fn domains(&self) -> Vec<String> {
        self.config.domains.iter().cloned().collect()
    }
}

/// The records' hosted zone (`spec.dns`) and the DNS implementation that writes them.
pub(super) struct ManagedDns<D> {
    pub(super) records: Arc<D>,
    pub(super) zone: DnsConfig,
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

pub(super) const TENANT_NAME_TAKEN: &str = "TenantNameTaken";

const DISTRIBUTION_NOT_FOUND: &str = "DistributionNotFound";

pub(super) fn name_taken(name: &str) -> ExternalError {
    ExternalError::terminal(
        TENANT_NAME_TAKEN,
        format!(
            "a distribution tenant named {name} exists that this object did not create; it is left alone (rename the object or delete that tenant)"
        ),
    )
}
