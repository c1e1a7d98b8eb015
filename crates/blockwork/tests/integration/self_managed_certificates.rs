#![allow(clippy::unwrap_used, clippy::panic)]
//! Self-managed webhook certificates (`--webhook-certificate-secret`, the chart's default)
//! against a real kube-apiserver: two replicas of `blockwork run`, under the RBAC `blockwork
//! rbac` generates for this mode, behind the webhook Service (the test environment routes the
//! API server's calls to it, as kube-proxy would). The leader creates the CA and the serving
//! certificate, the CRD's and the ValidatingWebhookConfiguration's `caBundle` are set, Cert
//! admission and Cache conversion go through the webhook, and renewals — serving certificates
//! every 20 s, a new CA once — swap the certificate without one failed request. A control plane of
//! its own (`control_plane::of`): the webhook configuration and CRDs are cluster-wide.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use blockwork_testenv::commands::kubectl_ok;
use blockwork_testenv::operator::Operator;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use kube::{Api, Client};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::time::{Instant, sleep};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const SECRET: &str = "blockwork-webhook-tls";
const SERVICE: &str = "blockwork-webhook";
const CONFIGURATION: &str = "blockwork";
const ZONES: &str = "k8s.example.com:Z0000000000000000001";

/// `blockwork args`, which must succeed; its stdout.
fn blockwork(args: &[&str]) -> String {
    let output = std::process::Command::new(BIN).args(args).output().unwrap();
    assert!(output.status.success(), "blockwork {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One `blockwork run` replica with self-managed certificates; killed on drop.
fn start_replica(kubeconfig: &Path, namespace: &str) -> Operator {
    Operator::new(Path::new(BIN), kubeconfig)
        .unwrap()
        .args(["--controllers", "cache,cert", "--namespaces", namespace, "--leader-elect", "--leader-election-namespace", namespace])
        .args(["--webhook-certificate-secret", SECRET, "--webhook-service-name", SERVICE, "--webhook-service-namespace", namespace])
        .args(["--webhook-configuration-name", CONFIGURATION])
        // Renewals every 20 s, a new CA after 60 s.
        .args(["--webhook-certificate-validity", "30s", "--webhook-ca-validity", "90s"])
        // No AWS here: only the webhook is under test.
        .args(["--dns-zones", ZONES, "--aws-region", "us-east-1", "--aws-endpoint-url", "http://127.0.0.1:9"])
        .args(["--log-level", "info,blockwork=debug"])
        .start()
        .unwrap()
}

async fn ready(replica: &Operator) -> bool {
    replica.check_running().unwrap();
    replica.get(replica.health, "/readyz").await.is_ok_and(|r| r.status == 200)
}

/// The certificate this replica presents to a client that trusts `bundle` and asks for
/// `host`: fails unless it verifies.
async fn presented(replica: &Operator, bundle: &[u8], host: &str) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle) {
        roots.add(ca.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", replica.webhook)).await.map_err(|e| e.to_string())?;
    let tls = connector.connect(ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?, tcp).await.map_err(|e| e.to_string())?;
    let (_, session) = tls.get_ref();
    Ok(session.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default())
}

/// A kubeconfig for the ServiceAccount `blockwork` of `namespace`, bound to what `blockwork
/// rbac` generates for self-managed certificates.
fn generated_rbac_kubeconfig(admin: &Path, namespace: &str, dir: &Path) -> PathBuf {
    kubectl_ok(admin, &["create", "serviceaccount", "blockwork", "-n", namespace], b"").unwrap();
    let rbac =
        blockwork(&["rbac", "--controllers", "cache,cert", "--name", namespace, "--namespace", namespace, "--namespaces", namespace]);
    let certificates = blockwork(
        &["rbac", "--controllers", "cache,cert", "--name", namespace, "--namespace", namespace, "--namespaces", namespace]
            .into_iter()
            .chain(["--webhook-certificate-secret", SECRET, "--webhook-configuration-name", CONFIGURATION])
            .collect::<Vec<_>>(),
    );
    assert!(certificates.len() > rbac.len(), "self-managed certificates need more than the controllers:\n{certificates}");
    kubectl_ok(admin, &["apply", "-f", "-"], certificates.as_bytes()).unwrap();
    let token = kubectl_ok(admin, &["create", "token", "blockwork", "-n", namespace, "--duration", "1h"], b"").unwrap();
    let text = std::fs::read_to_string(admin).unwrap();
    let admin_token = text.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text.replace(admin_token, token.trim())).unwrap();
    path
}

fn data(secret: &Secret, key: &str) -> Vec<u8> {
    secret.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.clone()).unwrap_or_default()
}

fn der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem).next().map(|c| c.unwrap().to_vec()).unwrap_or_default()
}

async fn ca_bundles(client: &Client) -> (Vec<u8>, Vec<u8>) {
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get("caches.cache.blockwork.dev").await.unwrap();
    let crd_bundle = crd.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).and_then(|c| c.ca_bundle).map(|b| b.0);
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get(CONFIGURATION).await.unwrap();
    let webhook_bundle = configuration.webhooks.unwrap_or_default().first().and_then(|w| w.client_config.ca_bundle.clone()).map(|b| b.0);
    (crd_bundle.unwrap_or_default(), webhook_bundle.unwrap_or_default())
}

