//! An HTTP proxy between the AWS SDK and an emulator that answers chosen calls with real AWS
//! errors (in each protocol's wire format, so the SDK parses the code), adds latency before or
//! after the call takes effect, never answers (the caller's timeout ends the call), resets the
//! connection, or turns Route53 changes PENDING, CloudFront-managed certificates
//! `pending-validation` and ACM certificates `PENDING_VALIDATION`. It counts the calls of each
//! operation. Besides faults for the next calls of an operation, it can fail a share of every
//! call with faults drawn at random from a seeded generator ([`RandomFaults`]), for soak tests.
//!
//! The "pending" faults stand in for AWS's asynchronous work that the emulators finish at once:
//! moto reports every record change INSYNC and issues every certificate after a second,
//! MiniStack issues every managed certificate immediately. They forward the call and rewrite only the status in the answer, so everything
//! else (the change id, the certificate's ARN) is the emulator's.
//!
//! Two faithful extensions stand in for AWS behaviour the emulators lack:
//!
//! - **Throttling** ([`FaultProxy::enforce_quotas`]): AWS's token buckets (account-level,
//!   per-operation, Route 53's change throughput; see [`crate::throttle`]), answering
//!   `Throttling`/`ThrottlingException` as AWS does once a bucket is empty. Calls are counted
//!   whether throttled or not; [`FaultProxy::throttled`] counts the throttled ones.
//! - **A certificate's status changing on its own** ([`FaultProxy::set_certificate_status`]):
//!   revoked, expired, failed. moto cannot revoke an ACM certificate, and its certificates are
//!   valid for a year; the proxy rewrites the status in ListCertificates and DescribeCertificate
//!   answers about that certificate, with what AWS reports beside it: `RevokedAt` for a revoked
//!   one, a `NotAfter` in the past for an expired one (ACM marks a certificate `EXPIRED` once its
//!   `NotAfter` has passed).
//! - **A managed renewal failing** ([`FaultProxy::fail_renewal`]): moto never renews. ACM tries
//!   to renew an issued certificate from 60 days before its `NotAfter`; when it cannot, the
//!   certificate stays `ISSUED` and only DescribeCertificate tells (its `RenewalSummary` with
//!   `RenewalStatus` `FAILED`). The proxy answers as for such a certificate: `NotAfter` 30 days
//!   ahead (inside the renewal window) in both answers, `RenewalEligibility` `ELIGIBLE`, and in
//!   DescribeCertificate a `RenewalSummary` `FAILED` for reason `CAA_ERROR` (a CAA record that
//!   forbids Amazon's CA, one of the reasons ACM documents) with the certificate's own domain
//!   validation options.
//! - **ACM issuing a body for an ARN** ([`FaultProxy::renew_certificate`], and always for a
//!   certificate requested from a private CA): a managed renewal under the same ARN, and a private
//!   CA signing its certificates, which moto does neither of; see [`crate::issuance`]. A request
//!   from a private CA that is not `ACTIVE` (or does not exist) makes a `FAILED` certificate with
//!   ACM's failure reason `PCA_INVALID_STATE` (`PCA_RESOURCE_NOT_FOUND`), as ACM does; moto
//!   issues it whatever the CA's state.
//! - **Accounts** ([`crate::accounts`]): the account of each request's key, learnt from the
//!   AssumeRole answers passing through (shared between proxies with
//!   [`FaultProxy::start_with_accounts`]): faults for one account only
//!   ([`FaultProxy::inject_for_account`]), throttling buckets per account as AWS keeps them, a
//!   role's trust policy checking the ExternalId, and MiniStack told a session's account.
//! - **Route 53's DELETE matches the current values** (always on): AWS refuses a change batch
//!   whose DELETE names a record set that is gone or whose TTL or values differ from the
//!   current ones (`InvalidChangeBatch`); moto accepts a DELETE whose values matched *any* past
//!   write of the record. The proxy reads the record set from moto first and answers as AWS
//!   would (a change to a hosted zone that does not exist goes on to moto, which answers
//!   `NoSuchHostedZone` as AWS does). Blockwork's ownership rule rests on this check. A call
//!   delayed by a fault ([`Fault::Latency`], [`Fault::SlowResponse`]) is checked the same way:
//!   it still reaches Route 53.
//! - **IAM denying record names** ([`FaultProxy::deny_record_names`]): a policy with a condition
//!   on `route53:ChangeResourceRecordSetsNormalizedRecordNames` refuses the *whole*
//!   ChangeResourceRecordSets with `AccessDenied` (403) when any name in it is denied, changing
//!   nothing; moto has no IAM evaluation on Route 53 at all.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use crate::accounts::AccountBook;
pub use crate::process::Error;

/// Which calls a fault applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// An AWS operation name, e.g. `RequestCertificate`, `ChangeResourceRecordSets`.
    Named(String),
    Any,
}

