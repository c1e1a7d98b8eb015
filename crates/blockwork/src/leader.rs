//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-lease-manager.
//!
//! # Timing
//!
//! Blockwork keeps client-go's proportions (lease : renew deadline : retry period) but shortens
//! the lease from client-go's 15 s to 12 s, with a renew deadline of 8 s and a retry period of
//! 2 s: a leader killed just after renewing leaves a Lease valid for 12 s, and a standby looks
//! once per retry period, so a successor takes over within 12 s + 2 s = 14 s — within 15 s every
//! time, which issue 15 asks for (client-go's 15 s + 2 s could take 17 s). kube-lease-manager
//! 0.13 has two knobs, `duration` and `grace`, so the three timings map like this:
//!
//! * **Lease duration 12 s** → `with_duration(12)`, written to `spec.leaseDurationSeconds`. A
//!   standby takes the Lease only once `renewTime + 12 s` has passed (or the holder released it).
//! * **Renew deadline 8 s** → no such option: the crate keeps reporting leadership while its
//!   renewals fail, until it reads the Lease held by someone else, and never if the API server
//!   stays unreachable. So a watchdog here enforces it: the leader reads its Lease and, if
//!   `spec.renewTime` (written by this process, with its own clock) is older than 8 s, or another
//!   identity holds it, fails stop. That leaves 4 s (a third of the lease, as client-go's 5 s of
//!   15 s) between the old leader stopping and a standby starting, for clock skew. `grace` (how
//!   long before expiry the holder renews) is set to 8 s, so the holder renews 4 s after each
//!   renewal and has one more try, 2 s later, before the deadline. Every request of the elector
//!   times out after 4 s (half the deadline), so a hung connection turns into a failed try
//!   instead of outliving the deadline.
//! * **Retry period 2 s** → no such option either: the crate's `watch()` backs off 1–30 s after
//!   an error, and a standby sleeps until the Lease it last saw expires, so after a clean
//!   release (a rolling update) it would take up to 12 s to notice. This module drives
//!   `LeaseManager::changed()` itself and waits 2 s after a failed call; a standby reads the
//!   Lease every 2 s and competes again at once when its holder released it; the leader's
//!   watchdog checks every 2 s once a renewal is due.
//!
//! # Fail-stop
//!
//! Once leadership was acquired, losing it ends [`Elector::run`] with [`LeadershipLost`]; the
//! caller exits the process (the linkerd policy-controller pattern) instead of trying to cancel
//! in-flight reconciles, which could still be writing when the next leader starts.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tracing::{debug, info, warn};

use crate::shutdown::Shutdown;

pub const LEASE_DURATION: Duration = Duration::from_secs(12);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(8);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// kube-lease-manager's `grace`: the holder renews when this much of the lease is left.
const GRACE: Duration = RENEW_DEADLINE;
/// Timeout of every request the elector makes.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(RENEW_DEADLINE.as_secs() / 2);

/// Where this process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The Lease could not be read yet.
    Starting,
    /// Waiting for the Lease: a hot standby.
    Standby,
    /// Holds the Lease.
    Leader,
}

/// Leadership was lost after being acquired.
#[derive(Debug, thiserror::Error)]
#[error("lost leadership of Lease {namespace}/{name}: {reason}")]
pub struct LeadershipLost {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct Elector {
    pub namespace: String,
    pub lease_name: String,
    /// `holderIdentity` while this process leads; unique per process.
    pub identity: String,
}

/// `<pod name>_<uuid>`: unique even across restarts of one pod, so a restarted process never
/// mistakes its predecessor's Lease for its own.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "blockwork".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// A client for the elector: like the process's ([`blockwork_runtime::client`]), with every request bounded by
/// [`REQUEST_TIMEOUT`].
pub async fn client() -> anyhow::Result<Client> {
    let mut config = kube::Config::infer().await.context("loading the Kubernetes client configuration")?;
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.reset_reader_on_write = true;
    blockwork_runtime::client::client(config).context("building the Kubernetes client for leader election")
}

/// How [`Elector::compete`] ended.
enum Outcome {
    /// `stop` fired; `leading` tells whether this process holds the Lease.
    Stopped { leading: bool },
    /// A standby saw the Lease released: compete again with a fresh manager.
    Released,
    /// Leadership lost after being acquired.
    Lost(String),
}

impl Elector {
    /// Competes for the Lease (creating it if missing), publishing this process' [`Role`], until
    /// `stop` fires: then it releases the Lease if it holds it and returns `Ok`. Returns
    /// [`LeadershipLost`] if leadership, once acquired, is lost.
    pub async fn run(self, client: Client, role: watch::Sender<Role>, stop: Shutdown) -> Result<(), LeadershipLost> {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        loop {
            let Some(manager) = self.manager(&client, &stop).await else { return Ok(()) };
            if role.send_replace(Role::Standby) == Role::Starting {
                info!(lease = %self.lease_name, namespace = %self.namespace, identity = %self.identity, "waiting for leadership");
            }
            match self.compete(&manager, &api, &role, &stop).await {
                Outcome::Stopped { leading: false } => return Ok(()),
                Outcome::Stopped { leading: true } => {
                    match timeout(RENEW_DEADLINE, manager.release()).await {
                        Ok(Ok(())) => info!(lease = %self.lease_name, "released leadership"),
                        Ok(Err(e)) => warn!(error = %e, "could not release the Lease; it expires by itself"),
                        Err(_) => warn!("releasing the Lease timed out; it expires by itself"),
                    }
                    return Ok(());
                }
                Outcome::Released => debug!(lease = %self.lease_name, "the Lease was released; competing for it"),
                Outcome::Lost(reason) => {
                    return Err(LeadershipLost { namespace: self.namespace, name: self.lease_name, reason });
                }
            }
        }
    }

