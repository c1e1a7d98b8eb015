//! Composing benchmark (issue 40): DistributionTenants that name their Certs, created at once with
//! the Certs, against the same Certs alone. The Cert and DistributionTenant controllers run in the
//! bench process over one AWS layer (as `blockwork run` has them: AWS's quotas × 0.8, the
//! operator's intervals, concurrency 3), against moto (ACM, Route 53) and MiniStack (CloudFront),
//! each behind a fault proxy that throttles with AWS's buckets. Three phases, one namespace each
//! where it matters:
//!
//! 1. `BENCH_CERTS` Certs (default 200) created at once: the time until all are Ready;
//! 2. as many tenants given those Certs' ARNs by hand: the calls per tenant of a tenant that does
//!    not compose (the baseline);
//! 3. as many Certs and as many tenants naming them (`certRef`), all created at once: the time until
//!    every tenant is Ready, against phase 1's, and the calls per tenant, against phase 2's.
//!
//!     cargo bench --workspace --bench composed
//!
//! The tenant controller's ACM calls go through a proxy of their own, so that they are counted
//! apart from the Cert controller's. Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockwork_aws::quota::{Quotas, Service};
use blockwork_aws::{Aws, AwsArgs, AwsMetrics, Endpoint, Seed};
use blockwork_cert::{Cert, CertArgs, CertConfig, CertMetrics, CertSpec};
use blockwork_identity::{Identities, Settings};
use blockwork_runtime::{Context, ControllerConfig, Namespaces, RuntimeMetrics};
use blockwork_tenant::api::{CertRef, CertificateRef, Customizations, DomainName};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, DistributionTenantSpec, GROUP, TenantManager, TenantMetrics};
use blockwork_testenv::aws::{hosted_zone, request_certificate, sdk_config, tenant_only_distribution};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::CustomResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use prometheus_client::registry::Registry;
use support::fixtures::{condition, default_connection_group};
use support::{CONCURRENCY, merged};

fn main() {
    support::main("composed", bench());
}

/// How many of `objects` are Ready.
async fn ready<K>(api: &Api<K>, ready: impl Fn(&K) -> bool) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default()).await.unwrap().items.iter().filter(|o| ready(o)).count()
}

fn cert_ready(cert: &Cert) -> bool {
    cert.status.as_ref().and_then(|s| s.condition("Ready")).is_some_and(|c| c.status == "True")
}

fn tenant_ready(tenant: &DistributionTenant) -> bool {
    condition(tenant, "Ready").is_some_and(|c| c.0 == "True")
}

/// Polls until `count` objects are Ready; the time since `started`.
async fn until_ready<K>(what: &str, api: &Api<K>, count: usize, started: Instant, is_ready: impl Fn(&K) -> bool) -> Duration
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut last_report = Instant::now();
    loop {
        let done = ready(api, &is_ready).await;
        if done == count {
            return started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: {done} of {count} {what} Ready", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "only {done} of {count} {what} are Ready after an hour");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Creates `objects` at once (32 in flight).
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|object| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &object).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
}

fn cert(i: usize, zone: &str) -> Cert {
    let spec = CertSpec {
        service_name: format!("c{i}"),
        environment: "bench".into(),
        domain_name: Some(format!("c{i}.{zone}")),
        ..CertSpec::default()
    };
    Cert::new(&format!("c{i}"), spec)
}

fn tenant(i: usize, zone: &str, distribution: &str, certificate: CertificateRef) -> DistributionTenant {
    let spec = DistributionTenantSpec {
        distribution_id: distribution.to_owned(),
        domains: vec![DomainName { domain: format!("c{i}.{zone}") }],
        customizations: Some(Customizations { certificate: Some(certificate), ..Customizations::default() }),
        ..DistributionTenantSpec::default()
    };
    DistributionTenant::new(&format!("{zone}-t{i}").replace('.', "-"), spec)
}

/// Calls by operation between two counts.
fn since(now: &BTreeMap<String, usize>, before: &BTreeMap<String, usize>) -> BTreeMap<String, usize> {
    now.iter().map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}

