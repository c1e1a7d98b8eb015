//! Logging, and the traces' layer when they are exported (`crate::traces`).

use std::io::IsTerminal as _;

use anyhow::Context as _;
use blockwork_runtime::trace::{RECONCILE, TARGET};
use tracing::Level;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::cli::LogFormat;
use crate::traces::Exporter;

/// Installs the global subscriber: logs filtered by `filter` (`EnvFilter` syntax) to stderr
/// (stdout stays free for command output), colours only on a terminal; with `exporter`, the
/// spans of [`TARGET`] (and warnings within them) go to it, and log lines carry the ids of the
/// reconcile they belong to (its span's `trace_id` and `span_id`). Without it Blockwork's spans
/// are enabled for no layer: each costs a disabled callsite's check.
pub fn init(format: LogFormat, filter: &str, exporter: Option<&Exporter>) -> anyhow::Result<()> {
    let env = EnvFilter::try_new(filter).with_context(|| format!("invalid log filter `{filter}`"))?;
    let traced = exporter.is_some();
    // Of Blockwork's spans, logs show the reconcile's (its ids) and only while traces are on.
    let logged = env
        .and(filter_fn(|meta| meta.target() != TARGET))
        .or(filter_fn(move |meta| traced && meta.is_span() && meta.target() == TARGET && meta.name() == RECONCILE));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    let logs = match format {
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(traced).with_span_list(false).with_filter(logged).boxed(),
        LogFormat::Text => logs.with_filter(logged).boxed(),
    };
    let spans = exporter.map(|exporter| {
        tracing_opentelemetry::layer()
            .with_tracer(exporter.tracer())
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(|meta| meta.target() == TARGET || (meta.is_event() && *meta.level() <= Level::WARN)))
    });
    tracing_subscriber::registry().with(logs).with(spans).try_init().context("installing the log subscriber")?;
    if traced {
        blockwork_runtime::trace::enable();
    }
    Ok(())
}

/// `error: cause: cause…` like `{:#}`, but skipping a cause whose text is already shown (kube's
/// errors repeat their sources in their own message).
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_skips_repeated_causes() {
        let error = anyhow::anyhow!("root").context("middle: root").context("top");
        assert_eq!(error_chain(&error), "top: middle: root");
    }
}
