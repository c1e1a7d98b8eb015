//! The Cert operator's `ExternalResource`: ACM and Route53 calls, and on Kubernetes only the
//! ConfigMap that publishes the ARN.
//!
//! - `verify` finds the certificate (by the ARN in status, else by FQDN and request-token tag:
//!   adoption after a crash), writes the DNS validation records while ACM waits for them (an
//!   idempotent step of the asynchronous create), and maps ACM's status to Ready, in progress
//!   or a terminal failure. A Ready certificate costs one (cacheable) DescribeCertificate.
//! - `create` requests the certificate with an idempotency token and owner tags.
//! - `delete` keeps the certificate unless `deleteOnRemoval`, never deletes one in use, and
//!   removes only the validation records this operator created.
//! - `on_success` publishes the ARN in the ConfigMap `<name>-certificate` ([`crate::publish`]),
//!   which `verify` and `delete` remove when the Cert goes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use blockwork_runtime::{
    DeleteOutcome, ExternalError, ExternalResource, MutateOutcome, ReconcileState, Request, RequeuePolicy, VerifyOutcome,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, ResourceExt};
use tracing::warn;

use crate::api::{Cert, CertObservation, CertState, ValidationRecordStatus};
use crate::aws::{AwsError, Certificate, CertificateApi, CertificateRequest, DnsApi, ErrorClass, external_error};
use crate::logic::{self, Assessment, Desired};
use crate::metrics::CertMetrics;
use crate::zones::{ZoneRegistry, normalize};

/// Requeue intervals per runtime state (seed 000's defaults), overridable for tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub pending: RequeuePolicy,
    /// Creating and Recreating: the next step follows at once.
    pub creating: RequeuePolicy,
    /// The seed's Created/Validated: waiting for ACM.
    pub verifying: RequeuePolicy,
    pub ready: RequeuePolicy,
    pub failed: RequeuePolicy,
    pub terminating: RequeuePolicy,
    pub error_backoff: RequeuePolicy,
    pub throttle_floor: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        let secs = Duration::from_secs;
        Self {
            pending: RequeuePolicy::exponential(secs(30), secs(300)),
            creating: RequeuePolicy::exponential(secs(1), secs(60)),
            verifying: RequeuePolicy::exponential(secs(60), secs(300)),
            // Hourly: a Ready certificate costs one DescribeCertificate per hour.
            ready: RequeuePolicy::fixed(secs(3600)),
            failed: RequeuePolicy::fixed(secs(300)),
            terminating: RequeuePolicy::exponential(secs(10), secs(300)),
            error_backoff: RequeuePolicy::exponential(secs(5), secs(300)),
            throttle_floor: secs(60),
        }
    }
}

/// The Cert operator's manager, over any ACM + Route53 client (the decorated SDK in
/// production).
pub struct CertManager<A> {
    aws: A,
    zones: ZoneRegistry,
    validation_timeout: Duration,
    timing: Timing,
    metrics: Arc<CertMetrics>,
    /// UIDs of the objects whose current reconcile had a failed call, for the `success` label
    /// of the reconcile duration (a reconcile of one object never runs concurrently with
    /// another of the same object).
    failed: Mutex<HashSet<String>>,
    /// Deletes the published ConfigMap when the Cert goes (see [`crate::publish`]).
    client: Client,
}

impl<A: CertificateApi + DnsApi> CertManager<A> {
    pub fn new(
        aws: A,
        zones: ZoneRegistry,
        validation_timeout: Duration,
        timing: Timing,
        metrics: Arc<CertMetrics>,
        client: Client,
    ) -> Self {
        Self { aws, zones, validation_timeout, timing, metrics, failed: Mutex::default(), client }
    }

