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

/// Not a test of its own: the tests below run it in a child process, which starts (or, as a test
/// process of a nextest run, reaches) the control plane, prints its process ids and aborts.
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

/// Runs [`start_control_plane_and_abort`] in a child with `env` (and nextest's variables
/// otherwise unset); the pids of the etcd and kube-apiserver it used.
fn control_plane_of_an_aborted_child(env: &[(&str, &str)]) -> Vec<u32> {
    // libtest names a test by its module path without the crate's name.
    let helper = format!("{}::start_control_plane_and_abort", module_path!().split_once("::").unwrap().1);
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args([&helper, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
    for name in ["NEXTEST_EXECUTION_MODE", "NEXTEST_RUN_ID", "NEXTEST_BINARY_ID"] {
        command.env_remove(name);
    }
    let output = command.env("BLOCKWORK_TESTENV_ABORT_CHILD", "1").envs(env.iter().copied()).output().unwrap();
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
    pids
}

fn assert_gone_within(pids: &[u32], within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    for &pid in pids {
        while is_alive(pid) {
            assert!(Instant::now() < deadline, "process {pid} outlived {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn control_plane_processes_die_with_the_test_binary() {
    let pids = control_plane_of_an_aborted_child(&[]);
    assert_gone_within(&pids, Duration::from_secs(10), "the test binary that started it");
}

/// Under nextest each test is a process of its own: they share one kept control plane, which
/// goes once the last of them is gone, however it ended.
#[test]
fn the_test_processes_of_a_run_share_a_kept_control_plane_that_goes_with_the_last_of_them() {
    let run = uuid::Uuid::new_v4().to_string();
    let idle = 2;
    let idle_text = idle.to_string();
    let test_process = [
        ("NEXTEST_EXECUTION_MODE", "process-per-test"),
        ("NEXTEST_RUN_ID", run.as_str()),
        ("NEXTEST_BINARY_ID", "blockwork-testenv::integration"),
        (blockwork_testenv::shared::IDLE_VARIABLE, idle_text.as_str()),
    ];
    let first = control_plane_of_an_aborted_child(&test_process);
    let second = control_plane_of_an_aborted_child(&test_process);
    assert_eq!(first, second, "the second test process reaches the control plane the first one started");
    assert_gone_within(&first, Duration::from_secs(idle + 30), "the last test process that used it");
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
