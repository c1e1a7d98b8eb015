//! The control plane is a real kube-apiserver with etcd, and its processes die with the tests.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::{Duration, Instant};

use blockwork_testenv::control_plane::control_plane;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "testenv.blockwork.dev", version = "v1", kind = "Gadget", namespaced, status = "GadgetStatus")]
struct GadgetSpec {
    size: i32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct GadgetStatus {
    ready: bool,
}

#[tokio::test]
async fn serves_the_pinned_kubernetes_version() {
    let version = control_plane().await.unwrap().client().apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "33"));
}

#[tokio::test]
async fn each_test_gets_its_own_namespace() {
    let plane = control_plane().await.unwrap();
    let (first, second) = (plane.namespace("Some_Test").await.unwrap(), plane.namespace("Some_Test").await.unwrap());
    assert_ne!(first, second);
    assert!(first.starts_with("some-test-"), "{first}");
    let namespaces: Api<Namespace> = Api::all(plane.client());
    namespaces.get(&first).await.unwrap();
    namespaces.get(&second).await.unwrap();
}

#[tokio::test]
async fn installed_crds_serve_objects_with_a_status_subresource() {
    let plane = control_plane().await.unwrap();
    plane.install_crds(&[Gadget::crd()]).await.unwrap();
    plane.install_crds(&[Gadget::crd()]).await.expect("installing again is harmless");
    let namespace = plane.namespace("crd").await.unwrap();
    let gadgets: Api<Gadget> = Api::namespaced(plane.client(), &namespace);
    gadgets.create(&PostParams::default(), &Gadget::new("g", GadgetSpec { size: 1 })).await.unwrap();
    let status = serde_json::json!({"apiVersion": "testenv.blockwork.dev/v1", "kind": "Gadget", "status": {"ready": true}});
    gadgets.patch_status("g", &PatchParams::apply("test"), &Patch::Apply(status)).await.unwrap();
    assert!(gadgets.get("g").await.unwrap().status.unwrap().ready);
}

#[tokio::test]
async fn kubeconfig_file_reaches_the_same_server() {
    let plane = control_plane().await.unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    Api::<Namespace>::all(client).get("default").await.unwrap();
}

/// Not a test of its own: `control_plane_processes_die_with_the_test_binary` runs it in a child
/// process, which starts the control plane, prints its process ids and aborts.
#[test]
#[ignore = "helper process for control_plane_processes_die_with_the_test_binary"]
fn start_control_plane_and_abort() {
    if std::env::var_os("BLOCKWORK_TESTENV_ABORT_CHILD").is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (etcd, apiserver) = runtime.block_on(control_plane()).unwrap().pids();
    println!("PIDS {etcd} {apiserver}");
    std::process::abort();
}

#[test]
fn control_plane_processes_die_with_the_test_binary() {
    // libtest names a test by its module path without the crate's name.
    let helper = format!("{}::start_control_plane_and_abort", module_path!().split_once("::").unwrap().1);
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([&helper, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("BLOCKWORK_TESTENV_ABORT_CHILD", "1")
        .output()
        .unwrap();
    assert!(!output.status.success(), "the child aborts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let pids: Vec<u32> = stdout
        .lines()
        .find_map(|line| line.split("PIDS ").nth(1))
        .unwrap_or_else(|| panic!("the child printed no pids: {stdout}\n{}", String::from_utf8_lossy(&output.stderr)))
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    for pid in pids {
        while is_alive(pid) {
            assert!(Instant::now() < deadline, "process {pid} outlived the test binary that started it");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Running or sleeping; a zombie has already died.
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).is_some_and(|state| state != "Z" && state != "X")
        }
        Err(_) => false,
    }
}
