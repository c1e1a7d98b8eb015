//! Shares of a controller's concurrency. `--concurrency N` is N reconciles in flight **per
//! share**: an operator whose objects act in AWS accounts of their own names each object's share
//! ([`crate::ExternalResource::share`]: the AwsIdentity it acts as, ADR 0014), so each account
//! has N reconciles of its own and the accounts proceed in parallel, each paced by its own quota
//! buckets. With one share for the whole controller (the default), N reconciles in flight in
//! all, as kube-runtime's own limit would give.
//!
//! Why not kube-runtime's limit: it is one pool for every object. Eight accounts' Certs then
//! shared three workers, and 2,400 Certs over 8 accounts took 9.6 times what one account's quota
//! allows, with no throttling at all (docs/benchmarks.md, "Many accounts"): the accounts'
//! buckets were idle while their Certs queued for a worker.
//!
//! A share's reconciles enter in the order they asked (the semaphore is fair); a reconcile waiting
//! for its share when the process stops gives up its turn (it did nothing, and the next process
//! looks at the object again), so a shutdown drains only the reconciles that run.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The concurrency of one controller, by share.
#[derive(Debug)]
pub struct Shares {
    per_share: usize,
    semaphores: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Shares {
    /// `per_share` reconciles in flight per share (at least 1).
    pub fn new(per_share: u16) -> Self {
        Self { per_share: usize::from(per_share.max(1)), semaphores: Mutex::default() }
    }

    /// Waits for a place in `share`, held until the permit drops; `None` if `stopping` completes
    /// first.
    pub async fn enter(&self, share: &str, stopping: impl Future<Output = ()>) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut semaphores = self.semaphores.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(semaphores.entry(share.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.per_share))))
        };
        tokio::select! {
            biased;
            () = stopping => None,
            // Never closed: the semaphore lives as long as the map that holds it.
            permit = semaphore.acquire_owned() => permit.ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn never() -> std::future::Pending<()> {
        std::future::pending()
    }

    async fn entered(shares: &Shares, share: &str) -> bool {
        tokio::time::timeout(Duration::from_millis(50), shares.enter(share, never())).await.is_ok_and(|p| p.is_some())
    }

    #[tokio::test]
    async fn a_share_holds_its_concurrency_of_reconciles_in_flight() {
        let shares = Shares::new(2);
        let first = shares.enter("team-a", never()).await;
        let second = shares.enter("team-a", never()).await;
        assert!(first.is_some() && second.is_some());
        assert!(!entered(&shares, "team-a").await, "a third waits for a place");
        drop(first);
        assert!(entered(&shares, "team-a").await, "a place freed is taken");
    }

    #[tokio::test]
    async fn a_full_share_never_holds_back_another() {
        let shares = Shares::new(1);
        let _busy = shares.enter("team-a", never()).await;
        assert!(entered(&shares, "team-b").await, "team-b's account has places of its own");
        assert!(entered(&shares, "").await, "and so has the operator's own identity");
    }

    #[tokio::test]
    async fn a_reconcile_waiting_for_its_share_gives_up_its_turn_when_the_process_stops() {
        let shares = Shares::new(1);
        let _busy = shares.enter("team-a", never()).await;
        let waiting = tokio::time::timeout(Duration::from_secs(1), shares.enter("team-a", std::future::ready(()))).await;
        assert!(waiting.is_ok_and(|p| p.is_none()), "stopping ends the wait, without a place");
    }

    #[tokio::test]
    async fn a_concurrency_of_zero_still_runs_one_reconcile() {
        assert!(entered(&Shares::new(0), "team-a").await);
    }
}
