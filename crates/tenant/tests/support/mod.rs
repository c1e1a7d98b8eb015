//! One DistributionTenant controller per test, against the shared kube-apiserver and MiniStack,
//! with a fault proxy of its own between the operator and MiniStack.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_cloudfront::types::{ConnectionMode, DefaultCacheBehavior, DistributionConfig, Origin, Origins, ViewerProtocolPolicy};
use blockwork_runtime::policy::DRIFT_POLICY_ANNOTATION;
use blockwork_runtime::{Context, ControllerConfig, DriftPolicy, RuntimeMetrics};
use blockwork_tenant::api::DomainName;
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::NoDns;
use blockwork_tenant::{CONTROLLER, DistributionTenant, DistributionTenantSpec, GROUP, TenantManager, TenantMetrics, Timing};
use blockwork_testenv::control_plane::{ControlPlane, control_plane};
use blockwork_testenv::emulators::ministack;
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

pub const TIMING: Timing = Timing { poll: Duration::from_secs(1), steady: Duration::from_secs(1), failed: Duration::from_secs(2) };

pub struct Harness {
    pub plane: &'static ControlPlane,
    pub client: Client,
    pub namespace: String,
    pub proxy: FaultProxy,
    /// Straight to MiniStack, as someone changing the tenant outside Kubernetes would.
    pub aws: aws_sdk_cloudfront::Client,
    /// MiniStack's ACM, straight.
    pub acm: aws_sdk_acm::Client,
    pub registry: Registry,
    pub distribution_id: String,
    default_drift: DriftPolicy,
    metrics: Arc<TenantMetrics>,
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
        let plane = control_plane().await.expect("control plane starts");
        plane.install_crds(&[DistributionTenant::crd()]).await.expect("CRD installs");
        let namespace = plane.namespace(prefix).await.expect("namespace is created");
        let emulator = ministack().await.expect("MiniStack starts").endpoint();
        let proxy = FaultProxy::start(&emulator).await.expect("proxy starts");
        let aws = aws_sdk_cloudfront::Client::new(&sdk_config(&emulator).await);
        let distribution_id = multi_tenant_distribution(&aws, &namespace).await;
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(&mut registry);
        let runtime_metrics = RuntimeMetrics::register(&mut registry);
        let acm = aws_sdk_acm::Client::new(&sdk_config(&emulator).await);
        let mut harness = Self {
            plane,
            client: plane.client(),
            namespace,
            proxy,
            aws,
            acm,
            registry,
            distribution_id,
            default_drift,
            metrics,
            runtime_metrics,
            controller: None,
        };
        harness.start_controller().await;
        harness
    }

    /// Starts a controller (again): a new process, as far as the objects are concerned.
    pub async fn start_controller(&mut self) {
        let cloudfront = Sdk::new(&sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.metrics));
        let manager = TenantManager::<_, NoDns>::new(cloudfront, None, self.default_drift, TIMING, Arc::clone(&self.metrics));
        let context =
            Context::new(self.client.clone(), manager, ControllerConfig::new(CONTROLLER, GROUP), Arc::clone(&self.runtime_metrics));
        self.controller = Some(tokio::spawn(blockwork_runtime::run(self.api(), context, 4, std::future::pending())));
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
        let output = self
            .acm
            .request_certificate()
            .domain_name(&names[0])
            .set_subject_alternative_names(Some(names.to_vec()))
            .validation_method(aws_sdk_acm::types::ValidationMethod::Dns)
            .send()
            .await
            .expect("certificate is requested in MiniStack");
        output.certificate_arn().unwrap().to_owned()
    }

    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }
}

/// (status, reason, message) of a condition in `status.conditions` or `status.tenantConditions`.
pub fn condition(tenant: &DistributionTenant, type_: &str) -> Option<(String, String, String)> {
    let status = tenant.status.as_ref()?;
    status
        .conditions
        .iter()
        .chain(status.observation.tenant_conditions.iter())
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A `tenant-only` distribution, the kind tenants attach to.
async fn multi_tenant_distribution(aws: &aws_sdk_cloudfront::Client, reference: &str) -> String {
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
        .build()
        .unwrap();
    let output = aws.create_distribution().distribution_config(config).send().await.expect("distribution is created in MiniStack");
    output.distribution().unwrap().id().to_owned()
}
