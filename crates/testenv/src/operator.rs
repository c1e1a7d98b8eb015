//! `blockwork run` as a child process, as a user (or a Deployment) runs it: against the test's
//! control plane with the emulators' test credentials, its health, metrics and webhook servers
//! on free loopback ports, webhooks served with a self-signed certificate from a directory (as
//! cert-manager writes one) unless the test asks for self-managed certificates. Its log (every
//! incarnation: a port clash or [`Operator::restart`] starts it again) is kept; it can be killed
//! with SIGKILL, and it dies with its owner.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::harness::{fail, poll};
use crate::process::{Error, Process, accepts};

/// What the emulators accept as credentials.
pub const AWS_CREDENTIALS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];

/// One replica of the operator; killed on drop.
pub struct Operator {
    binary: PathBuf,
    kubeconfig: PathBuf,
    args: Vec<String>,
    /// Environment of every incarnation, after (so over) [`AWS_CREDENTIALS`].
    envs: Vec<(String, String)>,
    /// Tells replicas apart: each incarnation's `HOSTNAME` (the leader-election identity's
    /// prefix) is `<name>-<incarnation>`.
    name: Option<String>,
    /// The webhook server's port (fixed across restarts: registrations name it).
    pub webhook: u16,
    /// The health probe server's port (`/readyz`, `/healthz`) of the current incarnation.
    pub health: u16,
    /// The metrics server's port of the current incarnation.
    pub metrics: u16,
    /// Incarnations started so far.
    starts: usize,
    process: Option<Process>,
    dir: tempfile::TempDir,
}

