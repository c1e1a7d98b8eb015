//! Every reason Blockwork sets — condition reasons and event reasons, of every controller — with
//! what it means and what to do about it. `blockwork explain` shows the entry of each reason an
//! object carries; `docs/troubleshooting.md` lists them all (a test keeps the two the same), and
//! a test scans the operators' sources so that a reason nobody explained fails the build.
//!
//! Reasons that are AWS error codes pass through as AWS sent them (`AccessDeniedException`,
//! `ThrottlingException`, ...): the common ones are listed, and [`lookup`] explains any other
//! by its family (access, throttling, not found, limits), so no reason is ever left without a
//! next step.

use serde::Serialize;

/// Which objects a reason is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scope {
    /// Set by the runtime, on every kind it reconciles (Cert, DistributionTenant).
    Runtime,
    Cert,
    DistributionTenant,
    Cache,
    /// The key rotator's events on Secrets.
    Rotator,
    /// An AWS error code passed on as the reason (Cert, DistributionTenant).
    Aws,
    /// Who may act where (ADR 0014): on Certs and DistributionTenants whose namespace's AwsIdentity
    /// refuses them, and the AwsIdentity's own `Ready`.
    Identity,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runtime => "runtime (Cert, DistributionTenant)",
            Self::Cert => "Cert",
            Self::DistributionTenant => "DistributionTenant",
            Self::Cache => "Cache",
            Self::Rotator => "key rotator (Secrets)",
            Self::Aws => "AWS error code (Cert, DistributionTenant)",
            Self::Identity => "AWS identity (Cert, DistributionTenant; AwsIdentity's Ready)",
        }
    }
}

/// Whether a reason is good news, a wait, or something a person must fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// Done, or progressing as it should.
    Fine,
    /// Waiting for something that comes by itself (AWS, DNS, pods); act only if it lasts.
    Waiting,
    /// Retried by the controller, but something outside it is wrong until someone acts.
    Problem,
}

/// One reason, explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub reason: &'static str,
    pub scope: Scope,
    pub severity: Severity,
    /// What it means, in one sentence.
    pub meaning: &'static str,
    /// What to do next.
    pub fix: &'static str,
}

const fn fine(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Fine, meaning, fix }
}

const fn waiting(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Waiting, meaning, fix }
}

const fn problem(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Problem, meaning, fix }
}

use Scope::{Aws, Cache, Cert, DistributionTenant as Tenant, Identity, Rotator, Runtime};

const NOTHING: &str = "Nothing to do.";
const WAIT_STATE: &str = "Nothing to do unless it lasts; `blockwork explain` shows how long it has and what it waits for.";
const ACCESS: &str = "Grant the IAM identity the call acts as the action named in the message: the operator's, or the role of the \
namespace's AwsIdentity (`status.awsIdentity` names it; docs/iam/ has each controller's policy; `blockwork check` tests every mapped \
role), then `blockwork retry KIND/NAME`.";
const MAPPING: &str = "Ask the platform team to fix the AwsIdentity mappings (docs/multi-account.md; `kubectl get awsidentities` shows \
each one's Ready); the objects of its namespaces are looked at again as soon as a mapping changes.";
const THROTTLED: &str = "Nothing to do for a burst: the controller backs off (at least a minute) and retries. If it lasts, lower the \
operator's rate limits (--acm-rate-limit, --route53-rate-limit) or ask AWS for a higher quota.";

