//! Programs a test runs as a user would: the test tools (`kubectl`, `helm`…), and the workspace's
//! own `blockwork` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::process::Error;
pub use crate::tools::tool;

/// `kubectl args` against `kubeconfig` with `stdin` piped in; its output, success or not.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: &[u8]) -> Result<Output, Error> {
    let mut child = Command::new(tool("kubectl")?)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        std::io::Write::write_all(&mut input, stdin)?;
    }
    Ok(child.wait_with_output()?)
}

/// [`kubectl`] that must succeed: its stdout, or an error with its stderr.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: &[u8]) -> Result<String, Error> {
    let output = kubectl(kubeconfig, args, stdin)?;
    if !output.status.success() {
        return Err(Error::Setup(format!("kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr))));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The workspace's `blockwork` binary of this build (beside the test binary's `deps/`
/// directory), for a test that runs the operator as users do. `cargo test --workspace` builds
/// it with the `blockwork` package's integration tests; when it is missing or older than a
/// source it was built from (as its dep-info lists them), this builds it first with the same
/// profile, so a test never runs an old operator.
pub fn blockwork_binary() -> Result<PathBuf, Error> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| find_or_build_blockwork().map_err(|e| e.to_string())).clone().map_err(Error::Setup)
}

fn find_or_build_blockwork() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let profile_dir =
        exe.parent().and_then(Path::parent).ok_or_else(|| Error::Setup(format!("{} has no target directory", exe.display())))?;
    let binary = profile_dir.join("blockwork");
    if let Some(stale) = staleness(&binary, &profile_dir.join("blockwork.d")) {
        eprintln!("testenv: building {} ({stale})", binary.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "blockwork", "--bin", "blockwork"]);
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        if let Some(target_dir) = profile_dir.parent() {
            build.arg("--target-dir").arg(target_dir);
        }
        if !build.status()?.success() {
            return Err(Error::Setup(format!("`cargo build -p blockwork` failed; {} is {stale}", binary.display())));
        }
    }
    Ok(binary)
}

/// Why `binary` must be built: missing, or older than a source its dep-info names; `None` when
/// it is current.
fn staleness(binary: &Path, dep_info: &Path) -> Option<String> {
    let built = std::fs::metadata(binary).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
    if built == SystemTime::UNIX_EPOCH {
        return Some("not built".into());
    }
    let Ok(listed) = std::fs::read_to_string(dep_info) else { return Some("without its dep-info".into()) };
    // `<binary>: <source> <source> …`, spaces in paths escaped as `\ `.
    let sources = listed.lines().next()?.split_once(": ")?.1.replace("\\ ", "\u{0}");
    sources
        .split_whitespace()
        .map(|source| PathBuf::from(source.replace('\u{0}', " ")))
        .find(|source| std::fs::metadata(source).and_then(|m| m.modified()).is_ok_and(|modified| modified > built))
        .map(|newer| format!("older than {}", newer.display()))
}
