#![allow(clippy::unwrap_used, clippy::panic)]
//! "Why is it stuck?" as a user runs it: `blockwork` installed as the kubectl plugin
//! `kubectl-blockwork` and run through a real `kubectl`; `blockwork check` against a real
//! kube-apiserver, `blockwork run` (its webhooks and leader Lease) and moto; completions. Own
//! test binary: `check` reads the cluster-wide webhook registration.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use blockwork_cert::{Cert, CertSpec};
use blockwork_testenv::commands::{kubectl_ok, tool};
use blockwork_testenv::operator::{AWS_CREDENTIALS, Operator};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");

/// One test at a time (among the test processes too) registers the cluster-wide admission
/// webhook or creates what it admits: held until dropped.
async fn webhook() -> blockwork_testenv::control_plane::Exclusive {
    plane().await.exclusive("webhook").await.unwrap()
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The control plane these tests share, with the Cert CRD (installed by whichever test comes
/// first: each runs in a process of its own, in any order).
async fn plane() -> &'static blockwork_testenv::control_plane::ControlPlane {
    let plane = blockwork_testenv::control_plane::of("why_stuck").await.unwrap();
    plane.install_crds(&[blockwork_cert::crd()]).await.unwrap();
    plane
}

/// A Cert whose status says what the cert controller writes after ACM refused the request: no
/// controller runs here, the plugin's path is what is tested.
async fn failed_cert(client: &kube::Client, namespace: &str) {
    let certs: Api<Cert> = Api::namespaced(client.clone(), namespace);
    let spec = CertSpec { service_name: "api".into(), environment: "prod".into(), ..CertSpec::default() };
    certs.create(&PostParams::default(), &Cert::new("api", spec)).await.unwrap();
    let now = jiff::Timestamp::now();
    let since = now.checked_sub(jiff::SignedDuration::from_mins(12)).unwrap().to_string();
    let retry_at = now.checked_add(jiff::SignedDuration::from_secs(240)).unwrap().to_string();
    let message = "RequestCertificate: User: [ARN] is not authorized to perform: acm:RequestCertificate";
    let status = json!({"status": {
        "reconcileState": "Failed",
        "reconcileStateSince": since,
        "observedGeneration": 1,
        "message": message,
        "state": "Failed",
        "certReady": false,
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "AccessDeniedException", "message": message, "lastTransitionTime": since},
            {"type": "Synced", "status": "False", "reason": "AccessDeniedException", "message": message, "lastTransitionTime": since},
        ],
        "lastError": {"class": "Terminal", "reason": "AccessDeniedException", "message": message, "since": since, "attempts": 3, "retryAt": retry_at},
    }});
    certs.patch_status("api", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

/// `kubectl` with the plugin on its PATH (a link named as kubectl looks for it).
fn kubectl(plugins: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    let path = format!("{}:{}", plugins.display(), std::env::var("PATH").unwrap_or_default());
    std::process::Command::new(tool("kubectl").unwrap()).args(args).env("PATH", path).env("KUBECONFIG", kubeconfig).output().unwrap()
}

#[tokio::test]
async fn kubectl_runs_blockwork_as_its_plugin() {
    let _webhook = webhook().await;
    let plane = plane().await;
    let namespace = plane.namespace("plugin").await.unwrap();
    failed_cert(&plane.client(), &namespace).await;
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(BIN, plugins.path().join("kubectl-blockwork")).unwrap();
    let kubeconfig = plane.kubeconfig_path();

    let listed = kubectl(plugins.path(), kubeconfig, &["plugin", "list"]);
    assert!(text(&listed).contains("kubectl-blockwork"), "{}", text(&listed));

    let status = kubectl(plugins.path(), kubeconfig, &["blockwork", "status", "-n", &namespace]);
    assert!(status.status.success(), "{}", text(&status));
    let table = String::from_utf8_lossy(&status.stdout);
    let row = table.lines().find(|l| l.contains(&format!("{namespace}/api"))).unwrap_or_else(|| panic!("no row for the Cert:\n{table}"));
    for column in ["Cert", "Failed", "False", "12m", "AccessDeniedException: RequestCertificate", "in 3m"] {
        assert!(row.contains(column), "{column} missing from: {row}");
    }

    let json = kubectl(plugins.path(), kubeconfig, &["blockwork", "status", "-n", &namespace, "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&json)));
    let row = rows.as_array().and_then(|rows| rows.iter().find(|r| r["name"] == "api")).unwrap_or_else(|| panic!("no row: {rows}"));
    assert_eq!((&row["kind"], &row["state"], &row["ready"]), (&json!("Cert"), &json!("Failed"), &json!(false)), "{row}");
    let in_state = row["inStateSeconds"].as_i64().unwrap();
    assert!((720..780).contains(&in_state), "12 minutes in Failed: {row}");
    assert!(row["lastError"].as_str().unwrap().starts_with("AccessDeniedException: RequestCertificate"), "{row}");
    let next_retry: jiff::Timestamp = row["nextRetry"].as_str().unwrap().parse().unwrap();
    let in_seconds = next_retry.duration_since(jiff::Timestamp::now()).as_secs();
    assert!((120..=240).contains(&in_seconds), "the retry 4 minutes after the status was written: {row}");

    let explain = kubectl(plugins.path(), kubeconfig, &["blockwork", "explain", "cert/api", "-n", &namespace]);
    assert!(explain.status.success(), "{}", text(&explain));
    let story = String::from_utf8_lossy(&explain.stdout);
    assert!(
        story.contains(
            "Summary:    Cert Failed for 12m: AccessDeniedException (Terminal), 3 times in a row since 12m ago; next retry in 3m"
        ),
        "{story}"
    );
    assert!(story.contains("Next step:  Grant the IAM identity the call acts as the action named in the message"), "{story}");

    let json = kubectl(plugins.path(), kubeconfig, &["blockwork", "explain", "cert/api", "-n", &namespace, "-o", "json"]);
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&json)));
    assert_eq!(parsed["lastError"]["class"], "Terminal");
    assert_eq!(parsed["diagnosis"]["hints"][0]["reason"], "AccessDeniedException");
    assert_eq!(parsed["policies"][0]["name"], "paused");

    let help = kubectl(plugins.path(), kubeconfig, &["blockwork", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: kubectl blockwork <COMMAND>"), "{}", text(&help));

    let paused = kubectl(plugins.path(), kubeconfig, &["blockwork", "pause", "cert/api", "-n", &namespace]);
    assert!(paused.status.success(), "{}", text(&paused));
    let cert = Api::<Cert>::namespaced(plane.client(), &namespace).get("api").await.unwrap();
    assert_eq!(cert.metadata.annotations.unwrap_or_default().get("blockwork.dev/paused").map(String::as_str), Some("true"));
    let refused = kubectl(plugins.path(), kubeconfig, &["blockwork", "retry", "cert/api", "-n", &namespace]);
    assert!(!refused.status.success() && text(&refused).contains("resume"), "{}", text(&refused));
    let resumed = kubectl(plugins.path(), kubeconfig, &["blockwork", "resume", "cert/api", "-n", &namespace]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    // No controller runs: the request is written and not taken, and the command says so.
    let retried = kubectl(plugins.path(), kubeconfig, &["blockwork", "retry", "cert/api", "-n", &namespace, "--wait", "1s"]);
    assert!(retried.status.success() && text(&retried).contains("has not taken it within 1s"), "{}", text(&retried));

    let missing = kubectl(plugins.path(), kubeconfig, &["blockwork", "explain", "cert/nosuch", "-n", &namespace]);
    assert!(!missing.status.success() && text(&missing).contains("Cert nosuch not found"), "{}", text(&missing));
}

#[test]
fn completions_cover_every_subcommand() {
    let output = std::process::Command::new(BIN).args(["completions", "bash"]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let script = String::from_utf8_lossy(&output.stdout);
    for command in ["status", "explain", "retry", "pause", "resume", "check", "completions", "run"] {
        assert!(script.contains(command), "{command} missing");
    }
    for shell in ["zsh", "fish"] {
        assert!(std::process::Command::new(BIN).args(["completions", shell]).output().unwrap().status.success(), "{shell}");
    }
}

/// The registration outlives the operator until removed: later tests could not create a Cert.
struct Registration(PathBuf);

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = blockwork_testenv::commands::kubectl(
            &self.0,
            &["delete", "validatingwebhookconfiguration", "blockwork", "--ignore-not-found"],
            b"",
        );
    }
}

/// `blockwork run --controllers cert,cache --leader-elect` with its webhooks on a free port,
/// the CRDs and webhooks registered to reach it; killed on drop.
async fn start_operator(kubeconfig: &Path, lease_namespace: &str, zones: &str, moto: &str) -> Operator {
    let operator = Operator::new(Path::new(BIN), kubeconfig).unwrap();
    apply(kubeconfig, operator.manifests("crds", &[]).unwrap().as_bytes());
    let mut operator = operator
        .args(["--controllers", "cert,cache", "--leader-elect", "--leader-election-namespace", lease_namespace])
        .args(["--dns-zones", zones, "--aws-region", "us-east-1", "--aws-endpoint-url", moto])
        .start()
        .unwrap();
    operator.wait_listening(Duration::from_secs(30)).await.unwrap();
    apply(kubeconfig, operator.manifests("webhooks", &["--controllers", "cert"]).unwrap().as_bytes());
    operator
}

fn apply(kubeconfig: &Path, manifests: &[u8]) {
    kubectl_ok(kubeconfig, &["apply", "--server-side", "--force-conflicts", "-f", "-"], manifests).unwrap();
}

/// `blockwork check` for the operator above; its output and exit code.
fn check(kubeconfig: &Path, namespace: &str, lease_namespace: &str, zones: &str, moto: &str) -> (String, Option<i32>) {
    let output = std::process::Command::new(BIN)
        .args(["check", "--controllers", "cert,cache", "-n", namespace, "--leader-election-namespace", lease_namespace])
        .args(["--dns-zones", zones, "--aws-region", "us-east-1", "--aws-endpoint-url", moto])
        .env("KUBECONFIG", kubeconfig)
        .envs(AWS_CREDENTIALS)
        .output()
        .unwrap();
    (text(&output), output.status.code())
}

fn line<'a>(report: &'a str, start: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line starting with {start:?} in:\n{report}"))
}

#[tokio::test]
async fn check_passes_against_a_working_install_and_names_the_fix_of_each_failure() {
    let _webhook = webhook().await;
    let plane = plane().await;
    let namespace = plane.namespace("check").await.unwrap();
    let lease_namespace = plane.namespace("check-lease").await.unwrap();
    let kubeconfig = plane.kubeconfig_path();
    let moto = blockwork_testenv::emulators::moto().await.unwrap().endpoint();
    let route53 = aws_sdk_route53::Client::new(&blockwork_testenv::aws::sdk_config(&moto).await);
    let zone_name = format!("{namespace}.example.com");
    let zone_id = blockwork_testenv::aws::hosted_zone(&route53, &zone_name).await;
    let zones = format!("{zone_name}:{zone_id}");

    let _registration = Registration(kubeconfig.to_path_buf());
    let operator = start_operator(kubeconfig, &lease_namespace, &zones, &moto).await;
    // The Lease is taken within a few seconds of the start.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (report, code) = loop {
        let (report, code) = check(kubeconfig, &namespace, &lease_namespace, &zones, &moto);
        if code == Some(0) || tokio::time::Instant::now() > deadline {
            break (report, code);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("{report}");
    assert_eq!(code, Some(0), "{report}\n{}", operator.logs());
    assert!(line(&report, "PASS  API server").contains("Kubernetes v1.33"), "{report}");
    line(&report, "PASS  CRD certs.acm.blockwork.dev: installed and Established, versions v1");
    line(&report, "PASS  CRD caches.cache.blockwork.dev: installed and Established, versions v1beta1, v1alpha1");
    line(&report, "PASS  conversion webhook of caches.cache.blockwork.dev: caBundle is a CA valid until");
    line(&report, "PASS  admission webhook certs.acm.blockwork.dev: caBundle is a CA valid until");
    assert!(
        line(&report, "PASS  conversion webhook of caches.cache.blockwork.dev (https://127.0.0.1:")
            .contains("a dry-run Cache v1alpha1 was converted")
    );
    assert!(
        line(&report, "PASS  admission webhook certs.acm.blockwork.dev (https://127.0.0.1:").contains("a dry-run Cert went through it")
    );
    assert!(line(&report, &format!("PASS  leader Lease {lease_namespace}/blockwork-leader: held by ")).contains("renewed"));
    line(&report, "PASS  cert: AWS credentials: usable, as arn:aws:");
    line(&report, "PASS  cert: ACM read access: allowed (acm:ListCertificates)");
    line(&report, &format!("PASS  cert: hosted zone {zone_id}: found: {zone_name}, records readable"));
    // The shared moto has no policy simulator (crates/inspect/tests/integration/permissions.rs uses one that has).
    line(&report, "SKIP  cert: IAM permissions: cannot verify");
    // The operator runs as a process here, not in a pod whose `blockwork run` arguments it could read.
    line(&report, "SKIP  Cache pods (leader ");
    line(&report, "PASS  Caches without authentication: none");
    line(&report, "findings: 13 pass, 0 warn, 0 fail, 2 skip");
    assert!(!report.contains(blockwork_testenv::emulators::ACCOUNT_ID), "no account id: {report}");

    // A zone that does not exist, and one that is another zone than its name says.
    let wrong = format!("other.example.com:ZNOSUCHZONE0000000000,elsewhere.example.com:{zone_id}");
    let (report, code) = check(kubeconfig, &namespace, &lease_namespace, &wrong, &moto);
    assert_eq!(code, Some(1), "{report}");
    let missing = line(&report, "FAIL  cert: hosted zone ZNOSUCHZONE0000000000: NoSuchHostedZone");
    assert!(report.contains("fix: fix the id: it names nothing in this account"), "{missing}\n{report}");
    let mismatch =
        line(&report, &format!("FAIL  cert: hosted zone {zone_id}: found, but it is the zone {zone_name}, not elsewhere.example.com"));
    assert!(!mismatch.is_empty());

    // The operator stops: its webhooks cannot be called, and the Lease runs out.
    drop(operator);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (report, code) = check(kubeconfig, &namespace, &lease_namespace, &zones, &moto);
    assert_eq!(code, Some(1), "{report}");
    let unreachable = line(&report, "FAIL  admission webhook certs.acm.blockwork.dev (https://127.0.0.1:");
    assert!(unreachable.contains("the API server cannot call it"), "{unreachable}");
    assert!(report.contains("fix: check that the operator runs"), "{report}");
    line(&report, "FAIL  conversion webhook of caches.cache.blockwork.dev (https://127.0.0.1:");
}

#[tokio::test]
async fn check_warns_about_a_missing_lease_and_fails_an_unconfigured_controller() {
    let plane = blockwork_testenv::control_plane::of("why_stuck").await.unwrap();
    let namespace = plane.namespace("check-bare").await.unwrap();
    // The rotator has no CRD and no webhook: only the API server and the Lease are checked.
    let output = std::process::Command::new(BIN)
        .args(["check", "--controllers", "rotator", "-n", &namespace, "--leader-election-namespace", &namespace])
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .unwrap();
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "a warning is no failure: {report}");
    line(&report, &format!("WARN  leader Lease {namespace}/blockwork-leader: not found"));
    assert!(report.contains("fix: run the operator with --leader-elect"), "{report}");

    let output = std::process::Command::new(BIN)
        .args(["check", "--controllers", "cert", "-n", &namespace, "--kubeconfig"])
        .arg(plane.kubeconfig_path())
        .args(["--leader-election-namespace", &namespace])
        .output()
        .unwrap();
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "no AWS credentials: {report}");
    line(&report, "WARN  cert: configuration: no --dns-zones");
    line(&report, "FAIL  cert: AWS credentials");
}

