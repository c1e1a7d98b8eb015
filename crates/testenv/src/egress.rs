//! The API server's way into the cluster network, in a test environment that has none.
//!
//! kube-apiserver sends its `cluster` traffic — admission and CRD conversion webhooks, whether
//! registered by Service or by URL — through its egress selector: here an HTTP CONNECT proxy on
//! a Unix socket (`--egress-selector-config-file`). The proxy connects a request for a
//! Service's `ClusterIP:port` to the local processes routed to it with
//! [`crate::control_plane::ControlPlane::route_service`], in turn, as kube-proxy would; any
//! other target (a webhook registered by URL, a kubelet) is connected as it is, as the API
//! server itself would without an egress selector. The API server still resolves the Service
//! and checks the serving certificate against `<service>.<namespace>.svc`, exactly as in a
//! cluster.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};

use crate::process::Error;

/// `ClusterIP:port` → the local processes serving it.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    targets: Mutex<HashMap<String, Vec<SocketAddr>>>,
    turn: AtomicUsize,
}

impl Routes {
    pub(crate) fn set(&self, cluster_address: String, backends: Vec<SocketAddr>) {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner).insert(cluster_address, backends);
    }

    /// The next backend of a routed Service address; `None` for any other target.
    fn route(&self, target: &str) -> Option<SocketAddr> {
        let targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        let backends = targets.get(target).filter(|b| !b.is_empty())?;
        Some(backends[self.turn.fetch_add(1, Ordering::Relaxed) % backends.len()])
    }
}

/// The egress selector configuration that sends `cluster` traffic to `socket`.
pub(crate) fn configuration(socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
        socket.display()
    )
}

/// Serves the proxy on `socket` from a thread of its own, for the life of the test binary (the
/// control plane outlives each test's runtime).
pub(crate) fn start(socket: &Path) -> Result<Arc<Routes>, Error> {
    let _ = std::fs::remove_file(socket);
    let routes = Arc::new(Routes::default());
    let listener = std::os::unix::net::UnixListener::bind(socket)?;
    listener.set_nonblocking(true)?;
    let serving = Arc::clone(&routes);
    std::thread::Builder::new().name("egress-proxy".into()).spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        runtime.block_on(async move {
            let Ok(listener) = UnixListener::from_std(listener) else { return };
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(tunnel(stream, Arc::clone(&serving)));
            }
        });
    })?;
    Ok(routes)
}

async fn tunnel(mut client: UnixStream, routes: Arc<Routes>) {
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    // Byte by byte up to the blank line: the TLS handshake that follows must not be read here.
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || !matches!(client.read(&mut byte).await, Ok(1)) {
            return;
        }
        head.push(byte[0]);
    }
    let request = String::from_utf8_lossy(&head);
    let target =
        request.lines().next().and_then(|line| line.strip_prefix("CONNECT ")).and_then(|rest| rest.split(' ').next()).unwrap_or("");
    let upstream = match routes.route(target) {
        Some(address) => TcpStream::connect(address).await,
        None => TcpStream::connect(target).await,
    };
    let Ok(mut upstream) = upstream else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}
