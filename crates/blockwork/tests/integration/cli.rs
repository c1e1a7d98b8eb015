#![allow(clippy::unwrap_used, clippy::panic)]
//! The `blockwork` binary, run as a process: its command line, and `blockwork run` against a
//! real kube-apiserver (from `blockwork-testenv`).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use blockwork_testenv::commands::kubectl_ok;
use blockwork_testenv::operator::{Operator, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::time::{Instant, sleep};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const LEASE: &str = "blockwork-leader";

fn blockwork(args: &[&str]) -> Output {
    std::process::Command::new(BIN).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn help_lists_the_subcommands() {
    let output = blockwork(&["--help"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let help = stdout(&output);
    for command in ["crds", "rbac", "run", "remove-finalizers", "status", "explain", "retry", "pause", "resume", "check", "completions"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(command)), "`{command}` missing from:\n{help}");
    }
}

#[test]
fn run_help_lists_every_flag() {
    let output = blockwork(&["run", "--help"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let help = stdout(&output);
    for flag in [
        "--controllers",
        "--namespaces",
        "--leader-elect",
        "--leader-election-namespace",
        "--leader-election-id",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--max-concurrent-reconciles",
        "--log-format",
        "--log-level",
        "--webhook-bind-address",
        "--rotator-annotation-prefix",
        "--rotator-namespaces",
        "--webhook-certificate-secret",
        "--webhook-certificate-validity",
        "--webhook-ca-validity",
    ] {
        assert!(help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")), "{flag} missing from:\n{help}");
    }
    for default in ["blockwork-leader", "0.0.0.0:8080", "0.0.0.0:8081", "[default: 3]", "RUST_LOG"] {
        assert!(help.contains(default), "{default} missing from:\n{help}");
    }
}

#[test]
fn unknown_controllers_are_named_in_the_error() {
    let output = blockwork(&["run", "--controllers", "nosuch"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("nosuch"), "{message}");
    assert!(message.contains("valid controllers"), "{message}");
}

#[test]
fn self_managed_certificates_with_unworkable_validities_are_refused_at_start_up() {
    for (flags, expected) in [
        (["--webhook-certificate-validity", "10s"], "--webhook-certificate-validity must be at least"),
        (["--webhook-ca-validity", "1h"], "--webhook-ca-validity (3600s) must be at least --webhook-certificate-validity"),
    ] {
        let output = std::process::Command::new(BIN)
            .args(["run", "--controllers", "cache", "--webhook-certificate-secret", "tls"])
            .args(flags)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert!(stderr(&output).contains(expected), "{}", stderr(&output));
    }
}

#[test]
fn a_certificate_directory_and_a_certificate_secret_are_exclusive() {
    let output = blockwork(&["run", "--webhook-cert-dir", "/tmp", "--webhook-certificate-secret", "tls"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("cannot be used with"), "{}", stderr(&output));
}

#[test]
fn zero_concurrent_reconciles_is_rejected() {
    let output = blockwork(&["run", "--max-concurrent-reconciles", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--max-concurrent-reconciles"), "{}", stderr(&output));
}

#[test]
fn crds_prints_every_crd() {
    let output = blockwork(&["crds"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let yaml = stdout(&output);
    assert!(yaml.contains("name: caches.cache.blockwork.dev"), "{yaml}");
    assert!(yaml.contains("kind: CustomResourceDefinition"), "{yaml}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crd");
    let output = blockwork(&["crds", "--output-dir", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(out.join("caches.cache.blockwork.dev.yaml").exists());
}

/// `blockwork run` serves its probes and metrics, takes the Lease, and shuts down cleanly on
/// SIGINT, releasing the Lease.
#[tokio::test]
async fn run_against_a_real_apiserver() {
    let (client, kubeconfig, namespace) = cluster("blockwork-run").await;
    let mut instance = start_instance(&kubeconfig, &namespace);

    instance.wait_ready(Duration::from_secs(60)).await.unwrap();
    let readyz = get(&instance, instance.health, "/readyz").await.body;
    assert!(readyz.starts_with("ok\n"), "{readyz}");
    let healthz = get(&instance, instance.health, "/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok\n"), "{}", instance.logs());
    let metrics = get(&instance, instance.metrics, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert_eq!(metrics.header("content-type"), Some("application/openmetrics-text; version=1.0.0; charset=utf-8"));
    assert!(metrics.body.ends_with("# EOF\n"), "{}", metrics.body);
    assert!(metrics.body.contains("# TYPE blockwork_leader gauge"), "{}", metrics.body);

    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let holder = wait_for_holder(&leases, Duration::from_secs(30), |h| h.is_some()).await.unwrap();
    assert_eq!(Some(holder.as_str()), instance.identity().await.as_deref(), "{}", instance.logs());
    instance.wait_leading(Duration::from_secs(5)).await.unwrap();

    instance.interrupt().unwrap();
    let status = instance.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert_eq!(status.code(), Some(0), "{}", instance.logs());
    let spec = leases.get(LEASE).await.unwrap().spec.unwrap_or_default();
    assert_eq!(spec.holder_identity, None, "the Lease is released on a clean shutdown");
}

/// Two instances on one Lease: exactly one leads, the other is a ready standby that takes over
/// when the leader stops.
#[tokio::test]
async fn one_of_two_instances_leads() {
    let (client, kubeconfig, namespace) = cluster("blockwork-election").await;
    let mut a = start_instance(&kubeconfig, &namespace);
    let mut b = start_instance(&kubeconfig, &namespace);
    a.wait_ready(Duration::from_secs(60)).await.unwrap();
    b.wait_ready(Duration::from_secs(60)).await.unwrap();
    let (id_a, id_b) = (a.identity().await.unwrap(), b.identity().await.unwrap());
    assert_ne!(id_a, id_b);

    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let holder = wait_for_holder(&leases, Duration::from_secs(30), |h| h.is_some()).await.unwrap();
    assert!(holder == id_a || holder == id_b, "holder {holder} is neither {id_a} nor {id_b}");
    let (mut leader, mut standby) = if holder == id_a { (a, b) } else { (b, a) };
    leader.wait_leading(Duration::from_secs(5)).await.unwrap();
    let standby_ready = get(&standby, standby.health, "/readyz").await;
    assert_eq!(standby_ready.status, 200, "a standby is ready");
    assert!(standby_ready.body.contains("leader: false"), "{}", standby_ready.body);

    // The leader releases the Lease on SIGINT; the standby notices within a retry period (2 s),
    // not only when the Lease would have expired (12 s).
    leader.interrupt().unwrap();
    assert_eq!(leader.wait_exit(Duration::from_secs(10)).await.unwrap().code(), Some(0), "{}", leader.logs());
    let standby_id = standby.identity().await.unwrap();
    let holder = wait_for_holder(&leases, Duration::from_secs(8), |h| h == Some(standby_id.as_str())).await;
    assert_eq!(holder.as_deref(), Some(standby_id.as_str()), "{}", standby.logs());
    standby.wait_leading(Duration::from_secs(5)).await.unwrap();

    standby.interrupt().unwrap();
    assert_eq!(standby.wait_exit(Duration::from_secs(10)).await.unwrap().code(), Some(0), "{}", standby.logs());
}

/// Fail-stop: a leader whose Lease is taken over exits non-zero, without waiting for shutdown.
#[tokio::test]
async fn losing_the_lease_stops_the_process() {
    let (client, kubeconfig, namespace) = cluster("blockwork-failstop").await;
    let mut instance = start_instance(&kubeconfig, &namespace);
    instance.wait_ready(Duration::from_secs(60)).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let id = instance.identity().await.unwrap();
    assert_eq!(wait_for_holder(&leases, Duration::from_secs(30), |h| h == Some(id.as_str())).await, Some(id));

    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let steal =
        serde_json::json!({"spec": {"holderIdentity": "intruder", "acquireTime": now, "renewTime": now, "leaseDurationSeconds": 15}});
    leases.patch(LEASE, &PatchParams::default(), &Patch::Merge(&steal)).await.unwrap();

    // The watchdog checks at most 7 s after the last renewal; the next renewal also notices.
    let status = instance.wait_exit(Duration::from_secs(15)).await.unwrap();
    assert_eq!(status.code(), Some(1), "{}", instance.logs());
    assert!(instance.logs().contains("lost leadership"), "{}", instance.logs());
}

/// For uninstalling: `blockwork remove-finalizers` takes Blockwork's finalizer off every object of
/// its CRDs, leaving other finalizers alone, so the object can go without the operator.
#[tokio::test]
async fn remove_finalizers_releases_objects_for_uninstall() {
    let (client, kubeconfig, namespace) = cluster("blockwork-release").await;
    let caches: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        &namespace,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cache.blockwork.dev", "v1beta1", "Cache"),
            "caches",
        ),
    );
    let object = serde_json::from_value(serde_json::json!({
        "apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache",
        "metadata": {"name": "stuck", "finalizers": ["cache.blockwork.dev/finalizer", "example.com/keep"]},
        "spec": {"engine": "redis", "memory": "64Mi"}
    }))
    .unwrap();
    caches.create(&Default::default(), &object).await.unwrap();

    let output = tokio::process::Command::new(BIN)
        .args(["remove-finalizers", "--controllers", "cache"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("released 1 object(s)"), "{}", stdout(&output));
    assert_eq!(caches.get("stuck").await.unwrap().metadata.finalizers, Some(vec!["example.com/keep".to_owned()]));
}

/// A client, a kubeconfig for the binary, and a fresh namespace.
async fn cluster(prefix: &str) -> (Client, PathBuf, String) {
    let control_plane = blockwork_testenv::control_plane::of("cli").await.unwrap();
    let crds: Vec<_> = blockwork::controllers::registered().iter().flat_map(|c| (c.crds)()).collect();
    control_plane.install_crds(&crds).await.unwrap();
    let namespace = control_plane.namespace(prefix).await.unwrap();
    (control_plane.client(), control_plane.kubeconfig_path().to_path_buf(), namespace)
}

/// Polls the Lease's holder until `want` accepts it or `timeout` passes; returns the last holder
/// seen.
async fn wait_for_holder(leases: &Api<Lease>, timeout: Duration, want: impl Fn(Option<&str>) -> bool) -> Option<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let holder = match leases.get_opt(LEASE).await.unwrap() {
            Some(lease) => lease.spec.and_then(|s| s.holder_identity),
            None => None,
        };
        if want(holder.as_deref()) || Instant::now() > deadline {
            return holder;
        }
        sleep(Duration::from_millis(250)).await;
    }
}

/// A `blockwork run --leader-elect` process on its own namespace only (the test binary's other
/// tests share the control plane), killed on drop.
fn start_instance(kubeconfig: &Path, namespace: &str) -> Operator {
    Operator::new(Path::new(BIN), kubeconfig)
        .unwrap()
        .args(["--leader-elect", "--leader-election-namespace", namespace, "--namespaces", namespace])
        // The cert controller needs its zones; no Cert exists here, so AWS is never called.
        .args(["--dns-zones", "example.com:Z0000000000000000000", "--aws-region", "us-east-1"])
        .args(["--log-level", "info,blockwork=debug"])
        .start()
        .unwrap()
}

/// GET from one of the instance's servers, which must answer.
async fn get(instance: &Operator, port: u16, path: &str) -> Response {
    instance.get(port, path).await.unwrap_or_else(|e| panic!("GET 127.0.0.1:{port}{path}: {e}\n{}", instance.logs()))
}

/// A kubeconfig (in the returned directory) of the ServiceAccount `blockwork` of `namespace`,
/// bound to what `blockwork rbac ... RBAC_ARGS` generates.
fn generated_rbac_kubeconfig(admin_kubeconfig: &Path, namespace: &str, rbac_args: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let kubectl = |args: &[&str], stdin: Option<&str>| kubectl_ok(admin_kubeconfig, args, stdin.unwrap_or_default().as_bytes()).unwrap();
    kubectl(&["create", "serviceaccount", "blockwork", "-n", namespace], None);
    let mut args = vec!["rbac", "--name", namespace, "--namespace", namespace, "--service-account", "blockwork"];
    args.extend_from_slice(rbac_args);
    let rbac = blockwork(&args);
    assert!(rbac.status.success(), "{}", stderr(&rbac));
    kubectl(&["apply", "-f", "-"], Some(&stdout(&rbac)));
    let token = kubectl(&["create", "token", "blockwork", "-n", namespace], None);
    let admin = std::fs::read_to_string(admin_kubeconfig).unwrap();
    let admin_token = admin.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, admin.replace(admin_token, token.trim())).unwrap();
    (dir, kubeconfig)
}

/// Whether `kubeconfig`'s identity may `verb` `resource` in `namespace`.
fn can_i(kubeconfig: &Path, namespace: &str, verb: &str, resource: &str) -> bool {
    let output = blockwork_testenv::commands::kubectl(kubeconfig, &["auth", "can-i", verb, resource, "-n", namespace], b"").unwrap();
    stdout(&output).trim() == "yes"
}

/// `blockwork run` works under exactly the RBAC `blockwork rbac` generates, and that RBAC grants
/// no more than it must.
#[tokio::test]
async fn run_needs_no_more_than_the_generated_rbac() {
    let (client, admin_kubeconfig, namespace) = cluster("blockwork-rbac").await;
    let (_dir, kubeconfig) = generated_rbac_kubeconfig(&admin_kubeconfig, &namespace, &[]);
    let can_i = |verb: &str, resource: &str| can_i(&kubeconfig, &namespace, verb, resource);
    assert!(can_i("create", "leases.coordination.k8s.io"));
    assert!(can_i("create", "networkpolicies.networking.k8s.io"), "each Cache's NetworkPolicy, on by default");
    assert!(can_i("list", "secrets"), "the rotator reads its sources");
    assert!(!can_i("delete", "secrets"), "no controller deletes Secrets: targets hold signing keys");
    assert!(can_i("watch", "pods"), "the Cache controller reads its pods, to say why they do not start");
    assert!(!can_i("create", "pods"), "the generated RBAC must not grant what no controller needs: the StatefulSets create the pods");
    assert!(!can_i("list", "deployments.apps"), "the generated RBAC must not grant what no controller needs");

    let mut instance = start_instance(&kubeconfig, &namespace);
    instance.wait_ready(Duration::from_secs(60)).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let holder = wait_for_holder(&leases, Duration::from_secs(30), |h| h.is_some()).await;
    assert_eq!(holder, instance.identity().await, "{}", instance.logs());
    instance.interrupt().unwrap();
    assert_eq!(instance.wait_exit(Duration::from_secs(10)).await.unwrap().code(), Some(0), "{}", instance.logs());
}

/// NetworkPolicies turned off at install need none of their permissions: under the RBAC
/// `blockwork rbac --opt-out cache.network-policies` generates, which grants none, `blockwork run
/// --cache-network-policies=false` applies a Cache's objects, and its status says it has no policy.
#[tokio::test]
async fn with_network_policies_off_run_needs_no_permission_on_them() {
    let (client, admin_kubeconfig, namespace) = cluster("blockwork-netpol-off").await;
    let (_dir, kubeconfig) = generated_rbac_kubeconfig(&admin_kubeconfig, &namespace, &["--opt-out", "cache.network-policies"]);
    assert!(!can_i(&kubeconfig, &namespace, "list", "networkpolicies.networking.k8s.io"), "least privilege once turned off");
    let mut operator = Operator::new(Path::new(BIN), &kubeconfig)
        .unwrap()
        .args(["--controllers", "cache", "--namespaces", &namespace, "--cache-network-policies=false"])
        .start()
        .unwrap();
    operator.wait_ready(Duration::from_secs(60)).await.unwrap();
    let caches: Api<blockwork_cache::api::Cache> = Api::namespaced(client.clone(), &namespace);
    let cache: blockwork_cache::api::Cache =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "open"}, "spec": {"engine": "redis", "memory": "64Mi"}})).unwrap();
    caches.create(&Default::default(), &cache).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let isolated = loop {
        let status = caches.get("open").await.unwrap().status.unwrap_or_default();
        let synced = status.conditions.iter().any(|c| c.type_ == "Synced" && c.status == "True");
        let isolated = status.conditions.iter().find(|c| c.type_ == "NetworkIsolated").cloned();
        match isolated {
            Some(isolated) if synced => break isolated,
            _ if Instant::now() > deadline => panic!("no Synced Cache within 60 s: {status:?}\n{}", operator.logs()),
            _ => sleep(Duration::from_millis(250)).await,
        }
    };
    assert_eq!((isolated.status.as_str(), isolated.reason.as_str()), ("False", "NetworkPoliciesOff"));
    let statefulsets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client, &namespace);
    assert!(statefulsets.get_opt("open-cache").await.unwrap().is_some());
    assert!(!operator.logs().contains("networkpolicies"), "the operator tried NetworkPolicies:\n{}", operator.logs());
}

/// `--log-format json` writes one JSON object per line, errors included.
#[test]
fn json_logs_are_one_object_per_line() {
    let output = std::process::Command::new(BIN)
        .args([
            "run",
            "--log-format",
            "json",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--webhook-bind-address",
            "0",
        ])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "no cluster to reach");
    let lines: Vec<serde_json::Value> =
        stderr(&output).lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect();
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(last["error"].as_str().unwrap().contains("building the Kubernetes client"), "{last}");
}

/// `blockwork import ARGS` against the AWS endpoint `endpoint` (us-east-1, test credentials).
async fn import(endpoint: &str, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(BIN);
    command.arg("import").args(args).args(["--aws-region", "us-east-1", "--aws-endpoint-url", endpoint]);
    command.envs([("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")]);
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

/// `blockwork import` as a user runs it, against moto behind the fault proxy with the AWS flags
/// and environment `blockwork run` takes: manifests on stdout (YAML), what it left out and a
/// count on stderr, and nothing but reads at the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_prints_manifests_on_stdout_and_what_it_left_out_on_stderr() {
    let moto = blockwork_testenv::emulators::moto().await.unwrap().endpoint();
    let proxy = blockwork_testenv::fault_proxy::FaultProxy::start(&moto).await.unwrap();
    let acm = aws_sdk_acm::Client::new(&blockwork_testenv::aws::sdk_config(&moto).await);
    let suffix = format!("cli-{}.example.com", blockwork_testenv::aws::fresh_account());
    let (tagged, untagged) = (format!("api.{suffix}"), format!("legacy.{suffix}"));
    let arn = blockwork_testenv::aws::request_certificate(&acm, std::slice::from_ref(&tagged)).await;
    let tag = aws_sdk_acm::types::Tag::builder().key("service").value("api").build().unwrap();
    acm.add_tags_to_certificate().certificate_arn(&arn).tags(tag).send().await.unwrap();
    blockwork_testenv::aws::request_certificate(&acm, std::slice::from_ref(&untagged)).await;
    let output = import(&proxy.endpoint(), &["-n", "team-a", "--service-name-tag", "service", "--environment", "prod"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let manifests: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout(&output)).expect("stdout is YAML manifests");
    let cert = manifests.iter().find(|m| m["spec"]["adopt"]["certificateArn"] == arn.as_str()).expect("the tagged certificate is printed");
    assert_eq!((&cert["spec"]["serviceName"], &cert["spec"]["environment"]), (&"api".into(), &"prod".into()));
    assert!(!stdout(&output).contains(&untagged), "the untagged certificate is left out of stdout");
    let notes = stderr(&output);
    assert!(notes.contains(&format!("skipped certificate {untagged}")) && notes.contains("--service-name"), "{notes}");
    assert!(notes.lines().last().is_some_and(|l| l.contains("object(s) printed")), "{notes}");
    let calls = proxy.all_calls();
    assert!(calls.keys().all(|op| op.starts_with("List") || op.starts_with("Describe") || op.starts_with("Get")), "{calls:?}");
}

/// The end-to-end check: what `blockwork import` printed, applied with kubectl to a
/// cluster that never saw the certificate, converges on the existing certificate: Ready, no
/// certificate requested or deleted, only the ownership tags written (counted at the proxy in
/// front of moto, which every call of import and of `blockwork run` goes through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_certs_applied_to_a_fresh_cluster_become_ready_on_the_existing_certificate_with_no_create() {
    let moto = blockwork_testenv::emulators::moto().await.unwrap().endpoint();
    let proxy = blockwork_testenv::fault_proxy::FaultProxy::start(&moto).await.unwrap();
    let config = blockwork_testenv::aws::sdk_config(&moto).await;
    let (acm, route53) = (aws_sdk_acm::Client::new(&config), aws_sdk_route53::Client::new(&config));
    let zone_name = format!("moved-{}.example.com", blockwork_testenv::aws::fresh_account());
    let zone = blockwork_testenv::aws::hosted_zone(&route53, &zone_name).await;
    let names = [format!("api.{zone_name}"), format!("www.{zone_name}")];
    let arn = blockwork_testenv::aws::request_certificate(&acm, &names).await;

    let plane = blockwork_testenv::control_plane::of("cli").await.unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
    let namespace = plane.namespace("imported").await.unwrap();
    let output = import(&proxy.endpoint(), &["-n", &namespace, "--service-name", "api", "--environment", "prod"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    // The shared moto holds other tests' certificates too: this test applies its own.
    let printed = stdout(&output);
    let mine = printed.split("\n---").find(|doc| doc.contains(&arn)).expect("the certificate is printed");
    kubectl_ok(plane.kubeconfig_path(), &["apply", "--server-side", "--field-manager", "gitops", "-f", "-"], mine.as_bytes()).unwrap();
    let before = proxy.all_calls();

    let mut operator = Operator::new(Path::new(BIN), plane.kubeconfig_path())
        .unwrap()
        .args(["--controllers", "cert", "--namespaces", &namespace, "--log-level", "warn"])
        .args(["--aws-endpoint-url", &proxy.endpoint(), "--aws-region", "us-east-1", "--dns-zones", &format!("{zone_name}:{zone}")])
        .start()
        .unwrap();
    operator.wait_ready(Duration::from_secs(90)).await.unwrap();
    let certs: Api<blockwork_cert::Cert> = Api::namespaced(plane.client(), &namespace);
    let started = Instant::now();
    let cert = loop {
        let listed = certs.list(&Default::default()).await.unwrap().items;
        let ready = listed
            .iter()
            .find(|c| c.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")));
        if let Some(cert) = ready {
            break cert.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not Ready: {listed:#?}\n--- blockwork log ---\n{}", operator.logs());
        sleep(Duration::from_secs(1)).await;
    };
    let observed = cert.status.as_ref().and_then(|s| s.observation.certificate_arn.clone());
    assert_eq!(observed.as_deref(), Some(arn.as_str()), "the Cert manages the existing certificate");
    let after = proxy.all_calls();
    let made = |op: &str| after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    assert_eq!((made("RequestCertificate"), made("DeleteCertificate")), (0, 0), "{after:?}");
    assert_eq!(made("AddTagsToCertificate"), 1, "adopting writes its ownership tags once: {after:?}");
}

/// The same for a distribution's tenant and its CNAMEs: imported, applied to a fresh cluster,
/// Ready on the existing tenant with no tenant created, updated or deleted and no record written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_tenants_applied_to_a_fresh_cluster_become_ready_on_the_existing_tenant_with_no_create() {
    use blockwork_tenant::DistributionTenant;
    let (moto, ministack) = (
        blockwork_testenv::emulators::moto().await.unwrap().endpoint(),
        blockwork_testenv::emulators::ministack().await.unwrap().endpoint(),
    );
    let (dns_proxy, proxy) = (
        blockwork_testenv::fault_proxy::FaultProxy::start(&moto).await.unwrap(),
        blockwork_testenv::fault_proxy::FaultProxy::start(&ministack).await.unwrap(),
    );
    let route53 = aws_sdk_route53::Client::new(&blockwork_testenv::aws::sdk_config(&moto).await);
    let ministack_config = blockwork_testenv::aws::sdk_config(&ministack).await;
    let (cloudfront, acm) = (aws_sdk_cloudfront::Client::new(&ministack_config), aws_sdk_acm::Client::new(&ministack_config));
    let label = format!("moved-{}", blockwork_testenv::aws::fresh_account());
    let zone_name = format!("{label}.example.com");
    let wildcard = blockwork_testenv::aws::request_certificate(&acm, &[format!("*.{zone_name}")]).await;
    let distribution = blockwork_testenv::aws::tenant_only_distribution(&cloudfront, &label, Some(&wildcard), &[]).await;
    let domain = format!("shop.{zone_name}");
    let created = cloudfront
        .create_distribution_tenant()
        .name(&label)
        .distribution_id(&distribution)
        .domains(aws_sdk_cloudfront::types::DomainItem::builder().domain(&domain).build().unwrap())
        .send()
        .await
        .unwrap();
    let group_id = created.distribution_tenant().and_then(|t| t.connection_group_id()).unwrap_or_default().to_owned();
    let group = cloudfront.get_connection_group().identifier(&group_id).send().await.unwrap();
    let endpoint = group.connection_group().and_then(|g| g.routing_endpoint()).unwrap_or_default().to_owned();
    let zone = blockwork_testenv::aws::hosted_zone(&route53, &zone_name).await;
    blockwork_testenv::aws::upsert_cname(&route53, &zone, &domain, &endpoint).await;

    let plane = blockwork_testenv::control_plane::of("cli").await.unwrap();
    plane.install_crds(&[<DistributionTenant as kube::CustomResourceExt>::crd(), blockwork_identity::crd()]).await.unwrap();
    let namespace = plane.namespace("imported-tenants").await.unwrap();
    let cloudfront_endpoint = proxy.endpoint();
    let args = ["-n", &namespace, "--no-certificates", "--distribution", &distribution, "--hosted-zone", &zone];
    let output = import(&dns_proxy.endpoint(), &[&args[..], &["--aws-endpoint-url-cloudfront", &cloudfront_endpoint]].concat()).await;
    assert!(output.status.success(), "{}", stderr(&output));
    kubectl_ok(plane.kubeconfig_path(), &["apply", "--server-side", "--field-manager", "gitops", "-f", "-"], &output.stdout).unwrap();
    let before = (proxy.all_calls(), dns_proxy.all_calls());

    let mut operator = Operator::new(Path::new(BIN), plane.kubeconfig_path())
        .unwrap()
        .args(["--controllers", "tenant", "--namespaces", &namespace, "--log-level", "warn"])
        .args(["--aws-endpoint-url", &dns_proxy.endpoint(), "--aws-region", "us-east-1"])
        .args(["--tenant-aws-endpoint-url", &proxy.endpoint(), "--tenant-route53-endpoint-url", &dns_proxy.endpoint()])
        .start()
        .unwrap();
    operator.wait_ready(Duration::from_secs(90)).await.unwrap();
    let tenants: Api<DistributionTenant> = Api::namespaced(plane.client(), &namespace);
    let started = Instant::now();
    loop {
        let tenant = tenants.get(&label).await.unwrap();
        if tenant.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not Ready: {tenant:#?}\n--- blockwork log ---\n{}", operator.logs());
        sleep(Duration::from_secs(1)).await;
    }
    let made = |now: &std::collections::HashMap<String, usize>, then: &std::collections::HashMap<String, usize>, op: &str| {
        now.get(op).copied().unwrap_or(0) - then.get(op).copied().unwrap_or(0)
    };
    let (cloudfront_calls, route53_calls) = (proxy.all_calls(), dns_proxy.all_calls());
    for op in ["CreateDistributionTenant", "UpdateDistributionTenant", "DeleteDistributionTenant"] {
        assert_eq!(made(&cloudfront_calls, &before.0, op), 0, "{op}: {cloudfront_calls:?}");
    }
    assert_eq!(made(&route53_calls, &before.1, "ChangeResourceRecordSets"), 0, "the CNAME was right already: {route53_calls:?}");
}
