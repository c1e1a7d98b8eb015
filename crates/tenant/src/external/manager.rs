//! The tenant manager: the CloudFront and ACM clients, the DNS implementation, the mappings of
//! namespaces to AWS identities, the caches (per identity: distributions, certificates and
//! connection groups are the account's), and the reads (and ETag-guarded writes) every call
//! shares, each as the tenant's namespace's principal (ADR 0014).

use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::cache::Cached;
use blockwork_aws::{Aws, AwsError, Principal};
use blockwork_identity::placement::{Placement, placement};
use blockwork_identity::{Identities, Refusal, tenant_zone};
use blockwork_runtime::{Conditions, ExternalError, Publisher};
use kube::ResourceExt;
use tracing::warn;

use crate::api::{DistributionTenant, DistributionTenantSpec, TenantObservation};
use crate::classify::{CallContext, Category, Classified, classify_cloudfront, validation};
use crate::cloudfront::{Acm, CloudFront, ObservedTenant, TenantWrite};
use crate::diff::TenantConfig;
use crate::dns::{DnsRecords, DnsZone};
use crate::lifecycle::CertificateStep;
use crate::metrics::TenantMetrics;
use crate::ownership::Claimant;
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

/// How long a tenant CloudFront just said does not exist is taken as missing without asking
/// again: the look right after the create-pending marker is written (a second later), which no
/// create can have preceded — a create runs only under the marker, which this process wrote after
/// that answer, and one controller process acts at a time (leader election; a new one starts with
/// nothing remembered). This process forgets it before any create of that tenant.
pub const MISSING_TTL: Duration = Duration::from_secs(5);

/// Distributions and certificates remembered at most; each entry is a few hundred bytes.
const CACHE_ENTRIES: u64 = 1000;

