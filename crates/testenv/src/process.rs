//! Child processes that die with the test binary, also when it panics or is killed.
//!
//! Each child runs under `setpriv --pdeathsig KILL`: the kernel kills it when the thread that
//! spawned it exits. Test threads come and go with each test, so every child is spawned from one
//! thread that lives as long as the process.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{name} is not installed at {path}: run scripts/install-test-tools")]
    MissingTool { name: String, path: PathBuf },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("{name} exited early ({status}); its log is {log}:\n{tail}")]
    Exited { name: String, status: String, log: PathBuf, tail: String },
    #[error("{name} was not ready after {timeout:?}; its log is {log}:\n{tail}")]
    NotReady { name: String, timeout: Duration, log: PathBuf, tail: String },
    #[error("{0}")]
    Setup(String),
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut command, reply) in receiver {
                    let _ = reply.send(command.spawn());
                }
                // The sender lives in a static, so this thread never ends: its children live on.
            })
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("testenv: cannot start the spawner thread: {e}"));
        sender
    })
}

/// A started child process with its log file.
#[derive(Debug)]
pub(crate) struct Process {
    pub name: String,
    pub log: PathBuf,
    child: std::sync::Mutex<Child>,
}

impl Process {
    /// Starts `program args...`, logging stdout and stderr to `<log_dir>/<name>.log`.
    pub fn start(name: &str, program: &Path, args: &[String], envs: &[(&str, String)], log_dir: &Path) -> Result<Self, Error> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let mut command = Command::new("setpriv");
        command.arg("--pdeathsig").arg("KILL").arg("--").arg(program).args(args);
        command.envs(envs.iter().map(|(k, v)| (*k, v.as_str())));
        command.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        let (reply, response) = mpsc::channel();
        spawner().send((command, reply)).map_err(|_| Error::Setup("the spawner thread is gone".into()))?;
        let child = response.recv().map_err(|_| Error::Setup("the spawner thread is gone".into()))??;
        Ok(Self { name: name.to_owned(), log, child: std::sync::Mutex::new(child) })
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner).id()
    }

    /// An error if the process has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                Err(Error::Exited { name: self.name.clone(), status: status.to_string(), log: self.log.clone(), tail: self.log_tail() })
            }
        }
    }

    /// How the process ended; `None` while it runs.
    pub fn exit_status(&self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner).try_wait()
    }

    pub fn not_ready(&self, timeout: Duration) -> Error {
        Error::NotReady { name: self.name.clone(), timeout, log: self.log.clone(), tail: self.log_tail() }
    }

    /// The last lines of the log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// A process that goes with its owner (one a test started for itself); the shared ones live in
/// statics and die with the test binary.
impl Drop for Process {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Polls `ready` every 100 ms until it is true, the process exits, or `timeout` passes.
pub(crate) async fn wait_until<F, Fut>(process: &Process, timeout: Duration, mut ready: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        process.check_running()?;
        if ready().await {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(process.not_ready(timeout));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// True when something accepts TCP connections on `host`:`port`.
pub(crate) async fn accepts(host: std::net::Ipv4Addr, port: u16) -> bool {
    tokio::net::TcpStream::connect((host, port)).await.is_ok()
}

/// Runs `start` again (with new free ports) when what it started could not bind its port: a
/// port picked as free can be taken by a parallel process before the child binds it.
pub(crate) async fn retry_on_port_clash<T, F, Fut>(mut start: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut attempts = 0;
    loop {
        match start().await {
            Err(Error::Exited { tail, .. }) if attempts < 3 && tail.to_ascii_lowercase().contains("address already in use") => {
                attempts += 1
            }
            other => return other,
        }
    }
}
