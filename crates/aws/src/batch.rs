//! Route 53 change batching as pure decisions: what one ChangeResourceRecordSets may hold, which
//! queued requests go into the next one, and when it is sent. [`crate::route53`] does the I/O.
//!
//! - **Limits** of one request ("ChangeResourceRecordSets", Route 53 API Reference): at most 100
//!   `Change` elements, 1,000 `ResourceRecord` elements and 32,000 characters of values, an
//!   UPSERT counting twice for the last two. Blockwork also keeps a batch within the change
//!   bucket's capacity, and counts an UPSERT as two record changes (a delete and a create) for
//!   that bucket, the conservative reading.
//! - **Groups**: each request (the records of one object) stays whole in one batch when it fits,
//!   so it gets one change id; requests go in the order they came, and a request that touches a
//!   record an earlier queued request also touches waits for the next batch (Route 53 refuses a
//!   batch that changes one record twice).
//! - **When**: a request someone waits for goes out `gather` after it came (so requests made in
//!   the same instant share the call); requests nobody waits for (written in the background)
//!   go at most once per `interval` per zone, the first of a quiet zone at once. A full batch
//!   goes at once.

use std::time::{Duration, Instant};

use blockwork_runtime::Existence;

/// Most `Change` elements in one request.
pub const MAX_CHANGES: usize = 100;
/// Most `ResourceRecord` elements in one request (an UPSERT's count twice).
pub const MAX_RESOURCE_RECORDS: usize = 1000;
/// Most characters of all `Value` elements in one request (an UPSERT's count twice).
pub const MAX_VALUE_CHARACTERS: usize = 32_000;

/// What a change does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Upsert,
    Delete,
}

/// A CNAME record (Blockwork writes no other type): name and value as they are sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub name: String,
    pub value: String,
    pub ttl: i64,
}

/// One change of one record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Change {
    pub action: Action,
    pub record: Record,
}

impl Change {
    /// Tokens of the change-throughput bucket.
    pub fn tokens(&self) -> u32 {
        match self.action {
            Action::Upsert => 2,
            Action::Delete => 1,
        }
    }

    fn weight(&self) -> usize {
        match self.action {
            Action::Upsert => 2,
            Action::Delete => 1,
        }
    }

    /// The record it touches, whatever the case or trailing dot.
    pub fn key(&self) -> String {
        crate::dns_name::from_route53(&self.record.name)
    }
}

/// What a batch adds up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size {
    pub changes: usize,
    pub resource_records: usize,
    pub value_characters: usize,
    pub tokens: u32,
}

impl Size {
    pub fn of(changes: &[Change]) -> Self {
        changes.iter().fold(Self::default(), |size, change| Self {
            changes: size.changes + 1,
            resource_records: size.resource_records + change.weight(),
            value_characters: size.value_characters + change.weight() * change.record.value.len(),
            tokens: size.tokens + change.tokens(),
        })
    }

    fn plus(self, other: Self) -> Self {
        Self {
            changes: self.changes + other.changes,
            resource_records: self.resource_records + other.resource_records,
            value_characters: self.value_characters + other.value_characters,
            tokens: self.tokens + other.tokens,
        }
    }

    /// Whether one request may hold it, with a change bucket of `max_tokens`.
    pub fn fits(self, max_tokens: u32) -> bool {
        self.changes <= MAX_CHANGES
            && self.resource_records <= MAX_RESOURCE_RECORDS
            && self.value_characters <= MAX_VALUE_CHARACTERS
            && self.tokens <= max_tokens
    }
}

/// Which queued requests (their changes, in order) the next batch takes: whole requests from
/// the front that fit together and touch no record twice; the first request alone, cut to what
/// fits, if even it is too big. Returns (request index, how many of its changes) pairs.
pub fn next_batch(queued: &[&[Change]], max_tokens: u32) -> Vec<(usize, usize)> {
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut size = Size::default();
    let mut touched: Vec<String> = Vec::new();
    for (index, changes) in queued.iter().enumerate() {
        let request = Size::of(changes);
        let keys: Vec<String> = changes.iter().map(Change::key).collect();
        let repeats = keys.iter().enumerate().any(|(i, key)| touched.contains(key) || keys[..i].contains(key));
        if taken.is_empty() && (!request.fits(max_tokens) || repeats) {
            // Too big, or changing a record twice itself: as much of it as fits, alone.
            return vec![(index, prefix_that_fits(changes, max_tokens))];
        }
        if repeats || !size.plus(request).fits(max_tokens) {
            break;
        }
        size = size.plus(request);
        touched.extend(keys);
        taken.push((index, changes.len()));
    }
    taken
}

