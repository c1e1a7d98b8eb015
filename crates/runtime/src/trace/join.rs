//! The user's change and Blockwork's work in one trace: a `traceparent` annotation on an object
//! (W3C Trace Context, as a CI or GitOps tool sets it with the change it applies, the way
//! HyperShift reads it) is the parent of the reconciles that change causes, until the object
//! settles (Ready, or failed for good) for that `traceparent`; later reconciles (resyncs, drift
//! checks) are traces of their own with a link to it, so a deploy's trace does not grow for as
//! long as the object lives.

use std::collections::BTreeMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The annotation of the parent trace context (W3C `traceparent`, e.g.
/// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`).
pub const TRACEPARENT_ANNOTATION: &str = "traceparent";
/// Its optional companion (W3C `tracestate`).
pub const TRACESTATE_ANNOTATION: &str = "tracestate";

/// How a reconcile's span relates to the object's trace context.
#[derive(Clone, Debug)]
pub enum Join {
    /// The reconcile is a child of the object's `traceparent`.
    Child(Context),
    /// The object settled for its `traceparent`: a trace of its own, linked to it.
    Link(SpanContext),
    /// No (valid) `traceparent`.
    None,
}

/// The remote parent the annotations name, if they name a valid one.
pub fn remote_parent(annotations: &BTreeMap<String, String>) -> Option<Context> {
    let traceparent = annotations.get(TRACEPARENT_ANNOTATION)?;
    let mut carrier = std::collections::HashMap::new();
    carrier.insert(TRACEPARENT_ANNOTATION.to_owned(), traceparent.trim().to_owned());
    if let Some(tracestate) = annotations.get(TRACESTATE_ANNOTATION) {
        carrier.insert(TRACESTATE_ANNOTATION.to_owned(), tracestate.trim().to_owned());
    }
    let context = TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

/// How the next reconcile joins the trace of `annotations`, given the `traceparent` the object
/// last settled for (`settled`, see [`crate::trace::Triggers::settled`]).
pub fn join(annotations: &BTreeMap<String, String>, settled: Option<&str>) -> Join {
    let Some(parent) = remote_parent(annotations) else {
        return Join::None;
    };
    let traceparent = annotations.get(TRACEPARENT_ANNOTATION).map(|t| t.trim());
    if traceparent.is_some() && traceparent == settled { Join::Link(parent.span().span_context().clone()) } else { Join::Child(parent) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_traceparent_is_the_parent_until_the_object_settles_for_it() {
        let annotations = annotations(&[(TRACEPARENT_ANNOTATION, PARENT)]);
        match join(&annotations, None) {
            Join::Child(parent) => {
                let context = parent.span().span_context().clone();
                assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
                assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
                assert!(context.is_sampled() && context.is_remote());
            }
            other => unreachable!("{other:?}"),
        }
        assert!(
            matches!(join(&annotations, Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")), Join::Child(_)),
            "a new deploy"
        );
        match join(&annotations, Some(PARENT)) {
            Join::Link(context) => assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736"),
            other => unreachable!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_or_malformed_traceparent_joins_nothing() {
        assert!(matches!(join(&annotations(&[]), None), Join::None));
        for bad in [
            "",
            "nonsense",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        ] {
            assert!(matches!(join(&annotations(&[(TRACEPARENT_ANNOTATION, bad)]), None), Join::None), "{bad}");
        }
    }

    #[test]
    fn the_tracestate_travels_with_the_parent() {
        let parent =
            remote_parent(&annotations(&[(TRACEPARENT_ANNOTATION, PARENT), (TRACESTATE_ANNOTATION, "vendor=value")])).expect("valid");
        assert_eq!(parent.span().span_context().trace_state().get("vendor"), Some("value"));
    }
}
