//! The catalog's entries: AWS error codes passed on as reasons.

use super::Scope::Aws;
use super::{ACCESS, Entry, THROTTLED, WAIT_STATE, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
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
    waiting(
        "SharedCallFailing",
        Aws,
        "A call this object shares with others of its AwsIdentity fails (the account's ACM certificate listing, a hosted zone's records or its batched record changes, the CloudFront distribution, certificate or connection group tenants are checked against): the message says which, AWS's answer (a 5xx, a timeout) and since when. The object does not retry it on its own: it says so once, the call is retried for all of them, and the object is looked at again when it answers.",
        "Nothing to do unless it lasts; then check the AWS Health Dashboard and the operator's network path to AWS (`blockwork check`).",
    ),
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
];
