//! A Cert controller against the real kube-apiserver and moto, through the fault proxy: one
//! namespace, fresh hosted zones and a proxy per test. Each controller started gets an AWS layer
//! of its own, as a new process would.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use blockwork_aws::acm::AcmConfig;
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Seed};
use blockwork_cert::zones::{Zone, ZoneRegistry};
use blockwork_cert::{Cert, CertConfig, CertMetrics, CertSpec, CertState, Timing, ValidationRecordStatus};
use blockwork_identity::{Identities, Settings};
use blockwork_runtime::{RequeuePolicy, RuntimeMetrics};
use blockwork_testenv::aws::{hosted_zone, layer_config, sdk_config};
use blockwork_testenv::emulators::moto;
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually, metrics_text, sum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::CustomResourceExt;
use prometheus_client::registry::Registry;

pub struct Harness {
    /// Crashed before the namespace goes (fields drop in order).
    pub controller: ControllerTask,
    test_namespace: TestNamespace<Cert>,
    pub proxy: FaultProxy,
    /// Direct clients to moto, bypassing the proxy, for assertions.
    pub acm: aws_sdk_acm::Client,
    pub route53: aws_sdk_route53::Client,
    pub zones: Vec<Zone>,
    pub metrics: Arc<CertMetrics>,
    /// The AWS layer's metrics, shared by every controller this harness starts.
    pub aws_metrics: Arc<AwsMetrics>,
    /// Where `metrics` are registered, under the seed's prefix `cert_operator`, with the AWS
    /// layer's (and their seed names).
    pub registry: Registry,
    /// The runtime's metrics, shared by every controller this harness starts, and their registry.
    runtime_metrics: Arc<RuntimeMetrics>,
    pub runtime_registry: Registry,
    /// Applied to the configuration of every controller this harness starts.
    tweak: fn(&mut CertConfig, &mut AwsConfig),
    /// The private CAs the controllers started from now on issue from.
    pub certificate_authorities: Vec<String>,
    /// Direct client to moto's AWS Private CA, to set CAs up.
    pub pca: aws_sdk_acmpca::Client,
    /// The cluster's AwsIdentity mappings, as every controller this harness starts reads them.
    pub identities: Arc<Identities>,
}

impl Deref for Harness {
    type Target = TestNamespace<Cert>;

    fn deref(&self) -> &TestNamespace<Cert> {
        &self.test_namespace
    }
}

/// Quick requeues, so a test sees each step within seconds; the steady state keeps the seed's
/// hour so a test can count the calls a Ready certificate costs.
pub fn fast_timing() -> Timing {
    let ms = Duration::from_millis;
    Timing {
        pending: RequeuePolicy::exponential(ms(200), ms(1000)),
        creating: RequeuePolicy::exponential(ms(100), ms(500)),
        verifying: RequeuePolicy::exponential(ms(300), ms(1000)),
        ready: RequeuePolicy::fixed(Duration::from_secs(3600)),
        failed: RequeuePolicy::fixed(ms(1000)),
        terminating: RequeuePolicy::exponential(ms(200), ms(1000)),
        error_backoff: RequeuePolicy::exponential(ms(200), ms(1000)),
        throttle_floor: ms(300),
        deletion_blocked_after: Duration::from_secs(2),
    }
}

impl Harness {
    /// `zones`: labels of hosted zones to create, e.g. `["a", "b"]` → `a.<namespace>.test`.
    pub async fn start(prefix: &str, zones: &[&str]) -> Self {
        Self::start_with(prefix, zones, |_, _| {}).await
    }

    pub async fn start_with(prefix: &str, zones: &[&str], tweak: fn(&mut CertConfig, &mut AwsConfig)) -> Self {
        Self::start_on(TestNamespace::new(prefix).await, zones, tweak).await
    }

