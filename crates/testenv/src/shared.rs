//! Processes shared by the test processes of one test binary, when each test runs in a process of
//! its own (cargo-nextest; see docs/adr/0002-test-environment.md).
//!
//! Under `cargo test` a test binary runs all its tests in one process, which starts the control
//! plane, the emulators and the collector once and shares them through statics. Under nextest
//! every test is a process, so those statics would start a control plane per test. Instead, the
//! first test process that needs a service starts a **keeper** (`blockwork-testenv-keeper`, a
//! binary of this crate) in the run's directory for this binary and service; the keeper starts
//! the service's processes as its own children (they die with it, `PR_SET_PDEATHSIG`), writes
//! how to reach them, and lives while test processes use it:
//!
//! - each test process that uses a service holds a shared `flock` on its `users` file until it
//!   exits: the kernel releases it however the process ends, `kill -9` included;
//! - the keeper exits once nobody has held `users` for [`IDLE`] (taking the lock exclusively
//!   first, so no test attaches to a keeper on its way out), and its children with it; a later
//!   test starts a new keeper.
//!
//! So nothing outlives the last test process of the run by more than [`IDLE`], and a killed run
//! leaves nothing behind either. The directory is `$TMPDIR/blockwork-testenv-run-<run id>/<binary
//! id>/<service>`; run directories without a live keeper are removed by later runs an hour on.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::process::Error;

/// How long a keeper outlives the last test process that used it.
pub const IDLE: Duration = Duration::from_secs(20);
/// Overrides [`IDLE`] (seconds), for the test of the keeper's own end.
pub const IDLE_VARIABLE: &str = "BLOCKWORK_TESTENV_KEEPER_IDLE_SECONDS";
/// How long a keeper may take to start its service (a control plane: etcd, kube-apiserver and
/// retries on a port clash).
const START_TIMEOUT: Duration = Duration::from_secs(240);
const RUN_DIR_PREFIX: &str = "blockwork-testenv-run-";
const KEEPER: &str = "blockwork-testenv-keeper";

/// A service a keeper can keep: what [`keep`] starts for each name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Service {
    /// A control plane, by the concern it is shared by ([`crate::control_plane::of`]).
    ControlPlane(String),
    Moto,
    AccountsMoto,
    Ministack,
    Jaeger,
}

impl Service {
    pub fn name(&self) -> String {
        match self {
            Self::ControlPlane(concern) => format!("control-plane-{concern}"),
            Self::Moto => "moto".into(),
            Self::AccountsMoto => "accounts-moto".into(),
            Self::Ministack => "ministack".into(),
            Self::Jaeger => "jaeger".into(),
        }
    }

    /// The installed tools its keeper starts: an attach waits for them to be installed before
    /// the keeper's start is timed (on a cold run the trace collector is built with the node's
    /// tools, after the first tests started).
    fn tools(&self) -> &'static [&'static str] {
        match self {
            Self::ControlPlane(_) => &["etcd", "kube-apiserver"],
            Self::Moto | Self::AccountsMoto => &["moto_server"],
            Self::Ministack => &["ministack"],
            Self::Jaeger => &["jaeger"],
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "moto" => Some(Self::Moto),
            "accounts-moto" => Some(Self::AccountsMoto),
            "ministack" => Some(Self::Ministack),
            "jaeger" => Some(Self::Jaeger),
            _ => name.strip_prefix("control-plane-").map(|concern| Self::ControlPlane(concern.to_owned())),
        }
    }
}

/// This binary's directory in the run when each test is a process of its own (nextest); `None`
/// when the tests of a binary share its process (`cargo test`, benches, `make dev`).
fn binary_dir() -> Option<PathBuf> {
    if std::env::var_os("NEXTEST_EXECUTION_MODE").is_none_or(|mode| mode != "process-per-test") {
        return None;
    }
    let run = std::env::var("NEXTEST_RUN_ID").ok()?;
    let binary = std::env::var("NEXTEST_BINARY_ID").ok()?;
    let clean = |text: &str| text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect::<String>();
    Some(std::env::temp_dir().join(format!("{RUN_DIR_PREFIX}{}", clean(&run))).join(clean(&binary)))
}

/// True when this process's tests get their shared services from keepers.
pub(crate) fn kept() -> bool {
    binary_dir().is_some()
}

/// Where a keeper keeps its service: its state, logs and locks.
fn service_dir(service: &Service) -> Result<PathBuf, Error> {
    let dir = binary_dir().ok_or_else(|| Error::Setup("not a test process of its own: nothing is kept".into()))?.join(service.name());
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// What a keeper writes once its service is ready.
#[derive(Debug, serde::Deserialize, Serialize)]
struct Ready<T> {
    keeper: u32,
    service: T,
}

/// The `users` locks this process holds: released by the kernel when it exits.
static USING: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// The description of `service` as its keeper wrote it, starting the keeper if there is none.
/// From now on until it exits, this process counts as one of the service's users.
pub(crate) async fn attach<T: DeserializeOwned + Send + 'static>(service: Service) -> Result<T, Error> {
    tokio::task::spawn_blocking(move || attach_blocking(&service))
        .await
        .map_err(|e| Error::Setup(format!("attaching to a kept service: {e}")))?
}