/// Every reason, in the order `docs/troubleshooting.md` lists them.
pub const ENTRIES: &[Entry] = &[
    // --- The runtime: states (event reasons on each transition) --------------------------
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
    // --- The runtime: Ready and Synced ------------------------------------------------------
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
        "An object this one depends on is missing or not Ready; the message names it.",
        "Make the named object Ready (`blockwork explain` on it); this one follows at once.",
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
    // --- The runtime: events only -----------------------------------------------------------
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
    // --- Cert ---------------------------------------------------------------------------------
    problem(
        "InvalidSpec",
        Cert,
        "The spec cannot be turned into a certificate: usually a domain in no hosted zone the controller is configured with (--dns-zones).",
        "Fix spec.domainName, spec.subjectAlternativeNames or spec.dnsZone, or add the zone to the controller's --dns-zones.",
    ),
    waiting("NotMarked", Cert, "A create was attempted without its create-pending marker; the next reconcile writes it.", WAIT_STATE),
    problem(
        "CertificateInUse",
        Cert,
        "The ACM certificate is attached to AWS resources (load balancers, CloudFront) and is not deleted.",
        "Detach it from the resources named in ACM, or set spec.deleteOnRemoval: false to keep it; the controller retries.",
    ),
    problem(
        "NameTooLong",
        Cert,
        "The ConfigMap <name>-certificate that publishes the ARN would exceed Kubernetes' name length.",
        "Give the Cert a shorter name.",
    ),
    problem("MissingMetadata", Cert, "The object has no UID (never the case for an object read from the API server).", "Report a bug."),
    problem(
        "ConfigMapFailed",
        Cert,
        "Publishing the ARN in the ConfigMap <name>-certificate failed; retried with backoff.",
        "Read the message: usually the operator's RBAC on configmaps in this namespace (`blockwork rbac`).",
    ),
    fine(
        "Exported",
        Cert,
        "The Cert's certificate, its chain and its key are in the Secret spec.export.secretName (condition Exported=True; status.export says which serial and when).",
        "Nothing; after each ACM renewal the Secret is written again within a sweep of the certificate listing.",
    ),
    waiting(
        "WaitingForCertificate",
        Cert,
        "The Cert exports its certificate, which ACM has not issued yet (condition Exported=False).",
        "Nothing; the Secret is written once the certificate is issued. If it lasts, see the Cert's Ready condition.",
    ),
    problem(
        "ExportNotEnabled",
        Cert,
        "The Cert asks for spec.export but this installation does not let Certs export into Secrets; no certificate is requested for it.",
        "Enable export at install (the chart's controllers.cert.exportSecrets=true, or blockwork run --export-secrets with the RBAC of blockwork rbac --opt-in cert.export-secrets), or remove spec.export.",
    ),
    problem(
        "ExportNotPermitted",
        Cert,
        "The Cert's access-permissions do not include C (create), which writes the exported Secret.",
        "Allow creating (blockwork.dev/access-permissions with C, or remove the annotation), or remove spec.export.",
    ),
    problem(
        "SecretConflict",
        Cert,
        "A Secret named as spec.export.secretName exists that this Cert did not write (no acm.blockwork.dev/cert-uid label, or another Cert's); it is never overwritten.",
        "Delete that Secret (the Cert writes its own at the next retry), or choose another spec.export.secretName.",
    ),
    problem(
        "SecretDrifted",
        Cert,
        "Someone changed or deleted the exported Secret, and the drift policy (report or suspend) leaves it as it is.",
        "Annotate the Cert blockwork.dev/drift-policy=enforce (or remove the annotation) to have it written again, or delete the Secret.",
    ),
    problem(
        "ExportFailed",
        Cert,
        "ACM's ExportCertificate failed; the Cert stays Ready (its certificate is fine) and the export is retried with the backoff.",
        "Read the message: an access error needs acm:ExportCertificate in the operator's IAM policy (docs/iam/cert-operator-policy.json).",
    ),
    problem(
        "ExportUnusable",
        Cert,
        "ACM exported a certificate whose key is not the certificate's, or that does not parse; nothing was written.",
        "Retried with the backoff; if it lasts, check the certificate in ACM and report it.",
    ),
    problem(
        "UndecryptablePrivateKey",
        Cert,
        "The private key ExportCertificate returned could not be decrypted with the passphrase of the export; nothing was written.",
        "Retried with the backoff (each export has a new passphrase); if it lasts, report it.",
    ),
    waiting(
        "SecretChanged",
        Cert,
        "The exported Secret was created or changed by someone else while the certificate was exported; nothing was overwritten.",
        "Nothing; the next look decides again (a Secret not the Cert's then shows SecretConflict).",
    ),
    problem(
        "SecretWriteFailed",
        Cert,
        "Reading, writing or deleting the exported Secret failed (the message has the API server's answer).",
        "A Forbidden answer means the operator lacks the Secret permissions of export (blockwork rbac --opt-in cert.export-secrets); otherwise retried with the backoff.",
    ),
    problem(
        "CertificateAuthorityNotAllowed",
        Cert,
        "spec.certificateAuthorityArn names a private CA this installation does not issue from; nothing is requested.",
        "Name one of the CAs of --certificate-authorities (the chart's controllers.cert.certificateAuthorities), or ask the platform team to add it.",
    ),
    problem(
        "CertificateAuthorityInOtherRegion",
        Cert,
        "The private CA is in another region than ACM's; ACM issues private certificates only from a CA in its own region.",
        "Name a CA in the operator's region (--aws-region), or run the Cert where the CA is.",
    ),
    problem(
        "CertificateAuthorityNotActive",
        Cert,
        "The private CA is not ACTIVE (disabled, expired, deleted, or without its CA certificate), so it issues nothing; nothing is requested.",
        "Do what the message says (enable it, install its certificate, restore it); the Cert retries every few minutes.",
    ),
    problem(
        "CertificateAuthorityNotFound",
        Cert,
        "The private CA does not exist, or the namespace's AWS identity cannot see it (deleted for good, a wrong ARN, or not shared with its account); nothing is requested.",
        "Fix spec.certificateAuthorityArn, name another CA, or share the CA with the account the namespace acts in (docs/multi-account.md).",
    ),
    problem(
        "CertificateAuthorityFailed",
        Cert,
        "ACM could not have the private CA issue the certificate (the message has ACM's PCA_ reason).",
        "Fix the CA as the message says (state, permission for acm.amazonaws.com, validity, name constraints), then retry: blockwork retry cert/NAME.",
    ),
    problem(
        "ConfigMapConflict",
        Cert,
        "A ConfigMap <name>-certificate exists and belongs to someone else; it is never overwritten.",
        "Delete or rename that ConfigMap, or give the Cert another name.",
    ),
    problem(
        "ValidationTimedOut",
        Cert,
        "ACM did not validate the certificate in time (the controller's --validation-timeout, 72 hours by default, or ACM's own 72 hours).",
        "Check that the validation CNAMEs in status.validationRecords resolve publicly (the zone must be delegated); then change the spec or `blockwork retry` to request it again.",
    ),
    problem(
        "ValidationFailed",
        Cert,
        "ACM refused to issue the certificate; the message has ACM's failure reason (e.g. CAA records, a domain ACM cannot issue for).",
        "Fix the cause ACM names (CAA records must allow amazon.com), then `blockwork retry`.",
    ),
    problem("Revoked", Cert, "The ACM certificate was revoked.", "Request a new one: change the spec, or delete and recreate the Cert."),
    problem(
        "Expired",
        Cert,
        "The ACM certificate expired: ACM could not renew it (its validation records were missing or not in use).",
        "Check the validation records in status.validationRecords, then delete and recreate the Cert to request a new certificate.",
    ),
    problem(
        "RenewalFailed",
        Cert,
        "ACM's managed renewal of the certificate failed (condition Renewed=False): it still serves, and the Cert stays Ready, until it expires (status.expirationDate).",
        "Check that the validation CNAMEs in status.validationRecords still exist and resolve, and the cause ACM names (CAA records); ACM retries the renewal on its own once they do.",
    ),
    problem("Inactive", Cert, "The ACM certificate is inactive.", "Request a new one: change the spec, or delete and recreate the Cert."),
    problem(
        "UnknownStatus",
        Cert,
        "ACM reports a status this version of Blockwork does not know.",
        "Look at the certificate in ACM; upgrade Blockwork if ACM has a new status.",
    ),
    problem(
        "AwsError",
        Cert,
        "An AWS call failed without an error code (a timeout, a refused connection); retried with backoff.",
        "Check the operator's network path to AWS (proxies, VPC endpoints, --aws-endpoint-url) if it lasts; `blockwork check` tests it.",
    ),
    // --- DistributionTenant -------------------------------------------------------------------
    problem(
        "InvalidSpec",
        Tenant,
        "The spec breaks a rule CloudFront enforces (parameters, domains, geo restrictions); the message names the field.",
        "Fix the field named in the message.",
    ),
    waiting("DNSRecordCreating", Tenant, "The CNAME records were submitted to Route53.", WAIT_STATE),
    waiting(
        "DNSPropagating",
        Tenant,
        "Route53 has not yet reported the record change INSYNC (usually under a minute).",
        "Nothing to do unless it lasts minutes; then check the change in Route53.",
    ),
    fine("DNSReady", Tenant, "The CNAME records are INSYNC in Route53.", NOTHING),
    fine(
        "DNSNotConfigured",
        Tenant,
        "spec.dns is not set: the operator does not manage the tenant's DNS.",
        "Point the domains at status.dnsTarget yourself.",
    ),
    problem(
        "DNSError",
        Tenant,
        "A Route53 (or STS, for spec.dns.assumeRoleArn) call failed for good: no such hosted zone, access denied, or an invalid change.",
        "Check spec.dns.hostedZoneId, the operator's Route53 permissions (or the assumed role's trust policy), then `blockwork retry`.",
    ),
    problem(
        "DNSThrottling",
        Tenant,
        "Route53 throttled the operator (Throttling or PriorRequestNotComplete); retried after at least a minute.",
        THROTTLED,
    ),
    waiting(
        "CertificatePending",
        Tenant,
        "CloudFront's managed certificate waits for validation of the domains.",
        "Make sure every domain's CNAME points at status.dnsTarget (CloudFront validates through it).",
    ),
    waiting(
        "CertificateIssued",
        Tenant,
        "The managed certificate is issued; the operator writes its ARN into the spec and attaches it.",
        WAIT_STATE,
    ),
    fine("CertificateAttached", Tenant, "The managed certificate is issued and attached to the tenant.", NOTHING),
    problem(
        "CertificateFailed",
        Tenant,
        "CloudFront's managed certificate failed, timed out, was revoked or expired.",
        "Fix the domains' DNS (each must resolve to the tenant), then remove and add spec.managedCertificateRequest to request a new one.",
    ),
    problem(
        "CertificateNotFound",
        Tenant,
        "The certificate in spec.customizations.certificate.arn does not exist (in us-east-1).",
        "Fix the ARN: CloudFront uses ACM certificates in us-east-1 only.",
    ),
    problem(
        "CertificateSANMismatch",
        Tenant,
        "The certificate in spec.customizations.certificate.arn does not cover every domain of the tenant.",
        "Use a certificate whose names (or wildcards) cover every domain in spec.domains.",
    ),
    waiting(
        "PreconditionFailed",
        Tenant,
        "The tenant changed in CloudFront while it was being written (a stale ETag); re-read and retried at once.",
        WAIT_STATE,
    ),
    waiting("MissingETag", Tenant, "CloudFront returned the tenant without an ETag; retried.", WAIT_STATE),
    waiting("NotObserved", Tenant, "The tenant's id is not known yet; the next look reads it.", WAIT_STATE),
    problem(
        "TenantNameTaken",
        Tenant,
        "A CloudFront tenant with this object's name exists and was not made for this object; it is never adopted, changed or deleted.",
        "Rename the object (metadata.name is the tenant's name), or delete the other tenant in CloudFront.",
    ),
    problem(
        "DistributionNotFound",
        Tenant,
        "spec.distributionId names no distribution of the account.",
        "Fix spec.distributionId (a multi-tenant distribution, e.g. E1ABCDEF2GHIJ).",
    ),
    problem(
        "ConnectionGroupNotFound",
        Tenant,
        "spec.connectionGroupId names no connection group of the account.",
        "Fix spec.connectionGroupId, or remove it to use the default group.",
    ),
    waiting(
        "DomainValidationPending",
        Tenant,
        "CloudFront cannot validate the domains yet (their CNAMEs do not resolve to CloudFront); retried every few minutes.",
        "Make each domain's CNAME resolve to status.dnsTarget (with spec.dns the operator writes them first); it clears by itself once DNS propagates.",
    ),
    problem(
        "AWSError",
        Tenant,
        "A CloudFront call failed without an error code (a timeout, a refused connection); retried with backoff.",
        "Check the operator's network path to CloudFront (--tenant-aws-endpoint-url) if it lasts; `blockwork check` tests it.",
    ),
    // --- Who may act where (ADR 0014) ------------------------------------------------------------
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
        "AWS throttles the calls of this object's account (someone else spends its quota): while one call backs off, the others of that account are not sent, so the other accounts' objects keep the workers.",
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
        "(AwsIdentity) A role the mapping names cannot be assumed: its trust policy does not trust the operator's role, wants another ExternalId, or the operator may not call sts:AssumeRole on it.",
        "Fix the role's trust policy (docs/multi-account.md has the one Blockwork needs) or the mapping's roleArn and externalId.",
    ),
    fine("Ready", Identity, "(AwsIdentity) The mapping is valid among the others and every role it names was assumed.", NOTHING),
    // --- AWS error codes passed on as reasons ---------------------------------------------------
    problem("AccessDenied", Aws, "AWS refused the call: the operator's IAM identity lacks a permission.", ACCESS),
    problem("AccessDeniedException", Aws, "AWS refused the call: the operator's IAM identity lacks a permission.", ACCESS),
    problem("Throttling", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("ThrottlingException", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("ThrottledException", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("TooManyRequests", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("TooManyRequestsException", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("RequestLimitExceeded", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("RequestThrottled", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("RequestThrottledException", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem("SlowDown", Aws, "AWS throttled the operator's calls.", THROTTLED),
    problem(
        "PriorRequestNotComplete",
        Aws,
        "Route53 is still applying an earlier change to the same records; retried after at least a minute.",
        "Nothing to do unless it lasts; then look for a stuck change in the hosted zone.",
    ),
    waiting(
        "InternalFailure",
        Aws,
        "AWS failed internally; retried with backoff.",
        "Nothing to do unless it lasts; then check the AWS Health Dashboard.",
    ),
    waiting(
        "InternalError",
        Aws,
        "AWS failed internally; retried with backoff.",
        "Nothing to do unless it lasts; then check the AWS Health Dashboard.",
    ),
    waiting(
        "InternalServiceError",
        Aws,
        "AWS failed internally; retried with backoff.",
        "Nothing to do unless it lasts; then check the AWS Health Dashboard.",
    ),
    waiting(
        "ServiceUnavailable",
        Aws,
        "AWS is unavailable; retried with backoff.",
        "Nothing to do unless it lasts; then check the AWS Health Dashboard.",
    ),
    waiting(
        "RequestTimeout",
        Aws,
        "The AWS call timed out; retried with backoff.",
        "Nothing to do unless it lasts; then check the operator's network path to AWS.",
    ),
    problem(
        "ResourceNotFoundException",
        Aws,
        "The AWS resource the object names does not exist (any more).",
        "If it was deleted outside Kubernetes the controller creates it again (drift policy enforce); otherwise fix the reference in the spec.",
    ),
    problem(
        "EntityNotFound",
        Aws,
        "The CloudFront resource the object names does not exist (any more).",
        "Fix the id in the spec (distribution, connection group), or let the controller create the tenant again.",
    ),
    problem(
        "NoSuchHostedZone",
        Aws,
        "The Route53 hosted zone does not exist in the operator's account.",
        "Fix the zone id (Cert: --dns-zones or spec.dnsZone; DistributionTenant: spec.dns.hostedZoneId).",
    ),
    problem("NoSuchDistribution", Aws, "The CloudFront distribution does not exist.", "Fix spec.distributionId."),
    problem("NotFound", Aws, "The AWS resource does not exist.", "Fix the reference in the spec, or let the controller create it again."),
    problem(
        "ResourceInUseException",
        Aws,
        "ACM refuses to delete a certificate that AWS resources still use.",
        "Detach the certificate from the load balancers or distributions that use it.",
    ),
    problem(
        "InvalidChangeBatch",
        Aws,
        "Route53 refused the record change (e.g. a CNAME beside other records of the same name).",
        "Look at the records of that name in the zone; remove what conflicts.",
    ),
    problem("InvalidInput", Aws, "AWS refused the call's input; the message says which.", "Fix the field of the spec the message names."),
    problem(
        "InvalidArgument",
        Aws,
        "CloudFront refused the call's input; the message says which.",
        "Fix the field of the spec the message names.",
    ),
    problem(
        "CNAMEAlreadyExists",
        Aws,
        "One of the tenant's domains is already used by another distribution or tenant (CloudFront allows each domain once).",
        "Remove the domain from the other distribution or tenant, or from this spec.",
    ),
    problem(
        "CnameAlreadyExists",
        Aws,
        "One of the tenant's domains is already used by another distribution or tenant (CloudFront allows each domain once).",
        "Remove the domain from the other distribution or tenant, or from this spec.",
    ),
    waiting(
        "InvalidIfMatchVersion",
        Aws,
        "The tenant changed in CloudFront while it was being written (a stale ETag); re-read and retried at once.",
        WAIT_STATE,
    ),
    problem(
        "EntityAlreadyExists",
        Aws,
        "A CloudFront tenant with this name exists already.",
        "If it is this object's (a create whose result was lost) the controller adopts it; otherwise rename the object.",
    ),
    problem(
        "LimitExceededException",
        Aws,
        "An AWS quota is reached (e.g. ACM certificates per account or per year).",
        "Ask AWS for a higher quota (Service Quotas), or delete unused resources; then `blockwork retry`.",
    ),
    // --- Cache ----------------------------------------------------------------------------------
    waiting(
        "Pending",
        Cache,
        "The StatefulSet has no pods yet.",
        "Nothing to do unless it lasts; then `kubectl describe statefulset NAME-cache` (quota, scheduling).",
    ),
    waiting(
        "Provisioning",
        Cache,
        "Some replicas are not ready yet.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists (image pulls, scheduling, memory).",
    ),
    fine("Ready", Cache, "Every replica is ready.", NOTHING),
    problem(
        "Failed",
        Cache,
        "The spec cannot be built into objects (see InvalidSpec).",
        "Fix the spec as the Ready condition's message says.",
    ),
    fine("AllReplicasAvailable", Cache, "Every replica's pod is ready.", NOTHING),
    waiting(
        "ReplicasNotReady",
        Cache,
        "Some replicas' pods are not ready; the message counts them.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists (events, image pulls, scheduling). In a Cache with Sentinel a restarted primary's pod is not ready until the Sentinels promote a replica (seconds, at most 140 s): `kubectl logs POD -c cache` says `the Sentinels name this pod the primary: waiting ...`.",
    ),
    fine("ResolvedRefs", Cache, "Every Secret the Cache references exists with the keys it needs.", NOTHING),
    problem(
        "TLSSecretNotFound",
        Cache,
        "spec.tls.secretName names a Secret that does not exist in the Cache's namespace; the pods cannot start.",
        "Create it (e.g. a cert-manager Certificate with that secretName); the Cache follows at once.",
    ),
    problem(
        "TLSSecretIncomplete",
        Cache,
        "The TLS Secret lacks tls.crt, tls.key or (replicated) ca.crt; the pods cannot start.",
        "Add the missing keys (cert-manager writes all three).",
    ),
    problem(
        "InvalidSpec",
        Cache,
        "The spec passed the schema but cannot be built (e.g. memory that does not fit the engine); the message says why.",
        "Fix the field the message names.",
    ),
    problem(
        "ApplyFailed",
        Cache,
        "The API server refused one of the Cache's objects (StatefulSet, Service, ConfigMap, PodDisruptionBudget); the message quotes it.",
        "Fix what the API server names (often a quota or a policy admission webhook); refusals wait for a spec change, other errors are retried.",
    ),
    problem(
        "PodSecurityRejected",
        Cache,
        "The namespace's Pod Security level refused the Cache's pods (the message quotes the API server); no pod starts.",
        "Blockwork's pods meet `restricted` as shipped: look for an image or setting given at install that breaks it (`blockwork check`), or a namespace label stricter than the standards.",
    ),
    problem(
        "QuotaExceeded",
        Cache,
        "A ResourceQuota of the namespace refused a pod: the Cache's memory (request = limit = spec.memory) or CPU does not fit.",
        "Raise the quota, or lower spec.memory or spec.replicas; the StatefulSet retries by itself.",
    ),
    problem(
        "PodCreateRefused",
        Cache,
        "The API server refused to create a pod (a LimitRange, an admission webhook, a policy engine); the message quotes it.",
        "Fix what the message names; the StatefulSet retries by itself.",
    ),
    problem(
        "Unschedulable",
        Cache,
        "No node can take a pod; the scheduler's message says why (resources, taints, spread with --cache-node-spread=required).",
        "Add capacity, lower spec.memory, or allow the pods where the message says; the scheduler retries by itself.",
    ),
    problem(
        "ImagePullFailed",
        Cache,
        "A node cannot pull an image of the Cache's pods (a wrong reference, a registry it cannot reach, a missing pull Secret).",
        "Check the images set at install (`blockwork check` lists them) and that the pull Secrets exist in the Cache's namespace; the kubelet retries by itself.",
    ),
    problem(
        "ContainerConfigError",
        Cache,
        "A container of the Cache's pods cannot be created (a missing Secret or key, a runtime error); the message quotes the kubelet.",
        "Fix what the message names (for TLS, the Secret's keys); the kubelet retries by itself.",
    ),
    problem(
        "ContainerCrashing",
        Cache,
        "A container keeps exiting (CrashLoopBackOff); the message has its exit code and last words.",
        "Read `kubectl logs POD -c CONTAINER --previous`; an image without sh, timeout or the engine's CLI cannot run the start scripts.",
    ),
    fine("SentinelReported", Cache, "status.primary is the primary Sentinel reports now.", NOTHING),
    waiting(
        "NoSentinelReady",
        Cache,
        "No pod of the replicated Cache is ready, so there is no Sentinel to ask for the primary yet.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists.",
    ),
    waiting(
        "PrimaryDown",
        Cache,
        "Sentinel sees the primary down; it promotes a replica once a majority of Sentinels agree (5 s without an answer).",
        "Nothing to do unless it lasts: fewer than a majority of pods running keeps Sentinel from failing over.",
    ),
    waiting(
        "FailoverInProgress",
        Cache,
        "Sentinel is promoting a replica in place of the primary; status.primary follows when it is done.",
        "Nothing to do unless it lasts longer than the failover timeout (60 s).",
    ),
    problem(
        "SentinelUnreachable",
        Cache,
        "No Sentinel of the ready pods answered within 2 s; status.primary is the last one known. The reconcile itself goes on.",
        "Check that the operator's pods reach the Cache's pods on port 26379 (a NetworkPolicy?); the operator's log has each error.",
    ),
    problem("ReconcilePanicked", Cache, "The Cache controller panicked on this object; retried.", "Report a bug with the event's message."),
    problem(
        "CleanupIncomplete",
        Cache,
        "Deleting the Cache's objects failed in part; the Cache was released anyway.",
        "Delete the objects named in the message.",
    ),
    problem(
        "CleanupTimedOut",
        Cache,
        "Deleting the Cache's objects took longer than 30 s; the Cache was released anyway.",
        "Delete what is left: `kubectl get statefulset,service,configmap,pdb -l app.kubernetes.io/instance=NAME`.",
    ),
    fine("ReconcileSuccess", Cache, "Every object of the Cache is applied.", NOTHING),
    waiting(
        "ReconcilePaused",
        Cache,
        "Reconciling is paused by the annotation blockwork.dev/paused.",
        "`blockwork resume cache/NAME` to reconcile again.",
    ),
    problem(
        "InvalidAnnotation",
        Cache,
        "A blockwork.dev/ annotation (or the conversion's cache.blockwork.dev/ one) is invalid; the Cache is held as if paused.",
        "Fix or remove the annotation named in the message.",
    ),
    problem(
        "ConversionFailed",
        Cache,
        "The API server's request to convert a Cache between v1alpha1 and v1beta1 was refused by the webhook (the object would break v1beta1's rules).",
        "Make the v1alpha1 write meet v1beta1's rules, or write v1beta1.",
    ),
    // --- Key rotator (events on Secrets) --------------------------------------------------------
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

/// Whether a reason belongs to a family.
type Member = fn(&str) -> bool;

/// Where a reason found no entry of its own: explained by its family.
const FAMILIES: &[(Member, Entry)] = &[
    (
        |r| r.contains("AccessDenied") || r.contains("NotAuthorized") || r.contains("Unauthorized") || r.contains("Forbidden"),
        problem("AccessDenied*", Aws, "AWS refused the call: the operator's IAM identity lacks a permission.", ACCESS),
    ),
    (
        |r| r.contains("Throttl") || r.contains("TooManyRequests") || r.contains("RateExceeded"),
        problem("Throttling*", Aws, "AWS throttled the operator's calls.", THROTTLED),
    ),
    (
        |r| r.contains("LimitExceeded") || r.contains("QuotaExceeded"),
        problem(
            "*LimitExceeded",
            Aws,
            "An AWS quota or limit is reached.",
            "Ask AWS for a higher quota (Service Quotas), or delete unused resources; then `blockwork retry`.",
        ),
    ),
    (
        |r| r.ends_with("NotFound") || r.ends_with("NotFoundException") || r.starts_with("NoSuch"),
        problem("*NotFound", Aws, "Something the object names does not exist.", "Fix the reference in the spec that the message names."),
    ),
    (
        |r| r.starts_with("Invalid") || r.ends_with("ValidationException") || r.ends_with("ValidationError"),
        problem("Invalid*", Aws, "AWS refused the call's input; the message says which.", "Fix the field of the spec the message names."),
    ),
];

/// For a reason nothing here explains (an AWS code no one has seen yet).
const UNKNOWN: Entry = problem(
    "*",
    Aws,
    "An error passed on as it came (usually an AWS error code); the message is AWS's own.",
    "Read the message; `blockwork check` tests the operator's access to AWS.",
);

/// The entry for `reason` on an object of `scope` (a reason set by the runtime counts for Cert
/// and DistributionTenant): its own, else one of any scope, else its family's, else the
/// catch-all. Never `None`: every reason gets a next step.
pub fn lookup(scope: Scope, reason: &str) -> &'static Entry {
    let own = |s: Scope| ENTRIES.iter().find(|e| e.reason == reason && e.scope == s);
    let runtime_kind = matches!(scope, Scope::Cert | Scope::DistributionTenant);
    own(scope)
        .or_else(|| if runtime_kind { own(Scope::Runtime).or_else(|| own(Scope::Aws)) } else { None })
        .or_else(|| ENTRIES.iter().find(|e| e.reason == reason))
        .or_else(|| FAMILIES.iter().find(|(matches, _)| matches(reason)).map(|(_, entry)| entry))
        .unwrap_or(&UNKNOWN)
}

/// Whether `reason` has an entry of its own (not only a family's).
pub fn explains(reason: &str) -> bool {
    ENTRIES.iter().any(|e| e.reason == reason)
}

/// Where the generated tables begin and end in `docs/troubleshooting.md`.
pub const MARKDOWN_BEGIN: &str = "<!-- reasons: generated from crates/inspect/src/catalog.rs -->";
pub const MARKDOWN_END: &str = "<!-- end of reasons -->";

/// Every entry as Markdown tables, one per scope, for `docs/troubleshooting.md`.
pub fn markdown() -> String {
    let mut out = String::new();
    let mut scope = None;
    for entry in ENTRIES {
        if scope != Some(entry.scope) {
            scope = Some(entry.scope);
            out.push_str(&format!("\n### {}\n\n| reason | | what it means | what to do |\n|---|---|---|---|\n", entry.scope.as_str()));
        }
        let severity = match entry.severity {
            Severity::Fine => "fine",
            Severity::Waiting => "waiting",
            Severity::Problem => "**problem**",
        };
        out.push_str(&format!(
            "| `{}` | {severity} | {} | {} |\n",
            entry.reason,
            entry.meaning.replace('|', "\\|"),
            entry.fix.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_s_own_entry_wins_over_another_kind_s() {
        assert_eq!(lookup(Scope::Cache, "InvalidSpec").scope, Scope::Cache);
        assert_eq!(lookup(Scope::Cert, "InvalidSpec").scope, Scope::Cert);
        assert_eq!(lookup(Scope::DistributionTenant, "Failed").scope, Scope::Runtime);
        assert_eq!(lookup(Scope::Cache, "Failed").scope, Scope::Cache);
    }

    #[test]
    fn an_aws_code_nobody_listed_is_explained_by_its_family() {
        assert_eq!(lookup(Scope::Cert, "UnauthorizedOperation").fix, ACCESS);
        assert_eq!(lookup(Scope::Cert, "ProvisionedThroughputExceededThrottling").fix, THROTTLED);
        assert!(lookup(Scope::Cert, "NoSuchBucket").meaning.contains("does not exist"));
        assert_eq!(lookup(Scope::Cert, "Zzz").reason, "*", "the catch-all still says what to do");
    }

    #[test]
    fn a_reason_has_one_entry_per_scope() {
        for (i, entry) in ENTRIES.iter().enumerate() {
            let twin = ENTRIES[..i].iter().find(|e| e.reason == entry.reason && e.scope == entry.scope);
            assert!(twin.is_none(), "{} twice for {:?}", entry.reason, entry.scope);
        }
    }

    #[test]
    fn every_entry_says_what_it_means_and_what_to_do() {
        for entry in ENTRIES {
            assert!(entry.meaning.ends_with('.') && entry.fix.ends_with('.'), "{entry:?}");
            assert!(entry.meaning.len() > 20 && entry.fix.len() > 10, "{entry:?}");
        }
    }
}