    /// In `test_namespace`, on a control plane of its concern's (`control_plane::of`).
    pub async fn start_on(test_namespace: TestNamespace<Cert>, zones: &[&str], tweak: fn(&mut CertConfig, &mut AwsConfig)) -> Self {
        test_namespace.plane.install_crds(&[Cert::crd(), blockwork_identity::crd()]).await.expect("the CRDs install");
        let moto = moto().await.expect("moto starts");
        let proxy = FaultProxy::start(&moto.endpoint()).await.expect("proxy starts");
        let direct = sdk_config(&moto.endpoint()).await;
        let route53 = aws_sdk_route53::Client::new(&direct);
        let mut created = Vec::new();
        for label in zones {
            let name = format!("{label}.{}.test", test_namespace.namespace);
            created.push(Zone { id: hosted_zone(&route53, &name).await, name, domains: Vec::new() });
        }
        let mut registry = Registry::default();
        let metrics = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
        let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Cert]));
        let mut runtime_registry = Registry::with_prefix("blockwork");
        let runtime_metrics = RuntimeMetrics::register(&mut runtime_registry);
        let test_namespace_client = test_namespace.plane.client();
        let mut harness = Self {
            test_namespace,
            proxy,
            acm: aws_sdk_acm::Client::new(&direct),
            route53,
            zones: created,
            metrics,
            aws_metrics,
            registry,
            runtime_metrics,
            runtime_registry,
            tweak,
            identities: Identities::new(test_namespace_client, Settings::default()),
            controller: ControllerTask::default(),
            certificate_authorities: Vec::new(),
            pca: aws_sdk_acmpca::Client::new(&direct),
        };
        harness.start_controller().await;
        harness
    }

    /// The controller's configuration, and its AWS layer's (through the proxy) with quick
    /// listing sweeps.
    pub fn config(&self) -> (CertConfig, AwsConfig) {
        let mut config = CertConfig {
            zones: ZoneRegistry::new(self.zones.clone()),
            acm: AcmConfig { sweep: Duration::from_secs(2), busy_sweep: Duration::from_millis(200), ..AcmConfig::default() },
            validation_timeout: Duration::from_secs(72 * 3600),
            expiry_threshold_days: 90,
            max_tracked_certificates: 1000,
            timing: fast_timing(),
            export_secrets: true,
            certificate_authorities: self.certificate_authorities.clone(),
            ownership_interval: blockwork_cert::external::OWNERSHIP_INTERVAL,
            ingress_users: false,
        };
        let mut aws = AwsConfig { endpoint_url: Some(self.proxy.endpoint()), ..layer_config() };
        (self.tweak)(&mut config, &mut aws);
        (config, aws)
    }

    /// A new `ACTIVE` private CA, and a controller (restarted) that issues from it.
    pub async fn with_private_ca(&mut self) -> String {
        let arn = blockwork_testenv::aws::private_ca(&self.pca, &format!("{} CA", self.namespace)).await;
        self.certificate_authorities.push(arn.clone());
        self.controller.crash();
        self.start_controller().await;
        arn
    }

    /// Starts a controller (again): a new process, as far as the object is concerned, with an
    /// AWS layer of its own (its metrics counted in the harness's).
    pub async fn start_controller(&mut self) {
        self.start_controller_with(self.plane.client()).await;
    }

    /// Starts a controller whose Kubernetes client is `client` (one through a `KubeProxy`, to
    /// count its writes).
    pub async fn start_controller_with(&mut self, client: kube::Client) {
        let run = self.controller_run(client).await;
        self.controller.start(run);
    }

    /// A controller as [`Self::start_controller_with`] starts it, for `self.controller.start`
    /// while other fields of the harness are borrowed (a costs table reading its counters).
    pub async fn controller_run(&self, client: kube::Client) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (config, aws_config) = self.config();
        let aws = Aws::with_sdk_config(aws_config, sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let namespaces = blockwork_runtime::Namespaces::Only(vec![self.namespace.clone()]);
        let (runtime_metrics, metrics) = (Arc::clone(&self.runtime_metrics), Arc::clone(&self.metrics));
        let identities = Arc::clone(&self.identities);
        blockwork_cert::run(client, config, aws, identities, runtime_metrics, metrics, namespaces, 4, std::future::pending())
    }

    /// The text exposition of the harness's Cert metrics.
    pub fn scrape(&self) -> String {
        metrics_text(&self.registry)
    }

    /// Reconciles that ended in a 409 from the API server (a status written from a stale copy).
    pub fn conflicts(&self) -> u64 {
        sum(&metrics_text(&self.runtime_registry), "blockwork_reconciles_total", &[("result", "conflict")]) as u64
    }

    pub async fn create(&self, name: &str, spec: CertSpec) -> Cert {
        self.test_namespace.create(&Cert::new(name, spec)).await
    }

    /// Waits until the Cert is Ready and every validation record it listed is written (the
    /// background batch may follow ACM's issuance, which moto does after a second).
    pub async fn wait_for_records_written(&self, name: &str) -> Cert {
        self.wait_for(name, "Ready with its records written", |c| {
            c.status.as_ref().is_some_and(|s| {
                s.observation.state == Some(CertState::Ready)
                    && !s.observation.validation_records.is_empty()
                    && s.observation.validation_records.iter().all(|r| !r.pending)
            })
        })
        .await
    }

    /// Waits until the Cert is Ready for `domain` (a changed spec's new certificate).
    pub async fn wait_ready_for(&self, name: &str, domain: &str) -> Cert {
        self.wait_for(name, &format!("Ready for {domain}"), |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.observation.state == Some(CertState::Ready) && s.observation.domain_name.as_deref() == Some(domain))
        })
        .await
    }

    /// Every validation record the Cert's status lists is in its zone, with its value.
    pub async fn records_in_zone(&self, cert: &Cert) -> bool {
        let cnames = self.cnames(&self.zones[0]).await;
        let listed = &status(cert).observation.validation_records;
        let written = |r: &ValidationRecordStatus| {
            cnames.iter().any(|(n, v, _)| n == r.name.trim_end_matches('.') && v == r.value.trim_end_matches('.'))
        };
        !listed.is_empty() && listed.iter().all(written)
    }

    pub async fn wait_for_state(&self, name: &str, state: CertState) -> Cert {
        self.wait_for(name, state.as_str(), |c| c.status.as_ref().and_then(|s| s.observation.state) == Some(state)).await
    }

    /// Polls until the ConfigMap `name` satisfies `check` (`None`: absent).
    pub async fn wait_for_configmap(&self, name: &str, what: &str, check: impl Fn(Option<&ConfigMap>) -> bool) -> Option<ConfigMap> {
        let found = async || {
            let map = self.api_of::<ConfigMap>().get_opt(name).await.unwrap();
            if check(map.as_ref()) { Ok(map) } else { Err(format!("{map:#?}")) }
        };
        eventually(&format!("ConfigMap {name} to be {what}"), TIMEOUT, found).await
    }

    /// The CNAME records (name, value, TTL) in a zone.
    pub async fn cnames(&self, zone: &Zone) -> Vec<(String, String, i64)> {
        blockwork_testenv::aws::cnames(&self.route53, &zone.id).await
    }

    /// ARNs of the ACM certificates for `domain`, any status.
    pub async fn certificates_for(&self, domain: &str) -> Vec<String> {
        let listed = self.acm.list_certificates().send().await.unwrap();
        listed
            .certificate_summary_list()
            .iter()
            .filter(|s| s.domain_name() == Some(domain))
            .filter_map(|s| s.certificate_arn().map(str::to_owned))
            .collect()
    }

    /// ARNs of every ACM certificate (any status, any domain) tagged as owned by the object
    /// with this UID: what a Cert must account for.
    pub async fn owned_certificates(&self, uid: &str) -> Vec<String> {
        let mut owned = Vec::new();
        let listed = self.acm.list_certificates().send().await.unwrap();
        for arn in listed.certificate_summary_list().iter().filter_map(|s| s.certificate_arn()) {
            let Ok(tags) = self.acm.list_tags_for_certificate().certificate_arn(arn).send().await else { continue };
            if tags.tags().iter().any(|t| t.key() == "blockwork.dev/owner-uid" && t.value() == Some(uid)) {
                owned.push(arn.to_owned());
            }
        }
        owned.sort();
        owned
    }

    /// The alternative names of a certificate as ACM lists them (the primary domain included).
    pub async fn names_of(&self, arn: &str) -> Vec<String> {
        let described = self.acm.describe_certificate().certificate_arn(arn).send().await.unwrap();
        let mut names = described.certificate().unwrap().subject_alternative_names().to_vec();
        names.sort();
        names
    }

    pub async fn certificate_exists(&self, arn: &str) -> bool {
        self.acm.describe_certificate().certificate_arn(arn).send().await.is_ok()
    }
}

