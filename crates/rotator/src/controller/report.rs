//! What a reconcile tells: logs, metrics, and events, which wait in the [`Outbox`] until the
//! rotator is idle (ADR 0012), published by [`Rotator::publish_events`].

use std::sync::{MutexGuard, PoisonError};
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::runtime::events::EventType;
use kube::{Resource as _, ResourceExt as _};
use tracing::{debug, info, warn};

use blockwork_runtime::ErrorClass;
use blockwork_runtime::policy::AnnotationError;

use super::{Observation, Outcome, Rotator};
use crate::failure;
use crate::outbox::{LONGEST_WAIT, Next, Outbox};
use crate::plan::Action;

impl Rotator {
    /// Logs, metrics and events for an outcome: what was written is told on the target (one
    /// event per write, the source named in it), what blocks on the source. Events go to the
    /// outbox, best effort: a lost event is logged, never retried.
    pub fn report(&self, observation: &Observation, outcome: &Outcome) {
        let plan = &outcome.plan;
        let source = &observation.source;
        let namespace = source.namespace().unwrap_or_default();
        let source_name = source.name_any();
        let target_name = plan.target_name.clone().unwrap_or_default();
        let target_ref = outcome.written.as_ref().or(observation.target.as_deref()).map(|t| t.object_ref(&()));
        let source_ref = source.object_ref(&());
        let rv = source.resource_version().unwrap_or_default();
        let now = Timestamp::now().as_duration().as_secs_f64();
        self.metrics.reconciled(plan.action.result());
        match &plan.action {
            Action::Create => {
                info!(namespace, source = %source_name, target = %target_name, next_kid = %plan.kids.next, "created target");
                self.metrics.rotated(&namespace, &target_name, now);
                if let Some(target_ref) = &target_ref {
                    let note = format!("Created from source {source_name} (resourceVersion {rv}); next-tls.kid {}", plan.kids.next);
                    self.event(target_ref, EventType::Normal, "Created", "Create", note);
                }
            }
            Action::Rotate => {
                info!(namespace, source = %source_name, target = %target_name, next_kid = %plan.kids.next, current_kid = %plan.kids.current, "rotated target");
                self.metrics.rotated(&namespace, &target_name, now);
                let kids = format!(
                    "next-tls.kid {}, tls.kid {}, prev-tls.kid {}",
                    plan.kids.next,
                    or_none(&plan.kids.current),
                    or_none(&plan.kids.prev)
                );
                let extra = if plan.reasons.is_empty() { String::new() } else { format!("; {}", plan.reasons.join("; ")) };
                if let Some(target_ref) = &target_ref {
                    let note = format!("Rotated from source {source_name} (resourceVersion {rv}): {kids}{extra}");
                    self.event(target_ref, EventType::Normal, "Rotated", "Rotate", note);
                }
            }
            Action::Update => {
                let reasons = plan.reasons.join("; ");
                info!(namespace, source = %source_name, target = %target_name, %reasons, "updated target without rotating");
                if let Some(target_ref) = &target_ref {
                    let note = format!("Updated from source {source_name} without rotating: {reasons}");
                    self.event(target_ref, EventType::Normal, "Updated", "Update", note);
                }
                self.observe_recorded(&namespace, &target_name, outcome.written.as_ref());
            }
            Action::Unchanged => {
                debug!(namespace, source = %source_name, target = %target_name, "target up to date");
                self.observe_recorded(&namespace, &target_name, observation.target.as_deref());
            }
            Action::Blocked(blocked) => {
                warn!(namespace, source = %source_name, target = %target_name, reason = blocked.event_reason(), "{blocked}");
                self.metrics.error(blocked.metric_reason());
                // Needs a person; looked at again when the source or the target changes, else then.
                let retry = failure::Retry { class: ErrorClass::Terminal, after: self.blocked_requeue(blocked) };
                let note = failure::note(retry, &blocked.to_string());
                self.event(&source_ref, EventType::Warning, blocked.event_reason(), "Rotate", note);
            }
        }
        if !plan.warnings.is_empty() {
            self.metrics.error("jwks_key_skipped");
            let note = format!("Left out of {}: {}", crate::jwks::JWKS_KEY, plan.warnings.join("; "));
            self.event(&source_ref, EventType::Warning, "JwksKeySkipped", "RenderJwks", note);
        }
    }

