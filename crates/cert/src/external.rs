//! The Cert operator's `ExternalResource`: ACM and Route53 calls, and on Kubernetes only the
//! ConfigMap that publishes the ARN.
//!
//! - `verify` finds the certificate: by the ARN in status; else the one a create whose status
//!   write was lost made (the runtime's create-pending marker names that request: found by the
//!   owner-UID and request-token tags, in a current listing when missing it would lose it); else
//!   one of ours for the same names (adoption after the status was lost). It reads the
//!   certificate **list-first**: from the process's certificate listing (one ListCertificates
//!   call per sweep for up to 1,000 certificates), and with DescribeCertificate only for what
//!   the listing lacks ([`decisions::description_needed`]). It lists the DNS validation records
//!   and maps ACM's status to Ready, in progress or a terminal failure. A Ready certificate costs
//!   no AWS call: the listing's sweeps wake the Cert when its certificate changes (`crate::wake`).
//!   `verify` writes nothing: what it finds needed it returns as upkeep ([`CertUpkeep`]), which
//!   the runtime gates by the access permissions and the plan and hands to `maintain`: the
//!   validation records ACM waits for, written with the zone's next Route 53 batch in the
//!   background; once the certificate is issued, the deletion of the ones it replaced; and as
//!   the Cert is released, the removal of its published ConfigMap.
//! - `create` requests the certificate with an idempotency token and owner tags, and describes
//!   it once for its validation records.
//! - `delete`, for a recreate (changed names), sets the old certificate aside (make before
//!   break); for the Cert's deletion it deletes every certificate the Cert holds if
//!   `deleteOnRemoval` — only ones whose owner tag names the Cert, never one in use — and then
//!   only the validation records this operator created (one Route 53 batch per zone).
//! - `on_success` publishes the ARN in the ConfigMap `<name>-certificate` ([`crate::publish`]),
//!   which `maintain` (as the Cert is released) and `delete` remove when the Cert goes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::acm::{Certificate, CertificateRequest, Freshness};
use blockwork_aws::pca::Pca;
use blockwork_aws::route53::{Deletion, Record, Records, Written};
use blockwork_aws::{AwsError, ErrorClass};
use blockwork_runtime::Existence;

