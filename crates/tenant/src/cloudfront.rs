//! The AWS calls the operator makes, behind traits ([`CloudFront`], and [`Acm`] for the names of
//! a certificate), and their SDK implementation on the process's AWS layer: every call draws
//! from the process's buckets, is retried there on throttling, and is counted in the layer's
//! metrics (seed 001's `..._aws_api_call_duration_seconds{operation}` included); failures come
//! back as [`AwsError`] (classified, message sanitized).

use std::future::Future;
use std::sync::Arc;

use aws_sdk_cloudfront::types::{
    Certificate, CertificateTransparencyLoggingPreference, CustomizationActionType, Customizations, DomainItem,
    GeoRestrictionCustomization, GeoRestrictionType as SdkGeoType, ManagedCertificateRequest as SdkManagedRequest, Parameter, Tag, Tags,
    ValidationTokenHost as SdkTokenHost, WebAclCustomization,
};
use blockwork_aws::acm::AcmConfig;
use blockwork_aws::{Aws, AwsError, Call, ErrorClass as AwsClass, Principal, Scope, Service, classify_sdk_error};

use crate::api::{GeoRestrictionType, ManagedCertificateRequest, TransparencyPreference, ValidationTokenHost, WebAclAction};
use crate::diff::{TenantConfig, WebAcl, normal_geo};
use crate::validate::{DistributionRules, ParameterDefinition};
use blockwork_aws::ownership::{TAG_OWNER, TAG_OWNER_UID};

/// A tenant as CloudFront reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedTenant {
    pub id: String,
    /// Its name (`metadata.name` of the object that manages it).
    pub name: Option<String>,
    /// Its ownership tags (ADR 0017), as (key, value).
    pub tags: Vec<(String, String)>,
    pub arn: Option<String>,
    /// The `IfMatch` for the next update or delete.
    pub e_tag: Option<String>,
    /// `InProgress` or `Deployed`.
    pub status: Option<String>,
    pub config: TenantConfig,
}

/// What CloudFront says of a managed certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedCertificate {
    pub status: String,
    pub arn: Option<String>,
}

/// Everything a create or update sends.
#[derive(Clone, Copy, Debug)]
pub struct TenantWrite<'a> {
    pub config: &'a TenantConfig,
    pub managed_certificate_request: Option<&'a ManagedCertificateRequest>,
}

/// The tenant APIs the operator uses.
pub trait CloudFront: Send + Sync + 'static {
    /// By id, ARN or name; `None` when it does not exist.
    fn get_tenant(&self, principal: &Principal, identifier: &str) -> impl Future<Output = Result<Option<ObservedTenant>, AwsError>> + Send;
    /// Tagged with `owner`'s ownership tags.
    fn create_tenant(
        &self,
        principal: &Principal,
        name: &str,
        owner: &[(String, String)],
        write: TenantWrite<'_>,
    ) -> impl Future<Output = Result<ObservedTenant, AwsError>> + Send;
    /// Writes `owner`'s tags on the tenant (`arn`), over whatever owner tags it had: the one
    /// write of an adoption.
    fn tag_tenant(&self, principal: &Principal, arn: &str, owner: &[(String, String)])
    -> impl Future<Output = Result<(), AwsError>> + Send;
    fn update_tenant(
        &self,
        principal: &Principal,
        id: &str,
        if_match: &str,
        write: TenantWrite<'_>,
    ) -> impl Future<Output = Result<ObservedTenant, AwsError>> + Send;
    fn delete_tenant(&self, principal: &Principal, id: &str, if_match: &str) -> impl Future<Output = Result<(), AwsError>> + Send;
    /// The named connection group's routing endpoint, or (`None`) the account's default one's.
    fn routing_endpoint(
        &self,
        principal: &Principal,
        connection_group_id: Option<&str>,
    ) -> impl Future<Output = Result<String, AwsError>> + Send;
    /// `None` when CloudFront has no managed certificate for the tenant.
    fn managed_certificate(
        &self,
        principal: &Principal,
        tenant: &str,
    ) -> impl Future<Output = Result<Option<ManagedCertificate>, AwsError>> + Send;
    /// What the distribution asks of its tenants; `None` when it does not exist.
    fn distribution(&self, principal: &Principal, id: &str) -> impl Future<Output = Result<Option<DistributionRules>, AwsError>> + Send;
}

