//! An HTTP proxy in front of the test kube-apiserver, for what an API server does to its clients
//! in production: watches cut off (an API server restarting, a load balancer's idle timeout), a
//! watch answered `410 Gone` because its resourceVersion is too old (etcd compacted it), `429
//! Too Many Requests` (API Priority and Fairness) and 5xx answers, and answers lost after the
//! request took effect. It records every write (method, path, field manager, answer) so a test can
//! count what a controller wrote, and counts reads and watches.
//!
//! Clients reach it over plain HTTP on loopback with [`KubeProxy::kubeconfig_path`]; it forwards
//! with the control plane's admin client (TLS and the admin token), streaming answers, so watches
//! pass through as they arrive. A restarted API server ([`ControlPlane::restart_apiserver`]) is
//! seen through it as the clients of a real one see it: connections closed, watches cut, requests
//! failing until it is back.
//!
//! [`ControlPlane::restart_apiserver`]: crate::control_plane::ControlPlane::restart_apiserver

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, BodyStream, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::control_plane::ControlPlane;
pub use crate::process::Error;

type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Which requests a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requests {
    Any,
    /// `?watch=true` requests.
    Watches,
    /// GETs that are not watches (gets and lists).
    Reads,
    /// POST, PUT, PATCH, DELETE.
    Writes,
}

impl Requests {
    fn matches(self, kind: RequestKind) -> bool {
        match self {
            Self::Any => true,
            Self::Watches => kind == RequestKind::Watch,
            Self::Reads => kind == RequestKind::Read,
            Self::Writes => kind == RequestKind::Write,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestKind {
    Watch,
    Read,
    Write,
}

/// What the proxy answers instead of the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiFault {
    /// `429 TooManyRequests` with `Retry-After: 1`, as API Priority and Fairness answers; not
    /// forwarded.
    TooManyRequests,
    /// A 5xx `Status`; not forwarded.
    ServerError(u16),
    /// Forwarded (it takes effect), then answered with a 500 `Status`: the client cannot tell
    /// whether its request took effect.
    LostResponse,
    /// A watch answered as the API server answers one whose resourceVersion was compacted away:
    /// `200` with one `ERROR` event carrying a `410 Expired` `Status`, then the end of the stream.
    /// Not forwarded. (On other requests: a `410 Gone` `Status`.)
    Gone,
}

impl ApiFault {
    pub fn label(&self) -> String {
        match self {
            Self::ServerError(code) => format!("ServerError({code})"),
            other => format!("{other:?}"),
        }
    }
}

/// A write the proxy passed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub method: String,
    /// The request path, e.g. `/apis/acm.blockwork.dev/v1/namespaces/a/certs/web/status`.
    pub path: String,
    /// The `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
    pub user_agent: Option<String>,
    /// The answer's status code (the injected one, for a faulted write).
    pub status: u16,
    /// Whether the API server saw it (false when a fault answered instead).
    pub forwarded: bool,
}

/// A share of the requests of a class failing at random, with faults drawn from a seeded
/// generator.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomApiFaults {
    pub requests: Requests,
    pub rate: f64,
    pub faults: Vec<ApiFault>,
    pub seed: u64,
}

struct Dice {
    faults: RandomApiFaults,
    rng: StdRng,
}

/// Faults for the next `left` requests of `requests` whose path contains `path` (any path for
/// `None`).
struct Injected {
    requests: Requests,
    path: Option<String>,
    fault: ApiFault,
    left: usize,
}

#[derive(Default)]
struct State {
    faults: Vec<Injected>,
    random: Option<Dice>,
    writes: Vec<Write>,
    counts: HashMap<&'static str, usize>,
    injected: HashMap<String, usize>,
}

