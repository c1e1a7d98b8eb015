//! AWS fixtures on the emulators: SDK clients that talk to them straight (to set up and to check
//! what the operator did), hosted zones and their CNAMEs, ACM certificates, a tenant-only
//! CloudFront distribution, and the AWS layer's configuration for controllers under test.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_cloudfront::types::{
    ConnectionMode, DefaultCacheBehavior, DistributionConfig, Origin, Origins, ParameterDefinition, ParameterDefinitionSchema,
    StringSchemaConfig, TenantConfig, ViewerCertificate, ViewerProtocolPolicy,
};
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_aws::quota::{Override, Quotas};
use blockwork_aws::route53::BatchPolicy;
use blockwork_aws::{AwsConfig, RetryPolicy};

/// What a fixture expects of an emulator: a failure is the test's.
#[allow(clippy::panic)]
fn expect<T, E: std::fmt::Debug>(what: &str, result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

/// An SDK configuration for `endpoint` in us-east-1 with test credentials and the SDK's retries
/// off: the operator's own reaction to each error is under test, not the SDK's.
pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_route53::config::Credentials::new("test", "test", None, None, "test"))
        .retry_config(RetryConfig::disabled())
        .load()
        .await
}

/// An SDK configuration for `endpoint` acting as `role_arn`: AssumeRole through the endpoint's
/// STS (moto puts the role's calls in the role's account, as AWS does), static credentials after.
/// For a test that prepares or reads what is in another account.
pub async fn as_role(endpoint: &str, role_arn: &str) -> aws_config::SdkConfig {
    let config = sdk_config(endpoint).await;
    let assumed = aws_sdk_sts::Client::new(&config).assume_role().role_arn(role_arn).role_session_name("test").send().await;
    let assumed = expect("AssumeRole", assumed);
    let credentials = expect("credentials", assumed.credentials().ok_or("no credentials"));
    let provider = aws_sdk_sts::config::Credentials::new(
        credentials.access_key_id(),
        credentials.secret_access_key(),
        Some(credentials.session_token().to_owned()),
        None,
        "test",
    );
    config.to_builder().credentials_provider(aws_sdk_sts::config::SharedCredentialsProvider::new(provider)).build()
}

/// An SDK configuration for MiniStack at `endpoint` acting in `account`: MiniStack takes a
/// 12-digit access key as the account (it checks no signature), as the fault proxy presents an
/// assumed role's key ([`crate::fault_proxy::FaultProxy::present_accounts`]). For preparing and
/// reading what a test's account holds.
pub async fn in_ministack_account(endpoint: &str, account: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_route53::config::Credentials::new(account, "test", None, None, "test"))
        .retry_config(RetryConfig::disabled())
        .load()
        .await
}

/// A 12-digit account id of a test's own: tests that fault or throttle an account do not touch
/// one another's.
pub fn fresh_account() -> String {
    use rand::Rng as _;
    let mut rng = rand::rng();
    format!("7{:011}", rng.random_range(0..100_000_000_000u64))
}

/// The AWS layer of a controller under test: quotas far above what a test needs (the quota
/// model has tests of its own), three quick retries, quick background batches. Endpoints are
/// the test's to set.
pub fn layer_config() -> AwsConfig {
    let generous = ["acm.*", "acm.ListCertificates", "acm-pca.*", "cloudfront.*", "route53", "route53.*", "sts.*"];
    let overrides: Vec<Override> = generous.iter().map(|o| expect(o, format!("{o}=100/100").parse())).collect();
    AwsConfig {
        region: Some("us-east-1".into()),
        timeout: Duration::from_secs(10),
        quotas: Quotas::aws().with(&overrides),
        retry: RetryPolicy { base_delay: Duration::from_millis(20), max_delay: Duration::from_millis(100), max_retries: 3 },
        route53_batch: BatchPolicy { gather: Duration::from_millis(50), interval: Duration::from_millis(300) },
        ..AwsConfig::default()
    }
}

