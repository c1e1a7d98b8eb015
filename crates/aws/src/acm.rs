//! ACM through the layer: the calls, and the **certificate listing**: one snapshot of every
//! certificate of the account and region, refreshed by paginated ListCertificates sweeps (up to
//! 1,000 certificates a call) and shared by every reader, which is how a thousand certificates
//! are watched for the price of one call.
//!
//! - A summary carries what a watcher needs most of the time: status (issued, revoked, expired,
//!   failed…), `NotAfter`, `InUse` and when the certificate was requested. What only
//!   DescribeCertificate has — the validation records, the managed-renewal status, a failure
//!   reason — is read with [`Acm::describe`].
//! - Sweeps run in the background every `sweep` (5 minutes), every `busy_sweep` and up while a
//!   certificate someone waits for ([`Acm::await_issue`]) is pending — less often the longer it
//!   has been pending — and on demand when a reader needs a listing newer than it has
//!   ([`Freshness`]). Readers asking at once share one sweep.
//! - After every sweep, [`Acm::changes`] tells which certificates changed (status, expiry, use,
//!   revocation; new or gone), and on the background timer also the issued ones inside ACM's
//!   renewal window (managed renewal starts 60 days before expiry), whose renewal only
//!   DescribeCertificate shows.
//! - While the listing fails (AWS throttles it, answers 5xx, times out), a reader that needs a
//!   newer one than it has is not made to wait in the sweep's retries: it is told at once what
//!   it waits for, AWS's answer and since when ([`crate::shared`]), the background sweeps retry
//!   it, and the sweep that succeeds again is told by [`Acm::changes`] (even with nothing
//!   changed), so the readers' objects are looked at again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_acm::types::{CertificateExport, CertificateOptions, CertificateType, Tag, ValidationMethod};
use blockwork_runtime::trace::Traced;
use opentelemetry::trace::SpanContext;
use tokio::sync::{Notify, broadcast};
use tracing::{Instrument as _, debug, warn};

use crate::cache::Cached;
use crate::edge::{Aws, Call};
use crate::error::{AwsError, ErrorClass, classify_sdk_error};
use crate::limiter::Scope;
use crate::metrics::{DESCRIBE_CACHE, LISTING_CACHE, Seed};
use crate::principal::Principal;
use crate::quota::Service;
use crate::shared::Shared;

mod export;
pub use export::{Exported, decrypt};

/// ACM begins managed renewal this long before a certificate expires ("Managed certificate
/// renewal in AWS Certificate Manager", ACM User Guide).
pub const RENEWAL_WINDOW: Duration = Duration::from_secs(60 * 24 * 3600);

/// How long a certificate just requested may be missing from ListCertificates.
const LISTING_DELAY: Duration = Duration::from_secs(60);

/// Certificates ListCertificates returns per call at most.
const PAGE_SIZE: i32 = 1000;

/// ACM's certificate status.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AcmStatus {
    PendingValidation,
    Issued,
    Inactive,
    Expired,
    ValidationTimedOut,
    Revoked,
    Failed,
    /// A status this operator does not know.
    Other(String),
}

impl AcmStatus {
    pub fn parse(status: &str) -> Self {
        match status {
            "PENDING_VALIDATION" => Self::PendingValidation,
            "ISSUED" => Self::Issued,
            "INACTIVE" => Self::Inactive,
            "EXPIRED" => Self::Expired,
            "VALIDATION_TIMED_OUT" => Self::ValidationTimedOut,
            "REVOKED" => Self::Revoked,
            "FAILED" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A CNAME ACM asks for, as ACM gives it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValidationRecord {
    pub name: String,
    pub value: String,
}

/// One domain of a certificate and its DNS validation record, once ACM has published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainValidation {
    pub domain: String,
    /// PENDING_VALIDATION, SUCCESS or FAILED.
    pub status: Option<String>,
    pub record: Option<ValidationRecord>,
}

/// A certificate as DescribeCertificate tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    pub arn: String,
    pub domain: String,
    /// As ACM lists them: the primary domain included.
    pub sans: Vec<String>,
    pub status: AcmStatus,
    pub created_at: Option<jiff::Timestamp>,
    pub not_after: Option<jiff::Timestamp>,
    /// ARNs of the AWS resources using the certificate (load balancers, distributions).
    pub in_use_by: Vec<String>,
    /// ACM's managed renewal status, while or after it renews.
    pub renewal_status: Option<String>,
    pub failure_reason: Option<String>,
    pub validations: Vec<DomainValidation>,
    /// The certificate's serial number, as ACM shows it (hex bytes separated by colons).
    pub serial: Option<String>,
    /// Whether ExportCertificate may export it: a private certificate always, a public one
    /// when it was requested with `Options.Export` (fixed at the request).
    pub exportable: bool,
    /// The ACM Private CA that issued a private certificate.
    pub authority: Option<String>,
}

/// A certificate as the listing tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub arn: String,
    pub domain: String,
    pub status: AcmStatus,
    pub created_at: Option<jiff::Timestamp>,
    pub not_after: Option<jiff::Timestamp>,
    pub in_use: bool,
    pub revoked_at: Option<jiff::Timestamp>,
}

