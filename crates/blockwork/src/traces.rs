//! Whether and where `blockwork run` exports traces: OpenTelemetry's own environment variables
//! (the OTLP exporter's, the SDK's), nothing of Blockwork's, so the value a platform already
//! sets for every workload works here too. Off unless an OTLP endpoint is given (or
//! `OTEL_TRACES_EXPORTER=otlp` asks for the default one); checked before anything starts, so a
//! misspelt protocol or sampler fails start-up with the variable in the message instead of
//! falling back silently.
//!
//! | variable | read by |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | this module (on or off), the exporter |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL`, `…_TRACES_PROTOCOL`: `http/protobuf` (default) or `grpc` | this module (checked), the exporter |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION` (and the `TRACES_` ones) | the exporter |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | this module (checked), the SDK |
//! | `OTEL_SERVICE_NAME` (default `blockwork`), `OTEL_RESOURCE_ATTRIBUTES` | the SDK |
//! | `OTEL_BSP_*` (batching) | the SDK |
//! | `OTEL_TRACES_EXPORTER` (`otlp` or `none`), `OTEL_SDK_DISABLED` | this module |

use std::time::Duration;

/// What `blockwork run --help` says of traces: the variables above, in short.
pub const HELP: &str = "\
Traces (OpenTelemetry's own environment variables; off unless an OTLP endpoint is set):
  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  where to export spans (OTLP)
  OTEL_EXPORTER_OTLP_PROTOCOL, ..._TRACES_PROTOCOL                 http/protobuf (default) or grpc
  OTEL_EXPORTER_OTLP_HEADERS, ..._TIMEOUT, ..._COMPRESSION         the exporter's (and the TRACES_ ones)
  OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG                     default parentbased_always_on
  OTEL_SERVICE_NAME (default blockwork), OTEL_RESOURCE_ATTRIBUTES  the resource
  OTEL_BSP_*                                                       batching
  OTEL_TRACES_EXPORTER (otlp or none), OTEL_SDK_DISABLED           on or off
A misspelt protocol, sampler or ratio fails start-up. See docs/observability.md.";

use anyhow::{Context as _, bail};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// What the environment asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traces {
    Off,
    /// Export over OTLP, the exporter configured from the environment.
    Otlp {
        protocol: &'static str,
        endpoint: String,
    },
}

const SAMPLERS: [&str; 6] =
    ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"];

impl Traces {
    /// From the process's environment.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// From the variables `var` reads (a blank value counts as unset, as the SDKs read it).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let var = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::Off);
        }
        let exporter = var("OTEL_TRACES_EXPORTER");
        match exporter.as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(Self::Off),
            Some(other) => {
                bail!("OTEL_TRACES_EXPORTER={other} is not supported: Blockwork exports traces over OTLP (`otlp`), or not at all (`none`)")
            }
        }
        let protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL")).as_deref() {
            None | Some("http/protobuf") => "http/protobuf",
            Some("grpc") => "grpc",
            Some(other) => bail!("OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported: use `http/protobuf` (the default) or `grpc`"),
        };
        let endpoint = match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            Some(endpoint) => endpoint,
            // The specification's defaults, when the exporter is asked for by name only.
            None if exporter.is_some() => {
                if protocol == "grpc" {
                    "http://localhost:4317".to_owned()
                } else {
                    "http://localhost:4318".to_owned()
                }
            }
            None => return Ok(Self::Off),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            bail!("OTEL_EXPORTER_OTLP_ENDPOINT={endpoint} is not a URL: give the collector as `http://host:port` or `https://host:port`");
        }
        if let Some(sampler) = var("OTEL_TRACES_SAMPLER") {
            if !SAMPLERS.contains(&sampler.as_str()) {
                bail!("OTEL_TRACES_SAMPLER={sampler} is not supported: use one of {}", SAMPLERS.join(", "));
            }
            if sampler.ends_with("traceidratio") {
                let arg = var("OTEL_TRACES_SAMPLER_ARG");
                let ratio = arg.as_deref().and_then(|a| a.parse::<f64>().ok()).filter(|r| (0.0..=1.0).contains(r));
                if ratio.is_none() {
                    bail!(
                        "OTEL_TRACES_SAMPLER={sampler} needs OTEL_TRACES_SAMPLER_ARG, the share of traces kept, from 0 to 1 (got {})",
                        arg.as_deref().unwrap_or("nothing")
                    );
                }
            }
        }
        Ok(Self::Otlp { protocol, endpoint })
    }
}

