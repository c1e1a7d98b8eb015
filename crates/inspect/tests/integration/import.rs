//! `blockwork import` against moto (ACM, Route 53) and MiniStack (CloudFront tenants) behind
//! the fault proxy: resources made with the SDK as someone did before Blockwork, the printed
//! YAML parsed back and checked, and every call the import made counted at the proxies: reads
//! only. The emulators are shared by the tests of this binary, so each test names its resources
//! under a domain of its own and looks only at those.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Endpoint, Principal, Service};
use blockwork_inspect::import::certs::Labels;
use blockwork_inspect::import::{Request, import};
use blockwork_testenv::aws::{hosted_zone, layer_config, request_certificate, sdk_config, tenant_only_distribution, upsert_cname};
use blockwork_testenv::emulators::{ministack, moto};
use blockwork_testenv::fault_proxy::FaultProxy;
use serde_json::Value;

/// The emulators behind proxies of this test's own.
struct World {
    /// In front of moto: ACM, Route 53, STS.
    moto_proxy: FaultProxy,
    /// In front of MiniStack: CloudFront's tenants.
    ministack_proxy: FaultProxy,
    /// moto's ACM, straight: how the account's certificates were made.
    acm: aws_sdk_acm::Client,
    /// moto's Route 53, straight.
    route53: aws_sdk_route53::Client,
    /// MiniStack's CloudFront and ACM, straight.
    cloudfront: aws_sdk_cloudfront::Client,
    ministack_acm: aws_sdk_acm::Client,
    /// This test's domains end with it.
    suffix: String,
}

impl World {
    async fn start(test: &str) -> Self {
        let moto = moto().await.expect("moto starts").endpoint();
        let moto_proxy = FaultProxy::start(&moto).await.expect("the proxy starts");
        let ministack = ministack().await.expect("MiniStack starts").endpoint();
        let ministack_proxy = FaultProxy::start(&ministack).await.expect("the proxy starts");
        let (moto_config, ministack_config) = (sdk_config(&moto).await, sdk_config(&ministack).await);
        let suffix = format!("{test}-{}.example.com", blockwork_testenv::aws::fresh_account());
        Self {
            moto_proxy,
            ministack_proxy,
            acm: aws_sdk_acm::Client::new(&moto_config),
            route53: aws_sdk_route53::Client::new(&moto_config),
            cloudfront: aws_sdk_cloudfront::Client::new(&ministack_config),
            ministack_acm: aws_sdk_acm::Client::new(&ministack_config),
            suffix,
        }
    }

    fn domain(&self, label: &str) -> String {
        format!("{label}.{}", self.suffix)
    }

    async fn aws(&self) -> Arc<Aws> {
        let endpoint = |service, proxy: &FaultProxy| Endpoint { controller: None, service, url: proxy.endpoint() };
        let endpoints = vec![
            endpoint(Service::Acm, &self.moto_proxy),
            endpoint(Service::Route53, &self.moto_proxy),
            endpoint(Service::Sts, &self.moto_proxy),
            endpoint(Service::CloudFront, &self.ministack_proxy),
        ];
        let config = AwsConfig { endpoints, ..layer_config() };
        let metrics = Arc::new(AwsMetrics::register(&mut Default::default(), &[]));
        Aws::with_sdk_config(config, sdk_config(&self.moto_proxy.endpoint()).await, metrics)
    }

    /// Runs the import; returns the printed manifests of this test's domains (parsed back from
    /// the YAML) and the notes about them.
    async fn import(&self, request: &Request) -> (Vec<Value>, Vec<String>) {
        let imported = import(&*self.aws().await, &Principal::operator(), request).await.expect("the import runs");
        let yaml = imported.yaml().expect("YAML");
        let manifests: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("the output is YAML manifests");
        let mine = |text: &str| text.contains(&self.suffix) || text.contains(&self.suffix.replace('.', "-"));
        let manifests = manifests.into_iter().filter(|m| mine(&m.to_string())).collect();
        (manifests, imported.notes.into_iter().filter(|n| mine(n)).collect())
    }

    /// Every call the proxies saw is a read.
    fn assert_only_reads(&self) {
        let mut calls = self.moto_proxy.all_calls();
        calls.extend(self.ministack_proxy.all_calls());
        assert!(!calls.is_empty(), "the import read nothing");
        eprintln!("calls of the import: {calls:?}");
        let writes: Vec<&String> =
            calls.keys().filter(|op| !(op.starts_with("List") || op.starts_with("Describe") || op.starts_with("Get"))).collect();
        assert!(writes.is_empty(), "the import made calls other than reads: {writes:?} of {calls:?}");
    }
}

