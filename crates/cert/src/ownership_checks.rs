//! When a Cert reads its certificate's ownership tags (ListTagsForCertificate) to learn whether
//! another object took it over (ADR 0017). Before anything is written or deleted for the
//! certificate the tags are read (`external::observe`), with one exception: the writes that
//! finish the create of a certificate the Cert requested itself in this process — its request
//! wrote the tags, so reading them back would tell nothing. Otherwise once per
//! `--ownership-check-interval`, each Cert at a point of its own: a Cert this process has not
//! looked at yet is first checked at a random point of the first interval after the process
//! started, so a restart (or a leader failover) with thousands of Ready Certs reads their tags
//! spread over the interval, not all at the first look. After an adoption the tags are read
//! back at once: of two objects adopting at once the last write wins, and the other must learn
//! it lost.
//!
//! Bookkeeping only, in memory: a restart forgets it, and the spreading starts again from the
//! new process's start. [`crate::wake`] looks at a Cert whose check is due, so a Ready Cert is
//! checked on time whatever its requeue.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use blockwork_runtime::Purpose;

/// Each Cert's next ownership check, by UID.
#[derive(Debug)]
pub struct OwnershipChecks {
    interval: Duration,
    /// The process's start: the first interval, over which the first checks are spread, begins here.
    started: Instant,
    certs: Mutex<HashMap<String, Check>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Check {
    /// When the tags are read next, even with nothing to write.
    due: Instant,
    /// The certificate the Cert requested, tagged as its own, in this process and not checked
    /// since: the writes that finish its create need no read before them.
    requested: Option<String>,
}

impl OwnershipChecks {
    /// Checks once per `interval`, the first ones spread over the interval from now.
    pub fn new(interval: Duration) -> Self {
        Self::starting(interval, Instant::now())
    }

    fn starting(interval: Duration, started: Instant) -> Self {
        Self { interval, started, certs: Mutex::default() }
    }

    /// When the Cert's next check is due. A Cert this process has not yet checked, requested or
    /// adopted for gets a random point of the first interval after the start (one the process
    /// meets late, past that interval, is due at once).
    pub fn due_at(&self, uid: &str) -> Instant {
        self.with(uid, |check| check.due)
    }

    /// Whether the tags must be read in a look at `arn` that plans the writes of `purposes`:
    /// any write, but those finishing the create of a certificate the Cert requested here;
    /// with none, when the check is due.
    pub fn read_needed(&self, uid: &str, arn: &str, purposes: impl IntoIterator<Item = Purpose>, now: Instant) -> bool {
        self.with(uid, |check| {
            let vouched = |purpose| purpose == Purpose::FinishCreate && check.requested.as_deref() == Some(arn);
            purposes.into_iter().any(|purpose| !vouched(purpose)) || check.due <= now
        })
    }

    /// The tags were read, and name the Cert: the next check one interval later.
    pub fn confirmed(&self, uid: &str, now: Instant) {
        self.set(uid, Check { due: now + self.interval, requested: None });
    }

    /// The Cert requested `arn` with its ownership tags: as good as a check.
    pub fn requested(&self, uid: &str, arn: &str, now: Instant) {
        self.set(uid, Check { due: now + self.interval, requested: Some(arn.to_owned()) });
    }

    /// The Cert wrote its tags on a certificate it adopts: they are read back at once.
    pub fn adopted(&self, uid: &str, now: Instant) {
        self.set(uid, Check { due: now, requested: None });
    }

    /// The Cert is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn with<T>(&self, uid: &str, read: impl FnOnce(&Check) -> T) -> T {
        let mut certs = self.lock();
        let check = certs.entry(uid.to_owned()).or_insert_with(|| Check { due: self.first_due(rand::random()), requested: None });
        read(check)
    }

    /// The first check of a Cert met since the start: `fraction` (in `[0, 1)`) into the first interval.
    fn first_due(&self, fraction: f64) -> Instant {
        self.started + self.interval.mul_f64(fraction)
    }

    fn set(&self, uid: &str, check: Check) {
        self.lock().insert(uid.to_owned(), check);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Check>> {
        self.certs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const ARN: &str = "arn:aws:acm:us-east-1:123456789012:certificate/a";

    #[test]
    fn the_first_checks_after_a_start_are_spread_over_the_first_interval_not_all_at_the_first_look() {
        let started = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, started);
        let due: Vec<Instant> = (0..200).map(|i| checks.due_at(&format!("uid-{i}"))).collect();
        assert!(due.iter().all(|at| *at >= started && *at < started + HOUR));
        let early = due.iter().filter(|at| **at < started + HOUR / 2).count();
        assert!((60..=140).contains(&early), "about half in the first half of the interval: {early} of 200");
        assert!(!checks.read_needed("uid-late", ARN, [], started), "nothing is read at the first look");
        assert_eq!(checks.due_at("uid-0"), due[0], "a Cert's point stays where it fell");
    }

    #[test]
    fn a_cert_met_after_the_first_interval_is_due_at_once() {
        let started = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, started);
        assert!(checks.read_needed("uid", ARN, [], started + HOUR));
    }

    #[test]
    fn a_confirmed_cert_is_checked_again_one_interval_later() {
        let started = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, started);
        checks.confirmed("uid", started);
        assert!(!checks.read_needed("uid", ARN, [], started + HOUR - Duration::from_secs(1)));
        assert!(checks.read_needed("uid", ARN, [], started + HOUR));
        assert_eq!(checks.due_at("uid"), started + HOUR);
    }

    #[test]
    fn any_write_reads_the_tags_first_whenever_they_were_last_read() {
        let now = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, now);
        checks.confirmed("uid", now);
        for purpose in [Purpose::FinishCreate, Purpose::FinishUpdate, Purpose::FinishRecreate, Purpose::Release] {
            assert!(checks.read_needed("uid", ARN, [purpose], now), "{purpose:?}");
        }
    }

    #[test]
    fn a_certificate_the_cert_just_requested_is_not_read_back_before_the_writes_that_finish_its_create() {
        let now = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, now);
        checks.requested("uid", ARN, now);
        assert!(!checks.read_needed("uid", ARN, [Purpose::FinishCreate, Purpose::FinishCreate], now));
        assert!(checks.read_needed("uid", ARN, [Purpose::FinishRecreate], now), "deleting what it replaced reads first");
        assert!(checks.read_needed("uid", "arn:aws:acm:us-east-1:123456789012:certificate/other", [Purpose::FinishCreate], now));
        assert!(checks.read_needed("uid", ARN, [], now + HOUR), "checked one interval after the request");
        checks.confirmed("uid", now + HOUR);
        assert!(checks.read_needed("uid", ARN, [Purpose::FinishCreate], now + HOUR), "after its first check, like any certificate");
    }

    #[test]
    fn an_adopted_certificate_s_tags_are_read_back_at_once() {
        let now = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, now);
        checks.confirmed("uid", now);
        checks.adopted("uid", now);
        assert!(checks.read_needed("uid", ARN, [], now));
    }

    #[test]
    fn a_forgotten_cert_starts_over_as_one_never_met() {
        let started = Instant::now();
        let checks = OwnershipChecks::starting(HOUR, started);
        checks.requested("uid", ARN, started);
        checks.forget("uid");
        assert!(checks.read_needed("uid", ARN, [Purpose::FinishCreate], started));
        assert!(checks.due_at("uid") < started + HOUR);
    }
}
