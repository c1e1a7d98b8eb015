//! The export's part of the Cert's calls: `verify` reads the Secret and decides ([`observe`]);
//! what it finds to write it returns as an upkeep ([`ExportWork`], the create permission's, like
//! the validation records: the Secret is part of what the Cert makes), which `maintain` does
//! ([`write`]). Each decides the `Exported` condition.

use blockwork_aws::acm::Certificate;
use blockwork_runtime::status::condition;
use blockwork_runtime::{Conditions, ExternalError, Purpose, Request, Upkeep};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt as _;
use zeroize::Zeroize as _;

use super::material::Material;
use super::metrics::ExportState;
use super::plan::{self, Decision, Look, Why};
use super::secret::{self, Owner};
use crate::api::{Cert, CertObservation, ExportSpec, ExportStatus};
use crate::external::{CertManager, CertUpkeep};

/// The condition of a Cert with `spec.export`: True once its Secret holds the current certificate.
pub const EXPORTED: &str = "Exported";

/// What `maintain` does for the Secret.
#[derive(Debug)]
pub enum ExportWork {
    /// Export the certificate `arn` and write the Secret: created when `existing` is `None`, else
    /// applied over the one read at that resourceVersion.
    Write { why: Why, arn: String, existing: Option<String> },
    /// The Secret of that name is not this Cert's: never written; the error (and a Warning event)
    /// say so.
    Refuse { owner: Owner },
}

fn exported(conditions: &mut Conditions, cert: &Cert, status: bool, reason: &str, message: &str) {
    conditions.set(condition(EXPORTED, status, reason, message, cert.metadata.generation));
}

impl CertManager {
    /// A Cert with `spec.export` whose certificate is not issued (yet, or any more).
    pub(crate) fn export_waits(&self, conditions: &mut Conditions, cert: &Cert) {
        if cert.spec.export.is_some() {
            exported(conditions, cert, false, "WaitingForCertificate", "the Secret is written once ACM has issued the certificate");
            self.metrics.export.state(&cert.uid().unwrap_or_default(), ExportState::Waiting);
        }
    }

    /// The exported copy against ACM's certificate, for the metrics, after each call: lagging
    /// when ACM's expires later (it renewed), and the copy's days to expiry. Forgotten when the
    /// Cert no longer exports or is deleted.
    pub(crate) fn report_export(&self, cert: &Cert, observation: &CertObservation, deleting: bool, now: jiff::Timestamp) {
        let uid = cert.uid().unwrap_or_default();
        if deleting || cert.spec.export.is_none() {
            self.metrics.export.forget(&uid);
            return;
        }
        let Some(recorded) = &observation.export else { return };
        let lagging = observation.expiration_date.as_ref().is_some_and(|acm| acm.0 > recorded.not_after.0);
        let days = recorded.not_after.0.duration_since(now).as_secs_f64() / 86_400.0;
        self.metrics.export.copy(&uid, lagging, Some(days));
    }
}

/// The Cert cannot export here: export is not enabled at install.
pub fn not_enabled_message() -> String {
    "exporting certificates into Secrets is not enabled in this installation (blockwork run --export-secrets, with the Secret \
     permissions of blockwork rbac --opt-in cert.export-secrets; the chart's controllers.cert.exportSecrets sets both)"
        .to_owned()
}

impl CertManager {
    /// The export's part of a look at the issued `certificate`: the upkeep that writes the
    /// Secret, if it needs writing; the `Exported` condition otherwise. Removes the condition
    /// from a Cert that does not export.
    pub(crate) async fn observe_export(
        &self,
        request: &Request<'_, Cert>,
        certificate: &Certificate,
        observation: &mut CertObservation,
        conditions: &mut Conditions,
    ) -> Result<Option<Upkeep<CertUpkeep>>, ExternalError> {
        let cert = request.object;
        let uid = cert.uid().unwrap_or_default();
        let Some(export) = &cert.spec.export else {
            conditions.remove(EXPORTED);
            return Ok(None);
        };
        if !self.export_secrets {
            exported(conditions, cert, false, "ExportNotEnabled", &not_enabled_message());
            self.metrics.export.state(&uid, ExportState::Refused);
            return Ok(None);
        }
        if !request.policies.access.create {
            let message = "access-permissions do not allow writing the Secret (the create permission writes it)";
            exported(conditions, cert, false, "ExportNotPermitted", message);
            self.metrics.export.state(&uid, ExportState::Refused);
            return Ok(None);
        }
        let mut found = super::read(&self.client, cert, &export.secret_name).await?;
        let seen = found.as_ref().map(|s| super::seen(cert, export, &certificate.arn, s));
        let existing = found.as_ref().and_then(kube::ResourceExt::resource_version);
        let exported_at = found.as_ref().and_then(|s| s.annotations().get(secret::ANNOTATION_EXPORTED_AT)).and_then(|t| t.parse().ok());
        if let Some(found) = &mut found {
            secret::forget_data(found);
        }
        let decision = plan::decide(&Look {
            secret_name: &export.secret_name,
            certificate_arn: &certificate.arn,
            not_after: certificate.not_after,
            recorded: observation.export.as_ref(),
            secret: seen.as_ref(),
            spec_changed: request.spec_change.changed,
            drift: request.policies.drift,
        });
        let work = match decision {
            Decision::Current { adopt } => {
                if let (Some(facts), Some(seen)) = (adopt, &seen) {
                    observation.export = Some(ExportStatus {
                        secret_name: export.secret_name.clone(),
                        certificate_arn: certificate.arn.clone(),
                        serial: facts.serial,
                        not_after: Time(facts.not_after),
                        exported_at: Time(exported_at.unwrap_or_else(jiff::Timestamp::now)),
                        resource_version: seen.resource_version.clone(),
                    });
                }
                current(conditions, cert, export, observation);
                self.metrics.export.state(&uid, ExportState::Current);
                return Ok(None);
            }
            Decision::LeaveDrifted(what) => {
                let message = format!(
                    "{}: {what}; drift-policy {}: not repaired (annotate blockwork.dev/drift-policy=enforce, or delete the Secret, to have it written again)",
                    secret::describe(cert, &export.secret_name),
                    request.policies.drift
                );
                exported(conditions, cert, false, "SecretDrifted", &message);
                self.metrics.export.state(&uid, ExportState::Drifted);
                return Ok(None);
            }
            Decision::Write(why) => ExportWork::Write { why, arn: certificate.arn.clone(), existing },
            Decision::Conflict(owner) => ExportWork::Refuse { owner },
        };
        Ok(Some(Upkeep { purpose: Purpose::FinishCreate, work: CertUpkeep::Export(work) }))
    }

