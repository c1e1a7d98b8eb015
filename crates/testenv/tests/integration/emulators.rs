//! The AWS emulators and the fault proxy, through the real AWS SDK.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_acm::error::ProvideErrorMetadata;
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ChangeStatus, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation, RandomFaults};

async fn sdk_config(endpoint: &str, retries: RetryConfig) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sts::config::Credentials::new("test", "test", None, None, "test"))
        .retry_config(retries)
        .load()
        .await
}

async fn proxy() -> FaultProxy {
    FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap()
}

#[tokio::test]
async fn sts_answers_through_the_proxy() {
    let proxy = proxy().await;
    let sts = aws_sdk_sts::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let identity = sts.get_caller_identity().send().await.unwrap();
    assert_eq!(identity.account(), Some("123456789012"));
    assert_eq!(proxy.calls("GetCallerIdentity"), 1);
}

#[tokio::test]
async fn acm_requests_and_describes_a_certificate_through_the_proxy() {
    let proxy = proxy().await;
    let acm = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let arn = acm
        .request_certificate()
        .domain_name("proxy.example.com")
        .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
        .send()
        .await
        .unwrap()
        .certificate_arn
        .unwrap();
    let described = acm.describe_certificate().certificate_arn(&arn).send().await.unwrap();
    assert_eq!(described.certificate.unwrap().domain_name(), Some("proxy.example.com"));
    assert_eq!((proxy.calls("RequestCertificate"), proxy.calls("DescribeCertificate")), (1, 1));
}

#[tokio::test]
async fn injected_throttling_reaches_the_sdk_with_the_real_code_once() {
    let proxy = proxy().await;
    let acm = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::named("ListCertificates"), Fault::Throttling, 1);
    let error = acm.list_certificates().send().await.unwrap_err();
    assert_eq!(error.code(), Some("ThrottlingException"));
    acm.list_certificates().send().await.expect("only one call was throttled");
}

#[tokio::test]
async fn sdk_retries_an_injected_server_error() {
    let proxy = proxy().await;
    let acm = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::standard().with_max_attempts(2)).await);
    proxy.inject(Operation::named("ListCertificates"), Fault::ServerError(503), 1);
    acm.list_certificates().send().await.expect("the SDK's retry gets past one 503");
    assert_eq!(proxy.calls("ListCertificates"), 2);
}

#[tokio::test]
async fn injected_resource_in_use_is_parsed_as_the_modelled_error() {
    let proxy = proxy().await;
    let acm = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::named("DeleteCertificate"), Fault::ResourceInUse, 1);
    let error = acm.delete_certificate().certificate_arn("arn:aws:acm:us-east-1:123456789012:certificate/x").send().await.unwrap_err();
    assert!(error.into_service_error().is_resource_in_use_exception());
}

#[tokio::test]
async fn route53_prior_request_not_complete_and_pending_changes() {
    let proxy = proxy().await;
    let route53 = aws_sdk_route53::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let zone = route53
        .create_hosted_zone()
        .name("proxy-test.example.com")
        .caller_reference(uuid::Uuid::new_v4().to_string())
        .send()
        .await
        .unwrap()
        .hosted_zone
        .unwrap()
        .id;
    let upsert = || {
        route53.change_resource_record_sets().hosted_zone_id(&zone).change_batch(
            ChangeBatch::builder()
                .changes(
                    Change::builder()
                        .action(ChangeAction::Upsert)
                        .resource_record_set(
                            ResourceRecordSet::builder()
                                .name("a.proxy-test.example.com")
                                .r#type(RrType::Cname)
                                .ttl(60)
                                .resource_records(ResourceRecord::builder().value("b.example.com").build().unwrap())
                                .build()
                                .unwrap(),
                        )
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
    };
    proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::PriorRequestNotComplete, 1);
    assert_eq!(upsert().send().await.unwrap_err().code(), Some("PriorRequestNotComplete"));

    proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::PendingChange, 1);
    let change = upsert().send().await.unwrap().change_info.unwrap();
    assert_eq!(change.status, ChangeStatus::Pending);
    proxy.inject(Operation::named("GetChange"), Fault::PendingChange, 1);
    let polled = route53.get_change().id(&change.id).send().await.unwrap().change_info.unwrap();
    assert_eq!(polled.status, ChangeStatus::Pending);
    let settled = route53.get_change().id(&change.id).send().await.unwrap().change_info.unwrap();
    assert_eq!(settled.status, ChangeStatus::Insync);
}

/// The proxy answers a DELETE that does not match the record as AWS does (InvalidChangeBatch),
/// after reading the record set; a DELETE in a hosted zone that does not exist goes on to moto,
/// which answers NoSuchHostedZone as AWS does (issue 26).
#[tokio::test]
async fn a_delete_in_a_hosted_zone_that_does_not_exist_is_answered_no_such_hosted_zone() {
    let proxy = proxy().await;
    let route53 = aws_sdk_route53::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let set = ResourceRecordSet::builder()
        .name("a.proxy-gone.example.com")
        .r#type(RrType::Cname)
        .ttl(60)
        .resource_records(ResourceRecord::builder().value("b.example.com").build().unwrap())
        .build()
        .unwrap();
    let delete = Change::builder().action(ChangeAction::Delete).resource_record_set(set).build().unwrap();
    let refused = route53
        .change_resource_record_sets()
        .hosted_zone_id("Z0TYPOTYPOTYPO")
        .change_batch(ChangeBatch::builder().changes(delete).build().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("NoSuchHostedZone"), "{refused:?}");
}