impl Operation {
    pub fn named(name: &str) -> Self {
        Self::Named(name.to_owned())
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Named(n) => n == name,
            Self::Any => true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The service's throttling error (`ThrottlingException` in JSON, `Throttling` in XML).
    Throttling,
    /// A 5xx with the service's internal-error body.
    ServerError(u16),
    /// `AccessDeniedException` / `AccessDenied`.
    AccessDenied,
    /// ACM's `ResourceInUseException`.
    ResourceInUse,
    /// Route53's `PriorRequestNotComplete`.
    PriorRequestNotComplete,
    /// Wait, then forward.
    Latency(Duration),
    /// Forward at once, then wait before answering: the call has taken effect while its caller
    /// still waits (and never hears of it, if it dies meanwhile), as when a process is killed
    /// between an AWS call and recording its result.
    SlowResponse(Duration),
    /// Forward, then report Route53 change status `PENDING` instead of `INSYNC`.
    PendingChange,
    /// Forward, then report a CloudFront-managed certificate (`GetManagedCertificateDetails`)
    /// as `pending-validation` instead of `issued`, as CloudFront does until the certificate's
    /// domains are validated.
    PendingCertificate,
    /// Forward, then report an ACM certificate (`DescribeCertificate`) as `PENDING_VALIDATION`
    /// instead of `ISSUED`, as ACM does until its validation records resolve (moto issues after
    /// a second).
    PendingValidation,
    /// Never answers and forwards nothing: the caller's own timeout ends the call (the proxy
    /// drops the connection after [`TIMEOUT_HOLD`]).
    Timeout,
    /// Resets the connection (TCP RST) without answering and forwards nothing, as a crashed load
    /// balancer or a broken network path does.
    ConnectionReset,
    /// Any error code and message.
    Custom { status: u16, code: String, message: String },
}

/// How long [`Fault::Timeout`] holds a call before dropping its connection: longer than any
/// caller's timeout.
pub const TIMEOUT_HOLD: Duration = Duration::from_secs(300);

impl Fault {
    /// A short name, for counts and reports: `Throttling`, `ServerError(503)`, `Timeout`, ...
    pub fn label(&self) -> String {
        match self {
            Self::Custom { code, .. } => code.clone(),
            Self::Latency(_) => "Latency".to_owned(),
            Self::SlowResponse(_) => "SlowResponse".to_owned(),
            other => format!("{other:?}"),
        }
    }
}

/// A share of every call failing, with faults drawn at random: `rate` of the calls (0.0–1.0) get
/// one of `faults`, from a generator seeded with `seed` (the sequence of draws is reproducible;
/// which call gets which draw depends on the order calls arrive in). The faults are dealt like
/// cards: each once per round of `faults.len()`, in a shuffled order, so that a run with as many
/// faults as there are kinds has injected every kind (drawn independently, a seed could leave
/// one out of a short run: the fault soak's seed 12447780977098908883 drew no slow answer in 24).
#[derive(Clone, Debug, PartialEq)]
pub struct RandomFaults {
    pub rate: f64,
    pub faults: Vec<Fault>,
    pub seed: u64,
}

impl RandomFaults {
    /// Every transient fault AWS answers with: throttling (each service's real code, and
    /// Route53's `PriorRequestNotComplete`), 500 and 503, a call that never answers, a reset
    /// connection, and an answer that comes `slow` late (the call took effect).
    pub fn transient(rate: f64, seed: u64, slow: Duration) -> Self {
        let faults = vec![
            Fault::Throttling,
            Fault::PriorRequestNotComplete,
            Fault::ServerError(500),
            Fault::ServerError(503),
            Fault::Timeout,
            Fault::ConnectionReset,
            Fault::SlowResponse(slow),
        ];
        Self { rate, faults, seed }
    }
}

/// Random faults with their generator, and what is left of the current round.
struct Dice {
    faults: RandomFaults,
    rng: StdRng,
    round: Vec<Fault>,
}

impl Dice {
    fn new(faults: RandomFaults) -> Self {
        let rng = StdRng::seed_from_u64(faults.seed);
        Self { faults, rng, round: Vec::new() }
    }

