//! The state machine as pure functions: what to do given the state and what `verify` saw, and
//! where each outcome leads. No I/O here, so every transition is unit tested.

use crate::outcome::{DeleteOutcome, ErrorClass, ExternalError, MutateOutcome, VerifyOutcome};
use crate::policy::{DriftPolicy, Policies};
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
        DeleteOutcome::Error(e) if e.class == ErrorClass::NotFound => AfterCall::MarkCreating,
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

pub fn plan_delete(verified: VerifyOutcome) -> DeletePlan {
    match verified {
        VerifyOutcome::Missing => DeletePlan::Release,
        VerifyOutcome::Error(e) if e.class == ErrorClass::NotFound => DeletePlan::Release,
        VerifyOutcome::Error(e) => DeletePlan::Error(e),
        VerifyOutcome::Deleting => DeletePlan::Wait,
        _ => DeletePlan::Delete,
    }
}

/// After `delete` during finalization: release, wait, or report. 404 is success.
pub fn after_delete(outcome: DeleteOutcome) -> DeletePlan {
    match outcome {
        DeleteOutcome::Succeeded => DeletePlan::Release,
        DeleteOutcome::AwaitingVerification => DeletePlan::Wait,
        DeleteOutcome::Error(e) if e.class == ErrorClass::NotFound => DeletePlan::Release,
        DeleteOutcome::Error(e) => DeletePlan::Error(e),
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
    fn deletion_waits_for_asynchronous_delete() {
        assert_eq!(plan_delete(VerifyOutcome::Ready), DeletePlan::Delete);
        assert_eq!(after_delete(DeleteOutcome::AwaitingVerification), DeletePlan::Wait);
        assert_eq!(plan_delete(VerifyOutcome::Deleting), DeletePlan::Wait);
    }
}
