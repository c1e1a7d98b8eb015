//! Requesting the certificate.

use blockwork_aws::ErrorClass;
use blockwork_aws::acm::CertificateRequest;

use blockwork_runtime::{ExternalError, Request};
use kube::ResourceExt;
use tracing::warn;

use super::CertManager;
use crate::account::CertAccount;
use crate::api::{Cert, CertObservation, CertState};
use crate::decisions::{self};

impl CertManager {
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

    pub(super) async fn request(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> Result<(), ExternalError> {
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
        if let Some(adopt) = &object.spec.adopt {
            // Adopting is this Cert's create: nothing is requested.
            return self.adopt(account, request, &desired, &adopt.certificate_arn, observation).await;
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
        // The request wrote its ownership tags: not read back (`crate::ownership_checks`).
        self.ownership.requested(&uid, &arn, std::time::Instant::now());
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
}