    fn roll(&mut self) -> Option<Fault> {
        if self.faults.faults.is_empty() || !self.rng.random_bool(self.faults.rate.clamp(0.0, 1.0)) {
            return None;
        }
        if self.round.is_empty() {
            self.round = self.faults.faults.clone();
            self.round.shuffle(&mut self.rng);
        }
        self.round.pop()
    }
}

#[derive(Default)]
struct State {
    /// Faults for calls made in one account: (account, operation, fault, times left).
    account_faults: Vec<(String, Operation, Fault, usize)>,
    faults: Vec<(Operation, Fault, usize)>,
    random: Option<Dice>,
    calls: HashMap<String, usize>,
    injected: HashMap<String, usize>,
    throttle: Option<crate::throttle::Throttle>,
    throttled: HashMap<String, usize>,
    /// ACM certificate ARN → what its answers report over the emulator's.
    certificate_statuses: HashMap<String, CertificateFacts>,
    /// ACM certificate ARN → the body ACM issued for it over moto's ([`crate::issuance`]).
    issued: HashMap<String, crate::issuance::Shared>,
    accounts: AccountBook,
    /// Present keys of a known account as the account id (for MiniStack).
    present_accounts: bool,
    /// Record names (normalized: lowercase, no trailing dot) IAM denies to change.
    denied_names: Vec<String>,
}

/// Stops serving when dropped.
pub struct FaultProxy {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
    upstream: Arc<str>,
    client: Upstream,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (e.g. an [`Emulator`](crate::emulators::Emulator)'s
    /// endpoint) on the current tokio runtime.
    pub async fn start(upstream: &str) -> Result<Self, Error> {
        Self::start_bound(std::net::Ipv4Addr::LOCALHOST, upstream, AccountBook::default()).await
    }

    /// Starts a proxy to `upstream` listening on `host` (the end-to-end suite binds the node's
    /// bridge address, where pods reach it).
    pub async fn start_on(host: std::net::Ipv4Addr, upstream: &str) -> Result<Self, Error> {
        Self::start_bound(host, upstream, AccountBook::default()).await
    }

    /// A proxy to `upstream` that shares what it learns of accounts with the other proxies of
    /// `accounts` (e.g. STS through one proxy, CloudFront through another).
    pub async fn start_with_accounts(upstream: &str, accounts: AccountBook) -> Result<Self, Error> {
        Self::start_bound(std::net::Ipv4Addr::LOCALHOST, upstream, accounts).await
    }

    async fn start_bound(host: std::net::Ipv4Addr, upstream: &str, accounts: AccountBook) -> Result<Self, Error> {
        let listener = TcpListener::bind((host, 0)).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State { accounts, ..State::default() }));
        let upstream: Arc<str> = Arc::from(upstream.trim_end_matches('/'));
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let shared = Arc::clone(&state);
        let (serving, serving_client) = (Arc::clone(&upstream), client.clone());
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (state, upstream, client) = (Arc::clone(&shared), Arc::clone(&serving), serving_client.clone());
                tokio::spawn(serve(stream, state, upstream, client));
            }
        });
        Ok(Self { address, state, server, upstream, client })
    }

    /// The SDK's endpoint override.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Answers the next `times` calls matching `operation` with `fault`. Faults apply in the
    /// order they were injected.
    pub fn inject(&self, operation: Operation, fault: Fault, times: usize) {
        self.lock().faults.push((operation, fault, times));
    }

    /// Answers the next `times` calls matching `operation` made in `account` (by an assumed
    /// role's key the proxy saw issued) with `fault`; they come before other faults.
    pub fn inject_for_account(&self, account: &str, operation: Operation, fault: Fault, times: usize) {
        self.lock().account_faults.push((account.to_owned(), operation, fault, times));
    }

    /// What this proxy (and those sharing it) learnt of accounts: the AssumeRoles asked, the
    /// roles that require an ExternalId.
    pub fn accounts(&self) -> AccountBook {
        self.lock().accounts.clone()
    }

    /// From now on, a request signed with an assumed role's key goes on signed with its
    /// account's id as the key: how MiniStack tells accounts apart.
    pub fn present_accounts(&self) {
        self.lock().present_accounts = true;
    }

    /// From now on, refuses every ChangeResourceRecordSets that changes any of `names` (or a
    /// name below one: `*.`-style denial of a subtree is what such policies usually state) as
    /// IAM does: the whole request, `AccessDenied`, nothing changed.
    pub fn deny_record_names(&self, names: &[&str]) {
        self.lock().denied_names.extend(names.iter().map(|name| normalized(name)));
    }

    /// How many requests of `operation` arrived (faulted or forwarded).
    pub fn calls(&self, operation: &str) -> usize {
        self.lock().calls.get(operation).copied().unwrap_or(0)
    }

    /// Every operation seen, with its count.
    pub fn all_calls(&self) -> HashMap<String, usize> {
        self.lock().calls.clone()
    }

    /// Waits until at least `count` requests of `operation` arrived (a call held by latency
    /// counts from the moment it arrives); fails the test after [`crate::harness::TIMEOUT`].
    pub async fn wait_for_calls(&self, operation: &str, count: usize) {
        let what = format!("{count} calls of {operation}");
        crate::harness::eventually(&what, crate::harness::TIMEOUT, async || {
            if self.calls(operation) >= count { Ok(()) } else { Err(format!("{:?}", self.all_calls())) }
        })
        .await
    }

    /// From now on, fails a share of every call at random (see [`RandomFaults`]); replaces
    /// earlier random faults. Faults injected for chosen calls ([`Self::inject`]) come first.
    pub fn inject_random(&self, faults: RandomFaults) {
        self.lock().random = Some(Dice::new(faults));
    }

    /// Stops the random faults.
    pub fn stop_random(&self) {
        self.lock().random = None;
    }

    /// How many calls got each fault (by [`Fault::label`]), injected or random.
    pub fn injected(&self) -> HashMap<String, usize> {
        self.lock().injected.clone()
    }

    /// Throttles calls as AWS would with `quotas` (`Quotas::aws()`: AWS's own), from now on.
    pub fn enforce_quotas(&self, quotas: blockwork_aws::quota::Quotas) {
        self.lock().throttle = Some(crate::throttle::Throttle::new(quotas));
    }

    /// How many requests of `operation` were answered `Throttling` by [`Self::enforce_quotas`].
    pub fn throttled(&self, operation: &str) -> usize {
        self.lock().throttled.get(operation).copied().unwrap_or(0)
    }

    /// Every operation throttled, with its count.
    pub fn all_throttled(&self) -> HashMap<String, usize> {
        self.lock().throttled.clone()
    }

    /// From now on, ACM reports the certificate `arn` as `status` (e.g. `REVOKED`, `EXPIRED`)
    /// in ListCertificates and DescribeCertificate answers.
    pub fn set_certificate_status(&self, arn: &str, status: &str) {
        let now = unix_seconds();
        let facts = CertificateFacts {
            status: Some(status.to_owned()),
            failure_reason: None,
            revoked_at: (status == "REVOKED").then_some(now),
            not_after: (status == "EXPIRED").then_some(now - 1),
            renewal_failed_at: None,
        };
        self.lock().certificate_statuses.insert(arn.to_owned(), facts);
    }

    /// From now on, ACM reports the issued certificate `arn` as one whose managed renewal
    /// failed: `NotAfter` 30 days ahead, and a `RenewalSummary` `FAILED` in DescribeCertificate.
    pub fn fail_renewal(&self, arn: &str) {
        let now = unix_seconds();
        let facts = CertificateFacts {
            status: None,
            failure_reason: None,
            revoked_at: None,
            not_after: Some(now + 30 * 24 * 3600),
            renewal_failed_at: Some(now),
        };
        self.lock().certificate_statuses.insert(arn.to_owned(), facts);
    }

    /// ACM renews the issued certificate `arn` now (see [`crate::issuance`]): a new serial,
    /// validity and key under the same ARN, with its tags and options, from its private CA if it
    /// has one. The listing shows the new `NotAfter` from the next sweep on. Returns the body.
    pub async fn renew_certificate(&self, arn: &str) -> Result<crate::issuance::Issued, Error> {
        // A renewal expires later than what it renews (ACM renews weeks before the end); moto's
        // private CA dates a certificate from the second it signs it, so one renewed within the
        // second of its issuance is signed again a moment later.
        let previous = self.lock().issued.get(arn).map(|issued| issued.not_after);
        let issued = loop {
            let issued = crate::issuance::issue(&self.upstream, &self.client, arn, true).await?;
            if previous.is_none_or(|previous| issued.not_after > previous) {
                break issued;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        self.lock().issued.insert(arn.to_owned(), Arc::new(issued.clone()));
        Ok(issued)
    }

    /// The body ACM issued for `arn` over moto's, if the proxy issued one.
    pub fn issued(&self, arn: &str) -> Option<crate::issuance::Issued> {
        self.lock().issued.get(arn).map(|issued| (**issued).clone())
    }

    /// Forgets every fault, count, quota and issued body; keeps what it knows of accounts.
    pub fn clear(&self) {
        let mut state = self.lock();
        let (accounts, present_accounts) = (state.accounts.clone(), state.present_accounts);
        *state = State { accounts, present_accounts, ..State::default() };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// awsJson 1.1 (ACM).
    Json,
    /// restXml (Route53, CloudFront).
    RestXml,
    /// awsQuery (STS).
    Query,
}

type Upstream = Client<HttpConnector, Full<Bytes>>;

/// One connection: answers its requests until it closes, or resets it when a call draws
/// [`Fault::ConnectionReset`].
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>, upstream: Arc<str>, client: Upstream) {
    let reset = Arc::new(Notify::new());
    let signal = Arc::clone(&reset);
    let service = service_fn(move |request| {
        let (state, upstream, client, reset) = (Arc::clone(&state), Arc::clone(&upstream), client.clone(), Arc::clone(&signal));
        async move {
            match handle(request, &state, &upstream, &client).await {
                Some(response) => Ok::<_, Infallible>(response),
                None => {
                    reset.notify_one();
                    std::future::pending().await
                }
            }
        }
    });
    let connection = Box::pin(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(&mut stream), service));
    let was_reset = tokio::select! {
        _ = connection => false,
        () = reset.notified() => true,
    };
    if was_reset {
        // Closing with a zero linger time sends RST instead of FIN.
        let _ = stream.set_zero_linger();
    }
}