async fn bench() {
    let count = support::env_or("BENCH_CERTS", 200);
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    plane.install_crds(&[DistributionTenant::crd(), Cert::crd(), blockwork_identity::AwsIdentity::crd()]).await.unwrap();
    let (alone, composed) = (plane.namespace("bench-certs").await.unwrap(), plane.namespace("bench-composed").await.unwrap());
    let ministack = ministack().await.unwrap().endpoint();
    let moto = moto().await.unwrap().endpoint();

    // The distribution (the tenants bring their certificates), the default connection group and
    // one hosted zone per namespace, straight.
    let cloudfront = aws_sdk_cloudfront::Client::new(&sdk_config(&ministack).await);
    let wildcard = request_certificate(&aws_sdk_acm::Client::new(&sdk_config(&ministack).await), &[format!("*.{alone}.example.com")]).await;
    let distribution = tenant_only_distribution(&cloudfront, &format!("{alone}-bench"), Some(&wildcard), &[]).await;
    default_connection_group(&cloudfront, &distribution, &alone).await;
    let route53 = aws_sdk_route53::Client::new(&sdk_config(&moto).await);
    let zones: Vec<(String, String)> = {
        let mut zones = Vec::new();
        for namespace in [&alone, &composed] {
            let name = format!("{namespace}.example.com");
            zones.push((name.clone(), hosted_zone(&route53, &name).await));
        }
        zones
    };

    // From here on the proxies throttle as AWS would.
    let (cloudfront_proxy, aws_proxy, tenant_acm) =
        (FaultProxy::start(&ministack).await.unwrap(), FaultProxy::start(&moto).await.unwrap(), FaultProxy::start(&moto).await.unwrap());
    for proxy in [&cloudfront_proxy, &aws_proxy, &tenant_acm] {
        proxy.enforce_quotas(Quotas::aws());
    }

    // Both controllers, in this process, over one AWS layer with the operator's defaults.
    let (mut aws_config, _) = AwsArgs { region: Some("us-east-1".into()), ..AwsArgs::default() }.config().unwrap();
    let endpoint = |controller, service, url: String| Endpoint { controller, service, url };
    aws_config.endpoints = vec![
        endpoint(None, Service::CloudFront, cloudfront_proxy.endpoint()),
        endpoint(Some(CONTROLLER), Service::Acm, tenant_acm.endpoint()),
        endpoint(None, Service::Acm, aws_proxy.endpoint()),
        endpoint(None, Service::Route53, aws_proxy.endpoint()),
        endpoint(None, Service::Sts, aws_proxy.endpoint()),
    ];
    let mut registry = Registry::default();
    let aws_metrics = Arc::new(AwsMetrics::register(&mut registry, &[Seed::Cert, Seed::Tenant]));
    let aws = Aws::with_sdk_config(aws_config, sdk_config(&aws_proxy.endpoint()).await, aws_metrics);
    let identities = Identities::new(plane.client(), Settings::default());
    let namespaces = Namespaces::Only(vec![alone.clone(), composed.clone()]);
    let dns_zones = zones.iter().map(|(name, id)| format!("{name}:{id}")).collect::<Vec<_>>().join(",");
    let cert_config = CertConfig::from_args(&CertArgs { dns_zones, ..CertArgs::default() }).unwrap();
    let certs_controller = tokio::spawn(blockwork_cert::run(
        plane.client(),
        cert_config,
        Arc::clone(&aws),
        Arc::clone(&identities),
        RuntimeMetrics::register(&mut registry),
        CertMetrics::register(&mut registry),
        namespaces.clone(),
        CONCURRENCY,
        std::future::pending(),
    ));
    let manager = TenantManager::new(
        Sdk::new(&aws),
        Some(Route53::new(aws.records())),
        Arc::clone(&identities),
        TenantMetrics::register(&mut registry),
        &aws,
        plane.client(),
    );
    let config = ControllerConfig::new(CONTROLLER, GROUP).with_timing(blockwork_tenant::default_timing());
    let context = Context::new(plane.client(), manager, config, RuntimeMetrics::register(&mut Registry::default()));
    let client = plane.client();
    let tenants_controller = tokio::spawn(async move {
        blockwork_runtime::run_in(&namespaces, |scope| {
            let api: Api<DistributionTenant> = blockwork_runtime::namespaces::api(&client, scope.as_deref());
            blockwork_runtime::run(api, Arc::clone(&context), CONCURRENCY, std::future::pending())
        })
        .await;
    });
    let calls = || merged(&[&cloudfront_proxy, &aws_proxy, &tenant_acm], FaultProxy::all_calls);
    let tenant_calls = || merged(&[&cloudfront_proxy, &tenant_acm], FaultProxy::all_calls);

    // 1. The Certs alone.
    let certs: Api<Cert> = Api::namespaced(plane.client(), &alone);
    let started = Instant::now();
    create_all(&certs, (0..count).map(|i| cert(i, &zones[0].0)).collect()).await;
    let certs_alone = until_ready("Certs", &certs, count, started, cert_ready).await;
    let cert_calls = calls();
    eprintln!("phase 1: {count} Certs Ready in {certs_alone:.1?}");

    // 2. Tenants given those ARNs by hand: the baseline calls per tenant.
    let arns: BTreeMap<String, String> = certs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap(), c.status.unwrap().observation.certificate_arn.unwrap()))
        .collect();
    let by_hand: Api<DistributionTenant> = Api::namespaced(plane.client(), &alone);
    let before = tenant_calls();
    let started = Instant::now();
    let tenants = (0..count)
        .map(|i| {
            let arn = CertificateRef { arn: Some(arns[&format!("c{i}")].clone()), cert_ref: None };
            tenant(i, &zones[0].0, &distribution, arn)
        })
        .collect();
    create_all(&by_hand, tenants).await;
    let by_hand_ready = until_ready("tenants", &by_hand, count, started, tenant_ready).await;
    let baseline = since(&tenant_calls(), &before);
    eprintln!("phase 2: {count} tenants with ARNs by hand Ready in {by_hand_ready:.1?}");

    // 3. Certs and tenants naming them, at once.
    let (certs, tenants): (Api<Cert>, Api<DistributionTenant>) =
        (Api::namespaced(plane.client(), &composed), Api::namespaced(plane.client(), &composed));
    let before = tenant_calls();
    let before_all = calls();
    let started = Instant::now();
    let named = (0..count).map(|i| {
        let reference = CertificateRef { arn: None, cert_ref: Some(CertRef { name: format!("c{i}") }) };
        tenant(i, &zones[1].0, &distribution, reference)
    });
    let (made_certs, made_tenants) =
        tokio::join!(create_all(&certs, (0..count).map(|i| cert(i, &zones[1].0)).collect()), create_all(&tenants, named.collect()));
    let ((), ()) = (made_certs, made_tenants);
    let (certs_ready, composed_ready) = tokio::join!(
        until_ready("Certs beside tenants", &certs, count, started, cert_ready),
        until_ready("tenants naming their Certs", &tenants, count, started, tenant_ready)
    );
    let composing = since(&tenant_calls(), &before);
    let all_composed = since(&calls(), &before_all);
    certs_controller.abort();
    tenants_controller.abort();

    println!();
    println!(
        "| {count} Certs, and {count} DistributionTenants naming them, created at once (one process: Cert and tenant controllers, concurrency 3, AWS's quotas × 0.8; the proxies throttle with AWS's buckets) | |"
    );
    println!("|---|---|");
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {} |", support::load_average());
    println!("| {count} Certs alone: time until all Ready | {:.0} s |", certs_alone.as_secs_f64());
    println!(
        "| **{count} Certs and {count} tenants naming them: time until every tenant Ready** | **{:.0} s** |",
        composed_ready.as_secs_f64()
    );
    println!("| **ratio to the Certs alone** | **{:.2}** |", composed_ready.as_secs_f64() / certs_alone.as_secs_f64());
    println!("| the same {count} Certs, beside the tenants: time until all Ready | {:.0} s |", certs_ready.as_secs_f64());
    println!("| {count} tenants given the ARNs by hand, the Certs Ready: time until all Ready | {:.0} s |", by_hand_ready.as_secs_f64());
    let operations: std::collections::BTreeSet<&String> = baseline.keys().chain(composing.keys()).collect();
    for operation in operations {
        let per = |calls: &BTreeMap<String, usize>| calls.get(operation).copied().unwrap_or(0) as f64 / count as f64;
        println!("| tenant calls per tenant: {operation} | naming the Cert {:.2}, ARN by hand {:.2} |", per(&composing), per(&baseline));
    }
    let cert_ops: usize = cert_calls.values().sum();
    println!("| AWS calls of phase 1 (the Certs alone) | {cert_ops} ({:.2} per Cert) |", cert_ops as f64 / count as f64);
    println!(
        "| AWS calls of phase 3 (Certs and tenants) | {} ({:.2} per Cert and tenant) |",
        all_composed.values().sum::<usize>(),
        all_composed.values().sum::<usize>() as f64 / count as f64
    );
    let throttled = merged(&[&cloudfront_proxy, &aws_proxy, &tenant_acm], FaultProxy::all_throttled);
    println!("| throttling answers from the proxies (AWS's buckets) | {} |", throttled.values().sum::<usize>());
}