impl Summary {
    /// Issued and inside ACM's renewal window at `now`.
    pub fn renewing(&self, now: jiff::Timestamp) -> bool {
        let window = jiff::SignedDuration::try_from(RENEWAL_WINDOW).unwrap_or(jiff::SignedDuration::MAX);
        self.status == AcmStatus::Issued && self.not_after.is_some_and(|not_after| not_after.duration_since(now) < window)
    }
}

/// How current a listing must be. Chosen by the caller, where it knows why it lists: a recent
/// listing may be served, never one that misses a certificate whose absence the caller is about
/// to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// A listing a few seconds old will do: looking for a certificate requested long ago (an
    /// adoption), or one a repeated request would return anyway.
    Recent,
    /// Swept after the call began: the caller concludes from the listing that a certificate
    /// does not exist (before releasing a deleted Cert, or replacing the record of a create that
    /// may have made one).
    Current,
    /// As the background sweeps keep it (at most a sweep interval old): for reading the state of
    /// a certificate the caller follows through [`Acm::changes`], which tells after every sweep
    /// which certificates changed. Swept now only if no sweep ran for twice the interval.
    Listed,
}

/// What RequestCertificate sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateRequest {
    pub domain: String,
    pub sans: Vec<String>,
    /// ACM's IdempotencyToken (`\w{1,32}`).
    pub token: String,
    pub tags: Vec<(String, String)>,
    /// A public certificate that ExportCertificate may export (`Options.Export`), charged at
    /// issuance and at each renewal (ACM's pricing). Fixed when the certificate is requested.
    pub exportable: bool,
    /// Issue a private certificate from this ACM Private CA instead: no DNS validation, and
    /// always exportable.
    pub authority: Option<String>,
}

/// How the listing is kept and descriptions reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcmConfig {
    /// Background sweeps when nobody waits.
    pub sweep: Duration,
    /// The shortest time between background sweeps while a certificate someone waits for is
    /// pending (it grows to `sweep` the longer it waits).
    pub busy_sweep: Duration,
    /// How old a listing [`Freshness::Recent`] accepts.
    pub recent: Duration,
    /// How long an issued certificate's description is reused.
    pub describe_ttl: Duration,
    /// Descriptions kept at most.
    pub describe_capacity: u64,
}

impl Default for AcmConfig {
    /// Sweeps every 5 minutes: a revoked or expired certificate is seen within 5 minutes, and a
    /// renewing one described at each. Descriptions are reused for 4 minutes, less than a
    /// sweep, so each such look reads a new one.
    fn default() -> Self {
        Self {
            sweep: Duration::from_secs(300),
            busy_sweep: Duration::from_secs(5),
            recent: Duration::from_secs(30),
            describe_ttl: Duration::from_secs(240),
            describe_capacity: 1000,
        }
    }
}

struct Snapshot {
    /// When the sweep that made it began; `None` before the first sweep.
    taken: Option<Instant>,
    certificates: HashMap<String, Summary>,
    /// The sweep's span, if it was exported: what the Certs its changes wake link to.
    span: Option<SpanContext>,
}

