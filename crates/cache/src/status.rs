//! What a reconcile found becomes the Cache's status: conditions, phase, `lastError`, the
//! primary Sentinel reports; written only when it changes, from the stored object, with the
//! events that go with it.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use blockwork_runtime::events::Publisher;
use blockwork_runtime::outcome::ErrorClass;
use blockwork_runtime::status::{LastError, set_condition};
use blockwork_runtime::trace;

use crate::api::{AuthStatus, Binding, Cache, CacheStatus, Phase};
use crate::children::FIELD_MANAGER;
use crate::sentinel;
use crate::shape;

/// Whether the replicas are ready (reasons `AllReplicasAvailable`, `ReplicasNotReady`, or the
/// reason that keeps them from starting).
pub const READY: &str = "Ready";
/// Whether the last reconcile applied every owned object.
pub const SYNCED: &str = "Synced";
/// Whether every object the Cache references (its TLS Secret, its password Secret) exists with
/// the keys it needs.
pub const RESOLVED_REFS: &str = "ResolvedRefs";
/// The latest the controller looks at a Cache again; also when a recorded error is retried.
pub const RESYNC: Duration = Duration::from_secs(300);

/// What a reconcile found, for the status: `None` keeps what the status says.
#[derive(Default)]
pub struct Report {
    pub phase: Option<Phase>,
    pub ready_replicas: Option<i32>,
    pub primary: PrimaryUpdate,
    pub conditions: Vec<Condition>,
    /// Condition types that no longer apply.
    pub dropped_conditions: &'static [&'static str],
    /// A Warning event: reason and note.
    pub warning: Option<(String, String)>,
    pub last_error: ErrorUpdate,
    /// `status.auth` and `status.binding` (`None` keeps them).
    pub auth: Option<(AuthStatus, Binding)>,
}