/// The ACM call behind the certificate coverage check.
pub trait Acm: Send + Sync + 'static {
    /// The certificate's domain name and subject alternative names.
    fn certificate_names(&self, principal: &Principal, arn: &str) -> impl Future<Output = Result<Vec<String>, AwsError>> + Send;
}

/// aws-sdk-cloudfront and ACM, on the process's AWS layer; each call acts as the principal it is
/// given (the tenant's namespace's identity, ADR 0014).
pub struct Sdk {
    aws: Arc<Aws>,
    acm: Arc<blockwork_aws::acm::Acm>,
}

impl Sdk {
    pub fn new(aws: &Arc<Aws>) -> Self {
        // CloudFront only takes certificates from us-east-1, whatever the operator's region. Only
        // descriptions are read (as each call's principal): the listing is never swept.
        let region = Some(crate::validate::CERTIFICATE_REGION);
        let acm = blockwork_aws::acm::Acm::new(aws, crate::CONTROLLER, region, Principal::operator(), AcmConfig::default());
        Self { aws: Arc::clone(aws), acm }
    }

    /// A client with `principal`'s current credentials.
    async fn client(&self, principal: &Principal) -> Result<aws_sdk_cloudfront::Client, AwsError> {
        self.aws.cloudfront(crate::CONTROLLER, principal).await
    }

    /// One CloudFront call through the layer: CloudFront's quota is the account's, global.
    async fn call<T, F, Fut>(&self, principal: &Principal, operation: &'static str, attempt: F) -> Result<T, AwsError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        let call = Call {
            callers: &[crate::CONTROLLER],
            identity: principal.identity(),
            scope: Scope::new(principal.account(), Service::CloudFront, None),
            operation,
            changes: 0,
        };
        self.aws.call(call, attempt).await
    }
}

/// A request the SDK refused to build (a required member missing): a bug of ours, never retried.
fn build_error(operation: &'static str, error: &aws_sdk_cloudfront::error::BuildError) -> AwsError {
    AwsError { operation, code: None, class: AwsClass::Terminal, message: format!("the request could not be built: {error}") }
}

/// The members a create and an update both send.
struct SdkWrite {
    domains: Vec<DomainItem>,
    parameters: Vec<Parameter>,
    customizations: Customizations,
    managed: Option<SdkManagedRequest>,
}

fn sdk_write(operation: &'static str, write: TenantWrite<'_>) -> Result<SdkWrite, AwsError> {
    let config = write.config;
    let domains = config
        .domains
        .iter()
        .map(|d| DomainItem::builder().domain(d).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| build_error(operation, &e))?;
    let parameters = config
        .parameters
        .iter()
        .map(|(name, value)| Parameter::builder().name(name).value(value).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| build_error(operation, &e))?;
    let mut customizations = Customizations::builder();
    if let Some(arn) = &config.certificate_arn {
        customizations = customizations.certificate(Certificate::builder().arn(arn).build().map_err(|e| build_error(operation, &e))?);
    }
    if let Some(web_acl) = &config.web_acl {
        let action = match web_acl.action {
            WebAclAction::Override => CustomizationActionType::Override,
            WebAclAction::Disable => CustomizationActionType::Disable,
        };
        let built =
            WebAclCustomization::builder().action(action).set_arn(web_acl.arn.clone()).build().map_err(|e| build_error(operation, &e))?;
        customizations = customizations.web_acl(built);
    }
    if let Some(geo) = &config.geo_restrictions {
        let kind = match geo.restriction_type {
            GeoRestrictionType::Whitelist => SdkGeoType::Whitelist,
            GeoRestrictionType::Blacklist => SdkGeoType::Blacklist,
            GeoRestrictionType::None => SdkGeoType::None,
        };
        let built = GeoRestrictionCustomization::builder()
            .restriction_type(kind)
            .set_locations(Some(geo.locations.iter().cloned().collect()))
            .build()
            .map_err(|e| build_error(operation, &e))?;
        customizations = customizations.geo_restrictions(built);
    }
    let managed = match write.managed_certificate_request {
        None => None,
        Some(request) => {
            let host = match request.validation_token_host {
                ValidationTokenHost::Cloudfront => SdkTokenHost::CloudFront,
                ValidationTokenHost::SelfHosted => SdkTokenHost::SelfHosted,
            };
            let preference = request.certificate_transparency_logging_preference.map(|p| match p {
                TransparencyPreference::Enabled => CertificateTransparencyLoggingPreference::Enabled,
                TransparencyPreference::Disabled => CertificateTransparencyLoggingPreference::Disabled,
            });
            let built = SdkManagedRequest::builder()
                .validation_token_host(host)
                .set_primary_domain_name(request.primary_domain_name.as_deref().map(blockwork_aws::dns_name::normalize))
                .set_certificate_transparency_logging_preference(preference)
                .build()
                .map_err(|e| build_error(operation, &e))?;
            Some(built)
        }
    };
    Ok(SdkWrite { domains, parameters, customizations: customizations.build(), managed })
}

