//! Seed 001's error classification table, as pure functions from an AWS error (code, HTTP status,
//! message) to a category, the metric label and the runtime's [`ExternalError`]. The original AWS
//! message is kept, sanitized of account ids and ARNs.

use blockwork_aws::{AwsError, ErrorClass as AwsClass};
use blockwork_runtime::ExternalError;

/// The rows of seed 001's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// Needs a person (CNAMEAlreadyExists, AccessDenied, InvalidArgument, ...): condition set, no
    /// retry before the Failed interval (5 minutes).
    Terminal,
    /// `InvalidArgument` on create with `validationTokenHost: cloudfront`: CloudFront cannot see the
    /// CNAMEs yet. `Ready=False/DomainValidationPending`, retried every 5 minutes.
    DomainValidationPending,
    /// NoSuchHostedZone, DNS AccessDenied, InvalidChangeBatch, ConnectionGroupNotFound:
    /// `DNSReady=False`, no retry before the Failed interval.
    TerminalDns,
    /// The certificate's names do not cover the domains: `Ready=False/CertificateSANMismatch`.
    CertificateSanMismatch,
    /// Throttling, TooManyRequests (CloudFront) and Throttling, PriorRequestNotComplete (Route53):
    /// retried after 60 seconds at the earliest.
    Throttling,
    /// PreconditionFailed: the ETag is stale; re-read the tenant and retry at once. Not counted as
    /// an error.
    EtagMismatch,
    /// 5xx and network errors: retried with backoff.
    Retryable,
    /// The tenant (or distribution) does not exist: deleting it is done.
    NotFound,
    /// The spec is invalid before any call: condition with the message, retried every 5 minutes.
    Validation,
}

/// A classified failure: what to tell the runtime and what to count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classified {
    pub category: Category,
    /// `cloudfront_tenant_operator_reconcile_errors_total{error_type}`; `None`: not counted
    /// (ETag mismatch, validation, not found).
    pub error_type: Option<&'static str>,
    pub error: ExternalError,
}

/// What the failed call was doing, where it changes the classification.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallContext {
    /// A CreateDistributionTenant call.
    pub creating: bool,
    /// The spec asks CloudFront to host the validation token of a managed certificate.
    pub cloudfront_validates: bool,
    /// A GetConnectionGroup call for the connection group the spec names.
    pub connection_group_lookup: bool,
}

/// Classifies a failed CloudFront call.
pub fn classify_cloudfront(error: &AwsError, context: CallContext) -> Classified {
    if let Some(waiting) = shared_wait(error, "throttling", "retryable") {
        return waiting;
    }
    let code = error.code.as_deref().unwrap_or("");
    let message = error.message.clone();
    let reason = if code.is_empty() { "AWSError" } else { code };
    if matches!(code, "PreconditionFailed" | "InvalidIfMatchVersion") {
        return classified(Category::EtagMismatch, None, ExternalError::retryable(code, message));
    }
    if context.connection_group_lookup && matches!(error.class, AwsClass::NotFound) {
        let message = format!("connection group not found: {message}");
        return classified(
            Category::TerminalDns,
            Some("connection_group_not_found"),
            ExternalError::terminal("ConnectionGroupNotFound", message),
        );
    }
    match error.class {
        AwsClass::Throttled => classified(Category::Throttling, Some("throttling"), ExternalError::throttled(reason, message)),
        AwsClass::Retryable => classified(Category::Retryable, Some("retryable"), ExternalError::retryable(reason, message)),
        // A create refers to a distribution and a connection group; neither comes back by
        // retrying. (The tenant itself cannot be missing before it is created.)
        AwsClass::NotFound if context.creating => {
            if message.to_ascii_lowercase().contains("connection group") {
                let message = format!("connection group not found: {message}");
                classified(
                    Category::TerminalDns,
                    Some("connection_group_not_found"),
                    ExternalError::terminal("ConnectionGroupNotFound", message),
                )
            } else {
                classified(Category::Terminal, Some("invalid_spec"), ExternalError::terminal(reason, message))
            }
        }
        AwsClass::NotFound => classified(Category::NotFound, None, ExternalError::not_found(reason, message)),
        AwsClass::Terminal if code == "InvalidArgument" && context.creating && context.cloudfront_validates => {
            let message = format!("CloudFront cannot validate the domains yet (DNS propagation); retrying: {message}");
            classified(
                Category::DomainValidationPending,
                Some("domain_validation_pending"),
                ExternalError::terminal("DomainValidationPending", message),
            )
        }
        AwsClass::Terminal => {
            let error_type = match code {
                "CNAMEAlreadyExists" | "CnameAlreadyExists" => "domain_conflict",
                "AccessDenied" | "AccessDeniedException" => "access_denied",
                _ => "invalid_spec",
            };
            classified(Category::Terminal, Some(error_type), ExternalError::terminal(reason, message))
        }
    }
}

