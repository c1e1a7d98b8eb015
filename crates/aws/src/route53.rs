//! Route 53 records, one implementation for every controller (Cert's validation records,
//! DistributionTenant's domain CNAMEs).
//!
//! **Batching.** Every change goes through the queue of its hosted zone (per account: a zone in
//! another account is reached with an assumed role), which sends one ChangeResourceRecordSets at
//! a time per zone, holding as many queued changes as AWS's per-request limits allow, when
//! [`batch::flush_at`] says so. A batch holds only changes made as one principal (the same role
//! and session, ADR 0014): each change is signed by, and attributed in CloudTrail to, the
//! namespace it was made for. One request per zone at a time is also what Route 53 expects:
//! it answers PriorRequestNotComplete to a change of a zone still processing the previous one
//! (classified as throttling, retried after a backoff). A batch refused for one of its changes
//! — Route 53 refusing what a change asks (InvalidChangeBatch), or IAM denying a name in it
//! (AccessDenied: IAM refuses the whole request) — is searched by halves for the change refused
//! ([`Worker::apply`]), and the changes that go through are done: a bad or denied change fails
//! only its own request, which alone is terminal for its object. Every request waiting on one
//! batch gets the same change id, and [`Records::in_sync`] reads each change's status once for
//! all of them.
//!
//! **Ownership, one rule.** Blockwork deletes a record only (1) if the object's status records
//! that the object wrote it — recorded before the write, or recoverable from the create-pending
//! marker — and (2) only while it has the exact value written: [`Records::delete`] looks each
//! record up first and sends a DELETE (with the record's current TTL and value, which Route 53
//! matches) only for one that is there with that value; one absent or repointed since is left
//! alone (reported as [`Deletion::NotFound`], nothing sent). No DELETE goes out for a record
//! that is not there: an object that lost track of whether it wrote one (a crash before its
//! write) is told it is gone, not refused. A record that already existed
//! with the value the object would write, before the object first wrote it, is not the object's:
//! [`Records::lookup`] tells (Cert's validation records, which every certificate for the same
//! name shares). A DistributionTenant's records are the CNAMEs of its own domains, which it takes
//! over (seed 001's UPSERT; CloudFront lets one tenant only use a domain).
//!
//! Names are compared in [`dns_name::from_route53`]'s form: Route 53 returns them with a
//! trailing dot, in lowercase, and with `*` and other characters escaped as `\052`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_route53::types::{ChangeAction, ChangeBatch, ChangeStatus, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_runtime::Existence;
use blockwork_runtime::trace::Traced;
use moka::future::Cache;
use tokio::sync::{Notify, oneshot};
use tracing::{Instrument as _, warn};

use crate::batch::{self, Size};
pub use crate::batch::{Action, BatchPolicy, Change, Record};
use crate::dns_name;
use crate::edge::{Aws, Call};
use crate::error::{AwsError, ErrorClass, classify_sdk_error};
use crate::limiter::{Account, Scope};
use crate::principal::Principal;
use crate::quota::Service;
use crate::shared::Shared;

/// A hosted zone, and who reaches it: the operator's own identity, or a role (of the zone's
/// account when it is another one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Zone {
    /// Without the `/hostedzone/` prefix.
    pub id: String,
    pub principal: Principal,
}

impl Zone {
    pub fn new(id: &str, principal: Principal) -> Self {
        Self { id: id.trim_start_matches("/hostedzone/").to_owned(), principal }
    }

    fn account(&self) -> Account {
        self.principal.account()
    }

    /// What its reads are shared by: the zone as one role (or the operator's own identity) sees
    /// it. IAM decides by role, so a read refused to one role is never another role's answer,
    /// while the namespaces of one role share it.
    fn reader(&self) -> Reader {
        (self.account(), self.id.clone(), self.principal.role().map(|role| role.arn.clone()))
    }
}

/// A zone as one role reads it: (account, zone id, role ARN or the operator's own identity).
type Reader = (Account, String, Option<String>);

/// A zone's CNAMEs as listed, by normalized name, and the zone's batch count when the listing
/// began: a listing older than this process's last batch to the zone is read again.
struct Listing {
    batches: u64,
    cnames: HashMap<String, Record>,
}

