//! The chain to JWKS (issue 30): the exported Secret of `examples/cert-exported.yaml`, a key
//! rotator source as the example annotates it, gives a prev/current/next key set and its
//! `jwks.json` that follow ACM's renewals — the rotator unchanged, running beside the Cert
//! controller against the real kube-apiserver, ACM's renewals simulated by the fault proxy.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use crate::support::*;
use blockwork_cert::Cert;
use blockwork_rotator::{Config as RotatorConfig, Metrics as RotatorMetrics, RotatorArgs};
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, eventually};
use k8s_openapi::api::core::v1::Secret;

fn text(secret: &Secret, key: &str) -> String {
    secret.data.as_ref().and_then(|d| d.get(key)).map(|v| String::from_utf8_lossy(&v.0).into_owned()).unwrap_or_default()
}

/// The example, in the test's namespace.
fn example(namespace: &str) -> Cert {
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cert-exported.yaml")).unwrap();
    let mut cert: Cert = serde_saphyr::from_str(&yaml).unwrap();
    cert.metadata.namespace = Some(namespace.to_owned());
    cert
}

#[tokio::test]
async fn an_exported_secret_annotated_as_a_rotator_source_rotates_into_a_key_set_and_jwks_across_renewals() {
    let h = Harness::start("jwks", &["main"]).await;
    let mut rotator = ControllerTask::default();
    let config = RotatorConfig::new(&RotatorArgs::default(), std::slice::from_ref(&h.namespace), 4).unwrap();
    let metrics = RotatorMetrics::register(&mut prometheus_client::registry::Registry::default());
    let run = blockwork_rotator::run(h.plane.client(), config, Arc::clone(&metrics), std::future::pending());
    rotator.start(async move { run.await.expect("the rotator runs") });

    let cert = example(&h.namespace);
    let name = cert.metadata.name.clone().unwrap();
    h.create(&name, cert.spec.clone()).await;
    let exported = h.wait_for(&name, "exported", |c| c.status.as_ref().is_some_and(|s| s.observation.export.is_some())).await;
    let arn = status(&exported).observation.certificate_arn.clone().unwrap();
    let secrets = h.api_of::<Secret>();

    // Each issuance becomes `next`, pushing the others down: after the first export and two
    // renewals, prev/current/next are the three certificates in order, and the JWK set has them.
    let mut issued = vec![text(&secrets.get("my-api-tls").await.unwrap(), "tls.crt")];
    for round in 0..3 {
        let wanted = issued.clone();
        let target = eventually(&format!("the key set after issuance {round}"), TIMEOUT, async || {
            let Some(target) = secrets.get_opt("my-api-jwks").await.unwrap() else { return Err("no target yet".to_owned()) };
            let slots = [text(&target, "prev-tls.crt"), text(&target, "tls.crt"), text(&target, "next-tls.crt")];
            let expected: Vec<String> =
                std::iter::repeat_n(String::new(), 3 - wanted.len().min(3)).chain(wanted.iter().rev().take(3).rev().cloned()).collect();
            if slots.to_vec() == expected {
                Ok(target)
            } else {
                Err(format!("slots hold {} certificates", slots.iter().filter(|s| !s.is_empty()).count()))
            }
        })
        .await;
        let jwks: serde_json::Value = serde_json::from_str(&text(&target, "jwks.json")).unwrap();
        assert_eq!(jwks["keys"].as_array().unwrap().len(), issued.len().min(3), "round {round}: {jwks}");
        assert_eq!(text(&target, "tls.key").is_empty(), issued.len() < 2, "the current slot is filled from the second issuance on");
        if round < 2 {
            let renewed = h.proxy.renew_certificate(&arn).await.unwrap();
            h.wait_for(&name, "re-exported", |c| status(c).observation.export.as_ref().is_some_and(|e| e.serial == renewed.serial)).await;
            issued.push(text(&secrets.get("my-api-tls").await.unwrap(), "tls.crt"));
        }
    }
}
