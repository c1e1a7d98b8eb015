//! The API server proxy: what passes through it, and what it does to clients instead.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::kube_proxy::{ApiFault, KubeProxy, Requests};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};

/// A proxy, a client through it, and a namespace of the test's own.
async fn through_proxy(prefix: &str) -> (KubeProxy, Api<ConfigMap>) {
    let plane = control_plane().await.unwrap();
    let proxy = KubeProxy::start(plane).await.unwrap();
    let namespace = plane.namespace(prefix).await.unwrap();
    let client = proxy.client().await.unwrap();
    (proxy, Api::namespaced(client, &namespace))
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap { metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() }, ..ConfigMap::default() }
}

#[tokio::test]
async fn writes_are_recorded_with_their_field_manager() {
    let (proxy, api) = through_proxy("kube-proxy-writes").await;
    api.create(&PostParams { field_manager: Some("test-manager".into()), ..PostParams::default() }, &config_map("a")).await.unwrap();
    api.get("a").await.unwrap();
    let writes = proxy.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!((writes[0].method.as_str(), writes[0].field_manager.as_deref(), writes[0].status), ("POST", Some("test-manager"), 201));
    assert!(writes[0].forwarded);
    assert_eq!(proxy.counts().get("read"), Some(&1));
}

#[tokio::test]
async fn too_many_requests_is_answered_instead_of_the_api_server_and_kube_clients_retry_it() {
    let (proxy, api) = through_proxy("kube-proxy-429").await;
    proxy.inject(Requests::Writes, ApiFault::TooManyRequests, 1);
    api.create(&PostParams::default(), &config_map("a")).await.expect("kube's client retries a 429");
    let outcomes: Vec<(u16, bool)> = proxy.writes().iter().map(|w| (w.status, w.forwarded)).collect();
    assert_eq!(outcomes, [(429, false), (201, true)]);
}

#[tokio::test]
async fn a_fault_on_a_path_fails_only_the_requests_of_that_path() {
    let (proxy, api) = through_proxy("kube-proxy-path").await;
    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    proxy.inject_on_path(Requests::Reads, "/secrets", ApiFault::ServerError(500), 1);
    api.get("a").await.expect("a ConfigMap read is not a Secret read");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(api.into_client(), "default");
    let error = secrets.get_opt("absent").await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(status) if status.code == 500), "{error:?}");
    assert_eq!(proxy.injected().get("ServerError(500)"), Some(&1));
}

#[tokio::test]
async fn a_lost_response_takes_effect_yet_fails() {
    let (proxy, api) = through_proxy("kube-proxy-lost").await;
    proxy.inject(Requests::Writes, ApiFault::LostResponse, 1);
    let error = api.create(&PostParams::default(), &config_map("a")).await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(status) if status.code == 500), "{error:?}");
    api.get("a").await.expect("the create took effect");
    assert_eq!(proxy.injected().get("LostResponse"), Some(&1));
}

#[tokio::test]
async fn a_watch_answered_gone_carries_the_410_error_event() {
    let (proxy, api) = through_proxy("kube-proxy-410").await;
    proxy.inject(Requests::Watches, ApiFault::Gone, 1);
    let events: Vec<_> = api.watch(&WatchParams::default(), "0").await.unwrap().collect().await;
    assert_eq!(events.len(), 1, "{events:?}");
    match &events[0] {
        Ok(WatchEvent::Error(status)) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn a_cut_watch_ends_at_once_after_passing_events_through() {
    let (proxy, api) = through_proxy("kube-proxy-cut").await;
    let mut stream = api.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    api.create(&PostParams::default(), &config_map("seen")).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap();
    assert!(matches!(first, Some(WatchEvent::Added(ref cm)) if cm.metadata.name.as_deref() == Some("seen")), "{first:?}");
    proxy.cut_watches();
    // kube's watch stream ends at an aborted body (its client starts another watch): at once, not
    // at the watch's 60 s timeout.
    let after = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the cut ends the stream at once");
    assert!(matches!(after, None | Some(Err(_))), "{after:?}");
    // A new watch is not cut.
    let mut again = api.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    let seen = tokio::time::timeout(Duration::from_secs(10), again.try_next()).await.unwrap().unwrap();
    assert!(matches!(seen, Some(WatchEvent::Added(_))), "{seen:?}");
}
