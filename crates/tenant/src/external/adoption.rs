//! Adoption and handover (issue 31): what `verify` does with a tenant it read, by whose it is
//! ([`crate::ownership`] decides), and the one write of an adoption, the ownership tags.
//!
//! - A tenant `spec.adopt.tenantId` names is read by that id in the namespace's account (never
//!   created: one that is not there is `AdoptionRefused`). If it matches the spec, the upkeep
//!   [`TenantUpkeep::Adopt`] tags it as this object's; the next verify reads it again and goes
//!   on as for a tenant the object created. If not, `AdoptionMismatch` names every difference
//!   and nothing is written.
//! - The CNAME records of an adopted tenant's domains (with `spec.dns`) are shared: this object
//!   may write them later (a spec change upserts every current domain), but never deletes them.
//! - A tenant the object held and whose tags now name another object is `OwnershipLost`, for
//!   good: `verify` fails before any write is planned, one Warning event says so, and deletion
//!   releases the object without deleting anything (`deletion.rs`).

use blockwork_runtime::{ExternalError, Observed, Purpose, Request, Upkeep, VerifyOutcome};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::api::{DistributionTenant, DistributionTenantSpec, TenantObservation};
use crate::classify::CallContext;
use crate::cloudfront::{Acm, CloudFront, ObservedTenant};
use crate::diff::TenantConfig;
use crate::dns::DnsRecords;
use blockwork_aws::ownership::{ADOPTION_MISMATCH, ADOPTION_REFUSED, OWNED_ELSEWHERE, OWNERSHIP_LOST, Owner, taken_by};

use crate::ownership::{Claim, Claimant, Differences, Held, claim, identity_differences};

use super::manager::{Desired, TenantManager, TenantUpkeep};

/// The object as the ownership tags name it.
pub(super) fn claimant<'a, D>(request: &'a Request<'_, DistributionTenant, D>) -> Claimant<'a> {
    let meta = request.object.meta();
    let owner = Owner {
        uid: meta.uid.as_deref().unwrap_or_default(),
        namespace: meta.namespace.as_deref().unwrap_or_default(),
        name: meta.name.as_deref().unwrap_or_default(),
    };
    Claimant { owner, token: request.idempotency_token }
}

/// Why a tenant found by name is not this object's to act on: `None` when it is.
pub(super) fn not_ours_by_name(tenant: &ObservedTenant, claimant: Claimant<'_>) -> Option<ExternalError> {
    let finding = Held { held: false, lost: false, adopting: false };
    match claim(&tenant.tags, claimant, finding, Differences::default()) {
        Claim::OwnedElsewhere { by } => Some(owned_elsewhere(claimant.owner.name, &tenant.id, &by)),
        Claim::Owned => None,
        _ => Some(super::manager::name_taken(claimant.owner.name, &tenant.id)),
    }
}

/// Whether `error` says the tenant found by name is someone else's (nothing of this object's).
pub(super) fn someone_elses(error: &ExternalError) -> bool {
    [super::manager::TENANT_NAME_TAKEN, OWNED_ELSEWHERE].contains(&error.reason.as_str())
}

fn owned_elsewhere(name: &str, id: &str, by: &str) -> ExternalError {
    ExternalError::terminal(
        OWNED_ELSEWHERE,
        format!(
            "a distribution tenant named {name} (id {id}) exists, owned by {by} in another cluster (the same manifest elsewhere): nothing was created or changed; to move it to this object, set spec.adopt.tenantId to {id} (docs/adopting.md)"
        ),
    )
}

/// Whether `spec.adopt` still decides what happens: set, and not adopted yet.
pub(super) fn still_adopting(spec: &DistributionTenantSpec, observation: &TenantObservation) -> bool {
    spec.adopt.is_some() && !observation.adopted
}

/// What the object does with `tenant`, as read by this verify.
pub(super) fn claim_of(
    request: &Request<'_, DistributionTenant>,
    desired: &TenantConfig,
    tenant: &ObservedTenant,
    observation: &TenantObservation,
) -> Claim {
    let spec = &request.object.spec;
    let adopting = spec.adopt.as_ref().is_some_and(|adopt| adopt.tenant_id == tenant.id);
    // An object without `spec.adopt` only records the id of a tenant it created (or found by
    // name with its tags); one with it, only once adopted.
    let held = observation.adopted || (spec.adopt.is_none() && observation.id.is_some());
    let held = Held { held, lost: observation.ownership_lost, adopting };
    let differences = Differences {
        identity: identity_differences(&request.object.name_any(), tenant.name.as_deref(), desired, &tenant.config),
        settings: desired.setting_differences(&tenant.config),
        corrects_drift: request.policies.drift == blockwork_runtime::DriftPolicy::Enforce,
    };
    claim(&tenant.tags, claimant(request), held, differences)
}