/// ACM of one account and region, for one controller, as one principal (an AwsIdentity, or the
/// operator's own identity).
pub struct Acm {
    aws: Arc<Aws>,
    caller: &'static str,
    region: Option<String>,
    principal: Principal,
    config: AcmConfig,
    describes: Cached<String, Certificate>,
    latest: Mutex<Arc<Snapshot>>,
    /// Certificates described since the latest sweep began, as their description tells: newer
    /// than the listing (a certificate just requested is not listed yet).
    described: Mutex<HashMap<String, (Summary, Instant)>>,
    sweeping: tokio::sync::Mutex<()>,
    /// The sweeps' failures, which readers are told instead of waiting for them.
    listing: Shared,
    /// Certificates someone waits to be issued, with when the wait began.
    awaited: Mutex<HashMap<String, Instant>>,
    awaited_changed: Notify,
    changes: broadcast::Sender<Traced<Vec<String>>>,
}

impl Acm {
    /// ACM for `caller` in `region` (default: the process's), acting as `principal`.
    pub fn new(aws: &Arc<Aws>, caller: &'static str, region: Option<&str>, principal: Principal, config: AcmConfig) -> Arc<Self> {
        let describes = Cached::new(aws.metrics(), caller, DESCRIBE_CACHE, config.describe_ttl, config.describe_capacity);
        let empty = Snapshot { taken: None, certificates: HashMap::new(), span: None };
        // Retried by the background sweeps only: readers are told until one succeeds.
        let listing = Shared::new(format!("the ACM certificate listing of {principal}"), None);
        Arc::new(Self {
            aws: Arc::clone(aws),
            caller,
            region: region.map(str::to_owned),
            principal,
            config,
            describes,
            latest: Mutex::new(Arc::new(empty)),
            described: Mutex::default(),
            sweeping: tokio::sync::Mutex::new(()),
            listing,
            awaited: Mutex::default(),
            awaited_changed: Notify::new(),
            changes: broadcast::channel(256).0,
        })
    }

    /// Who its listing sweeps act as.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The region this ACM calls: the one it was made for, else the process's.
    pub async fn region(&self) -> Option<String> {
        match &self.region {
            Some(region) => Some(region.clone()),
            None => self.aws.region().await,
        }
    }

    /// A client with `principal`'s current credentials (an assumed role's are renewed before
    /// they expire, so a client is not kept).
    async fn client(&self, principal: &Principal) -> Result<aws_sdk_acm::Client, AwsError> {
        self.aws.acm(self.caller, self.region.as_deref(), principal).await
    }

    async fn call<T, F, Fut>(&self, principal: &Principal, operation: &'static str, attempt: F) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, AwsError>>,
    {
        self.call_watched(principal, operation, attempt, |_| {}).await
    }

    /// [`Acm::call`], telling `failed` of each failed attempt as it fails.
    async fn call_watched<T, F, Fut>(
        &self,
        principal: &Principal,
        operation: &'static str,
        attempt: F,
        failed: impl Fn(&AwsError),
    ) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, AwsError>>,
    {
        let region = self.region().await;
        let call = Call {
            callers: &[self.caller],
            identity: principal.identity(),
            scope: Scope::new(principal.account(), Service::Acm, region.as_deref()),
            operation,
            changes: 0,
        };
        self.aws.call_watched(call, attempt, failed).await
    }

    /// DescribeCertificate as `principal` (of the listing's account: a namespace of its
    /// identity), read now. A missing certificate is an error of class `NotFound`.
    pub async fn describe(&self, principal: &Principal, arn: &str) -> Result<Certificate, AwsError> {
        const OP: &str = "DescribeCertificate";
        let client = self.client(principal).await?;
        let output = self
            .call(principal, OP, || async {
                client.describe_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(OP, &e))
            })
            .await?;
        let detail = output.certificate.ok_or_else(|| AwsError {
            operation: OP,
            code: Some("ResourceNotFoundException".to_owned()),
            class: ErrorClass::NotFound,
            message: "no certificate in the response".to_owned(),
        })?;
        let certificate = certificate(arn, &detail);
        let summary = Summary {
            arn: certificate.arn.clone(),
            domain: certificate.domain.clone(),
            status: certificate.status.clone(),
            created_at: certificate.created_at,
            not_after: certificate.not_after,
            in_use: !certificate.in_use_by.is_empty(),
            revoked_at: timestamp(detail.revoked_at()),
        };
        self.described.lock().unwrap_or_else(PoisonError::into_inner).insert(certificate.arn.clone(), (summary, Instant::now()));
        if certificate.status == AcmStatus::Issued {
            self.describes.insert(arn.to_owned(), certificate.clone()).await;
        }
        Ok(certificate)
    }

