//! One DistributionTenant controller per test, against the shared kube-apiserver, MiniStack
//! (CloudFront, ACM) and moto (Route53, STS), with a fault proxy of its own in front of each.
//! Each controller started gets an AWS layer of its own, as a new process would.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use blockwork_identity::{Identities, Settings};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Endpoint, RetryPolicy, Seed, Service};
use blockwork_runtime::policy::DRIFT_POLICY_ANNOTATION;
use blockwork_runtime::{Context, ControllerConfig, DriftPolicy, ReconcileState, RuntimeMetrics};
use blockwork_tenant::api::DomainName;
use blockwork_tenant::api::{DnsConfig, DnsProvider, ManagedCertificateRequest, ValidationTokenHost};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, DistributionTenantSpec, GROUP, TenantManager, TenantMetrics, Timing};
use blockwork_testenv::aws::{cnames, hosted_zone, layer_config, request_certificate, sdk_config, tenant_only_distribution};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually, metrics_text};
use kube::CustomResourceExt;
use prometheus_client::registry::Registry;

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
    /// Crashed before the namespace goes (fields drop in order).
    pub controller: ControllerTask,
    test_namespace: TestNamespace<DistributionTenant>,
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
    /// The cluster's AwsIdentity mappings, as every controller this harness starts reads them.
    pub identities: Arc<Identities>,
}

impl Deref for Harness {
    type Target = TestNamespace<DistributionTenant>;

    fn deref(&self) -> &TestNamespace<DistributionTenant> {
        &self.test_namespace
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
        let test_namespace = TestNamespace::new(prefix).await;
        test_namespace.plane.install_crds(&[DistributionTenant::crd(), blockwork_identity::crd()]).await.expect("the CRDs install");
        let identities = Identities::new(test_namespace.plane.client(), Settings::default());
        let namespace = test_namespace.namespace.clone();
        let emulator = ministack().await.expect("MiniStack starts").endpoint();
        let proxy = FaultProxy::start(&emulator).await.expect("proxy starts");
        let aws = aws_sdk_cloudfront::Client::new(&sdk_config(&emulator).await);
        let acm = aws_sdk_acm::Client::new(&sdk_config(&emulator).await);
        // The distribution serves a certificate of its own for the test's domains, so tenants
        // need none (a distribution on CloudFront's default certificate refuses them).
        let wildcard = request_certificate(&acm, &[format!("*.{namespace}.example.com")]).await;
        let distribution_id = tenant_only_distribution(&aws, &format!("{namespace}-main"), Some(&wildcard), &[]).await;
        default_connection_group(&aws, &distribution_id, &namespace).await;
        let mut registry = Registry::default();
        let metrics = TenantMetrics::register(registry.sub_registry_with_prefix(blockwork_tenant::metrics::PREFIX));
        let runtime_metrics = RuntimeMetrics::register(&mut registry);
        let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Tenant]));
        let moto = moto().await.expect("moto starts").endpoint();
        let dns_proxy = FaultProxy::start(&moto).await.expect("proxy starts");
        let route53 = aws_sdk_route53::Client::new(&sdk_config(&moto).await);
        let zone_id = hosted_zone(&route53, &format!("{namespace}.example.com")).await;
        let mut harness = Self {
            test_namespace,
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
            identities,
            controller: ControllerTask::default(),
        };
        harness.start_controller().await;
        harness
    }

    /// Starts a controller (again): a new process, as far as the objects are concerned.
    pub async fn start_controller(&mut self) {
        self.start_controller_with(self.client.clone(), Arc::clone(&self.runtime_metrics)).await;
    }

    /// Starts a controller whose Kubernetes client is `client` (one through a `KubeProxy`, to
    /// count its writes), counting its reconciles in `runtime_metrics`.
    pub async fn start_controller_with(&mut self, client: kube::Client, runtime_metrics: Arc<RuntimeMetrics>) {
        let aws = Aws::with_sdk_config(self.aws_config(), sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let cloudfront = Sdk::new(&aws);
        let route53 = Route53::new(aws.records());
        let identities = Arc::clone(&self.identities);
        let manager = TenantManager::new(cloudfront, Some(route53), identities, Arc::clone(&self.metrics), &aws, client.clone());
        let config = ControllerConfig::new(CONTROLLER, GROUP).with_timing(self.timing).with_default_drift(self.default_drift);
        let context = Context::new(client.clone(), manager, config, runtime_metrics);
        let api = kube::Api::namespaced(client, &self.namespace);
        self.controller.start(blockwork_runtime::run(api, context, 4, std::future::pending()));
    }

    /// The controller's AWS layer: CloudFront and ACM through `proxy`, Route 53 and STS through
    /// `dns_proxy`; two quick retries, so that a test injecting three failures sees the
    /// operator's own reaction (seed 001's table, the throttle floor).
    pub fn aws_config(&self) -> AwsConfig {
        let endpoint = |service, url: String| Endpoint { controller: None, service, url };
        AwsConfig {
            endpoints: vec![
                endpoint(Service::CloudFront, self.proxy.endpoint()),
                endpoint(Service::Acm, self.proxy.endpoint()),
                endpoint(Service::Route53, self.dns_proxy.endpoint()),
                endpoint(Service::Sts, self.dns_proxy.endpoint()),
            ],
            retry: RetryPolicy { base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50), max_retries: RETRIES },
            ..layer_config()
        }
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

    /// `spec(labels)` with a certificate CloudFront manages, its validation token served by `host`.
    pub fn managed_spec(&self, labels: &[&str], host: ValidationTokenHost) -> DistributionTenantSpec {
        let request = ManagedCertificateRequest { validation_token_host: host, ..ManagedCertificateRequest::default() };
        DistributionTenantSpec { managed_certificate_request: Some(request), ..self.spec(labels) }
    }

    /// `spec(labels)` with its CNAMEs managed in `zone_id`.
    pub fn dns_spec(&self, labels: &[&str], zone_id: &str, ttl: i64) -> DistributionTenantSpec {
        let dns = DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: zone_id.to_owned(), assume_role_arn: None, ttl };
        DistributionTenantSpec { dns: Some(dns), ..self.spec(labels) }
    }

    /// Points the operator's Route53 and STS calls (through a new fault proxy) and `route53` at
    /// another moto, with a zone of its own there, and restarts the controller.
    pub async fn use_dns_emulator(&mut self, endpoint: &str) {
        self.controller.crash();
        self.dns_proxy = FaultProxy::start(endpoint).await.expect("proxy starts");
        self.route53 = aws_sdk_route53::Client::new(&sdk_config(endpoint).await);
        self.zone_id = hosted_zone(&self.route53, &format!("{}.example.com", self.namespace)).await;
        self.start_controller().await;
    }

    /// Maps this test's namespace to AWS as `identity` says (a cluster-scoped AwsIdentity, named
    /// after the namespace so tests do not share one).
    pub async fn map(&self, spec: blockwork_identity::AwsIdentitySpec) {
        let identity = blockwork_identity::AwsIdentity::new(&format!("id-{}", self.namespace), spec);
        let api = kube::Api::<blockwork_identity::AwsIdentity>::all(self.client.clone());
        api.create(&kube::api::PostParams::default(), &identity).await.expect("the AwsIdentity is created");
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
        self.test_namespace.create(&DistributionTenant::new(name, spec)).await
    }

    pub async fn create_annotated(&self, name: &str, spec: DistributionTenantSpec, drift: &str) -> DistributionTenant {
        let mut tenant = DistributionTenant::new(name, spec);
        tenant.metadata.annotations = Some([(DRIFT_POLICY_ANNOTATION.to_owned(), drift.to_owned())].into());
        self.test_namespace.create(&tenant).await
    }

    pub async fn wait_ready(&self, name: &str) -> DistributionTenant {
        self.wait_for(name, "Ready", |t| condition(t, "Ready").is_some_and(|c| c.0 == "True")).await
    }

    /// Waits until the tenant is Ready for the spec of `generation`.
    pub async fn wait_ready_at(&self, name: &str, generation: i64) -> DistributionTenant {
        self.wait_for(name, &format!("Ready at generation {generation}"), |t| {
            condition(t, "Ready").is_some_and(|c| c.0 == "True")
                && t.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
        })
        .await
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
        tenant_only_distribution(&self.aws, &format!("{}-{reference}", self.namespace), certificate.as_deref(), parameters).await
    }

    /// Names of the CNAMEs in the test's zone, sorted.
    pub async fn record_names(&self) -> Vec<String> {
        cnames(&self.route53, &self.zone_id).await.into_iter().map(|r| r.0).collect()
    }

    /// Waits until the CNAMEs in the test's zone are exactly those of `expected` (sorted).
    pub async fn wait_for_records(&self, expected: &[String]) {
        let written = async || {
            let names = self.record_names().await;
            if names == expected { Ok(()) } else { Err(format!("{names:?}")) }
        };
        eventually(&format!("records {expected:?}"), TIMEOUT, written).await;
    }

    pub fn metrics_text(&self) -> String {
        metrics_text(&self.registry)
    }
}

