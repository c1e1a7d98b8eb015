//! Traces: one trace per reconcile, from the watch event to the last AWS call (issue 32,
//! ADR 0018). Every controller of the process makes its spans here, so they share one
//! vocabulary:
//!
//! - [`reconcile`]: the root of a reconcile's trace (or the child of the object's
//!   `traceparent`, see [`Join`]), with its trigger and the time it waited in the queue
//!   ([`Triggers`]), its [`outcome`] and next [`requeue`];
//! - [`kubernetes_write`]: each write to the API server (status, finalizer, spec, Secret, Event);
//! - the AWS layer's calls and Route 53 batches (`blockwork_aws::edge`, `route53`);
//! - the [`exemplar`]s of the latency histograms, which name the trace an observation was part of.
//!
//! Off unless `blockwork run` installs an exporter ([`enable`]): the spans' target, [`TARGET`],
//! is then enabled for no subscriber, so a span costs what a disabled `tracing` callsite costs
//! (one relaxed load) and the trigger ledger does nothing.

pub mod exemplar;
mod join;
mod triggers;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TraceContextExt as _;
use tracing::field::Empty;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use join::{Join, TRACEPARENT_ANNOTATION, TRACESTATE_ANNOTATION, join, remote_parent};
/// What a span's links and parents are made of, for the crates that pass them on.
pub use opentelemetry::trace::SpanContext;
pub use triggers::{Cause, Trigger, Triggers};

/// The target of every Blockwork span: what the exporter's layer listens to, and what the log
/// layer leaves out (but for the reconcile span, whose ids log lines carry).
pub const TARGET: &str = "blockwork::trace";

/// The name of every reconcile span (its OpenTelemetry name says which kind).
pub const RECONCILE: &str = "reconcile";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called once by `blockwork run` when it exports traces.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether this process exports traces.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The span of one reconcile of `kind` `namespace/name` by `controller`, with its trigger: a
/// root (`parent: None`: not a child of whatever span kube-runtime runs it in), joined to the
/// object's trace context as [`join`] decides. Enter it (or `instrument` the reconcile with it)
/// for the whole reconcile.
///
/// Its attributes go to the exporter only; its fields, which every log line within it shows, are
/// its name and ids.
pub fn reconcile(controller: &'static str, kind: &str, namespace: &str, name: &str, trigger: &Trigger, join: &Join) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        RECONCILE,
        otel.name = format!("reconcile {kind}"),
        trace_id = Empty,
        span_id = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    span.set_attribute("blockwork.controller", controller);
    span.set_attribute("blockwork.kind", kind.to_owned());
    span.set_attribute("k8s.namespace.name", namespace.to_owned());
    span.set_attribute("blockwork.name", name.to_owned());
    span.set_attribute("blockwork.trigger", trigger.cause.to_string());
    span.set_attribute("blockwork.queued_s", trigger.queued.as_secs_f64());
    match join {
        Join::Child(parent) => {
            // Only fails for a disabled span (not this one) or one already started.
            let _ = span.set_parent(parent.clone());
        }
        Join::Link(context) => {
            span.add_link_with_attributes(context.clone(), vec![opentelemetry::KeyValue::new("blockwork.link", "traceparent")])
        }
        Join::None => {}
    }
    if let Some(previous) = &trigger.link {
        span.add_link_with_attributes(previous.clone(), vec![opentelemetry::KeyValue::new("blockwork.link", "trigger")]);
    }
    if let Some(context) = span_context(&span) {
        span.record("trace_id", context.trace_id().to_string());
        span.record("span_id", context.span_id().to_string());
    }
    span
}

/// What background work tells the controllers (certificates a listing sweep found changed,
/// records a Route 53 batch wrote), with the span of that work, if it is exported: the
/// reconciles it wakes link to it ([`crate::Context::wake_from`]).
#[derive(Clone, Debug)]
pub struct Traced<T> {
    pub value: T,
    pub span: Option<SpanContext>,
}

/// The OpenTelemetry context of `span`, if it is exported (enabled and sampled).
pub fn span_context(span: &Span) -> Option<SpanContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.is_valid() && span_context.is_sampled()).then_some(span_context)
}

/// The trace id of the reconcile running now, for what a user reads (`blockwork explain`): only
/// when it is exported, so the id names a trace the collector has.
pub fn current_trace_id() -> Option<String> {
    span_context(&Span::current()).map(|c| c.trace_id().to_string())
}

/// Records a reconcile's outcome on its span: the state it left the object in, or why it
/// failed (`error`: a message as safe to show as the status's, no account id).
pub fn outcome(span: &Span, outcome: &str, error: Option<&str>) {
    span.set_attribute("blockwork.outcome", outcome.to_owned());
    if let Some(error) = error {
        span.set_status(opentelemetry::trace::Status::error(error.to_owned()));
    }
}

/// Records on a reconcile's span when it looks again.
pub fn requeue(span: &Span, after: Duration) {
    span.set_attribute("blockwork.requeue_after_s", after.as_secs_f64());
}

/// Records on a reconcile's span what triggered it, once the reconcile knows better than the
/// queue (a retry a person asked for comes as a change of the object's annotations).
pub fn retriggered(span: &Span, cause: Cause) {
    span.set_attribute("blockwork.trigger", cause.to_string());
}

/// `write`, one write to the API server, in a span of its own within the exported span it is
/// made from (a reconcile's; a write outside any, such as an Event published after the
/// reconcile, is no trace of its own): `verb` (`create`, `replace`, `patch`, `apply`), what it
/// writes (`status`, `finalizer`, `spec`, `target`, `event`) of which `kind`; a failure marks
/// the span.
pub async fn kubernetes_write<T, E: std::fmt::Display>(
    verb: &'static str,
    what: &'static str,
    kind: &str,
    write: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    if !enabled() || span_context(&Span::current()).is_none() {
        return write.await;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "kubernetes write",
        otel.name = format!("{verb} {kind} {what}"),
        otel.kind = "client",
        k8s.verb = verb,
        blockwork.write = what,
        blockwork.kind = kind,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    let result = write.instrument(span.clone()).await;
    if let Err(error) = &result {
        failed(&span, error);
    }
    result
}

/// The span of one webhook request (admission or conversion), the child of the API server's
/// `traceparent` header when it sends one (its tracing on).
pub fn webhook(method: &str, path: &str, headers: &std::collections::BTreeMap<String, String>) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "webhook",
        otel.name = format!("{method} {path}"),
        otel.kind = "server",
        http.request.method = method,
        url.path = path,
        blockwork.webhook = if path.starts_with("/convert") { "conversion" } else { "admission" },
        http.response.status_code = Empty,
        otel.status_code = Empty,
    );
    if let Some(parent) = remote_parent(headers) {
        let _ = span.set_parent(parent);
    }
    span
}

/// Marks `span` failed with `error` (a message safe to show: sanitized, no account id).
pub fn failed(span: &Span, error: &impl std::fmt::Display) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", error.to_string());
}