    /// Drives `manager`: renews the Lease while leading, under the [`Watchdog`]; as a standby,
    /// polls the Lease every retry period and returns [`Outcome::Released`] once its holder
    /// released it. (The manager itself would only look again when the Lease it last saw
    /// expires, up to a lease duration later.)
    async fn compete(&self, manager: &LeaseManager, api: &Api<Lease>, role: &watch::Sender<Role>, stop: &Shutdown) -> Outcome {
        let mut watchdog: Option<Watchdog> = None;
        let mut standby_poll = Instant::now() + RETRY_PERIOD;
        let mut change = Box::pin(next_change(manager, None));
        loop {
            let timer = match &watchdog {
                Some(w) => w.next_check,
                None => standby_poll,
            };
            tokio::select! {
                biased;
                () = stop.wait() => return Outcome::Stopped { leading: watchdog.is_some() },
                () = sleep_until(timer) => match watchdog.as_mut() {
                    Some(w) => {
                        if let Err(reason) = w.check(api, &self.lease_name, &self.identity).await {
                            return Outcome::Lost(reason);
                        }
                    }
                    None => match standby_look(api, &self.lease_name, &self.identity).await {
                        StandbyLook::Released => return Outcome::Released,
                        // A Lease update can succeed on the server while its reply is lost:
                        // the manager's state then says standby forever. A new manager reads
                        // the Lease afresh and sees this process as the holder.
                        StandbyLook::HeldByUs => {
                            debug!(lease = %self.lease_name, "the Lease names this process; re-reading it");
                            return Outcome::Released;
                        }
                        StandbyLook::HeldByOther => standby_poll = Instant::now() + RETRY_PERIOD,
                    },
                },
                result = &mut change => {
                    let retry_at = match result {
                        Ok(true) => {
                            info!(lease = %self.lease_name, identity = %self.identity, "acquired leadership");
                            watchdog = Some(Watchdog::new(Instant::now()));
                            role.send_replace(Role::Leader);
                            None
                        }
                        Ok(false) if watchdog.is_some() => return Outcome::Lost("another identity holds the Lease".to_owned()),
                        Ok(false) => None,
                        Err(e) => {
                            warn!(error = %e, lease = %self.lease_name, "leader election: Lease request failed; retrying in {RETRY_PERIOD:?}");
                            Some(Instant::now() + RETRY_PERIOD)
                        }
                    };
                    change.set(next_change(manager, retry_at));
                }
            }
        }
    }

