//! DistributionTenant benchmark: 200 DistributionTenants, each with its CNAME managed in one
//! Route 53 hosted zone, created at once against MiniStack (CloudFront, ACM) and moto (Route 53),
//! each behind a fault proxy that throttles as AWS does (`Quotas::aws()`: AWS's buckets, and
//! for CloudFront, which publishes none, the layer's assumption). The controller runs with the
//! operator's defaults: the process's AWS layer at AWS's quotas × 0.8, seed 001's intervals,
//! concurrency 3.
//!
//!     cargo bench -p blockwork-tenant --bench two_hundred
//!
//! Prints the time until all are Ready, the AWS calls per operation and per tenant, and the
//! throttling answers (the proxies', i.e. AWS's view, and the operator's own metric).
//! `BENCH_TENANTS` changes the count. Not run by `cargo test` (it exits at once without
//! `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::time::{Duration, Instant};

use blockwork_aws::quota::Quotas;
use blockwork_identity::Settings;
use blockwork_runtime::Namespaces;
use blockwork_tenant::api::{DnsConfig, DnsProvider, DomainName};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::aws::{hosted_zone, request_certificate, sdk_config, tenant_only_distribution};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, PostParams};
use support::fixtures::{condition, default_connection_group};
use support::{CONCURRENCY, Controller, merged};

fn main() {
    support::main("two_hundred", bench());
}

async fn ready_count(api: &Api<DistributionTenant>) -> usize {
    let tenants = api.list(&ListParams::default()).await.unwrap();
    tenants.items.iter().filter(|t| condition(t, "Ready").is_some_and(|c| c.0 == "True")).count()
}

async fn bench() {
    let tenants = support::env_or("BENCH_TENANTS", 200);
    let plane = support::control_plane().await;
    let namespace = plane.namespace("bench-tenants").await.unwrap();
    let ministack = ministack().await.unwrap().endpoint();
    let moto = moto().await.unwrap().endpoint();

    // The distribution, its certificate and the account's default connection group, straight.
    let cloudfront = aws_sdk_cloudfront::Client::new(&sdk_config(&ministack).await);
    let acm = aws_sdk_acm::Client::new(&sdk_config(&ministack).await);
    let domain = format!("{namespace}.example.com");
    let certificate = request_certificate(&acm, &[format!("*.{domain}")]).await;
    let distribution = tenant_only_distribution(&cloudfront, &format!("{namespace}-bench"), Some(&certificate), &[]).await;
    default_connection_group(&cloudfront, &distribution, &namespace).await;
    let route53 = aws_sdk_route53::Client::new(&sdk_config(&moto).await);
    let zone_id = hosted_zone(&route53, &domain).await;

    // From here on the proxies throttle as AWS would.
    let proxy = FaultProxy::start(&ministack).await.unwrap();
    let dns_proxy = FaultProxy::start(&moto).await.unwrap();
    proxy.enforce_quotas(Quotas::aws());
    dns_proxy.enforce_quotas(Quotas::aws());

    // The controller, in this process, with the operator's defaults.
    let controller = Controller::start(plane, &proxy, &dns_proxy, Settings::default(), Namespaces::Only(vec![namespace.clone()])).await;
    let api: Api<DistributionTenant> = Api::namespaced(plane.client(), &namespace);

    let started = Instant::now();
    futures::stream::iter(0..tenants)
        .map(|i| {
            let api = api.clone();
            let dns = DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: zone_id.clone(), assume_role_arn: None, ttl: 300 };
            let spec = DistributionTenantSpec {
                distribution_id: distribution.clone(),
                domains: vec![DomainName { domain: format!("t{i}.{domain}") }],
                dns: Some(dns),
                ..DistributionTenantSpec::default()
            };
            async move { api.create(&PostParams::default(), &DistributionTenant::new(&format!("tenant-{i}"), spec)).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
    let created_in = started.elapsed();
    eprintln!("created {tenants} DistributionTenants in {created_in:.1?}");
    let mut last_report = Instant::now();
    let all_ready = loop {
        let ready = ready_count(&api).await;
        if ready == tenants {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: {ready} Ready", started.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "only {ready} of {tenants} tenants are Ready after an hour");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let calls = merged(&[&proxy, &dns_proxy], FaultProxy::all_calls);
    let throttled = merged(&[&proxy, &dns_proxy], FaultProxy::all_throttled);
    controller.stop();
    let operator_throttled = controller.throttled(calls.keys());

    println!();
    println!(
        "| {tenants} DistributionTenants created at once (CNAMEs in one hosted zone, concurrency {CONCURRENCY}, default quotas; the proxies throttle with AWS's buckets) | |"
    );
    println!("|---|---|");
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {} |", support::load_average());
    println!("| objects created (API server) | {:.1} s |", created_in.as_secs_f64());
    println!("| **time until all Ready** | **{:.0} s** |", all_ready.as_secs_f64());
    for (operation, count) in &calls {
        println!("| AWS calls: {operation} | {count} ({:.2} per tenant) |", *count as f64 / tenants as f64);
    }
    println!(
        "| AWS calls in all | {} ({:.2} per tenant) |",
        calls.values().sum::<usize>(),
        calls.values().sum::<usize>() as f64 / tenants as f64
    );
    println!("| throttling answers from the proxies (AWS's buckets) | {} |", throttled.values().sum::<usize>());
    println!("| throttling events (operator's `blockwork_aws_throttling_events_total`) | {operator_throttled} |");
}
