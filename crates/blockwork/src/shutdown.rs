//! A one-shot, cloneable shutdown signal.
//!
//! The process owns SIGINT/SIGTERM handling once (see `run`) and fans the request out through
//! these handles, so no component installs its own signal handler (kube-runtime's
//! `Controller::shutdown_on_signal` would, and leaves the default handlers disabled afterwards).

use std::future::Future;

use tokio::sync::watch;

/// Fires a [`Shutdown`]. Dropping the trigger fires it too, so a waiter never hangs on a
/// trigger that is gone.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// Waits for a [`ShutdownTrigger`] to fire. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A linked trigger and handle.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    /// Requests shutdown; idempotent.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Completes once shutdown is requested (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the trigger is gone, which counts as a request.
        let _ = rx.wait_for(|requested| *requested).await;
    }

    /// Like [`Shutdown::wait`], but owns its handle: for APIs that need a `'static` future, such
    /// as `kube::runtime::Controller::graceful_shutdown_on`, `blockwork_runtime::run` or axum's
    /// `with_graceful_shutdown`.
    pub fn wait_owned(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let this = self.clone();
        async move { this.wait().await }
    }

    /// Whether shutdown has been requested.
    pub fn is_requested(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waiters_wake_on_trigger_and_late_waiters_return_at_once() {
        let (trigger, shutdown) = channel();
        assert!(!shutdown.is_requested());
        let waiter = tokio::spawn(shutdown.wait_owned());
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("woken").expect("joined");
        assert!(shutdown.is_requested());
        tokio::time::timeout(Duration::from_secs(1), shutdown.wait()).await.expect("already requested");
    }

    #[test]
    fn owned_waits_fit_graceful_shutdown_apis() {
        fn assert_fits<F: Future<Output = ()> + Send + Sync + 'static>(_: F) {}
        let (_trigger, shutdown) = channel();
        assert_fits(shutdown.wait_owned());
    }

    #[tokio::test]
    async fn dropping_the_trigger_counts_as_a_request() {
        let (trigger, shutdown) = channel();
        drop(trigger);
        assert!(shutdown.is_requested());
        tokio::time::timeout(Duration::from_secs(1), shutdown.wait()).await.expect("returns");
    }
}
