//! Certs of many teams in many AWS accounts (ADR 0014), against a real kube-apiserver and a moto
//! whose AssumeRole switches accounts as AWS does, through the fault proxy (which tells the
//! accounts apart, and checks the ExternalId a role's trust policy asks for). Each test has
//! namespaces and accounts of its own; the AwsIdentity mappings are real objects the controller
//! watches.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::{exporting, fast_timing, spec, status};
use blockwork_aws::principal::account_of_arn;
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Seed, Service};
use blockwork_cert::zones::ZoneRegistry;
use blockwork_cert::{Cert, CertConfig, CertMetrics, CertSpec, CertState};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant, Identities, Settings, Unmapped};
use blockwork_runtime::RuntimeMetrics;
use blockwork_testenv::aws::{as_role, cnames, fresh_account, hosted_zone, layer_config, sdk_config};
use blockwork_testenv::emulators::{ACCOUNT_ID, accounts_moto};
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};
use blockwork_testenv::harness::{ControllerTask, TestNamespace};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt as _};
use prometheus_client::registry::Registry;

/// The cluster name in session names.
const CLUSTER: &str = "test-cluster";

/// A team: its namespace, account, role, and a hosted zone in its account.
struct Team {
    ns: TestNamespace<Cert>,
    account: String,
    role: String,
    zone: (String, String),
    /// Route 53 and ACM of the team's account, straight to moto.
    route53: aws_sdk_route53::Client,
    acm: aws_sdk_acm::Client,
}

impl Team {
    async fn new(prefix: &str, endpoint: &str) -> Self {
        let ns = TestNamespace::new(prefix).await;
        let account = fresh_account();
        let role = format!("arn:aws:iam::{account}:role/blockwork-{prefix}");
        let config = as_role(endpoint, &role).await;
        let route53 = aws_sdk_route53::Client::new(&config);
        let name = format!("{}.test", ns.namespace);
        let id = hosted_zone(&route53, &name).await;
        Self { account, role, zone: (id, name), route53, acm: aws_sdk_acm::Client::new(&config), ns }
    }

    fn domain(&self, label: &str) -> String {
        format!("{label}.{}", self.zone.1)
    }

    fn grant(&self) -> HostedZoneGrant {
        HostedZoneGrant { id: self.zone.0.clone(), name: self.zone.1.clone(), ..HostedZoneGrant::default() }
    }

    /// The name of the team's mapping.
    fn mapping(&self) -> String {
        format!("id-{}", self.ns.namespace)
    }

    /// The mapping of this team's namespace to its role (ExternalId `ext-<namespace>`).
    fn identity(&self, zones: Vec<HostedZoneGrant>) -> AwsIdentity {
        AwsIdentity::new(
            &self.mapping(),
            AwsIdentitySpec {
                namespaces: vec![self.ns.namespace.clone()],
                role_arn: Some(self.role.clone()),
                external_id: Some(format!("ext-{}", self.ns.namespace)),
                hosted_zones: zones,
            },
        )
    }

    async fn certificates(&self) -> Vec<String> {
        let listed = self.acm.list_certificates().send().await.unwrap();
        listed.certificate_summary_list().iter().filter_map(|s| s.certificate_arn().map(str::to_owned)).collect()
    }

    async fn create(&self, name: &str, domain: &str) -> Cert {
        self.ns.create(&Cert::new(name, CertSpec { domain_name: Some(domain.to_owned()), ..spec(name, "prod") })).await
    }

    async fn wait_ready(&self, name: &str) -> Cert {
        self.ns
            .wait_for(name, "Ready with its records written", |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.observation.state == Some(CertState::Ready)
                        && !s.observation.validation_records.is_empty()
                        && s.observation.validation_records.iter().all(|r| !r.pending)
                })
            })
            .await
    }

    async fn wait_refused(&self, name: &str, reason: &str) -> Cert {
        self.ns
            .wait_for(name, &format!("Synced=False/{reason}"), |c| {
                c.status.as_ref().and_then(|s| s.condition("Synced")).is_some_and(|c| c.status == "False" && c.reason == reason)
            })
            .await
    }
}