fn attach_blocking<T: DeserializeOwned>(service: &Service) -> Result<T, Error> {
    let dir = service_dir(service)?;
    remove_finished_runs();
    // Waits while a keeper on its way out holds it exclusively.
    let users = open(&dir.join("users"))?;
    users.lock_shared()?;
    USING.lock().unwrap_or_else(PoisonError::into_inner).push(users);

    let start = open(&dir.join("start.lock"))?;
    start.lock()?;
    if let Some(ready) = read_ready(&dir)? {
        return Ok(ready);
    }
    // A keeper alive but not ready was started by a test process that stopped waiting for it
    // (its own timeout, or killed): this one waits for that keeper rather than start a second.
    let mut child = if keeper_alive(&dir)? { None } else { Some(spawn_keeper(service, &dir)?) };
    for name in service.tools() {
        crate::tools::tool(name)?;
    }
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(ready) = read_ready(&dir)? {
            return Ok(ready);
        }
        let exited = match &mut child {
            Some(child) => child.try_wait()?.map(|status| status.to_string()),
            None => (!keeper_alive(&dir)?).then(|| "before it was ready".to_owned()),
        };
        if let Some(status) = exited {
            let log = std::fs::read_to_string(dir.join("keeper.log")).unwrap_or_default();
            return Err(Error::Setup(format!("the keeper of {} exited ({status}):\n{log}", service.name())));
        }
        if Instant::now() > deadline {
            return Err(Error::Setup(format!("the keeper of {} was not ready within {START_TIMEOUT:?}", service.name())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_keeper(service: &Service, dir: &Path) -> Result<std::process::Child, Error> {
    let keeper = keeper_binary()?;
    let log = File::create(dir.join("keeper.log"))?;
    Ok(Command::new(&keeper)
        .arg(service.name())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: nextest ends a test that runs too long by its process group.
        .process_group(0)
        .spawn()?)
}

/// Whether a keeper lives in `dir` (it holds `keeper.lock` while it lives).
fn keeper_alive(dir: &Path) -> Result<bool, Error> {
    Ok(open(&dir.join("keeper.lock"))?.try_lock().is_err())
}

/// The service's description if its keeper is alive (it holds `keeper.lock` while it lives).
fn read_ready<T: DeserializeOwned>(dir: &Path) -> Result<Option<T>, Error> {
    let Ok(text) = std::fs::read_to_string(dir.join("ready.json")) else { return Ok(None) };
    if !keeper_alive(dir)? {
        // A keeper that was killed: its processes died with it.
        return Ok(None);
    }
    let ready: Ready<T> = serde_json::from_str(&text).map_err(|e| Error::Setup(format!("{}: {e}", dir.join("ready.json").display())))?;
    Ok(Some(ready.service))
}

fn open(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)
}

/// The keeper's binary, beside this test binary's `deps/` (built with it by `cargo test
/// --workspace` and `cargo nextest run --workspace`; else built first).
fn keeper_binary() -> Result<PathBuf, Error> {
    crate::commands::workspace_binary("blockwork-testenv", KEEPER)
}

/// The keeper of the service in `dir`: `start` starts it (its processes this process's
/// children) and describes how to reach it; the description is written for the test processes,
/// and the keeper returns (its processes die with it) once none has used it for [`IDLE`].
pub async fn keep<D, A>(dir: &Path, start: impl Future<Output = Result<(D, A), Error>>) -> Result<(), Error>
where
    D: Serialize,
{
    let alive = open(&dir.join("keeper.lock"))?;
    alive.try_lock().map_err(|_| Error::Setup(format!("another keeper keeps {}", dir.display())))?;
    let idle = std::env::var(IDLE_VARIABLE).ok().and_then(|s| s.parse().ok()).map_or(IDLE, Duration::from_secs);

    let (description, kept) = start.await?;
    let ready = serde_json::to_string(&Ready { keeper: std::process::id(), service: description })
        .map_err(|e| Error::Setup(format!("describing {}: {e}", dir.display())))?;
    let temporary = dir.join("ready.json.tmp");
    std::fs::write(&temporary, ready)?;
    std::fs::rename(&temporary, dir.join("ready.json"))?;
    eprintln!("{KEEPER}: {} ready", dir.display());

    let users = open(&dir.join("users"))?;
    let mut unused_since = None;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if users.try_lock().is_err() {
            unused_since = None;
            continue;
        }
        let since = *unused_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= idle {
            // Still holding `users` exclusively: a test that comes now waits, then finds no
            // ready.json and starts a new keeper.
            std::fs::remove_file(dir.join("ready.json"))?;
            eprintln!("{KEEPER}: unused for {idle:?}, stopping");
            drop(kept);
            return Ok(());
        }
        users.unlock()?;
    }
}

/// How long a run's directory stays after its last change, so that a run still going (between
/// a test's directory and its lock, say) never loses it.
const FINISHED_AFTER: Duration = Duration::from_secs(3600);

/// Removes the directories of earlier runs whose keepers are all gone (the current run's stay).
fn remove_finished_runs() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let Some(current) = binary_dir().and_then(|dir| dir.parent().map(Path::to_path_buf)) else { return };
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
        for run in entries.flatten().map(|entry| entry.path()) {
            let is_run = run.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(RUN_DIR_PREFIX));
            let quiet = std::fs::metadata(&run).and_then(|m| m.modified()).is_ok_and(|m| m.elapsed().is_ok_and(|e| e > FINISHED_AFTER));
            if is_run && run != current && quiet && !keeper_alive_under(&run) {
                // Best effort: another run may be removing it too.
                let _ = std::fs::remove_dir_all(&run);
            }
        }
    });
}

/// True when a keeper or a test process holds a lock in `<run>/<binary>/<service>/`.
fn keeper_alive_under(run: &Path) -> bool {
    let entries = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path());
    entries(run).flat_map(|binary| entries(&binary)).any(|service| {
        ["keeper.lock", "start.lock", "users"].iter().any(|name| {
            let lock = service.join(name);
            lock.exists() && open(&lock).is_ok_and(|file| file.try_lock().is_err())
        })
    })
}
