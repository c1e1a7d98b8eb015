//! Where the binaries installed by `scripts/install-test-tools` live.

use std::path::PathBuf;

use crate::process::Error;

/// `$BLOCKWORK_TOOLS_DIR/bin/<name>` (default `~/.cache/blockwork-tools/bin/<name>`); when it is
/// missing while `scripts/install-test-tools` is installing, once that is done.
pub fn tool(name: &str) -> Result<PathBuf, Error> {
    let path = tools_dir().join("bin").join(name);
    if !path.exists() {
        wait_for_installation();
    }
    if path.exists() { Ok(path) } else { Err(Error::MissingTool { name: name.to_owned(), path }) }
}

/// Waits while `scripts/install-test-tools` installs tools: `scripts/test` installs the node's
/// (for the end-to-end suite, the trace collector, kube-controller-manager) beside the build and
/// the tests that do not need them.
pub fn wait_for_installation() {
    let Ok(lock) = std::fs::File::open(tools_dir().join(INSTALLING)) else { return };
    if lock.try_lock_shared().is_err() {
        eprintln!("testenv: waiting for scripts/install-test-tools to finish");
        let _ = lock.lock_shared();
    }
}

/// Held by `scripts/install-test-tools node` while it installs, when `scripts/test` runs it.
const INSTALLING: &str = "installing.lock";

fn tools_dir() -> PathBuf {
    match std::env::var_os("BLOCKWORK_TOOLS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
            home.join(".cache/blockwork-tools")
        }
    }
}

/// A free TCP port on 127.0.0.1 (the OS picks; the listener is closed before returning).
pub(crate) fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::Io)?;
    Ok(listener.local_addr().map_err(Error::Io)?.port())
}

const STATE_DIR_PREFIX: &str = "blockwork-testenv-";

/// This test binary's directory for etcd data and process logs. Test binaries end without
/// running destructors, so each start removes the directories of processes that are gone.
pub(crate) fn state_dir() -> Result<PathBuf, Error> {
    let temp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&temp) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(STATE_DIR_PREFIX)) else { continue };
            if pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
                // Best effort: another binary may be removing it at the same time.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = temp.join(format!("{STATE_DIR_PREFIX}{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(Error::Io)?;
    Ok(dir)
}
