//! Exemplars: from a latency histogram's bucket to the trace of a reconcile or an AWS call that
//! fell in it. OpenMetrics lets each bucket carry the labels of one observation (the latest);
//! Blockwork's `/metrics` is OpenMetrics text, so a Prometheus with exemplar storage on (and
//! Grafana's "exemplars" toggle) shows a dot per bucket that opens the trace in the collector.
//!
//! The exemplar is the trace id of the span current when the value is observed (the reconcile's,
//! or the AWS call attempt's within it), and only when that span is exported: with traces off,
//! or a trace not sampled, the bucket carries no exemplar, so no id names a trace the collector
//! does not have. The classic Prometheus text format has no exemplars, which is why they live in
//! the OpenMetrics exposition only.

use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use tracing::Span;

/// An exemplar's labels: the trace id, under the name OpenMetrics and Prometheus' tools expect.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: String,
}

/// A latency histogram whose buckets carry the trace of their latest observation.
pub type TracedHistogram = HistogramWithExemplars<TraceExemplar>;

/// Observes `value` in `histogram`, with the trace of the current span as its exemplar when
/// that span is exported.
pub fn observe(histogram: &TracedHistogram, value: f64) {
    match super::span_context(&Span::current()) {
        Some(context) => {
            let exemplar = TraceExemplar { trace_id: context.trace_id().to_string() };
            histogram.observe(value, Some(exemplar), Some(SystemTime::now()));
        }
        None => histogram.observe(value, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use prometheus_client::registry::Registry;
    use tracing_subscriber::layer::SubscriberExt as _;

    fn histogram_in(registry: &mut Registry) -> TracedHistogram {
        let histogram = TracedHistogram::new([0.1, 1.0].into_iter());
        registry.register("latency_seconds", "Latency", histogram.clone());
        histogram
    }

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    #[test]
    fn a_value_observed_within_an_exported_span_names_its_trace_in_its_bucket() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let mut registry = Registry::default();
        let histogram = histogram_in(&mut registry);
        let trace_id = tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: crate::trace::TARGET, "reconcile");
            let _entered = span.enter();
            observe(&histogram, 0.5);
            super::super::current_trace_id()
        });
        let trace_id = trace_id.expect("the span is exported");
        let text = scrape(&registry);
        let bucket = text.lines().find(|line| line.starts_with(r#"latency_seconds_bucket{le="1.0"}"#)).expect(&text);
        assert!(bucket.contains(&format!(r#"# {{trace_id="{trace_id}"}} 0.5"#)), "{text}");
        assert!(!text.lines().any(|line| line.starts_with(r#"latency_seconds_bucket{le="0.1"}"#) && line.contains('#')), "{text}");
    }

    #[test]
    fn a_value_observed_outside_any_exported_span_has_no_exemplar() {
        let mut registry = Registry::default();
        let histogram = histogram_in(&mut registry);
        let span = tracing::info_span!(target: crate::trace::TARGET, "reconcile");
        span.in_scope(|| observe(&histogram, 0.5));
        let text = scrape(&registry);
        assert!(text.contains(r#"latency_seconds_count 1"#), "{text}");
        assert!(!text.contains("trace_id"), "{text}");
    }
}
