//! How `verify` finds and reads the Cert's certificate (list-first), and, for a Cert being
//! deleted, what it still holds.

use blockwork_aws::acm::{Certificate, Freshness};
use blockwork_aws::ownership::{self, Approach, Claim};
use blockwork_aws::{AwsError, ErrorClass};

use blockwork_runtime::{Conditions, ExternalError, Observed, Phase, Purpose, Request, Upkeep, VerifyOutcome};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::warn;

use blockwork_identity::placement::AWS_IDENTITY_CHANGED;

use super::{CertManager, CertUpkeep};
use crate::account::CertAccount;
use crate::api::{Cert, CertObservation, CertState};
use crate::decisions::{self, Assessment, Desired};
use crate::zones::normalize;

impl CertManager {
    pub(super) async fn observe(
        &self,
        request: &Request<'_, Cert>,
        observation: &mut CertObservation,
    ) -> Result<Observed<CertUpkeep>, ExternalError> {
        let object = request.object;
        if request.phase == Phase::Deleting {
            let outcome = match object.spec.delete_on_removal && observation.ownership_lost.is_none() {
                // The certificates (and their records) stay whatever AWS says: nothing to look up.
                // A Cert whose certificate was taken over deletes nothing (ADR 0017).
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
        if let Some(arn) = &observation.ownership_lost {
            // Sticky: no AWS call, nothing done (ADR 0017); the same words as when it was lost.
            let message = crate::adoption::lost(arn, observation.ownership_lost_to.as_deref());
            return Err(ExternalError::terminal(ownership::OWNERSHIP_LOST, message));
        }
        let account = &self.account(object, observation).await?;
        let observed = self.look(account, request, observation).await?;
        // Before anything is written for the certificate (the upkeep; but the writes that finish
        // the create of one this Cert requested), and once per ownership interval otherwise: is
        // it still this Cert's?
        if let Some(arn) = observation.certificate_arn.clone() {
            let uid = object.uid().unwrap_or_default();
            let writes = observed.upkeep.iter().map(|upkeep| upkeep.purpose);
            if self.ownership.read_needed(&uid, &arn, writes, std::time::Instant::now()) {
                self.confirm_owner(account, request, &arn, observation).await?;
            }
        }
        Ok(observed)
    }

    /// A live Cert's look: its certificate found and assessed, and the upkeep it needs.
    async fn look(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        observation: &mut CertObservation,
    ) -> Result<Observed<CertUpkeep>, ExternalError> {
        let object = request.object;
        let desired = self.desired(account, object, observation)?;
        let Some(found) = self.find(account, request, &desired, observation).await? else {
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
    ) -> Result<Option<Found>, ExternalError> {
        let aws = |error: AwsError| ExternalError::from(&error);
        if let Some(arn) = &observation.certificate_arn
            && let Some(found) = self.read(account, arn, request, desired, observation).await.map_err(aws)?
        {
            return Ok(Some(found));
        }
        let uid = request.object.uid().unwrap_or_default();
        if let Some(marked) = self.marked(account, request) {
            let freshness = decisions::marked_lookup(false, marked.desired != *desired, marked.at, jiff::Timestamp::now());
            let listing = account.acm.list_certificates(freshness).await.map_err(aws)?;
            return Ok(self.find_requested(account, &listing, &marked, &uid).await.map_err(aws)?.map(Found::described));
        }
        let listing = account.acm.list_certificates(Freshness::Recent).await.map_err(aws)?;
        let me = super::owner(request.object);
        let mut elsewhere = Vec::new();
        for (arn, tags) in self.candidates(account, &listing, &desired.domain).await.map_err(aws)? {
            match ownership::claim(Approach::Finding, &tags, &me) {
                Claim::Ours if !observation.previous_certificate_arns.contains(&arn) => {}
                Claim::OwnedElsewhere { by } => {
                    elsewhere.push((arn, by));
                    continue;
                }
                _ => continue,
            }
            if let Some(certificate) = self.matching(account, &arn, desired).await.map_err(aws)? {
                return Ok(Some(Found::described(certificate)));
            }
        }
        // Nothing of ours: before a certificate is requested, the same manifest's elsewhere
        // (another cluster's) for exactly these names stops it — no duplicate (ADR 0017). A Cert
        // adopting names its certificate itself.
        if request.object.spec.adopt.is_none() {
            for (arn, by) in elsewhere {
                if self.matching(account, &arn, desired).await.map_err(aws)?.is_some_and(|c| crate::adoption::stands_in_the_way(&c)) {
                    return Err(ExternalError::terminal(ownership::OWNED_ELSEWHERE, crate::adoption::owned_elsewhere(&arn, &by)));
                }
            }
        }
        Ok(None)
    }

    /// The certificate `arn`, described, if it is what the spec asks for.
    async fn matching(&self, account: &CertAccount, arn: &str, desired: &Desired) -> Result<Option<Certificate>, AwsError> {
        match account.acm.describe(account.principal(), arn).await {
            Ok(certificate) if decisions::certificate_differs(&certificate, desired).is_none() => Ok(Some(certificate)),
            Ok(_) => Ok(None),
            Err(error) if error.class == ErrorClass::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The certificate of the marker's request: ours (owner UID) and requested with its token.
    async fn find_requested(
        &self,
        account: &CertAccount,
        listing: &[(String, String)],
        marked: &Marked,
        uid: &str,
    ) -> Result<Option<Certificate>, AwsError> {
        for (arn, tags) in self.candidates(account, listing, &marked.desired.domain).await? {
            if !decisions::owned_by(&tags, uid) || decisions::tag(&tags, decisions::TAG_TOKEN) != Some(marked.token.as_str()) {
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

    /// The listed certificates for `domain`, with their tags (whose they are is the caller's
    /// question).
    async fn candidates(
        &self,
        account: &CertAccount,
        listing: &[(String, String)],
        domain: &str,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, AwsError> {
        let mut owned = Vec::new();
        for (_, arn) in listing.iter().filter(|(d, _)| normalize(d) == domain) {
            match account.acm.list_tags(account.principal(), arn).await {
                Ok(tags) => owned.push((arn.clone(), tags)),
                // Deleted since the listing.
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(owned)
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
}

/// A certificate as one look found it: described, or only listed.
pub(super) struct Found {
    pub(super) certificate: Certificate,
    pub(super) described: bool,
}

impl Found {
    pub(super) fn described(certificate: Certificate) -> Self {
        Self { certificate, described: true }
    }
}

/// The request a create-pending marker names.
pub(super) struct Marked {
    pub(super) desired: Desired,
    pub(super) token: String,
    /// When the marker was written.
    pub(super) at: jiff::Timestamp,
}

/// Adds a certificate found to those the Cert holds.
pub(super) fn hold(observation: &mut CertObservation, arn: String) {
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
