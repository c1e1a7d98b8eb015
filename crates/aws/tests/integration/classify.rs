//! Classification of real SDK errors, produced by the fault proxy in front of moto.

#![allow(clippy::unwrap_used, clippy::panic)]

use aws_config::retry::RetryConfig;
use blockwork_aws::{ErrorClass, classify_sdk_error, sdk_config};
use blockwork_testenv::emulators::moto;
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};

async fn sts(proxy: &FaultProxy) -> aws_sdk_sts::Client {
    let config = sdk_config(Some(&proxy.endpoint()), Some("us-east-1")).await;
    let config = aws_sdk_sts::config::Builder::from(&config)
        .credentials_provider(aws_sdk_sts::config::Credentials::new("test", "test", None, None, "test"))
        .retry_config(RetryConfig::disabled())
        .build();
    aws_sdk_sts::Client::from_conf(config)
}

async fn failing_call(fault: Fault) -> blockwork_aws::AwsError {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    proxy.inject(Operation::named("GetCallerIdentity"), fault, 1);
    let error = sts(&proxy).await.get_caller_identity().send().await.unwrap_err();
    classify_sdk_error("GetCallerIdentity", &error)
}

#[tokio::test]
async fn sdk_config_reaches_the_emulator() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let identity = sts(&proxy).await.get_caller_identity().send().await.unwrap();
    assert_eq!(identity.account(), Some("123456789012"));
}

#[tokio::test]
async fn throttling_is_throttled() {
    let error = failing_call(Fault::Throttling).await;
    assert_eq!((error.class, error.code.as_deref()), (ErrorClass::Throttled, Some("Throttling")));
}

#[tokio::test]
async fn server_error_is_retryable() {
    assert_eq!(failing_call(Fault::ServerError(500)).await.class, ErrorClass::Retryable);
}

#[tokio::test]
async fn access_denied_is_terminal_and_its_message_is_sanitized() {
    let error = failing_call(Fault::AccessDenied).await;
    assert_eq!(error.class, ErrorClass::Terminal);
    assert!(!error.message.contains("123456789012"), "{}", error.message);
    assert!(error.message.contains("[ARN]"), "{}", error.message);
}

#[tokio::test]
async fn custom_error_messages_lose_account_ids_and_arns() {
    let error = failing_call(Fault::Custom {
        status: 400,
        code: "InvalidParameterValue".into(),
        message: "Role arn:aws:iam::210987654321:role/dns cannot be assumed by account 123456789012".into(),
    })
    .await;
    assert_eq!(error.message, "Role [ARN] cannot be assumed by account [ACCOUNT_ID]");
    assert_eq!(error.class, ErrorClass::Terminal);
}

/// Found by the reliability campaign's fault soak (issue 15): the tenant controller's calls had no
/// timeout, so a CloudFront or Route53 call that never answered held its DistributionTenant in
/// `Creating` (or its deletion) for good.
#[tokio::test]
async fn sdk_config_bounds_every_call() {
    let config = sdk_config(None, Some("us-east-1")).await;
    let timeouts = config.timeout_config().expect("a timeout configuration");
    assert_eq!(timeouts.operation_attempt_timeout(), Some(blockwork_aws::ATTEMPT_TIMEOUT));
    assert_eq!(timeouts.operation_timeout(), Some(blockwork_aws::CALL_TIMEOUT));
}

#[tokio::test]
async fn a_call_that_never_answers_ends_as_a_retryable_timeout() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    proxy.inject(Operation::named("GetCallerIdentity"), Fault::Timeout, 1);
    let config = sdk_config(Some(&proxy.endpoint()), Some("us-east-1")).await;
    // The bound shortened, so the test does not wait 20 s; the classification is the point.
    let short = aws_config::timeout::TimeoutConfig::builder().operation_attempt_timeout(std::time::Duration::from_millis(300)).build();
    let config = aws_sdk_sts::config::Builder::from(&config)
        .credentials_provider(aws_sdk_sts::config::Credentials::new("test", "test", None, None, "test"))
        .retry_config(RetryConfig::disabled())
        .timeout_config(short)
        .build();
    let error = aws_sdk_sts::Client::from_conf(config).get_caller_identity().send().await.unwrap_err();
    let classified = classify_sdk_error("GetCallerIdentity", &error);
    assert_eq!(classified.class, ErrorClass::Retryable, "{classified:?}");
}