/// Stops serving when dropped.
pub struct KubeProxy {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    cut: watch::Sender<u64>,
    server: JoinHandle<()>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for KubeProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl KubeProxy {
    /// Starts a proxy to `plane`'s API server on the current tokio runtime.
    pub async fn start(plane: &ControlPlane) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (cut, _) = watch::channel(0u64);
        let upstream = plane.client();
        let (shared, cuts) = (Arc::clone(&state), cut.clone());
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (state, upstream, cuts) = (Arc::clone(&shared), upstream.clone(), cuts.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let (state, upstream, cuts) = (Arc::clone(&state), upstream.clone(), cuts.subscribe());
                        async move { handle(request, &state, &upstream, cuts).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(address))?;
        Ok(Self { address, state, cut, server, kubeconfig, _dir: dir })
    }

    /// A kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client of the calling test's runtime that reaches the API server through this proxy
    /// (for the controller under test, while the test keeps its own direct client).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).map_err(|e| Error::Setup(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Setup(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| Error::Setup(e.to_string()))
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers the next `times` requests of `requests` with `fault`, in the order injected.
    pub fn inject(&self, requests: Requests, fault: ApiFault, times: usize) {
        self.lock().faults.push(Injected { requests, path: None, fault, left: times });
    }

    /// Answers the next `times` requests of `requests` whose path contains `path` with `fault`:
    /// one kind failing while the others work (its RBAC rule missing, its API down).
    pub fn inject_on_path(&self, requests: Requests, path: &str, fault: ApiFault, times: usize) {
        self.lock().faults.push(Injected { requests, path: Some(path.to_owned()), fault, left: times });
    }

    /// From now on, fails a share of the requests at random; replaces earlier random faults.
    pub fn inject_random(&self, faults: RandomApiFaults) {
        let rng = StdRng::seed_from_u64(faults.seed);
        self.lock().random = Some(Dice { faults, rng });
    }

    pub fn stop_random(&self) {
        self.lock().random = None;
    }

    /// Cuts every watch open now (the connection is closed mid-stream, as when an API server
    /// dies); later watches are not affected.
    pub fn cut_watches(&self) {
        self.cut.send_modify(|generation| *generation += 1);
    }

    /// Every write so far.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// Requests so far by kind: `watch`, `read`, `write`.
    pub fn counts(&self) -> HashMap<&'static str, usize> {
        self.lock().counts.clone()
    }