    /// The target's recorded last rotation time into the per-target gauge (after a restart).
    fn observe_recorded(&self, namespace: &str, target: &str, secret: Option<&Secret>) {
        let recorded = secret.and_then(|s| s.annotations().get(&self.keys.last_rotation_time)).and_then(|t| t.parse::<Timestamp>().ok());
        if let Some(at) = recorded {
            self.metrics.observe(namespace, target, at.as_duration().as_secs_f64());
        }
    }

    /// Puts an event in the outbox, which [`Rotator::publish_events`] publishes once the rotator
    /// is idle: neither this reconcile nor the next rotation waits for the API server to take it.
    pub(super) fn event(&self, reference: &ObjectReference, type_: EventType, reason: &str, action: &str, note: String) {
        let pending = Pending { reference: reference.clone(), type_, reason: reason.to_owned(), action: action.to_owned(), note };
        self.outbox().push(Instant::now(), pending);
        self.outbox_changed.notify_one();
    }

    /// Publishes the outbox's events when it says so, until it is closed
    /// ([`Rotator::close_events`]) and done.
    pub async fn publish_events(&self) {
        loop {
            let changed = self.outbox_changed.notified();
            let next = self.outbox().next(Instant::now());
            match next {
                Next::Publish(events) => {
                    // Bounded: an API server that does not answer must not hold the rest (or
                    // the shutdown) for ever.
                    let publish = futures::future::join_all(
                        events.iter().map(|e| self.events.publish(&e.reference, e.type_, &e.reason, &e.action, &e.note)),
                    );
                    if tokio::time::timeout(LONGEST_WAIT, publish).await.is_err() {
                        warn!(events = events.len(), "events not published within {LONGEST_WAIT:?}; given up");
                    }
                }
                Next::WaitUntil(deadline) => {
                    let _ =
                        futures::future::select(std::pin::pin!(changed), std::pin::pin!(tokio::time::sleep_until(deadline.into()))).await;
                }
                Next::Wait => changed.await,
                Next::Done { given_up } => {
                    if given_up > 0 {
                        warn!(events = given_up, "shutting down: events not published");
                    }
                    return;
                }
            }
        }
    }

    /// Shutdown: the outbox publishes what waits at once, then [`Rotator::publish_events`] ends.
    pub fn close_events(&self) {
        self.outbox().close(Instant::now());
        self.outbox_changed.notify_one();
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox<Pending>> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A Secret that is no source carries an annotation under the prefix that the rotator cannot
    /// act on (a misspelt key, or `source-secret: "yes"`): say so on it, since nothing else will.
    pub(super) fn invalid_annotation(&self, secret: &Secret, invalid: &AnnotationError) {
        warn!(namespace = secret.namespace().unwrap_or_default(), secret = %secret.name_any(), %invalid, "invalid rotator annotation");
        self.metrics.error("invalid_annotation");
        let note = format!("{invalid}; the rotator acts on this Secret's annotations once it is fixed");
        self.event(&secret.object_ref(&()), EventType::Warning, "InvalidAnnotation", "Read", note);
    }
}

/// An event waiting in the outbox.
#[derive(Debug)]
pub(super) struct Pending {
    reference: ObjectReference,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
}

/// A reconcile running, for the outbox: events wait while any runs. Ends when dropped, however
/// the reconcile ends (returned, failed, or cancelled at shutdown).
pub(super) struct Running<'a>(&'a Rotator);

impl<'a> Running<'a> {
    pub(super) fn new(rotator: &'a Rotator) -> Self {
        rotator.outbox().started();
        Self(rotator)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.outbox().ended(Instant::now());
        self.0.outbox_changed.notify_one();
    }
}

fn or_none(kid: &str) -> &str {
    if kid.is_empty() { "(empty)" } else { kid }
}