use blockwork_runtime::{
    Conditions, DeleteOutcome, ExternalError, ExternalResource, MutateOutcome, Observed, Phase, Publisher, Purpose, Report, Request,
    RequeuePolicy, Timing, Upkeep, VerifyOutcome, WithConditions,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use tracing::warn;

use blockwork_identity::placement::{AWS_IDENTITY_CHANGED, Placement, placement};

use crate::account::{Accounts, CertAccount};
use crate::admission;
use crate::api::{Cert, CertObservation, CertState, ValidationRecordStatus};
use crate::decisions::{self, Assessment, Desired};
use crate::metrics::CertMetrics;
use crate::zones::normalize;

/// The Cert's intervals: seed 000's, but a minute between looks while ACM validates (a Cert
/// waiting for issuance is woken by the listing's sweeps anyway, see `crate::wake`), and hourly
/// once Ready (a Ready certificate costs no AWS call).
pub fn default_timing() -> Timing {
    let secs = Duration::from_secs;
    Timing { verifying: RequeuePolicy::exponential(secs(60), secs(300)), ..Timing::default() }
}

/// TTL of the validation records: ACM only reads them at validation and renewal.
pub const VALIDATION_RECORD_TTL: i64 = 300;

/// The Cert operator's manager, over the process's AWS layer: each Cert acts in its namespace's
/// account ([`crate::account`]).
pub struct CertManager {
    accounts: Arc<Accounts>,
    records: Arc<Records>,
    validation_timeout: Duration,
    pub(crate) metrics: Arc<CertMetrics>,
    /// Deletes the published ConfigMap when the Cert goes (see [`crate::publish`]); reads and
    /// writes exported Secrets ([`crate::export`]).
    pub(crate) client: Client,
    /// Tells what a Cert released while held by a mapping change leaves in AWS.
    events: Publisher,
    /// Certs may export into Secrets (`--export-secrets`).
    pub(crate) export_secrets: bool,
    /// Private CAs: the ones Certs may name, and their states (read as each namespace's principal).
    authorities: Vec<String>,
    pca: Pca,
}

/// What the installation lets Certs issue besides public certificates.
pub struct Issuing {
    /// Certs may export into Secrets (`--export-secrets`).
    pub export_secrets: bool,
    /// The private CAs Certs may name (`--certificate-authorities`).
    pub authorities: Vec<String>,
    pub pca: Pca,
}

impl CertManager {
    pub fn new(
        accounts: Arc<Accounts>,
        records: Arc<Records>,
        validation_timeout: Duration,
        metrics: Arc<CertMetrics>,
        client: Client,
        issuing: Issuing,
    ) -> Self {
        let Issuing { export_secrets, authorities, pca } = issuing;
        let events = Publisher::new(client.clone(), format!("blockwork-{}", crate::CONTROLLER));
        Self { accounts, records, validation_timeout, metrics, client, events, export_secrets, authorities, pca }
    }

    /// Whether a private certificate can be requested from `authority` now, as the namespace's
    /// account: a CA this installation issues from, in ACM's region, `ACTIVE` as the namespace's
    /// principal sees it. Otherwise a terminal error saying why (nothing is requested: ACM would
    /// make a failed certificate).
    async fn check_authority(&self, account: &CertAccount, authority: &str) -> Result<(), ExternalError> {
        let terminal = |refusal: crate::authority::Refusal| ExternalError::terminal(refusal.reason, refusal.message);
        crate::authority::check(authority, &self.authorities, account.acm.region().await.as_deref()).map_err(terminal)?;
        match self.pca.describe(account.principal(), authority).await {
            Ok(described) => crate::authority::state_problem(&described).map_or(Ok(()), |refusal| Err(terminal(refusal))),
            Err(error) if error.class == ErrorClass::NotFound => Err(terminal(crate::authority::not_found())),
            Err(error) => Err(ExternalError::from(&error)),
        }
    }

    /// The accounts of this controller's Certs, whose listings [`crate::wake`] follows.
    pub fn accounts(&self) -> &Arc<Accounts> {
        &self.accounts
    }

    /// The Cert's account, resolved before any AWS call; the status names its identity. When
    /// the namespace's mapping changed to another account than the one holding the Cert's
    /// certificates, the Cert is held (`AwsIdentityChanged`) and the status keeps naming the
    /// identity they were made with.
    pub(crate) async fn account(&self, object: &Cert, observation: &mut CertObservation) -> Result<CertAccount, ExternalError> {
        let account = self.accounts.of(&object.namespace().unwrap_or_default()).await?;
        let now = account.grant.identity.to_string();
        let before = observation.aws_identity.clone();
        let held: Vec<&str> =
            observation.certificate_arn.iter().chain(&observation.previous_certificate_arns).map(String::as_str).collect();
        let same = before.as_deref() == Some(now.as_str());
        let current = match (held.is_empty(), same && account.grant.principal.role().is_none()) {
            // Nothing held, or the operator's own identity as before: nothing to compare.
            (true, _) | (_, true) => None,
            _ => self.accounts.account_id(&account.grant.principal).await,
        };
        match placement(held.iter().copied(), current.as_deref()) {
            Placement::Elsewhere => return Err(moved(before.as_deref(), &account.grant.describe())),
            Placement::Unknown if !same => {
                return Err(ExternalError::retryable(
                    "AwsIdentityAccountUnknown",
                    format!(
                        "the namespace now acts as {}, whose account could not be told yet (STS GetCallerIdentity); retried",
                        account.grant.describe()
                    ),
                ));
            }
            Placement::Here | Placement::Unknown => {}
        }
        observation.aws_identity = Some(now);
        Ok(account)
    }

    /// Queues the validation records with their zones' next background batches.
    async fn write_records(&self, request: &Request<'_, Cert>, by_zone: BTreeMap<String, Vec<Record>>) -> Result<(), ExternalError> {
        let account = self.accounts.of(&request.object.namespace().unwrap_or_default()).await?;
        for (zone_id, records) in by_zone {
            let zone = account.zone(&zone_id).map_err(ExternalError::from)?;
            self.records.upsert_in_background(crate::CONTROLLER, &zone, records);
        }
        Ok(())
    }

    /// The certificate of the ARN in status, list-first: its listed summary when that tells all
    /// this look needs, else its description too. `None` when ACM no longer has it.
    async fn read(
        &self,
        account: &CertAccount,
        arn: &str,
        request: &Request<'_, Cert>,
        desired: &Desired,
        observation: &CertObservation,
    ) -> Result<Option<Found>, AwsError> {
        let described = match account.acm.summary(arn, Freshness::Listed).await? {
            Some(summary) => {
                let known = decisions::records_known(desired, &observation.validation_records);
                match decisions::description_needed(&summary, request.spec_change.changed, known, jiff::Timestamp::now()) {
                    None => return Ok(Some(Found { certificate: decisions::listed(&summary), described: false })),
                    Some(_) => account.acm.describe_recent(account.principal(), arn).await,
                }
            }
            // Not listed yet (requested since the last sweep) or gone: ask.
            None => account.acm.describe(account.principal(), arn).await,
        };
        match described {
            Ok(certificate) => Ok(Some(Found::described(certificate))),
            Err(error) if error.class == ErrorClass::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Feeds the state and expiry gauges after each call that may change them.
    fn report(&self, request: &Request<'_, Cert>, observation: &CertObservation) {
        let object = request.object;
        let uid = object.uid().unwrap_or_default();
        let now = jiff::Timestamp::now();
        self.report_export(object, observation, request.phase == Phase::Deleting, now);
        if request.phase == Phase::Deleting {
            self.metrics.forget_certificate(&uid);
            return;
        }
        let days = observation.expiration_date.as_ref().map(|t| t.0.duration_since(now).as_secs_f64() / 86_400.0);
        self.metrics.certificate(
            &uid,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
            observation.state.unwrap_or_default(),
            days,
        );
    }

    fn desired(&self, account: &CertAccount, object: &Cert, observation: &mut CertObservation) -> Result<Desired, ExternalError> {
        // The webhook's rules, for objects stored without it (webhook off or failing open),
        // before ACM is asked; the zones are those granted to the namespace.
        let desired = admission::admissible(&object.spec, &account.zones)
            .map_err(|violations| ExternalError::terminal("InvalidSpec", violations.join("; ")))?;
        observation.domain_name = Some(desired.domain.clone());
        observation.resolved_zone = Some(desired.zone.to_ref());
        Ok(desired)
    }

    /// What the create-pending marker names, if there is one: a create for it may have requested
    /// a certificate whose ARN never reached the status (the status write after it was refused,
    /// or the process died). The runtime calls `create` only under a marker written for the
    /// current spec, so the marker's spec and time identify that request exactly.
    fn marked(&self, account: &CertAccount, request: &Request<'_, Cert>) -> Option<Marked> {
        let marker = request.create_pending?;
        let Some(desired) = decisions::marked_desired(marker.spec.as_deref(), &request.object.spec, &account.zones) else {
            warn!(cert = %request.object.name_any(), "the create-pending marker's spec no longer resolves to a configured zone; its request is not looked for");
            return None;
        };
        let at = marker.since.0;
        Some(Marked { token: decisions::acm_token(request.idempotency_token, at.as_second(), &desired), desired, at })
    }

    /// The certificate of this object: by the ARN in status; else the one the create-pending
    /// marker's request made, if any; else, without a marker, one of ours for exactly these names
    /// (an adoption after the status was lost, e.g. by a restore).
    async fn find(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        desired: &Desired,
        observation: &CertObservation,
    ) -> Result<Option<Found>, AwsError> {
        if let Some(arn) = &observation.certificate_arn
            && let Some(found) = self.read(account, arn, request, desired, observation).await?
        {
            return Ok(Some(found));
        }
        let uid = request.object.uid().unwrap_or_default();
        if let Some(marked) = self.marked(account, request) {
            let freshness = decisions::marked_lookup(false, marked.desired != *desired, marked.at, jiff::Timestamp::now());
            let listing = account.acm.list_certificates(freshness).await?;
            return Ok(self.find_requested(account, &listing, &marked, &uid).await?.map(Found::described));
        }
        let listing = account.acm.list_certificates(Freshness::Recent).await?;
        for (arn, _) in self.owned_candidates(account, &listing, &desired.domain, &uid).await? {
            if observation.previous_certificate_arns.contains(&arn) {
                continue;
            }
            match account.acm.describe(account.principal(), &arn).await {
                Ok(certificate) if decisions::certificate_differs(&certificate, desired).is_none() => {
                    return Ok(Some(Found::described(certificate)));
                }
                Ok(_) => {}
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(None)
    }

    /// The certificate of the marker's request: ours (owner UID) and requested with its token.
    async fn find_requested(
        &self,
        account: &CertAccount,
        listing: &[(String, String)],
        marked: &Marked,
        uid: &str,
    ) -> Result<Option<Certificate>, AwsError> {
        for (arn, tags) in self.owned_candidates(account, listing, &marked.desired.domain, uid).await? {
            if decisions::tag(&tags, decisions::TAG_TOKEN) != Some(marked.token.as_str()) {
                continue;
            }
            match account.acm.describe(account.principal(), &arn).await {
                Ok(certificate) => return Ok(Some(certificate)),
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(None)
    }

    /// The listed certificates for `domain` whose tags name this object as owner, with the tags.
    async fn owned_candidates(
        &self,
        account: &CertAccount,
        listing: &[(String, String)],
        domain: &str,
        uid: &str,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, AwsError> {
        let mut owned = Vec::new();
        for (_, arn) in listing.iter().filter(|(d, _)| normalize(d) == domain) {
            match account.acm.list_tags(account.principal(), arn).await {
                Ok(tags) if decisions::owned_by(&tags, uid) => owned.push((arn.clone(), tags)),
                Ok(_) => {}
                // Deleted since the listing.
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(owned)
    }

    /// Where the validation records stand: those an earlier look listed as ours and pending
    /// that are written now stop being pending; those not written (nor queued) yet are returned,
    /// by zone, for the zone's next Route 53 batch (the upkeep [`CertUpkeep::WriteRecords`]: in the
    /// background, the Cert is woken when they are); then the records ACM asks for that are not
    /// listed yet are listed (`described`: the certificate's description, when this look read
    /// one), each with whether it is ours (it did not exist with this value). Listed now, ours are
    /// written at a later look, after the status records them: which records are ours is in the
    /// status before any is written, so a status write lost after a write never makes ours look
    /// like someone else's (and never deleted). `complete`: every record ACM asks for is written.
    async fn record_progress(
        &self,
        account: &CertAccount,
        described: Option<&Certificate>,
        desired: &Desired,
        observation: &mut CertObservation,
    ) -> Result<RecordProgress, ExternalError> {
        let mut unwritten: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        let mut failure = None;
        for record in observation.validation_records.iter_mut().filter(|r| r.pending) {
            match self.records.written(&record.zone_id, &record.name) {
                Some(Written::Done(change_id)) => {
                    record.pending = false;
                    record.change_id = Some(change_id).filter(|id| !id.is_empty());
                }
                Some(Written::Queued) => {}
                Some(Written::Failed(error)) => {
                    unwritten.entry(record.zone_id.clone()).or_default().push(cname(record));
                    if error.class == ErrorClass::Terminal {
                        // Reported below, once: the retry after it finds nothing written and writes
                        // again, so a fixed permission heals the Cert without a restart.
                        self.records.forget_failure(&record.zone_id, &record.name);
                    }
                    failure.get_or_insert(error);
                }
                None => unwritten.entry(record.zone_id.clone()).or_default().push(cname(record)),
            }
        }
        if let Some(error) = failure.filter(|e| e.class == ErrorClass::Terminal) {
            return Err(ExternalError::from(&error));
        }
        let complete = match described {
            Some(certificate) => self.list_records(account, certificate, desired, observation).await?,
            None => decisions::records_known(desired, &observation.validation_records),
        };
        let complete = complete && observation.validation_records.iter().all(|r| !r.pending);
        let write = (!unwritten.is_empty()).then_some(Upkeep { purpose: Purpose::FinishCreate, work: CertUpkeep::WriteRecords(unwritten) });
        Ok(RecordProgress { complete, write })
    }

    /// Adds the records ACM asks for that the status does not list yet, as pending and owned
    /// unless they already exist with ACM's value (another certificate for the same name shares
    /// them: used, never deleted). True when ACM has published every record.
    async fn list_records(
        &self,
        account: &CertAccount,
        certificate: &Certificate,
        desired: &Desired,
        observation: &mut CertObservation,
    ) -> Result<bool, ExternalError> {
        let plan = decisions::plan_records(certificate, desired).map_err(|e| ExternalError::terminal("InvalidSpec", e.to_string()))?;
        let mut unlisted: BTreeMap<String, Vec<decisions::PlannedRecord>> = BTreeMap::new();
        for planned in plan.records() {
            let listed = observation.validation_records.iter().any(|r| {
                r.zone_id == planned.zone_id
                    && normalize(&r.name) == normalize(&planned.record.name)
                    && normalize(&r.value) == normalize(&planned.record.value)
            });
            if !listed {
                unlisted.entry(planned.zone_id.clone()).or_default().push(planned);
            }
        }
        for (zone_id, planned) in unlisted {
            let names: Vec<String> = planned.iter().map(|p| p.record.name.clone()).collect();
            let zone = account.zone(&zone_id).map_err(ExternalError::from)?;
            let existing = self.records.lookup(crate::CONTROLLER, &zone, &names).await.map_err(ExternalError::from)?;
            for (planned, existing) in planned.into_iter().zip(existing) {
                let owned = existing.map(|record| normalize(&record.value)) != Some(normalize(&planned.record.value));
                observation.validation_records.push(ValidationRecordStatus {
                    zone_id: planned.zone_id,
                    name: planned.record.name,
                    value: planned.record.value,
                    owned,
                    pending: owned,
                    change_id: None,
                });
            }
        }
        Ok(plan.complete)
    }

    async fn observe(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<Observed<CertUpkeep>, ExternalError> {
        let object = request.object;
        if request.phase == Phase::Deleting {
            let outcome = match object.spec.delete_on_removal {
                // The certificates (and their records) stay whatever AWS says: nothing to look up.
                false => VerifyOutcome::Missing,
                true => match self.account(object, observation).await {
                    Ok(account) => self.observe_held(&account, request, observation).await.map_err(|e| ExternalError::from(&e))?,
                    // Held by a mapping change: released without touching either account.
                    Err(error) if error.reason == AWS_IDENTITY_CHANGED => {
                        self.release_held(request, observation).await;
                        VerifyOutcome::Missing
                    }
                    Err(error) => return Err(error),
                },
            };
            // Nothing left to delete in AWS: the runtime releases the object next, and with it
            // the published ConfigMap goes (the owner reference covers clusters with a garbage
            // collector, and Certs orphaned by their deletion policy).
            let unpublish =
                (outcome == VerifyOutcome::Missing).then_some(Upkeep { purpose: Purpose::Release, work: CertUpkeep::Unpublish });
            return Ok(Observed::from(outcome).with_upkeep(unpublish));
        }
        let account = &self.account(object, observation).await?;
        let desired = self.desired(account, object, observation)?;
        let Some(found) = self.find(account, request, &desired, observation).await.map_err(|e| ExternalError::from(&e))? else {
            observation.certificate_arn = None;
            observation.cert_ready = false;
            observation.expiration_date = None;
            observation.state = Some(CertState::Pending);
            return Ok(VerifyOutcome::Missing.into());
        };
        let certificate = found.certificate;
        observation.certificate_arn = Some(certificate.arn.clone());
        // A listed summary names the primary domain only; the alternative names are compared
        // whenever the spec changed, which is when they can differ (then it is described).
        let difference = match found.described {
            true => decisions::certificate_differs(&certificate, &desired),
            false => decisions::primary_differs(&certificate.domain, &desired),
        };
        if let Some(difference) = difference {
            return Ok(VerifyOutcome::RecreateRequired(difference).into());
        }
        let described = found.described.then_some(&certificate);
        observation.expiration_date = certificate.not_after.map(Time);
        observation.renewal_status = certificate.renewal_status.clone();
        match decisions::assess(&certificate, jiff::Timestamp::now(), self.validation_timeout) {
            Assessment::Ready => {
                observation.state = Some(CertState::Ready);
                observation.cert_ready = true;
                let mut upkeep = Vec::new();
                // A renewal needs the same records: put back any we have not written. So does a
                // certificate issued before the background write of the records an earlier look
                // listed (ACM reuses an account's validation record for the same name, and an
                // emulator issues by time) — without them it could not renew.
                let renewing = certificate.renewal_status.as_deref() == Some("PENDING_VALIDATION");
                let unwritten = observation.validation_records.iter().any(|r| r.pending);
                if (renewing || unwritten) && request.policies.access.create {
                    upkeep.extend(self.record_progress(account, described.filter(|_| renewing), &desired, observation).await?.write);
                }
                if let Some(message) = decisions::renewal_message(certificate.renewal_status.as_deref()) {
                    warn!(cert = %object.name_any(), namespace = ?object.namespace(), "{message}");
                }
                let mut conditions = Conditions::default();
                upkeep.extend(self.observe_export(request, &certificate, observation, &mut conditions).await?);
                if !observation.previous_certificate_arns.is_empty() {
                    // Which records the current certificate still needs is only described.
                    let current = match described {
                        Some(certificate) => Ok(certificate.clone()),
                        None => account.acm.describe_recent(account.principal(), &certificate.arn).await,
                    };
                    match current {
                        Ok(current) => {
                            upkeep.push(Upkeep { purpose: Purpose::FinishRecreate, work: CertUpkeep::SettlePrevious(Box::new(current)) })
                        }
                        Err(error) => warn!(cert = %object.name_any(), %error, "the replaced certificates are settled at the next look"),
                    }
                }
                Ok(Observed { conditions, ..Observed::from(VerifyOutcome::Ready).with_upkeep(upkeep) })
            }
            Assessment::Validating => {
                observation.cert_ready = false;
                if desired.authority.is_some() {
                    observation.state = Some(CertState::Validated);
                    account.acm.await_issue(&certificate.arn);
                    return Ok(VerifyOutcome::InProgress("waiting for the private CA to issue the certificate".to_owned()).into());
                }
                if observation.state != Some(CertState::Validated) {
                    observation.state = Some(CertState::Created);
                }
                if !request.policies.access.create {
                    // Read-only objects observe; the records are part of creating.
                    return Ok(VerifyOutcome::InProgress(
                        "waiting for ACM to validate; access-permissions do not allow writing the validation records".to_owned(),
                    )
                    .into());
                }
                account.acm.await_issue(&certificate.arn);
                let progress = self.record_progress(account, described, &desired, observation).await?;
                let outcome = if progress.complete {
                    observation.state = Some(CertState::Validated);
                    VerifyOutcome::InProgress(format!("the validation records are in place; waiting for ACM to issue {}", desired.domain))
                } else {
                    VerifyOutcome::InProgress("writing the validation records ACM asks for".to_owned())
                };
                Ok(Observed::from(outcome).with_upkeep(progress.write))
            }
            Assessment::Failed { reason, message } => {
                observation.cert_ready = false;
                Err(ExternalError::terminal(reason, message))
            }
        }
    }

    /// A Cert being deleted while held by a mapping change: released without touching either
    /// account; a Warning event names what stays in the old one (accounts masked).
    async fn release_held(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) {
        let certificates: Vec<String> = observation
            .certificate_arn
            .iter()
            .chain(&observation.previous_certificate_arns)
            .map(|arn| blockwork_aws::mask_accounts(arn))
            .collect();
        let records = observation.validation_records.iter().filter(|r| r.owned).count();
        let before = observation.aws_identity.as_deref().unwrap_or("it acted as before");
        let note = format!(
            "released without deleting: its namespace acts in another account now; {} and {records} validation record(s) stay in the account of AwsIdentity {before}: delete them there, or map the namespace back and delete the Cert again",
            certificates.join(", ")
        );
        self.events.publish(&request.object.object_ref(&()), EventType::Warning, AWS_IDENTITY_CHANGED, "Release", &note).await;
        warn!(cert = %request.object.name_any(), "{note}");
        observation.certificate_arn = None;
        observation.previous_certificate_arns.clear();
        observation.validation_records.clear();
    }

    /// A Cert with deleteOnRemoval being deleted: everything it holds must go before it is
    /// released — its certificate, the ones it replaced, and the one the create-pending marker's
    /// request may have made, looked for in a current listing (a cached one could miss a
    /// certificate requested seconds ago, and the Cert would be released with it).
    async fn observe_held(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        observation: &mut CertObservation,
    ) -> Result<VerifyOutcome, AwsError> {
        if let Some(marked) = self.marked(account, request) {
            let uid = request.object.uid().unwrap_or_default();
            let listing = account.acm.list_certificates(Freshness::Current).await?;
            if let Some(found) = self.find_requested(account, &listing, &marked, &uid).await? {
                hold(observation, found.arn);
            }
        }
        let held = observation.certificate_arn.is_some() || !observation.previous_certificate_arns.is_empty();
        if held || observation.validation_records.iter().any(|r| r.owned) {
            return Ok(VerifyOutcome::InProgress("deleting the certificates and validation records of this Cert".to_owned()));
        }
        Ok(VerifyOutcome::Missing)
    }

    async fn request(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<(), ExternalError> {
        let object = request.object;
        let account = &self.account(object, observation).await?;
        let desired = self.desired(account, object, observation)?;
        // The runtime creates only under a marker written for this spec; its time is part of
        // the token, so every attempt of this create returns the same certificate.
        let Some(marker) = request.create_pending else {
            return Err(ExternalError::retryable("NotMarked", "no create-pending marker; the next reconcile writes one"));
        };
        if object.spec.export.is_some() && !self.export_secrets {
            // No certificate is requested (an exportable one is charged) that could not be exported.
            return Err(ExternalError::terminal("ExportNotEnabled", crate::export::look::not_enabled_message()));
        }
        if let Some(authority) = &desired.authority {
            self.check_authority(account, authority).await?;
        }
        let token = decisions::acm_token(request.idempotency_token, marker.since.0.as_second(), &desired);
        let uid = object.uid().unwrap_or_default();
        let tags = decisions::owner_tags(&object.namespace().unwrap_or_default(), &object.name_any(), &uid, &token);
        let certificate = CertificateRequest {
            domain: desired.domain.clone(),
            sans: desired.sans.clone(),
            token,
            tags,
            exportable: desired.exportable,
            authority: desired.authority.clone(),
        };
        let arn = account.acm.request(account.principal(), &certificate).await.map_err(|e| ExternalError::from(&e))?;
        observation.certificate_arn = Some(arn.clone());
        observation.state = Some(CertState::Created);
        observation.cert_ready = false;
        account.acm.await_issue(&arn);
        if desired.authority.is_some() {
            // A private certificate is signed by its CA: no validation record.
            return Ok(());
        }
        // ACM usually publishes the validation records within seconds: list them now (with
        // whether each is ours), so that the next look writes them. If it has not yet, a later
        // look lists them.
        match account.acm.describe(account.principal(), &arn).await {
            Ok(certificate) => {
                if let Err(error) = self.list_records(account, &certificate, &desired, observation).await {
                    warn!(cert = %object.name_any(), %error, "listing the validation records failed; verify retries");
                }
            }
            Err(error) => warn!(cert = %object.name_any(), %error, "reading the new certificate failed; verify retries"),
        }
        Ok(())
    }

    /// The certificate no longer matches the spec (its names changed): a new one is requested
    /// next. With deleteOnRemoval the old one is kept in `previousCertificateArns` and deleted
    /// once the new one is issued (make before break: a load balancer may still use it, and the
    /// published ARN changes only then); without, it is kept in ACM and forgotten, with its
    /// validation records, as any certificate of a Cert without deleteOnRemoval.
    fn replace(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) {
        let replaced = observation.certificate_arn.take();
        if request.object.spec.delete_on_removal {
            if let Some(arn) = replaced
                && !observation.previous_certificate_arns.contains(&arn)
            {
                observation.previous_certificate_arns.push(arn);
            }
        } else {
            observation.previous_certificate_arns.clear();
            observation.validation_records.clear();
        }
        observation.cert_ready = false;
        observation.expiration_date = None;
        observation.renewal_status = None;
        observation.state = Some(CertState::Pending);
    }

    /// Once the current certificate is issued: deletes the ones it replaced (deleteOnRemoval),
    /// or forgets them (without: e.g. after the field was switched off), and with them the
    /// validation records only they used. One that is in use, or whose deletion fails, stays
    /// listed with its records for the next look; the Cert is Ready meanwhile.
    async fn settle_previous(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        current: &Certificate,
        observation: &mut CertObservation,
    ) {
        let object = request.object;
        let uid = object.uid().unwrap_or_default();
        let mut needed = decisions::record_names(current);
        // Without its validation options a certificate's records are unknown: delete none.
        let mut needs_known = !needed.is_empty();
        let mut staying = Vec::new();
        for arn in std::mem::take(&mut observation.previous_certificate_arns) {
            if !object.spec.delete_on_removal {
                continue;
            }
            if let Err(error) = self.delete_owned(account, &arn, &uid).await {
                warn!(cert = %object.name_any(), %error, "a replaced certificate is not deleted yet; the next look tries again");
                match account.acm.describe(account.principal(), &arn).await {
                    Ok(certificate) if !certificate.validations.is_empty() => needed.extend(decisions::record_names(&certificate)),
                    _ => needs_known = false,
                }
                staying.push(arn);
            }
        }
        observation.previous_certificate_arns = staying;
        if !needs_known {
            return;
        }
        let unneeded = decisions::unneeded_records(&observation.validation_records, &needed);
        let owned: Vec<ValidationRecordStatus> = unneeded.iter().filter(|r| object.spec.delete_on_removal && r.owned).cloned().collect();
        let (deleted, failure) = self.delete_records(account, &owned).await;
        if let Some(error) = failure {
            warn!(cert = %object.name_any(), %error, "a replaced certificate's validation records are not deleted yet");
        }
        for record in unneeded {
            if !owned.contains(&record) || deleted.contains(&record) {
                observation.validation_records.retain(|r| *r != record);
            }
        }
    }

    /// Deletes a certificate of this Cert: only if its owner tag names this object (one that
    /// does not is someone else's, and only forgotten), and never one in use. A certificate ACM
    /// no longer has is deleted already (`Existence::Gone`); errors name the certificate.
    async fn delete_owned(&self, account: &CertAccount, arn: &str, uid: &str) -> Result<(), ExternalError> {
        let named = |error: ExternalError| error.concerning(format!("deleting the ACM certificate {}", blockwork_aws::mask_accounts(arn)));
        let tags = match account.acm.list_tags(account.principal(), arn).await {
            Ok(tags) => tags,
            Err(error) if error.existence() == Existence::Gone => return Ok(()),
            Err(error) => return Err(named(ExternalError::from(&error))),
        };
        if !decisions::owned_by(&tags, uid) {
            warn!(certificate = %blockwork_aws::sanitize(arn), "not deleting a certificate whose owner tag names another object");
            return Ok(());
        }
        // In-use status changes outside our view: ask AWS, not the cache.
        account.acm.invalidate(arn).await;
        match account.acm.describe(account.principal(), arn).await {
            Ok(certificate) if !certificate.in_use_by.is_empty() => return Err(in_use(certificate.in_use_by.len())),
            Ok(_) => {}
            Err(error) if error.existence() == Existence::Gone => return Ok(()),
            Err(error) => return Err(named(ExternalError::from(&error))),
        }
        match account.acm.delete(account.principal(), arn).await {
            Ok(()) => Ok(()),
            Err(error) => match error.existence() {
                Existence::Gone => Ok(()),
                Existence::StillThere => Err(in_use(1)),
                Existence::Unknown => Err(named(ExternalError::from(&error))),
            },
        }
    }

    /// Deletion of the Cert: with deleteOnRemoval every certificate it holds and then the
    /// validation records it wrote; without, nothing (they stay for the load balancers that use
    /// them, and ACM needs the records to renew).
    async fn remove(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<(), ExternalError> {
        if !request.object.spec.delete_on_removal {
            observation.certificate_arn = None;
            observation.previous_certificate_arns.clear();
            observation.validation_records.clear();
            observation.cert_ready = false;
            observation.state = Some(CertState::Pending);
            return Ok(());
        }
        let account = &self.account(request.object, observation).await?;
        let uid = request.object.uid().unwrap_or_default();
        let held: Vec<String> = observation.certificate_arn.iter().chain(&observation.previous_certificate_arns).cloned().collect();
        for arn in held {
            // Progress is kept: a certificate deleted is forgotten even if the next one fails.
            self.delete_owned(account, &arn, &uid).await?;
            if observation.certificate_arn.as_deref() == Some(arn.as_str()) {
                observation.certificate_arn = None;
            }
            observation.previous_certificate_arns.retain(|a| *a != arn);
        }
        observation.cert_ready = false;
        observation.state = Some(CertState::Pending);
        // After the certificates: a record deleted first would break a certificate whose
        // deletion then fails. A failure here leaves the remaining records listed, and verify
        // makes the runtime call delete again. A pending record may have been written by a look
        // whose status write was lost: it is ours either way.
        let owned: Vec<ValidationRecordStatus> = observation.validation_records.iter().filter(|r| r.owned).cloned().collect();
        let (deleted, failure) = self.delete_records(account, &owned).await;
        observation.validation_records.retain(|r| r.owned && !deleted.contains(r));
        let left: Vec<String> = observation.validation_records.iter().map(|r| format!("{} in hosted zone {}", r.name, r.zone_id)).collect();
        let what = || format!("deleting the validation records {}", left.join(", "));
        failure.map_or(Ok(()), |error| Err(ExternalError::from(&error).concerning(what())))
    }

    /// Deletes owned validation records, one Route 53 batch per zone, each only while it still
    /// has the value written (see `blockwork_aws::route53`); returns those gone now (deleted, not
    /// there with that value, or in a hosted zone that does not exist) and the first failure.
    /// Progress is kept: a zone whose batch fails leaves its records for the next look, the
    /// others' are gone.
    async fn delete_records(
        &self,
        account: &CertAccount,
        records: &[ValidationRecordStatus],
    ) -> (Vec<ValidationRecordStatus>, Option<AwsError>) {
        let mut by_zone: BTreeMap<&str, Vec<&ValidationRecordStatus>> = BTreeMap::new();
        for record in records {
            by_zone.entry(record.zone_id.as_str()).or_default().push(record);
        }
        let mut gone = Vec::new();
        let mut failure = None;
        for (zone_id, records) in by_zone {
            let cnames = records.iter().map(|r| cname(r)).collect();
            let deleted = match account.zone(zone_id) {
                Ok(zone) => self.records.delete(crate::CONTROLLER, &zone, cnames).await,
                Err(error) => Err(error),
            };
            match deleted {
                Ok(deletions) => {
                    for (record, deletion) in records.into_iter().zip(deletions) {
                        if deletion == Deletion::NotFound {
                            tracing::debug!(record = %record.name, "a validation record was not there with the value written; nothing deleted");
                        }
                        gone.push(record.clone());
                    }
                }
                // The zone does not exist: neither do its records (it is deleted only empty).
                Err(error) if error.existence() == Existence::Gone => gone.extend(records.into_iter().cloned()),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        (gone, failure)
    }
}

/// The writes a look finds needed, which `verify` returns for the runtime to allow or hold
/// (`blockwork_runtime::machine::upkeep_runs`) and `maintain` does.
#[derive(Debug)]
pub enum CertUpkeep {
    /// Validation records listed as ours and not written yet, by hosted zone: finishing the
    /// create (ACM waits for them, at issuance and at each renewal), so every drift policy
    /// allows them, and only the create permission does.
    WriteRecords(BTreeMap<String, Vec<Record>>),
    /// The current certificate is issued: delete the ones it replaced (deleteOnRemoval), with
    /// the validation records only they used ([`CertManager::settle_previous`]).
    SettlePrevious(Box<Certificate>),
    /// The Cert is released: its published ConfigMap goes ([`crate::publish`]), and with
    /// deleteOnRemoval its exported Secret.
    Unpublish,
    /// The certificate is issued: its Secret is written, or refused ([`crate::export`]).
    Export(crate::export::look::ExportWork),
}

/// What [`CertManager::record_progress`] found.
struct RecordProgress {
    /// Every record ACM asks for is written.
    complete: bool,
    /// Ours that are still to be written.
    write: Option<Upkeep<CertUpkeep>>,
}

/// A certificate as one look found it: described, or only listed.
struct Found {
    certificate: Certificate,
    described: bool,
}

impl Found {
    fn described(certificate: Certificate) -> Self {
        Self { certificate, described: true }
    }
}

/// The Route 53 record of a validation record.
fn cname(record: &ValidationRecordStatus) -> Record {
    Record { name: record.name.clone(), value: record.value.clone(), ttl: VALIDATION_RECORD_TTL }
}

/// The request a create-pending marker names.
struct Marked {
    desired: Desired,
    token: String,
    /// When the marker was written.
    at: jiff::Timestamp,
}

/// Adds a certificate found to those the Cert holds.
fn hold(observation: &mut CertObservation, arn: String) {
    match &observation.certificate_arn {
        None => observation.certificate_arn = Some(arn),
        Some(current) if *current == arn => {}
        Some(_) => {
            if !observation.previous_certificate_arns.contains(&arn) {
                observation.previous_certificate_arns.push(arn);
            }
        }
    }
}

fn in_use(count: usize) -> ExternalError {
    ExternalError::still_there(
        "CertificateInUse",
        format!(
            "the ACM certificate is in use by {count} AWS resource(s) and is not deleted; detach it, or set deleteOnRemoval: false to keep it"
        ),
    )
}

/// A Cert held because its namespace's mapping moved it to another account.
fn moved(before: Option<&str>, now: &str) -> ExternalError {
    blockwork_identity::placement::held("Cert", "its certificate", before, now)
}

/// Terminal errors put the object in Failed; its `state` says so too.
fn settle_state(observation: &mut CertObservation, error: &ExternalError) {
    if error.class == blockwork_runtime::ErrorClass::Terminal {
        observation.state = Some(CertState::Failed);
        observation.cert_ready = false;
    }
}

impl ExternalResource for CertManager {
    type Object = Cert;
    type Observation = CertObservation;
    type Upkeep = CertUpkeep;
    type Derived = ();

    async fn verify(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Observed<CertUpkeep> {
        let observed = match self.observe(request, observation).await {
            Ok(observed) => observed,
            Err(error) => {
                settle_state(observation, &error);
                VerifyOutcome::Error(error).into()
            }
        };
        self.report(request, observation);
        let mut conditions = observed.conditions.clone();
        let issuing = matches!(observation.state, Some(CertState::Pending | CertState::Created | CertState::Validated));
        if request.phase == Phase::Live && issuing {
            self.export_waits(&mut conditions, request.object);
        }
        conditions.then(renewal(request, observation));
        Observed { conditions, ..observed }
    }

    /// Writes the validation records (in the zone's next background batch), settles the
    /// certificates a recreate replaced, or removes the published ConfigMap, as the runtime
    /// allows (see [`CertUpkeep`]).
    async fn maintain(
        &self,
        request: &Request<'_, Cert>,
        observation: &mut CertObservation,
        work: CertUpkeep,
    ) -> WithConditions<Result<(), ExternalError>> {
        let mut conditions = Conditions::default();
        let done = match work {
            CertUpkeep::Export(work) => self.write_export(request, observation, work, &mut conditions).await,
            CertUpkeep::WriteRecords(by_zone) => {
                self.write_records(request, by_zone).await.inspect_err(|error| settle_state(observation, error))
            }
            CertUpkeep::SettlePrevious(current) => match self.account(request.object, observation).await {
                Ok(account) => {
                    self.settle_previous(&account, request, &current, observation).await;
                    Ok(())
                }
                Err(error) => Err(error),
            },
            CertUpkeep::Unpublish => {
                self.release_published(request.object, observation).await.inspect_err(|error| settle_state(observation, error))
            }
        };
        conditions.then(renewal(request, observation));
        WithConditions { outcome: done, conditions }
    }

    async fn create(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> WithConditions<MutateOutcome> {
        let outcome = match self.request(request, observation).await {
            Ok(()) => MutateOutcome::AwaitingVerification,
            Err(error) => {
                settle_state(observation, &error);
                MutateOutcome::Error(error)
            }
        };
        self.report(request, observation);
        WithConditions { outcome, conditions: renewal(request, observation) }
    }

    /// Publishes the ARN in the ConfigMap `<name>-certificate` (see [`crate::publish`]).
    async fn on_success(&self, request: &Request<'_, Cert>, observation: &CertObservation, client: &Client) -> Result<(), ExternalError> {
        crate::publish::publish(client, request.object, observation).await
    }

    /// ACM certificates cannot be changed; `verify` reports a different certificate as
    /// RecreateRequired, never UpdateRequired, so this only hands back to `verify`.
    async fn update(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> WithConditions<MutateOutcome> {
        WithConditions { outcome: MutateOutcome::AwaitingVerification, conditions: renewal(request, observation) }
    }

    /// Deletion of the Cert ([`Self::remove`]), or, before a new certificate for changed names
    /// (the runtime's recreate), setting the old one aside ([`Self::replace`]).
    async fn delete(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> WithConditions<DeleteOutcome> {
        let outcome = self.delete_or_replace(request, observation).await;
        WithConditions { outcome, conditions: renewal(request, observation) }
    }

    /// `reconcile_duration_seconds{state, success}`: the Cert's state when the reconcile began,
    /// and whether every call (AWS and Kubernetes) succeeded.
    fn reconciled(&self, report: &Report<'_, Cert>) {
        let state = report.object.status.as_ref().and_then(|s| s.observation.state).unwrap_or_default();
        self.metrics.reconciled(state, report.succeeded(), report.duration);
    }

    /// The namespace's AwsIdentity: each account's Certs have reconciles in flight of their own.
    async fn share(&self, cert: &Cert) -> String {
        self.accounts.share(&cert.namespace().unwrap_or_default()).await
    }
}

impl CertManager {
    /// As the Cert is released: its published ConfigMap goes, and with deleteOnRemoval (its
    /// certificate went) the Secret it exported (only if it is still this Cert's). Without, the
    /// Secret stays, as the certificate does: pods may mount it.
    async fn release_published(&self, cert: &Cert, observation: &CertObservation) -> Result<(), ExternalError> {
        crate::publish::unpublish(&self.client, cert).await?;
        if !(cert.spec.delete_on_removal && self.export_secrets) {
            return Ok(());
        }
        let mut names: Vec<&str> = observation.export.iter().map(|e| e.secret_name.as_str()).collect();
        names.extend(cert.spec.export.iter().map(|e| e.secret_name.as_str()));
        names.dedup();
        for name in names {
            crate::export::delete_own(&self.client, cert, name).await?;
        }
        Ok(())
    }

    /// See [`ExternalResource::delete`] above.
    async fn delete_or_replace(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> DeleteOutcome {
        if request.phase == Phase::Live {
            self.replace(request, observation);
            self.report(request, observation);
            return DeleteOutcome::Succeeded;
        }
        let mut removed = self.remove(request, observation).await;
        if removed.is_ok() {
            // The runtime releases the object after a successful delete, without another verify.
            removed = self.release_published(request.object, observation).await;
        }
        match removed {
            Ok(()) => DeleteOutcome::Succeeded,
            Err(error) => DeleteOutcome::Error(error),
        }
    }
}

/// `Renewed=False` while ACM reports the managed renewal `FAILED`: the certificate still serves
/// (the Cert stays Ready) but will expire, and a person must act before it does. Removed
/// otherwise. Every call returns it, from the observation it leaves.
fn renewal(request: &Request<'_, Cert>, observation: &CertObservation) -> Conditions {
    let mut conditions = Conditions::default();
    match decisions::renewal_failed(observation.renewal_status.as_deref()) {
        Some(message) => conditions.set(blockwork_runtime::status::condition(
            RENEWED,
            false,
            RENEWAL_FAILED,
            &message,
            request.object.metadata.generation,
        )),
        None => conditions.remove(RENEWED),
    }
    conditions
}

const RENEWED: &str = "Renewed";
const RENEWAL_FAILED: &str = "RenewalFailed";
