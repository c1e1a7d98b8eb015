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
//!
//! This file holds the manager, its account and the runtime's trait; the steps live beside it:
//! finding and reading the certificate (`external/observe.rs`), the validation records
//! (`records.rs`), requesting (`create.rs`), and replacing and deleting (`deletion.rs`).

mod adoption;
mod create;
mod deletion;
mod observe;
mod records;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::ownership::Owner;

use blockwork_aws::acm::Certificate;
use blockwork_aws::pca::Pca;
use blockwork_aws::route53::{Record, Records};

use blockwork_runtime::{
    Conditions, DeleteOutcome, ExternalError, ExternalResource, MutateOutcome, Observed, Phase, Publisher, Report, Request, RequeuePolicy,
    Timing, VerifyOutcome, WithConditions,
};
use kube::{Client, ResourceExt};

use blockwork_identity::placement::{Placement, placement};

use crate::account::{Accounts, CertAccount};
use crate::admission;
use crate::api::{Cert, CertObservation, CertState};
use crate::decisions::{self, Desired};
use crate::metrics::CertMetrics;
use crate::ownership_checks::OwnershipChecks;
use crate::users::{User, Users};

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
    /// When each Cert reads its certificate's ownership tags (ADR 0017).
    ownership: OwnershipChecks,
    /// Who uses each Cert's certificates ([`crate::users`]): a Cert in use is not deleted, nor a
    /// certificate it replaced while a user still serves it.
    users: Arc<Users>,
}

/// The default of [`CertManager::with_ownership_interval`] (`--ownership-check-interval`).
pub const OWNERSHIP_INTERVAL: Duration = Duration::from_secs(6 * 3600);

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
        Self {
            accounts,
            records,
            validation_timeout,
            metrics,
            client,
            events,
            export_secrets,
            authorities,
            pca,
            ownership: OwnershipChecks::new(OWNERSHIP_INTERVAL),
            users: Arc::default(),
        }
    }

    /// Reads the Certs' users from `users`' watches (without: no user is known, as for a
    /// controller without them in tests).
    pub fn with_users(self, users: Arc<Users>) -> Self {
        Self { users, ..self }
    }

    /// The users of `cert`'s certificates (the current one and those it replaced).
    pub(crate) async fn users(&self, cert: &Cert, observation: &CertObservation) -> Result<Vec<User>, ExternalError> {
        let arns: Vec<&str> =
            observation.certificate_arn.iter().chain(&observation.previous_certificate_arns).map(String::as_str).collect();
        self.users.of(cert, &arns).await
    }

    /// How often a held certificate's ownership is confirmed when nothing is written for it.
    pub fn with_ownership_interval(self, ownership_interval: Duration) -> Self {
        Self { ownership: OwnershipChecks::new(ownership_interval), ..self }
    }

    /// When each Cert's ownership check is due, which [`crate::wake`] follows.
    pub fn ownership(&self) -> &OwnershipChecks {
        &self.ownership
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

    /// Feeds the state and expiry gauges after each call that may change them.
    fn report(&self, request: &Request<'_, Cert>, observation: &CertObservation) {
        let object = request.object;
        let uid = object.uid().unwrap_or_default();
        let now = jiff::Timestamp::now();
        self.report_export(object, observation, request.phase == Phase::Deleting, now);
        if request.phase == Phase::Deleting {
            self.metrics.forget_certificate(&uid);
            self.ownership.forget(&uid);
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
        // A Cert adopting a certificate for names the namespace is not granted is refused as
        // such: nothing is adopted.
        let reason = if object.spec.adopt.is_some() { blockwork_aws::ownership::ADOPTION_REFUSED } else { "InvalidSpec" };
        let desired = admission::admissible(&object.spec, &account.zones)
            .map_err(|violations| ExternalError::terminal(reason, violations.join("; ")))?;
        observation.domain_name = Some(desired.domain.clone());
        observation.resolved_zone = Some(desired.zone.to_ref());
        Ok(desired)
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

/// A Cert held because its namespace's mapping moved it to another account.
fn moved(before: Option<&str>, now: &str) -> ExternalError {
    blockwork_identity::placement::held("Cert", "its certificate", before, now)
}

/// The Cert as the ownership tags name it.
fn owner(cert: &Cert) -> Owner<'_> {
    Owner {
        uid: cert.metadata.uid.as_deref().unwrap_or_default(),
        namespace: cert.metadata.namespace.as_deref().unwrap_or_default(),
        name: cert.metadata.name.as_deref().unwrap_or_default(),
    }
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

    /// A Cert being deleted while it is in use waits for its users first (ADR 0022): nothing of
    /// it is deleted, and its status, a Warning event and `blockwork explain` name them.
    async fn verify(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Observed<CertUpkeep> {
        if request.phase == Phase::Deleting {
            match self.users(request.object, observation).await {
                Ok(users) if users.is_empty() => {}
                Ok(users) => return VerifyOutcome::Error(crate::users::held(&users)).into(),
                Err(unknown) => return VerifyOutcome::Error(crate::users::unknown_users(unknown)).into(),
            }
        }
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
