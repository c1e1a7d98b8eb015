#![allow(clippy::unwrap_used, clippy::panic)]
//! Admission webhooks end to end, as a user runs them: `blockwork run` serves them with a
//! certificate from files, `blockwork webhooks` registers them with a real kube-apiserver, and
//! the API server asks them before storing a Cert or a DistributionTenant. A control plane of its own
//! (`control_plane::of`): the registration is cluster-wide, and each test registers its own, one
//! test at a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use blockwork_cert::{Cert, CertSpec};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant};
use blockwork_tenant::api::{DnsConfig, DnsProvider, DomainName};
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::commands::kubectl_ok;
use blockwork_testenv::operator::Operator;
use kube::Api;
use kube::api::PostParams;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const ZONES: &str = "k8s.example.com:Z0000000000000000001";
const CONTROLLERS: &str = "aws_identity,cert,tenant";

/// One registration at a time, among the test processes too: held until dropped.
async fn registration() -> blockwork_testenv::control_plane::Exclusive {
    blockwork_testenv::control_plane::of("webhooks").await.unwrap().exclusive("registration").await.unwrap()
}

/// `blockwork run --controllers aws_identity,cert,tenant` with their webhooks on a free port,
/// registered.
async fn start_webhooks(kubeconfig: &Path, fail_closed: bool) -> Operator {
    let fail_closed = fail_closed.to_string();
    let mut operator = Operator::new(Path::new(BIN), kubeconfig)
        .unwrap()
        .args(["--controllers", CONTROLLERS, "--webhook-fail-closed", &fail_closed])
        // No AWS here: the controller's calls fail fast; only the webhook is under test.
        .args(["--dns-zones", ZONES, "--aws-region", "us-east-1", "--aws-endpoint-url", "http://127.0.0.1:9"])
        .args(["--tenant-aws-endpoint-url", "http://127.0.0.1:9", "--tenant-aws-region", "us-east-1"])
        .start()
        .unwrap();
    operator.wait_listening(Duration::from_secs(30)).await.unwrap();
    let registration = operator.manifests("webhooks", &["--controllers", CONTROLLERS, "--fail-closed", &fail_closed]).unwrap();
    kubectl_ok(kubeconfig, &["apply", "--server-side", "--force-conflicts", "-f", "-"], registration.as_bytes()).unwrap();
    operator
}

async fn cluster() -> (kube::Client, PathBuf) {
    let plane = blockwork_testenv::control_plane::of("webhooks").await.unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_tenant::crd(), blockwork_identity::crd()]).await.unwrap();
    (plane.client(), plane.kubeconfig_path().to_path_buf())
}

async fn namespace(prefix: &str) -> String {
    blockwork_testenv::control_plane::of("webhooks").await.unwrap().namespace(prefix).await.unwrap()
}

fn cert(name: &str, service: &str, environment: &str) -> Cert {
    Cert::new(name, CertSpec { service_name: service.into(), environment: environment.into(), ..CertSpec::default() })
}

/// Retries while the API server cannot reach a webhook that was just registered.
async fn create<K>(api: &Api<K>, object: &K) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..50 {
        match api.create(&PostParams::default(), object).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(kube::Error::Api(status)) => return Err(status.message),
            Err(other) => panic!("{other}"),
        }
    }
    panic!("the webhook stayed unreachable")
}