    /// DescribeCertificate, reused for `describe_ttl` once issued (a pending certificate is
    /// read fresh, to see the moment ACM issues it).
    pub async fn describe_recent(&self, principal: &Principal, arn: &str) -> Result<Certificate, AwsError> {
        match self.describes.get(arn).await {
            Some(certificate) => Ok(certificate),
            None => self.describe(principal, arn).await,
        }
    }

    /// ListTagsForCertificate as `principal`.
    pub async fn list_tags(&self, principal: &Principal, arn: &str) -> Result<Vec<(String, String)>, AwsError> {
        const OP: &str = "ListTagsForCertificate";
        let client = self.client(principal).await?;
        let output = self
            .call(principal, OP, || async {
                client.list_tags_for_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(OP, &e))
            })
            .await?;
        Ok(output.tags().iter().map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned())).collect())
    }

    /// AddTagsToCertificate as `principal`: sets `tags` (a key it has is overwritten; the
    /// certificate's other tags stay). How an adopted certificate gets its ownership tags.
    pub async fn add_tags(&self, principal: &Principal, arn: &str, tags: &[(String, String)]) -> Result<(), AwsError> {
        const OP: &str = "AddTagsToCertificate";
        let tags = tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AwsError::invalid_request(OP, &e))?;
        let client = self.client(principal).await?;
        self.call(principal, OP, || async {
            client
                .add_tags_to_certificate()
                .certificate_arn(arn)
                .set_tags(Some(tags.clone()))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify_sdk_error(OP, &e))
        })
        .await
    }

    /// RequestCertificate as `principal`, with DNS validation or from a private CA; returns the
    /// ARN. Idempotent under the token.
    pub async fn request(&self, principal: &Principal, request: &CertificateRequest) -> Result<String, AwsError> {
        const OP: &str = "RequestCertificate";
        let tags = request
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AwsError::invalid_request(OP, &e))?;
        // ACM wants the primary among the SANs when any are given.
        let sans = (!request.sans.is_empty())
            .then(|| std::iter::once(request.domain.clone()).chain(request.sans.iter().cloned()).collect::<Vec<_>>());
        // A private certificate is validated by its CA, not by DNS, and is always exportable
        // (ACM takes no export option for it).
        let (validation, options) = match &request.authority {
            Some(_) => (None, None),
            None => {
                let export = if request.exportable { CertificateExport::Enabled } else { CertificateExport::Disabled };
                (Some(ValidationMethod::Dns), request.exportable.then(|| CertificateOptions::builder().export(export).build()))
            }
        };
        let client = self.client(principal).await?;
        let output = self
            .call(principal, OP, || {
                let call = client
                    .request_certificate()
                    .domain_name(&request.domain)
                    .set_validation_method(validation.clone())
                    .set_certificate_authority_arn(request.authority.clone())
                    .set_options(options.clone())
                    .idempotency_token(&request.token)
                    .set_tags(Some(tags.clone()))
                    .set_subject_alternative_names(sans.clone());
                async move { call.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
            })
            .await?;
        output.certificate_arn.ok_or_else(|| AwsError::incomplete(OP, "the certificate's ARN"))
    }

    /// DeleteCertificate as `principal`. A certificate in use fails with `ResourceInUseException`.
    pub async fn delete(&self, principal: &Principal, arn: &str) -> Result<(), AwsError> {
        const OP: &str = "DeleteCertificate";
        let client = self.client(principal).await?;
        let result = self
            .call(principal, OP, || async {
                client.delete_certificate().certificate_arn(arn).send().await.map(|_| ()).map_err(|e| classify_sdk_error(OP, &e))
            })
            .await;
        self.describes.invalidate(arn).await;
        result
    }

    /// Forgets the description of `arn` (the next [`Acm::describe_recent`] asks AWS).
    pub async fn invalidate(&self, arn: &str) {
        self.describes.invalidate(arn).await;
    }

    /// The listed summary of `arn`; `None` if the listing (as fresh as asked) does not have it.
    pub async fn summary(&self, arn: &str, freshness: Freshness) -> Result<Option<Summary>, AwsError> {
        let snapshot = self.snapshot(freshness).await?;
        Ok(self.newer(&snapshot).remove(arn).or_else(|| snapshot.certificates.get(arn).cloned()))
    }

    /// The certificates described after `snapshot` was swept, or not in it.
    fn newer(&self, snapshot: &Snapshot) -> HashMap<String, Summary> {
        let described = self.described.lock().unwrap_or_else(PoisonError::into_inner);
        described
            .iter()
            .filter(|(arn, (_, at))| snapshot.taken.is_none_or(|taken| *at > taken) || !snapshot.certificates.contains_key(*arn))
            .map(|(arn, (summary, _))| (arn.clone(), summary.clone()))
            .collect()
    }

    /// `(domain, ARN)` of every pending, issued, failed or timed-out certificate of the account
    /// and region: the index by name that lookups by tag start from.
    pub async fn list_certificates(&self, freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
        let snapshot = self.snapshot(freshness).await?;
        let mut certificates = snapshot.certificates.clone();
        certificates.extend(self.newer(&snapshot));
        let listed = certificates.into_values().filter(|s| {
            matches!(s.status, AcmStatus::PendingValidation | AcmStatus::Issued | AcmStatus::Failed | AcmStatus::ValidationTimedOut)
        });
        Ok(listed.map(|s| (s.domain, s.arn)).collect())
    }

    /// Notes that someone waits for `arn` to be issued: background sweeps come quickly until it
    /// is (or the wait grows old), and [`Acm::changes`] tells when it is.
    pub fn await_issue(&self, arn: &str) {
        let new = self.awaited.lock().unwrap_or_else(PoisonError::into_inner).insert(arn.to_owned(), Instant::now()).is_none();
        if new {
            self.awaited_changed.notify_one();
        }
    }

    /// The ARNs of certificates that changed, after each sweep, with the sweep's span.
    pub fn changes(&self) -> broadcast::Receiver<Traced<Vec<String>>> {
        self.changes.subscribe()
    }

    /// A listing as fresh as asked; while the listing fails, what it waits for instead (see the
    /// module's notes).
    async fn snapshot(&self, freshness: Freshness) -> Result<Arc<Snapshot>, AwsError> {
        let asked = Instant::now();
        let fresh_enough = |snapshot: &Snapshot| match freshness {
            Freshness::Recent => snapshot.taken.is_some_and(|taken| asked.saturating_duration_since(taken) <= self.config.recent),
            Freshness::Current => snapshot.taken.is_some_and(|taken| taken >= asked),
            Freshness::Listed => snapshot.taken.is_some_and(|taken| asked.saturating_duration_since(taken) <= self.config.sweep * 2),
        };
        self.listed(fresh_enough, Sweeper::Reader).await
    }

    /// The latest snapshot if `fresh_enough`, else a new sweep's (one at a time: whoever waited
    /// for a sweep finds the one just made).
    async fn listed(&self, fresh_enough: impl Fn(&Snapshot) -> bool, sweeper: Sweeper) -> Result<Arc<Snapshot>, AwsError> {
        let latest = self.latest();
        if fresh_enough(&latest) {
            self.aws.metrics().cache_lookup(&self.seeds(), LISTING_CACHE, true);
            return Ok(latest);
        }
        let reader = sweeper == Sweeper::Reader;
        let outage = || if reader { self.listing.outage() } else { None };
        if let Some(waiting) = outage() {
            return Err(waiting);
        }
        // One sweep at a time; whoever waited for it finds the one just made — or, should that
        // sweep fail, is told at once instead of waiting for its retries.
        let _sweeping = tokio::select! {
            sweeping = self.sweeping.lock() => sweeping,
            waiting = self.listing.next_failure(), if reader => return Err(waiting),
        };
        let latest = self.latest();
        if fresh_enough(&latest) {
            self.aws.metrics().cache_lookup(&self.seeds(), LISTING_CACHE, true);
            return Ok(latest);
        }
        if let Some(waiting) = outage() {
            return Err(waiting);
        }
        self.aws.metrics().cache_lookup(&self.seeds(), LISTING_CACHE, false);
        let span = crate::trace::sweep(self.principal.identity());
        let swept = self.sweep(&latest, blockwork_runtime::trace::span_context(&span)).instrument(span).await;
        let (snapshot, changed) = swept.map_err(|error| self.listing.told(&error))?;
        // After a failure, even a sweep that changed nothing is told: its readers waited.
        let recovered = self.listing.succeeded();
        if !changed.is_empty() || recovered {
            let _ = self.changes.send(Traced { value: changed, span: snapshot.span.clone() });
        }
        Ok(snapshot)
    }

    fn seeds(&self) -> Vec<Seed> {
        Seed::of(self.caller).into_iter().collect()
    }

    fn latest(&self) -> Arc<Snapshot> {
        Arc::clone(&self.latest.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Lists every certificate (all pages), in the sweep's span `span`; returns the new snapshot
    /// and what changed since `previous`.
    async fn sweep(&self, previous: &Snapshot, span: Option<SpanContext>) -> Result<(Arc<Snapshot>, Vec<String>), AwsError> {
        const OP: &str = "ListCertificates";
        let taken = Instant::now();
        let _flight = self.listing.begin();
        let failed = |error: &AwsError| self.listing.failed(error);
        let client = self.client(&self.principal).await.inspect_err(failed)?;
        let mut certificates = HashMap::with_capacity(previous.certificates.len() + 16);
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call_watched(
                    &self.principal,
                    OP,
                    || {
                        let request = client.list_certificates().max_items(PAGE_SIZE).set_next_token(token.clone());
                        async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
                    },
                    failed,
                )
                .await?;
            for summary in page.certificate_summary_list() {
                if let Some(summary) = self::summary(summary) {
                    certificates.insert(summary.arn.clone(), summary);
                }
            }
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => break,
            }
        }
        let mut before = previous.certificates.clone();
        before.extend(self.newer(previous));
        let changed = changed(&before, &certificates, previous.taken.is_none());
        let snapshot = Arc::new(Snapshot { taken: Some(taken), certificates, span });
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&snapshot);
        // Descriptions the sweep superseded go; one of a certificate not listed yet stays a
        // while (ListCertificates may lag a request by a few seconds).
        self.described
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|arn, (_, at)| *at > taken || (!snapshot.certificates.contains_key(arn) && at.elapsed() < LISTING_DELAY));
        self.forget_issued(&snapshot);
        crate::trace::swept(snapshot.certificates.len(), changed.len());
        debug!(certificates = snapshot.certificates.len(), changed = changed.len(), "swept the certificate listing");
        Ok((snapshot, changed))
    }

    /// Stops waiting for certificates the listing shows no longer pending, and for ones it has
    /// not shown for a minute after the wait began (deleted meanwhile).
    fn forget_issued(&self, snapshot: &Snapshot) {
        let mut awaited = self.awaited.lock().unwrap_or_else(PoisonError::into_inner);
        awaited.retain(|arn, since| match snapshot.certificates.get(arn) {
            Some(summary) => summary.status == AcmStatus::PendingValidation,
            None => snapshot.taken.is_some_and(|taken| taken < *since + LISTING_DELAY),
        });
    }

    /// When the next background sweep is due after one at `last`.
    fn next_sweep(&self, last: Instant) -> Instant {
        let youngest_wait = self.awaited.lock().unwrap_or_else(PoisonError::into_inner).values().max().copied();
        last + sweep_interval(youngest_wait.map(|since| since.elapsed()), &self.config)
    }

    /// Sweeps in the background until the process ends; after each sweep on the timer, also
    /// tells the issued certificates inside the renewal window. Started once per process by the
    /// controller that watches certificates.
    pub async fn keep_swept(self: Arc<Self>) {
        let mut renewal_due = Instant::now();
        loop {
            // On-demand sweeps count: the next one is due after the latest, whoever made it. While
            // the listing fails its readers wait for this loop to retry it: at once (after the
            // pause below a failure), not a sweep interval after the last success.
            let due = match self.latest().taken {
                Some(taken) if self.listing.outage().is_none() => Some(self.next_sweep(taken)),
                Some(_) => Some(Instant::now()),
                None => None,
            };
            if let Some(due) = due.filter(|due| Instant::now() < *due) {
                tokio::select! {
                    () = tokio::time::sleep_until(due.into()) => {}
                    () = self.awaited_changed.notified() => {}
                    // A reader's sweep began failing: this loop retries it.
                    _ = self.listing.next_failure() => {}
                }
                continue;
            }
            // The retrier of a failing listing (its readers are told meanwhile). Any sweep taken
            // since it came due will do, the first one of the process too: a reader's sweep under
            // way as the process starts is not followed by a second one.
            let since_due = |snapshot: &Snapshot| snapshot.taken.is_some_and(|taken| due.is_none_or(|due| taken >= due));
            let listing = self.listed(since_due, Sweeper::Background).await;
            match listing {
                Ok(snapshot) if Instant::now() >= renewal_due => {
                    renewal_due = Instant::now() + self.config.sweep;
                    let now = jiff::Timestamp::now();
                    let renewing: Vec<String> = snapshot.certificates.values().filter(|s| s.renewing(now)).map(|s| s.arn.clone()).collect();
                    if !renewing.is_empty() {
                        let _ = self.changes.send(Traced { value: renewing, span: snapshot.span.clone() });
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    warn!(%error, "sweeping the certificate listing failed; the next sweep tries again");
                    tokio::time::sleep(self.config.busy_sweep).await;
                }
            }
        }
    }
}

