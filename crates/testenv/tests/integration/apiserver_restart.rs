//! A restarted API server (own test binary: the restart cuts every client of the control plane).

#![allow(clippy::unwrap_used, clippy::panic)]

use blockwork_testenv::control_plane::control_plane;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

#[tokio::test]
async fn a_restarted_api_server_keeps_its_state_and_serves_the_same_clients() {
    let plane = control_plane().await.unwrap();
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
