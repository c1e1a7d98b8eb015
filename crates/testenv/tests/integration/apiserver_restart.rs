//! A restarted API server (a control plane of the test's own: the restart cuts every client).

#![allow(clippy::unwrap_used, clippy::panic)]

use blockwork_testenv::control_plane::ControlPlane;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

#[tokio::test]
async fn a_restarted_api_server_keeps_its_state_and_serves_the_same_clients() {
    let plane = ControlPlane::start_own().await.unwrap();
    let namespace = plane.namespace("restart").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(plane.client(), &namespace);
    let object = ConfigMap { metadata: ObjectMeta { name: Some("kept".into()), ..ObjectMeta::default() }, ..ConfigMap::default() };
    api.create(&PostParams::default(), &object).await.unwrap();
    let (_, before) = plane.pids();

    plane.restart_apiserver().await.unwrap();

    let (_, after) = plane.pids();
    assert_ne!(before, after, "a new process");
    assert!(api.get("kept").await.is_ok(), "etcd kept the object; the old client reconnects");
}