/// The longest prefix of `changes` one request may hold, touching each record once; at least one.
fn prefix_that_fits(changes: &[Change], max_tokens: u32) -> usize {
    let mut keys: Vec<String> = Vec::new();
    let mut count = 0;
    for change in changes {
        let key = change.key();
        if keys.contains(&key) || !Size::of(&changes[..=count]).fits(max_tokens) {
            break;
        }
        keys.push(key);
        count += 1;
    }
    count.max(1)
}

/// How long the queue of a zone holds requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPolicy {
    /// How long a request someone waits for is held for others made in the same instant.
    pub gather: Duration,
    /// The shortest time between two batches of background requests in one zone.
    pub interval: Duration,
}

impl Default for BatchPolicy {
    /// A second for requests someone waits for, which the runtime's reconciles make a few at a
    /// time; a minute between background batches, which under a burst of new certificates
    /// keeps Route 53 to about one call per zone and minute (ACM takes minutes to validate
    /// anyway), while a quiet zone's first change goes out at once.
    fn default() -> Self {
        Self { gather: Duration::from_millis(200), interval: Duration::from_secs(60) }
    }
}

/// When the queue of a zone sends its next batch: `waiting` and `background` are the times
/// the oldest queued request of each kind came; `last` when the previous batch went out.
pub fn flush_at(
    policy: BatchPolicy,
    waiting: Option<Instant>,
    background: Option<Instant>,
    last: Option<Instant>,
    full: bool,
    now: Instant,
) -> Option<Instant> {
    if full && (waiting.is_some() || background.is_some()) {
        return Some(now);
    }
    let waiting = waiting.map(|since| since + policy.gather);
    let background = background.map(|since| {
        let gathered = since + policy.gather;
        last.map_or(gathered, |last| gathered.max(last + policy.interval))
    });
    match (waiting, background) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether Route 53 refused a batch for what one of its changes asks (a record to delete that
/// is gone or has other values, a record that cannot be written).
pub fn is_refused_change(code: Option<&str>) -> bool {
    // AWS answers InvalidChangeBatch; moto answers some of these with InvalidInput.
    matches!(code, Some("InvalidChangeBatch" | "InvalidInput"))
}

/// Whether a refused batch may have been refused for one of its changes only, so that its other
/// changes go through without it: a change Route 53 refuses ([`is_refused_change`]), or a name
/// IAM denies — IAM refuses the whole ChangeResourceRecordSets with `AccessDenied` when a policy
/// denies any name in it (`route53:ChangeResourceRecordSetsNormalizedRecordNames`), so one
/// namespace's denied name would otherwise fail its neighbours in the batch.
pub fn refused_for_a_change(code: Option<&str>) -> bool {
    is_refused_change(code) || matches!(code, Some("AccessDenied" | "AccessDeniedException"))
}

/// The DELETE that removes `wanted` as it is now, under the ownership rule: a record is deleted
/// only while it has the value written (compared as names, whatever the case or trailing dot),
/// and with its current TTL and value, which Route 53 matches exactly. `None`: nothing of ours is
/// there — absent (never written, or gone), or pointed elsewhere since. `queued`: this process
/// still has a write of `wanted` queued, which the zone's queue sends before the DELETE.
pub fn to_delete(wanted: &Record, current: Option<&Record>, queued: bool) -> Option<Record> {
    if queued {
        return Some(wanted.clone());
    }
    let current = current?;
    let same = |a: &str, b: &str| crate::dns_name::from_route53(a) == crate::dns_name::from_route53(b);
    (same(&current.name, &wanted.name) && same(&current.value, &wanted.value)).then(|| current.clone())
}

/// What Route 53's refusal of a single DELETE (`InvalidChangeBatch`) says of the record: "it
/// was not found" — it is absent; "the values provided do not match the current values" — it
/// is no longer the one Blockwork wrote (someone repointed it; the ownership rule leaves it
/// alone). Gone either way, as far as what Blockwork owns goes. Any other refusal leaves it
/// unknown.
pub fn refused_delete(code: Option<&str>, message: &str) -> Existence {
    let message = message.to_ascii_lowercase();
    let absent = message.contains("not found") || message.contains("values provided do not match");
    if is_refused_change(code) && absent { Existence::Gone } else { Existence::Unknown }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(name: &str) -> Change {
        Change { action: Action::Upsert, record: Record { name: name.to_owned(), value: "target.example.net".to_owned(), ttl: 300 } }
    }

    fn delete(name: &str) -> Change {
        Change { action: Action::Delete, ..upsert(name) }
    }

    #[test]
    fn whole_requests_go_together_in_order_until_the_batch_is_full() {
        let a: Vec<Change> = (0..40).map(|i| upsert(&format!("a{i}.example.com"))).collect();
        let b: Vec<Change> = (0..40).map(|i| upsert(&format!("b{i}.example.com"))).collect();
        let c: Vec<Change> = (0..40).map(|i| upsert(&format!("c{i}.example.com"))).collect();
        assert_eq!(next_batch(&[&a, &b, &c], 1000), [(0, 40), (1, 40)], "120 changes do not fit in one request");
    }

    #[test]
    fn a_request_touching_a_queued_record_again_waits_for_the_next_batch() {
        let first = [upsert("www.example.com")];
        let second = [delete("WWW.example.com.")];
        let third = [upsert("api.example.com")];
        assert_eq!(next_batch(&[&first, &second, &third], 1000), [(0, 1)]);
    }

    #[test]
    fn a_request_too_big_for_one_batch_is_cut_to_what_fits() {
        let big: Vec<Change> = (0..150).map(|i| upsert(&format!("r{i}.example.com"))).collect();
        assert_eq!(next_batch(&[&big], 1000), [(0, 100)]);
        assert_eq!(next_batch(&[&big], 20), [(0, 10)], "the change bucket holds 20 tokens: ten upserts");
    }

    #[test]
    fn upserts_count_twice_against_the_record_and_character_limits() {
        let long = "x".repeat(400);
        let changes: Vec<Change> = (0..41)
            .map(|i| Change { action: Action::Upsert, record: Record { name: format!("r{i}.example.com"), value: long.clone(), ttl: 300 } })
            .collect();
        assert!(!Size::of(&changes).fits(u32::MAX), "41 × 2 × 400 characters is over 32,000");
        assert!(Size::of(&changes[..40]).fits(u32::MAX));
    }

    #[test]
    fn a_quiet_zone_sends_at_once_and_a_busy_one_once_per_interval() {
        let policy = BatchPolicy { gather: Duration::from_millis(200), interval: Duration::from_secs(60) };
        let now = Instant::now();
        assert_eq!(flush_at(policy, None, Some(now), None, false, now), Some(now + policy.gather), "nothing sent yet: at once");
        let last = now - Duration::from_secs(10);
        assert_eq!(flush_at(policy, None, Some(now), Some(last), false, now), Some(last + policy.interval));
        assert_eq!(flush_at(policy, Some(now), Some(now), Some(last), false, now), Some(now + policy.gather), "someone waits");
        assert_eq!(flush_at(policy, None, Some(now), Some(last), true, now), Some(now), "a full batch goes at once");
        assert_eq!(flush_at(policy, None, None, Some(last), true, now), None, "nothing queued");
    }

    #[test]
    fn a_delete_refused_because_the_record_is_absent_or_not_ours_any_more_is_gone() {
        let absent = "[Tried to delete resource record set [name='www.example.com.', type='CNAME'] but it was not found]";
        let repointed = "[Tried to delete resource record set [name='www.example.com.', type='CNAME'] but the values provided do not match the current values]";
        assert_eq!(refused_delete(Some("InvalidChangeBatch"), absent), Existence::Gone);
        assert_eq!(refused_delete(Some("InvalidChangeBatch"), repointed), Existence::Gone);
        assert_eq!(refused_delete(Some("InvalidChangeBatch"), "FATAL problem: DomainLabelEmpty"), Existence::Unknown);
        assert_eq!(refused_delete(Some("AccessDenied"), absent), Existence::Unknown, "only Route 53's refusal of the change says so");
    }

    #[test]
    fn refused_changes_are_told_apart_from_other_failures() {
        assert!(is_refused_change(Some("InvalidChangeBatch")));
        assert!(!is_refused_change(Some("Throttling")));
        assert!(!is_refused_change(Some("NoSuchHostedZone")));
    }

    #[test]
    fn a_batch_denied_by_iam_may_be_denied_for_one_name_only_and_is_searched_like_a_refused_one() {
        for code in ["InvalidChangeBatch", "InvalidInput", "AccessDenied", "AccessDeniedException"] {
            assert!(refused_for_a_change(Some(code)), "{code}");
        }
        for code in [Some("Throttling"), Some("PriorRequestNotComplete"), Some("NoSuchHostedZone"), None] {
            assert!(!refused_for_a_change(code), "{code:?}: about the request, not one of its changes");
        }
    }

    #[test]
    fn a_record_is_deleted_as_it_is_now_only_while_it_has_the_value_written() {
        let written = Record { name: "_a.example.com.".to_owned(), value: "_x.acm-validations.aws.".to_owned(), ttl: 300 };
        let listed = Record { name: "_a.example.com.".to_owned(), value: "_X.acm-validations.aws".to_owned(), ttl: 60 };
        assert_eq!(to_delete(&written, Some(&listed), false), Some(listed.clone()), "its current TTL and value, which Route 53 matches");
        let repointed = Record { value: "elsewhere.example.net.".to_owned(), ..listed };
        assert_eq!(to_delete(&written, Some(&repointed), false), None, "pointed elsewhere: not ours any more");
        assert_eq!(to_delete(&written, None, false), None, "absent: nothing to delete, and no DELETE without a record");
        assert_eq!(to_delete(&written, None, true), Some(written.clone()), "its write is queued: deleted after it");
    }
}
