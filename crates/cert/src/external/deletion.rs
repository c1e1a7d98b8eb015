//! Setting a replaced certificate aside, settling it, and the Cert's deletion.

use blockwork_aws::acm::Certificate;
use blockwork_aws::ownership;
use blockwork_runtime::Existence;

use blockwork_runtime::{DeleteOutcome, ExternalError, Phase, Request};
use kube::ResourceExt;
use tracing::{info, warn};

use super::CertManager;
use crate::account::CertAccount;
use crate::api::{Cert, CertObservation, CertState, ValidationRecordStatus};
use crate::decisions::{self};

impl CertManager {
    /// The certificate no longer matches the spec (its names changed): a new one is requested
    /// next. With deleteOnRemoval the old one is kept in `previousCertificateArns` and deleted
    /// once the new one is issued (make before break: a load balancer may still use it, and the
    /// published ARN changes only then); without, it is kept in ACM and forgotten, with its
    /// validation records, as any certificate of a Cert without deleteOnRemoval.
    pub(super) fn replace(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) {
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
    /// validation records only they used. One that a user still serves (a tenant not updated
    /// yet, an Ingress: [`crate::users`]), that AWS says is in use, or whose deletion fails,
    /// stays listed with its records for the next look (a user letting go wakes the Cert); the
    /// Cert is Ready meanwhile.
    pub(super) async fn settle_previous(
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
        // Unknown users keep every replaced certificate: deleting one in use is what this avoids.
        let users = self.users(object, observation).await;
        for arn in std::mem::take(&mut observation.previous_certificate_arns) {
            if !object.spec.delete_on_removal {
                continue;
            }
            let serving = users.as_ref().map(|users| crate::users::serving(users, &arn));
            let kept = match serving {
                Ok(serving) if serving.is_empty() => match self.delete_owned(account, &arn, &uid).await {
                    Ok(()) => false,
                    Err(error) => {
                        warn!(cert = %object.name_any(), %error, "a replaced certificate is not deleted yet; the next look tries again");
                        true
                    }
                },
                serving => {
                    let who = serving.map_or_else(|_| "its users are not known yet".to_owned(), |s| crate::users::listed(&s));
                    info!(cert = %object.name_any(), certificate = %blockwork_aws::mask_accounts(&arn), %who, "a replaced certificate is kept while in use");
                    true
                }
            };
            if kept {
                // It stays with the validation records it renews with.
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
        if !request.object.spec.delete_on_removal || observation.ownership_lost.is_some() {
            observation.certificate_arn = None;
            observation.previous_certificate_arns.clear();
            observation.validation_records.clear();
            observation.cert_ready = false;
            observation.state = Some(CertState::Pending);
            return Ok(());
        }
        let account = &self.account(request.object, observation).await?;
        if let Some(arn) = observation.certificate_arn.clone() {
            // Taken over by another object: released without deleting anything, not even the
            // validation records, which the new owner's renewals use (ADR 0017).
            match self.confirm_owner(account, request, &arn, observation).await {
                Err(error) if error.reason == ownership::OWNERSHIP_LOST => return Ok(()),
                confirmed => confirmed?,
            }
        }
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

    /// As the Cert is released: its published ConfigMap goes, and with deleteOnRemoval (its
    /// certificate went) the Secret it exported (only if it is still this Cert's). Without, the
    /// Secret stays, as the certificate does: pods may mount it.
    pub(super) async fn release_published(&self, cert: &Cert, observation: &CertObservation) -> Result<(), ExternalError> {
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
    pub(super) async fn delete_or_replace(&self, request: &Request<'_, Cert>, observation: &mut CertObservation) -> DeleteOutcome {
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

pub(super) fn in_use(count: usize) -> ExternalError {
    ExternalError::still_there(
        "CertificateInUse",
        format!(
            "the ACM certificate is in use by {count} AWS resource(s) and is not deleted; detach it, or set deleteOnRemoval: false to keep it"
        ),
    )
}
