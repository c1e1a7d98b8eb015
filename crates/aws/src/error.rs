use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};
/// How the caller reacts to a failed call: the runtime's classes, one vocabulary for every AWS
/// call and every reconcile.
pub use blockwork_runtime::ErrorClass;
use blockwork_runtime::{Existence, ExternalError};

use crate::sanitize::sanitize;

/// A failed AWS call, with a message safe to show users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{operation}: {message}")]
pub struct AwsError {
    pub operation: &'static str,
    /// The AWS error code, e.g. `ThrottlingException`.
    pub code: Option<String>,
    pub class: ErrorClass,
    /// Sanitized: no account ids, no ARNs.
    pub message: String,
}

impl AwsError {
    /// A request the SDK refused to build (a required member missing): a bug of ours, never
    /// retried.
    pub fn invalid_request(operation: &'static str, error: &impl std::fmt::Display) -> Self {
        Self {
            operation,
            code: Some("InvalidInput".to_owned()),
            class: ErrorClass::Terminal,
            message: format!("the request could not be built: {error}"),
        }
    }

    /// An answer without what the operation promises (an emulator's or AWS's bug): retried.
    pub fn incomplete(operation: &'static str, what: &str) -> Self {
        Self { operation, code: None, class: ErrorClass::Retryable, message: format!("AWS answered without {what}") }
    }

    /// Whether retrying the same call may succeed: throttling and transient failures.
    pub fn is_transient(&self) -> bool {
        matches!(self.class, ErrorClass::Throttled | ErrorClass::Retryable)
    }

    /// What this answer says of the thing the call was about, for a deletion: AWS says it does
    /// not exist (or what held it does not: `NoSuchHostedZone` for a record) — gone; it is in
    /// use — still there; anything else (access denied, throttling, 5xx, a timeout, an invalid
    /// request) leaves it unknown.
    pub fn existence(&self) -> Existence {
        match (self.class, self.code.as_deref()) {
            (ErrorClass::NotFound, _) => Existence::Gone,
            (_, Some("ResourceInUseException")) => Existence::StillThere,
            _ => Existence::Unknown,
        }
    }
}

/// The runtime's view of a failed AWS call: its class, the AWS error code as the reason, and
/// the operation with the sanitized message; a wait on a call other objects share
/// ([`crate::shared`]) is told as such, so the object says it once.
impl From<&AwsError> for ExternalError {
    fn from(error: &AwsError) -> Self {
        let reason = error.code.clone().unwrap_or_else(|| "AwsError".to_owned());
        let external =
            ExternalError { existence: error.existence(), ..ExternalError::new(error.class, reason, sanitize(&error.to_string())) };
        if crate::shared::is_shared_wait(error.code.as_deref()) { external.shared() } else { external }
    }
}

impl From<AwsError> for ExternalError {
    fn from(error: AwsError) -> Self {
        Self::from(&error)
    }
}

const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "TooManyRequests",
    "SlowDown",
    "PriorRequestNotComplete",
    "RequestThrottled",
    "RequestThrottledException",
];

const NOT_FOUND: &[&str] = &["ResourceNotFoundException", "NoSuchHostedZone", "EntityNotFound", "NoSuchDistribution", "NotFound"];

/// Classifies by AWS error code first, then HTTP status; no code and no status (a timeout, a
/// refused connection) is retryable.
pub fn classify(code: Option<&str>, http_status: Option<u16>) -> ErrorClass {
    if let Some(code) = code {
        if THROTTLING.contains(&code) {
            return ErrorClass::Throttled;
        }
        if NOT_FOUND.contains(&code) {
            return ErrorClass::NotFound;
        }
        if matches!(code, "InternalFailure" | "InternalError" | "ServiceUnavailable" | "InternalServiceError" | "RequestTimeout") {
            return ErrorClass::Retryable;
        }
    }
    match http_status {
        Some(429) => ErrorClass::Throttled,
        Some(status) if status >= 500 => ErrorClass::Retryable,
        Some(404) if code.is_none() => ErrorClass::NotFound,
        Some(_) => ErrorClass::Terminal,
        None if code.is_some() => ErrorClass::Terminal,
        None => ErrorClass::Retryable,
    }
}