#[tokio::test]
async fn check_as_the_operator_s_service_account_skips_what_its_rbac_may_not_read() {
    let plane = plane().await;
    let namespace = plane.namespace("check-rbac").await.unwrap();
    let rbac = std::process::Command::new(BIN).args(["rbac", "--namespace", &namespace]).output().unwrap();
    assert!(rbac.status.success(), "{}", text(&rbac));
    apply(plane.kubeconfig_path(), &rbac.stdout);
    // As `kubectl exec deploy/blockwork -- blockwork check` would run.
    let (_dir, path) = impersonating(plane, &format!("system:serviceaccount:{namespace}:blockwork"));

    let output = std::process::Command::new(BIN)
        .args(["check", "--controllers", "cert", "-n", &namespace, "--leader-election-namespace", &namespace])
        .args(["--dns-zones", "example.com:Z1", "--aws-region", "us-east-1", "--aws-endpoint-url", "http://127.0.0.1:9"])
        .env("KUBECONFIG", &path)
        .envs(AWS_CREDENTIALS)
        .output()
        .unwrap();
    let report = text(&output);
    line(&report, "SKIP  CRD certs.acm.blockwork.dev: not tested: this identity may not read CustomResourceDefinitions");
    line(&report, "SKIP  admission webhooks: not tested: this identity may not read ValidatingWebhookConfigurations");
    line(&report, &format!("WARN  leader Lease {namespace}/blockwork-leader: not found"));
    // No AWS at port 9: the credentials cannot be tried, and the fix is the network path.
    let aws = line(&report, "FAIL  cert: AWS credentials:");
    assert!(!aws.is_empty() && report.contains("fix: AWS could not be reached: check the network path"), "{report}");
    assert_eq!(output.status.code(), Some(1), "{report}");
}

