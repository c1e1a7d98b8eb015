//! The catalog's entries: Who may act where (ADR 0014): the AwsIdentity mappings and the grants.

use super::Scope::Identity;
use super::{Entry, MAPPING, NOTHING, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
    problem(
        "NoAwsIdentity",
        Identity,
        "No AwsIdentity lists the object's namespace, and the operator acts for such namespaces only when allowed (--aws-unmapped-namespaces refuse): nothing was asked of AWS.",
        MAPPING,
    ),
    problem(
        "AwsIdentityConflict",
        Identity,
        "Two AwsIdentities list the object's namespace: Blockwork acts for it through neither, and asked nothing of AWS.",
        MAPPING,
    ),
    problem(
        "AwsIdentityInvalid",
        Identity,
        "The AwsIdentity of the object's namespace contradicts itself or another (a zone reached through two accounts, a zone granted twice, a name outside its zone): nothing was asked of AWS.",
        MAPPING,
    ),
    waiting(
        "AwsIdentitiesNotRead",
        Identity,
        "The operator has not read the AwsIdentity mappings yet (just started), so it cannot tell which identity the namespace acts as; retried.",
        "Nothing to do unless it lasts; then check that the AwsIdentity CRD is installed and the operator may list awsidentities (`blockwork check`).",
    ),
    problem(
        "NotGranted",
        Identity,
        "spec.dns names a hosted zone, a role (spec.dns.assumeRoleArn) or domains the namespace's AwsIdentity does not grant; refused before any AWS call.",
        "Use a zone the mapping grants and leave spec.dns.assumeRoleArn out (the mapping says how to reach the zone), or ask the platform team to grant it.",
    ),
    problem(
        "HostedZoneNotGranted",
        Identity,
        "A validation record is in a hosted zone the namespace is no longer granted: it is neither written nor deleted there.",
        "Grant the zone again in the namespace's AwsIdentity, or remove the record by hand and `blockwork retry` the Cert.",
    ),
    waiting(
        "AccountBackingOff",
        Identity,
        "AWS throttles the calls of this object's account (someone else spends its quota), since the time the message gives: while one call backs off, the others of that account are not sent, and an object that needs the account's certificate listing while AWS throttles it waits for the listing's retries instead of making its own, so the other accounts' objects keep the workers. Said once, not at every retry; the object is looked at again when the listing answers.",
        "Nothing to do for a burst; if it lasts, find who else uses the account's quota, or ask AWS for a higher one.",
    ),
    problem(
        "AwsIdentityChanged",
        Identity,
        "The namespace's mapping now acts in another AWS account than the one holding the object's certificate or tenant: the object is held, nothing is created in the new account and nothing touched in the old one. As an event: the object was deleted while held and released, and the event names what stays in the old account.",
        "Map the namespace back to go on; or delete the object (released, its resources stay where they are; delete them there) and create it again. docs/multi-account.md, \"Changing a mapping\".",
    ),
    waiting(
        "AwsIdentityAccountUnknown",
        Identity,
        "The namespace acts through another identity than before, and the account it acts in could not be told yet (STS GetCallerIdentity failed), so whether the object moved accounts is unknown; nothing was written; retried.",
        "Nothing to do unless it lasts; then check the operator's access to STS (`blockwork check`).",
    ),
    problem(
        "InvalidMapping",
        Identity,
        "(AwsIdentity) The mapping lists a namespace another lists, or contradicts itself or another; its namespaces' objects are refused (AwsIdentityConflict, AwsIdentityInvalid).",
        "Fix the fields the message names; `kubectl get awsidentities` shows the others.",
    ),
    problem(
        "AssumeRoleFailed",
        Identity,
        "A role the namespace's AwsIdentity names cannot be assumed (on the AwsIdentity's Ready, and on its namespaces' Certs and DistributionTenants, whose message names the mapping): its trust policy does not trust the operator's role, wants another ExternalId, or the operator may not call sts:AssumeRole on it.",
        "Fix the role's trust policy (docs/multi-account.md has the one Blockwork needs) or the mapping's roleArn and externalId.",
    ),
    fine("Ready", Identity, "(AwsIdentity) The mapping is valid among the others and every role it names was assumed.", NOTHING),
];
