//! The catalog's entries: Key rotator (events on Secrets).

use super::Scope::Rotator;
use super::{Entry, NOTHING, fine, problem};

pub(super) const ENTRIES: &[Entry] = &[
    fine("TargetCreated", Rotator, "The target Secret was created with the source's certificate as next-tls.", NOTHING),
    fine("Created", Rotator, "This target was created from its source.", NOTHING),
    fine("Rotated", Rotator, "prev-tls ← tls ← next-tls ← source: the key set moved one step.", NOTHING),
    fine("TargetUpdated", Rotator, "The target was written without rotating (adoption, repair, JWKS on or off).", NOTHING),
    fine("Updated", Rotator, "This target was written without rotating (adoption, repair, JWKS on or off).", NOTHING),
    fine(
        "SourceDeleted",
        Rotator,
        "The source was deleted; the target is kept as it is and no longer rotates.",
        "Point a new source at it to continue rotating, or delete it.",
    ),
    problem(
        "InvalidSource",
        Rotator,
        "The source lacks a non-empty tls.crt or tls.key; nothing is written.",
        "Fix the source Secret (cert-manager writes both); the target follows at once.",
    ),
    problem(
        "InvalidDestination",
        Rotator,
        "The source's destination-secret-name annotation is missing, empty, not a Secret name, or the source itself.",
        "Set <prefix>/destination-secret-name to the target's name.",
    ),
    problem(
        "TargetNotManaged",
        Rotator,
        "The target Secret exists and was not made by a rotator: it is never overwritten.",
        "Hand it over: `kubectl annotate secret TARGET <prefix>/adopt=true`, or name another target.",
    ),
    problem(
        "TargetConflict",
        Rotator,
        "Another source already rotates this target; the first source to claim it owns it.",
        "Point this source at another target, or delete the other source (this one then takes the target over).",
    ),
    problem(
        "InvalidAnnotation",
        Rotator,
        "An annotation under the rotator's prefix has a value (or a key) the rotator does not accept; nothing is written.",
        "Fix the annotation named in the message (true or false, or a known key).",
    ),
    problem(
        "JwksKeySkipped",
        Rotator,
        "A certificate could not be put into jwks.json (not PEM X.509, or an unsupported key type).",
        "Use RSA, P-256, P-384 or Ed25519 keys.",
    ),
    problem(
        "WriteFailed",
        Rotator,
        "Writing the target failed for another reason than a conflict; retried with backoff.",
        "Read the message: usually RBAC (secrets create/update) or a quota.",
    ),
];
