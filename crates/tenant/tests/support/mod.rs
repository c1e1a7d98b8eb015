//! One DistributionTenant controller per test, against the shared kube-apiserver, MiniStack
//! (CloudFront, ACM) and moto (Route53, STS), with a fault proxy of its own in front of each.
//! Each controller started gets an AWS layer of its own, as a new process would.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
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
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Endpoint, RetryPolicy, Seed, Service};
use blockwork_runtime::policy::DRIFT_POLICY_ANNOTATION;
use blockwork_runtime::{Context, ControllerConfig, DriftPolicy, RuntimeMetrics};
use blockwork_tenant::api::DomainName;
use blockwork_tenant::api::{DnsConfig, DnsProvider};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, DistributionTenantSpec, GROUP, TenantManager, TenantMetrics, Timing};
use blockwork_testenv::control_plane::{ControlPlane, control_plane};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResourceExt};
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_cloudfront::config::Credentials::new("test", "test", None, None, "test"))
        // The operator's own reaction to each error is under test, not the SDK's retries.
        .retry_config(RetryConfig::disabled())
        .load()
        .await
}

/// Quick looks: a second while AWS works and once Ready, two after a failure.
pub fn quick_timing() -> Timing {
    blockwork_tenant::timing(Duration::from_secs(1), Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(60))
}

/// Retries of the layer in these tests: a fault injected `RETRIES + 1` times reaches the operator.
pub const RETRIES: usize = 2;

/// The account a cross-account DNS role lives in (moto switches to it on AssumeRole).
pub const DNS_ACCOUNT: &str = "210987654321";
pub const DNS_ROLE: &str = "arn:aws:iam::210987654321:role/blockwork-dns";

pub struct Harness {
    pub plane: &'static ControlPlane,
    pub client: Client,
    pub namespace: String,
    pub proxy: FaultProxy,
    /// Between the operator's Route53 and STS calls and moto.
    pub dns_proxy: FaultProxy,
    /// moto's Route53, straight, with the operator's account.
    pub route53: aws_sdk_route53::Client,
    /// A hosted zone for this test's domains, in the operator's account.
    pub zone_id: String,
    timing: Timing,
    /// Straight to MiniStack, as someone changing the tenant outside Kubernetes would.
    pub aws: aws_sdk_cloudfront::Client,
    /// MiniStack's ACM, straight.
    pub acm: aws_sdk_acm::Client,
    pub registry: Registry,
    pub distribution_id: String,
    default_drift: DriftPolicy,
    metrics: Arc<TenantMetrics>,
    pub aws_metrics: Arc<AwsMetrics>,
    runtime_metrics: Arc<RuntimeMetrics>,
    controller: Option<JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.abort();
        }
    }
}