/// Classifies a failed Route53 (or STS, for the DNS role) call, for a [`crate::dns::DnsRecords`]
/// implementation: every terminal DNS error sets `DNSReady=False` with reason `DNSError`.
pub fn classify_dns(error: &AwsError) -> Classified {
    if let Some(waiting) = shared_wait(error, "dns_throttling", "dns_retryable") {
        return waiting;
    }
    let code = error.code.as_deref().unwrap_or("");
    let message = error.message.clone();
    match error.class {
        AwsClass::Throttled => classified(Category::Throttling, Some("dns_throttling"), ExternalError::throttled("DNSThrottling", message)),
        AwsClass::Retryable => classified(Category::Retryable, Some("dns_retryable"), ExternalError::retryable("DNSError", message)),
        AwsClass::NotFound | AwsClass::Terminal => {
            let error_type = match code {
                "NoSuchHostedZone" => "dns_zone_not_found",
                "AccessDenied" | "AccessDeniedException" => "dns_access_denied",
                "InvalidChangeBatch" | "InvalidInput" => "dns_invalid_input",
                _ => "dns_error",
            };
            classified(Category::TerminalDns, Some(error_type), ExternalError::terminal("DNSError", message))
        }
    }
}

/// A read other objects share fails (issue 37): the tenant waits on it, saying what it waits for,
/// AWS's answer and since when, once (`ExternalError::shared`); counted as the failure it is.
fn shared_wait(error: &AwsError, throttling: &'static str, retryable: &'static str) -> Option<Classified> {
    if !blockwork_aws::shared::is_shared_wait(error.code.as_deref()) {
        return None;
    }
    let (category, error_type) = match error.class {
        AwsClass::Throttled => (Category::Throttling, throttling),
        _ => (Category::Retryable, retryable),
    };
    Some(classified(category, Some(error_type), ExternalError::from(error)))
}

/// A spec the operator refuses to send: not an AWS error, so not counted.
pub fn validation(error: &crate::validate::SpecError) -> Classified {
    let category = match error {
        crate::validate::SpecError::CertificateSanMismatch(_) => Category::CertificateSanMismatch,
        _ => Category::Validation,
    };
    classified(category, None, ExternalError::terminal(error.reason(), error.to_string()))
}