#[tokio::test]
async fn a_domain_another_cert_holds_is_rejected_in_any_namespace() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = start_webhooks(&kubeconfig, true).await;
    let (first, second) = (namespace("webhook-first").await, namespace("webhook-second").await);

    create(&Api::namespaced(client.clone(), &first), &cert("orders", "orders", "prod"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    // The webhook knows other Certs from a watch: wait (by dry runs, which the webhook sees but
    // nothing stores) until it has seen the first, then the real create must be refused.
    let copies: Api<Cert> = Api::namespaced(client, &second);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    for _ in 0..100 {
        if copies.create(&dry_run, &cert("copy", "orders", "prod")).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let message = create(&copies, &cert("copy", "orders", "prod")).await.expect_err("duplicate domain");
    assert!(message.contains("orders-prod.k8s.example.com"), "{message}");
    assert!(message.contains(&format!("{first}/orders")), "names the holder: {message}");
}

#[tokio::test]
async fn a_domain_outside_the_operators_zones_is_rejected() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = start_webhooks(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-zone").await);
    let mut outside = cert("outside", "shop", "prod");
    outside.spec.domain_name = Some("shop.other.org".into());
    let message = create(&api, &outside).await.expect_err("no zone");
    assert!(message.contains("shop.other.org"), "{message}");
}

#[tokio::test]
async fn fail_open_admits_problems_with_a_warning() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = start_webhooks(&kubeconfig, false).await;
    let api = Api::namespaced(client, &namespace("webhook-open").await);
    let mut outside = cert("outside", "shop", "prod");
    outside.spec.domain_name = Some("shop.other.org".into());
    create(&api, &outside).await.expect("admitted: --webhook-fail-closed=false only warns");
}

#[tokio::test]
async fn a_cert_san_with_an_undecodable_a_label_is_rejected_naming_the_label_and_a_valid_idn_admitted() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = start_webhooks(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-alabel").await);
    let mut valid = cert("bucher", "bucher", "prod");
    valid.spec.domain_name = Some("xn--bcher-kva.k8s.example.com".into());
    create(&api, &valid).await.expect("bücher: a name a public CA issues for");
    let mut idn = cert("idn", "shop", "prod");
    idn.spec.subject_alternative_names = vec!["xn--zz.k8s.example.com".into()];
    let message = create(&api, &idn).await.expect_err("xn--zz does not decode");
    assert!(message.contains("spec.subjectAlternativeNames[0]: label \"xn--zz\""), "{message}");
}

/// An AwsIdentity named `name` mapping `namespaces`, granting `zones` (id, name, role).
fn identity(name: &str, namespaces: &[&str], zones: &[(&str, &str, Option<&str>)]) -> AwsIdentity {
    let hosted_zones = zones
        .iter()
        .map(|(id, zone, role)| HostedZoneGrant {
            id: (*id).to_owned(),
            name: (*zone).to_owned(),
            role_arn: role.map(str::to_owned),
            ..HostedZoneGrant::default()
        })
        .collect();
    AwsIdentity::new(
        name,
        AwsIdentitySpec { namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(), hosted_zones, ..AwsIdentitySpec::default() },
    )
}

#[tokio::test]
async fn an_aws_identity_listing_a_namespace_another_lists_is_refused_naming_both() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = start_webhooks(&kubeconfig, true).await;
    let team = namespace("webhook-overlap").await;
    let identities: Api<AwsIdentity> = Api::all(client);
    let first = format!("{team}-first");
    create(&identities, &identity(&first, &[&team], &[])).await.unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    // The webhook knows the others from a watch: dry runs until it has seen the first.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    for _ in 0..100 {
        if identities.create(&dry_run, &identity(&format!("{team}-second"), &[&team], &[])).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let message = create(&identities, &identity(&format!("{team}-second"), &[&team], &[])).await.expect_err("an overlap");
    assert!(message.contains(&format!("spec.namespaces: {team} is already mapped by AwsIdentity {first}")), "{message}");
}