/// Verify's outcome while the tags are written: in progress, with the tag write as upkeep.
/// Nothing of the tenant is recorded before it is the object's: an object whose adoption never
/// completed holds nothing.
pub(super) fn adopting(tenant: &ObservedTenant) -> Observed<TenantUpkeep> {
    let Some(arn) = tenant.arn.clone() else {
        return VerifyOutcome::Error(ExternalError::retryable("MissingArn", "CloudFront returned the tenant without its ARN")).into();
    };
    let outcome = VerifyOutcome::InProgress(format!("adopting tenant {}: writing its ownership tags", tenant.id));
    Observed { upkeep: vec![Upkeep { purpose: Purpose::FinishCreate, work: TenantUpkeep::Adopt { arn } }], ..outcome.into() }
}

pub(super) fn not_found<D>(spec: &DistributionTenantSpec, desired: &Desired<D>) -> ExternalError {
    let id = spec.adopt.as_ref().map(|adopt| adopt.tenant_id.as_str()).unwrap_or_default();
    let acting_as = match desired.identity.as_deref() {
        Some(blockwork_aws::principal::OPERATOR) | None => "the operator's own identity".to_owned(),
        Some(identity) => format!("AwsIdentity {identity}"),
    };
    ExternalError::terminal(
        ADOPTION_REFUSED,
        format!(
            "spec.adopt.tenantId {id} names no distribution tenant in the account this namespace acts in (as {acting_as}); a tenant of another account cannot be adopted from this namespace: check the id (nothing was created or written)"
        ),
    )
}

pub(super) fn mismatch(tenant: &ObservedTenant, differences: &[String]) -> ExternalError {
    ExternalError::terminal(
        ADOPTION_MISMATCH,
        format!(
            "tenant {} was not adopted, it differs from the spec: {}; change the spec to match it (nothing was written)",
            tenant.id,
            differences.join("; ")
        ),
    )
}

/// A refusal of the namespace (no identity, or `spec.dns` outside its grant) as an adoption's
/// refusal: the tenant is not one this namespace may take over. One being read again stays as
/// it is.
pub(super) fn refused(error: ExternalError) -> ExternalError {
    match error.class {
        blockwork_runtime::ErrorClass::Terminal => {
            ExternalError::terminal(ADOPTION_REFUSED, format!("not adopted ({}): {}", error.reason, error.message))
        }
        _ => error,
    }
}

impl<C: CloudFront + Acm, D: DnsRecords> TenantManager<C, D> {
    /// Writes the ownership tags: the adoption. The next verify reads the tenant again before
    /// anything else is done to it (another object may have written its own tags since).
    pub(super) async fn adopt(
        &self,
        request: &Request<'_, DistributionTenant, Desired<D>>,
        observation: &mut TenantObservation,
        arn: &str,
    ) -> Result<(), ExternalError> {
        let principal = &request.derived.principal;
        self.cloudfront
            .tag_tenant(principal, arn, &claimant(request).owner.tags())
            .await
            .map_err(|error| self.cloudfront_error(&error, CallContext::default()).error)?;
        observation.adopted = true;
        // Whatever records its domains have were not written by this object: shared for good.
        if request.derived.dns.is_some() {
            observation.dns_shared = request.derived.domains();
        }
        Ok(())
    }

    /// The object lost its tenant: recorded for good, told once by a Warning event.
    pub(super) async fn lost(
        &self,
        request: &Request<'_, DistributionTenant>,
        observation: &mut TenantObservation,
        tenant: &ObservedTenant,
        by: Option<&str>,
    ) -> ExternalError {
        let message = format!(
            "tenant {} was taken over by {}: this object no longer updates or deletes it or its DNS records, and deleting it deletes nothing in AWS (docs/adopting.md says how to manage the tenant from here again)",
            tenant.id,
            taken_by(by)
        );
        if !observation.ownership_lost {
            observation.ownership_lost = true;
            let object = request.object;
            self.events.publish(&object.object_ref(&()), EventType::Warning, OWNERSHIP_LOST, "Release", &message).await;
            warn!(tenant = %object.name_any(), id = %tenant.id, "ownership lost");
        }
        ExternalError::terminal(OWNERSHIP_LOST, message)
    }
}
