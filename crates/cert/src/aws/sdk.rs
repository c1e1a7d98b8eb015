//! The AWS SDK implementation of the traits: one call per method (plus paging), timed and
//! counted, errors classified and sanitized by `blockwork-aws`. No retries here: the SDK's are
//! disabled so that the [`Retrying`](super::Retrying) decorator is the only retry layer (and
//! counts every throttling event).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_acm::types::{CertificateStatus, Tag, ValidationMethod};
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_aws::classify_sdk_error;

use super::{
    AcmStatus, AwsError, Certificate, CertificateApi, CertificateRequest, DnsApi, DnsRecord, DomainValidation, ErrorClass, Freshness,
};
use crate::metrics::CertMetrics;

/// ACM and Route53 clients from one SDK configuration.
#[derive(Clone, Debug)]
pub struct Sdk {
    acm: aws_sdk_acm::Client,
    route53: aws_sdk_route53::Client,
    metrics: Arc<CertMetrics>,
}

impl Sdk {
    /// `timeout` bounds each call, attempt and all (`--aws-default-timeout`).
    pub fn new(config: &SdkConfig, timeout: Duration, metrics: Arc<CertMetrics>) -> Self {
        let timeouts = TimeoutConfig::builder().operation_timeout(timeout).build();
        let acm = aws_sdk_acm::config::Builder::from(config).retry_config(RetryConfig::disabled()).timeout_config(timeouts.clone()).build();
        let route53 = aws_sdk_route53::config::Builder::from(config).retry_config(RetryConfig::disabled()).timeout_config(timeouts).build();
        Self { acm: aws_sdk_acm::Client::from_conf(acm), route53: aws_sdk_route53::Client::from_conf(route53), metrics }
    }

    fn record<T>(&self, operation: &'static str, started: Instant, result: &Result<T, AwsError>) {
        self.metrics.aws_call(operation, result.is_ok(), started.elapsed());
    }
}

fn timestamp(time: Option<&aws_sdk_acm::primitives::DateTime>) -> Option<jiff::Timestamp> {
    time.and_then(|t| jiff::Timestamp::from_second(t.secs()).ok())
}

fn invalid_input(operation: &'static str, message: String) -> AwsError {
    AwsError { operation, code: Some("InvalidInput".to_owned()), class: ErrorClass::Terminal, message }
}

impl CertificateApi for Sdk {
    async fn describe(&self, arn: &str) -> Result<Certificate, AwsError> {
        const OP: &str = "DescribeCertificate";
        let started = Instant::now();
        let result = self.acm.describe_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        let detail = result?.certificate.ok_or_else(|| AwsError {
            operation: OP,
            code: Some("ResourceNotFoundException".to_owned()),
            class: ErrorClass::NotFound,
            message: "no certificate in the response".to_owned(),
        })?;
        Ok(Certificate {
            arn: detail.certificate_arn().unwrap_or(arn).to_owned(),
            domain: detail.domain_name().unwrap_or_default().to_owned(),
            sans: detail.subject_alternative_names().to_vec(),
            status: detail.status().map_or(AcmStatus::Other("unknown".to_owned()), |s| AcmStatus::parse(s.as_str())),
            created_at: timestamp(detail.created_at()),
            not_after: timestamp(detail.not_after()),
            in_use_by: detail.in_use_by().to_vec(),
            renewal_status: detail.renewal_summary().map(|r| r.renewal_status().as_str().to_owned()),
            failure_reason: detail.failure_reason().map(|r| r.as_str().to_owned()),
            validations: detail
                .domain_validation_options()
                .iter()
                .map(|v| DomainValidation {
                    domain: v.domain_name().to_owned(),
                    status: v.validation_status().map(|s| s.as_str().to_owned()),
                    record: v.resource_record().map(|r| DnsRecord { name: r.name().to_owned(), value: r.value().to_owned() }),
                })
                .collect(),
        })
    }

    /// Always current: the SDK has nothing to reuse.
    async fn list_certificates(&self, _freshness: Freshness) -> Result<Vec<(String, String)>, AwsError> {
        const OP: &str = "ListCertificates";
        let mut found = Vec::new();
        let mut pages = self
            .acm
            .list_certificates()
            .certificate_statuses(CertificateStatus::PendingValidation)
            .certificate_statuses(CertificateStatus::Issued)
            .certificate_statuses(CertificateStatus::Failed)
            .certificate_statuses(CertificateStatus::ValidationTimedOut)
            .into_paginator()
            .send();
        loop {
            let started = Instant::now();
            let Some(page) = pages.next().await else { break };
            let page = page.map_err(|e| classify_sdk_error(OP, &e));
            self.record(OP, started, &page);
            for summary in page?.certificate_summary_list() {
                if let (Some(domain), Some(arn)) = (summary.domain_name(), summary.certificate_arn()) {
                    found.push((domain.to_owned(), arn.to_owned()));
                }
            }
        }
        Ok(found)
    }

