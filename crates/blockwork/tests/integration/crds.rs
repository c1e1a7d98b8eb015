//! The CRD YAML checked in under config/crd/ is what the Rust types generate.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&path).unwrap()))
        .collect()
}

#[test]
fn checked_in_crds_match_the_generated_ones() {
    let generated = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_blockwork")).args(["crds", "--output-dir"]).arg(generated.path()).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let checked_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/crd");
    let (expected, actual) = (yaml_files(generated.path()), yaml_files(&checked_in));
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        actual.keys().collect::<Vec<_>>(),
        "config/crd/ holds other CRDs than the code generates: run `make crds`"
    );
    for (name, yaml) in &expected {
        assert!(actual[name] == *yaml, "config/crd/{name} is stale: run `make crds`");
    }
}
