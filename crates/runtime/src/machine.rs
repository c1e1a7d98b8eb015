//! The state machine as pure functions: what to do given the state and what `verify` saw, and
//! where each outcome leads. No I/O here, so every transition is unit tested.

use std::time::Duration;

use jiff::Timestamp;

use crate::outcome::{DeleteOutcome, ErrorClass, Existence, ExternalError, MutateOutcome, Purpose, VerifyOutcome};
use crate::policy::{AccessPermissions, DELETION_POLICY_ANNOTATION, DriftPolicy, Policies};
use crate::status::ReconcileState;

/// What the reconciler does after `verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to call; settle in `state` and wait.
    Wait { state: ReconcileState, reason: &'static str, message: String },
    /// The external resource is ready.
    Ready,
    /// Write the create-pending marker (state `Creating`) for the current spec and come back at
    /// once; the create call happens on the next reconcile, so each reconcile writes the object at
    /// most once.
    MarkCreating,
    /// Call `create` with the marker's idempotency token: the marker names the current spec.
    Create,
    /// Call `update`. `drift` tells whether it repairs drift rather than applies a spec change.
    Update { drift: bool },
    /// Call `delete`, then create again.
    Recreate { drift: bool },
    /// The external resource drifted and the drift policy says to leave it.
    LeaveDrift { policy: DriftPolicy, message: String },
    /// The external resource disappeared and the drift policy says to leave it: drift, and the
    /// object is no longer Ready, since nothing usable stands behind it.
    LeaveMissing { policy: DriftPolicy },
    /// Needs a person.
    Fail { reason: &'static str, message: String },
    /// Observing failed.
    Error(ExternalError),
}

/// Decides what to do with an object that is not being deleted.
///
/// `spec_changed` is true when the spec differs from the last one applied (or none was applied):
/// then a difference in the external resource is the user's change, otherwise it is drift.
/// `marked` is true when the create-pending marker was written for the current spec: only then
/// may `create` run, so that the marker always names what a create whose result is lost made.
pub fn plan(state: ReconcileState, verified: VerifyOutcome, policies: &Policies, spec_changed: bool, marked: bool) -> Plan {
    let verified = match verified {
        VerifyOutcome::Error(e) if e.class == ErrorClass::NotFound => VerifyOutcome::Missing,
        other => other,
    };
    if state == ReconcileState::Recreating {
        return match verified {
            VerifyOutcome::Missing => plan_create(state, policies, marked),
            VerifyOutcome::Deleting => {
                wait(ReconcileState::Recreating, "Deleting", "waiting for the external resource to be deleted before creating it again")
            }
            VerifyOutcome::Error(e) => Plan::Error(e),
            // Still there: deleting again is harmless and covers a delete that was lost.
            _ => Plan::Recreate { drift: false },
        };
    }
    match verified {
        VerifyOutcome::Error(e) => Plan::Error(e),
        VerifyOutcome::Deleting => wait(state, "Deleting", "the external resource is being deleted outside Kubernetes"),
        VerifyOutcome::InProgress(message) => Plan::Wait { state: ReconcileState::Verifying, reason: "InProgress", message },
        VerifyOutcome::Ready => Plan::Ready,
        VerifyOutcome::Missing => {
            if state == ReconcileState::Succeeded && policies.drift != DriftPolicy::Enforce {
                return Plan::LeaveMissing { policy: policies.drift };
            }
            plan_create(state, policies, marked)
        }
        VerifyOutcome::UpdateRequired(difference) => {
            let drift = !spec_changed;
            if drift && policies.drift != DriftPolicy::Enforce {
                return Plan::LeaveDrift { policy: policies.drift, message: difference };
            }
            if !policies.access.update {
                return Plan::Fail {
                    reason: "UpdateNotPermitted",
                    message: format!(
                        "the external resource needs an update ({difference}) but access-permissions do not allow updating it"
                    ),
                };
            }
            Plan::Update { drift }
        }
        VerifyOutcome::RecreateRequired(difference) => {
            let drift = !spec_changed;
            if drift && policies.drift != DriftPolicy::Enforce {
                return Plan::LeaveDrift { policy: policies.drift, message: difference };
            }
            if !(policies.access.create && policies.access.delete) {
                return Plan::Fail {
                    reason: "RecreateNotPermitted",
                    message: format!(
                        "the external resource must be recreated ({difference}) but access-permissions do not allow deleting and creating it"
                    ),
                };
            }
            Plan::Recreate { drift }
        }
    }
}

/// A marker written for another spec (the spec changed since) is written again for this one
/// before anything is created: `verify` has just looked for what a create under the old marker
/// may have made, and found nothing, or its outcome would not be Missing.
fn plan_create(state: ReconcileState, policies: &Policies, marked: bool) -> Plan {
    if !policies.access.create {
        return Plan::Fail {
            reason: "CreateNotPermitted",
            message: "the external resource does not exist and access-permissions do not allow creating it".to_owned(),
        };
    }
    if state == ReconcileState::Creating && marked { Plan::Create } else { Plan::MarkCreating }
}

fn wait(state: ReconcileState, reason: &'static str, message: &str) -> Plan {
    Plan::Wait { state, reason, message: message.to_owned() }
}

/// Whether an upkeep `verify` asked for runs now, on the live path, after `plan` decided the
/// reconcile. Only beside a plan that leaves the resource as it is and calls nothing else: the
/// resource is ready, or on its way (`Wait` in `Verifying`, which only `InProgress` leads to).
/// Not beside a create, update or recreate (one change at a time: the next `verify` asks again,
/// against what that call made), not on a resource left drifted or missing by the Report and
/// Suspend policies (hands off: nothing of it is written), not after a failure, and never a
/// `Release` (the object is not going). And only with the permission its purpose takes: a
/// read-only object never writes.
pub fn upkeep_runs(plan: &Plan, purpose: Purpose, access: &AccessPermissions) -> bool {
    let leaves_resource_as_is = matches!(plan, Plan::Ready | Plan::Wait { state: ReconcileState::Verifying, .. });
    let permitted = match purpose {
        Purpose::FinishCreate => access.create,
        Purpose::FinishUpdate => access.update,
        Purpose::FinishRecreate => access.delete,
        Purpose::Release => false,
    };
    leaves_resource_as_is && permitted
}

/// Whether an upkeep runs on the deleting path: only a `Release`, and only once nothing is left
/// to delete (the object is released next, in the same reconcile). The runtime reaches this path
/// only when the deletion policy and the delete permission delete; nothing else of the resource
/// is finished while it is being deleted.
pub fn upkeep_runs_deleting(plan: &DeletePlan, purpose: Purpose, access: &AccessPermissions) -> bool {
    *plan == DeletePlan::Release && purpose == Purpose::Release && access.delete
}

/// Where a call's outcome leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterCall {
    /// Settle in this state.
    MoveTo(ReconcileState),
    /// Write the create-pending marker and come back at once.
    MarkCreating,
    /// The call failed: `Failed` for terminal errors, otherwise stay in `retry_in` and back off.
    Error { retry_in: ReconcileState, error: ExternalError },
}

