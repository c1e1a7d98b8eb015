//! DistributionTenants of two teams in two AWS accounts (ADR 0014): each namespace's tenant, its
//! certificate check and its CNAMEs in its own account, through its AwsIdentity's role — against
//! MiniStack (CloudFront, ACM) and a moto whose AssumeRole switches accounts (STS, Route 53),
//! through fault proxies that share what they learn of accounts.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use crate::support::{condition, default_connection_group, quick_timing};
use blockwork_aws::quota::Service;
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Endpoint, Seed};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant, Identities, Settings};
use blockwork_runtime::{Context, ControllerConfig, RuntimeMetrics};
use blockwork_tenant::api::{DnsConfig, DnsProvider, DomainName};
use blockwork_tenant::cloudfront::Sdk;
use blockwork_tenant::dns::Route53;
use blockwork_tenant::{CONTROLLER, DistributionTenant, DistributionTenantSpec, GROUP, TenantManager, TenantMetrics};
use blockwork_testenv::accounts::AccountBook;
use blockwork_testenv::aws::{
    as_role, cnames, fresh_account, hosted_zone, in_ministack_account, layer_config, request_certificate, sdk_config,
    tenant_only_distribution,
};
use blockwork_testenv::emulators::{accounts_moto, ministack};
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::harness::{ControllerTask, TestNamespace};
use kube::Api;
use kube::api::PostParams;
use prometheus_client::registry::Registry;

/// A team: its namespace, its account (role, hosted zone, multi-tenant distribution there).
struct Team {
    ns: TestNamespace<DistributionTenant>,
    account: String,
    role: String,
    zone: String,
    distribution: String,
    route53: aws_sdk_route53::Client,
    cloudfront: aws_sdk_cloudfront::Client,
}

impl Team {
    async fn new(prefix: &str, moto: &str, ministack: &str) -> Self {
        let ns = TestNamespace::new(prefix).await;
        let account = fresh_account();
        let role = format!("arn:aws:iam::{account}:role/blockwork-{prefix}");
        let route53 = aws_sdk_route53::Client::new(&as_role(moto, &role).await);
        let zone = hosted_zone(&route53, &format!("{}.example.com", ns.namespace)).await;
        let mine = in_ministack_account(ministack, &account).await;
        let (cloudfront, acm) = (aws_sdk_cloudfront::Client::new(&mine), aws_sdk_acm::Client::new(&mine));
        let wildcard = request_certificate(&acm, &[format!("*.{}.example.com", ns.namespace)]).await;
        let distribution = tenant_only_distribution(&cloudfront, &format!("{}-main", ns.namespace), Some(&wildcard), &[]).await;
        default_connection_group(&cloudfront, &distribution, &ns.namespace).await;
        Self { ns, account, role, zone, distribution, route53, cloudfront }
    }

    fn identity(&self) -> AwsIdentity {
        let zone =
            HostedZoneGrant { id: self.zone.clone(), name: format!("{}.example.com", self.ns.namespace), ..HostedZoneGrant::default() };
        AwsIdentity::new(
            &format!("id-{}", self.ns.namespace),
            AwsIdentitySpec {
                namespaces: vec![self.ns.namespace.clone()],
                role_arn: Some(self.role.clone()),
                external_id: Some(format!("ext-{}", self.ns.namespace)),
                hosted_zones: vec![zone],
            },
        )
    }

    fn spec(&self, label: &str) -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: self.distribution.clone(),
            domains: vec![DomainName { domain: format!("{label}.{}.example.com", self.ns.namespace) }],
            dns: Some(DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: self.zone.clone(), assume_role_arn: None, ttl: 300 }),
            ..DistributionTenantSpec::default()
        }
    }

    async fn tenant_names(&self) -> Vec<String> {
        let listed = self.cloudfront.list_distribution_tenants().send().await.unwrap();
        listed.distribution_tenant_list().iter().map(|t| t.name().to_owned()).collect()
    }
}