/// A Route 53 change as GetChange reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeState {
    /// INSYNC: every Route 53 name server answers with it; else PENDING.
    pub in_sync: bool,
    pub submitted_at: Option<std::time::SystemTime>,
}

/// Whether a change's caller waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// A reconcile waits: sent within the batch policy's `gather`.
    Waiting,
    /// Nobody waits (the object is woken when it is written, see [`Records::written`]): sent
    /// with the zone's next batch, at most once per `interval`.
    Background,
}

/// Where a background write of a record stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Queued for the zone's next batch.
    Queued,
    /// Accepted by Route 53, with the change id.
    Done(String),
    Failed(AwsError),
}

/// What became of one record's DELETE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    Deleted,
    /// Not there with these values (gone, changed by someone else, or its hosted zone does not
    /// exist): nothing was deleted, and nothing of ours is there.
    NotFound,
}

/// The result of one queued request: the change id of the batch that carried it (the last one,
/// if it needed several), and for deletions what became of each record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub change_id: Option<String>,
    pub deletions: Vec<Deletion>,
    /// The span of that batch, if it is exported.
    pub batch: Option<opentelemetry::trace::SpanContext>,
}

type Reply = oneshot::Sender<Result<Applied, AwsError>>;

struct Request {
    caller: &'static str,
    /// Who sends it: a batch holds requests of one principal only.
    principal: Principal,
    changes: Vec<Change>,
    urgency: Urgency,
    since: Instant,
    /// Changes of this request already sent (a request larger than one batch).
    sent: usize,
    change_id: Option<String>,
    deletions: Vec<Deletion>,
    reply: Option<Reply>,
    /// The span it was queued from, which its batch links to.
    span: Option<opentelemetry::trace::SpanContext>,
}

#[derive(Default)]
struct QueueState {
    requests: Vec<Request>,
    last: Option<Instant>,
    running: bool,
}

struct Queue {
    /// The zone's id, and the account whose quota its batches draw from.
    zone_id: String,
    account: Account,
    state: Mutex<QueueState>,
    arrived: Notify,
    /// Batches sent and answered so far: a listing made before the latest is out of date.
    batches: AtomicU64,
    /// The zone's batches as a call its objects share (issue 37): while they fail transiently,
    /// every object with a change in them is told the same wait (AWS's answer, since when) at
    /// every retry, one status write, not a retry count of its own.
    health: Shared,
}

/// The process's Route 53 records: a queue per hosted zone, the zones' CNAMEs as last listed,
/// and change statuses.
pub struct Records {
    aws: Arc<Aws>,
    queues: Mutex<HashMap<(Account, String), Arc<Queue>>>,
    /// CNAMEs by zone and reader, for [`Records::lookup`].
    listings: Cache<Reader, Arc<Listing>>,
    /// By reader and change id: INSYNC is final; PENDING is read again after a second.
    statuses: Cache<(Reader, String), bool>,
    /// Records written in the background, by (zone, name), for [`Records::written`].
    written: Mutex<HashMap<(String, String), Written>>,
    /// Told the records written in the background (zone id, name), a batch at a time, with
    /// the batch's span.
    completions: tokio::sync::broadcast::Sender<Traced<Vec<(String, String)>>>,
    /// Each reader's zone listing's failures, which lookups are told instead of waiting for its
    /// retries ([`crate::shared`]).
    health: Mutex<HashMap<Reader, Arc<Shared>>>,
    /// Told when a zone listing that failed answers again, with the span it was listed in: the
    /// objects waiting on it may go on.
    recoveries: tokio::sync::broadcast::Sender<Traced<()>>,
}

/// How long a zone's CNAMEs, as listed for [`Records::lookup`], are reused.
const LISTING_TTL: Duration = Duration::from_secs(30);
/// How long after a zone listing failed its lookups are told so before one lists it again.
const LISTING_RETRY: Duration = Duration::from_secs(5);
/// Background results kept for [`Records::written`], at most.
const WRITTEN_KEPT: usize = 20_000;