/// Creates `object` until the webhook, which learns mappings from a watch, refuses it with a
/// message containing `expected`; each admitted attempt is deleted again.
async fn refused_once_mapped<K>(api: &Api<K>, object: &K, name: &str, expected: &str) -> String
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..100 {
        match create(api, object).await {
            Err(refused) if refused.contains(expected) => return refused,
            Err(other) => panic!("{other}"),
            Ok(_) => {
                api.delete(name, &Default::default()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("never refused with {expected:?}")
}

#[tokio::test]
async fn a_tenant_or_cert_reaching_outside_its_namespace_s_grant_is_refused_at_admission_naming_the_field() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = start_webhooks(&kubeconfig, true).await;
    let team = namespace("webhook-grant").await;
    let identities: Api<AwsIdentity> = Api::all(client.clone());
    let granted = identity(&format!("{team}-grant"), &[&team], &[("Z0000000000000000009", "team.example.org", None)]);
    create(&identities, &granted).await.unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    let tenants: Api<DistributionTenant> = Api::namespaced(client.clone(), &team);
    let dns = |zone: &str, role: Option<&str>| DnsConfig {
        provider: DnsProvider::Route53,
        hosted_zone_id: zone.to_owned(),
        assume_role_arn: role.map(str::to_owned),
        ttl: blockwork_tenant::api::DEFAULT_TTL,
    };
    // The confused deputy: a role that trusts the operator, which no mapping grants this namespace.
    let mut hostile = tenant("hostile", &["www.team.example.org"]);
    hostile.spec.dns = Some(dns("Z0000000000000000009", Some("arn:aws:iam::999999999999:role/OrganizationAccountAccessRole")));
    let message = create(&tenants, &hostile).await.expect_err("a role not granted");
    assert!(message.contains("spec.dns.assumeRoleArn") && !message.contains("999999999999"), "{message}");
    let mut elsewhere = tenant("elsewhere", &["www.team.example.org"]);
    elsewhere.spec.dns = Some(dns("Z0000000000000000008", None));
    let message = refused_once_mapped(&tenants, &elsewhere, "elsewhere", "spec.dns.hostedZoneId").await;
    assert!(message.contains("Z0000000000000000008") && message.contains(&format!("AwsIdentity {team}-grant")), "{message}");
    // A domain of the operator's --dns-zones is not this mapped namespace's.
    let certs: Api<Cert> = Api::namespaced(client, &team);
    let mut outside = cert("outside", "shop", "prod");
    outside.spec.domain_name = Some("shop.k8s.example.com".into());
    let message = refused_once_mapped(&certs, &outside, "outside", "is not in the zone").await;
    assert!(message.contains("shop.k8s.example.com is not in the zone team.example.org"), "{message}");
}

fn tenant(name: &str, domains: &[&str]) -> DistributionTenant {
    DistributionTenant::new(
        name,
        DistributionTenantSpec {
            distribution_id: "E1ABCDEF2GHIJ".into(),
            domains: domains.iter().map(|d| DomainName { domain: (*d).to_owned() }).collect(),
            ..DistributionTenantSpec::default()
        },
    )
}

#[tokio::test]
async fn a_distribution_tenant_domain_with_an_undecodable_a_label_is_rejected_naming_the_label() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let webhook = start_webhooks(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-tenant").await);
    create(&api, &tenant("shop", &["xn--mnchen-3ya.k8s.example.com"])).await.unwrap_or_else(|e| panic!("{e}\n{}", webhook.logs()));
    let message = create(&api, &tenant("idn", &["xn--zz.k8s.example.com"])).await.expect_err("xn--zz does not decode");
    assert!(message.contains("spec.domains[0]: label \"xn--zz\""), "{message}");
}

#[tokio::test]
async fn a_distribution_tenant_domain_given_with_and_without_its_trailing_dot_is_rejected() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = start_webhooks(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-dot").await);
    let message =
        create(&api, &tenant("twice", &["www.k8s.example.com", "www.k8s.example.com."])).await.expect_err("the same domain twice");
    assert!(message.contains("spec.domains[1]: \"www.k8s.example.com.\" names www.k8s.example.com a second time"), "{message}");
}

#[tokio::test]
async fn a_cert_adopting_a_certificate_of_another_region_is_refused_at_admission_naming_the_field() {
    let _one = registration().await;
    let (client, kubeconfig) = cluster().await;
    let _webhook = start_webhooks(&kubeconfig, true).await;
    let api = Api::namespaced(client, &namespace("webhook-adopt").await);
    let mut adopting = cert("adopting", "shop", "prod");
    adopting.spec.adopt = Some(blockwork_cert::api::AdoptSpec {
        certificate_arn: "arn:aws:acm:eu-west-1:123456789012:certificate/0b8c1a4e-1111-2222-3333-444455556666".into(),
    });
    let message = create(&api, &adopting).await.expect_err("another region");
    assert!(message.contains("spec.adopt.certificateArn") && message.contains("eu-west-1"), "{message}");
    assert!(!message.contains("123456789012"), "{message}");
}
