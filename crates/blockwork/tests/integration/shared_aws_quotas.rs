#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stderr)]
//! Issue 17's test that the AWS layer is done: Cert and DistributionTenant in **one** `blockwork
//! run` process, one AWS layer, behind fault proxies that throttle with AWS's own buckets
//! (`FaultProxy::enforce_quotas(Quotas::aws())`, unscaled): first a burst of Certs spread over
//! 12 hosted zones, then more Certs and DistributionTenants at once in the same zones (the
//! tenants' CNAMEs and the Certs' validation records in the same zones of one account).
//!
//! Everything must reach Ready with **no throttling answer** from the proxies: Route 53's
//! account-level bucket is one for the account, so the two controllers' record writes must
//! share the layer's one bucket (a controller outside the layer, or a bucket per controller or
//! per zone, would draw it faster than AWS refills it). The layer's metrics show both
//! controllers' Route 53 calls and one account bucket.
//!
//! The sizes: 240 Certs, then 60 Certs and 30 tenants (about two minutes; the first burst
//! takes 60 s at ACM's RequestCertificate 5/s × 0.8). The figures it prints are recorded in
//! docs/benchmarks.md:
//!
//!     cargo test --workspace --test integration -- --nocapture shared_aws_quotas::
//!
//! Issue 41's restart: the same process holding 60 Ready Certs and 30 Ready tenants killed
//! (`kill -9`) and started again; what the new process's first looks cost, counted at the
//! proxies (a restart must cost at most 0.4 AWS calls per object and write nothing). About 90 s
//! on a loaded machine: the 90 objects made Ready under AWS's buckets and settled (their records
//! written, 5 s without a call) before the restart is counted.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use blockwork_aws::Quotas;
use blockwork_cert::{Cert, CertSpec, CertState, DnsZoneRef};
use blockwork_tenant::DistributionTenant;
use blockwork_tenant::api::{DnsConfig, DnsProvider, DomainName};
use blockwork_testenv::aws;
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::harness::{samples, sum};
use blockwork_testenv::operator::Operator;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::Api;
use kube::api::{ListParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
/// The count of hosted zones, in one account.
const ZONES: usize = 12;
/// How long everything may take to be Ready: far above what the quotas need (the first burst
/// of 240 takes 60 s at ACM's RequestCertificate 5/s × 0.8), for a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(900);

/// The scenario's sizes.
struct Size {
    first_certs: usize,
    then_certs: usize,
    then_tenants: usize,
}

#[tokio::test]
async fn certs_and_tenants_in_one_process_reach_ready_without_a_throttling_answer_from_aws_s_buckets() {
    one_process_under_aws_s_buckets(Size { first_certs: 240, then_certs: 60, then_tenants: 30 }).await;
}

/// One namespace with its AWS side, the proxies throttling as AWS would, and the operator.
struct World {
    aws: Setup,
    moto_proxy: FaultProxy,
    ministack_proxy: FaultProxy,
    operator: Operator,
    certs: Api<Cert>,
    tenants: Api<DistributionTenant>,
}

impl World {
    async fn start(prefix: &str) -> Self {
        let plane = blockwork_testenv::control_plane::of("shared_aws_quotas").await.unwrap();
        plane
            .install_crds(&[blockwork_cert::crd(), <DistributionTenant as kube::CustomResourceExt>::crd(), blockwork_identity::crd()])
            .await
            .unwrap();
        let namespace = plane.namespace(prefix).await.unwrap();
        let client = plane.client();
        let moto = moto().await.unwrap().endpoint();
        let ministack = ministack().await.unwrap().endpoint();
        let aws = Setup::new(&moto, &ministack, &namespace).await;

        // From here on the proxies throttle as AWS would: Route 53 (moto) and ACM (moto for
        // Certs, MiniStack for tenants) and CloudFront (MiniStack) with AWS's own buckets.
        let moto_proxy = FaultProxy::start(&moto).await.unwrap();
        let ministack_proxy = FaultProxy::start(&ministack).await.unwrap();
        moto_proxy.enforce_quotas(Quotas::aws());
        ministack_proxy.enforce_quotas(Quotas::aws());
        let operator =
            start_operator(plane.kubeconfig_path(), &namespace, &moto_proxy.endpoint(), &ministack_proxy.endpoint(), &aws.zones).await;
        let certs = Api::namespaced(client.clone(), &namespace);
        let tenants = Api::namespaced(client, &namespace);
        Self { aws, moto_proxy, ministack_proxy, operator, certs, tenants }
    }
}

async fn one_process_under_aws_s_buckets(size: Size) {
    let World { aws, moto_proxy, ministack_proxy, operator, certs, tenants } = World::start("shared-quotas").await;

    // 1. A burst of Certs over the 12 zones.
    let started = Instant::now();
    create_certs(&certs, &aws.zones, 0..size.first_certs).await;
    wait_ready(&certs, &tenants, size.first_certs, 0, &operator).await;
    let first_ready = started.elapsed();
    let first_calls = moto_proxy.all_calls();

    // 2. More Certs and DistributionTenants at once, in the same zones.
    let started = Instant::now();
    let (..) = tokio::join!(
        create_certs(&certs, &aws.zones, size.first_certs..size.first_certs + size.then_certs),
        create_tenants(&tenants, &aws, size.then_tenants),
    );
    wait_ready(&certs, &tenants, size.first_certs + size.then_certs, size.then_tenants, &operator).await;
    let then_ready = started.elapsed();

    let metrics = operator.get(operator.metrics, "/metrics").await.unwrap().body;
    let moto_calls: BTreeMap<String, usize> = moto_proxy.all_calls().into_iter().collect();
    let ministack_calls: BTreeMap<String, usize> = ministack_proxy.all_calls().into_iter().collect();
    let throttled: usize = moto_proxy.all_throttled().values().chain(ministack_proxy.all_throttled().values()).sum();
    report(&size, first_ready, then_ready, &first_calls.into_iter().collect(), &moto_calls, &ministack_calls, &metrics);

    assert_eq!(
        throttled,
        0,
        "the proxies answered with throttling (AWS's buckets): {:?} {:?}",
        moto_proxy.all_throttled(),
        ministack_proxy.all_throttled()
    );
    assert_eq!(sum(&metrics, "blockwork_aws_throttling_events_total", &[]), 0.0, "the operator saw throttling");
    // Both controllers wrote records through the layer: the Certs' validation records and the
    // tenants' CNAMEs, each counted under its seed's name.
    let cert_changes = sum(&metrics, "cert_operator_aws_api_calls_total", &[("operation", "ChangeResourceRecordSets")]);
    let tenant_changes = sum(
        &metrics,
        "cloudfront_tenant_operator_aws_api_call_duration_seconds_count",
        &[("operation", "Route53ChangeResourceRecordSets")],
    );
    assert!(cert_changes > 0.0 && tenant_changes > 0.0, "Route 53 changes: cert {cert_changes}, tenant {tenant_changes}");
    // Every Route 53 request AWS (the proxy) saw went through the layer and its one account
    // bucket: the layer counted them all, and holds one account-level Route 53 bucket.
    let route53_seen: usize = moto_calls.iter().filter(|(operation, _)| is_route53(operation)).map(|(_, count)| count).sum();
    let route53_counted = sum(&metrics, "blockwork_aws_calls_total", &[("service", "route53")]);
    assert_eq!(route53_counted, route53_seen as f64, "Route 53 calls the layer counted against those the proxy saw: {moto_calls:?}");
    let account_buckets = samples(&metrics, "blockwork_aws_limiter_tokens", &[("service", "route53"), ("bucket", "account")]);
    assert_eq!(account_buckets.len(), 1, "one Route 53 account bucket for the process: {account_buckets:?}");
}

#[tokio::test]
async fn a_restart_holding_ready_certs_and_tenants_costs_at_most_0_4_aws_calls_per_object_and_writes_nothing() {
    let (cert_count, tenant_count) = (60, 30);
    let World { aws, moto_proxy, ministack_proxy, mut operator, certs, tenants } = World::start("restart-costs").await;
    let (..) = tokio::join!(create_certs(&certs, &aws.zones, 0..cert_count), create_tenants(&tenants, &aws, tenant_count));
    wait_ready(&certs, &tenants, cert_count, tenant_count, &operator).await;
    // Settled: the validation records, written in their zones' background batches after Ready,
    // are written too (a record still pending would be written by the new process).
    operator
        .eventually("every Cert's validation records written", DEADLINE, async || {
            let listed = certs.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
            let pending = listed
                .iter()
                .filter(|c| c.status.as_ref().is_none_or(|s| s.observation.validation_records.iter().any(|r| r.pending)))
                .count();
            if pending == 0 { Ok(()) } else { Err(format!("{pending} Certs with records pending")) }
        })
        .await;
    let proxies = [&moto_proxy, &ministack_proxy];
    quiet(&proxies).await;

    let before = calls(&proxies);
    operator.kill();
    operator.restart().unwrap();
    operator.wait_ready(Duration::from_secs(90)).await.unwrap();
    // Every object's first look in the new process, then what it led to.
    operator
        .eventually("every object's first look", DEADLINE, async || {
            let metrics = operator.metrics().await;
            let looked = |controller| sum(&metrics, "blockwork_reconciles_total", &[("controller", controller)]);
            let (cert_looks, tenant_looks) = (looked("cert"), looked("tenant"));
            let all = cert_looks >= cert_count as f64 && tenant_looks >= tenant_count as f64;
            if all { Ok(()) } else { Err(format!("{cert_looks} Cert and {tenant_looks} tenant reconciles")) }
        })
        .await;
    quiet(&proxies).await;
    let after = calls(&proxies);
    let restart: BTreeMap<String, usize> =
        after.iter().map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect();
    let metrics = operator.metrics().await;

    let objects = cert_count + tenant_count;
    let total: usize = restart.values().sum();
    eprintln!("| restart (kill -9, start) holding {cert_count} Ready Certs and {tenant_count} Ready tenants | |");
    eprintln!("|---|---|");
    for (operation, count) in &restart {
        eprintln!("| {operation} | {count} |");
    }
    eprintln!("| AWS calls in all | {total} ({:.2} per object) |", total as f64 / objects as f64);
    for controller in ["cert", "tenant"] {
        eprintln!("| reconciles, {controller} | {} |", sum(&metrics, "blockwork_reconciles_total", &[("controller", controller)]));
    }
    let throttled: usize = proxies.iter().flat_map(|p| p.all_throttled().into_values()).sum();
    eprintln!("| throttling answers | {throttled} |");

    let cert_writes = ["RequestCertificate", "AddTagsToCertificate", "DeleteCertificate", "ChangeResourceRecordSets"];
    let tenant_writes = ["CreateDistributionTenant", "UpdateDistributionTenant", "DeleteDistributionTenant", "TagResource"];
    let wrote = |op: &&str| restart.contains_key(*op);
    assert!(!cert_writes.iter().chain(&tenant_writes).any(wrote), "a restart writes nothing to AWS: {restart:?}");
    assert_eq!(restart.get("ListTagsForCertificate"), None, "a restart reads no certificate's tags: {restart:?}");
    assert!(total as f64 <= 0.4 * objects as f64, "{total} AWS calls for {objects} objects: {restart:?}");
    assert_eq!(throttled, 0);
}

/// Every call each proxy counted, by operation, summed over the proxies.
fn calls(proxies: &[&FaultProxy]) -> BTreeMap<String, usize> {
    let mut all = BTreeMap::new();
    for (operation, count) in proxies.iter().flat_map(|p| p.all_calls()) {
        *all.entry(operation).or_default() += count;
    }
    all
}

/// Waits until the proxies count no new call for 5 s: what the objects' last step led to is done.
async fn quiet(proxies: &[&FaultProxy]) {
    let mut last = calls(proxies);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = calls(proxies);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

/// The Route 53 operations among the names the moto proxy counts (it also sees ACM's).
fn is_route53(operation: &str) -> bool {
    ["ChangeResourceRecordSets", "GetChange", "ListResourceRecordSets", "ListHostedZones", "GetHostedZone", "ListHostedZonesByName"]
        .contains(&operation)
}

fn report(
    size: &Size,
    first_ready: Duration,
    then_ready: Duration,
    first_calls: &BTreeMap<String, usize>,
    moto_calls: &BTreeMap<String, usize>,
    ministack_calls: &BTreeMap<String, usize>,
    metrics: &str,
) {
    let Size { first_certs, then_certs, then_tenants } = *size;
    eprintln!("| {first_certs} Certs over {ZONES} zones, then {then_certs} Certs + {then_tenants} tenants, one `blockwork run` | |");
    eprintln!("|---|---|");
    eprintln!("| {first_certs} Certs all Ready after | {:.0} s |", first_ready.as_secs_f64());
    eprintln!("| then {then_certs} Certs and {then_tenants} tenants all Ready after | {:.0} s |", then_ready.as_secs_f64());
    for (operation, count) in first_calls {
        eprintln!("| first burst, moto: {operation} | {count} ({:.3} per Cert) |", *count as f64 / first_certs as f64);
    }
    for (operation, count) in moto_calls {
        let then = count - first_calls.get(operation).copied().unwrap_or(0);
        eprintln!("| second burst, moto: {operation} | {then} ({:.2} per object) |", then as f64 / (then_certs + then_tenants) as f64);
    }
    for (operation, count) in ministack_calls {
        eprintln!("| second burst, MiniStack: {operation} | {count} ({:.2} per tenant) |", *count as f64 / then_tenants as f64);
    }
    for (name, labels) in [
        ("cert_operator_aws_api_calls_total", [("operation", "ChangeResourceRecordSets")]),
        ("cloudfront_tenant_operator_aws_api_call_duration_seconds_count", [("operation", "Route53ChangeResourceRecordSets")]),
        ("blockwork_aws_calls_total", [("service", "route53")]),
        ("blockwork_aws_limiter_wait_seconds_sum", [("service", "route53")]),
    ] {
        eprintln!("| {name}{labels:?} | {} |", sum(metrics, name, &labels));
    }
}

/// The AWS side, made straight (not through the proxies): 12 hosted zones in moto; in MiniStack a
/// multi-tenant distribution serving a certificate for every zone's names, and the account's
/// default connection group.
struct Setup {
    /// (name, id) of each zone.
    zones: Vec<(String, String)>,
    distribution_id: String,
    /// The test's namespace, in its tenants' names: a CloudFront tenant's name (its object's)
    /// is the account's, and the tests of this file share one MiniStack.
    namespace: String,
}

impl Setup {
    async fn new(moto: &str, ministack: &str, namespace: &str) -> Self {
        let route53 = aws_sdk_route53::Client::new(&aws::sdk_config(moto).await);
        let mut zones = Vec::new();
        for i in 0..ZONES {
            let name = format!("z{i}.{namespace}.example.com");
            let id = aws::hosted_zone(&route53, &name).await;
            zones.push((name, id));
        }
        let config = aws::sdk_config(ministack).await;
        let cloudfront = aws_sdk_cloudfront::Client::new(&config);
        let names: Vec<String> = zones.iter().map(|(zone, _)| format!("*.{zone}")).collect();
        let certificate = aws::request_certificate(&aws_sdk_acm::Client::new(&config), &names).await;
        let distribution_id = aws::tenant_only_distribution(&cloudfront, namespace, Some(&certificate), &[]).await;
        // CloudFront makes the account's default connection group with its first tenant; a
        // tenant with managed DNS needs its routing endpoint.
        let groups = cloudfront.list_connection_groups().send().await.unwrap();
        if !groups.connection_groups().iter().any(|g| g.is_default() == Some(true)) {
            let domain = aws_sdk_cloudfront::types::DomainItem::builder().domain(format!("seed.{}", zones[0].0)).build().unwrap();
            let seed = cloudfront.create_distribution_tenant().name(format!("seed-{namespace}")).distribution_id(&distribution_id);
            seed.domains(domain).send().await.unwrap();
        }
        Self { zones, distribution_id, namespace: namespace.to_owned() }
    }
}

/// Cert `cert-<i>` in zone `i mod 12`, all at once (32 in flight).
async fn create_certs(api: &Api<Cert>, zones: &[(String, String)], range: std::ops::Range<usize>) {
    futures::stream::iter(range)
        .map(|i| {
            let spec = CertSpec {
                service_name: format!("svc{i}"),
                environment: "prod".into(),
                dns_zone: Some(DnsZoneRef { id: None, name: Some(zones[i % ZONES].0.clone()) }),
                ..CertSpec::default()
            };
            let api = api.clone();
            async move { api.create(&PostParams::default(), &Cert::new(&format!("cert-{i}"), spec)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
}

/// DistributionTenant `<namespace>-tenant-<i>` with one domain in zone `i mod 12`, its CNAME managed there.
async fn create_tenants(api: &Api<DistributionTenant>, aws: &Setup, count: usize) {
    futures::stream::iter(0..count)
        .map(|i| {
            let (zone, zone_id) = &aws.zones[i % ZONES];
            let dns = DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: zone_id.clone(), assume_role_arn: None, ttl: 300 };
            let spec = blockwork_tenant::DistributionTenantSpec {
                distribution_id: aws.distribution_id.clone(),
                domains: vec![DomainName { domain: format!("t{i}.{zone}") }],
                dns: Some(dns),
                ..Default::default()
            };
            let (api, name) = (api.clone(), format!("{}-tenant-{i}", aws.namespace));
            async move { api.create(&PostParams::default(), &DistributionTenant::new(&name, spec)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
}

/// Polls until `certs` Certs and `tenants` DistributionTenants are Ready.
async fn wait_ready(cert_api: &Api<Cert>, tenant_api: &Api<DistributionTenant>, certs: usize, tenants: usize, operator: &Operator) {
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let ready_certs = cert_api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready))
            .count();
        let ready_tenants = tenant_api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|t| t.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")))
            .count();
        if ready_certs >= certs && ready_tenants >= tenants {
            return;
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>4.0} s: {ready_certs}/{certs} Certs, {ready_tenants}/{tenants} tenants Ready", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "only {ready_certs} of {certs} Certs and {ready_tenants} of {tenants} tenants are Ready after {DEADLINE:?}\n--- blockwork log ---\n{}",
            operator.logs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `blockwork run --controllers cert,tenant` on the test's namespace, with the operator's
/// defaults (AWS's quotas × 0.8, concurrency, intervals); killed on drop.
async fn start_operator(kubeconfig: &Path, namespace: &str, moto: &str, ministack: &str, zones: &[(String, String)]) -> Operator {
    let zones = zones.iter().map(|(name, id)| format!("{name}:{id}")).collect::<Vec<_>>().join(",");
    let mut operator = Operator::new(Path::new(BIN), kubeconfig)
        .unwrap()
        .args(["--controllers", "cert,tenant", "--namespaces", namespace, "--log-level", "warn"])
        .args(["--aws-endpoint-url", moto, "--aws-region", "us-east-1", "--dns-zones", &zones])
        // The tenant's CloudFront and ACM are MiniStack's (moto has no multi-tenant CloudFront);
        // its Route 53 calls go to moto, through the same proxy as the Certs'.
        .args(["--tenant-aws-endpoint-url", ministack, "--tenant-route53-endpoint-url", moto])
        .start()
        .unwrap();
    operator.wait_ready(Duration::from_secs(90)).await.unwrap();
    operator
}
