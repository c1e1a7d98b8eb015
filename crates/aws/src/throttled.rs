//! Accounts AWS is throttling (ADR 0014): while one call of an account's service backs off
//! after AWS answered it `Throttling`, the other calls of that account and service are not sent:
//! they fail at once as throttled, and their objects back off by the runtime's floor, saying so
//! once (a shared wait, [`crate::shared`]: the account's quota is what they wait on, and the
//! message names since when AWS throttles it, nothing that changes with each retry). A throttled
//! account thus holds at most one reconcile worker per service, and the other accounts' objects
//! keep the rest — without this, every worker would sit in one account's retries.
//!
//! Only AWS's own throttling marks an account: the process's buckets already pace its calls, so
//! an answer `Throttling` means someone else spends the account's quota. Route 53's
//! `PriorRequestNotComplete` is about one hosted zone, not the account, and marks nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{AwsError, ErrorClass};
use crate::limiter::Account;
use crate::quota::Service;

/// The error code of a call not sent because its account is backing off.
pub const BACKING_OFF: &str = "AccountBackingOff";

/// A call's ticket: who set a mark, so the call backing off is not held by its own mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

#[derive(Default)]
pub struct Throttled {
    next: AtomicU64,
    /// (account, service) → the call backing off, until when, and since when AWS has throttled
    /// the account's service without a pause.
    marks: Mutex<HashMap<(Account, Service), Mark>>,
}

#[derive(Clone, Copy)]
struct Mark {
    owner: Ticket,
    until: Instant,
    since: jiff::Timestamp,
}

impl Throttled {
    pub fn ticket(&self) -> Ticket {
        Ticket(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// `Some(since)` when another call of the account's service is backing off: since when AWS
    /// has throttled the service of that account.
    pub fn held(&self, ticket: Ticket, account: &Account, service: Service, now: Instant) -> Option<jiff::Timestamp> {
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        marks.get(&(account.clone(), service)).filter(|mark| mark.owner != ticket && mark.until > now).map(|mark| mark.since)
    }

    /// A call answered `error` backs off for `delay` before its retry: marks its account when AWS
    /// throttled it.
    pub fn backing_off(&self, ticket: Ticket, account: &Account, service: Service, error: &AwsError, delay: Duration) {
        if !aws_throttled(error) {
            return;
        }
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let key = (account.clone(), service);
        let since = marks.get(&key).filter(|mark| mark.until > now).map_or_else(jiff::Timestamp::now, |mark| mark.since);
        marks.insert(key, Mark { owner: ticket, until: now + delay, since });
    }

    /// The call ended (answered, or out of retries): its mark goes.
    pub fn done(&self, ticket: Ticket, account: &Account, service: Service) {
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        if marks.get(&(account.clone(), service)).is_some_and(|mark| mark.owner == ticket) {
            marks.remove(&(account.clone(), service));
        }
    }
}

/// AWS's own throttling of the account (not a zone's change still in progress, not a call this
/// process held back).
fn aws_throttled(error: &AwsError) -> bool {
    error.class == ErrorClass::Throttled && !matches!(error.code.as_deref(), Some("PriorRequestNotComplete" | BACKING_OFF))
}

/// The error of a call not sent while its account backs off: throttled, so the object backs off
/// by the runtime's floor; never retried by the layer. The same words for every call of the
/// streak (since when, not for how long more), so its objects write them once.
pub fn held_back(operation: &'static str, service: Service, identity: &str, since: jiff::Timestamp) -> AwsError {
    let since = since.round(jiff::Unit::Second).unwrap_or(since);
    AwsError {
        operation,
        code: Some(BACKING_OFF.to_owned()),
        class: ErrorClass::Throttled,
        message: format!(
            "AWS has been throttling {service} calls of the account of {identity} since {since}; while one of them backs off, the others are not sent"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn throttling(code: &str) -> AwsError {
        AwsError { operation: "RequestCertificate", code: Some(code.into()), class: ErrorClass::Throttled, message: "slow down".into() }
    }

    fn account(id: &str) -> Account {
        Account::Other(id.to_owned())
    }

    #[test]
    fn a_throttled_call_holds_back_the_other_calls_of_its_account_and_service_only() {
        let throttled = Throttled::default();
        let (first, second) = (throttled.ticket(), throttled.ticket());
        let now = Instant::now();
        throttled.backing_off(first, &account("1"), Service::Acm, &throttling("ThrottlingException"), Duration::from_secs(8));
        assert!(throttled.held(second, &account("1"), Service::Acm, now).is_some());
        assert!(throttled.held(first, &account("1"), Service::Acm, now).is_none(), "not by its own mark");
        assert!(throttled.held(second, &account("2"), Service::Acm, now).is_none(), "another account");
        assert!(throttled.held(second, &account("1"), Service::Route53, now).is_none(), "another service");
        throttled.done(first, &account("1"), Service::Acm);
        assert!(throttled.held(second, &account("1"), Service::Acm, now).is_none());
    }

    #[test]
    fn a_zone_still_processing_and_a_held_back_call_mark_nothing() {
        let throttled = Throttled::default();
        let (first, second) = (throttled.ticket(), throttled.ticket());
        for code in ["PriorRequestNotComplete", BACKING_OFF] {
            throttled.backing_off(first, &account("1"), Service::Route53, &throttling(code), Duration::from_secs(8));
        }
        assert!(throttled.held(second, &account("1"), Service::Route53, Instant::now()).is_none());
    }

    #[test]
    fn a_mark_lapses_when_its_backoff_ends() {
        let throttled = Throttled::default();
        let (first, second) = (throttled.ticket(), throttled.ticket());
        throttled.backing_off(first, &Account::Own, Service::Acm, &throttling("Throttling"), Duration::from_millis(10));
        assert!(throttled.held(second, &Account::Own, Service::Acm, Instant::now() + Duration::from_millis(20)).is_none());
    }

    #[test]
    fn a_held_back_call_names_the_identity_not_the_account() {
        let since = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let error = held_back("RequestCertificate", Service::Acm, "AwsIdentity team-a", since);
        assert_eq!(error.class, ErrorClass::Throttled);
        assert!(error.message.contains("AwsIdentity team-a") && error.message.contains("since 2027-01-15T08:00:00Z"), "{}", error.message);
    }

    #[test]
    fn a_streak_of_throttling_keeps_the_time_it_began() {
        let throttled = Throttled::default();
        let (first, second, third) = (throttled.ticket(), throttled.ticket(), throttled.ticket());
        throttled.backing_off(first, &account("1"), Service::Acm, &throttling("Throttling"), Duration::from_secs(8));
        let since = throttled.held(third, &account("1"), Service::Acm, Instant::now()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        throttled.backing_off(second, &account("1"), Service::Acm, &throttling("Throttling"), Duration::from_secs(8));
        assert_eq!(throttled.held(third, &account("1"), Service::Acm, Instant::now()), Some(since), "the held calls' words do not change");
    }
}