/// Who asks for a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sweeper {
    /// A reader, who is told of a failing listing instead of sweeping it.
    Reader,
    /// The background sweeps, which retry it.
    Background,
}

/// The ARNs whose summary differs between two listings (new, gone or changed). In the process's
/// `first` sweep a certificate not described before is not new, only seen for the first time:
/// whoever follows it reads this listing at its first look anyway, so a restart does not wake
/// every Cert a second time.
fn changed(before: &HashMap<String, Summary>, after: &HashMap<String, Summary>, first: bool) -> Vec<String> {
    let changed = |arn: &String, summary: &Summary| match before.get(arn) {
        Some(known) => known != summary,
        None => !first,
    };
    let mut arns: HashSet<&String> = after.iter().filter(|(arn, s)| changed(arn, s)).map(|(arn, _)| arn).collect();
    arns.extend(before.keys().filter(|arn| !after.contains_key(*arn)));
    arns.into_iter().cloned().collect()
}

fn timestamp(time: Option<&aws_sdk_acm::primitives::DateTime>) -> Option<jiff::Timestamp> {
    time.and_then(|t| jiff::Timestamp::from_second(t.secs()).ok())
}

fn summary(summary: &aws_sdk_acm::types::CertificateSummary) -> Option<Summary> {
    Some(Summary {
        arn: summary.certificate_arn()?.to_owned(),
        domain: summary.domain_name().unwrap_or_default().to_owned(),
        status: summary.status().map_or(AcmStatus::Other("unknown".to_owned()), |s| AcmStatus::parse(s.as_str())),
        created_at: timestamp(summary.created_at()),
        not_after: timestamp(summary.not_after()),
        in_use: summary.in_use().unwrap_or(false),
        revoked_at: timestamp(summary.revoked_at()),
    })
}