#[tokio::test]
async fn latency_delays_the_call() {
    let proxy = proxy().await;
    let sts = aws_sdk_sts::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::Any, Fault::Latency(Duration::from_millis(400)), 1);
    let started = Instant::now();
    sts.get_caller_identity().send().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn a_slow_response_takes_effect_before_its_caller_hears_of_it() {
    let proxy = proxy().await;
    let through_proxy = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let direct = aws_sdk_acm::Client::new(&sdk_config(&moto().await.unwrap().endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::named("RequestCertificate"), Fault::SlowResponse(Duration::from_secs(2)), 1);
    let started = Instant::now();
    let request = tokio::spawn(async move {
        through_proxy
            .request_certificate()
            .domain_name("slow-response.example.com")
            .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
            .send()
            .await
            .unwrap()
            .certificate_arn
            .unwrap()
    });
    let listed = loop {
        // moto may answer a listing made while it generates the request's key with a 500: look again.
        let found = match direct.list_certificates().send().await {
            Ok(listing) => {
                listing.certificate_summary_list().iter().find(|s| s.domain_name() == Some("slow-response.example.com")).cloned()
            }
            Err(error) if error.raw_response().is_some_and(|r| r.status().as_u16() == 500) => None,
            Err(error) => panic!("{error:?}"),
        };
        if let Some(found) = found {
            break found;
        }
        assert!(started.elapsed() < Duration::from_secs(2), "the request did not take effect before its answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!request.is_finished(), "the caller is still waiting");
    let arn = request.await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(listed.certificate_arn(), Some(arn.as_str()));
}

#[tokio::test]
async fn access_denied_reaches_sts_callers_as_an_xml_error() {
    let proxy = proxy().await;
    let sts = aws_sdk_sts::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::named("AssumeRole"), Fault::AccessDenied, 1);
    let error = sts.assume_role().role_arn("arn:aws:iam::210987654321:role/dns").role_session_name("t").send().await.unwrap_err();
    assert_eq!(error.code(), Some("AccessDenied"));
    assert_eq!(proxy.calls("AssumeRole"), 1);
}

#[tokio::test]
async fn ministack_serves_the_cloudfront_tenant_apis_moto_lacks() {
    let endpoint = ministack().await.unwrap().endpoint();
    let proxy = FaultProxy::start(&endpoint).await.unwrap();
    let stream = tokio::net::TcpStream::connect(proxy.endpoint().trim_start_matches("http://")).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::post("/2020-05-31/connection-groups")
        .header("host", "cloudfront.amazonaws.com")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/cloudfront/aws4_request, SignedHeaders=host, Signature=0",
        )
        .header("content-type", "application/xml")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"<ListConnectionGroupsRequest xmlns=\"http://cloudfront.amazonaws.com/doc/2020-05-31/\"/>",
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(status.is_success(), "{status}: {text}");
    assert!(text.contains("ConnectionGroup"), "{text}");
    assert_eq!(proxy.calls("ListConnectionGroups"), 1);
}

#[tokio::test]
async fn a_timeout_is_ended_by_the_callers_own_timeout_and_never_forwarded() {
    let proxy = proxy().await;
    let config = sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await;
    let timeouts = aws_config::timeout::TimeoutConfig::builder().operation_attempt_timeout(Duration::from_millis(500)).build();
    let sts = aws_sdk_sts::Client::from_conf(aws_sdk_sts::config::Builder::from(&config).timeout_config(timeouts).build());
    proxy.inject(Operation::named("GetCallerIdentity"), Fault::Timeout, 1);
    let started = Instant::now();
    let error = sts.get_caller_identity().send().await.unwrap_err();
    assert!(matches!(error, aws_sdk_sts::error::SdkError::TimeoutError(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "the caller's timeout ended it");
    // Without the half-second timeout: the shared moto may take longer on a loaded machine.
    let patient = aws_sdk_sts::Client::new(&config);
    patient.get_caller_identity().send().await.expect("only one call timed out");
    assert_eq!(proxy.injected().get("Timeout"), Some(&1));
}

#[tokio::test]
async fn a_reset_connection_reaches_the_sdk_as_a_dispatch_failure_and_nothing_is_forwarded() {
    let proxy = proxy().await;
    let acm = aws_sdk_acm::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    proxy.inject(Operation::named("RequestCertificate"), Fault::ConnectionReset, 1);
    let error = acm
        .request_certificate()
        .domain_name("reset.example.com")
        .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(error, aws_sdk_acm::error::SdkError::DispatchFailure(_)), "{error:?}");
    let listing = acm.list_certificates().send().await.expect("the next call gets through");
    assert!(!listing.certificate_summary_list().iter().any(|s| s.domain_name() == Some("reset.example.com")), "not forwarded");
}

#[tokio::test]
async fn random_faults_fail_about_their_share_of_calls_reproducibly() {
    let proxy = proxy().await;
    let sts = aws_sdk_sts::Client::new(&sdk_config(&proxy.endpoint(), RetryConfig::disabled()).await);
    let faults = RandomFaults { rate: 0.25, faults: vec![Fault::Throttling, Fault::ServerError(500)], seed: 7 };
    let mut outcomes = Vec::new();
    for _round in 0..2 {
        proxy.inject_random(faults.clone());
        let mut round = Vec::new();
        for _ in 0..80 {
            round.push(sts.get_caller_identity().send().await.err().and_then(|e| e.code().map(str::to_owned)));
        }
        outcomes.push(round);
    }
    proxy.stop_random();
    let failed = outcomes[0].iter().filter(|o| o.is_some()).count();
    assert!((8..=32).contains(&failed), "{failed} of 80 failed at a rate of 25 %");
    assert_eq!(outcomes[0], outcomes[1], "the same seed draws the same faults");
    assert!(outcomes[0].iter().flatten().all(|code| code == "Throttling" || code == "InternalFailure"), "{:?}", outcomes[0]);
    sts.get_caller_identity().send().await.expect("stopped");
}