/// A Cert controller watching the teams' namespaces, through a proxy to the accounts moto.
struct World {
    controller: ControllerTask,
    proxy: FaultProxy,
    identities: Arc<Identities>,
    aws_metrics: Arc<AwsMetrics>,
    client: kube::Client,
}

impl World {
    async fn start(teams: &[&Team], unmapped: Unmapped) -> Self {
        let plane = teams[0].ns.plane;
        plane.install_crds(&[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
        let endpoint = accounts_moto().await.unwrap().endpoint();
        let proxy = FaultProxy::start(&endpoint).await.unwrap();
        for team in teams {
            proxy.accounts().require_external_id(&team.role, &format!("ext-{}", team.ns.namespace));
        }
        let client = plane.client();
        let identities = Identities::new(client.clone(), Settings { cluster: CLUSTER.to_owned(), unmapped });
        let mut world = Self {
            controller: ControllerTask::default(),
            proxy,
            identities,
            aws_metrics: Arc::new(AwsMetrics::register(&mut Registry::default(), &[Seed::Cert])),
            client,
        };
        world.start_controller(teams).await;
        world
    }

    async fn start_controller(&mut self, teams: &[&Team]) {
        let config = CertConfig {
            zones: ZoneRegistry::default(),
            acm: blockwork_aws::acm::AcmConfig {
                sweep: Duration::from_secs(2),
                busy_sweep: Duration::from_millis(200),
                ..blockwork_aws::acm::AcmConfig::default()
            },
            validation_timeout: Duration::from_secs(72 * 3600),
            expiry_threshold_days: 90,
            max_tracked_certificates: 1000,
            timing: fast_timing(),
            // The teams' Certs may export (issue 30): exported as their namespace's identity.
            export_secrets: true,
            certificate_authorities: Vec::new(),
            ownership_interval: blockwork_cert::external::OWNERSHIP_INTERVAL,
        };
        let aws_config = AwsConfig { endpoint_url: Some(self.proxy.endpoint()), ..layer_config() };
        let aws = Aws::with_sdk_config(aws_config, sdk_config(&self.proxy.endpoint()).await, Arc::clone(&self.aws_metrics));
        let namespaces = blockwork_runtime::Namespaces::Only(teams.iter().map(|t| t.ns.namespace.clone()).collect());
        let metrics = CertMetrics::register(&mut Registry::default());
        let runtime = RuntimeMetrics::register(&mut Registry::default());
        let (client, identities) = (self.client.clone(), Arc::clone(&self.identities));
        self.controller.start(blockwork_cert::run(
            client,
            config,
            aws,
            identities,
            runtime,
            metrics,
            namespaces,
            4,
            std::future::pending(),
        ));
    }

    async fn map(&self, identity: &AwsIdentity) {
        Api::<AwsIdentity>::all(self.client.clone()).create(&PostParams::default(), identity).await.unwrap();
    }

    /// Replaces a mapping's spec, as the platform team editing it.
    async fn remap(&self, identity: &AwsIdentity) {
        let api = Api::<AwsIdentity>::all(self.client.clone());
        let mut current = api.get(&identity.name_any()).await.unwrap();
        current.spec = identity.spec.clone();
        api.replace(&identity.name_any(), &PostParams::default(), &current).await.unwrap();
    }

    async fn unmap(&self, name: &str) {
        Api::<AwsIdentity>::all(self.client.clone()).delete(name, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test]
async fn two_namespaces_act_in_their_own_accounts_through_their_roles() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (a, b) = (Team::new("acct-a", &endpoint).await, Team::new("acct-b", &endpoint).await);
    let world = World::start(&[&a, &b], Unmapped::Refuse).await;
    world.map(&a.identity(vec![a.grant()])).await;
    world.map(&b.identity(vec![b.grant()])).await;
    a.create("web", &a.domain("web")).await;
    b.create("web", &b.domain("web")).await;
    for (team, other) in [(&a, &b), (&b, &a)] {
        let cert = team.wait_ready("web").await;
        let observation = &status(&cert).observation;
        assert_eq!(observation.aws_identity, Some(team.mapping()), "the status names the mapping");
        let arn = observation.certificate_arn.clone().unwrap();
        assert_eq!(account_of_arn(&arn), Some(team.account.as_str()), "the certificate is in the team's account");
        assert!(team.certificates().await.contains(&arn));
        assert!(!other.certificates().await.contains(&arn), "not in the other team's account");
        let records = cnames(&team.route53, &team.zone.0).await;
        assert_eq!(records.len(), 1, "the validation record is in the team's zone: {records:?}");
    }
    let own = aws_sdk_acm::Client::new(&sdk_config(&endpoint).await).list_certificates().send().await.unwrap();
    let in_own = own.certificate_summary_list().iter().filter(|s| s.domain_name().is_some_and(|d| d.contains(".acct-"))).count();
    assert_eq!(in_own, 0, "nothing in the operator's own account ({ACCOUNT_ID})");
    let assumed = world.proxy.accounts().assumed();
    for team in [&a, &b] {
        let sessions: Vec<&str> = assumed.iter().filter(|r| r.role_arn == team.role).map(|r| r.session_name.as_str()).collect();
        assert!(!sessions.is_empty());
        let (by_namespace, shared) =
            (format!("blockwork.{CLUSTER}.{}", team.ns.namespace), format!("blockwork.{CLUSTER}.{}", team.mapping()));
        assert!(sessions.contains(&by_namespace.as_str()), "the namespace's calls name cluster and namespace: {sessions:?}");
        assert!(sessions.iter().all(|s| *s == by_namespace || *s == shared), "or, for the shared listing, the mapping: {sessions:?}");
        let external = format!("ext-{}", team.ns.namespace);
        assert!(assumed.iter().filter(|r| r.role_arn == team.role).all(|r| r.external_id.as_deref() == Some(external.as_str())));
    }
    assert_eq!(world.aws_metrics.calls_as(&a.mapping(), Service::Acm, "RequestCertificate"), 1, "metrics name the mapping");
}

#[tokio::test]
async fn an_exporting_cert_of_a_mapped_namespace_is_exported_through_its_role_never_as_the_operator() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let team = Team::new("acct-x", &endpoint).await;
    let world = World::start(&[&team], Unmapped::Refuse).await;
    world.map(&team.identity(vec![team.grant()])).await;
    let spec = CertSpec { domain_name: Some(team.domain("api")), ..spec("api", "prod") };
    team.ns.create(&Cert::new("api", exporting(spec, "api-tls"))).await;
    let cert = team
        .ns
        .wait_for("api", "exported", |c| c.status.as_ref().and_then(|s| s.condition("Exported")).is_some_and(|c| c.status == "True"))
        .await;
    let arn = status(&cert).observation.certificate_arn.clone().unwrap();
    assert_eq!(account_of_arn(&arn), Some(team.account.as_str()), "the certificate is in the team's account");
    let secret = team.ns.api_of::<k8s_openapi::api::core::v1::Secret>().get("api-tls").await.unwrap();
    assert!(secret.data.as_ref().is_some_and(|d| d.get("tls.key").is_some_and(|k| !k.0.is_empty())), "the Secret holds the key");
    assert!(
        world.aws_metrics.calls_as(&team.mapping(), Service::Acm, "ExportCertificate") >= 1,
        "exported as the namespace's mapping (its role)"
    );
    assert_eq!(
        world.aws_metrics.calls_as(blockwork_aws::principal::OPERATOR, Service::Acm, "ExportCertificate"),
        0,
        "never as the operator's own identity"
    );
}

#[tokio::test]
async fn a_certificate_in_one_account_gets_its_validation_records_in_the_zone_s_account() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (team, dns) = (Team::new("split-team", &endpoint).await, Team::new("split-dns", &endpoint).await);
    let world = World::start(&[&team, &dns], Unmapped::Refuse).await;
    let central = HostedZoneGrant {
        role_arn: Some(dns.role.clone()),
        external_id: Some(format!("ext-{}", dns.ns.namespace)),
        domains: vec![dns.domain("shop")],
        ..dns.grant()
    };
    world.map(&team.identity(vec![central])).await;
    team.create("shop", &dns.domain("shop")).await;
    let cert = team.wait_ready("shop").await;
    let arn = status(&cert).observation.certificate_arn.clone().unwrap();
    assert_eq!(account_of_arn(&arn), Some(team.account.as_str()), "the certificate is in the team's account");
    let records = cnames(&dns.route53, &dns.zone.0).await;
    assert_eq!(records.len(), 1, "its validation record is in the central zone: {records:?}");
    let assumed = world.proxy.accounts().assumed();
    let through_dns: Vec<_> = assumed.iter().filter(|r| r.role_arn == dns.role).collect();
    assert!(!through_dns.is_empty(), "the zone's role was assumed");
    let session = format!("blockwork.{CLUSTER}.{}", team.ns.namespace);
    assert!(through_dns.iter().all(|r| r.session_name == session), "for the team's namespace: {through_dns:?}");
}

#[tokio::test]
async fn a_domain_outside_the_namespace_s_grant_is_refused_before_any_aws_call() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (team, dns) = (Team::new("grant-team", &endpoint).await, Team::new("grant-dns", &endpoint).await);
    let world = World::start(&[&team], Unmapped::Refuse).await;
    let central = HostedZoneGrant { role_arn: Some(dns.role.clone()), domains: vec![dns.domain("shop")], ..dns.grant() };
    world.map(&team.identity(vec![team.grant(), central])).await;
    team.create("api", &dns.domain("api")).await;
    team.create("elsewhere", "www.example.org").await;
    let outside = team.wait_refused("api", "InvalidSpec").await;
    let message = &status(&outside).condition("Synced").unwrap().message;
    assert!(message.starts_with("spec.domainName: ") && message.contains("where this namespace is granted only"), "{message}");
    let nowhere = team.wait_refused("elsewhere", "InvalidSpec").await;
    let message = &status(&nowhere).condition("Synced").unwrap().message;
    assert!(message.contains("www.example.org is not in the zone"), "{message}");
    assert_eq!(world.proxy.all_calls().get("RequestCertificate"), None, "{:?}", world.proxy.all_calls());
    let session = format!("blockwork.{CLUSTER}.{}", team.ns.namespace);
    let assumed = world.proxy.accounts().assumed();
    assert!(assumed.iter().all(|r| r.session_name != session), "no call was made for the namespace's Certs: {assumed:?}");
}