    /// Writes the Secret (or refuses to), as [`Self::observe_export`] decided.
    pub(crate) async fn write_export(
        &self,
        request: &Request<'_, Cert>,
        observation: &mut CertObservation,
        work: ExportWork,
        conditions: &mut Conditions,
    ) -> Result<(), ExternalError> {
        let cert = request.object;
        let Some(export) = &cert.spec.export else { return Ok(()) };
        let uid = cert.uid().unwrap_or_default();
        let (written, why) = match work {
            ExportWork::Refuse { owner } => (Err(conflict(cert, export, &owner)), None),
            ExportWork::Write { why, arn, existing } => {
                (self.export_into(cert, export, &arn, existing.as_deref(), &why, observation).await, Some(why))
            }
        };
        match (&written, why) {
            (Ok(()), why) => {
                current(conditions, cert, export, observation);
                self.metrics.export.state(&uid, ExportState::Current);
                self.metrics.export.exported(why.as_ref().map_or("first", Why::label));
                self.report_export(cert, observation, false, jiff::Timestamp::now());
            }
            (Err(error), _) => {
                exported(conditions, cert, false, &error.reason, &error.message);
                let state = if error.reason == "SecretConflict" { ExportState::Refused } else { ExportState::Failing };
                self.metrics.export.state(&uid, state);
                self.metrics.export.failed(&error.reason);
            }
        }
        written
    }

    async fn export_into(
        &self,
        cert: &Cert,
        export: &ExportSpec,
        arn: &str,
        existing: Option<&str>,
        why: &Why,
        observation: &mut CertObservation,
    ) -> Result<(), ExternalError> {
        // Exported as the namespace's account, the one the certificate was requested in (a Cert
        // held by a mapping change exports nothing).
        let account = self.account(cert, observation).await?;
        // An export that fails is the Secret's problem, not the certificate's: the Cert stays
        // Ready (a load balancer may use it) and the export is tried again with the backoff.
        let exported = account.acm.export(account.principal(), arn).await.map_err(|e| {
            let error = ExternalError::from(&e);
            ExternalError::retryable("ExportFailed", format!("exporting the certificate failed: {}", error.message))
        })?;
        let material = Material::from_export(&exported.certificate, &exported.chain, exported.private_key)
            .map_err(|why| ExternalError::retryable("ExportUnusable", format!("ACM exported a certificate that cannot be used: {why}")))?;
        let now = jiff::Timestamp::now();
        let mut desired = secret::secret(cert, export, arn, &material, now);
        let written = super::write(&self.client, cert, &desired, existing).await;
        secret::forget_data(&mut desired);
        let resource_version = written?;
        tracing::info!(
            cert = %cert.name_any(),
            namespace = ?cert.namespace(),
            secret = %export.secret_name,
            serial = %material.facts.serial,
            ?why,
            "exported the certificate into its Secret"
        );
        observation.export = Some(ExportStatus {
            secret_name: export.secret_name.clone(),
            certificate_arn: arn.to_owned(),
            serial: material.facts.serial.clone(),
            not_after: Time(material.facts.not_after),
            exported_at: Time(now),
            resource_version,
        });
        Ok(())
    }
}

fn current(conditions: &mut Conditions, cert: &Cert, export: &ExportSpec, observation: &CertObservation) {
    let message = match &observation.export {
        Some(recorded) => format!(
            "{} holds the certificate (serial {}, expires {})",
            secret::describe(cert, &export.secret_name),
            recorded.serial,
            recorded.not_after.0
        ),
        None => format!("{} holds the certificate", secret::describe(cert, &export.secret_name)),
    };
    exported(conditions, cert, true, "Exported", &message);
}

fn conflict(cert: &Cert, export: &ExportSpec, owner: &Owner) -> ExternalError {
    let whose = match owner {
        Owner::OtherCert => "another Cert exported it",
        Owner::This | Owner::Foreign => "Blockwork did not write it",
    };
    ExternalError::retryable(
        "SecretConflict",
        format!(
            "{} exists and is not this Cert's ({whose}); it is never overwritten: delete it or choose another spec.export.secretName",
            secret::describe(cert, &export.secret_name)
        ),
    )
}

/// Zeroes the Secret data this process holds once it is no longer needed.
pub(crate) fn forget(data: &mut serde_json::Value) {
    if let Some(values) = data.as_object_mut() {
        for value in values.values_mut() {
            if let serde_json::Value::String(text) = value {
                text.zeroize();
            }
        }
    }
}
