//! What the Cache tests share: the Cache CRD and its conversion webhook, which every test
//! process serves behind one address, as a Deployment's pods serve a Service (under nextest each
//! test is a process; the API server converts through whichever is alive).

use std::net::SocketAddr;
use std::sync::OnceLock;

use blockwork_cache::{conversion, crd};
use blockwork_testenv::control_plane::control_plane;
use blockwork_webhook::TlsMaterial;
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig;

/// The host the CRD's conversion webhook URL names: the control plane routes it to the webhooks.
const CONVERSION_HOST: &str = "cache-conversion.testenv.invalid";

/// Installs the Cache CRD with its conversion served by this test process's [`webhook`] too.
pub async fn install_crd() {
    let plane = control_plane().await.unwrap();
    let tls = plane.shared_tls(CONVERSION_HOST).await.unwrap();
    plane.route(CONVERSION_HOST, 443, webhook(&tls)).unwrap();
    let crd = crd::crd_with_conversion(WebhookClientConfig {
        url: Some(format!("https://{CONVERSION_HOST}{}", crd::CONVERSION_PATH)),
        ca_bundle: Some(ByteString(tls.ca_pem.into_bytes())),
        ..WebhookClientConfig::default()
    });
    plane.install_crds(&[crd]).await.unwrap();
}

/// This process's conversion webhook, on its own thread and runtime so it outlives each test's
/// runtime.
fn webhook(tls: &TlsMaterial) -> SocketAddr {
    static WEBHOOK: OnceLock<SocketAddr> = OnceLock::new();
    *WEBHOOK.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        let tls = tls.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async move {
                let (address, _task) = blockwork_webhook::serve(
                    "127.0.0.1:0".parse().unwrap(),
                    conversion::router(),
                    &blockwork_webhook::ServingCertificate::new(&tls).unwrap(),
                    std::future::pending(),
                )
                .await
                .unwrap();
                sender.send(address).unwrap();
                std::future::pending::<()>().await;
            });
        });
        receiver.recv().unwrap()
    })
}