/// The SDK's tenant in the operator's normal form.
pub fn observed(tenant: &aws_sdk_cloudfront::types::DistributionTenant, e_tag: Option<&str>) -> ObservedTenant {
    let customizations = tenant.customizations();
    let geo_restrictions = customizations.and_then(|c| c.geo_restrictions()).and_then(|g| {
        let kind = match g.restriction_type() {
            SdkGeoType::Whitelist => GeoRestrictionType::Whitelist,
            SdkGeoType::Blacklist => GeoRestrictionType::Blacklist,
            _ => GeoRestrictionType::None,
        };
        normal_geo(kind, g.locations().iter().map(String::as_str))
    });
    let web_acl = customizations.and_then(|c| c.web_acl()).map(|w| WebAcl {
        action: if *w.action() == CustomizationActionType::Disable { WebAclAction::Disable } else { WebAclAction::Override },
        arn: w.arn().map(str::to_owned),
    });
    let tags = tenant.tags().map(Tags::items).unwrap_or_default();
    let ownership = tags
        .iter()
        .filter(|tag| [TAG_OWNER, TAG_OWNER_UID].contains(&tag.key()))
        .filter_map(|tag| tag.value().map(|value| (tag.key().to_owned(), value.to_owned())))
        .collect();
    ObservedTenant {
        id: tenant.id().unwrap_or_default().to_owned(),
        name: tenant.name().map(str::to_owned),
        tags: ownership,
        arn: tenant.arn().map(str::to_owned),
        e_tag: e_tag.map(str::to_owned),
        status: tenant.status().map(str::to_owned),
        config: TenantConfig {
            distribution_id: tenant.distribution_id().unwrap_or_default().to_owned(),
            domains: tenant.domains().iter().map(|d| blockwork_aws::dns_name::normalize(d.domain())).collect(),
            enabled: tenant.enabled().unwrap_or(true),
            connection_group_id: tenant.connection_group_id().map(str::to_owned),
            parameters: tenant.parameters().iter().map(|p| (p.name().to_owned(), p.value().to_owned())).collect(),
            certificate_arn: customizations.and_then(|c| c.certificate()).map(|c| c.arn().to_owned()),
            web_acl,
            geo_restrictions,
            managed_certificate: false,
        },
    }
}

/// The ownership tags as CloudFront takes them.
fn sdk_tags(operation: &'static str, owner: &[(String, String)]) -> Result<Tags, AwsError> {
    let items = owner
        .iter()
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| build_error(operation, &e))?;
    Ok(Tags::builder().set_items(Some(items)).build())
}

fn missing_tenant(operation: &'static str) -> AwsError {
    AwsError { operation, code: None, class: AwsClass::Retryable, message: "CloudFront answered without the tenant".to_owned() }
}