/// A second cluster beside the harness's (issue 31's "two clusters"): the test environment's
/// second control plane, with this test's namespace (the same name, so the same manifests
/// apply) and a tenant controller of its own — a new process's AWS layer — against the same
/// MiniStack through the same fault proxy, which counts both clusters' calls together.
pub struct SecondCluster {
    pub objects: kube::Api<DistributionTenant>,
    _controller: ControllerTask,
}

impl Harness {
    pub async fn second_cluster(&self) -> SecondCluster {
        let plane = blockwork_testenv::control_plane::second_control_plane().await.expect("the second control plane starts");
        plane.install_crds(&[DistributionTenant::crd(), blockwork_identity::crd()]).await.expect("the CRDs install");
        plane.namespace_named(&self.namespace).await.expect("the namespace is created");
        let client = plane.client();
        let aws = Aws::with_sdk_config(self.aws_config(), sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let identities = Identities::new(client.clone(), Settings::default());
        let dns = Some(Route53::new(aws.records()));
        let manager = TenantManager::new(Sdk::new(&aws), dns, identities, Arc::clone(&self.metrics), &aws, client.clone());
        let config = ControllerConfig::new(CONTROLLER, GROUP).with_timing(self.timing).with_default_drift(self.default_drift);
        let context = Context::new(client.clone(), manager, config, Arc::clone(&self.runtime_metrics));
        let mut controller = ControllerTask::default();
        controller.start(blockwork_runtime::run(
            kube::Api::namespaced(client.clone(), &self.namespace),
            context,
            4,
            std::future::pending(),
        ));
        SecondCluster { objects: kube::Api::namespaced(client, &self.namespace), _controller: controller }
    }
}

pub fn state(tenant: &DistributionTenant) -> Option<ReconcileState> {
    tenant.status.as_ref().and_then(|s| s.reconcile_state)
}

/// (status, reason, message) of a condition in `status.conditions`.
pub fn condition(tenant: &DistributionTenant, type_: &str) -> Option<(String, String, String)> {
    let status = tenant.status.as_ref()?;
    status.condition(type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
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