impl Records {
    pub(crate) fn new(aws: Arc<Aws>) -> Arc<Self> {
        Arc::new(Self {
            aws,
            queues: Mutex::default(),
            listings: Cache::builder().max_capacity(1000).time_to_live(LISTING_TTL).build(),
            statuses: Cache::builder().max_capacity(10_000).expire_after(StatusExpiry).build(),
            written: Mutex::default(),
            completions: tokio::sync::broadcast::channel(1024).0,
            health: Mutex::default(),
            recoveries: tokio::sync::broadcast::channel(64).0,
        })
    }

    /// Zone listings that failed and answer again, each with the span it was listed in.
    pub fn recoveries(&self) -> tokio::sync::broadcast::Receiver<Traced<()>> {
        self.recoveries.subscribe()
    }

    /// UPSERTs `records` into `zone`; returns the change id once Route 53 has accepted them.
    pub async fn upsert(&self, caller: &'static str, zone: &Zone, records: Vec<Record>) -> Result<Option<String>, AwsError> {
        let changes = records.into_iter().map(|record| Change { action: Action::Upsert, record }).collect();
        Ok(self.submit(caller, zone, changes, Urgency::Waiting).await?.change_id)
    }

    /// UPSERTs `records` with the zone's next background batch and returns at once; the result
    /// is told by [`Records::completions`] and [`Records::written`].
    pub fn upsert_in_background(self: &Arc<Self>, caller: &'static str, zone: &Zone, records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        let keys: Vec<(String, String)> = records.iter().map(|r| (zone.id.clone(), dns_name::from_route53(&r.name))).collect();
        self.set_written(&keys, &Written::Queued);
        let changes = records.into_iter().map(|record| Change { action: Action::Upsert, record }).collect();
        let receiver = self.enqueue(caller, zone, changes, Urgency::Background);
        let records = Arc::clone(self);
        tokio::spawn(async move {
            let (written, batch) = match receiver.await {
                Ok(Ok(applied)) => (Written::Done(applied.change_id.unwrap_or_default()), applied.batch),
                Ok(Err(error)) => (Written::Failed(error), None),
                Err(_) => (Written::Failed(AwsError::incomplete("ChangeResourceRecordSets", "an answer (the queue stopped)")), None),
            };
            records.set_written(&keys, &written);
            // Nobody listening is fine: the objects look again at their next requeue.
            let _ = records.completions.send(Traced { value: keys, span: batch });
        });
    }