/// What the status's `lastError` becomes.
#[derive(Default)]
pub enum ErrorUpdate {
    /// As it is (a held Cache is not reconciled, so nothing failed or succeeded).
    #[default]
    Keep,
    /// Nothing stands in the way any more.
    Clear,
    /// The reconcile ended waiting on this: class, reason, message.
    Failed(ErrorClass, &'static str, String),
}

/// What the status's primary and last failover become.
#[derive(Default)]
pub enum PrimaryUpdate {
    /// As they are (nothing asked, or no Sentinel answered).
    #[default]
    Keep,
    /// None: the Cache has no Sentinel.
    Clear,
    /// What a Sentinel reported at that time.
    Seen(sentinel::Report, jiff::Timestamp),
}

/// Writes `report` over the current status when it changes anything, and publishes its events:
/// a Normal event on a phase change, and the report's warning. Whether it recorded a failover
/// the status did not have.
pub async fn write(cache: &Cache, client: &Client, events: &Publisher, report: Report) -> Result<bool, kube::Error> {
    let mut current = cache.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let mut next = next_status(cache, &current, &report, now);
    if next != current {
        // The Cache as the watch delivered it can be older than the stored one: a relist after a
        // `410 Gone` is answered from the API server's watch cache, which may lag. Decide on the
        // stored status, so that an old view is never written back (seen looking into issue 15's
        // API server suite).
        let api: Api<Cache> = Api::namespaced(client.clone(), &cache.namespace().unwrap_or_default());
        let stored = api.get(&cache.name_any()).await?;
        if stored.metadata.generation != cache.metadata.generation {
            // A newer spec is on its way through the watch, and its own reconcile writes.
            return Ok(false);
        }
        current = stored.status.unwrap_or_default();
        next = next_status(cache, &current, &report, now);
        if next != current {
            let patch = json!({"apiVersion": Cache::api_version(&()), "kind": "Cache", "status": next});
            let name = cache.name_any();
            let params = PatchParams::apply(FIELD_MANAGER).force();
            trace::kubernetes_write("apply", "status", "Cache", api.patch_status(&name, &params, &Patch::Apply(&patch))).await?;
        }
    }
    if let Some(phase) = next.phase.filter(|phase| current.phase != Some(*phase)) {
        let message = next.conditions.iter().find(|c| c.type_ == READY).map(|c| c.message.clone()).unwrap_or_default();
        let type_ = if phase == Phase::Failed { EventType::Warning } else { EventType::Normal };
        publish(events, cache, type_, &format!("{phase:?}"), &message).await;
    }
    if let Some((reason, note)) = report.warning {
        publish(events, cache, EventType::Warning, &reason, &note).await;
    }
    Ok(next.last_failover.is_some() && next.last_failover != current.last_failover)
}

/// The `lastError` after a reconcile that ended waiting on `class`/`reason`. The same error
/// keeps its record until its `retryAt` (the resync, the latest the controller looks again; a
/// change of the spec or the Secret comes sooner): a Cache polled every few seconds for its
/// Sentinel does not rewrite its status each time.
fn next_last_error(previous: Option<&LastError>, class: ErrorClass, reason: &str, message: &str, now: jiff::Timestamp) -> LastError {
    match previous {
        Some(previous) if previous.class == class && previous.reason == reason && previous.retry_at.0 > now => {
            LastError { message: message.to_owned(), ..previous.clone() }
        }
        _ => {
            let resync = jiff::SignedDuration::try_from(RESYNC).unwrap_or(jiff::SignedDuration::from_secs(300));
            LastError::after(previous, class, reason, message, now, now.saturating_add(resync).unwrap_or(now))
        }
    }
}

/// The status `report` makes of `current`.
fn next_status(cache: &Cache, current: &CacheStatus, report: &Report, now: jiff::Timestamp) -> CacheStatus {
    let (primary, last_failover) = match &report.primary {
        PrimaryUpdate::Keep => (current.primary.clone(), current.last_failover.clone()),
        PrimaryUpdate::Clear => (None, None),
        PrimaryUpdate::Seen(seen, at) => {
            (Some(seen.primary.clone()), sentinel::observe(current.primary.as_deref(), current.last_failover.as_ref(), seen, *at))
        }
    };
    let mut next = CacheStatus {
        phase: report.phase.or(current.phase),
        primary,
        last_failover,
        ready_replicas: report.ready_replicas.unwrap_or(current.ready_replicas),
        endpoint: Some(shape::endpoint(cache)),
        conditions: current.conditions.clone(),
        observed_generation: cache.metadata.generation,
        // Every reconcile acts on the annotation's value: the change of it triggered this one.
        last_handled_reconcile_at: cache
            .annotations()
            .get(blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION)
            .cloned()
            .or(current.last_handled_reconcile_at.clone()),
        last_error: match &report.last_error {
            ErrorUpdate::Keep => current.last_error.clone(),
            ErrorUpdate::Clear => None,
            ErrorUpdate::Failed(class, reason, message) => Some(next_last_error(current.last_error.as_ref(), *class, reason, message, now)),
        },
        binding: report.auth.as_ref().map(|(_, binding)| binding.clone()).or_else(|| current.binding.clone()),
        auth: report.auth.as_ref().map(|(auth, _)| auth.clone()).or_else(|| current.auth.clone()),
    };
    next.conditions.retain(|condition| !report.dropped_conditions.contains(&condition.type_.as_str()));
    for condition in &report.conditions {
        set_condition(&mut next.conditions, condition.clone());
    }
    next
}

/// Publishes an event about `cache` from the controller's reconcile.
pub async fn publish(events: &Publisher, cache: &Cache, type_: EventType, reason: &str, note: &str) {
    events.publish(&cache.object_ref(&()), type_, reason, "Reconcile", note).await;
}

#[cfg(test)]
mod tests {
    use super::{ErrorClass, next_last_error};

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(second).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_error_is_retried_at_the_latest_on_the_resync() {
        let error = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        assert_eq!((error.class, error.attempts, error.since.0, error.retry_at.0), (ErrorClass::NotFound, 1, at(1_000), at(1_300)));
    }

    #[test]
    fn the_same_error_before_its_retry_time_keeps_its_record() {
        let first = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        let polled = next_last_error(Some(&first), ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_005));
        assert_eq!(polled, first, "a Sentinel poll 5 s later writes nothing");
        let resynced = next_last_error(Some(&first), ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_300));
        assert_eq!((resynced.attempts, resynced.since.0, resynced.retry_at.0), (2, at(1_000), at(1_600)));
    }

    #[test]
    fn another_error_starts_its_own_record() {
        let first = next_last_error(None, ErrorClass::NotFound, "TLSSecretNotFound", "no c-tls", at(1_000));
        let next = next_last_error(Some(&first), ErrorClass::Terminal, "TLSSecretIncomplete", "no tls.key", at(1_010));
        assert_eq!((next.class, next.attempts, next.since.0), (ErrorClass::Terminal, 1, at(1_010)));
    }
}