/// A tenant controller (with its mapping follower, as `blockwork run` has it) for the teams'
/// namespaces, through fault proxies to moto and MiniStack that share what they learn of accounts.
struct World {
    book: AccountBook,
    aws_metrics: Arc<AwsMetrics>,
    /// Kept for the test's length: dropped, they stop.
    _proxies: (FaultProxy, FaultProxy),
    _controller: ControllerTask,
}

impl World {
    async fn start(teams: &[&Team], moto: &str, ministack: &str) -> Self {
        let plane = teams[0].ns.plane;
        plane.install_crds(&[blockwork_tenant::crd(), blockwork_identity::crd()]).await.unwrap();
        let book = AccountBook::default();
        let sts = FaultProxy::start_with_accounts(moto, book.clone()).await.unwrap();
        let cloudfront = FaultProxy::start_with_accounts(ministack, book.clone()).await.unwrap();
        cloudfront.present_accounts();
        for team in teams {
            book.require_external_id(&team.role, &format!("ext-{}", team.ns.namespace));
        }
        let aws_metrics = Arc::new(AwsMetrics::register(&mut Registry::default(), &[Seed::Tenant]));
        let endpoint = |service, url: String| Endpoint { controller: None, service, url };
        let config = AwsConfig {
            endpoints: vec![
                endpoint(Service::CloudFront, cloudfront.endpoint()),
                endpoint(Service::Acm, cloudfront.endpoint()),
                endpoint(Service::Route53, sts.endpoint()),
                endpoint(Service::Sts, sts.endpoint()),
            ],
            ..layer_config()
        };
        let aws = Aws::with_sdk_config(config, sdk_config(&sts.endpoint()).await, Arc::clone(&aws_metrics));
        let identities = Identities::new(plane.client(), Settings { cluster: "test".to_owned(), ..Settings::default() });
        let metrics = TenantMetrics::register(&mut Registry::default());
        let manager =
            TenantManager::new(Sdk::new(&aws), Some(Route53::new(aws.records())), Arc::clone(&identities), metrics, &aws, plane.client());
        let context = Context::new(
            plane.client(),
            manager,
            ControllerConfig::new(CONTROLLER, GROUP).with_timing(quick_timing()),
            RuntimeMetrics::register(&mut Registry::default()),
        );
        let mut controller = ControllerTask::default();
        let namespaces = blockwork_runtime::Namespaces::Only(teams.iter().map(|t| t.ns.namespace.clone()).collect());
        controller.start(async move {
            let mappings = blockwork_identity::wake::follow(Arc::clone(&context), identities, Vec::new(), |o| o.aws_identity.as_deref());
            let run = blockwork_runtime::run_in(&namespaces, |scope| {
                let api: Api<DistributionTenant> = blockwork_runtime::namespaces::api(&plane.client(), scope.as_deref());
                blockwork_runtime::run(api, Arc::clone(&context), 4, std::future::pending())
            });
            tokio::join!(mappings, run);
        });
        Self { book, aws_metrics, _proxies: (sts, cloudfront), _controller: controller }
    }
}

async fn map(client: &kube::Client, identity: &AwsIdentity) {
    Api::<AwsIdentity>::all(client.clone()).create(&PostParams::default(), identity).await.unwrap();
}