/// The answer to one call; `None` resets the connection.
async fn handle(request: Request<Incoming>, state: &Mutex<State>, upstream: &str, client: &Upstream) -> Option<Response<Full<Bytes>>> {
    let (mut parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Some(plain(StatusCode::BAD_REQUEST, &format!("fault proxy: reading the request: {e}"))),
    };
    let (protocol, operation) = identify(&parts, &body);
    let authorization = parts.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let assume_role = (operation == "AssumeRole").then(|| crate::accounts::assume_role_request(&body)).flatten();
    let (fault, statuses, issued, book) = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        *state.calls.entry(operation.clone()).or_default() += 1;
        let account = crate::accounts::access_key(&authorization).and_then(|key| state.accounts.account_of_key(key));
        if state.present_accounts
            && let Some(presented) = account.as_deref().and_then(|account| crate::accounts::with_access_key(&authorization, account))
            && let Ok(value) = http::HeaderValue::from_str(&presented)
        {
            parts.headers.insert(http::header::AUTHORIZATION, value);
        }
        let for_account = state
            .account_faults
            .iter_mut()
            .find(|(faulted, op, _, left)| *left > 0 && account.as_deref() == Some(faulted.as_str()) && op.matches(&operation));
        let chosen = for_account.map(|(_, _, fault, left)| {
            *left -= 1;
            fault.clone()
        });
        let found = state.faults.iter_mut().find(|(op, _, left)| *left > 0 && op.matches(&operation));
        let chosen = chosen.or_else(|| {
            found.map(|(_, fault, left)| {
                *left -= 1;
                fault.clone()
            })
        });
        let mut fault = chosen.or_else(|| state.random.as_mut().and_then(Dice::roll));
        if fault.is_none()
            && let Some(asked) = &assume_role
            && !state.accounts.asked(asked.clone())
        {
            let message = crate::accounts::refusal_message(&asked.role_arn);
            fault = Some(Fault::Custom { status: 403, code: "AccessDenied".to_owned(), message });
        }
        if let Some(fault) = &fault {
            *state.injected.entry(fault.label()).or_default() += 1;
        }
        if fault.is_none() && !admitted(&mut state, &parts, &operation, &body) {
            *state.throttled.entry(operation.clone()).or_default() += 1;
            fault = Some(Fault::Throttling);
        }
        if fault.is_none() && operation == "ChangeResourceRecordSets" && denies(&state.denied_names, &body) {
            fault = Some(Fault::Custom { status: 403, code: "AccessDenied".to_owned(), message: denial_message(&parts) });
        }
        let statuses = (protocol == Protocol::Json && !state.certificate_statuses.is_empty()).then(|| state.certificate_statuses.clone());
        let issued = (protocol == Protocol::Json && !state.issued.is_empty()).then(|| state.issued.clone());
        (fault, statuses, issued, state.accounts.clone())
    };
    if let (None, Some(asked)) = (&fault, &assume_role) {
        let (parts, answer) = forward(parts, body, upstream, client, None).await.into_parts();
        let answer = match answer.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(never) => match never {},
        };
        book.answered(&asked.role_arn, &String::from_utf8_lossy(&answer));
        return Some(Response::from_parts(parts, Full::new(answer)));
    }
    if fault.is_none()
        && let Some(issued) = &issued
        && let Some(held) = certificate_arn(&body).and_then(|arn| issued.get(&arn))
        && let Some(answer) = crate::issuance::answer(&operation, &body, held)
    {
        return Some(answer);
    }
    if fault.is_none() && operation == "RequestCertificate" && private_ca(&body).is_some() {
        let response = forward(parts, body.clone(), upstream, client, None).await;
        return Some(issue_private(response, &body, state, upstream, client).await);
    }
    if matches!(fault, None | Some(Fault::Latency(_) | Fault::SlowResponse(_)))
        && operation == "ChangeResourceRecordSets"
        && let Some(refusal) = refused_delete(&parts, &body, upstream, client).await
    {
        return Some(refusal);
    }
    if fault.is_none() && (statuses.is_some() || issued.is_some()) {
        let response = forward(parts, body, upstream, client, None).await;
        return Some(with_certificate_statuses(response, &statuses.unwrap_or_default(), &issued.unwrap_or_default()).await);
    }
    Some(match fault {
        Some(Fault::Latency(delay)) => {
            tokio::time::sleep(delay).await;
            forward(parts, body, upstream, client, None).await
        }
        Some(Fault::SlowResponse(delay)) => {
            let response = forward(parts, body, upstream, client, None).await;
            tokio::time::sleep(delay).await;
            response
        }
        Some(Fault::PendingChange) => forward(parts, body, upstream, client, Some(PENDING_CHANGE)).await,
        Some(Fault::PendingCertificate) => forward(parts, body, upstream, client, Some(PENDING_CERTIFICATE)).await,
        Some(Fault::PendingValidation) => forward(parts, body, upstream, client, Some(PENDING_VALIDATION)).await,
        Some(Fault::Timeout) => {
            tokio::time::sleep(TIMEOUT_HOLD).await;
            return None;
        }
        Some(Fault::ConnectionReset) => return None,
        Some(fault) => error_response(protocol, &fault),
        None => forward(parts, body, upstream, client, None).await,
    })
}