#[tokio::test]
async fn self_managed_certificates_are_trusted_and_renewed_without_a_failed_request() {
    let plane = blockwork_testenv::control_plane::of("self_managed_certificates").await.unwrap();
    let client = plane.client();
    let admin = plane.kubeconfig_path().to_path_buf();
    let namespace = plane.namespace("self-managed").await.unwrap();
    let host = format!("{SERVICE}.{namespace}.svc");

    // What the chart installs besides the Deployment: CRDs and webhook configuration pointing at
    // the Service, the Service, RBAC.
    let crds = blockwork(&["crds", "--webhook-service-namespace", &namespace]);
    kubectl_ok(&admin, &["apply", "--server-side", "-f", "-"], crds.as_bytes()).unwrap();
    let webhooks = blockwork(&["webhooks", "--controllers", "cert", "--webhook-service-namespace", &namespace]);
    kubectl_ok(&admin, &["apply", "--server-side", "-f", "-"], webhooks.as_bytes()).unwrap();
    kubectl_ok(&admin, &["wait", "--for", "condition=established", "--timeout", "60s", "crd", "--all"], b"").unwrap();
    let service = Service {
        metadata: ObjectMeta { name: Some(SERVICE.into()), ..ObjectMeta::default() },
        spec: Some(ServiceSpec { ports: Some(vec![ServicePort { port: 443, ..ServicePort::default() }]), ..ServiceSpec::default() }),
        ..Service::default()
    };
    Api::<Service>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &service).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = generated_rbac_kubeconfig(&admin, &namespace, dir.path());

    let replicas = [start_replica(&kubeconfig, &namespace), start_replica(&kubeconfig, &namespace)];
    let backends: Vec<_> = replicas.iter().map(|r| std::net::SocketAddr::from(([127, 0, 0, 1], r.webhook))).collect();
    plane.route_service(&namespace, SERVICE, 443, &backends).await.unwrap();
    let logs = |replicas: &[Operator]| replicas.iter().map(Operator::logs).collect::<Vec<_>>().join("\n--- next replica ---\n");

    // Both replicas become ready once they serve the Secret's certificate, and the caBundles are set.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let secret = secrets.get_opt(SECRET).await.unwrap();
        let bundle = secret.as_ref().map(|s| data(s, "ca.crt")).unwrap_or_default();
        let ready = ready(&replicas[0]).await & ready(&replicas[1]).await;
        if ready && !bundle.is_empty() && ca_bundles(&client).await == (bundle.clone(), bundle.clone()) {
            break;
        }
        assert!(Instant::now() < deadline, "not ready with the caBundles set after 90 s\n{}", logs(&replicas));
        sleep(Duration::from_millis(200)).await;
    }

    // A Cache stored as v1beta1, read as v1alpha1: every read converts through the webhook.
    let gvk = |version: &str| GroupVersionKind::gvk("cache.blockwork.dev", version, "Cache");
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ApiResource::from_gvk(&gvk("v1beta1")));
    let alpha: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ApiResource::from_gvk(&gvk("v1alpha1")));
    let cache: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cache.blockwork.dev/v1beta1", "kind": "Cache",
        "metadata": { "name": "converted" },
        "spec": { "engine": "memcached", "memory": "64Mi", "replicas": 1 },
    }))
    .unwrap();
    beta.create(&PostParams::default(), &cache).await.unwrap();
    // A Cert outside the operator's zones: only the webhook knows the zones, so its denial
    // proves the request reached it over TLS the API server trusted.
    let certs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &ApiResource::from_gvk(&GroupVersionKind::gvk("acm.blockwork.dev", "v1", "Cert")));
    let outside: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "acm.blockwork.dev/v1", "kind": "Cert",
        "metadata": { "name": "outside" },
        "spec": { "serviceName": "shop", "environment": "prod", "domainName": "shop.other.org" },
    }))
    .unwrap();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };

    // Requests all through the renewals: three serving certificates and a new CA.
    let mut serving_certificates = BTreeSet::new();
    let mut cas = BTreeSet::new();
    let (mut admissions, mut conversions, mut failures) = (0, 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(150);
    while serving_certificates.len() < 4 || cas.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "after 150 s: {} serving certificates, {} CAs\n{}",
            serving_certificates.len(),
            cas.len(),
            logs(&replicas)
        );
        let secret = secrets.get(SECRET).await.unwrap();
        serving_certificates.insert(data(&secret, "tls.crt"));
        cas.insert(der(&data(&secret, "ca.crt")));
        match certs.create(&dry_run, &outside).await {
            Err(kube::Error::Api(status))
                if status.message.contains("shop.other.org") && !status.message.contains("failed calling webhook") =>
            {
                admissions += 1;
            }
            other => failures.push(format!("admission: {other:?}")),
        }
        match alpha.get("converted").await {
            Ok(object) if object.types.as_ref().is_some_and(|t| t.api_version == "cache.blockwork.dev/v1alpha1") => conversions += 1,
            other => failures.push(format!("conversion: {other:?}")),
        }
        sleep(Duration::from_millis(250)).await;
    }
    assert!(failures.is_empty(), "{} failed requests of {}: {failures:#?}\n{}", failures.len(), admissions + conversions, logs(&replicas));
    assert!(admissions > 50 && conversions > 50, "{admissions} admissions, {conversions} conversions");

    // Every replica presents the Secret's current certificate, verified against the bundle.
    let deadline = Instant::now() + Duration::from_secs(30);
    'replicas: for replica in &replicas {
        loop {
            let secret = secrets.get(SECRET).await.unwrap();
            let presented = presented(replica, &data(&secret, "ca.crt"), &host).await;
            if presented.as_ref().is_ok_and(|cert| *cert == der(&data(&secret, "tls.crt"))) {
                continue 'replicas;
            }
            assert!(Instant::now() < deadline, "a replica does not present the current certificate: {presented:?}\n{}", replica.logs());
            sleep(Duration::from_millis(200)).await;
        }
    }
    let (crd_bundle, webhook_bundle) = ca_bundles(&client).await;
    let current = data(&secrets.get(SECRET).await.unwrap(), "ca.crt");
    assert_eq!((crd_bundle, webhook_bundle), (current.clone(), current), "the caBundles follow the Secret");
}
