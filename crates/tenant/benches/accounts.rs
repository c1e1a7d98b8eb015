//! DistributionTenant benchmark across AWS accounts (ADR 0014): the 200-tenant benchmark
//! (`two_hundred.rs`) with its tenants spread over 4 namespaces, each mapped by an AwsIdentity to
//! a role in an account of its own, holding its multi-tenant distribution (MiniStack) and its
//! hosted zone (moto, whose AssumeRole switches accounts). The fault proxies in front of both
//! share what they learn of accounts, check each role's ExternalId and throttle as AWS does
//! (`Quotas::aws()`), one set of buckets per account. The tenant controller runs in this process
//! with the operator's defaults (AWS's quotas × 0.8, seed 001's intervals, concurrency 3 per
//! AwsIdentity, unmapped namespaces refused) and its mapping follower, as `blockwork run` has it.
//!
//!     cargo bench -p blockwork-tenant --bench accounts
//!
//! Prints the time until all are Ready and each account's, AWS calls per operation and per
//! tenant, and the throttling answers (the proxies', i.e. AWS's view, and the operator's own
//! metric). `BENCH_ACCOUNTS` (default 4) and `BENCH_TENANTS` (default 200, in all) change the
//! sizes. Not run by `cargo test` (it exits at once without `--bench`).

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use blockwork_aws::quota::Quotas;
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant, Settings, Unmapped};
use blockwork_runtime::Namespaces;
use blockwork_tenant::api::{DnsConfig, DnsProvider, DomainName};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::accounts::AccountBook;
use blockwork_testenv::aws::{as_role, fresh_account, hosted_zone, in_ministack_account, request_certificate, tenant_only_distribution};
use blockwork_testenv::control_plane::ControlPlane;
use blockwork_testenv::emulators::{accounts_moto, ministack};
use blockwork_testenv::fault_proxy::FaultProxy;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, PostParams};
use support::fixtures::{condition, default_connection_group};
use support::{CONCURRENCY, Controller, env_or, merged};

fn main() {
    support::main("accounts", bench());
}

/// A team: its namespace, mapped to a role in an account of its own holding its distribution
/// and hosted zone.
struct Team {
    namespace: String,
    domain: String,
    zone: String,
    distribution: String,
    identity: AwsIdentity,
}

impl Team {
    async fn new(plane: &ControlPlane, index: usize, moto: &str, ministack: &str, book: &AccountBook) -> Self {
        let namespace = plane.namespace(&format!("bench-dt-acct-{index}")).await.unwrap();
        let account = fresh_account();
        let role = format!("arn:aws:iam::{account}:role/blockwork-bench");
        let external_id = format!("ext-{namespace}");
        book.require_external_id(&role, &external_id);
        let domain = format!("{namespace}.example.com");
        let zone = hosted_zone(&aws_sdk_route53::Client::new(&as_role(moto, &role).await), &domain).await;
        let mine = in_ministack_account(ministack, &account).await;
        let (cloudfront, acm) = (aws_sdk_cloudfront::Client::new(&mine), aws_sdk_acm::Client::new(&mine));
        let wildcard = request_certificate(&acm, &[format!("*.{domain}")]).await;
        let distribution = tenant_only_distribution(&cloudfront, &format!("{namespace}-bench"), Some(&wildcard), &[]).await;
        default_connection_group(&cloudfront, &distribution, &namespace).await;
        let identity = AwsIdentity::new(
            &format!("bench-{namespace}"),
            AwsIdentitySpec {
                namespaces: vec![namespace.clone()],
                role_arn: Some(role),
                external_id: Some(external_id),
                hosted_zones: vec![HostedZoneGrant { id: zone.clone(), name: domain.clone(), ..HostedZoneGrant::default() }],
            },
        );
        Self { namespace, domain, zone, distribution, identity }
    }

    fn tenant(&self, i: usize) -> DistributionTenant {
        let dns = DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: self.zone.clone(), assume_role_arn: None, ttl: 300 };
        let spec = DistributionTenantSpec {
            distribution_id: self.distribution.clone(),
            domains: vec![DomainName { domain: format!("t{i}.{}", self.domain) }],
            dns: Some(dns),
            ..DistributionTenantSpec::default()
        };
        DistributionTenant::new(&format!("tenant-{i}"), spec)
    }
}

/// Ready tenants by namespace.
async fn ready_by_namespace(api: &Api<DistributionTenant>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for tenant in api.list(&ListParams::default()).await.unwrap().items {
        if condition(&tenant, "Ready").is_some_and(|c| c.0 == "True") {
            *counts.entry(tenant.metadata.namespace.clone().unwrap_or_default()).or_default() += 1;
        }
    }
    counts
}