#[tokio::test]
async fn a_namespace_listed_by_two_mappings_is_refused_without_an_aws_call_until_one_lets_it_go() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let team = Team::new("overlap", &endpoint).await;
    let world = World::start(&[&team], Unmapped::Refuse).await;
    world.map(&team.identity(vec![team.grant()])).await;
    let mut intruder = team.identity(vec![]);
    intruder.metadata.name = Some(format!("{}-intruder", team.mapping()));
    world.map(&intruder).await;
    team.create("web", &team.domain("web")).await;
    let refused = team.wait_refused("web", "AwsIdentityConflict").await;
    let message = &status(&refused).condition("Synced").unwrap().message;
    assert!(
        message.contains(&format!("{}-intruder", team.mapping())) && message.contains(&format!("{} and", team.mapping())),
        "names both mappings: {message}"
    );
    assert!(!message.contains(&team.account), "{message}");
    assert!(world.proxy.all_calls().is_empty(), "nothing was asked of AWS: {:?}", world.proxy.all_calls());
    world.unmap(&intruder.name_any()).await;
    team.wait_ready("web").await;
}

#[tokio::test]
async fn an_unmapped_namespace_is_refused_where_the_platform_team_allows_none() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let team = Team::new("unmapped", &endpoint).await;
    let world = World::start(&[&team], Unmapped::Refuse).await;
    team.create("web", &team.domain("web")).await;
    let refused = team.wait_refused("web", "NoAwsIdentity").await;
    assert!(status(&refused).condition("Synced").unwrap().message.contains("listed by no AwsIdentity"));
    assert!(world.proxy.all_calls().is_empty(), "{:?}", world.proxy.all_calls());
}