/// Turns any AWS SDK error into an [`AwsError`].
pub fn classify_sdk_error<E, R>(operation: &'static str, error: &SdkError<E, R>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + HttpStatus,
{
    let (code, message, status) = match error {
        SdkError::ServiceError(service) => {
            let err = service.err();
            (err.code().map(str::to_owned), err.message().map(str::to_owned), service.raw().http_status())
        }
        SdkError::ResponseError(response) => (None, Some("the response could not be read".to_owned()), response.raw().http_status()),
        SdkError::TimeoutError(_) => (None, Some("the request timed out".to_owned()), None),
        SdkError::DispatchFailure(failure) => (None, Some(format!("the request could not be sent: {failure:?}")), None),
        SdkError::ConstructionFailure(_) => (None, Some("the request could not be built".to_owned()), None),
        _ => (error.code().map(str::to_owned), error.message().map(str::to_owned), None),
    };
    let class = match error {
        SdkError::ConstructionFailure(_) => ErrorClass::Terminal,
        _ => classify(code.as_deref(), status),
    };
    let message = sanitize(&message.or_else(|| code.clone()).unwrap_or_else(|| "unknown error".to_owned()));
    AwsError { operation, code, class, message }
}

/// The HTTP status of a raw SDK response, if it has one.
pub trait HttpStatus {
    fn http_status(&self) -> Option<u16>;
}

impl HttpStatus for aws_sdk_sts::config::http::HttpResponse {
    fn http_status(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_codes_are_throttled() {
        for code in ["Throttling", "ThrottlingException", "TooManyRequestsException", "PriorRequestNotComplete", "SlowDown"] {
            assert_eq!(classify(Some(code), Some(400)), ErrorClass::Throttled, "{code}");
        }
    }

    #[test]
    fn server_errors_and_network_failures_are_retryable() {
        assert_eq!(classify(Some("InternalFailure"), Some(500)), ErrorClass::Retryable);
        assert_eq!(classify(None, Some(503)), ErrorClass::Retryable);
        assert_eq!(classify(None, None), ErrorClass::Retryable);
    }

    #[test]
    fn client_errors_are_terminal() {
        assert_eq!(classify(Some("AccessDeniedException"), Some(400)), ErrorClass::Terminal);
        assert_eq!(classify(Some("AccessDenied"), Some(403)), ErrorClass::Terminal);
        assert_eq!(classify(Some("InvalidArgument"), Some(400)), ErrorClass::Terminal);
        assert_eq!(classify(Some("ValidationException"), Some(400)), ErrorClass::Terminal);
    }

    #[test]
    fn too_many_requests_status_is_throttled_without_a_code() {
        assert_eq!(classify(None, Some(429)), ErrorClass::Throttled);
    }

    #[test]
    fn aws_errors_reach_the_runtime_with_their_class_and_code_and_without_account_ids() {
        let error = AwsError {
            operation: "DeleteCertificate",
            code: Some("AccessDeniedException".into()),
            class: ErrorClass::Terminal,
            message: "User: arn:aws:iam::123456789012:user/x is not authorized".into(),
        };
        let external = ExternalError::from(&error);
        assert_eq!(external.class, ErrorClass::Terminal);
        assert_eq!(external.reason, "AccessDeniedException");
        assert_eq!(external.message, "DeleteCertificate: User: [ARN] is not authorized");
        let throttled = AwsError { code: None, class: ErrorClass::Throttled, ..error };
        assert_eq!(ExternalError::from(throttled).reason, "AwsError");
    }

    fn answered(code: &str, status: u16) -> AwsError {
        AwsError {
            operation: "DeleteCertificate",
            code: Some(code.to_owned()),
            class: classify(Some(code), Some(status)),
            message: "m".into(),
        }
    }

    #[test]
    fn an_answer_that_the_thing_or_its_hosted_zone_does_not_exist_proves_it_gone() {
        for (code, status) in [("ResourceNotFoundException", 400), ("NoSuchHostedZone", 404), ("EntityNotFound", 404)] {
            assert_eq!(answered(code, status).existence(), Existence::Gone, "{code}");
            assert_eq!(ExternalError::from(answered(code, status)).existence, Existence::Gone, "{code}");
        }
    }

    #[test]
    fn a_certificate_in_use_is_still_there() {
        assert_eq!(answered("ResourceInUseException", 400).existence(), Existence::StillThere);
        assert_eq!(ExternalError::from(answered("ResourceInUseException", 400)).existence, Existence::StillThere);
    }

    #[test]
    fn denied_throttled_failed_or_timed_out_answers_leave_existence_unknown() {
        let timeout = AwsError { operation: "GetChange", code: None, class: classify(None, None), message: "timed out".into() };
        for error in [answered("AccessDenied", 403), answered("Throttling", 400), answered("InternalFailure", 500), timeout] {
            assert_eq!(error.existence(), Existence::Unknown, "{error}");
        }
    }

    #[test]
    fn missing_resources_are_not_found() {
        assert_eq!(classify(Some("ResourceNotFoundException"), Some(400)), ErrorClass::NotFound);
        assert_eq!(classify(Some("NoSuchHostedZone"), Some(404)), ErrorClass::NotFound);
    }
}