/// The admin's kubeconfig, impersonating `user`, in a directory dropped with the first value.
fn impersonating(plane: &blockwork_testenv::control_plane::ControlPlane, user: &str) -> (tempfile::TempDir, PathBuf) {
    let mut kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig_path()).unwrap();
    for auth_info in &mut kubeconfig.auth_infos {
        if let Some(auth) = auth_info.auth_info.as_mut() {
            auth.impersonate = Some(user.to_owned());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
    (dir, path)
}

#[tokio::test]
async fn status_as_someone_who_may_list_only_certs_shows_them_and_names_what_it_could_not_list() {
    let plane = plane().await;
    let namespace = plane.namespace("status-rbac").await.unwrap();
    failed_cert(&plane.client(), &namespace).await;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cert-reader", "namespace": namespace},
        "rules": [{"apiGroups": ["acm.blockwork.dev"], "resources": ["certs"], "verbs": ["get", "list"]}],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "jane-reads-certs", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cert-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}],
    });
    apply(plane.kubeconfig_path(), format!("{role}\n---\n{binding}").as_bytes());
    let (_dir, kubeconfig) = impersonating(plane, "jane");

    let output = std::process::Command::new(BIN).args(["status", "-n", &namespace]).env("KUBECONFIG", &kubeconfig).output().unwrap();
    let report = text(&output);
    assert!(output.status.success(), "{report}");
    assert!(line(&report, "Cert ").contains(&format!("{namespace}/api")), "{report}");
    assert!(line(&report, "Cert ").contains("AccessDeniedException"), "{report}");
    for resource in ["distributiontenants.cloudfront.blockwork.dev", "caches.cache.blockwork.dev", "secrets"] {
        let note = format!("({resource} not listed: you may not list them (`kubectl auth can-i list {resource} -n {namespace}`))");
        assert!(report.lines().any(|l| l == note), "{note} missing from:\n{report}");
    }
}