    /// How many requests got each fault (by [`ApiFault::label`]).
    pub fn injected(&self) -> HashMap<String, usize> {
        self.lock().injected.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn handle(
    request: Request<Incoming>,
    state: &Mutex<State>,
    upstream: &kube::Client,
    cuts: watch::Receiver<u64>,
) -> Result<Response<ProxyBody>, std::io::Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(std::io::Error::other)?.to_bytes();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let kind = match parts.method.as_str() {
        "GET" if query.split('&').any(|p| p == "watch=true" || p == "watch=1") => RequestKind::Watch,
        "GET" | "HEAD" | "OPTIONS" => RequestKind::Read,
        _ => RequestKind::Write,
    };
    let fault = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        let label = match kind {
            RequestKind::Watch => "watch",
            RequestKind::Read => "read",
            RequestKind::Write => "write",
        };
        *state.counts.entry(label).or_default() += 1;
        let path = parts.uri.path();
        let found = state.faults.iter_mut().find(|injected| {
            injected.left > 0 && injected.requests.matches(kind) && injected.path.as_deref().is_none_or(|fragment| path.contains(fragment))
        });
        let chosen = found.map(|injected| {
            injected.left -= 1;
            injected.fault.clone()
        });
        let fault = chosen.or_else(|| {
            let dice = state.random.as_mut()?;
            if !dice.faults.requests.matches(kind)
                || dice.faults.faults.is_empty()
                || !dice.rng.random_bool(dice.faults.rate.clamp(0.0, 1.0))
            {
                return None;
            }
            let index = dice.rng.random_range(0..dice.faults.faults.len());
            dice.faults.faults.get(index).cloned()
        });
        if let Some(fault) = &fault {
            *state.injected.entry(fault.label()).or_default() += 1;
        }
        fault
    };
    let record = |status: u16, forwarded: bool| {
        if kind == RequestKind::Write {
            let write = Write {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                field_manager: query.split('&').find_map(|p| p.strip_prefix("fieldManager=")).map(str::to_owned),
                user_agent: parts.headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).map(str::to_owned),
                status,
                forwarded,
            };
            state.lock().unwrap_or_else(PoisonError::into_inner).writes.push(write);
        }
    };
    let answer = match fault {
        Some(ApiFault::TooManyRequests) => {
            let mut response = status_response(429, "TooManyRequests", "kube proxy: too many requests, please try again later");
            response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            record(429, false);
            return Ok(response);
        }
        Some(ApiFault::ServerError(code)) => {
            record(code, false);
            return Ok(status_response(
                code,
                "InternalError",
                "kube proxy: an error on the server has prevented the request from succeeding",
            ));
        }
        Some(ApiFault::Gone) if kind == RequestKind::Watch => {
            let event = serde_json::json!({"type": "ERROR", "object": status_json(410, "Expired", "too old resource version: 1 (2)")});
            let mut response = Response::new(full(format!("{event}\n")));
            response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            return Ok(response);
        }
        Some(ApiFault::Gone) => {
            record(410, false);
            return Ok(status_response(410, "Gone", "kube proxy: the resource is gone"));
        }
        Some(ApiFault::LostResponse) => true,
        None => false,
    };

    let mut forwarded = http::Request::builder().method(parts.method.clone()).uri(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    for (name, value) in &parts.headers {
        if ![http::header::HOST, http::header::AUTHORIZATION, http::header::CONNECTION, http::header::CONTENT_LENGTH].contains(name) {
            forwarded = forwarded.header(name, value);
        }
    }
    let forwarded = forwarded.body(kube::client::Body::from(body)).map_err(std::io::Error::other)?;
    let response = match upstream.send(forwarded).await {
        Ok(response) => response,
        // The API server is down (restarting): close the connection, as a refused one would end.
        Err(error) => {
            record(0, true);
            return Err(std::io::Error::other(error));
        }
    };
    if answer {
        record(500, true);
        return Ok(status_response(500, "InternalError", "kube proxy: the answer was lost"));
    }
    record(response.status().as_u16(), true);
    let (parts_out, body) = response.into_parts();
    let body = if kind == RequestKind::Watch { cut_off(body, cuts) } else { UnsyncBoxBody::new(body.map_err(std::io::Error::other)) };
    Ok(Response::from_parts(parts_out, body))
}

/// A watch's stream, until [`KubeProxy::cut_watches`]: then it fails mid-stream (the client's
/// connection is closed without the end of the chunked body).
fn cut_off(body: kube::client::Body, mut cuts: watch::Receiver<u64>) -> ProxyBody {
    cuts.mark_unchanged();
    let frames = BodyStream::new(body).map(|frame| frame.map_err(std::io::Error::other));
    let stream = futures::stream::unfold((frames.boxed(), cuts, false), |(mut frames, mut cuts, done)| async move {
        if done {
            return None;
        }
        tokio::select! {
            biased;
            _ = cuts.changed() => {
                Some((Err(std::io::Error::other("kube proxy: watch cut")), (frames, cuts, true)))
            }
            frame = frames.next() => frame.map(|frame| (frame, (frames, cuts, false))),
        }
    });
    UnsyncBoxBody::new(StreamBody::new(stream))
}

fn status_json(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn status_response(code: u16, reason: &str, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(full(status_json(code, reason, message).to_string()));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn full(text: String) -> ProxyBody {
    UnsyncBoxBody::new(Full::new(Bytes::from(text)).map_err(|never| match never {}))
}

fn kubeconfig_yaml(address: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-proxy\n  cluster:\n    server: http://{address}\ncontexts:\n- name: kube-proxy\n  context:\n    cluster: kube-proxy\n    user: proxied\n    namespace: default\ncurrent-context: kube-proxy\nusers:\n- name: proxied\n  user:\n    token: through-the-kube-proxy\n"
    )
}
