//! A real trace collector: Jaeger (v2, built on the OpenTelemetry Collector; built pinned from
//! the Go module proxy by `scripts/install-test-tools`), one per test binary, receiving OTLP
//! over HTTP and gRPC on free loopback ports and keeping traces in memory. Tests read the spans
//! back through its query API (`/api/v3/traces`, OTLP JSON) and assert the trees Blockwork
//! exports. Each operator under test names its own `OTEL_SERVICE_NAME` ([`Collector::service`]),
//! so tests sharing the collector read only their own spans.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::process::{Error, Process, accepts, retry_on_port_clash, wait_until};
use crate::shared::{Service, attach, kept};
use crate::tools::{free_port, state_dir, tool};

/// The collector of this test binary.
#[derive(Debug)]
pub struct Collector {
    host: Ipv4Addr,
    otlp_http: u16,
    otlp_grpc: u16,
    query: u16,
    /// `None` when a keeper runs it.
    _process: Option<Process>,
}

/// How the test processes reach a collector a keeper keeps.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
pub struct Description {
    host: Ipv4Addr,
    otlp_http: u16,
    otlp_grpc: u16,
    query: u16,
}

static JAEGER: OnceCell<Collector> = OnceCell::const_new();

/// The collector shared by the tests of this binary (kept for its test processes under nextest,
/// [`crate::shared`]).
pub async fn jaeger() -> Result<&'static Collector, Error> {
    JAEGER
        .get_or_try_init(|| async {
            if !kept() {
                return Collector::start(Ipv4Addr::LOCALHOST).await;
            }
            let Description { host, otlp_http, otlp_grpc, query } = attach::<Description>(Service::Jaeger).await?;
            Ok(Collector { host, otlp_http, otlp_grpc, query, _process: None })
        })
        .await
}

/// Jaeger's configuration: the OTLP receiver straight into the in-memory store, the query API,
/// nothing else (no sampling server, no metrics endpoint: no fixed port).
fn config(host: Ipv4Addr, otlp_grpc: u16, otlp_http: u16, query: u16, query_grpc: u16) -> String {
    format!(
        r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: "{host}:{query}"
    grpc:
      endpoint: "{host}:{query_grpc}"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "{host}:{otlp_grpc}"
      http:
        endpoint: "{host}:{otlp_http}"
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"#
    )
}

impl Collector {
    /// A collector of its own listening on `host` (the end-to-end suite binds the node's bridge
    /// address, where pods reach it); killed with this process.
    pub async fn start(host: Ipv4Addr) -> Result<Self, Error> {
        retry_on_port_clash(|| async {
            let (otlp_grpc, otlp_http, query, query_grpc) = (free_port()?, free_port()?, free_port()?, free_port()?);
            let dir = state_dir()?;
            let file = dir.join(format!("jaeger-{query}.yaml"));
            std::fs::write(&file, config(host, otlp_grpc, otlp_http, query, query_grpc))?;
            let jaeger = tool("jaeger").map_err(|_| {
                Error::Setup(
                    "jaeger is not installed: run `scripts/install-test-tools node` (scripts/test builds it while cargo compiles)".into(),
                )
            })?;
            let process = Process::start("jaeger", &jaeger, &[format!("--config={}", file.display())], &[], &dir)?;
            wait_until(&process, Duration::from_secs(60), || async { accepts(host, otlp_http).await && accepts(host, query).await })
                .await?;
            Ok(Self { host, otlp_http, otlp_grpc, query, _process: Some(process) })
        })
        .await
    }