pub fn after_create(outcome: MutateOutcome) -> AfterCall {
    match outcome {
        MutateOutcome::AwaitingVerification => AfterCall::MoveTo(ReconcileState::Verifying),
        MutateOutcome::Succeeded => AfterCall::MoveTo(ReconcileState::Succeeded),
        MutateOutcome::Error(error) => AfterCall::Error { retry_in: ReconcileState::Creating, error },
    }
}

pub fn after_update(outcome: MutateOutcome) -> AfterCall {
    match outcome {
        MutateOutcome::AwaitingVerification => AfterCall::MoveTo(ReconcileState::Verifying),
        MutateOutcome::Succeeded => AfterCall::MoveTo(ReconcileState::Succeeded),
        MutateOutcome::Error(error) => AfterCall::Error { retry_in: ReconcileState::Updating, error },
    }
}

pub fn after_recreate_delete(outcome: DeleteOutcome) -> AfterCall {
    match outcome {
        DeleteOutcome::Succeeded => AfterCall::MarkCreating,
        DeleteOutcome::Error(e) if e.existence == Existence::Gone => AfterCall::MarkCreating,
        DeleteOutcome::AwaitingVerification => AfterCall::MoveTo(ReconcileState::Recreating),
        DeleteOutcome::Error(error) => AfterCall::Error { retry_in: ReconcileState::Recreating, error },
    }
}

