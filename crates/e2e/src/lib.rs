//! Blockwork end to end on a real node: the node `scripts/node` brings up (etcd, kube-apiserver,
//! controller-manager, scheduler, containerd, kubelet, kube-proxy, CoreDNS), driven the way a
//! person drives it, with `kubectl` and `helm`.
//!
//! The suite itself is `tests/e2e.rs`; this library is what its scenarios share: the node's
//! lifecycle and the commands run against it.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

/// The repository's root (scripts, chart, examples): from `CARGO_MANIFEST_DIR` as cargo sets it
/// when it runs the suite (checkouts that share one target directory share the test binary, so
/// the path compiled into it may be another checkout's).
pub fn workspace() -> PathBuf {
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}

/// A node brought up by `scripts/node up`.
#[derive(Clone, Debug)]
pub struct Node {
    kubeconfig: PathBuf,
    ip: Ipv4Addr,
    audit_log: PathBuf,
}

impl Node {
    /// Brings the node up (a healthy node is reused; what a killed run left is removed first)
    /// and reads the env file the script prints.
    pub fn up() -> Result<Self> {
        let env = run(Command::new(workspace().join("scripts/node")).arg("up"), None).context("scripts/node up")?;
        let value = |name: &str| {
            env.lines()
                .find_map(|line| line.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("scripts/node up printed no {name}:\n{env}"))
        };
        Ok(Self {
            kubeconfig: value("KUBECONFIG")?.into(),
            ip: value("BLOCKWORK_NODE_IP")?.parse()?,
            audit_log: value("BLOCKWORK_NODE_AUDIT_LOG")?.into(),
        })
    }

    /// Stops the node and removes everything it made on the host; fails naming what is left.
    pub fn down() -> Result<()> {
        run(Command::new(workspace().join("scripts/node")).arg("down"), None).context("scripts/node down").map(|_| ())
    }

    /// The host's address on the pod network: servers the pods must reach listen here.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the audit log ends now: [`Node::writes_since`] reads what comes after.
    pub fn audit_mark(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.audit_log).map(|m| m.len()).unwrap_or(0))
    }

    /// The successful writes made with ServiceAccount tokens after `mark` (the API server's
    /// audit log): who, what verb, on which object.
    pub fn writes_since(&self, mark: u64) -> Result<Vec<Write>> {
        let log = std::fs::read(&self.audit_log).with_context(|| format!("reading {}", self.audit_log.display()))?;
        let tail = log.get(usize::try_from(mark)?..).unwrap_or_default();
        let mut writes = Vec::new();
        for line in String::from_utf8_lossy(tail).lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let code = event["responseStatus"]["code"].as_i64().unwrap_or(0);
            if event["stage"] != "ResponseComplete" || !(200..300).contains(&code) {
                continue;
            }
            let field = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
            let object = &event["objectRef"];
            writes.push(Write {
                user: field(&event["user"]["username"]),
                verb: field(&event["verb"]),
                resource: field(&object["resource"]),
                subresource: field(&object["subresource"]),
                namespace: field(&object["namespace"]),
                name: field(&object["name"]),
            });
        }
        Ok(writes)
    }

    /// Imports an image archive into the node's containerd.
    pub fn load_image(&self, archive: &Path) -> Result<()> {
        run(Command::new(workspace().join("scripts/node")).arg("load").arg(archive), None).map(|_| ())
    }

    /// `kubectl ARGS...` against the node as cluster admin; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        run(self.command("kubectl")?.args(args), None)
    }

    /// `kubectl ARGS...` with `stdin` (for `apply -f -`).
    pub fn kubectl_with_input(&self, args: &[&str], stdin: &str) -> Result<String> {
        run(self.command("kubectl")?.args(args), Some(stdin))
    }

    /// `kubectl get ARGS... -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let text = self.kubectl(&all)?;
        serde_json::from_str(&text).with_context(|| format!("kubectl {}: not JSON", all.join(" ")))
    }

    /// `helm ARGS...` against the node.
    pub fn helm(&self, args: &[&str]) -> Result<String> {
        run(self.command("helm")?.args(args), None)
    }

    fn command(&self, tool: &str) -> Result<Command> {
        let mut command = Command::new(blockwork_testenv::commands::tool(tool)?);
        command.env("KUBECONFIG", &self.kubeconfig).current_dir(workspace());
        Ok(command)
    }
}

/// A write the audit log recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Runs `command`; its stdout, or an error with its stderr.
fn run(command: &mut Command, stdin: Option<&str>) -> Result<String> {
    let described = format!("{command:?}");
    command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("starting {described}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!("{described} failed ({}):\n{}{}", output.status, String::from_utf8_lossy(&output.stderr), stdout);
    }
    Ok(stdout)
}

/// Polls `check` every half second until it returns `Some`, for at most `timeout`; the error
/// names `what` and the last thing `check` failed with.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("not yet");
    loop {
        match check() {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last = format!("{error:#}"),
        }
        if Instant::now() > deadline {
            bail!("{what}: not within {timeout:?} ({last})");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A namespace name `<prefix>-<random>`, unique per run.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or_default();
    format!("{prefix}-{:x}", nanos ^ std::process::id())
}