/// Whether AWS's buckets (when enforced) let the request through; takes its tokens if so. The
/// buckets are the account's when the proxy knows the key's account, else the key's.
fn admitted(state: &mut State, parts: &http::request::Parts, operation: &str, body: &[u8]) -> bool {
    let authorization = parts.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let account = crate::accounts::access_key(authorization).and_then(|key| state.accounts.account_of_key(key));
    let Some(throttle) = state.throttle.as_mut() else { return true };
    let Some(mut caller) = crate::throttle::caller(authorization) else { return true };
    if let Some(account) = account {
        caller.identity = account;
    }
    let changes = if operation == "ChangeResourceRecordSets" { crate::throttle::changes(body) } else { 0 };
    throttle.admit(&caller, operation, changes, std::time::Instant::now())
}

/// One record set of a Route 53 XML request or answer.
#[derive(Debug, PartialEq, Eq)]
struct RecordSet {
    name: String,
    kind: String,
    ttl: Option<String>,
    values: Vec<String>,
}

/// The text of each `<tag>…</tag>` in `xml`, in order.
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let inner = &rest[start + open.len()..];
        let Some(end) = inner.find(&close) else { break };
        found.push(&inner[..end]);
        rest = &inner[end + close.len()..];
    }
    found
}

fn record_set(xml: &str) -> Option<RecordSet> {
    let first = |tag| elements(xml, tag).first().map(|v| (*v).to_owned());
    Some(RecordSet {
        name: first("Name")?.trim_end_matches('.').to_ascii_lowercase(),
        kind: first("Type")?,
        ttl: first("TTL"),
        values: elements(xml, "Value").iter().map(|v| (*v).to_owned()).collect(),
    })
}

