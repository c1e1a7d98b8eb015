//! Programs a test runs as a user would: the test tools (`kubectl`, `helm`…), and the workspace's
//! own `blockwork` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::process::Error;
pub use crate::tools::{tool, wait_for_installation};

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
/// it for the `blockwork` package's own tests before any test runs; when it is missing or older
/// than a source it is built from, this builds it first (`cargo build -p blockwork`, the same
/// profile), so that a test never runs an old operator, also when run alone.
pub fn blockwork_binary() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(|| workspace_binary("blockwork", "blockwork").map_err(|e| e.to_string())).clone().map_err(Error::Setup)
}

/// The binary `bin` of the workspace's package `package`, of this build, as [`blockwork_binary`]
/// finds it: built first when it is missing or older than a source it is built from.
pub(crate) fn workspace_binary(package: &str, bin: &str) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let profile_dir =
        exe.parent().and_then(Path::parent).ok_or_else(|| Error::Setup(format!("{} has no target directory", exe.display())))?;
    let binary = profile_dir.join(bin);
    let Some(stale) = staleness(&binary, &sources(&profile_dir.join(format!("{bin}.d")))) else { return Ok(binary) };
    eprintln!("testenv: building {} ({stale})", binary.display());
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    build.current_dir(workspace()).args(["build", "-p", package, "--bin", bin]);
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        build.arg("--target-dir").arg(target_dir);
    }
    if !build.status()?.success() {
        return Err(Error::Setup(format!("`cargo build -p {package} --bin {bin}` failed; {} is {stale}", binary.display())));
    }
    Ok(binary)
}

/// The workspace root: two levels above this crate.
fn workspace() -> &'static Path {
    let testenv = Path::new(env!("CARGO_MANIFEST_DIR"));
    testenv.ancestors().nth(2).unwrap_or(testenv)
}

/// Crates the binary never links: they exist for tests.
const TEST_ONLY: [&str; 3] = ["e2e", "reliability", "testenv"];

/// What the binary is built from: the list in the dep-info `cargo build` writes beside it, or,
/// before there is one, every crate's manifest and `src/` but the test-only ones.
fn sources(dep_info: &Path) -> Vec<PathBuf> {
    if let Some(listed) = std::fs::read_to_string(dep_info).ok().and_then(|text| Some(text.lines().next()?.split_once(": ")?.1.to_owned()))
    {
        // Spaces in paths are escaped as `\ `.
        return listed.replace("\\ ", "\u{0}").split_whitespace().map(|source| PathBuf::from(source.replace('\u{0}', " "))).collect();
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates")).into_iter().flatten().flatten() {
        if !TEST_ONLY.iter().any(|name| entry.file_name() == *name) {
            found.push(entry.path().join("Cargo.toml"));
            rust_files(&entry.path().join("src"), &mut found);
        }
    }
    found
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for path in std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path()) {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Why `binary` must be built: missing, or older than one of `sources`; `None` when current.
fn staleness(binary: &Path, sources: &[PathBuf]) -> Option<String> {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else { return Some("not built".into()) };
    let modified = |source: &PathBuf| std::fs::metadata(source).and_then(|m| m.modified()).ok();
    sources.iter().find(|source| modified(source).is_some_and(|m| m > built)).map(|newer| format!("older than {}", newer.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn file_at(dir: &Path, name: &str, modified: SystemTime) -> PathBuf {
        let path = dir.join(name);
        std::fs::File::create(&path).unwrap().set_modified(modified).unwrap();
        path
    }

    #[test]
    fn a_binary_newer_than_its_sources_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let source = file_at(dir.path(), "main.rs", now - Duration::from_secs(60));
        let binary = file_at(dir.path(), "blockwork", now);
        assert_eq!(staleness(&binary, &[source]), None);
    }

    #[test]
    fn a_binary_older_than_one_source_or_missing_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let binary = file_at(dir.path(), "blockwork", now - Duration::from_secs(60));
        let sources = [file_at(dir.path(), "old.rs", now - Duration::from_secs(120)), file_at(dir.path(), "new.rs", now)];
        assert!(staleness(&binary, &sources).is_some_and(|why| why.contains("new.rs")));
        assert_eq!(staleness(&dir.path().join("missing"), &sources).as_deref(), Some("not built"));
    }

    #[test]
    fn sources_come_from_cargo_s_dep_info_with_escaped_spaces() {
        let dir = tempfile::tempdir().unwrap();
        let dep_info = dir.path().join("blockwork.d");
        std::fs::write(&dep_info, "/t/blockwork: /w/a.rs /w/my\\ dir/b.rs\n").unwrap();
        assert_eq!(sources(&dep_info), [PathBuf::from("/w/a.rs"), PathBuf::from("/w/my dir/b.rs")]);
    }

    #[test]
    fn without_dep_info_the_sources_are_the_linked_crates_but_not_the_test_only_ones() {
        let found = sources(Path::new("/nonexistent/blockwork.d"));
        assert!(found.iter().any(|p| p.ends_with("crates/blockwork/src/main.rs")), "{found:?}");
        assert!(found.iter().any(|p| p.ends_with("crates/runtime/Cargo.toml")), "{found:?}");
        assert!(!found.iter().any(|p| TEST_ONLY.iter().any(|name| p.to_string_lossy().contains(&format!("crates/{name}/")))), "{found:?}");
    }
}