    /// Builds the manager, which creates the Lease if needed; retries until `stop` fires.
    async fn manager(&self, client: &Client, stop: &Shutdown) -> Option<LeaseManager> {
        loop {
            let build = LeaseManagerBuilder::new(client.clone(), &self.lease_name)
                .with_namespace(&self.namespace)
                .with_identity(&self.identity)
                .with_duration(LEASE_DURATION.as_secs())
                .with_grace(GRACE.as_secs())
                .build();
            tokio::select! {
                biased;
                () = stop.wait() => return None,
                built = build => match built {
                    Ok(manager) => return Some(manager),
                    Err(e) => warn!(error = %e, lease = %self.lease_name, namespace = %self.namespace, "leader election: cannot read or create the Lease; retrying in {RETRY_PERIOD:?}"),
                },
            }
            tokio::select! {
                biased;
                () = stop.wait() => return None,
                () = tokio::time::sleep(RETRY_PERIOD) => {}
            }
        }
    }
}

/// One `changed()` call, after waiting for `retry_at`. `changed()` returns only when leadership
/// changes or a request fails; meanwhile it renews the Lease (as holder) or waits for it.
async fn next_change(manager: &LeaseManager, retry_at: Option<Instant>) -> kube_lease_manager::Result<bool> {
    if let Some(at) = retry_at {
        sleep_until(at).await;
    }
    manager.changed().await
}

/// What a standby sees of the Lease.
#[derive(Debug, PartialEq, Eq)]
enum StandbyLook {
    /// No holder (or no Lease): compete for it.
    Released,
    /// This process holds it, though its manager does not know.
    HeldByUs,
    /// Someone else holds it, or it cannot be read.
    HeldByOther,
}

async fn standby_look(api: &Api<Lease>, name: &str, identity: &str) -> StandbyLook {
    match timeout(RETRY_PERIOD, api.get_opt(name)).await {
        Ok(Ok(Some(lease))) => match lease.spec.and_then(|spec| spec.holder_identity) {
            None => StandbyLook::Released,
            Some(holder) if holder == identity => StandbyLook::HeldByUs,
            Some(_) => StandbyLook::HeldByOther,
        },
        Ok(Ok(None)) => StandbyLook::Released,
        Ok(Err(e)) => {
            debug!(error = %e, "leader election: cannot read the Lease");
            StandbyLook::HeldByOther
        }
        Err(_) => StandbyLook::HeldByOther,
    }
}

/// Enforces the renew deadline while leading.
#[derive(Debug)]
struct Watchdog {
    /// When this process last saw its own renewal in the Lease.
    renewed: Instant,
    next_check: Instant,
}

impl Watchdog {
    fn new(renewed: Instant) -> Self {
        Self { renewed, next_check: next_check(renewed, Instant::now()) }
    }

    /// Reads the Lease; `Err(reason)` if leadership is lost, or if this process cannot confirm a
    /// renewal younger than the deadline (conservative: it may then stop up to one renewal
    /// interval before the Lease would really expire).
    async fn check(&mut self, api: &Api<Lease>, name: &str, identity: &str) -> Result<(), String> {
        let deadline = self.renewed + RENEW_DEADLINE;
        match timeout_at(deadline, api.get(name)).await {
            Ok(Ok(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                if spec.holder_identity.as_deref() != Some(identity) {
                    return Err(format!("the Lease is held by {:?}", spec.holder_identity));
                }
                if let Some(renew_time) = spec.renew_time {
                    let age = SystemTime::now().duration_since(SystemTime::from(renew_time.0)).unwrap_or_default();
                    if let Some(renewed) = Instant::now().checked_sub(age) {
                        self.renewed = self.renewed.max(renewed);
                    }
                }
            }
            Ok(Err(e)) => warn!(error = %e, "leader election: cannot read the Lease to confirm its renewal"),
            Err(_) => warn!("leader election: reading the Lease to confirm its renewal timed out"),
        }
        let now = Instant::now();
        if now >= self.renewed + RENEW_DEADLINE {
            return Err(format!("not renewed for {:?} (renew deadline {RENEW_DEADLINE:?})", now - self.renewed));
        }
        self.next_check = next_check(self.renewed, now);
        debug!(renewed_ago = ?now - self.renewed, next_check_in = ?self.next_check - now, "Lease renewal checked");
        Ok(())
    }
}

/// The next check after a renewal at `renewed`: shortly after the next renewal is due, then
/// every retry period, and at the latest at the deadline.
fn next_check(renewed: Instant, now: Instant) -> Instant {
    let due = renewed + (LEASE_DURATION - GRACE) + RETRY_PERIOD;
    due.max(now + RETRY_PERIOD).min(renewed + RENEW_DEADLINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_is_consistent() {
        assert!(GRACE < LEASE_DURATION, "kube-lease-manager panics otherwise");
        assert!(LEASE_DURATION - GRACE < RENEW_DEADLINE, "the first renewal must come before the deadline");
        assert!(RENEW_DEADLINE < LEASE_DURATION);
        assert!(REQUEST_TIMEOUT < RENEW_DEADLINE);
    }

    #[test]
    fn checks_follow_renewals_and_never_pass_the_deadline() {
        let renewed = Instant::now();
        // Right after a renewal: 2 s after the next one is due (at 4 s).
        assert_eq!(next_check(renewed, renewed), renewed + Duration::from_secs(6));
        // Renewal overdue: every retry period...
        assert_eq!(next_check(renewed, renewed + Duration::from_secs(5)), renewed + Duration::from_secs(7));
        // ...but never later than the deadline.
        assert_eq!(next_check(renewed, renewed + Duration::from_secs(7)), renewed + RENEW_DEADLINE);
    }

    #[test]
    fn identities_are_unique() {
        assert_ne!(identity(), identity());
    }
}