/// A name as IAM's `route53:ChangeResourceRecordSetsNormalizedRecordNames` compares it:
/// lowercase, without the trailing dot.
fn normalized(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Whether a change batch changes a name `denied` covers (the name itself or one below it).
fn denies(denied: &[String], body: &[u8]) -> bool {
    if denied.is_empty() {
        return false;
    }
    let text = String::from_utf8_lossy(body);
    elements(&text, "Change")
        .into_iter()
        .filter_map(record_set)
        .any(|set| denied.iter().any(|d| set.name == *d || set.name.strip_suffix(d.as_str()).is_some_and(|head| head.ends_with('.'))))
}

/// IAM's refusal of a ChangeResourceRecordSets for the zone of `parts`, as AWS words an explicit
/// deny (the caller's ARN with an account id, as AWS sends it: the layer must sanitize it).
fn denial_message(parts: &http::request::Parts) -> String {
    let zone = parts.uri.path().strip_prefix("/2013-04-01/hostedzone/").and_then(|rest| rest.split('/').next()).unwrap_or("unknown");
    format!(
        "User: arn:aws:sts::123456789012:assumed-role/operator/blockwork is not authorized to perform: route53:ChangeResourceRecordSets on resource: arn:aws:route53:::hostedzone/{zone} with an explicit deny in an identity-based policy"
    )
}

/// AWS's answer to a change batch whose DELETE does not match the record set as it is now;
/// `None` when every DELETE matches (or there is none).
async fn refused_delete(
    parts: &http::request::Parts,
    body: &[u8],
    upstream: &str,
    client: &Client<HttpConnector, Full<Bytes>>,
) -> Option<Response<Full<Bytes>>> {
    let text = String::from_utf8_lossy(body);
    let zone = parts.uri.path().strip_prefix("/2013-04-01/hostedzone/")?.split('/').next()?.to_owned();
    for change in elements(&text, "Change") {
        if elements(change, "Action").first() != Some(&"DELETE") {
            continue;
        }
        let wanted = record_set(change)?;
        let uri = format!("{upstream}/2013-04-01/hostedzone/{zone}/rrset?name={}&type={}&maxitems=1", wanted.name, wanted.kind);
        // Signed like the change itself: moto tells the service by the signature's scope.
        let mut request = Request::builder().method("GET").uri(uri);
        if let Some(authorization) = parts.headers.get(http::header::AUTHORIZATION) {
            request = request.header(http::header::AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(Bytes::new())).ok()?;
        let response = client.request(request).await.ok()?;
        // A zone that does not exist (NoSuchHostedZone): the change goes on to the emulator,
        // which answers that as AWS does.
        if !response.status().is_success() {
            return None;
        }
        let listed = response.into_body().collect().await.ok()?.to_bytes();
        let listed = String::from_utf8_lossy(&listed);
        let current = elements(&listed, "ResourceRecordSet")
            .first()
            .and_then(|set| record_set(set))
            .filter(|set| set.name == wanted.name && set.kind == wanted.kind);
        if current.as_ref() != Some(&wanted) {
            let why = if current.is_some() { "but the values provided do not match the current values" } else { "but it was not found" };
            let message = format!("[Tried to delete resource record set [name='{}.', type='{}'] {why}]", wanted.name, wanted.kind);
            let fault = Fault::Custom { status: 400, code: "InvalidChangeBatch".to_owned(), message };
            return Some(error_response(Protocol::RestXml, &fault));
        }
    }
    None
}

/// What ACM reports about one certificate over what the emulator says (epoch seconds, as in
/// ACM's JSON). Fixed when set, so that every answer after it says the same.
#[derive(Clone, Debug)]
struct CertificateFacts {
    status: Option<String>,
    /// ACM's `FailureReason` of a `FAILED` certificate.
    failure_reason: Option<String>,
    revoked_at: Option<i64>,
    not_after: Option<i64>,
    /// When the managed renewal failed.
    renewal_failed_at: Option<i64>,
}

pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// An ACM (JSON) answer with the facts [`FaultProxy::set_certificate_status`] and
/// [`FaultProxy::fail_renewal`] set: in a ListCertificates summary list and a
/// DescribeCertificate detail.
async fn with_certificate_statuses(
    response: Response<Full<Bytes>>,
    statuses: &HashMap<String, CertificateFacts>,
    issued: &HashMap<String, crate::issuance::Shared>,
) -> Response<Full<Bytes>> {
    let (mut parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, Full::new(bytes));
    };
    let rewrite = |certificate: &mut serde_json::Value, detail: bool| {
        let arn = certificate.get("CertificateArn").and_then(serde_json::Value::as_str).map(str::to_owned);
        if let Some(body) = arn.as_ref().and_then(|arn| issued.get(arn)) {
            crate::issuance::rewrite(certificate, body, detail);
        }
        let Some(facts) = arn.and_then(|arn| statuses.get(&arn)) else { return };
        if let Some(reason) = &facts.failure_reason {
            certificate["FailureReason"] = serde_json::json!(reason);
        }
        if let Some(status) = &facts.status {
            certificate["Status"] = serde_json::json!(status);
        }
        if let Some(revoked_at) = facts.revoked_at {
            certificate["RevokedAt"] = serde_json::json!(revoked_at);
        }
        if let Some(not_after) = facts.not_after {
            certificate["NotAfter"] = serde_json::json!(not_after);
        }
        if let Some(failed_at) = facts.renewal_failed_at {
            certificate["RenewalEligibility"] = serde_json::json!("ELIGIBLE");
            if detail {
                let validations = certificate.get("DomainValidationOptions").cloned().unwrap_or_else(|| serde_json::json!([]));
                certificate["RenewalSummary"] = serde_json::json!({
                    "RenewalStatus": "FAILED",
                    "RenewalStatusReason": "CAA_ERROR",
                    "DomainValidationOptions": validations,
                    "UpdatedAt": failed_at,
                });
            }
        }
    };
    if let Some(list) = json.get_mut("CertificateSummaryList").and_then(serde_json::Value::as_array_mut) {
        list.iter_mut().for_each(|summary| rewrite(summary, false));
    }
    if let Some(certificate) = json.get_mut("Certificate") {
        rewrite(certificate, true);
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Full::new(Bytes::from(json.to_string())))
}

/// The `CertificateArn` of an ACM (JSON) request.
fn certificate_arn(body: &[u8]) -> Option<String> {
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    request["CertificateArn"].as_str().map(str::to_owned)
}

/// The `CertificateAuthorityArn` of a RequestCertificate.
fn private_ca(body: &[u8]) -> Option<String> {
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    request["CertificateAuthorityArn"].as_str().map(str::to_owned)
}

/// After moto answered a RequestCertificate from a private CA: the CA signs the certificate, as
/// ACM has it do, if it is `ACTIVE`; otherwise the certificate is `FAILED` with ACM's reason.
async fn issue_private(
    response: Response<Full<Bytes>>,
    request: &[u8],
    state: &Mutex<State>,
    upstream: &str,
    client: &Upstream,
) -> Response<Full<Bytes>> {
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let arn = serde_json::from_slice::<serde_json::Value>(&bytes).ok().and_then(|v| v["CertificateArn"].as_str().map(str::to_owned));
    let (Some(arn), Some(authority)) = (arn, private_ca(request)) else { return Response::from_parts(parts, Full::new(bytes)) };
    let region = arn.split(':').nth(3).unwrap_or("us-east-1").to_owned();
    let described = crate::issuance::call(
        upstream,
        client,
        "acm-pca",
        &region,
        "ACMPrivateCA.DescribeCertificateAuthority",
        serde_json::json!({"CertificateAuthorityArn": authority}),
    )
    .await;
    let failure = match described {
        Ok(described) if described["CertificateAuthority"]["Status"] == "ACTIVE" => None,
        Ok(_) => Some("PCA_INVALID_STATE"),
        Err(_) => Some("PCA_RESOURCE_NOT_FOUND"),
    };
    let issued = match failure {
        None => crate::issuance::issue(upstream, client, &arn, false)
            .await
            .map_err(|e| tracing::warn!(%e, "the private CA did not sign the certificate"))
            .ok(),
        Some(_) => None,
    };
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    match (failure, issued) {
        (None, Some(issued)) => {
            state.issued.insert(arn, Arc::new(issued));
        }
        (reason, _) => {
            let facts = CertificateFacts {
                status: Some("FAILED".to_owned()),
                failure_reason: Some(reason.unwrap_or("PCA_REQUEST_FAILED").to_owned()),
                revoked_at: None,
                not_after: None,
                renewal_failed_at: None,
            };
            state.certificate_statuses.insert(arn, facts);
        }
    }
    Response::from_parts(parts, Full::new(bytes))
}

/// A status in an answer and what a "pending" fault turns it into.
type Rewrite = (&'static str, &'static str);
const PENDING_CHANGE: Rewrite = ("<Status>INSYNC</Status>", "<Status>PENDING</Status>");
const PENDING_CERTIFICATE: Rewrite =
    ("<CertificateStatus>issued</CertificateStatus>", "<CertificateStatus>pending-validation</CertificateStatus>");
/// In ACM's JSON, `"ISSUED"` is only ever the certificate's status (validation and renewal
/// statuses have other values).
const PENDING_VALIDATION: Rewrite = ("\"ISSUED\"", "\"PENDING_VALIDATION\"");

async fn forward(
    parts: http::request::Parts,
    body: Bytes,
    upstream: &str,
    client: &Upstream,
    rewrite: Option<Rewrite>,
) -> Response<Full<Bytes>> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut builder = Request::builder().method(parts.method).uri(format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        builder = builder.header(name, value);
    }
    let request = match builder.body(Full::new(body)) {
        Ok(request) => request,
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("fault proxy: {e}")),
    };
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("fault proxy: upstream unreachable: {e}")),
    };
    let (mut parts, body) = response.into_parts();
    let mut body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("fault proxy: reading the response: {e}")),
    };
    if let Some((from, to)) = rewrite {
        let text = String::from_utf8_lossy(&body).replace(from, to);
        body = Bytes::from(text);
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    Response::from_parts(parts, Full::new(body))
}

