//! The catalog's entries: Cert.

use super::Scope::Cert;
use super::{Entry, WAIT_STATE, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
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
];
