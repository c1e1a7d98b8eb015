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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};

use crate::process::Error;

/// `ClusterIP:port` (or `host:port`) → the local servers behind it: a directory per routed
/// address, with a file per process that routed it listing its servers, so that every test
/// process sharing the control plane can route, and the proxy (in whichever process started the
/// API server) reads the routes as they are now. The servers of a process that has ended are
/// not routed to.
#[derive(Debug)]
struct Routes {
    dir: PathBuf,
    turn: AtomicUsize,
}

impl Routes {
    /// The next backend of a routed address; `None` for any other target.
    fn route(&self, target: &str) -> Option<SocketAddr> {
        let mut backends = Vec::new();
        for entry in std::fs::read_dir(self.dir.join(file_name(target))).ok()?.flatten() {
            let alive = entry
                .file_name()
                .to_str()
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| Path::new("/proc").join(pid.to_string()).exists());
            if alive {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                backends.extend(text.lines().filter_map(|line| line.parse::<SocketAddr>().ok()));
            }
        }
        backends.sort();
        (!backends.is_empty()).then(|| backends[self.turn.fetch_add(1, Ordering::Relaxed) % backends.len()])
    }
}

/// Routes `address` to `backends` for the proxy serving `dir`, as long as this process lives
/// (replacing what this process routed there before).
pub(crate) fn set_route(dir: &Path, address: &str, backends: &[SocketAddr]) -> Result<(), Error> {
    let routed = dir.join(file_name(address));
    std::fs::create_dir_all(&routed)?;
    let text: String = backends.iter().map(|backend| format!("{backend}\n")).collect();
    let pid = std::process::id();
    let temporary = routed.join(format!(".{pid}"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, routed.join(pid.to_string()))?;
    Ok(())
}

/// A route's directory: the address with anything but its characters replaced.
fn file_name(address: &str) -> String {
    address.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// The egress selector configuration that sends `cluster` traffic to `socket`.
pub(crate) fn configuration(socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
        socket.display()
    )
}

/// Serves the proxy on `socket` from a thread of its own, for the life of the process that
/// started the control plane (it outlives each test's runtime), with the routes in `routes`.
pub(crate) fn start(socket: &Path, routes: &Path) -> Result<(), Error> {
    let _ = std::fs::remove_file(socket);
    let routes = Arc::new(Routes { dir: routes.to_path_buf(), turn: AtomicUsize::new(0) });
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
    Ok(())
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
