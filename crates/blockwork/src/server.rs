//! The health probe server (`/healthz`, `/readyz`), the metrics server (`/metrics`), and the
//! webhook server's span per request ([`traced`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::shutdown::Shutdown;

/// A webhook request in a span of its own (`blockwork_runtime::trace::webhook`), with its
/// answer's status code.
pub async fn traced(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument as _;
    if !blockwork_runtime::trace::enabled() {
        return next.run(request).await;
    }
    let context: std::collections::BTreeMap<String, String> =
        [blockwork_runtime::trace::TRACEPARENT_ANNOTATION, blockwork_runtime::trace::TRACESTATE_ANNOTATION]
            .into_iter()
            .filter_map(|name| Some((name.to_owned(), request.headers().get(name)?.to_str().ok()?.to_owned())))
            .collect();
    let span = blockwork_runtime::trace::webhook(request.method().as_str(), request.uri().path(), &context);
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const STARTING: u8 = 0;
const READY: u8 = 1;
const STOPPING: u8 = 2;

/// What the probes report.
///
/// Readiness means "this process is serving": it comes once the controllers are started or,
/// with leader election, once this process is a candidate for the Lease. A replica that is not
/// the leader is therefore ready too: it is a hot standby (and will serve the webhooks that run
/// on every replica); `/readyz` says `leader: false` in its body so a person can tell the
/// replicas apart. Readiness ends when shutdown starts.
#[derive(Debug)]
pub struct Status {
    phase: AtomicU8,
    /// `Some(what)` while the webhook server waits for its certificate (self-managed
    /// certificates): not ready meanwhile, as the API server would not trust it.
    waiting_for: std::sync::Mutex<Option<String>>,
    /// `None` without leader election.
    identity: Option<String>,
    leader: Gauge,
}

impl Status {
    /// Registers `leader` (1 while this process runs the controllers) in `registry`.
    pub fn new(identity: Option<String>, registry: &mut Registry) -> Arc<Self> {
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this process holds the leader-election Lease (always, without leader election)",
            leader.clone(),
        );
        Arc::new(Self { phase: AtomicU8::new(STARTING), waiting_for: std::sync::Mutex::new(None), identity, leader })
    }

    pub fn set_ready(&self) {
        // Never go back from stopping to ready.
        let _ = self.phase.compare_exchange(STARTING, READY, Ordering::AcqRel, Ordering::Acquire);
    }

    pub fn set_stopping(&self) {
        self.phase.store(STOPPING, Ordering::Release);
    }

    /// Not ready until [`Status::set_webhook_certificate_loaded`]; `what` says what is awaited.
    pub fn wait_for_webhook_certificate(&self, what: String) {
        *self.waiting_for.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(what);
    }

    pub fn set_webhook_certificate_loaded(&self) {
        *self.waiting_for.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    fn readyz(&self) -> (StatusCode, String) {
        let waiting = self.waiting_for.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let mut body = match (self.phase.load(Ordering::Acquire), waiting) {
            (READY, None) => return (StatusCode::OK, format!("ok\n{}", self.leadership())),
            (READY, Some(what)) => format!("waiting for the webhook certificate: {what}\n"),
            (STARTING, _) => "starting\n".to_owned(),
            _ => "shutting down\n".to_owned(),
        };
        body.push_str(&self.leadership());
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }

    fn leadership(&self) -> String {
        match &self.identity {
            Some(identity) => format!("leader: {}\nidentity: {identity}\n", self.leader.get() == 1),
            None => "leader: true\nleader election: disabled\n".to_owned(),
        }
    }
}

pub fn health_router(status: Arc<Status>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|State(status): State<Arc<Status>>| async move { status.readyz() }))
        .with_state(status)
}

pub fn metrics_router(registry: Arc<Registry>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(registry)
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {e}\n")).into_response(),
    }
}

pub async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| format!("binding the {what} server to {addr}"))
}

/// Serves `router` on `listener` until `shutdown` fires, then finishes the open requests.
pub fn spawn(listener: TcpListener, router: Router, shutdown: Shutdown, what: &'static str) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        let addr = listener.local_addr().ok();
        tracing::info!(server = what, ?addr, "serving");
        axum::serve(listener, router).with_graceful_shutdown(shutdown.wait_owned()).await.with_context(|| format!("{what} server"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_phase_and_reports_leadership() {
        let mut registry = Registry::default();
        let status = Status::new(Some("me".to_owned()), &mut registry);
        assert_eq!(status.readyz().0, StatusCode::SERVICE_UNAVAILABLE);
        status.set_ready();
        assert_eq!(status.readyz(), (StatusCode::OK, "ok\nleader: false\nidentity: me\n".to_owned()));
        status.set_leader(true);
        assert_eq!(status.readyz(), (StatusCode::OK, "ok\nleader: true\nidentity: me\n".to_owned()));
        status.set_stopping();
        status.set_ready();
        assert_eq!(status.readyz().0, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn a_replica_waiting_for_its_webhook_certificate_is_not_ready() {
        let status = Status::new(None, &mut Registry::default());
        status.wait_for_webhook_certificate("Secret ops/hooks".to_owned());
        status.set_ready();
        assert_eq!(
            status.readyz(),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "waiting for the webhook certificate: Secret ops/hooks\nleader: true\nleader election: disabled\n".to_owned()
            )
        );
        status.set_webhook_certificate_loaded();
        assert_eq!(status.readyz().0, StatusCode::OK);
    }

    #[test]
    fn without_leader_election_readiness_says_so() {
        let status = Status::new(None, &mut Registry::default());
        status.set_ready();
        assert_eq!(status.readyz(), (StatusCode::OK, "ok\nleader: true\nleader election: disabled\n".to_owned()));
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text() {
        let mut registry = Registry::with_prefix("blockwork");
        let status = Status::new(None, &mut registry);
        status.set_leader(true);
        let response = metrics(State(Arc::new(registry))).await;
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        let body = String::from_utf8(body.to_vec()).expect("utf-8");
        assert!(body.contains("blockwork_leader 1\n"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }
}