    fn set_written(&self, keys: &[(String, String)], state: &Written) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if written.len() > WRITTEN_KEPT {
            // Old results only: whoever still needs one writes the record again (UPSERT).
            written.retain(|_, state| *state == Written::Queued);
        }
        for key in keys {
            written.insert(key.clone(), state.clone());
        }
    }

    /// Where the last background write of `name` in zone `zone_id` stands; `None` if this
    /// process has not written it in the background.
    pub fn written(&self, zone_id: &str, name: &str) -> Option<Written> {
        let key = (zone_id.trim_start_matches("/hostedzone/").to_owned(), dns_name::from_route53(name));
        self.written.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Forgets a failed background write of `name` in zone `zone_id`, so that [`Records::written`]
    /// says `None` and whoever needs the record queues it again. A caller that reports a failure
    /// needing the user's fix (a denied write) forgets it as it reports it: the failure is told
    /// once, and the retry after it writes again instead of telling the same failure for the life
    /// of the process.
    pub fn forget_failure(&self, zone_id: &str, name: &str) {
        let key = (zone_id.trim_start_matches("/hostedzone/").to_owned(), dns_name::from_route53(name));
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(written.get(&key), Some(Written::Failed(_))) {
            written.remove(&key);
        }
    }

    /// Background writes as they complete: (zone id, normalized name) of each record, with the
    /// span of the batch that wrote them.
    pub fn completions(&self) -> tokio::sync::broadcast::Receiver<Traced<Vec<(String, String)>>> {
        self.completions.subscribe()
    }

    /// Deletes `records` where they are still as written, under the ownership rule: each is
    /// looked up ([`Records::lookup`]), and a DELETE goes out only for one that is there with the
    /// value written, with its current TTL and value ([`batch::to_delete`]); what became of each,
    /// in order. One absent, repointed since, or in a hosted zone that does not exist is
    /// [`Deletion::NotFound`], and no request is sent for it. A record whose write this process
    /// still has queued is deleted after that write (the zone's queue keeps their order).
    pub async fn delete(&self, caller: &'static str, zone: &Zone, records: Vec<Record>) -> Result<Vec<Deletion>, AwsError> {
        let names: Vec<String> = records.iter().map(|record| record.name.clone()).collect();
        let current = match self.lookup(caller, zone, &names).await {
            Ok(current) => current,
            // A zone holds its records: one that does not exist holds none of ours.
            Err(error) if error.existence() == Existence::Gone => return Ok(vec![Deletion::NotFound; records.len()]),
            Err(error) => return Err(error),
        };
        let planned: Vec<Option<Record>> = records
            .iter()
            .zip(&current)
            .map(|(wanted, current)| {
                let queued = self.written(&zone.id, &wanted.name) == Some(Written::Queued);
                batch::to_delete(wanted, current.as_ref(), queued)
            })
            .collect();
        let changes = planned.iter().flatten().map(|record| Change { action: Action::Delete, record: record.clone() }).collect();
        let mut sent = self.submit(caller, zone, changes, Urgency::Waiting).await?.deletions.into_iter();
        Ok(planned.iter().map(|planned| planned.as_ref().and_then(|_| sent.next()).unwrap_or(Deletion::NotFound)).collect())
    }

    /// The CNAMEs `names` in `zone` as they are (`None`: no CNAME of that name), from a listing
    /// of the zone shared by every lookup of the same role for [`LISTING_TTL`], and read again
    /// once this process has sent the zone a batch since it began. It costs one
    /// ListResourceRecordSets per 300 records of the zone, however many names are looked up.
    ///
    /// While the listing fails transiently, a lookup is told at once what it waits for, AWS's
    /// answer and since when ([`crate::shared`]), instead of waiting for the listing's retries;
    /// the first lookup [`LISTING_RETRY`] after a failed listing ended lists again.
    pub async fn lookup(&self, caller: &'static str, zone: &Zone, names: &[String]) -> Result<Vec<Option<Record>>, AwsError> {
        let key = zone.reader();
        let health = self.health(zone, &key);
        let mut listing = self.listing(caller, zone, &key, &health).await?;
        if listing.batches < self.batches(zone) {
            // A batch went out while it was listed: the listing may not show it.
            self.listings.invalidate(&key).await;
            listing = self.listing(caller, zone, &key, &health).await?;
        }
        Ok(names.iter().map(|name| listing.cnames.get(&dns_name::from_route53(name)).cloned()).collect())
    }

    fn health(&self, zone: &Zone, key: &Reader) -> Arc<Shared> {
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        let what = || format!("the records of hosted zone {} as {}", zone.id, zone.principal);
        Arc::clone(health.entry(key.clone()).or_insert_with(|| Arc::new(Shared::new(what(), Some(LISTING_RETRY)))))
    }

    async fn listing(&self, caller: &'static str, zone: &Zone, key: &Reader, health: &Shared) -> Result<Arc<Listing>, AwsError> {
        if let Some(waiting) = health.outage() {
            return Err(waiting);
        }
        let listed = self.listings.entry_by_ref(key).or_try_insert_with(Box::pin(self.list_cnames(caller, zone, health)));
        let entry = tokio::select! {
            entry = listed => entry.map_err(|error| health.told(&error))?,
            waiting = health.next_failure() => return Err(waiting),
        };
        let seeds: Vec<_> = crate::metrics::Seed::of(caller).into_iter().collect();
        self.aws.metrics().cache_lookup(&seeds, "route53-zone", !entry.is_fresh());
        Ok(entry.into_value())
    }

    /// How many batches this process has sent `zone` and had answered.
    fn batches(&self, zone: &Zone) -> u64 {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(&(zone.account(), zone.id.clone())).map_or(0, |queue| queue.batches.load(Ordering::Acquire))
    }

    async fn list_cnames(&self, caller: &'static str, zone: &Zone, health: &Shared) -> Result<Arc<Listing>, AwsError> {
        const OP: &str = "ListResourceRecordSets";
        let batches = self.batches(zone);
        let _flight = health.begin();
        let failed = |error: &AwsError| health.failed(error);
        let client = self.aws.route53(caller, &zone.principal).await.inspect_err(failed)?;
        let mut cnames = HashMap::new();
        let mut start: Option<(String, RrType)> = None;
        loop {
            let call = Call {
                callers: &[caller],
                identity: zone.principal.identity(),
                scope: Scope::new(zone.account(), Service::Route53, None),
                operation: OP,
                changes: 0,
            };
            let page = self
                .aws
                .call_watched(
                    call,
                    || {
                        let mut request = client.list_resource_record_sets().hosted_zone_id(&zone.id);
                        if let Some((name, kind)) = &start {
                            request = request.start_record_name(name).start_record_type(kind.clone());
                        }
                        async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
                    },
                    failed,
                )
                .await?;
            for set in page.resource_record_sets().iter().filter(|set| *set.r#type() == RrType::Cname) {
                if let Some(value) = set.resource_records().first() {
                    let record =
                        Record { name: set.name().to_owned(), value: value.value().to_owned(), ttl: set.ttl().unwrap_or_default() };
                    cnames.insert(dns_name::from_route53(set.name()), record);
                }
            }
            match (page.is_truncated(), page.next_record_name(), page.next_record_type()) {
                (true, Some(name), Some(kind)) => start = Some((name.to_owned(), kind.clone())),
                _ => {
                    if health.succeeded() {
                        // Nobody listening is fine: the waiting objects look again after their backoff.
                        let _ = self.recoveries.send(Traced { value: (), span: crate::trace::current() });
                    }
                    return Ok(Arc::new(Listing { batches, cnames }));
                }
            }
        }
    }

    /// Whether the change `change_id` (made in `zone`'s account) has reached every Route 53
    /// name server. Every object waiting on one batch shares one GetChange per second.
    pub async fn in_sync(&self, caller: &'static str, zone: &Zone, change_id: &str) -> Result<bool, AwsError> {
        let read = async { Ok::<bool, AwsError>(self.change(caller, zone, change_id).await?.in_sync) };
        let key = (zone.reader(), change_id.to_owned());
        self.statuses.try_get_with(key, Box::pin(read)).await.map_err(|e| (*e).clone())
    }

    /// The change `change_id` (made in `zone`'s account) as Route 53 reports it now: one
    /// GetChange, not shared (for a reader such as `blockwork explain`; a controller waiting for
    /// the change asks [`Records::in_sync`]).
    pub async fn change(&self, caller: &'static str, zone: &Zone, change_id: &str) -> Result<ChangeState, AwsError> {
        const OP: &str = "GetChange";
        let client = self.aws.route53(caller, &zone.principal).await?;
        let call = Call {
            callers: &[caller],
            identity: zone.principal.identity(),
            scope: Scope::new(zone.account(), Service::Route53, None),
            operation: OP,
            changes: 0,
        };
        let output = self
            .aws
            .call(call, || async { client.get_change().id(change_id).send().await.map_err(|e| classify_sdk_error(OP, &e)) })
            .await?;
        let info = output.change_info();
        Ok(ChangeState {
            in_sync: info.is_some_and(|c| *c.status() == ChangeStatus::Insync),
            submitted_at: info.and_then(|c| std::time::SystemTime::try_from(*c.submitted_at()).ok()),
        })
    }

    async fn submit(&self, caller: &'static str, zone: &Zone, changes: Vec<Change>, urgency: Urgency) -> Result<Applied, AwsError> {
        if changes.is_empty() {
            return Ok(Applied { change_id: None, deletions: Vec::new(), batch: None });
        }
        self.enqueue(caller, zone, changes, urgency)
            .await
            .unwrap_or_else(|_| Err(AwsError::incomplete("ChangeResourceRecordSets", "an answer (the queue stopped)")))
    }

    fn enqueue(
        &self,
        caller: &'static str,
        zone: &Zone,
        changes: Vec<Change>,
        urgency: Urgency,
    ) -> oneshot::Receiver<Result<Applied, AwsError>> {
        let (reply, receiver) = oneshot::channel();
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = queues.entry((zone.account(), zone.id.clone())).or_insert_with(|| {
                Arc::new(Queue {
                    zone_id: zone.id.clone(),
                    account: zone.account(),
                    state: Mutex::default(),
                    arrived: Notify::new(),
                    batches: AtomicU64::new(0),
                    health: Shared::new(format!("the Route 53 record changes of hosted zone {}", zone.id), None),
                })
            });
            Arc::clone(queue)
        };
        let start = {
            let mut state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.requests.push(Request {
                caller,
                principal: zone.principal.clone(),
                changes,
                urgency,
                since: Instant::now(),
                sent: 0,
                change_id: None,
                deletions: Vec::new(),
                reply: Some(reply),
                span: crate::trace::current(),
            });
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            let worker = Worker { aws: Arc::clone(&self.aws), queue: Arc::clone(&queue) };
            tokio::spawn(worker.run());
        } else {
            queue.arrived.notify_one();
        }
        receiver
    }
}