    /// How the test processes reach it (a keeper's, [`crate::shared`]).
    pub fn description(&self) -> Description {
        Description { host: self.host, otlp_http: self.otlp_http, otlp_grpc: self.otlp_grpc, query: self.query }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP over HTTP/protobuf.
    pub fn otlp_http(&self) -> String {
        format!("http://{}:{}", self.host, self.otlp_http)
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP over gRPC.
    pub fn otlp_grpc(&self) -> String {
        format!("http://{}:{}", self.host, self.otlp_grpc)
    }

    /// A service name of the test's own (`blockwork-<tag>-<random>`), for `OTEL_SERVICE_NAME`.
    pub fn service(tag: &str) -> String {
        format!("blockwork-{tag}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
    }

    /// Every span `service` exported in the last hour, as the collector stores them.
    pub async fn spans(&self, service: &str) -> Result<Vec<Span>, Error> {
        let now = jiff::Timestamp::now();
        let from = now - jiff::SignedDuration::from_hours(1);
        let path = format!(
            "/api/v3/traces?query.service_name={service}&query.start_time_min={}&query.start_time_max={}&query.num_traces=1000",
            from.strftime("%Y-%m-%dT%H:%M:%S%.fZ"),
            (now + jiff::SignedDuration::from_mins(1)).strftime("%Y-%m-%dT%H:%M:%S%.fZ"),
        );
        let (status, body) = self.get(&path).await?;
        if status == 404 {
            // Jaeger answers 404 "trace not found" when nothing matches yet.
            return Ok(Vec::new());
        }
        if status != 200 {
            return Err(Error::Setup(format!("the collector answered {status} to {path}: {body}")));
        }
        let json: Value = serde_json::from_str(&body).map_err(|e| Error::Setup(format!("the collector's answer is not JSON: {e}")))?;
        Ok(spans_of(&json))
    }

    async fn get(&self, path: &str) -> Result<(u16, String), Error> {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let uri: hyper::Uri = format!("http://{}:{}{path}", self.host, self.query).parse().map_err(|e| Error::Setup(format!("{e}")))?;
        let response = tokio::time::timeout(Duration::from_secs(10), client.get(uri))
            .await
            .map_err(|_| Error::Setup("the collector did not answer within 10 s".into()))?
            .map_err(|e| Error::Setup(format!("GET {path} from the collector: {e}")))?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(|e| Error::Setup(format!("reading the collector's answer: {e}")))?;
        Ok((status, String::from_utf8_lossy(&body.to_bytes()).into_owned()))
    }
}

/// One span as the collector stored it.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root (or a child of a span another service exported: its `traceparent`).
    pub parent_span_id: String,
    pub name: String,
    /// Every attribute's value as text (`"true"`, `"3"`, `"0.25"`).
    pub attributes: BTreeMap<String, String>,
    /// (trace id, span id, the link's `blockwork.link` attribute) of each link.
    pub links: Vec<(String, String, String)>,
    /// The names of its events.
    pub events: Vec<String>,
    /// `STATUS_CODE_ERROR` when it failed.
    pub status: String,
    pub status_message: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

impl Span {
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }

    pub fn is_error(&self) -> bool {
        self.status == "STATUS_CODE_ERROR"
    }

    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.end_unix_nano.saturating_sub(self.start_unix_nano))
    }
}

/// The spans of an OTLP JSON document (`{"result": {"resourceSpans": …}}`, or the document itself).
fn spans_of(json: &Value) -> Vec<Span> {
    let root = json.get("result").unwrap_or(json);
    let mut spans = Vec::new();
    for resource in root.get("resourceSpans").and_then(Value::as_array).into_iter().flatten() {
        for scope in resource.get("scopeSpans").and_then(Value::as_array).into_iter().flatten() {
            for span in scope.get("spans").and_then(Value::as_array).into_iter().flatten() {
                spans.push(span_of(span));
            }
        }
    }
    spans
}

fn span_of(span: &Value) -> Span {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or_default().to_owned();
    let number = |value: Option<&Value>| match value {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    let links = span.get("links").and_then(Value::as_array).into_iter().flatten();
    Span {
        trace_id: text(span.get("traceId")),
        span_id: text(span.get("spanId")),
        parent_span_id: text(span.get("parentSpanId")),
        name: text(span.get("name")),
        attributes: attributes(span.get("attributes")),
        links: links
            .map(|link| {
                let kind = attributes(link.get("attributes")).remove("blockwork.link").unwrap_or_default();
                (text(link.get("traceId")), text(link.get("spanId")), kind)
            })
            .collect(),
        events: span.get("events").and_then(Value::as_array).into_iter().flatten().map(|e| text(e.get("name"))).collect(),
        status: status_code(span.get("status").and_then(|s| s.get("code"))),
        status_message: text(span.get("status").and_then(|s| s.get("message"))),
        start_unix_nano: number(span.get("startTimeUnixNano")),
        end_unix_nano: number(span.get("endTimeUnixNano")),
    }
}

/// A status code as its enum's name, whether the JSON gives the name or the number.
fn status_code(code: Option<&Value>) -> String {
    match code {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(1) => "STATUS_CODE_OK".to_owned(),
            Some(2) => "STATUS_CODE_ERROR".to_owned(),
            _ => "STATUS_CODE_UNSET".to_owned(),
        },
        Some(Value::String(s)) => s.clone(),
        _ => "STATUS_CODE_UNSET".to_owned(),
    }
}