fn certificate(arn: &str, detail: &aws_sdk_acm::types::CertificateDetail) -> Certificate {
    Certificate {
        arn: detail.certificate_arn().unwrap_or(arn).to_owned(),
        domain: detail.domain_name().unwrap_or_default().to_owned(),
        sans: detail.subject_alternative_names().to_vec(),
        status: detail.status().map_or(AcmStatus::Other("unknown".to_owned()), |s| AcmStatus::parse(s.as_str())),
        created_at: timestamp(detail.created_at()),
        not_after: timestamp(detail.not_after()),
        in_use_by: detail.in_use_by().to_vec(),
        renewal_status: detail.renewal_summary().map(|r| r.renewal_status().as_str().to_owned()),
        failure_reason: detail.failure_reason().map(|r| r.as_str().to_owned()),
        validations: detail
            .domain_validation_options()
            .iter()
            .map(|v| DomainValidation {
                domain: v.domain_name().to_owned(),
                status: v.validation_status().map(|s| s.as_str().to_owned()),
                record: v.resource_record().map(|r| ValidationRecord { name: r.name().to_owned(), value: r.value().to_owned() }),
            })
            .collect(),
        serial: detail.serial().map(str::to_owned),
        exportable: detail.r#type() == Some(&CertificateType::Private)
            || detail.options().and_then(|o| o.export()) == Some(&CertificateExport::Enabled),
        authority: detail.certificate_authority_arn().map(str::to_owned),
    }
}

