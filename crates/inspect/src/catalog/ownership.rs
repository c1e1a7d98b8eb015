//! The catalog's entries: ownership of AWS resources (ADR 0017): adopting what exists, handing
//! it over between objects (and clusters), and the same manifest elsewhere.

use super::Entry;
use super::Scope::Ownership;
use super::problem;

pub(super) const ENTRIES: &[Entry] = &[
    problem(
        "AdoptionMismatch",
        Ownership,
        "The resource spec.adopt names (a Cert's certificateArn, a DistributionTenant's tenantId) differs from the spec; the message lists every difference. Nothing was written.",
        "Change the spec to match the resource (an ACM certificate cannot be changed), or adopt another one; the controller looks again when the spec changes.",
    ),
    problem(
        "AdoptionRefused",
        Ownership,
        "The resource spec.adopt names is in another AWS account or region than the namespace acts in, uses a hosted zone the namespace is not granted, or does not exist there; nothing was written.",
        "Adopt a resource of the namespace's own account and region, or ask the platform team to map the namespace to that account or grant the zone (docs/multi-account.md).",
    ),
    problem(
        "OwnershipLost",
        Ownership,
        "Another Blockwork object (the message names it; e.g. the same manifest in another cluster) adopted the resource: this object no longer acts on it and, when deleted, deletes nothing in AWS (status.ownershipLost). It never takes the resource back by itself.",
        "Usually nothing: delete this object once the other one manages the resource (docs/adopting.md). To manage it from here again, delete this object and apply it with spec.adopt naming the resource.",
    ),
    problem(
        "OwnedElsewhere",
        Ownership,
        "A resource for exactly this spec exists, owned by an object of the same namespace and name elsewhere (the same manifest in another cluster, or an earlier object of that name); nothing is created: it would be a duplicate.",
        "Adopt it: set spec.adopt (a Cert's certificateArn, as the message names it); the other object then stops acting on it (docs/adopting.md, moving clusters).",
    ),
];
