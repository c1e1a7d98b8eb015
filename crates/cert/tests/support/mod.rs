//! A Cert controller against the real kube-apiserver and moto, through the fault proxy: one
//! namespace, fresh hosted zones and a proxy per test. Each controller started gets an AWS layer
//! of its own, as a new process would.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig as SdkRetryConfig;
use aws_sdk_route53::types::RrType;
use blockwork_aws::acm::AcmConfig;
use blockwork_aws::quota::{Override, Quotas};
use blockwork_aws::route53::BatchPolicy;
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, RetryPolicy, Seed};
use blockwork_cert::zones::{Zone, ZoneRegistry};
use blockwork_cert::{Cert, CertConfig, CertMetrics, CertSpec, CertState, Timing};
use blockwork_runtime::{RequeuePolicy, RuntimeMetrics};
use blockwork_testenv::control_plane::{ControlPlane, control_plane};
use blockwork_testenv::emulators::moto;
use blockwork_testenv::fault_proxy::FaultProxy;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResourceExt};
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

pub struct Harness {
    pub client: Client,
    pub namespace: String,
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
    runtime_registry: Registry,
    /// Applied to the configuration of every controller this harness starts.
    tweak: fn(&mut CertConfig, &mut AwsConfig),
    controller: Option<JoinHandle<()>>,
    plane: &'static ControlPlane,
}

pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sts::config::Credentials::new("test", "test", None, None, "test"))
        .retry_config(SdkRetryConfig::disabled())
        .load()
        .await
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
    }
}

impl Harness {
    /// `zones`: labels of hosted zones to create, e.g. `["a", "b"]` → `a.<namespace>.test`.
    pub async fn start(prefix: &str, zones: &[&str]) -> Self {
        Self::start_with(prefix, zones, |_, _| {}).await
    }