#[tokio::test]
async fn two_namespaces_put_their_tenants_and_records_in_their_own_accounts() {
    let (moto, ministack) = (accounts_moto().await.unwrap().endpoint(), ministack().await.unwrap().endpoint());
    let (a, b) = (Team::new("dt-acct-a", &moto, &ministack).await, Team::new("dt-acct-b", &moto, &ministack).await);
    let world = World::start(&[&a, &b], &moto, &ministack).await;
    for team in [&a, &b] {
        map(&a.ns.plane.client(), &team.identity()).await;
    }
    for team in [&a, &b] {
        team.ns.create(&DistributionTenant::new("shop", team.spec("shop"))).await;
    }
    for (team, other) in [(&a, &b), (&b, &a)] {
        let ready = team.ns.wait_for("shop", "Ready", |t| condition(t, "Ready").is_some_and(|c| c.0 == "True")).await;
        let observation = &ready.status.as_ref().unwrap().observation;
        assert_eq!(observation.aws_identity, Some(format!("id-{}", team.ns.namespace)), "the status names the mapping");
        let arn = observation.arn.clone().unwrap_or_default();
        assert!(arn.contains(&format!(":{}:", team.account)), "the tenant is in the team's account: {arn}");
        assert!(team.tenant_names().await.contains(&"shop".to_owned()), "listed in the team's account");
        let records = cnames(&team.route53, &team.zone).await;
        assert_eq!(records.len(), 1, "its CNAME is in the team's zone: {records:?}");
        assert!(cnames(&other.route53, &other.zone).await.iter().all(|r| !r.0.starts_with(&format!("shop.{}", team.ns.namespace))));
    }
    let assumed = world.book.assumed();
    for team in [&a, &b] {
        let external = format!("ext-{}", team.ns.namespace);
        let mine: Vec<_> = assumed.iter().filter(|r| r.role_arn == team.role).collect();
        assert!(!mine.is_empty() && mine.iter().all(|r| r.external_id.as_deref() == Some(external.as_str())), "{mine:?}");
        assert!(mine.iter().all(|r| r.session_name == format!("blockwork.test.{}", team.ns.namespace)), "{mine:?}");
    }
    let in_default = aws_sdk_cloudfront::Client::new(&sdk_config(&ministack).await).list_distribution_tenants().send().await.unwrap();
    assert!(
        in_default.distribution_tenant_list().iter().all(|t| t.distribution_id() != a.distribution),
        "nothing landed in the default account"
    );
    assert!(world.aws_metrics.calls_as(&format!("id-{}", a.ns.namespace), Service::CloudFront, "CreateDistributionTenant") >= 1);
}

/// The platform team points a namespace's mapping at another account under a Ready tenant (ADR
/// 0014, "Changing a mapping"): the tenant is held, no tenant is made in the new account and the
/// old one is untouched.
#[tokio::test]
async fn a_mapping_moved_under_a_live_tenant_holds_it_with_no_duplicate_in_the_new_account() {
    let (moto, ministack) = (accounts_moto().await.unwrap().endpoint(), ministack().await.unwrap().endpoint());
    let (team, new_home) = (Team::new("dt-moved", &moto, &ministack).await, Team::new("dt-moved-to", &moto, &ministack).await);
    let _world = World::start(&[&team, &new_home], &moto, &ministack).await;
    let client = team.ns.plane.client();
    let mut before = team.identity();
    // The zone stays reachable through the team's own role whichever account the tenant acts in.
    before.spec.hosted_zones[0].role_arn = Some(team.role.clone());
    before.spec.hosted_zones[0].external_id = Some(format!("ext-{}", team.ns.namespace));
    map(&client, &before).await;
    team.ns.create(&DistributionTenant::new("shop", team.spec("shop"))).await;
    let ready = team.ns.wait_for("shop", "Ready", |t| condition(t, "Ready").is_some_and(|c| c.0 == "True")).await;
    let arn = ready.status.as_ref().unwrap().observation.arn.clone().unwrap();
    let api = Api::<AwsIdentity>::all(client.clone());
    let mut moved = api.get(&before.metadata.name.clone().unwrap()).await.unwrap();
    moved.spec.role_arn = Some(new_home.role.clone());
    moved.spec.external_id = Some(format!("ext-{}", new_home.ns.namespace));
    api.replace(&moved.metadata.name.clone().unwrap(), &PostParams::default(), &moved).await.unwrap();
    let held = team.ns.wait_for("shop", "held", |t| condition(t, "Synced").is_some_and(|c| c.1 == "AwsIdentityChanged")).await;
    let status = held.status.as_ref().unwrap();
    let (_, _, message) = condition(&held, "Synced").unwrap();
    assert!(message.contains("in another AWS account than its tenant"), "{message}");
    assert!(!message.contains(&team.account) && !message.contains(&new_home.account), "no account id: {message}");
    assert_eq!(status.observation.arn.as_deref(), Some(arn.as_str()), "it still names its tenant");
    assert!(!new_home.tenant_names().await.contains(&"shop".to_owned()), "no duplicate in the new account");
    assert!(team.tenant_names().await.contains(&"shop".to_owned()), "nothing touched in the old one");
}