#[tokio::test]
async fn a_role_refusing_the_external_id_fails_only_its_namespace_with_a_message_naming_no_account() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (wrong, right) = (Team::new("ext-wrong", &endpoint).await, Team::new("ext-right", &endpoint).await);
    let world = World::start(&[&wrong, &right], Unmapped::Refuse).await;
    let mut mistaken = wrong.identity(vec![wrong.grant()]);
    mistaken.spec.external_id = Some("not-what-the-trust-policy-says".to_owned());
    world.map(&mistaken).await;
    world.map(&right.identity(vec![right.grant()])).await;
    wrong.create("web", &wrong.domain("web")).await;
    right.create("web", &right.domain("web")).await;
    right.wait_ready("web").await;
    let failed = wrong.wait_refused("web", "AssumeRoleFailed").await;
    // Which mapping's role, in the condition, the event and `blockwork explain` (issue 37).
    let named = format!("AwsIdentity {}", wrong.mapping());
    let message = &status(&failed).condition("Synced").unwrap().message;
    assert!(message.contains(&named) && message.contains("AccessDenied"), "{message}");
    assert!(!message.contains(&wrong.account), "{message}");
    let told = wrong.ns.wait_for_event("web", "Failed").await;
    assert!(told.iter().any(|event| event.note.contains(&named)), "{told:?}");
    let now = jiff::Timestamp::now();
    let keys = blockwork_inspect::read::default_keys();
    let report =
        blockwork_inspect::read::report(&world.client, &wrong.ns.namespace, blockwork_inspect::read::KindArg::Cert, "web", &keys, now)
            .await
            .unwrap();
    let explained = blockwork_inspect::render::explain(&blockwork_inspect::render::Explanation::of(report, now), now);
    assert!(explained.contains(&named) && !explained.contains(&wrong.account), "{explained}");
    assert!(wrong.certificates().await.is_empty());
}