fn certificates(namespace: &str) -> Request {
    Request {
        namespace: namespace.to_owned(),
        certificates: true,
        labels: Labels { service_name: Some("web".into()), environment: Some("prod".into()), ..Labels::default() },
        ..Request::default()
    }
}

fn named<'a>(manifests: &'a [Value], name: &str) -> &'a Value {
    manifests.iter().find(|m| m["metadata"]["name"] == name).unwrap_or_else(|| panic!("no manifest {name} in {manifests:#?}"))
}

#[tokio::test]
async fn a_certificate_of_the_account_is_printed_as_a_cert_that_adopts_it_with_only_reads_made() {
    let world = World::start("adopts").await;
    let (shop, www) = (world.domain("shop"), world.domain("www"));
    let arn = request_certificate(&world.acm, &[shop.clone(), www.clone()]).await;
    let (manifests, notes) = world.import(&certificates("team-a")).await;
    assert!(notes.is_empty(), "{notes:?}");
    let cert = named(&manifests, &shop.replace('.', "-"));
    assert_eq!((&cert["apiVersion"], &cert["kind"]), (&"acm.blockwork.dev/v1".into(), &"Cert".into()));
    assert_eq!(cert["metadata"]["namespace"], "team-a");
    assert_eq!(cert["spec"]["domainName"], shop.as_str());
    assert_eq!(cert["spec"]["subjectAlternativeNames"], serde_json::json!([www]));
    assert_eq!(cert["spec"]["adopt"]["certificateArn"], arn.as_str());
    assert_eq!(cert["spec"]["deleteOnRemoval"], false);
    assert_eq!((&cert["spec"]["serviceName"], &cert["spec"]["environment"]), (&"web".into(), &"prod".into()));
    world.assert_only_reads();
}

#[tokio::test]
async fn an_imported_certificate_is_left_out_and_named_with_the_reason_and_no_account() {
    let world = World::start("imported").await;
    let domain = world.domain("legacy");
    // A certificate bought elsewhere, its domain as its subject's common name.
    let mut params = rcgen::CertificateParams::new(vec![domain.clone()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, domain.clone());
    let key = rcgen::KeyPair::generate().unwrap();
    let certificate = params.self_signed(&key).unwrap();
    let pem = |text: String| aws_sdk_acm::primitives::Blob::new(text.into_bytes());
    let imported = world.acm.import_certificate().certificate(pem(certificate.pem())).private_key(pem(key.serialize_pem()));
    imported.send().await.expect("the certificate is imported");
    let (manifests, notes) = world.import(&certificates("team-a")).await;
    assert!(manifests.is_empty(), "{manifests:#?}");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with(&format!("skipped certificate {domain}")) && notes[0].contains("imported into ACM"), "{notes:?}");
    assert!(!notes[0].contains(blockwork_testenv::emulators::ACCOUNT_ID), "{notes:?}");
    world.assert_only_reads();
}

#[tokio::test]
async fn a_certificate_blockwork_made_is_printed_under_the_name_of_its_object() {
    let world = World::start("owned").await;
    let arn = request_certificate(&world.acm, &[world.domain("api")]).await;
    let tag = |key: &str, value: &str| aws_sdk_acm::types::Tag::builder().key(key).value(value).build().unwrap();
    let tags = [tag("blockwork.dev/managed-by", "blockwork-cert"), tag("blockwork.dev/owner", "old-cluster-ns/api-prod")];
    world.acm.add_tags_to_certificate().certificate_arn(&arn).set_tags(Some(tags.to_vec())).send().await.unwrap();
    let (manifests, _) = world.import(&certificates("team-a")).await;
    let cert = manifests.iter().find(|m| m["spec"]["adopt"]["certificateArn"] == arn.as_str()).expect("the certificate is printed");
    assert_eq!(cert["metadata"]["name"], "api-prod");
}

