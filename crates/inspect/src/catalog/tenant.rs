//! The catalog's entries: DistributionTenant.

use super::Scope::DistributionTenant as Tenant;
use super::{Entry, NOTHING, THROTTLED, WAIT_STATE, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
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
        "The certificate (spec.customizations.certificate.arn, or the Cert spec.customizations.certificate.certRef names) does not cover every domain of the tenant; a wildcard covers one label (`*.a.com` covers `x.a.com`, not `a.com` nor `x.y.a.com`). Nothing was written.",
        "Use a certificate whose names (or wildcards) cover every domain in spec.domains, or add the missing names to the Cert (its certificate is replaced, and the tenant follows).",
    ),
    waiting(
        "CertWithoutCertificate",
        Tenant,
        "The Cert spec.customizations.certificate.certRef names is Ready but shows no certificate ARN yet; the tenant waits, writing nothing.",
        "Nothing to do unless it lasts; then `blockwork explain cert/NAME`.",
    ),
    problem(
        "CertUnreadable",
        Tenant,
        "The Cert spec.customizations.certificate.certRef names could not be read as a Cert (the API server answered with something else); nothing was written.",
        "Check that the Cert CRD installed is Blockwork's (`blockwork check`); the controller retries.",
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
        "A CloudFront tenant with this object's name exists and was not made for this object; it is never taken over by accident, changed or deleted.",
        "To manage that tenant with this object, set spec.adopt.tenantId to the id the message names (docs/adopting.md); otherwise rename the object (metadata.name is the tenant's name).",
    ),
    waiting("MissingArn", Tenant, "CloudFront returned the tenant without its ARN, which its ownership tags need; retried.", WAIT_STATE),
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
];