pub struct TenantManager<C, D> {
    pub(super) cloudfront: C,
    /// The DNS implementation for tenants with `spec.dns`; `None`: such tenants fail with
    /// `DNSError` (DNS management is not available in this build). Shared with each reconcile's
    /// [`Desired`].
    dns: Option<Arc<D>>,
    pub(super) metrics: Arc<TenantMetrics>,
    /// Which identity each namespace acts as, and where its records may go.
    identities: Arc<Identities>,
    /// Tells the account an identity acts in (to hold a tenant whose mapping moved it).
    aws: Arc<Aws>,
    /// Tells what a tenant released while held by a mapping change leaves in AWS.
    pub(super) events: Publisher,
    /// By identity and distribution id; a distribution that does not exist is not remembered.
    distributions: Cached<(String, String), DistributionRules>,
    /// By identity and certificate ARN: its domain name and subject alternative names.
    certificate_names: Cached<(String, String), Vec<String>>,
    /// By identity and connection group id (`""`: the account's default group): its routing
    /// endpoint.
    routing_endpoints: Cached<(String, String), String>,
    /// By identity and the name or id a tenant was read by: tenants found missing within
    /// [`MISSING_TTL`].
    missing: Cached<(String, String), ()>,
}

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    /// `aws`: the process's layer, whose metrics count the caches' hits and misses, and which
    /// tells the account an identity acts in; `client`: where events go.
    pub fn new(
        cloudfront: C,
        dns: Option<D>,
        identities: Arc<Identities>,
        metrics: Arc<TenantMetrics>,
        aws: &Arc<Aws>,
        client: kube::Client,
    ) -> Self {
        let aws_metrics = aws.metrics();
        Self {
            cloudfront,
            dns: dns.map(Arc::new),
            metrics,
            identities,
            aws: Arc::clone(aws),
            events: Publisher::new(client, format!("blockwork-{}", crate::CONTROLLER)),
            distributions: Cached::new(aws_metrics, crate::CONTROLLER, "cloudfront-distribution", DISTRIBUTION_TTL, CACHE_ENTRIES),
            certificate_names: Cached::new(aws_metrics, crate::CONTROLLER, "acm-certificate-names", CERTIFICATE_NAMES_TTL, CACHE_ENTRIES),
            routing_endpoints: Cached::new(
                aws_metrics,
                crate::CONTROLLER,
                "cloudfront-routing-endpoint",
                ROUTING_ENDPOINT_TTL,
                CACHE_ENTRIES,
            ),
            missing: Cached::new(aws_metrics, crate::CONTROLLER, "cloudfront-tenant-missing", MISSING_TTL, CACHE_ENTRIES),
        }
    }

    /// Everything checked before a write beyond the spec alone: the spec against its
    /// distribution (which must exist), and the certificate's coverage of the domains. The spec
    /// alone is validated once per reconcile, by `verify`: the runtime calls `create` and `update`
    /// only after `verify` of the same reconcile, and it returns `Missing` or `UpdateRequired`
    /// only for a valid spec.
    pub(super) async fn check_before_writing(&self, principal: &Principal, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
        let distribution = self.distribution(principal, &spec.distribution_id).await?;
        validate_against(spec, &distribution).map_err(|invalid| validation(&invalid).error)?;
        self.check_coverage(principal, spec).await
    }

    /// The distribution's rules, cached for [`DISTRIBUTION_TTL`]; concurrent reconciles of
    /// tenants of one distribution share one read, and while it fails they are told so at once
    /// (`SharedCallFailing`, one status write each). Failures are not cached.
    pub(super) async fn distribution(&self, principal: &Principal, id: &str) -> Result<DistributionRules, ExternalError> {
        let what = || format!("the CloudFront distribution {id} as {principal}");
        let read = async {
            self.cloudfront.distribution(principal, id).await?.ok_or_else(|| AwsError {
                operation: "GetDistribution",
                code: Some(DISTRIBUTION_NOT_FOUND.to_owned()),
                class: blockwork_aws::ErrorClass::NotFound,
                message: format!("distribution {id} does not exist"),
            })
        };
        match self.distributions.get_or_load_shared(&(principal.identity().to_owned(), id.to_owned()), what, read).await {
            Ok(rules) => Ok(rules),
            // Not counted: like any invalid spec, it needs the user, not AWS.
            Err(error) if error.class == blockwork_aws::ErrorClass::NotFound => Err(ExternalError::terminal(
                DISTRIBUTION_NOT_FOUND,
                format!("distribution {id} does not exist: check spec.distributionId (nothing was written for it)"),
            )),
            Err(error) => Err(self.cloudfront_error(&error, CallContext::default()).error),
        }
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
        principal: &Principal,
        id: &str,
        e_tag: Option<String>,
        write: TenantWrite<'_>,
    ) -> Result<ObservedTenant, ExternalError> {
        let mut e_tag = e_tag;
        for _ in 0..ETAG_ATTEMPTS {
            let current = match e_tag.take() {
                Some(tag) => tag,
                None => self.refetch_etag(principal, id).await?,
            };
            match self.cloudfront.update_tenant(principal, id, &current, write).await {
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

    /// Forgets that the tenant `name` was missing: it is about to be created.
    pub(super) async fn creating_tenant(&self, principal: &Principal, name: &str) {
        self.missing.invalidate(&(principal.identity().to_owned(), name.to_owned())).await;
    }

    pub(super) async fn refetch_etag(&self, principal: &Principal, id: &str) -> Result<String, ExternalError> {
        match self.cloudfront.get_tenant(principal, id).await {
            Ok(Some(ObservedTenant { e_tag: Some(tag), .. })) => Ok(tag),
            Ok(Some(_)) => Err(ExternalError::retryable("MissingETag", "CloudFront returned the tenant without an ETag")),
            Ok(None) => Err(ExternalError::not_found("EntityNotFound", "the distribution tenant no longer exists")),
            Err(error) => Err(self.cloudfront_error(&error, CallContext::default()).error),
        }
    }

    /// Reads the tenant by its id once known, else by the id `spec.adopt` names, else by name
    /// (CloudFront accepts either). Found by name, it must carry this object's ownership tags:
    /// `Err(TenantNameTaken)` otherwise, so that a tenant someone else made is never updated or
    /// deleted (adopting one takes `spec.adopt`).
    pub(super) async fn observe(
        &self,
        principal: &Principal,
        object: &DistributionTenant,
        claimant: Claimant<'_>,
        observation: &TenantObservation,
    ) -> Result<Option<ObservedTenant>, ExternalError> {
        let adopt = object.spec.adopt.as_ref().map(|adopt| adopt.tenant_id.clone());
        let by_name = observation.id.is_none() && adopt.is_none();
        let identifier = observation.id.clone().or(adopt).unwrap_or_else(|| object.name_any());
        let key = (principal.identity().to_owned(), identifier);
        if self.missing.get(&key).await.is_some() {
            return Ok(None);
        }
        let tenant = self
            .cloudfront
            .get_tenant(principal, &key.1)
            .await
            .map_err(|error| self.cloudfront_error(&error, CallContext::default()).error)?;
        if tenant.is_none() {
            self.missing.insert(key, ()).await;
        }
        match tenant.as_ref().filter(|_| by_name).and_then(|tenant| super::adoption::not_ours_by_name(tenant, claimant)) {
            Some(error) => Err(error),
            None => Ok(tenant),
        }
    }

    /// The spec's certificate must name every domain (seed 001: `CertificateSANMismatch`).
    /// Checked before each create and update, not on every verify: ACM is asked only when
    /// something is about to be written, and its answer is reused for
    /// [`CERTIFICATE_NAMES_TTL`], so a DNS-first create reads it once. A certificate CloudFront
    /// manages was requested for the tenant's domains, so it is not checked (as in seed 001).
    pub(super) async fn check_coverage(&self, principal: &Principal, spec: &DistributionTenantSpec) -> Result<(), ExternalError> {
        if spec.managed_certificate_request.is_some() {
            return Ok(());
        }
        let Some(arn) = spec.certificate_arn() else {
            return Ok(());
        };
        let key = (principal.identity().to_owned(), arn.to_owned());
        let what = || format!("the ACM certificate {} as {principal}", blockwork_aws::mask_accounts(arn));
        let names = match self.certificate_names.get_or_load_shared(&key, what, self.cloudfront.certificate_names(principal, arn)).await {
            Ok(names) => names,
            // A certificate that does not exist will not start to by retrying.
            Err(error) if error.class == blockwork_aws::ErrorClass::NotFound => {
                return Err(ExternalError::terminal("CertificateNotFound", format!("the certificate was not found: {}", error.message)));
            }
            Err(error) => return Err(self.cloudfront_error(&error, CallContext::default()).error),
        };
        check_certificate_coverage(spec, &names).map_err(|mismatch| validation(&mismatch).error)
    }

    /// The name of the AwsIdentity `object`'s namespace acts as (`operator` when unmapped); `""`
    /// for a namespace refused, which makes no call.
    pub(super) async fn identity_of(&self, object: &DistributionTenant) -> String {
        let grant = self.identities.grant(&object.namespace().unwrap_or_default(), &[]).await;
        grant.map(|grant| grant.identity.to_string()).unwrap_or_default()
    }

    /// What the calls of one reconcile act on, derived from the object once, by `verify`: its
    /// namespace's identity and, with `spec.dns`, the zone as the grant reaches it. A refusal —
    /// no identity for the namespace, or `spec.dns` outside its grant — comes back with nothing
    /// to act on, before any AWS call.
    pub(super) async fn desired(
        &self,
        object: &DistributionTenant,
        observation: &TenantObservation,
    ) -> (Desired<D>, Option<ExternalError>) {
        let spec = &object.spec;
        let config = TenantConfig::desired(spec);
        let grant = match self.identities.grant(&object.namespace().unwrap_or_default(), &[]).await {
            Ok(grant) => grant,
            Err(refusal) => {
                return (Desired { principal: Principal::operator(), identity: None, config, dns: None }, Some(refused(&refusal)));
            }
        };
        let mut desired = Desired { principal: grant.principal.clone(), identity: Some(grant.identity.to_string()), config, dns: None };
        if let Some(moved) = self.moved(&grant, observation).await {
            // The status keeps naming the identity the tenant was made with.
            desired.identity = None;
            return (desired, Some(moved));
        }
        if let (Some(zone), Some(records)) = (&spec.dns, &self.dns) {
            let domains = desired.domains();
            match tenant_zone(&grant, &zone.hosted_zone_id, zone.assume_role_arn.as_deref(), &domains) {
                Ok(granted) => {
                    let zone = DnsZone { config: zone.clone(), principal: granted.principal };
                    desired.dns = Some(ManagedDns { records: Arc::clone(records), zone });
                }
                Err(refusal) => return (desired, Some(ExternalError::terminal(NOT_GRANTED, refusal.to_string()))),
            }
        }
        (desired, None)
    }

    /// Why the tenant is held, if its namespace's mapping moved it to another account than the
    /// one its tenant is in (its ARN names it); nothing is compared for a tenant not made yet,
    /// or acting as the operator's own identity as before.
    async fn moved(&self, grant: &blockwork_identity::Grant, observation: &TenantObservation) -> Option<ExternalError> {
        let (before, now) = (observation.aws_identity.as_deref(), &*grant.identity);
        let same = before == Some(now);
        let held: Vec<&str> = observation.arn.iter().map(String::as_str).collect();
        let current = match held.is_empty() || (same && grant.principal.role().is_none()) {
            true => None,
            false => self.aws.account_id(crate::CONTROLLER, &grant.principal).await,
        };
        match placement(held.iter().copied(), current.as_deref()) {
            Placement::Elsewhere => {
                Some(blockwork_identity::placement::held("DistributionTenant", "its tenant", before, &grant.describe()))
            }
            Placement::Unknown if !same => Some(ExternalError::retryable(
                "AwsIdentityAccountUnknown",
                format!(
                    "the namespace now acts as {}, whose account could not be told yet (STS GetCallerIdentity); retried",
                    grant.describe()
                ),
            )),
            Placement::Here | Placement::Unknown => None,
        }
    }

    pub(super) async fn follow_certificate(
        &self,
        principal: &Principal,
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
        let details = self
            .cloudfront
            .managed_certificate(principal, &tenant.id)
            .await
            .map_err(|e| self.cloudfront_error(&e, CallContext::default()).error)?;
        observation.managed_certificate_status = details.as_ref().map(|d| d.status.clone());
        observation.certificate_arn = details.and_then(|d| d.arn);
        let step = certificate_progress(spec, observation, conditions, tenant.config.certificate_arn.as_deref(), generation);
        if let CertificateStep::Failed { status } = step {
            return Err(ExternalError::terminal("CertificateFailed", format!("the managed certificate is {status}")));
        }
        Ok(step)
    }

    /// The connection group's routing endpoint (`None`: the account's default group), cached
    /// for [`ROUTING_ENDPOINT_TTL`]; concurrent lookups of one group share one call, and are
    /// told at once while it fails.
    pub(super) async fn routing_endpoint(&self, principal: &Principal, connection_group_id: Option<&str>) -> Result<String, AwsError> {
        let key = (principal.identity().to_owned(), connection_group_id.unwrap_or_default().to_owned());
        let what = || match connection_group_id {
            Some(group) => format!("the routing endpoint of connection group {group} as {principal}"),
            None => format!("the routing endpoint of the default connection group of {principal}"),
        };
        self.routing_endpoints.get_or_load_shared(&key, what, self.cloudfront.routing_endpoint(principal, connection_group_id)).await
    }

    /// Best effort: the CNAME target users (or the DNS step) point the domains at.
    pub(super) async fn resolve_dns_target(
        &self,
        principal: &Principal,
        connection_group_id: Option<&str>,
        observation: &mut TenantObservation,
    ) {
        if observation.dns_target.is_some() {
            return;
        }
        match self.routing_endpoint(principal, connection_group_id).await {
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
    /// Who the calls act as: the namespace's identity.
    pub(super) principal: Principal,
    /// Its name (`operator`: the operator's own), for the status; `None` when refused.
    pub(super) identity: Option<String>,
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

/// The records' hosted zone (`spec.dns`, reached as the grant says) and the DNS implementation
/// that writes them.
pub(super) struct ManagedDns<D> {
    pub(super) records: Arc<D>,
    pub(super) zone: DnsZone,
}

/// The writes `verify` finds needed, which the runtime allows or holds
/// (`blockwork_runtime::machine::upkeep_runs`) and `maintain` does.
#[derive(Debug)]
pub enum TenantUpkeep {
    /// The CNAME records of domains that left the spec, pointing at `target`: deleted once the
    /// tenant no longer serves them, finishing the update that removed them (so it takes the
    /// update permission). A read-only tenant keeps them.
    DeleteRecords { domains: Vec<String>, target: String },
    /// The ownership tags on the tenant (`arn`) `spec.adopt` names, which matches the spec: the
    /// one write of an adoption, which finishes the object's making of its tenant (so it takes
    /// the create permission, and the Report and Suspend drift policies allow it).
    Adopt { arn: String },
}

pub(super) const TENANT_NAME_TAKEN: &str = "TenantNameTaken";

const DISTRIBUTION_NOT_FOUND: &str = "DistributionNotFound";

/// `spec.dns` names a zone, role or domain the namespace's grant does not give.
pub(super) const NOT_GRANTED: &str = "NotGranted";

/// A namespace's refusal as the runtime sees it: needs a person, except while the mappings are
/// being read.
fn refused(refusal: &Refusal) -> ExternalError {
    let class = if refusal.is_transient() { blockwork_runtime::ErrorClass::Retryable } else { blockwork_runtime::ErrorClass::Terminal };
    ExternalError::new(class, refusal.reason(), refusal.to_string())
}

pub(super) fn name_taken(name: &str, id: &str) -> ExternalError {
    ExternalError::terminal(
        TENANT_NAME_TAKEN,
        format!(
            "a distribution tenant named {name} (id {id}) exists that this object did not create; it is left alone: to manage it with this object, set spec.adopt.tenantId to {id} (docs/adopting.md), or rename the object"
        ),
    )
}