/// AWS throttles one account (someone else spends its quota): that account's Certs back off,
/// the other account's converge, none of their calls held back or throttled.
#[tokio::test]
async fn one_account_throttled_while_the_other_converges_untouched() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (busy, quiet) = (Team::new("throttled", &endpoint).await, Team::new("quiet", &endpoint).await);
    let world = World::start(&[&busy, &quiet], Unmapped::Refuse).await;
    world.proxy.inject_for_account(&busy.account, Operation::Any, Fault::Throttling, usize::MAX);
    world.map(&busy.identity(vec![busy.grant()])).await;
    world.map(&quiet.identity(vec![quiet.grant()])).await;
    for i in 0..6 {
        busy.create(&format!("b{i}"), &busy.domain(&format!("b{i}"))).await;
        quiet.create(&format!("q{i}"), &quiet.domain(&format!("q{i}"))).await;
    }
    for i in 0..6 {
        quiet.wait_ready(&format!("q{i}")).await;
    }
    for i in 0..6 {
        let cert = busy.ns.get(&format!("b{i}")).await.unwrap();
        assert_ne!(cert.status.and_then(|s| s.observation.state), Some(CertState::Ready), "b{i}");
    }
    for operation in ["ListCertificates", "RequestCertificate", "DescribeCertificate"] {
        assert_eq!(world.aws_metrics.throttling_events_as(&quiet.mapping(), Service::Acm, operation), 0, "{operation}");
    }
    assert_eq!(world.aws_metrics.throttling_events_as(&quiet.mapping(), Service::Route53, "ChangeResourceRecordSets"), 0);
    assert!(world.aws_metrics.throttling_events_as(&busy.mapping(), Service::Acm, "ListCertificates") > 0);
    assert!(busy.certificates().await.is_empty());
}