/// The exporting pipeline: flushed and stopped by [`Exporter::shutdown`].
pub struct Exporter {
    provider: SdkTracerProvider,
}

/// How long shutdown waits for the last spans to reach the collector.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Exporter {
    /// The OTLP exporter and the SDK, both configured from the environment. Call within the
    /// Tokio runtime (the gRPC client spawns its connection there).
    pub fn start() -> anyhow::Result<Self> {
        let exporter = opentelemetry_otlp::SpanExporter::builder().build().context("building the OTLP trace exporter")?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none()
            && !std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default().contains("service.name=")
        {
            resource = resource.with_service_name("blockwork");
        }
        resource = resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if let Some(instance) = blockwork_runtime::events::instance() {
            resource = resource.with_attribute(opentelemetry::KeyValue::new("service.instance.id", instance));
        }
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
        Ok(Self { provider })
    }

    pub fn tracer(&self) -> opentelemetry_sdk::trace::SdkTracer {
        self.provider.tracer("blockwork")
    }

    /// Exports what is buffered and stops; at most [`SHUTDOWN_TIMEOUT`].
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(%error, "traces not all exported at shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traces(vars: &[(&str, &str)]) -> anyhow::Result<Traces> {
        Traces::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()))
    }

    fn error(vars: &[(&str, &str)]) -> String {
        format!("{:#}", traces(vars).expect_err("refused"))
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        assert_eq!(traces(&[]).expect("valid"), Traces::Off);
        assert_eq!(
            traces(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).expect("valid"),
            Traces::Off,
            "blank, as a chart renders an empty value"
        );
        assert_eq!(traces(&[("OTEL_TRACES_SAMPLER", "always_on")]).expect("valid"), Traces::Off);
    }

    #[test]
    fn one_endpoint_turns_them_on_over_http_by_default() {
        let on = traces(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]).expect("valid");
        assert_eq!(on, Traces::Otlp { protocol: "http/protobuf", endpoint: "http://collector:4318".into() });
        let grpc = traces(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(grpc.expect("valid"), Traces::Otlp { protocol: "grpc", endpoint: "http://c:4317".into() });
        let by_name = traces(&[("OTEL_TRACES_EXPORTER", "otlp")]).expect("valid");
        assert_eq!(by_name, Traces::Otlp { protocol: "http/protobuf", endpoint: "http://localhost:4318".into() });
    }

    #[test]
    fn the_sdks_off_switches_win() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(traces(&[endpoint, ("OTEL_SDK_DISABLED", "true")]).expect("valid"), Traces::Off);
        assert_eq!(traces(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).expect("valid"), Traces::Off);
    }

    #[test]
    fn what_the_exporter_cannot_do_fails_start_up_naming_the_variable() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert!(error(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).contains("OTEL_EXPORTER_OTLP_PROTOCOL=http/json"));
        assert!(error(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).contains("OTEL_TRACES_EXPORTER=zipkin"));
        assert!(error(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).contains("not a URL"));
        assert!(error(&[endpoint, ("OTEL_TRACES_SAMPLER", "sometimes")]).contains("OTEL_TRACES_SAMPLER=sometimes"));
        let ratio = error(&[endpoint, ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")]);
        assert!(ratio.contains("OTEL_TRACES_SAMPLER_ARG") && ratio.contains("from 0 to 1"), "{ratio}");
        let fine = traces(&[endpoint, ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.25")]);
        assert!(fine.is_ok());
    }
}