/// What the finalizer does for an object being deleted whose external resource is to be deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletePlan {
    /// The external resource is gone (or never existed): release the object.
    Release,
    /// Call `delete`.
    Delete,
    /// Deletion is under way; look again later.
    Wait,
    Error(ExternalError),
}

/// An answer that proves the external resource gone releases the object; one that leaves it
/// unknown, or says it is still there, is the deletion's error.
pub fn plan_delete(verified: VerifyOutcome) -> DeletePlan {
    match verified {
        VerifyOutcome::Missing => DeletePlan::Release,
        VerifyOutcome::Error(e) if e.existence == Existence::Gone => DeletePlan::Release,
        VerifyOutcome::Error(e) => DeletePlan::Error(e),
        VerifyOutcome::Deleting => DeletePlan::Wait,
        _ => DeletePlan::Delete,
    }
}

/// After `delete` during finalization: release, wait, or report. An error that proves the
/// resource gone is success.
pub fn after_delete(outcome: DeleteOutcome) -> DeletePlan {
    match outcome {
        DeleteOutcome::Succeeded => DeletePlan::Release,
        DeleteOutcome::AwaitingVerification => DeletePlan::Wait,
        DeleteOutcome::Error(e) if e.existence == Existence::Gone => DeletePlan::Release,
        DeleteOutcome::Error(e) => DeletePlan::Error(e),
    }
}

/// The reason a deletion blocked on an unknown answer for longer than
/// `Timing::deletion_blocked_after` is told with, in `Synced`, the event and `explain`.
pub const DELETION_BLOCKED: &str = "DeletionBlocked";

/// How long a failing deletion has been blocked: since `Synced` went False (`unsynced_since`, the
/// condition's transition time; `None` while it is True, when this is the first failure), and
/// not before the object was deleted (`deleted_at`): an object already failing when it was
/// deleted is blocked from its deletion on.
pub fn blocked_for(unsynced_since: Option<Timestamp>, deleted_at: Timestamp, now: Timestamp) -> Duration {
    let since = unsynced_since.map_or(now, |since| since.max(deleted_at));
    now.duration_since(since).try_into().unwrap_or_default()
}

/// The error a deletion that failed ends its reconcile with, given how long it has been blocked
/// ([`blocked_for`]). An answer that leaves the resource's existence unknown for `after` or
/// longer is said plainly, as [`DELETION_BLOCKED`]: what is unknown (the operator's message
/// names it) and the two ways out. Before that, and for a resource known to be still there
/// (whose message says what to do), the error with the way to keep the resource.
pub fn deletion_failed(error: ExternalError, blocked_for: Duration, after: Duration) -> ExternalError {
    if error.existence == Existence::Unknown && blocked_for >= after {
        let message = format!(
            "the deletion has been blocked for {}: the answers leave unknown whether what it deletes still exists ({}). Two ways out: fix what the answer names (a missing permission: grant it, and the controller finishes on its next look), or annotate the object {DELETION_POLICY_ANNOTATION}=Orphan to release it and keep whatever still exists",
            minutes(blocked_for),
            error.message
        );
        return ExternalError { reason: DELETION_BLOCKED.to_owned(), message, ..error };
    }
    // Still there is no failure of the call: the operator keeps it on purpose (it is in use).
    let what = match error.existence {
        Existence::StillThere => "the external resource is not deleted",
        _ => "deleting the external resource failed",
    };
    let message = format!(
        "{what}: {}; to delete the object and keep the external resource, annotate it {DELETION_POLICY_ANNOTATION}=Orphan",
        error.message
    );
    ExternalError { message, ..error }
}

