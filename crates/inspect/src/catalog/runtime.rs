//! The catalog's entries: The runtime: states, Ready and Synced, and events only.

use super::Scope::Runtime;
use super::{Entry, NOTHING, WAIT_STATE, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
    waiting("Pending", Runtime, "Not created yet, or waiting for dependencies.", WAIT_STATE),
    waiting("Creating", Runtime, "The create-pending marker is written; the create call follows.", WAIT_STATE),
    waiting("Updating", Runtime, "An update was accepted or is being retried.", WAIT_STATE),
    waiting(
        "Verifying",
        Runtime,
        "Waiting for the external resource to become ready (e.g. ACM validation, CloudFront deployment).",
        WAIT_STATE,
    ),
    fine("Succeeded", Runtime, "The external resource is ready and matches the spec.", NOTHING),
    waiting(
        "Recreating",
        Runtime,
        "The external resource is being deleted so it can be created again (a change that needs a new one).",
        WAIT_STATE,
    ),
    problem(
        "Failed",
        Runtime,
        "A terminal error: the controller retries only on the Failed interval (5 minutes) or when the spec changes.",
        "Read the Ready condition's reason and message, fix the cause, then `blockwork retry KIND/NAME` to try at once.",
    ),
    waiting("Terminating", Runtime, "The object is being deleted and so is its external resource.", WAIT_STATE),
    problem(
        "DeletionBlocked",
        Runtime,
        "The deletion has been retried for longer than the controller's limit (5 minutes) on answers that leave unknown whether what it deletes still exists (access denied, throttling, AWS errors); the message names it. The finalizer stays so nothing leaks; answers that prove a thing gone (not found, its hosted zone gone) never block.",
        "Either fix what the message names (grant the IAM action, or wait out an outage): the controller finishes the deletion on its next look (`blockwork retry KIND/NAME` for at once); or keep what may still exist and release the object: `kubectl annotate KIND NAME blockwork.dev/deletion-policy=Orphan`.",
    ),
    fine("Available", Runtime, "Ready: the external resource is ready for use.", NOTHING),
    waiting(
        "InProgress",
        Runtime,
        "The external resource is being created or changed by its API; the message says what it waits for.",
        WAIT_STATE,
    ),
    waiting(
        "Deleting",
        Runtime,
        "The external resource is being deleted (by this controller, or outside Kubernetes).",
        "Nothing to do unless it lasts; if it was deleted outside Kubernetes, the controller creates it again once it is gone (drift policy enforce).",
    ),
    waiting(
        "DependenciesNotReady",
        Runtime,
        "An object this one depends on (a DistributionTenant's Cert, spec.customizations.certificate.certRef) is missing, not Ready, changed and not reconciled yet, or being deleted; the message names it and says why in its own words. Nothing is asked of AWS while it waits.",
        "Make the named object Ready (`blockwork explain` on it): this one is woken when it changes, not polled. One being deleted waits for this one to let go: name another, or remove the reference.",
    ),
    problem(
        "ExternalResourceMissing",
        Runtime,
        "The external resource was deleted outside Kubernetes, and the drift policy (report or suspend) says not to recreate it.",
        "Recreate it by setting the drift policy to enforce (`kubectl annotate KIND NAME blockwork.dev/drift-policy=enforce --overwrite`), or delete the object.",
    ),
    fine("ReconcileSuccess", Runtime, "Synced: the last reconcile reached the external API and the resource matches the spec.", NOTHING),
    waiting(
        "ReconcilePaused",
        Runtime,
        "Reconciling is paused by the annotation blockwork.dev/paused, deletion included.",
        "`blockwork resume KIND/NAME` (or remove the annotation) to reconcile again.",
    ),
    problem(
        "InvalidAnnotation",
        Runtime,
        "A blockwork.dev/ annotation has a value (or a key) the controller does not accept; nothing is done until it is fixed (an invalid pause holds the object as a pause would).",
        "Fix or remove the annotation named in the message; it lists the accepted values or keys.",
    ),
    problem(
        "DriftDetected",
        Runtime,
        "The external resource was changed outside Kubernetes; drift policy report leaves it so and says so here.",
        "Either change it back (or set blockwork.dev/drift-policy=enforce to let the controller do it), or bring the spec in line with it.",
    ),
    fine(
        "DriftIgnored",
        Runtime,
        "The external resource was changed outside Kubernetes; drift policy enforce repairs it, suspend only records it (status.driftDetected).",
        "Nothing to do under enforce; under suspend, repair it yourself or switch to enforce.",
    ),
    problem(
        "SuccessHookFailed",
        Runtime,
        "The external resource is ready, but the follow-up work after it (e.g. publishing the Cert's ConfigMap) failed; retried with backoff.",
        "Read the message (often RBAC or a conflicting object) and fix it; the next retry completes it.",
    ),
    problem(
        "CreateNotPermitted",
        Runtime,
        "The external resource does not exist and blockwork.dev/access-permissions does not allow creating it.",
        "Create it outside Kubernetes (the controller then adopts it), or add C to blockwork.dev/access-permissions.",
    ),
    problem(
        "UpdateNotPermitted",
        Runtime,
        "The external resource needs an update and blockwork.dev/access-permissions does not allow updating it.",
        "Add U to blockwork.dev/access-permissions, or make the change outside Kubernetes.",
    ),
    problem(
        "RecreateNotPermitted",
        Runtime,
        "The external resource must be replaced and blockwork.dev/access-permissions does not allow deleting and creating it.",
        "Add C and D to blockwork.dev/access-permissions, or undo the spec change that needs a new resource.",
    ),
    fine(
        "SpecUpdated",
        Runtime,
        "The controller wrote a value the external system assigned into the spec (e.g. an issued certificate's ARN).",
        NOTHING,
    ),
    fine("Orphaned", Runtime, "The object was deleted and its external resource kept (deletion policy Orphan).", NOTHING),
    fine("Deleted", Runtime, "The object was deleted and so was its external resource.", NOTHING),
    fine(
        "Released",
        Runtime,
        "The object was deleted with nothing to delete: the external resource was gone, or the operator keeps it (a Cert without deleteOnRemoval).",
        NOTHING,
    ),
];