/// The protocol and the AWS operation name of a request.
fn identify(parts: &http::request::Parts, body: &[u8]) -> (Protocol, String) {
    if let Some(target) = parts.headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        return (Protocol::Json, target.rsplit('.').next().unwrap_or(target).to_owned());
    }
    let path = parts.uri.path();
    let method = parts.method.as_str();
    if let Some(rest) = path.strip_prefix("/2013-04-01/") {
        return (Protocol::RestXml, route53_operation(method, rest));
    }
    if let Some(rest) = path.strip_prefix("/2020-05-31/") {
        return (Protocol::RestXml, cloudfront_operation(method, rest, parts.uri.query().unwrap_or_default()));
    }
    let form = String::from_utf8_lossy(body);
    let action = form.split('&').find_map(|pair| pair.strip_prefix("Action=")).map(str::to_owned);
    let action = action.or_else(|| parts.uri.query().and_then(|q| q.split('&').find_map(|p| p.strip_prefix("Action=")).map(str::to_owned)));
    (Protocol::Query, action.unwrap_or_else(|| format!("{method} {path}")))
}

fn route53_operation(method: &str, rest: &str) -> String {
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let name = match (method, segments.as_slice()) {
        ("POST", ["hostedzone", _, "rrset"]) => "ChangeResourceRecordSets",
        ("GET", ["hostedzone", _, "rrset"]) => "ListResourceRecordSets",
        ("GET", ["change", _]) => "GetChange",
        ("POST", ["hostedzone"]) => "CreateHostedZone",
        ("GET", ["hostedzone"]) => "ListHostedZones",
        ("GET", ["hostedzone", _]) => "GetHostedZone",
        ("DELETE", ["hostedzone", _]) => "DeleteHostedZone",
        ("GET", ["hostedzonesbyname"]) => "ListHostedZonesByName",
        _ => return format!("Route53 {method} {rest}"),
    };
    name.to_owned()
}

