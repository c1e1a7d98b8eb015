//! The AWS layer's spans (ADR 0018): one client span per attempt of a call, and one span per
//! Route 53 batch, linked to every reconcile whose change it carried, and one per sweep of an
//! account's certificate listing. Named and attributed as
//! OpenTelemetry's AWS SDK conventions name them (`rpc.system` `aws-api`, `rpc.service`,
//! `rpc.method`), with what only the layer knows: the attempt, the time waited on the quota's
//! token buckets, whether AWS throttled it, and the error's class. Never an account id, an ARN
//! or a request's values: the error's message is sanitized as the status's is.

use std::time::Duration;

use blockwork_runtime::trace::TARGET;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::edge::Call;
use crate::error::{AwsError, ErrorClass};
use crate::quota::Service;
use crate::sanitize::sanitize;

/// The span of attempt `attempt` (from 1) of `call`: from its wait for tokens to AWS's answer.
pub(crate) fn attempt(call: &Call<'_>, attempt: u32) -> Span {
    tracing::info_span!(
        target: TARGET,
        "aws call",
        otel.name = format!("{}/{}", service_id(call.scope.service), call.operation),
        otel.kind = "client",
        rpc.system = "aws-api",
        rpc.service = service_id(call.scope.service),
        rpc.method = call.operation,
        cloud.region = call.scope.region.as_deref().unwrap_or("global"),
        blockwork.controllers = call.callers.join(","),
        blockwork.aws.identity = call.identity,
        blockwork.aws.attempt = attempt,
        blockwork.aws.record_changes = call.changes,
        blockwork.aws.quota_wait_s = Empty,
        blockwork.aws.throttled = false,
        error.type = Empty,
        aws.error.code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// The service as AWS names it (`rpc.service`).
fn service_id(service: Service) -> &'static str {
    match service {
        Service::Acm => "ACM",
        Service::Route53 => "Route53",
        Service::CloudFront => "CloudFront",
        Service::Sts => "STS",
        Service::AcmPca => "ACM PCA",
    }
}

/// The tokens came after `waited`; the request leaves now.
pub(crate) fn sent(waited: Duration) {
    let span = Span::current();
    span.record("blockwork.aws.quota_wait_s", waited.as_secs_f64());
    if !waited.is_zero() {
        tracing::info!(target: TARGET, waited_s = waited.as_secs_f64(), "tokens granted");
    }
}

/// AWS answered: with `error`, or (`None`) with success.
pub(crate) fn answered(error: Option<&AwsError>) {
    let Some(error) = error else { return };
    let span = Span::current();
    span.record("error.type", error.class.as_str());
    span.record("blockwork.aws.throttled", error.class == ErrorClass::Throttled);
    if let Some(code) = &error.code {
        span.record("aws.error.code", code.as_str());
    }
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", sanitize(&error.to_string()));
}

/// The span of one Route 53 batch to a zone: a trace of its own, linked to the span of each
/// request it carries (the reconcile that queued it). `zone` is the hosted zone's id (not an
/// account's).
pub(crate) fn batch(zone: &str, changes: usize, requests: &[Option<SpanContext>]) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "route53 batch",
        otel.name = "Route53 batch",
        blockwork.route53.zone = zone,
        blockwork.route53.changes = changes,
        blockwork.route53.requests = requests.len(),
    );
    for context in requests.iter().flatten() {
        span.add_link_with_attributes(context.clone(), vec![KeyValue::new("blockwork.link", "change carried")]);
    }
    span
}

/// The span of one sweep of an account's certificate listing, as `identity` (the AwsIdentity's
/// name): in the background a trace of its own, within a reconcile that needs the listing as it
/// is now that reconcile's child. Its ListCertificates calls are its children; the Certs whose
/// certificates it found changed are woken with a link to it.
pub(crate) fn sweep(identity: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "acm listing sweep",
        otel.name = "ACM listing sweep",
        blockwork.aws.identity = identity,
        blockwork.acm.certificates = Empty,
        blockwork.acm.changed = Empty,
    )
}

/// The sweep (the current span) listed `certificates`, of which `changed` changed.
pub(crate) fn swept(certificates: usize, changed: usize) {
    let span = Span::current();
    span.record("blockwork.acm.certificates", certificates);
    span.record("blockwork.acm.changed", changed);
}

/// The span a request is queued from (a reconcile's), to link its batch to it.
pub(crate) fn current() -> Option<SpanContext> {
    blockwork_runtime::trace::span_context(&Span::current())
}