/// An `ACTIVE` root CA in AWS Private CA named `common_name` (created, its CSR signed by itself
/// with the root template, its certificate installed, as a person sets one up); returns its ARN.
pub async fn private_ca(pca: &aws_sdk_acmpca::Client, common_name: &str) -> String {
    use aws_sdk_acmpca::primitives::Blob;
    use aws_sdk_acmpca::types::{
        Asn1Subject, CertificateAuthorityConfiguration, CertificateAuthorityType, KeyAlgorithm, SigningAlgorithm, Validity,
        ValidityPeriodType,
    };
    let configuration = expect(
        "a CA configuration",
        CertificateAuthorityConfiguration::builder()
            .key_algorithm(KeyAlgorithm::Rsa2048)
            .signing_algorithm(SigningAlgorithm::Sha256Withrsa)
            .subject(Asn1Subject::builder().common_name(common_name).organization("Blockwork tests").build())
            .build(),
    );
    let created = expect(
        "CreateCertificateAuthority",
        pca.create_certificate_authority()
            .certificate_authority_configuration(configuration)
            .certificate_authority_type(CertificateAuthorityType::Root)
            .send()
            .await,
    );
    let arn = created.certificate_authority_arn().unwrap_or_default().to_owned();
    let csr = expect("GetCertificateAuthorityCsr", pca.get_certificate_authority_csr().certificate_authority_arn(&arn).send().await);
    let validity = expect("a validity", Validity::builder().r#type(ValidityPeriodType::Days).value(3650).build());
    let issued = expect(
        "IssueCertificate (root)",
        pca.issue_certificate()
            .certificate_authority_arn(&arn)
            .csr(Blob::new(csr.csr().unwrap_or_default()))
            .signing_algorithm(SigningAlgorithm::Sha256Withrsa)
            .template_arn("arn:aws:acm-pca:::template/RootCACertificate/V1")
            .validity(validity)
            .send()
            .await,
    );
    let certificate = expect(
        "GetCertificate (root)",
        pca.get_certificate().certificate_authority_arn(&arn).certificate_arn(issued.certificate_arn().unwrap_or_default()).send().await,
    );
    expect(
        "ImportCertificateAuthorityCertificate",
        pca.import_certificate_authority_certificate()
            .certificate_authority_arn(&arn)
            .certificate(Blob::new(certificate.certificate().unwrap_or_default()))
            .send()
            .await,
    );
    arn
}

/// [`private_ca`] on the emulator at `endpoint`.
pub async fn private_ca_at(endpoint: &str, common_name: &str) -> String {
    private_ca(&aws_sdk_acmpca::Client::new(&sdk_config(endpoint).await), common_name).await
}

/// [`hosted_zone`] on the emulator at `endpoint`.
pub async fn hosted_zone_at(endpoint: &str, name: &str) -> String {
    hosted_zone(&aws_sdk_route53::Client::new(&sdk_config(endpoint).await), name).await
}

/// Creates a public hosted zone `name`; returns its id without the `/hostedzone/` prefix.
pub async fn hosted_zone(route53: &aws_sdk_route53::Client, name: &str) -> String {
    let reference = format!("{name}-{:?}", std::time::SystemTime::now());
    let created = expect("CreateHostedZone", route53.create_hosted_zone().name(name).caller_reference(reference).send().await);
    created.hosted_zone().map(|zone| zone.id().trim_start_matches("/hostedzone/").to_owned()).unwrap_or_default()
}

/// The CNAMEs in a zone as (name, value, TTL), trailing dots trimmed, sorted.
pub async fn cnames(route53: &aws_sdk_route53::Client, zone_id: &str) -> Vec<(String, String, i64)> {
    let listed = expect("ListResourceRecordSets", route53.list_resource_record_sets().hosted_zone_id(zone_id).send().await);
    let mut records: Vec<(String, String, i64)> = listed
        .resource_record_sets()
        .iter()
        .filter(|set| set.r#type() == &RrType::Cname)
        .map(|set| {
            let value = set.resource_records().first().map(|r| r.value().trim_end_matches('.').to_owned()).unwrap_or_default();
            (set.name().trim_end_matches('.').to_owned(), value, set.ttl().unwrap_or_default())
        })
        .collect();
    records.sort();
    records
}

/// Writes a CNAME (TTL 60) behind the operator's back.
pub async fn upsert_cname(route53: &aws_sdk_route53::Client, zone_id: &str, name: &str, value: &str) {
    let record = expect("record", ResourceRecord::builder().value(value).build());
    let set = expect("record set", ResourceRecordSet::builder().name(name).r#type(RrType::Cname).ttl(60).resource_records(record).build());
    let change = expect("change", Change::builder().action(ChangeAction::Upsert).resource_record_set(set).build());
    let batch = expect("change batch", ChangeBatch::builder().changes(change).build());
    expect("ChangeResourceRecordSets", route53.change_resource_record_sets().hosted_zone_id(zone_id).change_batch(batch).send().await);
}

/// Deletes the CNAME `name` of `zone_id` with the values it has, as someone cleaning up
/// outside Kubernetes would.
pub async fn delete_cname(route53: &aws_sdk_route53::Client, zone_id: &str, name: &str) {
    let listed = expect("ListResourceRecordSets", route53.list_resource_record_sets().hosted_zone_id(zone_id).send().await);
    let wanted = name.trim_end_matches('.');
    let Some(set) = listed.resource_record_sets().iter().find(|s| s.r#type() == &RrType::Cname && s.name().trim_end_matches('.') == wanted)
    else {
        return;
    };
    let change = expect("change", Change::builder().action(ChangeAction::Delete).resource_record_set(set.clone()).build());
    let batch = expect("change batch", ChangeBatch::builder().changes(change).build());
    expect("ChangeResourceRecordSets", route53.change_resource_record_sets().hosted_zone_id(zone_id).change_batch(batch).send().await);
}

/// Requests a DNS-validated ACM certificate for `names` (the first is its domain name).
pub async fn request_certificate(acm: &aws_sdk_acm::Client, names: &[String]) -> String {
    let requested = acm
        .request_certificate()
        .domain_name(names.first().map(String::as_str).unwrap_or_default())
        .set_subject_alternative_names(Some(names.to_vec()))
        .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
        .send()
        .await;
    expect("RequestCertificate", requested).certificate_arn().unwrap_or_default().to_owned()
}

/// A `tenant-only` distribution, the kind CloudFront tenants attach to: `certificate` its viewer
/// certificate (`None`: CloudFront's default one), `parameters` its tenant parameters as
/// (name, required, default). Returns its id.
pub async fn tenant_only_distribution(
    cloudfront: &aws_sdk_cloudfront::Client,
    reference: &str,
    certificate: Option<&str>,
    parameters: &[(&str, bool, Option<&str>)],
) -> String {
    let definitions = parameters.iter().map(|(name, required, default)| {
        let schema = StringSchemaConfig::builder().required(*required).set_default_value(default.map(str::to_owned));
        let definition = ParameterDefinitionSchema::builder().string_schema(expect("schema", schema.build())).build();
        expect("parameter", ParameterDefinition::builder().name(*name).definition(definition).build())
    });
    let origin = expect("origin", Origin::builder().id("origin").domain_name("origin.example.com").build());
    let behavior = DefaultCacheBehavior::builder()
        .target_origin_id("origin")
        .viewer_protocol_policy(ViewerProtocolPolicy::RedirectToHttps)
        .cache_policy_id("658327ea-f89d-4fab-a63d-7e88639e58f6");
    let viewer = match certificate {
        Some(arn) => ViewerCertificate::builder().acm_certificate_arn(arn).build(),
        None => ViewerCertificate::builder().cloud_front_default_certificate(true).build(),
    };
    let config = DistributionConfig::builder()
        .caller_reference(reference)
        .origins(expect("origins", Origins::builder().quantity(1).items(origin).build()))
        .default_cache_behavior(expect("cache behavior", behavior.build()))
        .comment("blockwork tests")
        .enabled(true)
        .connection_mode(ConnectionMode::TenantOnly)
        .viewer_certificate(viewer)
        .tenant_config(TenantConfig::builder().set_parameter_definitions(Some(definitions.collect())).build());
    let created = cloudfront.create_distribution().distribution_config(expect("distribution", config.build())).send().await;
    expect("CreateDistribution", created).distribution().map(|d| d.id().to_owned()).unwrap_or_default()
}

/// Disables and deletes the distribution `id`, as someone retiring it outside Kubernetes would
/// (CloudFront deletes only a disabled distribution without tenants).
pub async fn delete_distribution(cloudfront: &aws_sdk_cloudfront::Client, id: &str) {
    let read = expect("GetDistributionConfig", cloudfront.get_distribution_config().id(id).send().await);
    let mut config = read.distribution_config().cloned();
    if let Some(config) = config.as_mut() {
        config.enabled = false;
    }
    let updated = cloudfront.update_distribution().id(id).if_match(read.e_tag().unwrap_or_default()).set_distribution_config(config);
    let updated = expect("UpdateDistribution", updated.send().await);
    expect("DeleteDistribution", cloudfront.delete_distribution().id(id).if_match(updated.e_tag().unwrap_or_default()).send().await);
}
