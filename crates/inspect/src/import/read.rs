//! What `blockwork import` reads from AWS: read calls only (List*, Describe*, Get*), each through
//! the process's AWS layer as the controllers make them (quotas, retries on throttling,
//! sanitized errors), as the principal the import acts as.

use std::future::Future;

use aws_sdk_acm::types::{CertificateExport, Filters, KeyAlgorithm, ValidationMethod};
use blockwork_aws::{Aws, AwsError, Call, Principal, Scope, Service, classify_sdk_error};

use super::certs::FoundCertificate;
use super::tenants::{FoundRecord, FoundTenant, Groups};

/// ListCertificates' largest page.
const PAGE_SIZE: i32 = 1000;

/// Reads as one principal.
pub struct Reader<'a> {
    pub aws: &'a Aws,
    pub principal: &'a Principal,
}

impl Reader<'_> {
    async fn call<T, F, Fut>(
        &self,
        caller: &'static str,
        service: Service,
        region: Option<&str>,
        operation: &'static str,
        attempt: F,
    ) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        let callers: &[&'static str] = if caller == "cert" { &["cert"] } else { &["tenant"] };
        let call = Call {
            callers,
            identity: self.principal.identity(),
            scope: Scope::new(self.principal.account(), service, region),
            operation,
            changes: 0,
        };
        self.aws.call(call, attempt).await
    }

    /// Every certificate of the account in the ACM region, every key algorithm (ListCertificates
    /// returns only RSA 2048 ones unless asked), described and with its tags.
    pub async fn certificates(&self) -> Result<Vec<FoundCertificate>, AwsError> {
        const LIST: &str = "ListCertificates";
        let region = self.aws.region().await;
        let acm = self.aws.acm("cert", None, self.principal).await?;
        let includes =
            Filters::builder().set_key_types(Some(KeyAlgorithm::values().iter().map(|k| KeyAlgorithm::from(*k)).collect())).build();
        let mut arns = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("cert", Service::Acm, region.as_deref(), LIST, || {
                    let request = acm.list_certificates().includes(includes.clone()).max_items(PAGE_SIZE).set_next_token(token.clone());
                    async move { request.send().await.map_err(|e| classify_sdk_error(LIST, &e)) }
                })
                .await?;
            arns.extend(page.certificate_summary_list().iter().filter_map(|s| s.certificate_arn().map(str::to_owned)));
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => break,
            }
        }
        let mut found = Vec::with_capacity(arns.len());
        for arn in arns {
            found.push(self.certificate(&acm, region.as_deref(), &arn).await?);
        }
        Ok(found)
    }

    async fn certificate(&self, acm: &aws_sdk_acm::Client, region: Option<&str>, arn: &str) -> Result<FoundCertificate, AwsError> {
        const DESCRIBE: &str = "DescribeCertificate";
        const TAGS: &str = "ListTagsForCertificate";
        let described = self
            .call("cert", Service::Acm, region, DESCRIBE, || async {
                acm.describe_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(DESCRIBE, &e))
            })
            .await?;
        let tags = self
            .call("cert", Service::Acm, region, TAGS, || async {
                acm.list_tags_for_certificate().certificate_arn(arn).send().await.map_err(|e| classify_sdk_error(TAGS, &e))
            })
            .await?;
        let Some(detail) = described.certificate() else {
            return Ok(FoundCertificate { arn: arn.to_owned(), status: "unknown".to_owned(), ..FoundCertificate::default() });
        };
        Ok(FoundCertificate {
            arn: arn.to_owned(),
            domain: detail.domain_name().unwrap_or_default().to_owned(),
            sans: detail.subject_alternative_names().to_vec(),
            status: detail.status().map_or("unknown", |s| s.as_str()).to_owned(),
            kind: detail.r#type().map_or("unknown", |t| t.as_str()).to_owned(),
            email_validated: detail.domain_validation_options().iter().any(|v| v.validation_method() == Some(&ValidationMethod::Email)),
            exportable: detail.options().and_then(|o| o.export()) == Some(&CertificateExport::Enabled),
            authority: detail.certificate_authority_arn().map(str::to_owned),
            tags: tags.tags().iter().map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned())).collect(),
        })
    }

    /// The tenants of `distribution` (ListDistributionTenants), each read whole
    /// (GetDistributionTenant: the listing lacks parameters and tags).
    pub async fn tenants(&self, distribution: &str) -> Result<Vec<FoundTenant>, AwsError> {
        const LIST: &str = "ListDistributionTenants";
        const GET: &str = "GetDistributionTenant";
        let cloudfront = self.aws.cloudfront("tenant", self.principal).await?;
        let filter = aws_sdk_cloudfront::types::DistributionTenantAssociationFilter::builder().distribution_id(distribution).build();
        let mut ids = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = self
                .call("tenant", Service::CloudFront, None, LIST, || {
                    let request = cloudfront.list_distribution_tenants().association_filter(filter.clone()).set_marker(marker.clone());
                    async move { request.send().await.map_err(|e| classify_sdk_error(LIST, &e)) }
                })
                .await?;
            ids.extend(page.distribution_tenant_list().iter().map(|t| t.id().to_owned()));
            match page.next_marker() {
                Some(next) if !next.is_empty() => marker = Some(next.to_owned()),
                _ => break,
            }
        }
        let mut found = Vec::with_capacity(ids.len());
        for id in ids {
            let output = self
                .call("tenant", Service::CloudFront, None, GET, || async {
                    cloudfront.get_distribution_tenant().identifier(&id).send().await.map_err(|e| classify_sdk_error(GET, &e))
                })
                .await?;
            if let Some(tenant) = output.distribution_tenant() {
                let observed = blockwork_tenant::cloudfront::observed(tenant, None);
                found.push(FoundTenant { name: tenant.name().unwrap_or_default().to_owned(), id: observed.id, config: observed.config });
            }
        }
        Ok(found)
    }

    /// The account's connection groups: their routing endpoints, the default one.
    pub async fn groups(&self) -> Result<Groups, AwsError> {
        const LIST: &str = "ListConnectionGroups";
        let cloudfront = self.aws.cloudfront("tenant", self.principal).await?;
        let mut groups = Groups::default();
        let mut marker: Option<String> = None;
        loop {
            let page = self
                .call("tenant", Service::CloudFront, None, LIST, || {
                    let request = cloudfront.list_connection_groups().set_marker(marker.clone());
                    async move { request.send().await.map_err(|e| classify_sdk_error(LIST, &e)) }
                })
                .await?;
            for group in page.connection_groups() {
                let id = group.id().to_owned();
                if group.is_default() == Some(true) {
                    groups.default = Some(id.clone());
                }
                groups.endpoints.insert(id, group.routing_endpoint().to_owned());
            }
            match page.next_marker() {
                Some(next) if !next.is_empty() => marker = Some(next.to_owned()),
                _ => break,
            }
        }
        Ok(groups)
    }

    /// The CNAMEs of the hosted zone `zone_id`.
    pub async fn cnames(&self, zone_id: &str) -> Result<Vec<FoundRecord>, AwsError> {
        const LIST: &str = "ListResourceRecordSets";
        let route53 = self.aws.route53("tenant", self.principal).await?;
        let mut records = Vec::new();
        let mut next: Option<(String, Option<aws_sdk_route53::types::RrType>)> = None;
        loop {
            let (name, kind) = next.take().unzip();
            let page = self
                .call("tenant", Service::Route53, None, LIST, || {
                    let request = route53
                        .list_resource_record_sets()
                        .hosted_zone_id(zone_id)
                        .set_start_record_name(name.clone())
                        .set_start_record_type(kind.clone().flatten());
                    async move { request.send().await.map_err(|e| classify_sdk_error(LIST, &e)) }
                })
                .await?;
            for set in page.resource_record_sets() {
                if *set.r#type() != aws_sdk_route53::types::RrType::Cname {
                    continue;
                }
                for record in set.resource_records() {
                    records.push(FoundRecord {
                        zone_id: zone_id.to_owned(),
                        name: blockwork_aws::dns_name::from_route53(set.name()),
                        value: blockwork_aws::dns_name::normalize(record.value()),
                        ttl: set.ttl(),
                    });
                }
            }
            match (page.is_truncated(), page.next_record_name()) {
                (true, Some(name)) => next = Some((name.to_owned(), page.next_record_type().cloned())),
                _ => break,
            }
        }
        Ok(records)
    }
}
