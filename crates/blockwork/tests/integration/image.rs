#![allow(clippy::unwrap_used, clippy::panic)]
//! `scripts/build-image` packs this test build's binary into an OCI archive as the node of
//! issue 12 imports it: one linux/amd64 image named `localhost/blockwork:<version>`, non-root,
//! `blockwork run` by default, with the binary, the glibc libraries it links and the CA bundle.
//! Needs buildah and root (the script runs the binary in a chroot of the image's files).

use std::path::Path;

use serde_json::Value;

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    std::fs::read(layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))).unwrap()
}

#[test]
fn the_image_archive_holds_a_runnable_non_root_blockwork() {
    if std::process::Command::new("buildah").arg("--version").output().is_err() {
        eprintln!("skipped: buildah is not installed (scripts/install-test-tools installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("blockwork.oci.tar");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-image");
    let output = std::process::Command::new(script)
        .args(["--binary", env!("CARGO_BIN_EXE_blockwork"), "--output", archive.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().last(), archive.to_str(), "the archive's path is the last line");

    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    assert!(std::process::Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&layout).status().unwrap().success());
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    let reference = format!("localhost/blockwork:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(manifests[0]["annotations"]["org.opencontainers.image.ref.name"], reference.as_str());

    let manifest: Value = serde_json::from_slice(&blob(&layout, manifests[0]["digest"].as_str().unwrap())).unwrap();
    let config: Value = serde_json::from_slice(&blob(&layout, manifest["config"]["digest"].as_str().unwrap())).unwrap();
    assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some("amd64")));
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/usr/local/bin/blockwork"]));
    assert_eq!(config["config"]["Cmd"], serde_json::json!(["run"]));
    for label in ["source", "version", "licenses", "revision"] {
        assert!(config["config"]["Labels"][format!("org.opencontainers.image.{label}")].is_string(), "label {label} missing");
    }

    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let layer = layout.join("blobs/sha256").join(layers[0]["digest"].as_str().unwrap().trim_start_matches("sha256:"));
    let listing = std::process::Command::new("tar").arg("-tzf").arg(&layer).output().unwrap();
    let files = String::from_utf8_lossy(&listing.stdout);
    for file in [
        "usr/local/bin/blockwork",
        "lib/x86_64-linux-gnu/libc.so.6",
        "lib64/ld-linux-x86-64.so.2",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
    ] {
        assert!(files.lines().any(|l| l.trim_start_matches("./") == file), "{file} missing from the layer:\n{files}");
    }
    assert!(!files.lines().any(|l| l.trim_start_matches("./") == "bin/sh"), "no shell in the image");
}