    /// Notes that a call of the current reconcile of `object` failed.
    fn call_failed(&self, object: &Cert) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).insert(object.uid().unwrap_or_default());
    }

    /// Feeds the state and expiry gauges after each call that may change them.
    fn report(&self, object: &Cert, observation: &CertObservation) {
        let uid = object.uid().unwrap_or_default();
        if object.metadata.deletion_timestamp.is_some() {
            self.metrics.forget_certificate(&uid);
            return;
        }
        let now = jiff::Timestamp::now();
        let days = observation.expiration_date.as_ref().map(|t| t.0.duration_since(now).as_secs_f64() / 86_400.0);
        self.metrics.certificate(
            &uid,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
            observation.state.unwrap_or_default(),
            days,
        );
    }

    fn desired(&self, object: &Cert, observation: &mut CertObservation) -> Result<Desired, ExternalError> {
        let desired = logic::desired(&object.spec, &self.zones).map_err(|e| ExternalError::terminal("InvalidSpec", e.to_string()))?;
        observation.domain_name = Some(desired.domain.clone());
        observation.resolved_zone = Some(desired.zone.to_ref());
        Ok(desired)
    }

    /// The certificate of this object: by the ARN in status, else by the tags of a request
    /// that may have happened before a crash.
    async fn find(&self, token: &str, desired: &Desired, observation: &CertObservation) -> Result<Option<Certificate>, AwsError> {
        if let Some(arn) = &observation.certificate_arn {
            match self.aws.describe(arn).await {
                Ok(certificate) => return Ok(Some(certificate)),
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        self.find_owned(&desired.domain, token).await
    }

    /// The certificate for `domain` tagged with this request token (see
    /// [`logic::TAG_TOKEN`]): how a certificate whose ARN never reached the status (a crash,
    /// a restore) is found again and adopted.
    async fn find_owned(&self, domain: &str, token: &str) -> Result<Option<Certificate>, AwsError> {
        let listing = self.aws.list_certificates().await?;
        for (_, arn) in listing.iter().filter(|(d, _)| normalize(d) == domain) {
            let tags = match self.aws.list_tags(arn).await {
                Ok(tags) => tags,
                // Deleted since the listing: not ours to adopt.
                Err(error) if error.class == ErrorClass::NotFound => continue,
                Err(error) => return Err(error),
            };
            if tags.iter().any(|(key, value)| key == logic::TAG_TOKEN && value == token) {
                return self.aws.describe(arn).await.map(Some);
            }
        }
        Ok(None)
    }

    /// Writes the validation records ACM asks for that are not written yet, zone by zone.
    /// True when every domain's record is in place.
    async fn ensure_records(
        &self,
        certificate: &Certificate,
        desired: &Desired,
        observation: &mut CertObservation,
    ) -> Result<bool, ExternalError> {
        let plan = logic::plan_records(certificate, desired).map_err(|e| ExternalError::terminal("InvalidSpec", e.to_string()))?;
        for (zone_id, records) in &plan.by_zone {
            let mut written = Vec::new();
            let mut to_upsert = Vec::new();
            for record in records {
                let done = observation.validation_records.iter().any(|r| {
                    r.zone_id == *zone_id
                        && normalize(&r.name) == normalize(&record.name)
                        && normalize(&r.value) == normalize(&record.value)
                });
                if done {
                    continue;
                }
                let existing = self.aws.lookup_cname(zone_id, &record.name).await.map_err(|e| external_error(&e))?;
                // A record that already has this value was put there by someone else (another
                // certificate for the same name shares it): use it, never delete it.
                let owned = existing.as_deref().map(normalize) != Some(normalize(&record.value));
                if owned {
                    to_upsert.push(record.clone());
                }
                written.push(ValidationRecordStatus {
                    zone_id: zone_id.clone(),
                    name: record.name.clone(),
                    value: record.value.clone(),
                    owned,
                });
            }
            self.aws.upsert_cnames(zone_id, &to_upsert).await.map_err(|e| external_error(&e))?;
            observation.validation_records.extend(written);
        }
        Ok(plan.complete)
    }

    async fn observe(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<VerifyOutcome, ExternalError> {
        let object = request.object;
        let deleting = object.metadata.deletion_timestamp.is_some();
        if deleting && !object.spec.delete_on_removal {
            // The certificate (and its records) stay whatever AWS says: nothing to look up.
            return Ok(VerifyOutcome::Missing);
        }
        let desired = self.desired(object, observation)?;
        let token = logic::acm_token(request.idempotency_token, &desired);
        let Some(certificate) = self.find(&token, &desired, observation).await.map_err(|e| external_error(&e))? else {
            if deleting && observation.validation_records.iter().any(|r| r.owned) {
                // The certificate went but our records did not (a failed cleanup): `delete`
                // must run again, so report something other than Missing.
                return Ok(VerifyOutcome::InProgress("removing the validation records".to_owned()));
            }
            observation.certificate_arn = None;
            observation.cert_ready = false;
            observation.expiration_date = None;
            observation.state = Some(CertState::Pending);
            return Ok(VerifyOutcome::Missing);
        };
        observation.certificate_arn = Some(certificate.arn.clone());
        if deleting {
            return Ok(VerifyOutcome::Ready);
        }
        if let Some(difference) = logic::names_differ(&certificate, &desired) {
            return Ok(VerifyOutcome::RecreateRequired(difference));
        }
        observation.expiration_date = certificate.not_after.map(Time);
        observation.renewal_status = certificate.renewal_status.clone();
        match logic::assess(&certificate, jiff::Timestamp::now(), self.validation_timeout) {
            Assessment::Ready => {
                observation.state = Some(CertState::Ready);
                observation.cert_ready = true;
                if certificate.renewal_status.as_deref() == Some("PENDING_VALIDATION") && may_create(object) {
                    // A renewal needs the same records; put back any we have not written.
                    self.ensure_records(&certificate, &desired, observation).await?;
                }
                if let Some(message) = logic::renewal_message(certificate.renewal_status.as_deref()) {
                    warn!(cert = %object.name_any(), namespace = ?object.namespace(), "{message}");
                }
                Ok(VerifyOutcome::Ready)
            }
            Assessment::Validating => {
                observation.cert_ready = false;
                if observation.state != Some(CertState::Validated) {
                    observation.state = Some(CertState::Created);
                }
                if !may_create(object) {
                    // Read-only objects observe; the records are part of creating.
                    return Ok(VerifyOutcome::InProgress(
                        "waiting for ACM to validate; access-permissions do not allow writing the validation records".to_owned(),
                    ));
                }
                if self.ensure_records(&certificate, &desired, observation).await? {
                    observation.state = Some(CertState::Validated);
                    Ok(VerifyOutcome::InProgress(format!(
                        "the validation records are in place; waiting for ACM to issue {}",
                        desired.domain
                    )))
                } else {
                    Ok(VerifyOutcome::InProgress("waiting for ACM to publish the validation records".to_owned()))
                }
            }
            Assessment::Failed { reason, message } => {
                observation.cert_ready = false;
                Err(ExternalError::terminal(reason, message))
            }
        }
    }

    async fn request(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<(), ExternalError> {
        let object = request.object;
        let desired = self.desired(object, observation)?;
        let token = logic::acm_token(request.idempotency_token, &desired);
        let uid = object.uid().unwrap_or_default();
        let tags = logic::owner_tags(&object.namespace().unwrap_or_default(), &object.name_any(), &uid, &token);
        let arn = self
            .aws
            .request(&CertificateRequest { domain: desired.domain.clone(), sans: desired.sans.clone(), token, tags })
            .await
            .map_err(|e| external_error(&e))?;
        observation.certificate_arn = Some(arn.clone());
        observation.state = Some(CertState::Created);
        observation.cert_ready = false;
        // ACM usually publishes the validation records within seconds; writing them now saves
        // a requeue. If it has not yet, `verify` writes them.
        match self.aws.describe(&arn).await {
            Ok(certificate) => match self.ensure_records(&certificate, &desired, observation).await {
                Ok(true) => observation.state = Some(CertState::Validated),
                Ok(false) => {}
                Err(error) => warn!(cert = %object.name_any(), %error, "writing the validation records failed; verify retries"),
            },
            Err(error) => warn!(cert = %object.name_any(), %error, "reading the new certificate failed; verify retries"),
        }
        Ok(())
    }

    async fn remove(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<(), ExternalError> {
        if !request.object.spec.delete_on_removal {
            // Kept with its validation records: a load balancer may use it, and ACM needs the
            // records to renew it.
            observation.certificate_arn = None;
            observation.validation_records.clear();
            observation.cert_ready = false;
            observation.state = Some(CertState::Pending);
            return Ok(());
        }
        if let Some(arn) = observation.certificate_arn.clone() {
            // In-use status changes outside our view: ask AWS, not the cache.
            self.aws.invalidate(&arn).await;
            match self.aws.describe(&arn).await {
                Ok(certificate) if !certificate.in_use_by.is_empty() => return Err(in_use(certificate.in_use_by.len())),
                Ok(_) => match self.aws.delete(&arn).await {
                    Ok(()) => {}
                    Err(error) if error.class == ErrorClass::NotFound => {}
                    Err(error) if error.code.as_deref() == Some("ResourceInUseException") => return Err(in_use(1)),
                    Err(error) => return Err(external_error(&error)),
                },
                Err(error) if error.class == ErrorClass::NotFound => {}
                Err(error) => return Err(external_error(&error)),
            }
            observation.certificate_arn = None;
            observation.cert_ready = false;
            observation.state = Some(CertState::Pending);
        }
        // After the certificate: a record deleted first would break a certificate whose
        // deletion then fails. A failure here leaves the remaining records listed, and verify
        // makes the runtime call delete again.
        while let Some(record) = observation.validation_records.first().cloned() {
            if record.owned {
                let cname = crate::aws::DnsRecord { name: record.name.clone(), value: record.value.clone() };
                self.aws.delete_cname(&record.zone_id, &cname).await.map_err(|e| external_error(&e))?;
            }
            observation.validation_records.remove(0);
        }
        Ok(())
    }
}

/// Whether the object's access permissions allow creating (the runtime rejects an invalid
/// annotation before any call, so an unparsable one never gets here).
fn may_create(object: &Cert) -> bool {
    object
        .annotations()
        .get(blockwork_runtime::policy::ACCESS_ANNOTATION)
        .is_none_or(|value| value.parse::<blockwork_runtime::policy::AccessPermissions>().is_ok_and(|access| access.create))
}

fn in_use(count: usize) -> ExternalError {
    ExternalError::terminal(
        "CertificateInUse",
        format!(
            "the ACM certificate is in use by {count} AWS resource(s) and is not deleted; detach it, or set deleteOnRemoval: false to keep it"
        ),
    )
}

/// Terminal errors put the object in Failed; its `state` says so too.
fn settle_state(observation: &mut CertObservation, error: &ExternalError) {
    if error.class == blockwork_runtime::ErrorClass::Terminal {
        observation.state = Some(CertState::Failed);
        observation.cert_ready = false;
    }
}

impl<A: CertificateApi + DnsApi> ExternalResource for CertManager<A> {
    type Object = Cert;
    type Observation = CertObservation;

    async fn verify(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> VerifyOutcome {
        let deleting = request.object.metadata.deletion_timestamp.is_some();
        let observed = match self.observe(request, observation).await {
            // Nothing left to delete in AWS: the runtime releases the object next, so the
            // published ConfigMap goes now (the owner reference covers clusters with a garbage
            // collector, and Certs orphaned by their deletion policy).
            Ok(VerifyOutcome::Missing) if deleting => {
                crate::publish::unpublish(&self.client, request.object).await.map(|()| VerifyOutcome::Missing)
            }
            other => other,
        };
        let outcome = match observed {
            Ok(outcome) => outcome,
            Err(error) => {
                settle_state(observation, &error);
                self.call_failed(request.object);
                VerifyOutcome::Error(error)
            }
        };
        self.report(request.object, observation);
        outcome
    }

    async fn create(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> MutateOutcome {
        let outcome = match self.request(request, observation).await {
            Ok(()) => MutateOutcome::AwaitingVerification,
            Err(error) => {
                settle_state(observation, &error);
                self.call_failed(request.object);
                MutateOutcome::Error(error)
            }
        };
        self.report(request.object, observation);
        outcome
    }

    /// Publishes the ARN in the ConfigMap `<name>-certificate` (see [`crate::publish`]).
    async fn on_success(&self, request: &Request<'_, Cert>, observation: &CertObservation, client: &Client) -> Result<(), ExternalError> {
        let published = crate::publish::publish(client, request.object, observation).await;
        if published.is_err() {
            self.call_failed(request.object);
        }
        published
    }

    /// ACM certificates cannot be changed; `verify` reports a different certificate as
    /// RecreateRequired, never UpdateRequired, so this only hands back to `verify`.
    async fn update(&self, _request: &Request<'_, Cert>, _observation: &mut CertObservation) -> MutateOutcome {
        MutateOutcome::AwaitingVerification
    }

    async fn delete(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> DeleteOutcome {
        let mut removed = self.remove(request, observation).await;
        if removed.is_ok() && request.object.metadata.deletion_timestamp.is_some() {
            // The runtime releases the object after a successful delete, without another verify.
            removed = crate::publish::unpublish(&self.client, request.object).await;
        }
        match removed {
            Ok(()) => DeleteOutcome::Succeeded,
            Err(error) => {
                self.call_failed(request.object);
                DeleteOutcome::Error(error)
            }
        }
    }

    /// `reconcile_duration_seconds{state, success}`: the Cert's state when the reconcile began,
    /// and whether every call (AWS and Kubernetes) succeeded.
    fn reconciled(&self, object: &Cert, kubernetes_succeeded: bool, duration: Duration) {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner).remove(&object.uid().unwrap_or_default());
        let state = object.status.as_ref().and_then(|s| s.observation.state).unwrap_or_default();
        self.metrics.reconciled(state, kubernetes_succeeded && !failed, duration);
    }

    fn requeue_policy(&self, state: ReconcileState) -> RequeuePolicy {
        match state {
            ReconcileState::Pending => self.timing.pending,
            ReconcileState::Creating | ReconcileState::Updating | ReconcileState::Recreating => self.timing.creating,
            ReconcileState::Verifying => self.timing.verifying,
            ReconcileState::Succeeded => self.timing.ready,
            ReconcileState::Failed => self.timing.failed,
            ReconcileState::Terminating => self.timing.terminating,
        }
    }

    fn error_backoff(&self) -> RequeuePolicy {
        self.timing.error_backoff
    }

    fn throttle_floor(&self) -> Duration {
        self.timing.throttle_floor
    }
}
