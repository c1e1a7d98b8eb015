//! The validation records: which ACM asks for, which are ours, writing and deleting them.

use std::collections::BTreeMap;

use blockwork_aws::acm::Certificate;
use blockwork_aws::route53::{Deletion, Record, Written};
use blockwork_aws::{AwsError, ErrorClass};
use blockwork_runtime::Existence;

use blockwork_runtime::{ExternalError, Purpose, Request, Upkeep};
use kube::ResourceExt;

use super::{CertManager, CertUpkeep, VALIDATION_RECORD_TTL};
use crate::account::CertAccount;
use crate::api::{Cert, CertObservation, ValidationRecordStatus};
use crate::decisions::{self, Desired};
use crate::zones::normalize;

impl CertManager {
    /// Queues the validation records with their zones' next background batches.
    pub(super) async fn write_records(
        &self,
        request: &Request<'_, Cert>,
        by_zone: BTreeMap<String, Vec<Record>>,
    ) -> Result<(), ExternalError> {
        let account = self.accounts.of(&request.object.namespace().unwrap_or_default()).await?;
        for (zone_id, records) in by_zone {
            let zone = account.zone(&zone_id).map_err(ExternalError::from)?;
            self.records.upsert_in_background(crate::CONTROLLER, &zone, records);
        }
        Ok(())
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
    pub(super) async fn record_progress(
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
    pub(super) async fn list_records(
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

    /// Deletes owned validation records, one Route 53 batch per zone, each only while it still
    /// has the value written (see `blockwork_aws::route53`); returns those gone now (deleted, not
    /// there with that value, or in a hosted zone that does not exist) and the first failure.
    /// Progress is kept: a zone whose batch fails leaves its records for the next look, the
    /// others' are gone.
    pub(super) async fn delete_records(
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

/// What [`CertManager::record_progress`] found.
pub(super) struct RecordProgress {
    /// Every record ACM asks for is written.
    pub(super) complete: bool,
    /// Ours that are still to be written.
    pub(super) write: Option<Upkeep<CertUpkeep>>,
}

/// The Route 53 record of a validation record.
pub(super) fn cname(record: &ValidationRecordStatus) -> Record {
    Record { name: record.name.clone(), value: record.value.clone(), ttl: VALIDATION_RECORD_TTL }
}
