use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};

use crate::sanitize::sanitize;

/// How the caller should react to a failed AWS call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// A person must act (permissions, invalid input, limits).
    Terminal,
    /// Try again with backoff (5xx, timeouts, network).
    Retryable,
    /// The API asked us to slow down.
    Throttled,
    /// The resource does not exist.
    NotFound,
}

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
    fn missing_resources_are_not_found() {
        assert_eq!(classify(Some("ResourceNotFoundException"), Some(400)), ErrorClass::NotFound);
        assert_eq!(classify(Some("NoSuchHostedZone"), Some(404)), ErrorClass::NotFound);
    }
}