/// The time to the next sweep while a certificate has been awaited for `waited` (the youngest
/// wait): a tenth of it, quick at first, every few minutes for one pending for an hour; never
/// below the busy sweep nor above the sweep, and never above the sweep when a user's sweep is
/// shorter than the busy one (`--certificate-listing-interval 2s`).
fn sweep_interval(waited: Option<Duration>, config: &AcmConfig) -> Duration {
    match waited {
        Some(waited) => (waited / 10).max(config.busy_sweep).min(config.sweep),
        None => config.sweep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(arn: &str, status: AcmStatus) -> Summary {
        Summary {
            arn: arn.to_owned(),
            domain: "a.example.com".to_owned(),
            status,
            created_at: None,
            not_after: None,
            in_use: false,
            revoked_at: None,
        }
    }

    #[test]
    fn a_sweep_shorter_than_the_busy_sweep_is_kept() {
        let config = AcmConfig { sweep: Duration::from_secs(2), busy_sweep: Duration::from_secs(5), ..AcmConfig::default() };
        assert_eq!(sweep_interval(Some(Duration::from_secs(1)), &config), Duration::from_secs(2));
        assert_eq!(sweep_interval(Some(Duration::from_secs(3600)), &config), Duration::from_secs(2));
        assert_eq!(sweep_interval(None, &config), Duration::from_secs(2));
    }

    #[test]
    fn an_awaited_certificate_is_swept_at_a_tenth_of_its_wait_between_the_busy_sweep_and_the_sweep() {
        let config = AcmConfig { sweep: Duration::from_secs(300), busy_sweep: Duration::from_secs(5), ..AcmConfig::default() };
        assert_eq!(sweep_interval(Some(Duration::from_secs(10)), &config), Duration::from_secs(5));
        assert_eq!(sweep_interval(Some(Duration::from_secs(600)), &config), Duration::from_secs(60));
        assert_eq!(sweep_interval(Some(Duration::from_secs(7200)), &config), Duration::from_secs(300));
    }

    #[test]
    fn acm_statuses_parse() {
        assert_eq!(AcmStatus::parse("ISSUED"), AcmStatus::Issued);
        assert_eq!(AcmStatus::parse("REVOKED"), AcmStatus::Revoked);
        assert_eq!(AcmStatus::parse("NEW_THING"), AcmStatus::Other("NEW_THING".into()));
    }

    #[test]
    fn new_gone_and_changed_certificates_are_changes_and_unchanged_ones_not() {
        let before: HashMap<String, Summary> = [("a", AcmStatus::Issued), ("b", AcmStatus::PendingValidation), ("c", AcmStatus::Issued)]
            .iter()
            .map(|(arn, s)| ((*arn).to_owned(), listed(arn, s.clone())))
            .collect();
        let after: HashMap<String, Summary> = [("a", AcmStatus::Issued), ("b", AcmStatus::Issued), ("d", AcmStatus::PendingValidation)]
            .iter()
            .map(|(arn, s)| ((*arn).to_owned(), listed(arn, s.clone())))
            .collect();
        let mut changes = changed(&before, &after, false);
        changes.sort();
        assert_eq!(changes, ["b", "c", "d"]);
        let mut first = changed(&before, &after, true);
        first.sort();
        assert_eq!(first, ["b", "c"], "the first sweep of a process sees d for the first time");
    }

    #[test]
    fn an_issued_certificate_within_sixty_days_of_expiry_is_renewing() {
        let now = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(24 * 400);
        let expiring =
            |days: i64| Summary { not_after: Some(now + jiff::SignedDuration::from_hours(24 * days)), ..listed("a", AcmStatus::Issued) };
        assert!(expiring(59).renewing(now));
        assert!(!expiring(61).renewing(now));
        assert!(!Summary { status: AcmStatus::Revoked, ..expiring(10) }.renewing(now));
    }
}