impl Harness {
    /// With the operator's default drift policy `enforce`.
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, DriftPolicy::Enforce).await
    }

    pub async fn start_with(prefix: &str, default_drift: DriftPolicy) -> Self {
        Self::start_configured(prefix, default_drift, quick_timing()).await
    }

    pub async fn start_configured(prefix: &str, default_drift: DriftPolicy, timing: Timing) -> Self {
        let plane = control_plane().await.expect("control plane starts");
        plane.install_crds(&[DistributionTenant::crd()]).await.expect("CRD installs");
        let namespace = plane.namespace(prefix).await.expect("namespace is created");
        let emulator = ministack().await.expect("MiniStack starts").endpoint();
        let proxy = FaultProxy::start(&emulator).await.expect("proxy starts");
        let aws = aws_sdk_cloudfront::Client::new(&sdk_config(&emulator).await);
        let acm = aws_sdk_acm::Client::new(&sdk_config(&emulator).await);
        // The distribution serves a certificate of its own for the test's domains, so tenants
        // need none (a distribution on CloudFront's default certificate refuses them).
        let wildcard = request_certificate(&acm, &[format!("*.{namespace}.example.com")]).await;
        let distribution_id = multi_tenant_distribution(&aws, &format!("{namespace}-main"), Some(&wildcard), &[]).await;
        default_connection_group(&aws, &distribution_id, &namespace).await;
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(&mut registry);
        let runtime_metrics = RuntimeMetrics::register(&mut registry);
        let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Tenant]));
        let moto = moto().await.expect("moto starts").endpoint();
        let dns_proxy = FaultProxy::start(&moto).await.expect("proxy starts");
        let route53 = aws_sdk_route53::Client::new(&sdk_config(&moto).await);
        let zone_id = hosted_zone(&route53, &format!("{namespace}.example.com")).await;
        let mut harness = Self {
            plane,
            client: plane.client(),
            namespace,
            proxy,
            dns_proxy,
            route53,
            zone_id,
            timing,
            aws,
            acm,
            registry,
            distribution_id,
            default_drift,
            metrics,
            aws_metrics,
            runtime_metrics,
            controller: None,
        };
        harness.start_controller().await;
        harness
    }

    /// Starts a controller (again): a new process, as far as the objects are concerned.
    pub async fn start_controller(&mut self) {
        let aws = Aws::with_sdk_config(self.aws_config(), sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let cloudfront = Sdk::new(&aws);
        let route53 = Route53::new(aws.records());
        let manager =
            TenantManager::new(cloudfront, Some(route53), self.default_drift, self.timing, Arc::clone(&self.metrics), aws.metrics());
        let context =
            Context::new(self.client.clone(), manager, ControllerConfig::new(CONTROLLER, GROUP), Arc::clone(&self.runtime_metrics));
        self.controller = Some(tokio::spawn(blockwork_runtime::run(self.api(), context, 4, std::future::pending())));
    }

    /// The controller's AWS layer: CloudFront and ACM through `proxy`, Route 53 and STS through
    /// `dns_proxy`; quotas far above what a test needs (the quota model has tests of its own);
    /// two quick retries, so that a test injecting three failures sees the operator's own
    /// reaction (seed 001's table, the throttle floor).
    pub fn aws_config(&self) -> AwsConfig {
        let endpoint = |service, url: String| Endpoint { controller: None, service, url };
        let generous: Vec<Override> = ["cloudfront.*=100/100", "acm.*=100/100", "route53=100/100", "route53.*=100/100", "sts.*=100/100"]
            .iter()
            .map(|o| o.parse().unwrap())
            .collect();
        AwsConfig {
            region: Some("us-east-1".into()),
            endpoints: vec![
                endpoint(Service::CloudFront, self.proxy.endpoint()),
                endpoint(Service::Acm, self.proxy.endpoint()),
                endpoint(Service::Route53, self.dns_proxy.endpoint()),
                endpoint(Service::Sts, self.dns_proxy.endpoint()),
            ],
            timeout: Duration::from_secs(10),
            quotas: Quotas::aws().with(&generous),
            retry: RetryPolicy { base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50), max_retries: RETRIES },
            route53_batch: BatchPolicy { gather: Duration::from_millis(50), interval: Duration::from_millis(300) },
            ..AwsConfig::default()
        }
    }

    /// Kills the controller wherever it is, as a crash would.
    pub fn crash_controller(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.abort();
        }
    }

    pub fn api(&self) -> Api<DistributionTenant> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// A domain unique to this test (MiniStack's domains are global, like CloudFront's).
    pub fn domain(&self, label: &str) -> String {
        format!("{label}.{}.example.com", self.namespace)
    }

    pub fn spec(&self, labels: &[&str]) -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: self.distribution_id.clone(),
            domains: labels.iter().map(|l| DomainName { domain: self.domain(l) }).collect(),
            ..DistributionTenantSpec::default()
        }
    }

    /// `spec(labels)` with its CNAMEs managed in `zone_id`.
    pub fn dns_spec(&self, labels: &[&str], zone_id: &str, ttl: i64) -> DistributionTenantSpec {
        let dns = DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: zone_id.to_owned(), assume_role_arn: None, ttl };
        DistributionTenantSpec { dns: Some(dns), ..self.spec(labels) }
    }

    /// The CNAMEs in a zone as (name without the trailing dot, value, TTL), sorted.
    pub async fn cnames(route53: &aws_sdk_route53::Client, zone_id: &str) -> Vec<(String, String, i64)> {
        let output = route53.list_resource_record_sets().hosted_zone_id(zone_id).send().await.expect("records are listed");
        let mut records: Vec<(String, String, i64)> = output
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

    /// Writes a CNAME behind the operator's back.
    pub async fn upsert_cname(route53: &aws_sdk_route53::Client, zone_id: &str, name: &str, value: &str) {
        let set = ResourceRecordSet::builder()
            .name(name)
            .r#type(RrType::Cname)
            .ttl(60)
            .resource_records(ResourceRecord::builder().value(value).build().unwrap())
            .build()
            .unwrap();
        let change = Change::builder().action(ChangeAction::Upsert).resource_record_set(set).build().unwrap();
        route53
            .change_resource_record_sets()
            .hosted_zone_id(zone_id)
            .change_batch(ChangeBatch::builder().changes(change).build().unwrap())
            .send()
            .await
            .expect("record is written in moto");
    }

    /// Points the operator's Route53 and STS calls (through a new fault proxy) and `route53` at
    /// another moto, with a zone of its own there, and restarts the controller.
    pub async fn use_dns_emulator(&mut self, endpoint: &str) {
        self.crash_controller();
        self.dns_proxy = FaultProxy::start(endpoint).await.expect("proxy starts");
        self.route53 = aws_sdk_route53::Client::new(&sdk_config(endpoint).await);
        self.zone_id = hosted_zone(&self.route53, &format!("{}.example.com", self.namespace)).await;
        self.start_controller().await;
    }

    /// Route53 of `endpoint` as the DNS account (through AssumeRole of [`DNS_ROLE`]), with a
    /// zone for this test's domains there.
    pub async fn other_account_zone(&self, endpoint: &str) -> (aws_sdk_route53::Client, String) {
        let config = sdk_config(endpoint).await;
        let assumed = aws_sdk_sts::Client::new(&config).assume_role().role_arn(DNS_ROLE).role_session_name("test").send().await.unwrap();
        let credentials = assumed.credentials().unwrap();
        let provider = aws_sdk_route53::config::Credentials::new(
            credentials.access_key_id(),
            credentials.secret_access_key(),
            Some(credentials.session_token().to_owned()),
            None,
            "test",
        );
        let route53 =
            aws_sdk_route53::Client::from_conf(aws_sdk_route53::config::Builder::from(&config).credentials_provider(provider).build());
        let zone_id = hosted_zone(&route53, &format!("{}.example.com", self.namespace)).await;
        (route53, zone_id)
    }

    pub async fn create(&self, name: &str, spec: DistributionTenantSpec) -> DistributionTenant {
        self.api().create(&PostParams::default(), &DistributionTenant::new(name, spec)).await.expect("tenant object is created")
    }

    pub async fn create_annotated(&self, name: &str, spec: DistributionTenantSpec, drift: &str) -> DistributionTenant {
        let mut tenant = DistributionTenant::new(name, spec);
        tenant.metadata.annotations = Some([(DRIFT_POLICY_ANNOTATION.to_owned(), drift.to_owned())].into());
        self.api().create(&PostParams::default(), &tenant).await.expect("tenant object is created")
    }

    /// Polls until `check` holds, or fails with the last status seen.
    pub async fn wait_for(&self, name: &str, what: &str, check: impl Fn(&DistributionTenant) -> bool) -> DistributionTenant {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let found = self.api().get_opt(name).await.expect("get tenant object");
            match found {
                Some(tenant) if check(&tenant) => return tenant,
                Some(tenant) if tokio::time::Instant::now() > deadline => {
                    panic!("timed out waiting for {name} to be {what}; last status: {:#?}", tenant.status)
                }
                None if tokio::time::Instant::now() > deadline => panic!("timed out waiting for {name} to be {what}; it does not exist"),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub async fn wait_ready(&self, name: &str) -> DistributionTenant {
        self.wait_for(name, "Ready", |t| condition(t, "Ready").is_some_and(|c| c.0 == "True")).await
    }

    pub async fn wait_gone(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while let Some(tenant) = self.api().get_opt(name).await.expect("get tenant object") {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {name} to go; last status: {:#?}", tenant.status);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The tenant as MiniStack holds it, by name; `None` when it does not exist.
    pub async fn aws_tenant(&self, name: &str) -> Option<(aws_sdk_cloudfront::types::DistributionTenant, String)> {
        match self.aws.get_distribution_tenant().identifier(name).send().await {
            Ok(output) => Some((output.distribution_tenant().cloned().unwrap(), output.e_tag().unwrap().to_owned())),
            Err(error) => {
                let service = error.into_service_error();
                assert_eq!(aws_sdk_cloudfront::error::ProvideErrorMetadata::code(&service), Some("EntityNotFound"), "{service:?}");
                None
            }
        }
    }

    /// Sets `enabled` on the tenant behind the operator's back, keeping everything else.
    pub async fn set_enabled_outside(&self, name: &str, enabled: bool) {
        let (tenant, e_tag) = self.aws_tenant(name).await.expect("tenant exists in MiniStack");
        let domains = tenant
            .domains()
            .iter()
            .map(|d| aws_sdk_cloudfront::types::DomainItem::builder().domain(d.domain()).build().unwrap())
            .collect::<Vec<_>>();
        self.aws
            .update_distribution_tenant()
            .id(tenant.id().unwrap())
            .if_match(e_tag)
            .distribution_id(tenant.distribution_id().unwrap())
            .set_domains(Some(domains))
            .enabled(enabled)
            .send()
            .await
            .expect("tenant is changed in MiniStack");
    }

    /// Deletes the tenant behind the operator's back (disable first, as CloudFront requires).
    pub async fn delete_outside(&self, name: &str) {
        self.set_enabled_outside(name, false).await;
        let (tenant, e_tag) = self.aws_tenant(name).await.expect("tenant exists in MiniStack");
        self.aws.delete_distribution_tenant().id(tenant.id().unwrap()).if_match(e_tag).send().await.expect("tenant is deleted");
    }

    /// An ACM certificate in us-east-1 for `names` (first is the domain name).
    pub async fn certificate(&self, names: &[String]) -> String {
        request_certificate(&self.acm, names).await
    }

    /// Another multi-tenant distribution: on CloudFront's default certificate, or with one of
    /// its own for the test's domains; declaring `parameters` as (name, required, default).
    pub async fn distribution(&self, reference: &str, default_certificate: bool, parameters: &[(&str, bool, Option<&str>)]) -> String {
        let certificate = match default_certificate {
            true => None,
            false => Some(self.certificate(&[format!("*.{}.example.com", self.namespace)]).await),
        };
        multi_tenant_distribution(&self.aws, &format!("{}-{reference}", self.namespace), certificate.as_deref(), parameters).await
    }

    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }
}

/// A moto of this test's own, killed when dropped. The shared one is pinned to one account
/// (`MOTO_ACCOUNT_ID`); this one lets AssumeRole switch accounts as AWS does, so that a test can
/// see in which account records land.
pub struct MultiAccountMoto {
    _process: tokio::process::Child,
    pub endpoint: String,
}

impl MultiAccountMoto {
    pub async fn start() -> Self {
        let tools = std::env::var_os("BLOCKWORK_TOOLS_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/blockwork-tools"));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let process = tokio::process::Command::new(tools.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env_remove("MOTO_ACCOUNT_ID")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("moto_server starts");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "moto_server did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { _process: process, endpoint: format!("http://127.0.0.1:{port}") }
    }
}

/// (status, reason, message) of a condition in `status.conditions`.
pub fn condition(tenant: &DistributionTenant, type_: &str) -> Option<(String, String, String)> {
    let status = tenant.status.as_ref()?;
    status.condition(type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub async fn hosted_zone(route53: &aws_sdk_route53::Client, name: &str) -> String {
    let output = route53
        .create_hosted_zone()
        .name(name)
        .caller_reference(format!("{name}-{:?}", std::time::SystemTime::now()))
        .send()
        .await
        .expect("hosted zone is created in moto");
    output.hosted_zone().unwrap().id().trim_start_matches("/hostedzone/").to_owned()
}

/// CloudFront makes the account's default connection group with its first tenant, and a tenant
/// with managed DNS needs its routing endpoint before it exists: make sure there is one, whatever
/// order the tests run in.
pub async fn default_connection_group(aws: &aws_sdk_cloudfront::Client, distribution_id: &str, namespace: &str) {
    let groups = aws.list_connection_groups().send().await.expect("connection groups are listed");
    if groups.connection_groups().iter().any(|g| g.is_default() == Some(true)) {
        return;
    }
    let domain = aws_sdk_cloudfront::types::DomainItem::builder().domain(format!("seed.{namespace}.example.com")).build().unwrap();
    aws.create_distribution_tenant()
        .name(format!("seed-{namespace}"))
        .distribution_id(distribution_id)
        .domains(domain)
        .send()
        .await
        .expect("a first tenant is created in MiniStack");
}

pub async fn request_certificate(acm: &aws_sdk_acm::Client, names: &[String]) -> String {
    let output = acm
        .request_certificate()
        .domain_name(&names[0])
        .set_subject_alternative_names(Some(names.to_vec()))
        .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
        .send()
        .await
        .expect("certificate is requested in MiniStack");
    output.certificate_arn().unwrap().to_owned()
}

/// A `tenant-only` distribution, the kind tenants attach to: with `certificate` as its viewer
/// certificate (`None`: CloudFront's default certificate) and `parameters` as its tenant
/// parameters, (name, required, default).
pub async fn multi_tenant_distribution(
    aws: &aws_sdk_cloudfront::Client,
    reference: &str,
    certificate: Option<&str>,
    parameters: &[(&str, bool, Option<&str>)],
) -> String {
    let origin = Origin::builder().id("origin").domain_name("origin.example.com").build().unwrap();
    let config = DistributionConfig::builder()
        .caller_reference(reference)
        .origins(Origins::builder().quantity(1).items(origin).build().unwrap())
        .default_cache_behavior(
            DefaultCacheBehavior::builder()
                .target_origin_id("origin")
                .viewer_protocol_policy(ViewerProtocolPolicy::RedirectToHttps)
                .cache_policy_id("658327ea-f89d-4fab-a63d-7e88639e58f6")
                .build()
                .unwrap(),
        )
        .comment("blockwork tenant tests")
        .enabled(true)
        .connection_mode(ConnectionMode::TenantOnly)
        .viewer_certificate(match certificate {
            Some(arn) => ViewerCertificate::builder().acm_certificate_arn(arn).build(),
            None => ViewerCertificate::builder().cloud_front_default_certificate(true).build(),
        })
        .tenant_config(
            TenantConfig::builder()
                .set_parameter_definitions(Some(
                    parameters
                        .iter()
                        .map(|(name, required, default)| {
                            let schema = StringSchemaConfig::builder().required(*required).set_default_value(default.map(str::to_owned));
                            ParameterDefinition::builder()
                                .name(*name)
                                .definition(ParameterDefinitionSchema::builder().string_schema(schema.build().unwrap()).build())
                                .build()
                                .unwrap()
                        })
                        .collect(),
                ))
                .build(),
        )
        .build()
        .unwrap();
    let output = aws.create_distribution().distribution_config(config).send().await.expect("distribution is created in MiniStack");
    output.distribution().unwrap().id().to_owned()
}