fn cloudfront_operation(method: &str, rest: &str, query: &str) -> String {
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let name = match (method, segments.as_slice()) {
        // One path for both: the query's `Operation` tells tagging from untagging.
        ("POST", ["tagging"]) if query.split('&').any(|pair| pair == "Operation=Tag") => "TagResource",
        ("POST", ["tagging"]) if query.split('&').any(|pair| pair == "Operation=Untag") => "UntagResource",
        ("GET", ["tagging"]) => "ListTagsForResource",
        ("POST", ["distribution-tenant"]) => "CreateDistributionTenant",
        ("GET", ["distribution-tenant", _]) => "GetDistributionTenant",
        ("PUT", ["distribution-tenant", _]) => "UpdateDistributionTenant",
        ("DELETE", ["distribution-tenant", _]) => "DeleteDistributionTenant",
        ("POST", ["distribution-tenants"]) => "ListDistributionTenants",
        ("POST", ["connection-group"]) => "CreateConnectionGroup",
        ("GET", ["connection-group", _]) => "GetConnectionGroup",
        ("PUT", ["connection-group", _]) => "UpdateConnectionGroup",
        ("DELETE", ["connection-group", _]) => "DeleteConnectionGroup",
        ("POST", ["connection-groups"]) => "ListConnectionGroups",
        ("GET", ["managed-certificate", _]) => "GetManagedCertificateDetails",
        ("GET", ["distribution", _]) => "GetDistribution",
        ("GET", ["distribution", _, "config"]) => "GetDistributionConfig",
        _ => return format!("CloudFront {method} {rest}"),
    };
    name.to_owned()
}

fn error_response(protocol: Protocol, fault: &Fault) -> Response<Full<Bytes>> {
    let (status, json_code, xml_code, message) = match fault {
        Fault::Throttling => (400, "ThrottlingException", "Throttling", "Rate exceeded"),
        Fault::ServerError(status) => {
            let code = if *status == 503 { "ServiceUnavailable" } else { "InternalFailure" };
            (*status, code, code, "We encountered an internal error. Please try again.")
        }
        Fault::AccessDenied => (
            if protocol == Protocol::Json { 400 } else { 403 },
            "AccessDeniedException",
            "AccessDenied",
            "User: arn:aws:iam::123456789012:user/operator is not authorized to perform this action",
        ),
        Fault::ResourceInUse => (400, "ResourceInUseException", "ResourceInUse", "The certificate is in use by another AWS resource"),
        Fault::PriorRequestNotComplete => (
            400,
            "PriorRequestNotComplete",
            "PriorRequestNotComplete",
            "The request was rejected because Route 53 was still processing a prior request.",
        ),
        Fault::Custom { status, code, message } => (*status, code.as_str(), code.as_str(), message.as_str()),
        Fault::Latency(_)
        | Fault::SlowResponse(_)
        | Fault::PendingChange
        | Fault::PendingCertificate
        | Fault::PendingValidation
        | Fault::Timeout
        | Fault::ConnectionReset => (500, "InternalFailure", "InternalFailure", "fault proxy: not an error fault"),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let request_id = uuid::Uuid::new_v4().to_string();
    let (content_type, body) = match protocol {
        Protocol::Json => ("application/x-amz-json-1.1", serde_json::json!({"__type": json_code, "message": message}).to_string()),
        Protocol::RestXml | Protocol::Query => (
            "text/xml",
            format!(
                "<?xml version=\"1.0\"?>\n<ErrorResponse><Error><Type>{}</Type><Code>{xml_code}</Code><Message>{}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>",
                if status.is_server_error() { "Receiver" } else { "Sender" },
                escape_xml(message)
            ),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    if let Ok(value) = http::HeaderValue::from_str(&request_id) {
        headers.insert("x-amzn-requestid", value);
    }
    response
}

fn escape_xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(message.to_owned())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_random_fault_is_dealt_once_per_round() {
        let faults = RandomFaults::transient(1.0, 12447780977098908883, Duration::from_secs(2));
        let mut kinds: Vec<Option<String>> = faults.faults.iter().map(|f| Some(f.label())).collect();
        kinds.sort();
        let mut dice = Dice::new(faults.clone());
        for round in 0..3 {
            let mut dealt: Vec<Option<String>> = (0..kinds.len()).map(|_| dice.roll().map(|f| f.label())).collect();
            dealt.sort();
            assert_eq!(dealt, kinds, "round {round}");
        }
    }
}
