//! Wakes a controller's objects when the mappings change (ADR 0014): an object refused for want
//! of an identity, or held by a mapping change, is looked at again as soon as a mapping is
//! created, changed or deleted — never polled — and so is one acting through another identity
//! than its namespace's mapping now gives, or through a mapping whose spec was edited (its role
//! may be in another account now).

use std::collections::HashMap;
use std::sync::Arc;

use blockwork_runtime::{Context, ExternalResource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt as _;
use kube::core::object::HasStatus as _;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast::error::RecvError;

use crate::api::AwsIdentity;
use crate::grant::{OperatorZone, REFUSAL_REASONS, grant};
use crate::placement::AWS_IDENTITY_CHANGED;
use crate::registry::Identities;

/// Follows the mappings' changes until they end (the process stops). `acts_as`: the identity an
/// object's status says it acts through; `operator_zones`: the controller's own zones (Cert's
/// `--dns-zones`), as its grants are resolved.
pub async fn follow<M: ExternalResource>(
    context: Arc<Context<M>>,
    identities: Arc<Identities>,
    operator_zones: Vec<OperatorZone>,
    acts_as: fn(&M::Observation) -> Option<&str>,
) {
    let mut changes = identities.changes();
    // Each mapping's generation when last looked at: a spec edited since changes generation.
    let mut seen: HashMap<String, Option<i64>> = HashMap::new();
    loop {
        match changes.recv().await {
            Ok(()) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        let Some(all) = identities.all().await else { continue };
        let mappings: Vec<&AwsIdentity> = all.iter().map(AsRef::as_ref).collect();
        let generations: HashMap<String, Option<i64>> = mappings.iter().map(|m| (m.name_any(), m.metadata.generation)).collect();
        for object in context.cached() {
            let namespace = object.namespace().unwrap_or_default();
            let now = grant(&namespace, &mappings, identities.settings(), &operator_zones);
            let now = now.as_ref().map(|g| &*g.identity).ok();
            let edited = now.is_some_and(|name| seen.get(name) != generations.get(name));
            let status = object.status();
            let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
            if edited || concerned(status.and_then(|s| acts_as(&s.observation)), conditions, now) {
                context.related_changed(&ObjectRef::from_obj(object.as_ref()));
            }
        }
        seen = generations;
    }
}

/// Whether an object acting through `acts_as` (as its status says) with `conditions` is concerned
/// by a mapping change that gives its namespace `now` (`None`: refused): refused or held before,
/// or acting through another identity than now.
pub fn concerned(acts_as: Option<&str>, conditions: &[Condition], now: Option<&str>) -> bool {
    let stopped = conditions.iter().any(|c| REFUSAL_REASONS.contains(&c.reason.as_str()) || c.reason == AWS_IDENTITY_CHANGED);
    stopped || acts_as != now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(reason: &str) -> Condition {
        blockwork_runtime::status::condition("Synced", false, reason, "m", None)
    }

    #[test]
    fn a_refused_or_held_object_is_woken_by_any_mapping_change() {
        assert!(concerned(Some("a"), &[condition("AwsIdentityConflict")], Some("a")));
        assert!(concerned(Some("a"), &[condition(AWS_IDENTITY_CHANGED)], Some("a")));
    }

    #[test]
    fn an_object_is_woken_when_its_namespace_acts_through_another_identity_now() {
        assert!(concerned(Some("a"), &[], Some("b")));
        assert!(concerned(Some("a"), &[], None), "refused now");
        assert!(!concerned(Some("a"), &[condition("Ready")], Some("a")), "nothing changed for it");
    }
}