async fn bench() {
    let accounts = env_or("BENCH_ACCOUNTS", 4);
    let tenants = env_or("BENCH_TENANTS", 200);
    let plane = support::control_plane().await;
    let (moto, ministack) = (accounts_moto().await.unwrap().endpoint(), ministack().await.unwrap().endpoint());
    let book = AccountBook::default();
    let mut teams = Vec::new();
    for index in 0..accounts {
        teams.push(Team::new(plane, index, &moto, &ministack, &book).await);
    }
    let identities_api: Api<AwsIdentity> = Api::all(plane.client());
    for team in &teams {
        identities_api.create(&PostParams::default(), &team.identity).await.unwrap();
    }

    // From here on the proxies throttle as AWS would, each account with its own buckets.
    let dns_proxy = FaultProxy::start_with_accounts(&moto, book.clone()).await.unwrap();
    let proxy = FaultProxy::start_with_accounts(&ministack, book.clone()).await.unwrap();
    proxy.present_accounts();
    proxy.enforce_quotas(Quotas::aws());
    dns_proxy.enforce_quotas(Quotas::aws());

    // The controller, in this process, with the operator's defaults and its mapping follower.
    let namespaces = Namespaces::Only(teams.iter().map(|t| t.namespace.clone()).collect());
    let settings = Settings { cluster: "bench".to_owned(), unmapped: Unmapped::Refuse };
    let controller = Controller::start(plane, &proxy, &dns_proxy, settings, namespaces).await;

    let started = Instant::now();
    futures::stream::iter(0..tenants)
        .map(|i| {
            let team = &teams[i % accounts];
            let api: Api<DistributionTenant> = Api::namespaced(plane.client(), &team.namespace);
            let tenant = team.tenant(i);
            async move { api.create(&PostParams::default(), &tenant).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .unwrap();
    let created_in = started.elapsed();
    eprintln!("created {tenants} DistributionTenants in {accounts} namespaces in {created_in:.1?}");
    let all: Api<DistributionTenant> = Api::all(plane.client());
    let mut account_done: BTreeMap<String, Duration> = BTreeMap::new();
    let mut last_report = Instant::now();
    let all_ready = loop {
        let counts = ready_by_namespace(&all).await;
        for (index, team) in teams.iter().enumerate() {
            let expected = (tenants + accounts - 1 - index) / accounts;
            if counts.get(&team.namespace).copied().unwrap_or(0) >= expected {
                account_done.entry(team.namespace.clone()).or_insert_with(|| started.elapsed());
            }
        }
        if account_done.len() == accounts {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{:>5.0} s: Ready by account {:?}", started.elapsed().as_secs_f64(), counts.values().collect::<Vec<_>>());
            last_report = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3600), "not all {tenants} tenants are Ready after an hour: {counts:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let calls = merged(&[&proxy, &dns_proxy], FaultProxy::all_calls);
    let throttled = merged(&[&proxy, &dns_proxy], FaultProxy::all_throttled);
    controller.stop();
    let operator_throttled = controller.throttled(calls.keys());
    let (fastest, slowest) =
        (account_done.values().min().copied().unwrap_or_default(), account_done.values().max().copied().unwrap_or_default());

    println!();
    println!(
        "| {tenants} DistributionTenants created at once over {accounts} accounts (one namespace, AwsIdentity, distribution and hosted zone per account; concurrency {CONCURRENCY} per AwsIdentity, default quotas; the proxies throttle with AWS's buckets per account) | |"
    );
    println!("|---|---|");
    println!("| load average at the end (1, 5, 15 min; the machine is shared) | {} |", support::load_average());
    println!("| objects created (API server) | {:.1} s |", created_in.as_secs_f64());
    println!("| **time until all Ready** | **{:.0} s** |", all_ready.as_secs_f64());
    println!("| an account's tenants all Ready: first / last account | {:.0} s / {:.0} s |", fastest.as_secs_f64(), slowest.as_secs_f64());
    for (operation, count) in &calls {
        println!("| AWS calls: {operation} | {count} ({:.2} per tenant) |", *count as f64 / tenants as f64);
    }
    println!(
        "| AWS calls in all | {} ({:.2} per tenant) |",
        calls.values().sum::<usize>(),
        calls.values().sum::<usize>() as f64 / tenants as f64
    );
    println!("| throttling answers from the proxies (AWS's buckets, per account) | {} |", throttled.values().sum::<usize>());
    println!("| throttling events (operator's `blockwork_aws_throttling_events_total`) | {operator_throttled} |");
}