pub fn spec(service: &str, environment: &str) -> CertSpec {
    CertSpec { service_name: service.into(), environment: environment.into(), ..CertSpec::default() }
}

/// `spec`, exported into the Secret `secret`.
pub fn exporting(spec: CertSpec, secret: &str) -> CertSpec {
    CertSpec { export: Some(blockwork_cert::api::ExportSpec { secret_name: secret.into(), secret_template: None }), ..spec }
}

pub fn status(cert: &Cert) -> &blockwork_cert::CertStatus {
    cert.status.as_ref().expect("status is set")
}

/// Attaches the certificate to a classic load balancer in moto (which then lists it in the
/// certificate's InUseBy), with a raw awsQuery call: the workspace has no ELB SDK crate.
pub async fn attach_to_load_balancer(name: &str, arn: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let endpoint = moto().await.unwrap().endpoint();
    let address = endpoint.trim_start_matches("http://");
    let encode = |s: &str| {
        s.bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect::<String>()
    };
    let body = format!(
        "Action=CreateLoadBalancer&Version=2012-06-01&LoadBalancerName={name}&AvailabilityZones.member.1=us-east-1a\
         &Listeners.member.1.Protocol=HTTPS&Listeners.member.1.LoadBalancerPort=443&Listeners.member.1.InstanceProtocol=HTTP\
         &Listeners.member.1.InstancePort=80&Listeners.member.1.SSLCertificateId={}",
        encode(arn)
    );
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/elasticloadbalancing/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}
