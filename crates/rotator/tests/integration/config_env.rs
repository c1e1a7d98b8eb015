//! Flags and environment: `ROTATOR_NAMESPACES` wins over the binary's `--namespaces`, all
//! namespaces when neither is set; the annotation prefix from flag or environment. The
//! environment is read in a child process (this test binary again), never changed here.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::process::Command;

use blockwork_rotator::{Config, RotatorArgs};
use clap::Parser as _;

#[derive(clap::Parser)]
struct Run {
    /// The binary's own flag.
    #[arg(long, value_delimiter = ',')]
    namespaces: Vec<String>,
    #[command(flatten)]
    rotator: RotatorArgs,
}

/// Runs `check` in a child with `env` set (and the rotator's variables otherwise unset). The
/// `child_*` tests check only in such a child and pass trivially otherwise.
fn in_child(check: &str, env: &[(&str, &str)]) {
    // libtest names a test by its module path without the crate's name.
    let check = format!("{}::{check}", module_path!().split_once("::").unwrap().1);
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", &check, "--nocapture", "--test-threads=1"]);
    for name in ["ROTATOR_NAMESPACES", "ROTATOR_ANNOTATION_PREFIX", "ROTATOR_MAX_TRACKED_TARGETS"] {
        command.env_remove(name);
    }
    command.env("ROTATOR_CONFIG_CHILD", "1").envs(env.iter().copied());
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && stdout.contains("1 passed"), "{check}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
}

fn is_child() -> bool {
    std::env::var_os("ROTATOR_CONFIG_CHILD").is_some()
}

#[test]
fn rotator_namespaces_from_the_environment_win_over_the_flag() {
    in_child("child_env_wins", &[("ROTATOR_NAMESPACES", "team-a, team-b"), ("ROTATOR_ANNOTATION_PREFIX", "keys.example.com")]);
}

#[test]
fn child_env_wins() {
    if !is_child() {
        return;
    }
    let run = Run::try_parse_from(["blockwork", "--namespaces", "from-flag"]).unwrap();
    let config = Config::new(&run.rotator, &run.namespaces, 1).unwrap();
    assert_eq!(config.namespaces, Some(vec!["team-a".to_owned(), "team-b".to_owned()]));
    assert_eq!(config.keys.source, "keys.example.com/source-secret");
    assert_eq!(RotatorArgs::from_env().unwrap(), run.rotator, "from_env reads the same");
}

#[test]
fn without_the_environment_the_flag_or_all_namespaces_apply() {
    in_child("child_flag_or_all", &[("ROTATOR_NAMESPACES", "")]);
}

#[test]
fn child_flag_or_all() {
    if !is_child() {
        return;
    }
    let run = Run::try_parse_from(["blockwork", "--namespaces", "from-flag"]).unwrap();
    let config = Config::new(&run.rotator, &run.namespaces, 1).unwrap();
    assert_eq!(config.namespaces, Some(vec!["from-flag".to_owned()]));
    assert_eq!(config.keys.prefix, "rotator.gw.ei.telekom.de", "the seed's prefix is the default");
    let run = Run::try_parse_from(["blockwork"]).unwrap();
    assert_eq!(Config::new(&run.rotator, &run.namespaces, 1).unwrap().namespaces, None);
}

#[test]
fn flags_override_the_environment() {
    in_child("child_flags", &[("ROTATOR_ANNOTATION_PREFIX", "from-env.example.com"), ("ROTATOR_MAX_TRACKED_TARGETS", "7")]);
}

#[test]
fn child_flags() {
    if !is_child() {
        return;
    }
    let run = Run::try_parse_from(["blockwork", "--rotator-annotation-prefix", "from-flag.example.com"]).unwrap();
    assert_eq!(run.rotator.annotation_prefix, "from-flag.example.com");
    assert_eq!(run.rotator.max_tracked_targets, 7);
    assert!(
        Run::try_parse_from(["blockwork", "--rotator-annotation-prefix", "Not Valid"])
            .map(|run| Config::new(&run.rotator, &[], 1))
            .unwrap()
            .is_err()
    );
}
