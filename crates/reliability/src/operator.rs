//! `blockwork run` as a process, as a user (or a Deployment) runs it: every controller, one
//! namespace, against the suite's emulators through their fault proxies. It can be killed with
//! SIGKILL and started again; its log (every incarnation, appended) and metrics are kept for the
//! leak scan.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

use crate::world::{ACCESS_KEY_ID, SECRET_ACCESS_KEY, World};

/// How to start the operator.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `blockwork` binary.
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub namespace: String,
    /// ACM and Route53 (the cert controller; the tenant's DNS).
    pub moto_endpoint: String,
    /// CloudFront and its ACM (the tenant controller).
    pub ministack_endpoint: String,
    /// `--dns-zones`.
    pub dns_zones: String,
    /// `--leader-elect`, with the Lease in the suite's namespace.
    pub leader_elect: bool,
}

impl Launch {
    pub fn new(binary: &Path, world: &World, kubeconfig: &Path, namespace: &str) -> Self {
        Self {
            binary: binary.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            moto_endpoint: world.moto.endpoint(),
            ministack_endpoint: world.ministack.endpoint(),
            dns_zones: format!("{}:{}", world.zone.name, world.zone.id),
            leader_elect: false,
        }
    }
}

/// One replica of the operator; restarted in place after a kill. Killed on drop.
pub struct Operator {
    launch: Launch,
    name: String,
    child: Option<Child>,
    health: u16,
    metrics: u16,
    log: PathBuf,
    /// Incarnations started so far.
    pub starts: usize,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts the first incarnation; `name` tells replicas apart in logs.
    pub fn start(launch: Launch, name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("blockwork.log");
        let mut operator = Self { launch, name: name.to_owned(), child: None, health: 0, metrics: 0, log, starts: 0, _dir: dir };
        operator.spawn()?;
        Ok(operator)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let (health, metrics) = (free_port()?, free_port()?);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let l = &self.launch;
        let mut command = Command::new(&l.binary);
        command
            .args(["run", "--namespaces", &l.namespace, "--log-level", "info"])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
            .args(["--health-probe-bind-address", &format!("127.0.0.1:{health}")])
            .args(["--webhook-bind-address", "127.0.0.1:0"])
            .args(["--aws-endpoint-url", &l.moto_endpoint, "--aws-region", "us-east-1", "--dns-zones", &l.dns_zones])
            .args(["--tenant-aws-endpoint-url", &l.ministack_endpoint, "--tenant-route53-endpoint-url", &l.moto_endpoint])
            .args(["--tenant-aws-region", "us-east-1"]);
        if l.leader_elect {
            command.args(["--leader-elect", "--leader-election-namespace", &l.namespace]);
        }
        command
            .env("KUBECONFIG", &l.kubeconfig)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
            .env("HOSTNAME", format!("{}-{}", self.name, self.starts))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        self.child = Some(command.spawn().with_context(|| format!("starting {}", l.binary.display()))?);
        self.health = health;
        self.metrics = metrics;
        self.starts += 1;
        Ok(())
    }

    /// SIGKILL, and waits until the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// A new incarnation (after [`Self::kill`]).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.spawn()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// An error if the process exited by itself.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => bail!("{} exited by itself ({status}); log tail:\n{}", self.name, self.log_tail(40)),
            Some(Err(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let logs = self.logs();
        let all: Vec<&str> = logs.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.get(self.health, "/readyz").await.is_ok_and(|(status, _)| status == 200) {
                return Ok(());
            }
            self.check_running()?;
            if Instant::now() > deadline {
                bail!("{} not ready after {timeout:?}; log tail:\n{}", self.name, self.log_tail(40));
            }
            sleep(Duration::from_millis(100)).await;
        }
    }

    /// The leader-election identity `/readyz` reports.
    pub async fn identity(&self) -> Option<String> {
        let (_, body) = self.get(self.health, "/readyz").await.ok()?;
        body.lines().find_map(|l| l.strip_prefix("identity: ")).map(str::to_owned)
    }

    /// The Prometheus text of `/metrics` (empty while the process is down).
    pub async fn metrics(&self) -> String {
        self.get(self.metrics, "/metrics").await.map(|(_, body)| body).unwrap_or_default()
    }

    async fn get(&self, port: u16, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut raw = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut raw)).await??;
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        Ok((status, body.to_owned()))
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