/// The process dies while an AssumeRole is in flight (its answer arrives late): the new process
/// assumes again and the Cert ends up with one certificate, in its account.
#[tokio::test]
async fn a_crash_while_assuming_a_role_leaves_no_duplicate() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let team = Team::new("crash-assume", &endpoint).await;
    let mut world = World::start(&[&team], Unmapped::Refuse).await;
    world.proxy.inject(Operation::named("AssumeRole"), Fault::SlowResponse(Duration::from_secs(3)), 1);
    world.map(&team.identity(vec![team.grant()])).await;
    team.create("web", &team.domain("web")).await;
    world.proxy.wait_for_calls("AssumeRole", 1).await;
    world.controller.crash();
    world.start_controller(&[&team]).await;
    let cert = team.wait_ready("web").await;
    assert_eq!(team.certificates().await, [status(&cert).observation.certificate_arn.clone().unwrap()]);
    assert!(world.proxy.calls("AssumeRole") >= 2, "assumed again: {:?}", world.proxy.all_calls());
}

/// The platform team maps a namespace to another account under a Ready Cert (ADR 0014,
/// "Changing a mapping"): the Cert is held, nothing is requested in the new account and nothing
/// touched in the old one; mapped back it is Ready again with the same certificate; deleted
/// while held it is released, and an event names what stays in the old account.
#[tokio::test]
async fn a_mapping_moved_under_a_live_cert_holds_it_with_no_duplicate_and_nothing_silently_orphaned() {
    let endpoint = accounts_moto().await.unwrap().endpoint();
    let (team, new_home) = (Team::new("moved", &endpoint).await, Team::new("moved-to", &endpoint).await);
    let world = World::start(&[&team, &new_home], Unmapped::Refuse).await;
    // The team's zone stays reachable through its own role whichever account the Cert acts in.
    let zone =
        HostedZoneGrant { role_arn: Some(team.role.clone()), external_id: Some(format!("ext-{}", team.ns.namespace)), ..team.grant() };
    let before = team.identity(vec![zone]);
    world.map(&before).await;
    let spec = CertSpec { domain_name: Some(team.domain("web")), delete_on_removal: true, ..spec("web", "prod") };
    team.ns.create(&Cert::new("web", spec)).await;
    let arn = status(&team.wait_ready("web").await).observation.certificate_arn.clone().unwrap();
    let mut moved = before.clone();
    moved.spec.role_arn = Some(new_home.role.clone());
    moved.spec.external_id = Some(format!("ext-{}", new_home.ns.namespace));
    world.remap(&moved).await;
    let held = team.wait_refused("web", "AwsIdentityChanged").await;
    let message = &status(&held).condition("Synced").unwrap().message;
    assert!(message.contains("in another AWS account than its certificate"), "{message}");
    assert!(!message.contains(&team.account) && !message.contains(&new_home.account), "no account id: {message}");
    assert_eq!(status(&held).observation.certificate_arn.as_deref(), Some(arn.as_str()), "it still names its certificate");
    assert!(new_home.certificates().await.is_empty(), "no duplicate in the new account");
    assert_eq!(team.certificates().await, std::slice::from_ref(&arn), "nothing touched in the old one");
    world.remap(&before).await;
    let back = team.wait_ready("web").await;
    assert_eq!(status(&back).observation.certificate_arn.as_deref(), Some(arn.as_str()), "mapped back: the same certificate");
    world.remap(&moved).await;
    team.wait_refused("web", "AwsIdentityChanged").await;
    team.ns.delete_and_wait("web").await;
    let told = team.ns.wait_for_event("web", "AwsIdentityChanged").await;
    assert_eq!(told[0].type_, "Warning");
    assert!(told[0].note.contains("released without deleting") && told[0].note.contains(&before.name_any()), "{:?}", told[0]);
    assert!(!told[0].note.contains(&team.account), "accounts masked: {:?}", told[0]);
    assert_eq!(team.certificates().await, [arn], "the certificate stays where it is, as the event says");
    assert!(new_home.certificates().await.is_empty());
}