/// An HTTP answer of one of the operator's servers.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl Operator {
    /// Prepared, not started: its directory holds the webhook certificate (`tls.crt`, `tls.key`,
    /// `ca.crt`) that [`Self::manifests`] point registrations at.
    pub fn new(binary: &Path, kubeconfig: &Path) -> Result<Self, Error> {
        let dir = tempfile::tempdir()?;
        let tls = blockwork_webhook::TlsMaterial::self_signed(&["127.0.0.1"]).map_err(|e| Error::Setup(e.to_string()))?;
        std::fs::write(dir.path().join("tls.crt"), &tls.cert_pem)?;
        std::fs::write(dir.path().join("tls.key"), &tls.key_pem)?;
        std::fs::write(dir.path().join("ca.crt"), &tls.ca_pem)?;
        Ok(Self {
            binary: binary.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            args: Vec::new(),
            envs: Vec::new(),
            name: None,
            webhook: free_port()?,
            health: 0,
            metrics: 0,
            starts: 0,
            process: None,
            dir,
        })
    }

    /// What `blockwork command args` prints (`crds`, `webhooks`) for registrations that reach
    /// this replica's webhook server with its certificate's CA.
    pub fn manifests(&self, command: &str, args: &[&str]) -> Result<String, Error> {
        let output = std::process::Command::new(&self.binary)
            .arg(command)
            .args(args)
            .args(["--webhook-url", &format!("https://127.0.0.1:{}", self.webhook), "--webhook-ca-file"])
            .arg(self.dir.path().join("ca.crt"))
            .output()?;
        if !output.status.success() {
            return Err(Error::Setup(format!("blockwork {command} {args:?}: {}", String::from_utf8_lossy(&output.stderr))));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Arguments of `blockwork run`, as `Command::args`.
    pub fn args(mut self, args: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An environment variable of every incarnation (it overrides [`AWS_CREDENTIALS`]).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.envs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Names the replica: its incarnations' `HOSTNAME` is `<name>-<incarnation>`, as a pod's
    /// name would be, so logs and the Lease's holder tell replicas and restarts apart.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// `blockwork run` with the arguments given, the servers' addresses and (unless the
    /// arguments choose self-managed certificates) `--webhook-cert-dir` added.
    pub fn start(mut self) -> Result<Self, Error> {
        self.restart()?;
        Ok(self)
    }

    /// A new incarnation (the first, or after [`Self::kill`] or an exit), on new health and
    /// metrics ports.
    pub fn restart(&mut self) -> Result<(), Error> {
        let (health, metrics) = (free_port()?, free_port()?);
        let mut args = vec!["run".to_owned()];
        args.extend(self.args.iter().cloned());
        args.extend(["--health-probe-bind-address", &format!("127.0.0.1:{health}")].map(String::from));
        args.extend(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")].map(String::from));
        args.extend(["--webhook-bind-address", &format!("127.0.0.1:{}", self.webhook)].map(String::from));
        if !self.args.iter().any(|a| a == "--webhook-certificate-secret") {
            args.extend(["--webhook-cert-dir".to_owned(), self.dir.path().to_string_lossy().into_owned()]);
        }
        let mut envs: Vec<(&str, String)> = vec![("KUBECONFIG", self.kubeconfig.to_string_lossy().into_owned())];
        envs.extend(AWS_CREDENTIALS.map(|(name, value)| (name, value.to_owned())));
        envs.extend(self.envs.iter().map(|(name, value)| (name.as_str(), value.clone())));
        let name = self.incarnation(self.starts);
        if self.name.is_some() {
            envs.push(("HOSTNAME", name.clone()));
        }
        self.process = Some(Process::start(&name, &self.binary, &args, &envs, self.dir.path())?);
        (self.health, self.metrics) = (health, metrics);
        self.starts += 1;
        Ok(())
    }

    /// SIGKILL (`kill -9`, as a node dies), and waits until the process is gone.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Incarnations started so far.
    pub fn starts(&self) -> usize {
        self.starts
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    /// SIGINT, as a pod is stopped (through `kill`: no `unsafe`).
    pub fn interrupt(&self) -> Result<(), Error> {
        let pid = self.pid().ok_or_else(|| Error::Setup("blockwork is not running".into()))?;
        let status = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status()?;
        if !status.success() {
            return Err(Error::Setup(format!("kill -INT {pid}: {status}")));
        }
        Ok(())
    }

    /// Until the process exits; how it ended.
    pub async fn wait_exit(&self, timeout: Duration) -> Result<std::process::ExitStatus, Error> {
        let process = self.process.as_ref().ok_or_else(|| Error::Setup("blockwork is not running".into()))?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = process.exit_status()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Setup(format!("blockwork still runs after {timeout:?}; its log:\n{}", self.logs())));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An error (with the log's tail) if the process exited by itself.
    pub fn check_running(&self) -> Result<(), Error> {
        self.process.as_ref().map_or(Ok(()), Process::check_running)
    }

    /// The log of every incarnation, oldest first.
    pub fn logs(&self) -> String {
        (0..self.starts)
            .map(|n| std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.incarnation(n)))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("--- restarted ---\n")
    }

    /// The `n`th incarnation's name (its log file's, and its `HOSTNAME` when [`Self::named`]).
    fn incarnation(&self, n: usize) -> String {
        format!("{}-{n}", self.name.as_deref().unwrap_or("blockwork"))
    }

    /// Until the webhook server accepts connections.
    pub async fn wait_listening(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait(timeout, async |operator| accepts(std::net::Ipv4Addr::LOCALHOST, operator.webhook).await).await
    }

    /// Until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait(timeout, async |operator| operator.get(operator.health, "/readyz").await.is_ok_and(|r| r.status == 200)).await
    }

    /// Until `/readyz` says this replica leads. The Lease names the holder as soon as the API
    /// server accepts the acquiring write; the process marks itself leader when that write
    /// returns, a moment later.
    pub async fn wait_leading(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait(timeout, async |operator| operator.get(operator.health, "/readyz").await.is_ok_and(|r| r.body.contains("leader: true")))
            .await
    }

    /// Polls `ready` until it holds, the process exits, or `timeout` passes. A process that
    /// could not bind a port picked as free (a parallel process took it first) starts again on
    /// new health and metrics ports.
    async fn wait(&mut self, timeout: Duration, ready: impl AsyncFn(&Self) -> bool) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut clashes = 0;
        loop {
            match self.check_running() {
                Err(Error::Exited { tail, .. }) if clashes < 3 && tail.to_ascii_lowercase().contains("address already in use") => {
                    clashes += 1;
                    self.restart()?;
                }
                Err(exited) => return Err(exited),
                Ok(()) if ready(self).await => return Ok(()),
                Ok(()) if tokio::time::Instant::now() > deadline => {
                    return Err(self
                        .process
                        .as_ref()
                        .map_or_else(|| Error::Setup("blockwork is not running".into()), |p| p.not_ready(timeout)));
                }
                Ok(()) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// [`crate::harness::eventually`], with this replica's log in the failure.
    pub async fn eventually<T>(&self, what: &str, timeout: Duration, check: impl AsyncFnMut() -> Result<T, String>) -> T {
        poll(timeout, check)
            .await
            .unwrap_or_else(|seen| fail(format!("timed out waiting for {what}; last seen: {seen}\n--- blockwork log ---\n{}", self.logs())))
    }

    /// The leader-election identity `/readyz` reports.
    pub async fn identity(&self) -> Option<String> {
        let body = self.get(self.health, "/readyz").await.ok()?.body;
        body.lines().find_map(|l| l.strip_prefix("identity: ")).map(str::to_owned)
    }

    /// The Prometheus text of `/metrics` (empty while the process is down).
    pub async fn metrics(&self) -> String {
        self.get(self.metrics, "/metrics").await.map(|r| r.body).unwrap_or_default()
    }

    /// GET over plain HTTP/1.1 from one of the operator's servers.
    pub async fn get(&self, port: u16, path: &str) -> std::io::Result<Response> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut raw = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut raw)).await??;
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
        let headers = lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())).collect();
        Ok(Response { status, headers, body: body.to_owned() })
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