    async fn list_tags(&self, arn: &str) -> Result<Vec<(String, String)>, AwsError> {
        const OP: &str = "ListTagsForCertificate";
        let started = Instant::now();
        let result = self.acm.list_tags_for_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        Ok(result?.tags().iter().map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned())).collect())
    }

    async fn request(&self, request: &CertificateRequest) -> Result<String, AwsError> {
        const OP: &str = "RequestCertificate";
        let tags = request
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid_input(OP, e.to_string()))?;
        let mut call = self
            .acm
            .request_certificate()
            .domain_name(&request.domain)
            .validation_method(ValidationMethod::Dns)
            .idempotency_token(&request.token)
            .set_tags(Some(tags));
        if !request.sans.is_empty() {
            // ACM wants the primary among the SANs when any are given.
            let mut sans = vec![request.domain.clone()];
            sans.extend(request.sans.iter().cloned());
            call = call.set_subject_alternative_names(Some(sans));
        }
        let started = Instant::now();
        let result = call.send().await.map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        result?.certificate_arn.ok_or_else(|| AwsError {
            operation: OP,
            code: None,
            class: ErrorClass::Retryable,
            message: "ACM returned no certificate ARN".to_owned(),
        })
    }

    async fn delete(&self, arn: &str) -> Result<(), AwsError> {
        const OP: &str = "DeleteCertificate";
        let started = Instant::now();
        let result = self.acm.delete_certificate().certificate_arn(arn).send().await.map(|_| ()).map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        result
    }
}

impl DnsApi for Sdk {
    async fn lookup_cname(&self, zone_id: &str, name: &str) -> Result<Option<String>, AwsError> {
        const OP: &str = "ListResourceRecordSets";
        let started = Instant::now();
        let result = self
            .route53
            .list_resource_record_sets()
            .hosted_zone_id(zone_id)
            .start_record_name(name)
            .start_record_type(RrType::Cname)
            .max_items(1)
            .send()
            .await
            .map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        let wanted = crate::zones::normalize(name);
        Ok(result?
            .resource_record_sets()
            .iter()
            .find(|set| *set.r#type() == RrType::Cname && crate::zones::normalize(set.name()) == wanted)
            .and_then(|set| set.resource_records().first())
            .map(|record| record.value().to_owned()))
    }

    async fn upsert_cnames(&self, zone_id: &str, records: &[DnsRecord]) -> Result<(), AwsError> {
        const OP: &str = "ChangeResourceRecordSets";
        if records.is_empty() {
            return Ok(());
        }
        let changes =
            records.iter().map(|r| change(ChangeAction::Upsert, r)).collect::<Result<Vec<_>, _>>().map_err(|e| invalid_input(OP, e))?;
        let batch = ChangeBatch::builder()
            .comment("ACM DNS validation (blockwork-cert)")
            .set_changes(Some(changes))
            .build()
            .map_err(|e| invalid_input(OP, e.to_string()))?;
        let started = Instant::now();
        let result = self
            .route53
            .change_resource_record_sets()
            .hosted_zone_id(zone_id)
            .change_batch(batch)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify_sdk_error(OP, &e));
        self.record(OP, started, &result);
        result
    }

    async fn delete_cname(&self, zone_id: &str, record: &DnsRecord) -> Result<bool, AwsError> {
        const OP: &str = "ChangeResourceRecordSets";
        let change = change(ChangeAction::Delete, record).map_err(|e| invalid_input(OP, e))?;
        let batch = ChangeBatch::builder().changes(change).build().map_err(|e| invalid_input(OP, e.to_string()))?;
        let started = Instant::now();
        let result = self.route53.change_resource_record_sets().hosted_zone_id(zone_id).change_batch(batch).send().await;
        let outcome = match result {
            Ok(_) => Ok(true),
            // The record is gone or has another value now (AWS: InvalidChangeBatch; moto:
            // InvalidInput): either way there is nothing of ours to delete.
            Err(error) if error.as_service_error().is_some_and(|e| e.is_invalid_change_batch() || e.is_invalid_input()) => Ok(false),
            Err(error) => Err(classify_sdk_error(OP, &error)),
        };
        self.record(OP, started, &outcome);
        outcome
    }
}

fn change(action: ChangeAction, record: &DnsRecord) -> Result<Change, String> {
    let value = ResourceRecord::builder().value(&record.value).build().map_err(|e| e.to_string())?;
    let set = ResourceRecordSet::builder()
        .name(&record.name)
        .r#type(RrType::Cname)
        .ttl(super::VALIDATION_RECORD_TTL)
        .resource_records(value)
        .build()
        .map_err(|e| e.to_string())?;
    Change::builder().action(action).resource_record_set(set).build().map_err(|e| e.to_string())
}