/// Change statuses: INSYNC kept for an hour, PENDING for a second.
struct StatusExpiry;

impl moka::Expiry<(Reader, String), bool> for StatusExpiry {
    fn expire_after_create(&self, _key: &(Reader, String), in_sync: &bool, _now: Instant) -> Option<Duration> {
        Some(if *in_sync { Duration::from_secs(3600) } else { Duration::from_secs(1) })
    }
}

/// Sends a zone's batches until its queue is empty.
struct Worker {
    aws: Arc<Aws>,
    queue: Arc<Queue>,
}

/// One change of a batch: which request (by position in the batch) it belongs to.
#[derive(Clone)]
struct Item {
    request: usize,
    change: Change,
}

impl Worker {
    async fn run(self) {
        loop {
            let Some(at) = self.next_flush() else { return };
            let now = Instant::now();
            if at > now {
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => {}
                    () = self.queue.arrived.notified() => {}
                }
                continue;
            }
            self.flush().await;
        }
    }

    fn max_tokens(&self) -> u32 {
        self.aws.quotas().service(Service::Route53).changes.map_or(u32::MAX, |bucket| bucket.burst)
    }

    /// When to send next; `None` (and the worker stops) when nothing is queued.
    fn next_flush(&self) -> Option<Instant> {
        let mut state = self.queue.state.lock().unwrap_or_else(PoisonError::into_inner);
        let eligible: Vec<&Request> = eligible(&state.requests).into_iter().map(|i| &state.requests[i]).collect();
        let oldest = |urgency: Urgency| eligible.iter().filter(|r| r.urgency == urgency).map(|r| r.since).min();
        let (waiting, background) = (oldest(Urgency::Waiting), oldest(Urgency::Background));
        let pending: Vec<&[Change]> = eligible.iter().map(|r| &r.changes[r.sent..]).collect();
        let taken = batch::next_batch(&pending, self.max_tokens());
        let taken_size: usize = taken.iter().map(|(_, count)| count).sum();
        let full = taken_size < pending.iter().map(|c| c.len()).sum::<usize>() || taken_size >= batch::MAX_CHANGES;
        let at = batch::flush_at(self.aws.config().route53_batch, waiting, background, state.last, full, Instant::now());
        if at.is_none() {
            state.running = false;
        }
        at
    }

    async fn flush(&self) {
        let (items, callers, principal, links) = {
            let mut state = self.queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.last = Some(Instant::now());
            let eligible = eligible(&state.requests);
            let Some(principal) = eligible.first().map(|i| state.requests[*i].principal.clone()) else { return };
            let pending: Vec<&[Change]> = eligible.iter().map(|i| &state.requests[*i].changes[state.requests[*i].sent..]).collect();
            let taken = batch::next_batch(&pending, self.max_tokens());
            let mut items = Vec::new();
            let mut callers: Vec<&'static str> = Vec::new();
            let mut links = Vec::new();
            for (position, count) in taken {
                let index = eligible[position];
                let request = &mut state.requests[index];
                links.push(request.span.clone());
                items.extend(
                    request.changes[request.sent..request.sent + count]
                        .iter()
                        .map(|change| Item { request: index, change: change.clone() }),
                );
                request.sent += count;
                if !callers.contains(&request.caller) {
                    callers.push(request.caller);
                }
            }
            (items, callers, principal, links)
        };
        let span = crate::trace::batch(&self.queue.zone_id, items.len(), &links);
        let batch_span = blockwork_runtime::trace::span_context(&span);
        let results = self.apply(&callers, &principal, &items).instrument(span).await;
        self.queue.batches.fetch_add(1, Ordering::AcqRel);
        let mut state = self.queue.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failed: HashMap<usize, AwsError> = HashMap::new();
        for (item, result) in items.iter().zip(results) {
            let request = &mut state.requests[item.request];
            match result {
                Ok(Outcome::Changed(change_id)) => {
                    request.change_id = Some(change_id);
                    if item.change.action == Action::Delete {
                        request.deletions.push(Deletion::Deleted);
                    }
                }
                Ok(Outcome::NotFound) => request.deletions.push(Deletion::NotFound),
                Err(error) => {
                    failed.entry(item.request).or_insert(error);
                }
            }
        }
        let mut index = 0;
        state.requests.retain_mut(|request| {
            let position = index;
            index += 1;
            let error = failed.remove(&position);
            if error.is_none() && request.sent < request.changes.len() {
                return true;
            }
            if let Some(reply) = request.reply.take() {
                let result = match error {
                    Some(error) => Err(error),
                    None => Ok(Applied {
                        change_id: request.change_id.take(),
                        deletions: std::mem::take(&mut request.deletions),
                        batch: batch_span.clone(),
                    }),
                };
                // The requester may have given up (its reconcile was cancelled): nothing to tell.
                let _ = reply.send(result);
            }
            false
        });
    }

    /// Sends `items` as one batch. One refused for one of its changes ([`batch::refused_for_a_change`])
    /// is searched by halves for the change refused: a half that goes through is done, and the
    /// other holds the refusal, so it is halved in turn without being sent; a half refused too
    /// holds one, and the half beside it waits. The change found is refused alone — sent alone,
    /// or the last of a refused set whose others went through — and what waited goes again
    /// together. One refused change among n costs at most ⌈log2 n⌉ + 1 more requests, one at a
    /// time (the zone's queue), each drawing its tokens like any call.
    async fn apply(&self, callers: &[&'static str], principal: &Principal, items: &[Item]) -> Vec<Result<Outcome, AwsError>> {
        let mut results: Vec<Option<Result<Outcome, AwsError>>> = vec![None; items.len()];
        let mut rest: Vec<usize> = (0..items.len()).collect();
        while !rest.is_empty() {
            let refusal = match self.send(callers, principal, &pick(items, &rest)).await {
                Ok(change_id) => {
                    settle(&mut results, &rest, |_| Ok(Outcome::Changed(change_id.clone())));
                    break;
                }
                Err(error) if batch::refused_for_a_change(error.code.as_deref()) && rest.len() > 1 => error,
                Err(error) => {
                    let failed = self.failed(&pick(items, &rest), &error);
                    settle(&mut results, &rest, |position| failed[position].clone());
                    break;
                }
            };
            let (mut suspects, mut refusal, mut waiting) = (std::mem::take(&mut rest), refusal, Vec::new());
            while suspects.len() > 1 {
                let second = suspects.split_off(suspects.len() / 2);
                match self.send(callers, principal, &pick(items, &suspects)).await {
                    Ok(change_id) => {
                        settle(&mut results, &suspects, |_| Ok(Outcome::Changed(change_id.clone())));
                        suspects = second;
                    }
                    Err(error) if batch::refused_for_a_change(error.code.as_deref()) => {
                        waiting.splice(0..0, second);
                        refusal = error;
                    }
                    Err(error) => {
                        // Failed for a reason of its own (throttled past its retries, a 5xx): so
                        // does every change not through yet; their objects retry.
                        let unsent: Vec<usize> = suspects.iter().chain(&second).chain(&waiting).copied().collect();
                        let failed = self.failed(&pick(items, &unsent), &error);
                        settle(&mut results, &unsent, |position| failed[position].clone());
                        return results.into_iter().map(|r| r.unwrap_or_else(|| Err(error.clone()))).collect();
                    }
                }
            }
            let failed = self.failed(&pick(items, &suspects), &refusal);
            settle(&mut results, &suspects, |position| failed[position].clone());
            rest = waiting;
        }
        let unanswered = || Err(AwsError::incomplete("ChangeResourceRecordSets", "an answer for every change"));
        results.into_iter().map(|result| result.unwrap_or_else(unanswered)).collect()
    }

    /// What `error`, refusing a request of `items`, means for each: a single DELETE refused
    /// because the record is absent or has other values — nothing of ours there; a hosted zone
    /// that does not exist — no record to delete, none can be written; otherwise each fails.
    fn failed(&self, items: &[Item], error: &AwsError) -> Vec<Result<Outcome, AwsError>> {
        let single_delete = items.len() == 1 && items[0].change.action == Action::Delete;
        if single_delete && batch::refused_delete(error.code.as_deref(), &error.message) == Existence::Gone {
            return vec![Ok(Outcome::NotFound)];
        }
        if error.existence() == Existence::Gone {
            return items
                .iter()
                .map(|i| match i.change.action {
                    Action::Delete => Ok(Outcome::NotFound),
                    Action::Upsert => Err(error.clone()),
                })
                .collect();
        }
        if error.class == ErrorClass::Terminal {
            warn!(zone = %self.queue.zone_id, changes = items.len(), %error, "Route 53 refused a change");
        }
        items.iter().map(|_| Err(error.clone())).collect()
    }

    async fn send(&self, callers: &[&'static str], principal: &Principal, items: &[Item]) -> Result<String, AwsError> {
        const OP: &str = "ChangeResourceRecordSets";
        let changes: Vec<Change> = items.iter().map(|i| i.change.clone()).collect();
        let size = Size::of(&changes);
        let batch = change_batch(&changes)?;
        let zone_id = &self.queue.zone_id;
        let client = self.aws.route53(callers.first().copied().unwrap_or_default(), principal).await?;
        let call = Call {
            callers,
            identity: principal.identity(),
            scope: Scope::new(self.queue.account.clone(), Service::Route53, None),
            operation: OP,
            changes: size.tokens,
        };
        let sent = self
            .aws
            .call(call, || {
                let request = client.change_resource_record_sets().hosted_zone_id(zone_id).change_batch(batch.clone());
                async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
            })
            .await;
        match sent {
            Ok(output) => {
                self.queue.health.succeeded();
                Ok(output.change_info().map(|c| c.id().to_owned()).unwrap_or_default())
            }
            // A refusal (of a change, of the caller) is told as it is, and searched for by halves.
            Err(error) => {
                self.queue.health.failed(&error);
                Err(self.queue.health.told(&error))
            }
        }
    }
}

#[derive(Clone)]
enum Outcome {
    Changed(String),
    NotFound,
}

/// The items at `positions`, in order.
fn pick(items: &[Item], positions: &[usize]) -> Vec<Item> {
    positions.iter().map(|&position| items[position].clone()).collect()
}

/// Records the result of each item at `positions`, told by its place among them.
fn settle(results: &mut [Option<Result<Outcome, AwsError>>], positions: &[usize], result: impl Fn(usize) -> Result<Outcome, AwsError>) {
    for (place, &position) in positions.iter().enumerate() {
        results[position] = Some(result(place));
    }
}

/// The requests the next batch may take, by position: those made as the principal of the oldest
/// one (requests queue in the order they came).
fn eligible(requests: &[Request]) -> Vec<usize> {
    let Some(first) = requests.first() else { return Vec::new() };
    requests.iter().enumerate().filter(|(_, request)| request.principal == first.principal).map(|(index, _)| index).collect()
}

fn change_batch(changes: &[Change]) -> Result<ChangeBatch, AwsError> {
    const OP: &str = "ChangeResourceRecordSets";
    let mut sdk_changes = Vec::with_capacity(changes.len());
    for change in changes {
        let value = ResourceRecord::builder().value(&change.record.value).build().map_err(|e| AwsError::invalid_request(OP, &e))?;
        let set = ResourceRecordSet::builder()
            .name(&change.record.name)
            .r#type(RrType::Cname)
            .ttl(change.record.ttl)
            .resource_records(value)
            .build()
            .map_err(|e| AwsError::invalid_request(OP, &e))?;
        let action = match change.action {
            Action::Upsert => ChangeAction::Upsert,
            Action::Delete => ChangeAction::Delete,
        };
        sdk_changes.push(
            aws_sdk_route53::types::Change::builder()
                .action(action)
                .resource_record_set(set)
                .build()
                .map_err(|e| AwsError::invalid_request(OP, &e))?,
        );
    }
    ChangeBatch::builder().comment("blockwork").set_changes(Some(sdk_changes)).build().map_err(|e| AwsError::invalid_request(OP, &e))
}
