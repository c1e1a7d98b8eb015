//! The Kubernetes client every controller of the process uses: kube's own stack, with
//! `TCP_NODELAY` on its connections.
//!
//! kube-client 5 connects without `TCP_NODELAY` (kube-rs issue #2056, open), so Nagle's
//! algorithm holds the last segment of a request until the API server acknowledges the first,
//! and the API server delays that acknowledgement by up to 40 ms. Measured on the rotator's
//! writes (`docs/benchmarks.md`, "Nagle and the write's round trip"): 0.3–0.6 % of them took
//! 40–51 ms instead of ~1.4 ms, which was the rotator's whole p99 gap to the Go original (Go
//! sets `TCP_NODELAY` on every connection); with it, none over 16 ms in 2,610.
//!
//! The stack is kube's `ClientBuilder::try_from(Config)` rebuilt from its public parts (the
//! connector with kube's TLS configuration and timeouts, the base URI, the server-error retry,
//! authentication and extra headers), without its request-tracing layer. Two configurations
//! need parts kube keeps private — a proxy (`proxy-url`), and an exec plugin (which may hand out
//! a client certificate whose expiry kube tracks) — and get kube's own client, without
//! `TCP_NODELAY`. Once kube sets `TCP_NODELAY` itself, this module should go.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// A client for `config`, with `TCP_NODELAY` unless the configuration needs kube's own client
/// (see the module documentation).
pub fn client(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return Client::try_from(config);
    }
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // As kube does: only if none is installed; losing a race to another install is fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}

/// [`client`] for the inferred configuration (in the cluster, else the kubeconfig), as
/// `Client::try_default` infers it.
pub async fn infer() -> Result<Client, kube::Error> {
    client(Config::infer().await.map_err(kube::Error::InferConfig)?)
}