/// OTLP JSON attributes (`[{"key": …, "value": {"stringValue": …}}]`) as text.
fn attributes(value: Option<&Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for attribute in value.and_then(Value::as_array).into_iter().flatten() {
        let Some(key) = attribute.get("key").and_then(Value::as_str) else { continue };
        let value = attribute.get("value").and_then(Value::as_object).and_then(|v| v.values().next()).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        out.insert(key.to_owned(), value.unwrap_or_default());
    }
    out
}

/// The spans of one trace, as a tree: each span's children by parent span id.
#[derive(Debug)]
pub struct Tree<'a> {
    pub spans: Vec<&'a Span>,
}

impl<'a> Tree<'a> {
    /// The spans of `trace_id` among `spans`.
    pub fn of(spans: &'a [Span], trace_id: &str) -> Self {
        Self { spans: spans.iter().filter(|s| s.trace_id == trace_id).collect() }
    }

    pub fn children(&self, parent: &Span) -> Vec<&'a Span> {
        let mut children: Vec<&Span> = self.spans.iter().copied().filter(|s| s.parent_span_id == parent.span_id).collect();
        children.sort_by_key(|s| s.start_unix_nano);
        children
    }

    /// Every span below `parent`, at any depth.
    pub fn descendants(&self, parent: &Span) -> Vec<&'a Span> {
        let mut out = Vec::new();
        let mut queue = vec![parent];
        while let Some(next) = queue.pop() {
            for child in self.children(next) {
                out.push(child);
                queue.push(child);
            }
        }
        out
    }

    /// An indented outline (name and a few attributes), for a failure's message and the docs.
    pub fn outline(&self) -> String {
        let ids: Vec<&str> = self.spans.iter().map(|s| s.span_id.as_str()).collect();
        let mut roots: Vec<&Span> = self.spans.iter().copied().filter(|s| !ids.contains(&s.parent_span_id.as_str())).collect();
        roots.sort_by_key(|s| s.start_unix_nano);
        let mut out = String::new();
        for root in roots {
            self.outline_from(root, 0, &mut out);
        }
        out
    }

    fn outline_from(&self, span: &Span, depth: usize, out: &mut String) {
        let keys = [
            "blockwork.trigger",
            "blockwork.queued_s",
            "blockwork.outcome",
            "blockwork.requeue_after_s",
            "blockwork.aws.attempt",
            "blockwork.aws.quota_wait_s",
            "error.type",
        ];
        let shown: Vec<String> = keys.iter().filter_map(|k| span.attribute(k).map(|v| format!("{k}={v}"))).collect();
        out.push_str(&format!("{}{} ({:?}) {}\n", "  ".repeat(depth), span.name, span.duration(), shown.join(" ")));
        for child in self.children(span) {
            self.outline_from(child, depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_json_becomes_spans_with_their_attributes_and_links() {
        let json = serde_json::json!({"result": {"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "t1", "spanId": "s2", "parentSpanId": "s1", "name": "ACM/DescribeCertificate",
            "startTimeUnixNano": "1000", "endTimeUnixNano": "3000",
            "attributes": [{"key": "rpc.method", "value": {"stringValue": "DescribeCertificate"}},
                           {"key": "blockwork.aws.attempt", "value": {"intValue": "2"}},
                           {"key": "blockwork.aws.throttled", "value": {"boolValue": true}}],
            "links": [{"traceId": "t0", "spanId": "s0", "attributes": [{"key": "blockwork.link", "value": {"stringValue": "trigger"}}]}],
            "events": [{"name": "tokens granted"}],
            "status": {"code": 2, "message": "throttled"}
        }]}]}]}});
        let spans = spans_of(&json);
        assert_eq!(spans.len(), 1);
        let span = &spans[0];
        assert_eq!((span.trace_id.as_str(), span.parent_span_id.as_str(), span.name.as_str()), ("t1", "s1", "ACM/DescribeCertificate"));
        assert_eq!(span.attribute("blockwork.aws.attempt"), Some("2"));
        assert_eq!(span.attribute("blockwork.aws.throttled"), Some("true"));
        assert_eq!(span.links, [("t0".to_owned(), "s0".to_owned(), "trigger".to_owned())]);
        assert_eq!(span.events, ["tokens granted"]);
        assert!(span.is_error());
        assert_eq!(span.duration(), Duration::from_nanos(2000));
    }
}