/// "12 min", or "45 s" under a minute.
fn minutes(duration: Duration) -> String {
    match duration.as_secs() {
        secs if secs < 60 => format!("{secs} s"),
        secs => format!("{} min", secs / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AccessPermissions, DeletionPolicy};
    use ReconcileState::*;

    fn policies() -> Policies {
        Policies { paused: false, access: AccessPermissions::ALL, deletion: DeletionPolicy::Delete, drift: DriftPolicy::Enforce }
    }
    fn with_drift(drift: DriftPolicy) -> Policies {
        Policies { drift, ..policies() }
    }
    fn with_access(access: &str) -> Policies {
        Policies { access: access.parse().expect("valid permissions"), ..policies() }
    }
    fn error(class: ErrorClass) -> ExternalError {
        ExternalError::new(class, "Boom", "boom")
    }

    #[test]
    fn missing_resource_in_pending_writes_the_create_marker_first() {
        assert_eq!(plan(Pending, VerifyOutcome::Missing, &policies(), true, true), Plan::MarkCreating);
    }

    #[test]
    fn missing_resource_with_marker_is_created() {
        assert_eq!(plan(Creating, VerifyOutcome::Missing, &policies(), true, true), Plan::Create);
    }

    #[test]
    fn a_marker_written_for_another_spec_is_written_again_before_creating() {
        assert_eq!(plan(Creating, VerifyOutcome::Missing, &policies(), true, false), Plan::MarkCreating);
        assert_eq!(plan(Creating, VerifyOutcome::Error(error(ErrorClass::NotFound)), &policies(), true, false), Plan::MarkCreating);
    }

    #[test]
    fn resource_found_while_creating_is_adopted_not_created_again() {
        assert_eq!(plan(Creating, VerifyOutcome::Ready, &policies(), true, true), Plan::Ready);
        assert!(matches!(
            plan(Creating, VerifyOutcome::InProgress("x".into()), &policies(), true, true),
            Plan::Wait { state: Verifying, .. }
        ));
    }

    #[test]
    fn read_only_object_fails_when_resource_is_missing() {
        assert!(matches!(
            plan(Pending, VerifyOutcome::Missing, &with_access("none"), true, true),
            Plan::Fail { reason: "CreateNotPermitted", .. }
        ));
    }

    #[test]
    fn spec_change_is_updated_even_under_report_policy() {
        let p = plan(Succeeded, VerifyOutcome::UpdateRequired("size".into()), &with_drift(DriftPolicy::Report), true, true);
        assert_eq!(p, Plan::Update { drift: false });
    }

    #[test]
    fn drift_is_repaired_under_enforce() {
        assert_eq!(plan(Succeeded, VerifyOutcome::UpdateRequired("size".into()), &policies(), false, true), Plan::Update { drift: true });
    }

    #[test]
    fn drift_is_reported_or_recorded_under_report_and_suspend() {
        for policy in [DriftPolicy::Report, DriftPolicy::Suspend] {
            let p = plan(Succeeded, VerifyOutcome::UpdateRequired("size".into()), &with_drift(policy), false, true);
            assert_eq!(p, Plan::LeaveDrift { policy, message: "size".into() });
        }
    }

    #[test]
    fn externally_deleted_resource_is_recreated_only_under_enforce() {
        assert_eq!(plan(Succeeded, VerifyOutcome::Missing, &policies(), false, true), Plan::MarkCreating);
        for policy in [DriftPolicy::Report, DriftPolicy::Suspend] {
            assert_eq!(plan(Succeeded, VerifyOutcome::Missing, &with_drift(policy), false, true), Plan::LeaveMissing { policy });
        }
    }

    #[test]
    fn update_without_permission_fails() {
        assert!(matches!(
            plan(Succeeded, VerifyOutcome::UpdateRequired("x".into()), &with_access("CD"), true, true),
            Plan::Fail { reason: "UpdateNotPermitted", .. }
        ));
    }

    #[test]
    fn recreate_needs_create_and_delete_permissions() {
        assert!(matches!(
            plan(Succeeded, VerifyOutcome::RecreateRequired("x".into()), &with_access("CU"), true, true),
            Plan::Fail { reason: "RecreateNotPermitted", .. }
        ));
        assert_eq!(plan(Succeeded, VerifyOutcome::RecreateRequired("x".into()), &policies(), true, true), Plan::Recreate { drift: false });
    }

    #[test]
    fn recreating_waits_for_the_old_resource_then_creates() {
        assert_eq!(plan(Recreating, VerifyOutcome::Ready, &policies(), true, true), Plan::Recreate { drift: false });
        assert!(matches!(plan(Recreating, VerifyOutcome::Deleting, &policies(), true, true), Plan::Wait { state: Recreating, .. }));
        assert_eq!(plan(Recreating, VerifyOutcome::Missing, &policies(), true, true), Plan::MarkCreating);
    }

    #[test]
    fn verify_not_found_error_counts_as_missing() {
        assert_eq!(plan(Creating, VerifyOutcome::Error(error(ErrorClass::NotFound)), &policies(), true, true), Plan::Create);
    }

    #[test]
    fn verify_errors_are_passed_on() {
        assert_eq!(
            plan(Verifying, VerifyOutcome::Error(error(ErrorClass::Throttled)), &policies(), true, true),
            Plan::Error(error(ErrorClass::Throttled))
        );
    }

    #[test]
    fn failed_objects_are_retried_like_pending_ones() {
        assert_eq!(plan(Failed, VerifyOutcome::Missing, &policies(), true, true), Plan::MarkCreating);
        assert_eq!(plan(Failed, VerifyOutcome::Ready, &policies(), true, true), Plan::Ready);
    }

    const ALL_PURPOSES: [Purpose; 4] = [Purpose::FinishCreate, Purpose::FinishUpdate, Purpose::FinishRecreate, Purpose::Release];

    fn in_progress() -> Plan {
        Plan::Wait { state: Verifying, reason: "InProgress", message: "validating".into() }
    }

    #[test]
    fn a_read_only_object_never_runs_upkeep() {
        let read_only = with_access("none").access;
        for purpose in ALL_PURPOSES {
            assert!(!upkeep_runs(&Plan::Ready, purpose, &read_only), "{purpose:?} on a ready resource");
            assert!(!upkeep_runs(&in_progress(), purpose, &read_only), "{purpose:?} on a resource in progress");
            assert!(!upkeep_runs_deleting(&DeletePlan::Release, purpose, &read_only), "{purpose:?} as the object is released");
        }
    }

    #[test]
    fn each_upkeep_takes_the_permission_of_its_purpose() {
        let only = |letters: &str| with_access(letters).access;
        assert!(upkeep_runs(&in_progress(), Purpose::FinishCreate, &only("C")));
        assert!(!upkeep_runs(&in_progress(), Purpose::FinishCreate, &only("UD")));
        assert!(upkeep_runs(&Plan::Ready, Purpose::FinishUpdate, &only("U")));
        assert!(!upkeep_runs(&Plan::Ready, Purpose::FinishUpdate, &only("CD")));
        assert!(upkeep_runs(&Plan::Ready, Purpose::FinishRecreate, &only("D")));
        assert!(!upkeep_runs(&Plan::Ready, Purpose::FinishRecreate, &only("CU")));
    }

    /// The validation records a certificate waits for are the operator's own, never a repair of
    /// someone else's change: Report and Suspend do not hold them back, or the certificate would
    /// never be issued.
    #[test]
    fn finishing_a_create_runs_under_every_drift_policy_when_nothing_drifted() {
        for policy in [DriftPolicy::Enforce, DriftPolicy::Report, DriftPolicy::Suspend] {
            let policies = with_drift(policy);
            let planned = plan(Verifying, VerifyOutcome::InProgress("validating".into()), &policies, false, false);
            assert!(upkeep_runs(&planned, Purpose::FinishCreate, &policies.access), "{policy}");
            let planned = plan(Succeeded, VerifyOutcome::Ready, &policies, false, false);
            assert!(upkeep_runs(&planned, Purpose::FinishCreate, &policies.access), "{policy}");
        }
    }

    #[test]
    fn a_resource_left_drifted_or_missing_by_report_or_suspend_gets_no_upkeep() {
        for policy in [DriftPolicy::Report, DriftPolicy::Suspend] {
            let policies = with_drift(policy);
            let drifted = plan(Succeeded, VerifyOutcome::UpdateRequired("size".into()), &policies, false, true);
            let missing = plan(Succeeded, VerifyOutcome::Missing, &policies, false, true);
            for purpose in ALL_PURPOSES {
                assert!(!upkeep_runs(&drifted, purpose, &policies.access), "{policy}: {purpose:?} on a drifted resource");
                assert!(!upkeep_runs(&missing, purpose, &policies.access), "{policy}: {purpose:?} on a missing resource");
            }
        }
    }

    #[test]
    fn upkeep_waits_while_the_resource_is_created_updated_or_recreated() {
        for planned in [
            Plan::MarkCreating,
            Plan::Create,
            Plan::Update { drift: true },
            Plan::Update { drift: false },
            Plan::Recreate { drift: false },
            Plan::Wait { state: Recreating, reason: "Deleting", message: String::new() },
        ] {
            for purpose in ALL_PURPOSES {
                assert!(!upkeep_runs(&planned, purpose, &policies().access), "{purpose:?} beside {planned:?}");
            }
        }
    }

    #[test]
    fn upkeep_does_not_run_after_a_failure() {
        let failed = plan(Succeeded, VerifyOutcome::UpdateRequired("x".into()), &with_access("CD"), true, true);
        let error = plan(Verifying, VerifyOutcome::Error(error(ErrorClass::Retryable)), &policies(), true, true);
        for purpose in ALL_PURPOSES {
            assert!(!upkeep_runs(&failed, purpose, &policies().access));
            assert!(!upkeep_runs(&error, purpose, &policies().access));
        }
    }

    #[test]
    fn release_runs_only_as_a_deleted_object_is_released() {
        let access = policies().access;
        assert!(!upkeep_runs(&Plan::Ready, Purpose::Release, &access), "a live object is not released");
        assert!(upkeep_runs_deleting(&DeletePlan::Release, Purpose::Release, &access));
        for waiting in [DeletePlan::Delete, DeletePlan::Wait, DeletePlan::Error(error(ErrorClass::Retryable))] {
            assert!(!upkeep_runs_deleting(&waiting, Purpose::Release, &access), "{waiting:?}");
        }
    }

    #[test]
    fn nothing_of_a_resource_being_deleted_is_finished() {
        for purpose in [Purpose::FinishCreate, Purpose::FinishUpdate, Purpose::FinishRecreate] {
            assert!(!upkeep_runs_deleting(&DeletePlan::Release, purpose, &policies().access), "{purpose:?}");
        }
    }

    #[test]
    fn create_and_update_outcomes_lead_to_verifying_or_succeeded() {
        assert_eq!(after_create(MutateOutcome::AwaitingVerification), AfterCall::MoveTo(Verifying));
        assert_eq!(after_create(MutateOutcome::Succeeded), AfterCall::MoveTo(Succeeded));
        assert_eq!(after_update(MutateOutcome::Succeeded), AfterCall::MoveTo(Succeeded));
        assert_eq!(
            after_update(MutateOutcome::Error(error(ErrorClass::Retryable))),
            AfterCall::Error { retry_in: Updating, error: error(ErrorClass::Retryable) }
        );
    }

    #[test]
    fn recreate_delete_leads_to_create_or_waits() {
        assert_eq!(after_recreate_delete(DeleteOutcome::Succeeded), AfterCall::MarkCreating);
        assert_eq!(after_recreate_delete(DeleteOutcome::AwaitingVerification), AfterCall::MoveTo(Recreating));
    }

    #[test]
    fn deleting_a_missing_resource_releases_the_object() {
        assert_eq!(plan_delete(VerifyOutcome::Missing), DeletePlan::Release);
        assert_eq!(after_delete(DeleteOutcome::Error(error(ErrorClass::NotFound))), DeletePlan::Release);
    }

    #[test]
    fn an_answer_that_proves_the_resource_gone_releases_the_object_and_others_do_not() {
        let gone = ExternalError::not_found("NoSuchHostedZone", "no zone");
        assert_eq!(plan_delete(VerifyOutcome::Error(gone.clone())), DeletePlan::Release);
        assert_eq!(after_delete(DeleteOutcome::Error(gone.clone())), DeletePlan::Release);
        assert_eq!(after_recreate_delete(DeleteOutcome::Error(gone)), AfterCall::MarkCreating);
        let in_use = ExternalError::still_there("CertificateInUse", "in use");
        assert_eq!(after_delete(DeleteOutcome::Error(in_use.clone())), DeletePlan::Error(in_use));
        for unknown in [error(ErrorClass::Terminal), error(ErrorClass::Retryable), error(ErrorClass::Throttled)] {
            assert_eq!(unknown.existence, Existence::Unknown);
            assert_eq!(after_delete(DeleteOutcome::Error(unknown.clone())), DeletePlan::Error(unknown));
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("valid")
    }

    #[test]
    fn a_deletion_is_blocked_from_when_synced_went_false_but_not_before_the_deletion() {
        assert_eq!(blocked_for(None, at(100), at(400)), Duration::ZERO, "Synced is True: the first failure");
        assert_eq!(blocked_for(Some(at(200)), at(100), at(400)), Duration::from_secs(200));
        assert_eq!(blocked_for(Some(at(0)), at(100), at(400)), Duration::from_secs(300), "failing before the deletion");
    }

    #[test]
    fn an_unknown_blocking_longer_than_the_limit_is_said_plainly_with_both_ways_out() {
        let limit = Duration::from_secs(300);
        let denied = ExternalError::terminal("AccessDenied", "the CNAME records of www.example.com in hosted zone Z1: access denied");
        let early = deletion_failed(denied.clone(), Duration::from_secs(299), limit);
        assert_eq!(early.reason, "AccessDenied");
        assert!(early.message.starts_with("deleting the external resource failed: the CNAME records"), "{}", early.message);
        let blocked = deletion_failed(denied, Duration::from_secs(12 * 60), limit);
        assert_eq!((blocked.reason.as_str(), blocked.class), (DELETION_BLOCKED, ErrorClass::Terminal));
        assert!(blocked.message.starts_with("the deletion has been blocked for 12 min"), "{}", blocked.message);
        assert!(
            blocked.message.contains("(the CNAME records of www.example.com in hosted zone Z1: access denied)"),
            "names what is unknown"
        );
        assert!(
            blocked.message.contains("grant it") && blocked.message.contains("blockwork.dev/deletion-policy=Orphan"),
            "{}",
            blocked.message
        );
    }

    #[test]
    fn a_resource_known_to_be_still_there_is_not_called_unknown_however_long_it_waits() {
        let in_use = ExternalError::still_there("CertificateInUse", "in use by 2 AWS resources; detach it");
        let told = deletion_failed(in_use, Duration::from_secs(3600), Duration::from_secs(300));
        assert_eq!(told.reason, "CertificateInUse");
        assert!(told.message.starts_with("the external resource is not deleted: in use"), "kept, no failure: {}", told.message);
        assert!(told.message.contains("detach it") && told.message.contains("=Orphan"), "{}", told.message);
    }

    #[test]
    fn deletion_waits_for_asynchronous_delete() {
        assert_eq!(plan_delete(VerifyOutcome::Ready), DeletePlan::Delete);
        assert_eq!(after_delete(DeleteOutcome::AwaitingVerification), DeletePlan::Wait);
        assert_eq!(plan_delete(VerifyOutcome::Deleting), DeletePlan::Wait);
    }
}