#[tokio::test]
async fn a_distributions_tenant_is_printed_as_it_is_with_its_cnames_as_its_dns_and_only_reads_made() {
    let world = World::start("tenants").await;
    let wildcard = request_certificate(&world.ministack_acm, &[format!("*.{}", world.suffix)]).await;
    let distribution = tenant_only_distribution(&world.cloudfront, &world.suffix, Some(&wildcard), &[("origin", true, None)]).await;
    let (shop, www) = (world.domain("shop"), world.domain("www"));
    let domain = |d: &str| aws_sdk_cloudfront::types::DomainItem::builder().domain(d).build().unwrap();
    let parameter = aws_sdk_cloudfront::types::Parameter::builder().name("origin").value("eu").build().unwrap();
    let name = format!("shop-{}", world.suffix.split('.').next().unwrap_or_default());
    let created = world
        .cloudfront
        .create_distribution_tenant()
        .name(&name)
        .distribution_id(&distribution)
        .domains(domain(&shop))
        .domains(domain(&www))
        .parameters(parameter)
        .send()
        .await
        .expect("the tenant is created");
    let tenant = created.distribution_tenant().expect("a tenant");
    let group = world.cloudfront.get_connection_group().identifier(tenant.connection_group_id().unwrap_or_default()).send().await.unwrap();
    let endpoint = group.connection_group().and_then(|g| g.routing_endpoint()).expect("a routing endpoint").to_owned();
    let zone = hosted_zone(&world.route53, &world.suffix).await;
    upsert_cname(&world.route53, &zone, &shop, &endpoint).await;
    upsert_cname(&world.route53, &zone, &www, &endpoint).await;
    let request = Request { distributions: vec![distribution.clone()], hosted_zones: vec![zone.clone()], ..certificates("web") };
    let (manifests, notes) = world.import(&request).await;
    assert!(notes.is_empty(), "{notes:?}");
    let object = named(&manifests, &name);
    assert_eq!(object["kind"], "DistributionTenant");
    assert_eq!(object["metadata"]["namespace"], "web");
    assert_eq!(object["metadata"]["annotations"]["blockwork.dev/deletion-policy"], "Orphan");
    assert_eq!(object["spec"]["adopt"]["tenantId"], tenant.id().unwrap_or_default());
    assert_eq!(object["spec"]["distributionId"], distribution.as_str());
    let mut domains = [shop, www];
    domains.sort();
    assert_eq!(object["spec"]["domains"], serde_json::json!([{"domain": domains[0]}, {"domain": domains[1]}]));
    assert_eq!(object["spec"]["parameters"], serde_json::json!([{"name": "origin", "value": "eu"}]));
    assert_eq!(object["spec"]["dns"]["hostedZoneId"], zone.as_str());
    world.assert_only_reads();
}

/// The AWS layer over `proxy` for ACM and STS, as `blockwork import` builds it from its flags.
async fn layer_through(proxy: &FaultProxy) -> Arc<Aws> {
    let endpoint = |service| Endpoint { controller: None, service, url: proxy.endpoint() };
    let config = AwsConfig { endpoints: vec![endpoint(Service::Acm), endpoint(Service::Sts)], ..layer_config() };
    Aws::with_sdk_config(config, sdk_config(&proxy.endpoint()).await, Arc::new(AwsMetrics::register(&mut Default::default(), &[])))
}

#[tokio::test]
async fn with_a_role_it_reads_the_roles_account_asking_with_its_external_id() {
    let moto = blockwork_testenv::emulators::accounts_moto().await.expect("moto starts").endpoint();
    let proxy = FaultProxy::start(&moto).await.expect("the proxy starts");
    let account = blockwork_testenv::aws::fresh_account();
    let role = format!("arn:aws:iam::{account}:role/blockwork-import");
    proxy.accounts().require_external_id(&role, "team-a-4f1d");
    let team_acm = aws_sdk_acm::Client::new(&blockwork_testenv::aws::as_role(&moto, &role).await);
    let domain = format!("api.role-{account}.example.com");
    let arn = request_certificate(&team_acm, std::slice::from_ref(&domain)).await;
    let aws = layer_through(&proxy).await;
    let assumed = blockwork_aws::AssumedRole {
        arn: role.clone(),
        external_id: Some("team-a-4f1d".into()),
        session_name: blockwork_aws::principal::session_name("import", "team-a"),
    };
    let as_role = import(&aws, &Principal::new("import", Some(assumed)), &certificates("team-a")).await.expect("the import runs");
    let printed = |imported: &blockwork_inspect::import::Imported| {
        imported.manifests.iter().any(|m| m["spec"]["adopt"]["certificateArn"] == arn.as_str())
    };
    assert!(printed(&as_role), "the role's account's certificate is printed");
    let asked = proxy.accounts().assumed();
    assert!(asked.iter().any(|a| a.role_arn == role && a.external_id.as_deref() == Some("team-a-4f1d")), "{asked:?}");
    let own = import(&aws, &Principal::operator(), &certificates("team-a")).await.expect("the import runs");
    assert!(!printed(&own), "the default chain's account does not hold it");
}
