//! Graceful shutdown of a `kube::runtime::Controller` that also works before its first list.
//!
//! kube-runtime 5.0's runner holds reconciles until the controller's store is ready, and once a
//! graceful shutdown starts it stops polling the watch that would make the store ready: a
//! shutdown before the initial list completes never finishes. Before the store is ready nothing
//! has been reconciled, so there is nothing to drain and the controller can simply be dropped.

use std::future::Future;

use futures::FutureExt as _;
use kube::Resource;
use kube::runtime::reflector::Store;

/// Drives `controller` (a `Controller::run(..)` stream folded into a future, given
/// `graceful_shutdown_on(shutdown.clone())`) until it ends; when `shutdown` fires before
/// `store` is ready, returns at once instead of waiting forever.
pub async fn drive_until_shutdown<K>(controller: impl Future<Output = ()>, shutdown: impl Future<Output = ()>, store: Store<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let abandon_if_unready = async {
        shutdown.await;
        if store.wait_until_ready().now_or_never().is_some() {
            // Ready: the graceful path drains the running reconciles; wait for it.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = controller => {}
        () = abandon_if_unready => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    #[tokio::test]
    async fn shutdown_before_the_store_is_ready_returns_at_once() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let stuck = std::future::pending::<()>();
        let returned = tokio::time::timeout(Duration::from_secs(1), drive_until_shutdown(stuck, std::future::ready(()), store)).await;
        assert!(returned.is_ok(), "a controller that never became ready is dropped");
    }

    #[tokio::test]
    async fn shutdown_after_the_store_is_ready_waits_for_the_drain() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
        let draining = async {
            let _ = drained_rx.await;
        };
        let drive = drive_until_shutdown(draining, std::future::ready(()), store);
        tokio::pin!(drive);
        assert!(tokio::time::timeout(Duration::from_millis(200), &mut drive).await.is_err(), "waits while reconciles drain");
        let _ = drained_tx.send(());
        tokio::time::timeout(Duration::from_secs(1), drive).await.expect("returns once drained");
    }
}
