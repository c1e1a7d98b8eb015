//! Logging.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber: `filter` in `EnvFilter` syntax, to stderr (stdout stays
/// free for command output); colours only on a terminal.
pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter).with_context(|| format!("invalid log filter `{filter}`"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| anyhow::anyhow!(e)).context("installing the log subscriber")
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