    pub async fn start_with(prefix: &str, zones: &[&str], tweak: fn(&mut CertConfig, &mut AwsConfig)) -> Self {
        let plane = control_plane().await.expect("control plane starts");
        plane.install_crds(&[Cert::crd()]).await.expect("Cert CRD installs");
        let namespace = plane.namespace(prefix).await.expect("namespace is created");
        let moto = moto().await.expect("moto starts");
        let proxy = FaultProxy::start(&moto.endpoint()).await.expect("proxy starts");
        let direct = sdk_config(&moto.endpoint()).await;
        let route53 = aws_sdk_route53::Client::new(&direct);
        let mut created = Vec::new();
        for label in zones {
            let name = format!("{label}.{namespace}.test");
            let zone = route53
                .create_hosted_zone()
                .name(&name)
                .caller_reference(uuid_like(&name))
                .send()
                .await
                .expect("hosted zone is created")
                .hosted_zone
                .unwrap();
            created.push(Zone { name, id: zone.id.trim_start_matches("/hostedzone/").to_owned() });
        }
        let mut registry = Registry::default();
        let metrics = CertMetrics::register(registry.sub_registry_with_prefix("cert_operator"));
        let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Cert]));
        let mut runtime_registry = Registry::with_prefix("blockwork");
        let runtime_metrics = RuntimeMetrics::register(&mut runtime_registry);
        let mut harness = Self {
            client: plane.client(),
            namespace,
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
            controller: None,
            plane,
        };
        harness.start_controller().await;
        harness
    }

    /// The controller's configuration, and its AWS layer's: quotas far above what a test needs
    /// (the quota model has tests of its own), quick retries, quick background batches and
    /// listing sweeps.
    pub fn config(&self) -> (CertConfig, AwsConfig) {
        let mut config = CertConfig {
            zones: ZoneRegistry::new(self.zones.clone()),
            acm: AcmConfig { sweep: Duration::from_secs(2), busy_sweep: Duration::from_millis(200), ..AcmConfig::default() },
            validation_timeout: Duration::from_secs(72 * 3600),
            expiry_threshold_days: 90,
            max_tracked_certificates: 1000,
            timing: fast_timing(),
        };
        let generous: Vec<Override> = ["acm.*=100/100", "acm.ListCertificates=100/100", "route53=100/100", "route53.*=100/100"]
            .iter()
            .map(|o| o.parse().unwrap())
            .collect();
        let mut aws = AwsConfig {
            region: Some("us-east-1".into()),
            endpoint_url: Some(self.proxy.endpoint()),
            timeout: Duration::from_secs(10),
            quotas: Quotas::aws().with(&generous),
            retry: RetryPolicy { base_delay: Duration::from_millis(20), max_delay: Duration::from_millis(100), max_retries: 3 },
            route53_batch: BatchPolicy { gather: Duration::from_millis(50), interval: Duration::from_millis(300) },
            ..AwsConfig::default()
        };
        (self.tweak)(&mut config, &mut aws);
        (config, aws)
    }

    /// Starts a controller (again): a new process, as far as the object is concerned, with an
    /// AWS layer of its own (its metrics counted in the harness's).
    pub async fn start_controller(&mut self) {
        let (config, aws_config) = self.config();
        let aws = Aws::with_sdk_config(aws_config, sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let run = blockwork_cert::run(
            self.plane.client(),
            config,
            aws,
            Arc::clone(&self.runtime_metrics),
            Arc::clone(&self.metrics),
            blockwork_runtime::Namespaces::Only(vec![self.namespace.clone()]),
            4,
            std::future::pending(),
        );
        self.controller = Some(tokio::spawn(run));
    }

    /// Kills the controller wherever it is, as a crash would.
    pub fn crash_controller(&mut self) {
        if let Some(handle) = self.controller.take() {
            handle.abort();
        }
    }

    /// The text exposition of the harness's Cert metrics.
    pub fn scrape(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }

    /// Reconciles that ended in a 409 from the API server (a status written from a stale copy).
    pub fn conflicts(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.runtime_registry).unwrap();
        text.lines()
            .filter(|line| line.starts_with("blockwork_reconciles_total{") && line.contains(r#"result="conflict""#))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Waits until the proxy has seen at least `count` calls of `operation` (faulted ones
    /// included: a call held by latency counts from the moment it arrives).
    pub async fn wait_for_calls(&self, operation: &str, count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        while self.proxy.calls(operation) < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{operation} was called fewer than {count} times: {:?}",
                self.proxy.all_calls()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn api(&self) -> Api<Cert> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub async fn create(&self, name: &str, spec: CertSpec) -> Cert {
        self.api().create(&PostParams::default(), &Cert::new(name, spec)).await.expect("cert is created")
    }

    /// Polls until `check` holds, or fails the test with the last status seen.
    pub async fn wait_for(&self, name: &str, what: &str, check: impl Fn(&Cert) -> bool) -> Cert {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        loop {
            let cert = self.api().get_opt(name).await.expect("get cert");
            match cert {
                Some(cert) if check(&cert) => return cert,
                Some(cert) if tokio::time::Instant::now() > deadline => {
                    panic!("timed out waiting for {name} to be {what}; last status: {:#?}", cert.status)
                }
                None if tokio::time::Instant::now() > deadline => panic!("timed out waiting for {name} to be {what}; it does not exist"),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
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

    pub async fn wait_for_state(&self, name: &str, state: CertState) -> Cert {
        self.wait_for(name, state.as_str(), |c| c.status.as_ref().and_then(|s| s.observation.state) == Some(state)).await
    }

    pub async fn wait_gone(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        while let Some(cert) = self.api().get_opt(name).await.expect("get cert") {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {name} to be deleted; status: {:#?}", cert.status);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The CNAME records (name, value) in a zone.
    pub async fn cnames(&self, zone: &Zone) -> Vec<(String, String)> {
        let sets = self.route53.list_resource_record_sets().hosted_zone_id(&zone.id).send().await.unwrap();
        sets.resource_record_sets()
            .iter()
            .filter(|s| *s.r#type() == RrType::Cname)
            .map(|s| (s.name().to_owned(), s.resource_records().first().map(|r| r.value().to_owned()).unwrap_or_default()))
            .collect()
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

impl Drop for Harness {
    fn drop(&mut self) {
        self.crash_controller();
    }
}

fn uuid_like(seed: &str) -> String {
    format!("{seed}-{}", std::process::id())
}

pub fn spec(service: &str, environment: &str) -> CertSpec {
    CertSpec { service_name: service.into(), environment: environment.into(), ..CertSpec::default() }
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
