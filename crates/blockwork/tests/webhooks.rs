#![allow(clippy::unwrap_used, clippy::panic)]
//! Admission webhooks end to end, as a user runs them: `blockwork run` serves them with a
//! certificate from files, `blockwork webhooks` registers them with a real kube-apiserver, and
//! the API server asks them before storing a Cert or a DistributionTenant. Own test binary: the registration is
//! cluster-wide, and each test registers its own, one test at a time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use blockwork_cert::{Cert, CertSpec};
use blockwork_tenant::api::DomainName;
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::commands::kubectl_ok;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::Mutex;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const ZONES: &str = "k8s.example.com:Z0000000000000000001";
const CONTROLLERS: &str = "cert,tenant";

/// One registration at a time.
static REGISTRATION: Mutex<()> = Mutex::const_new(());

struct Webhook {
    child: tokio::process::Child,
    dir: tempfile::TempDir,
}

impl Webhook {
    /// `blockwork run --controllers cert,tenant` with their webhooks on a free port, registered.
    async fn start(kubeconfig: &Path, fail_closed: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tls = blockwork_webhook::TlsMaterial::self_signed(&["127.0.0.1"]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), &tls.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &tls.key_pem).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &tls.ca_pem).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let fail_closed = fail_closed.to_string();
        let child = tokio::process::Command::new(BIN)
            .args(["run", "--controllers", CONTROLLERS, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"])
            .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
            .arg("--webhook-cert-dir")
            .arg(dir.path())
            .args(["--webhook-fail-closed", &fail_closed])
            // No AWS here: the controller's calls fail fast; only the webhook is under test.
            .args(["--dns-zones", ZONES, "--aws-region", "us-east-1", "--aws-endpoint-url", "http://127.0.0.1:9"])
            .args(["--tenant-aws-endpoint-url", "http://127.0.0.1:9", "--tenant-aws-region", "us-east-1"])
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let webhook = Self { child, dir };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "webhook server never listened\n{}", webhook.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let registration = std::process::Command::new(BIN)
            .args(["webhooks", "--controllers", CONTROLLERS, "--fail-closed", &fail_closed])
            .args(["--webhook-url", &format!("https://127.0.0.1:{port}")])
            .arg("--webhook-ca-file")
            .arg(webhook.dir.path().join("ca.crt"))
            .output()
            .unwrap();
        assert!(registration.status.success(), "{}", String::from_utf8_lossy(&registration.stderr));
        kubectl_ok(kubeconfig, &["apply", "--server-side", "--force-conflicts", "-f", "-"], &registration.stdout).unwrap();
        webhook
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn cluster() -> (kube::Client, PathBuf) {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_tenant::crd()]).await.unwrap();
    (plane.client(), plane.kubeconfig_path().to_path_buf())
}

async fn namespace(prefix: &str) -> String {
    blockwork_testenv::control_plane::control_plane().await.unwrap().namespace(prefix).await.unwrap()
}

fn cert(name: &str, service: &str, environment: &str) -> Cert {
    Cert::new(name, CertSpec { service_name: service.into(), environment: environment.into(), ..CertSpec::default() })
}

/// Retries while the API server cannot reach a webhook that was just registered.
async fn create<K>(api: &Api<K>, object: &K) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..50 {
        match api.create(&PostParams::default(), object).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(kube::Error::Api(status)) => return Err(status.message),
            Err(other) => panic!("{other}"),
        }
    }
    panic!("the webhook stayed unreachable")
}

#[tokio::test]
async fn a_domain_another_cert_holds_is_rejected_in_any_namespace() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = Webhook::start(&kubeconfig, true).await;
    let (first, second) = (namespace("webhook-first").await, namespace("webhook-second").await);

    create(&Api::namespaced(client.clone(), &first), &cert("orders", "orders", "prod"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    // The webhook knows other Certs from a watch: wait (by dry runs, which the webhook sees but
    // nothing stores) until it has seen the first, then the real create must be refused.
    let copies: Api<Cert> = Api::namespaced(client, &second);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    for _ in 0..100 {
        if copies.create(&dry_run, &cert("copy", "orders", "prod")).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let message = create(&copies, &cert("copy", "orders", "prod")).await.expect_err("duplicate domain");
    assert!(message.contains("orders-prod.k8s.example.com"), "{message}");
    assert!(message.contains(&format!("{first}/orders")), "names the holder: {message}");
}

#[tokio::test]
async fn a_domain_outside_the_operators_zones_is_rejected() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = Webhook::start(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-zone").await);
    let mut outside = cert("outside", "shop", "prod");
    outside.spec.domain_name = Some("shop.other.org".into());
    let message = create(&api, &outside).await.expect_err("no zone");
    assert!(message.contains("shop.other.org"), "{message}");
}

#[tokio::test]
async fn fail_open_admits_problems_with_a_warning() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = Webhook::start(&kubeconfig, false).await;
    let api = Api::namespaced(client, &namespace("webhook-open").await);
    let mut outside = cert("outside", "shop", "prod");
    outside.spec.domain_name = Some("shop.other.org".into());
    create(&api, &outside).await.expect("admitted: --webhook-fail-closed=false only warns");
}

#[tokio::test]
async fn a_cert_san_with_an_undecodable_a_label_is_rejected_naming_the_label() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = Webhook::start(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-alabel").await);
    let mut idn = cert("idn", "shop", "prod");
    idn.spec.subject_alternative_names = vec!["xn--zz.k8s.example.com".into()];
    let message = create(&api, &idn).await.expect_err("xn--zz does not decode");
    assert!(message.contains("spec.subjectAlternativeNames: label \"xn--zz\""), "{message}");
}

fn tenant(name: &str, domains: &[&str]) -> DistributionTenant {
    DistributionTenant::new(
        name,
        DistributionTenantSpec {
            distribution_id: "E1ABCDEF2GHIJ".into(),
            domains: domains.iter().map(|d| DomainName { domain: (*d).to_owned() }).collect(),
            ..DistributionTenantSpec::default()
        },
    )
}

#[tokio::test]
async fn a_distribution_tenant_domain_with_an_undecodable_a_label_is_rejected_naming_the_label() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = Webhook::start(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-tenant").await);
    create(&api, &tenant("shop", &["xn--mnchen-3ya.k8s.example.com"])).await.unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    let message = create(&api, &tenant("idn", &["xn--zz.k8s.example.com"])).await.expect_err("xn--zz does not decode");
    assert!(message.contains("spec.domains: label \"xn--zz\""), "{message}");
}

#[tokio::test]
async fn a_distribution_tenant_domain_given_with_and_without_its_trailing_dot_is_rejected() {
    let _one = REGISTRATION.lock().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = Webhook::start(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-dot").await);
    let message =
        create(&api, &tenant("twice", &["www.k8s.example.com", "www.k8s.example.com."])).await.expect_err("the same domain twice");
    assert!(message.contains("spec.domains lists www.k8s.example.com more than once"), "{message}");
}
