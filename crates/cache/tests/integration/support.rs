//! What the Cache tests share: the Cache CRD with its conversion webhook served by this test
//! process. The CRD is cluster-wide and names one process's webhook, so under nextest the tests
//! that install it take turns (the `cache-crd` test group, .config/nextest.toml).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::OnceLock;

use blockwork_cache::{conversion, crd};
use blockwork_testenv::control_plane::control_plane;
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig;

/// Installs the Cache CRD with its conversion served by this test process's [`webhook`].
pub async fn install_crd() {
    let (address, ca) = webhook();
    let crd = crd::crd_with_conversion(WebhookClientConfig {
        url: Some(format!("https://{address}{}", crd::CONVERSION_PATH)),
        ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
        ..WebhookClientConfig::default()
    });
    control_plane().await.unwrap().install_crds(&[crd]).await.unwrap();
}

/// The conversion webhook, on its own thread and runtime so it outlives each test's runtime.
fn webhook() -> &'static (SocketAddr, String) {
    static WEBHOOK: OnceLock<(SocketAddr, String)> = OnceLock::new();
    WEBHOOK.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async move {
                let tls = blockwork_webhook::TlsMaterial::self_signed(&["127.0.0.1"]).unwrap();
                let (address, _task) = blockwork_webhook::serve(
                    "127.0.0.1:0".parse().unwrap(),
                    conversion::router(),
                    &blockwork_webhook::ServingCertificate::new(&tls).unwrap(),
                    std::future::pending(),
                )
                .await
                .unwrap();
                sender.send((address, tls.ca_pem.clone())).unwrap();
                std::future::pending::<()>().await;
            });
        });
        receiver.recv().unwrap()
    })
}
