//! Ownership of the Cert's certificate (ADR 0017): adopting the one `spec.adopt` names — the
//! checks before anything is written, then only the ownership tags — and confirming that a
//! held certificate is still this Cert's (when, [`crate::ownership_checks`] says); a
//! certificate another object took over is lost, for good.

use std::time::Instant;

use blockwork_aws::ErrorClass;
use blockwork_aws::ownership::{self, Approach, Claim};
use blockwork_runtime::{ExternalError, Request};
use kube::Resource as _;
use kube::runtime::events::EventType;
use tracing::warn;

use super::{CertManager, owner};
use crate::account::CertAccount;
use crate::adoption;
use crate::api::{Cert, CertObservation, CertState};
use crate::decisions::Desired;

impl CertManager {
    /// The create of a Cert with `spec.adopt`: the certificate it names is checked — in the
    /// namespace's account and region, existing, matching the spec in every way — and then
    /// only tagged as this Cert's (a tag write, idempotent: a create repeated after a crash
    /// writes the same tags). The next look re-reads the tags before acting: of two objects
    /// adopting at once, the last tag write wins and the other finds itself lost.
    pub(super) async fn adopt(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        desired: &Desired,
        arn: &str,
        observation: &mut CertObservation,
    ) -> Result<(), ExternalError> {
        let refused = |message: String| ExternalError::terminal(ownership::ADOPTION_REFUSED, message);
        let region = account.acm.region().await;
        let account_id = self.accounts.account_id(account.principal()).await;
        if let Some(message) = adoption::misplaced(arn, region.as_deref(), account_id.as_deref()) {
            return Err(refused(message));
        }
        let certificate = match account.acm.describe(account.principal(), arn).await {
            Ok(certificate) => certificate,
            Err(error) if error.class == ErrorClass::NotFound => {
                return Err(refused(format!(
                    "ACM has no certificate {} in the account and region this namespace acts in",
                    blockwork_aws::mask_accounts(arn)
                )));
            }
            Err(error) => return Err(ExternalError::from(&error)),
        };
        let differences = adoption::differences(&certificate, desired);
        if !differences.is_empty() {
            return Err(ExternalError::terminal(ownership::ADOPTION_MISMATCH, adoption::mismatch(arn, &differences)));
        }
        let me = owner(request.object);
        let tags = account.acm.list_tags(account.principal(), arn).await.map_err(|e| ExternalError::from(&e))?;
        if ownership::claim(Approach::Adopting, &tags, &me) == Claim::Adopt {
            account.acm.add_tags(account.principal(), arn, &adoption::adoption_tags(&me)).await.map_err(|e| ExternalError::from(&e))?;
        }
        observation.certificate_arn = Some(arn.to_owned());
        observation.state = Some(CertState::Created);
        observation.cert_ready = false;
        // Read back at once, before anything is written for it: the check is due now, and
        // `crate::wake` has the Cert looked at within a second rather than at its verify
        // interval (an issued certificate's listing does not change, so no sweep would wake it).
        self.ownership.adopted(&uid(request.object), Instant::now());
        account.acm.await_issue(arn);
        Ok(())
    }

    /// Reads `arn`'s tags: still this Cert's, or taken over by another object (then the Cert
    /// loses it: see [`Self::lose`]).
    pub(super) async fn confirm_owner(
        &self,
        account: &CertAccount,
        request: &Request<'_, Cert>,
        arn: &str,
        observation: &mut CertObservation,
    ) -> Result<(), ExternalError> {
        let tags = match account.acm.list_tags(account.principal(), arn).await {
            Ok(tags) => tags,
            // Gone: the look that finds it missing decides.
            Err(error) if error.class == ErrorClass::NotFound => return Ok(()),
            Err(error) => return Err(ExternalError::from(&error)),
        };
        match ownership::claim(Approach::Held, &tags, &owner(request.object)) {
            Claim::Lost { by } => Err(self.lose(request, arn, by.as_deref(), observation).await),
            _ => {
                self.ownership.confirmed(&uid(request.object), Instant::now());
                Ok(())
            }
        }
    }

    /// Another object took the certificate over: this Cert forgets it and everything it held
    /// for it (its validation records now serve the new owner's renewals), without deleting
    /// anything; the status keeps which certificate was lost, so no later look acts on it and
    /// the deletion deletes nothing. One Warning event says so.
    pub(super) async fn lose(
        &self,
        request: &Request<'_, Cert>,
        arn: &str,
        by: Option<&str>,
        observation: &mut CertObservation,
    ) -> ExternalError {
        let message = adoption::lost(arn, by);
        warn!(cert = %request.object.metadata.name.as_deref().unwrap_or_default(), "{message}");
        self.events.publish(&request.object.object_ref(&()), EventType::Warning, ownership::OWNERSHIP_LOST, "Release", &message).await;
        // Which certificate, for people: masked as every ARN a namespace user reads.
        observation.ownership_lost = Some(blockwork_aws::mask_accounts(arn));
        // Named at every later look too, which reads no tags: the condition stays as it is.
        observation.ownership_lost_to = by.map(str::to_owned);
        observation.certificate_arn = None;
        observation.previous_certificate_arns.clear();
        observation.validation_records.clear();
        observation.cert_ready = false;
        observation.expiration_date = None;
        observation.renewal_status = None;
        ExternalError::terminal(ownership::OWNERSHIP_LOST, message)
    }
}

fn uid(cert: &Cert) -> String {
    cert.metadata.uid.clone().unwrap_or_default()
}