fn classified(category: Category, error_type: Option<&'static str>, error: ExternalError) -> Classified {
    Classified { category, error_type, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_runtime::ErrorClass;

    fn aws(code: &str, status: u16, message: &str) -> AwsError {
        let code = (!code.is_empty()).then(|| code.to_owned());
        AwsError {
            operation: "UpdateDistributionTenant",
            class: blockwork_aws::classify(code.as_deref(), Some(status)),
            code,
            message: blockwork_aws::sanitize(message),
        }
    }

    fn cloudfront(code: &str, status: u16) -> Classified {
        classify_cloudfront(&aws(code, status, "the message"), CallContext::default())
    }

    #[test]
    fn cname_conflict_is_terminal_domain_conflict() {
        let c = cloudfront("CNAMEAlreadyExists", 409);
        assert_eq!((c.category, c.error_type, c.error.class), (Category::Terminal, Some("domain_conflict"), ErrorClass::Terminal));
        assert_eq!(c.error.reason, "CNAMEAlreadyExists");
    }

    #[test]
    fn access_denied_is_terminal_access_denied() {
        let c = cloudfront("AccessDenied", 403);
        assert_eq!((c.category, c.error_type), (Category::Terminal, Some("access_denied")));
    }

    #[test]
    fn invalid_argument_is_terminal_invalid_spec() {
        let c = cloudfront("InvalidArgument", 400);
        assert_eq!((c.category, c.error_type), (Category::Terminal, Some("invalid_spec")));
    }

    #[test]
    fn invalid_argument_on_create_with_cloudfront_validation_is_domain_validation_pending() {
        let context = CallContext { creating: true, cloudfront_validates: true, ..CallContext::default() };
        let c = classify_cloudfront(&aws("InvalidArgument", 400, "domain not resolvable"), context);
        assert_eq!((c.category, c.error_type), (Category::DomainValidationPending, Some("domain_validation_pending")));
        assert_eq!(c.error.reason, "DomainValidationPending");
        assert!(c.error.message.contains("domain not resolvable"), "{}", c.error.message);
    }

    #[test]
    fn invalid_argument_on_update_with_cloudfront_validation_stays_terminal() {
        let context = CallContext { creating: false, cloudfront_validates: true, ..CallContext::default() };
        assert_eq!(classify_cloudfront(&aws("InvalidArgument", 400, "m"), context).category, Category::Terminal);
    }

    #[test]
    fn missing_connection_group_is_terminal_dns_connection_group_not_found() {
        let context = CallContext { connection_group_lookup: true, ..CallContext::default() };
        let c = classify_cloudfront(&aws("EntityNotFound", 404, "no such group"), context);
        assert_eq!(
            (c.category, c.error_type, c.error.reason.as_str()),
            (Category::TerminalDns, Some("connection_group_not_found"), "ConnectionGroupNotFound")
        );
    }

    #[test]
    fn missing_connection_group_on_create_is_terminal_connection_group_not_found() {
        let context = CallContext { creating: true, ..CallContext::default() };
        let c = classify_cloudfront(&aws("EntityNotFound", 404, "The specified connection group does not exist."), context);
        assert_eq!(
            (c.category, c.error_type, c.error.class),
            (Category::TerminalDns, Some("connection_group_not_found"), ErrorClass::Terminal)
        );
    }

    #[test]
    fn missing_distribution_on_create_is_terminal_invalid_spec() {
        let context = CallContext { creating: true, ..CallContext::default() };
        let c = classify_cloudfront(&aws("EntityNotFound", 404, "The specified distribution does not exist."), context);
        assert_eq!((c.category, c.error_type, c.error.class), (Category::Terminal, Some("invalid_spec"), ErrorClass::Terminal));
    }

    #[test]
    fn throttling_and_too_many_requests_are_throttled() {
        for code in ["Throttling", "TooManyRequests"] {
            let c = cloudfront(code, 400);
            assert_eq!(
                (c.category, c.error_type, c.error.class),
                (Category::Throttling, Some("throttling"), ErrorClass::Throttled),
                "{code}"
            );
        }
    }

    #[test]
    fn precondition_failed_is_an_uncounted_etag_mismatch() {
        let c = cloudfront("PreconditionFailed", 412);
        assert_eq!((c.category, c.error_type), (Category::EtagMismatch, None));
    }

    #[test]
    fn server_errors_are_retryable() {
        let c = cloudfront("InternalError", 500);
        assert_eq!((c.category, c.error_type, c.error.class), (Category::Retryable, Some("retryable"), ErrorClass::Retryable));
    }

    #[test]
    fn missing_tenant_is_not_found_and_not_counted() {
        let c = cloudfront("EntityNotFound", 404);
        assert_eq!((c.category, c.error_type, c.error.class), (Category::NotFound, None, ErrorClass::NotFound));
    }

    #[test]
    fn aws_message_is_kept_but_sanitized() {
        let error = aws("AccessDenied", 403, "User: arn:aws:iam::123456789012:user/op is not authorized");
        let c = classify_cloudfront(&error, CallContext::default());
        assert_eq!(c.error.message, "User: [ARN] is not authorized");
    }

    #[test]
    fn dns_errors_map_to_their_labels() {
        let cases = [
            ("NoSuchHostedZone", 404, "dns_zone_not_found", Category::TerminalDns),
            ("AccessDenied", 403, "dns_access_denied", Category::TerminalDns),
            ("InvalidChangeBatch", 400, "dns_invalid_input", Category::TerminalDns),
            ("InvalidDomainName", 400, "dns_error", Category::TerminalDns),
            ("Throttling", 400, "dns_throttling", Category::Throttling),
            ("PriorRequestNotComplete", 400, "dns_throttling", Category::Throttling),
            ("InternalFailure", 500, "dns_retryable", Category::Retryable),
        ];
        for (code, status, label, category) in cases {
            let c = classify_dns(&aws(code, status, "m"));
            assert_eq!((c.category, c.error_type), (category, Some(label)), "{code}");
        }
    }

    #[test]
    fn a_failing_read_other_tenants_share_is_a_wait_said_once() {
        let answer = aws("ServiceUnavailable", 503, "Service Unavailable");
        let told = blockwork_aws::shared::waiting("the CloudFront distribution E1", jiff::Timestamp::UNIX_EPOCH, &answer);
        for c in [classify_cloudfront(&told, CallContext::default()), classify_dns(&told)] {
            assert!(c.error.shared, "the runtime writes it once, without a retry count");
            assert_eq!((c.category, c.error.reason.as_str()), (Category::Retryable, "SharedCallFailing"));
            assert!(c.error.message.contains("the CloudFront distribution E1"), "{}", c.error.message);
        }
        let certificate = "the ACM certificate arn:aws:acm:us-east-1:123456789012:certificate/abc";
        let told = blockwork_aws::shared::waiting(certificate, jiff::Timestamp::UNIX_EPOCH, &answer);
        let said = classify_cloudfront(&told, CallContext::default()).error.message;
        assert!(!said.contains("123456789012"), "no account id in what a user reads: {said}");
    }

    #[test]
    fn san_mismatch_is_its_own_uncounted_category() {
        let c = validation(&crate::validate::SpecError::CertificateSanMismatch(vec!["a.example.com".to_owned()]));
        assert_eq!((c.category, c.error_type, c.error.reason.as_str()), (Category::CertificateSanMismatch, None, "CertificateSANMismatch"));
        assert_eq!(c.error.class, ErrorClass::Terminal);
    }

    #[test]
    fn invalid_spec_is_an_uncounted_validation_failure() {
        let c = validation(&crate::validate::SpecError::Missing("domains"));
        assert_eq!((c.category, c.error_type, c.error.class), (Category::Validation, None, ErrorClass::Terminal));
    }
}