impl CloudFront for Sdk {
    async fn get_tenant(&self, principal: &Principal, identifier: &str) -> Result<Option<ObservedTenant>, AwsError> {
        const OP: &str = "GetDistributionTenant";
        let client = &self.client(principal).await?;
        let result = self
            .call(principal, OP, || async {
                client.get_distribution_tenant().identifier(identifier).send().await.map_err(|e| classify_sdk_error(OP, &e))
            })
            .await;
        match result {
            Ok(output) => Ok(output.distribution_tenant().map(|t| observed(t, output.e_tag()))),
            Err(error) if error.class == AwsClass::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn create_tenant(
        &self,
        principal: &Principal,
        name: &str,
        owner: &[(String, String)],
        write: TenantWrite<'_>,
    ) -> Result<ObservedTenant, AwsError> {
        const OP: &str = "CreateDistributionTenant";
        let SdkWrite { domains, parameters, customizations, managed } = sdk_write(OP, write)?;
        let tags = sdk_tags(OP, owner)?;
        let request = self
            .client(principal)
            .await?
            .create_distribution_tenant()
            .name(name)
            .distribution_id(&write.config.distribution_id)
            .set_domains(Some(domains))
            .set_parameters(Some(parameters))
            .customizations(customizations)
            .set_connection_group_id(write.config.connection_group_id.clone())
            .set_managed_certificate_request(managed)
            .enabled(write.config.enabled)
            .tags(tags);
        let output = self
            .call(principal, OP, || {
                let request = request.clone();
                async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
            })
            .await?;
        output.distribution_tenant().map(|t| observed(t, output.e_tag())).ok_or_else(|| missing_tenant(OP))
    }

    async fn update_tenant(
        &self,
        principal: &Principal,
        id: &str,
        if_match: &str,
        write: TenantWrite<'_>,
    ) -> Result<ObservedTenant, AwsError> {
        const OP: &str = "UpdateDistributionTenant";
        let SdkWrite { domains, parameters, customizations, managed } = sdk_write(OP, write)?;
        let request = self
            .client(principal)
            .await?
            .update_distribution_tenant()
            .id(id)
            .if_match(if_match)
            .distribution_id(&write.config.distribution_id)
            .set_domains(Some(domains))
            .set_parameters(Some(parameters))
            .customizations(customizations)
            .set_connection_group_id(write.config.connection_group_id.clone())
            .set_managed_certificate_request(managed)
            .enabled(write.config.enabled);
        let output = self
            .call(principal, OP, || {
                let request = request.clone();
                async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
            })
            .await?;
        output.distribution_tenant().map(|t| observed(t, output.e_tag())).ok_or_else(|| missing_tenant(OP))
    }

    async fn tag_tenant(&self, principal: &Principal, arn: &str, owner: &[(String, String)]) -> Result<(), AwsError> {
        const OP: &str = "TagResource";
        let tags = sdk_tags(OP, owner)?;
        let client = &self.client(principal).await?;
        self.call(principal, OP, || {
            let tags = tags.clone();
            async move { client.tag_resource().resource(arn).tags(tags).send().await.map_err(|e| classify_sdk_error(OP, &e)) }
        })
        .await
        .map(|_| ())
    }

    async fn delete_tenant(&self, principal: &Principal, id: &str, if_match: &str) -> Result<(), AwsError> {
        const OP: &str = "DeleteDistributionTenant";
        let client = &self.client(principal).await?;
        self.call(principal, OP, || async move {
            client.delete_distribution_tenant().id(id).if_match(if_match).send().await.map_err(|e| classify_sdk_error(OP, &e))
        })
        .await
        .map(|_| ())
    }

    async fn routing_endpoint(&self, principal: &Principal, connection_group_id: Option<&str>) -> Result<String, AwsError> {
        if let Some(id) = connection_group_id {
            const OP: &str = "GetConnectionGroup";
            let client = &self.client(principal).await?;
            let output = self
                .call(principal, OP, || async move {
                    client.get_connection_group().identifier(id).send().await.map_err(|e| classify_sdk_error(OP, &e))
                })
                .await?;
            return output.connection_group().and_then(|g| g.routing_endpoint()).map(str::to_owned).ok_or_else(|| AwsError {
                operation: OP,
                code: None,
                class: AwsClass::Terminal,
                message: format!("connection group {id} has no routing endpoint"),
            });
        }
        const OP: &str = "ListConnectionGroups";
        let mut marker: Option<String> = None;
        let client = &self.client(principal).await?;
        loop {
            let request = client.list_connection_groups().set_marker(marker.take());
            let output = self
                .call(principal, OP, || {
                    let request = request.clone();
                    async move { request.send().await.map_err(|e| classify_sdk_error(OP, &e)) }
                })
                .await?;
            if let Some(default) = output.connection_groups().iter().find(|g| g.is_default() == Some(true)) {
                return Ok(default.routing_endpoint().to_owned());
            }
            match output.next_marker() {
                Some(next) if !next.is_empty() => marker = Some(next.to_owned()),
                _ => {
                    // CloudFront creates the default group with the account's first tenant.
                    return Err(AwsError {
                        operation: OP,
                        code: Some("ConnectionGroupNotFound".to_owned()),
                        class: AwsClass::Retryable,
                        message: "the account has no default connection group yet".to_owned(),
                    });
                }
            }
        }
    }

    async fn distribution(&self, principal: &Principal, id: &str) -> Result<Option<DistributionRules>, AwsError> {
        const OP: &str = "GetDistribution";
        let client = &self.client(principal).await?;
        match self
            .call(principal, OP, || async move { client.get_distribution().id(id).send().await.map_err(|e| classify_sdk_error(OP, &e)) })
            .await
        {
            Ok(output) => Ok(output.distribution().map(distribution_rules)),
            Err(error) if error.class == AwsClass::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn managed_certificate(&self, principal: &Principal, tenant: &str) -> Result<Option<ManagedCertificate>, AwsError> {
        const OP: &str = "GetManagedCertificateDetails";
        let client = &self.client(principal).await?;
        let output = self
            .call(principal, OP, || async move {
                client.get_managed_certificate_details().identifier(tenant).send().await.map_err(|e| classify_sdk_error(OP, &e))
            })
            .await?;
        Ok(output.managed_certificate_details().and_then(|details| {
            details
                .certificate_status()
                .map(|status| ManagedCertificate { status: status.as_str().to_owned(), arn: details.certificate_arn().map(str::to_owned) })
        }))
    }
}

/// The SDK's distribution as the rules its tenants must follow. A distribution without a
/// `ViewerCertificate`, or with `CloudFrontDefaultCertificate`, serves the default certificate
/// (`*.cloudfront.net`), as CloudFront does when none is configured.
pub fn distribution_rules(distribution: &aws_sdk_cloudfront::types::Distribution) -> DistributionRules {
    let config = distribution.distribution_config();
    let viewer = config.and_then(|c| c.viewer_certificate());
    let own_certificate = viewer.is_some_and(|v| v.acm_certificate_arn().is_some() || v.iam_certificate_id().is_some());
    let parameters = config
        .and_then(|c| c.tenant_config())
        .map(|t| t.parameter_definitions())
        .unwrap_or_default()
        .iter()
        .map(|definition| {
            let schema = definition.definition().and_then(|d| d.string_schema());
            ParameterDefinition {
                name: definition.name().to_owned(),
                required: schema.is_some_and(aws_sdk_cloudfront::types::StringSchemaConfig::required),
                default_value: schema.and_then(|s| s.default_value()).map(str::to_owned),
            }
        })
        .collect();
    DistributionRules {
        id: distribution.id().to_owned(),
        multi_tenant: config.and_then(|c| c.connection_mode()) == Some(&aws_sdk_cloudfront::types::ConnectionMode::TenantOnly),
        default_certificate: !own_certificate,
        parameters,
    }
}

impl Acm for Sdk {
    async fn certificate_names(&self, principal: &Principal, arn: &str) -> Result<Vec<String>, AwsError> {
        let certificate = self.acm.describe(principal, arn).await?;
        let mut names = certificate.sans;
        names.push(certificate.domain);
        Ok(names)
    }
}
