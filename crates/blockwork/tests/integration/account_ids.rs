#![allow(clippy::unwrap_used, clippy::panic)]
//! Nothing a user reads carries the AWS account id, nor any private key. `blockwork run` with
//! every controller runs against a moto and a MiniStack that answer as a distinctive account,
//! through each operator's suite-level scenarios — objects created to Ready, AWS refusals whose
//! messages name ARNs, a drift between two certificates, a managed certificate written into the
//! spec, deletion, a Cache, a rotated Secret, a certificate exported with its key into a Secret
//! — and then every status, event, log line (info level) and metric is scanned for the account
//! id and for private-key material (`blockwork_testenv::leaks`). Identifier fields that must hold
//! the whole ARN (a Cert's `certificateArn`, which load balancers are given) are the exception,
//! and the test checks that they do hold the account: the emulators really answered as it.

use std::path::Path;
use std::time::Duration;

use aws_sdk_cloudfront::types::{Certificate, Customizations, DomainItem};
use blockwork_testenv::aws::{hosted_zone, request_certificate, sdk_config, tenant_only_distribution};
use blockwork_testenv::emulators::Emulators;
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};
use blockwork_testenv::leaks::Scanner;
use blockwork_testenv::operator::Operator;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
/// Distinctive: no test data, no emulator default, no example in the docs uses it.
const ACCOUNT: &str = "731902846215";
/// How long a change may take: the binary runs with the seeds' intervals.
const SETTLE: Duration = Duration::from_secs(240);

#[tokio::test]
async fn no_status_event_log_or_metric_carries_the_account_id() {
    let emulators = Emulators::for_account(ACCOUNT).await.unwrap();
    let moto = FaultProxy::start(&emulators.moto.endpoint()).await.unwrap();
    let ministack = FaultProxy::start(&emulators.ministack.endpoint()).await.unwrap();
    let plane = blockwork_testenv::control_plane::of("account_ids").await.unwrap();
    let crds: Vec<_> = blockwork::controllers::registered().iter().flat_map(|c| (c.crds)()).collect();
    plane.install_crds(&crds).await.unwrap();
    let namespace = plane.namespace("account-ids").await.unwrap();
    let client = plane.client();
    let domain = format!("{namespace}.example.com");

    let aws = Aws::new(&emulators, &domain).await;
    let operator = Operator::new(Path::new(BIN), plane.kubeconfig_path())
        .unwrap()
        .args(["--namespaces", &namespace, "--log-level", "info"])
        .args(["--aws-endpoint-url", &moto.endpoint(), "--aws-region", "us-east-1", "--dns-zones", &format!("{domain}:{}", aws.zone_id)])
        .args(["--tenant-aws-endpoint-url", &ministack.endpoint(), "--tenant-route53-endpoint-url", &moto.endpoint()])
        .args(["--tenant-aws-region", "us-east-1", "--export-secrets"])
        .start()
        .unwrap();
    let certs = Kind::new(&client, &namespace, ("acm.blockwork.dev", "v1", "Cert"), "certs");
    let tenants = Kind::new(&client, &namespace, ("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant"), "distributiontenants");
    let caches = Kind::new(&client, &namespace, ("cache.blockwork.dev", "v1beta1", "Cache"), "caches");

    // Refusals whose AWS messages name ARNs of the account.
    let refusal = |status: u16, code: &str, action: &str| Fault::Custom {
        status,
        code: code.to_owned(),
        message: format!(
            "User: arn:aws:iam::{ACCOUNT}:user/operator is not authorized to perform: {action} on resource: arn:aws:acm:us-east-1:{ACCOUNT}:certificate/*"
        ),
    };
    moto.inject(Operation::named("RequestCertificate"), refusal(400, "AccessDeniedException", "acm:RequestCertificate"), 1);
    certs.create(json!({"metadata": {"name": "denied"}, "spec": {"serviceName": "denied", "environment": "prod"}})).await;
    certs.wait("denied", "refused", &operator, |o| reason(o, "Ready").is_some_and(|r| r.contains("AccessDenied"))).await;
    ministack.inject(Operation::named("CreateDistributionTenant"), refusal(403, "AccessDenied", "cloudfront:CreateDistributionTenant"), 1);
    tenants.create(aws.tenant("shop-denied", "denied", Some(&aws.certificate), false)).await;
    tenants.wait("shop-denied", "refused", &operator, |o| reason(o, "Ready").as_deref() == Some("AccessDenied")).await;

    // Created to Ready, with DNS records (Cert validation, tenant CNAMEs); a managed certificate
    // the operator writes into the spec; a Cache; a rotated Secret.
    certs
        .create(json!({"metadata": {"name": "web"}, "spec": {"serviceName": "web", "environment": "prod", "deleteOnRemoval": true}}))
        .await;
    certs
        .create(json!({"metadata": {"name": "inside"}, "spec": {"serviceName": "inside", "environment": "prod", "export": {"secretName": "inside-tls"}}}))
        .await;
    tenants.create(aws.tenant("shop", "www", Some(&aws.certificate), true)).await;
    tenants.create(aws.tenant("shop-managed", "managed", None, false)).await;
    caches.create(json!({"metadata": {"name": "sessions"}, "spec": {"engine": "redis", "memory": "64Mi"}})).await;
    let tls = blockwork_webhook::TlsMaterial::self_signed(&["signing.example.com"]).unwrap();
    let source = json!({
        "metadata": {
            "name": "signing",
            "annotations": {"rotator.gw.ei.telekom.de/source-secret": "true", "rotator.gw.ei.telekom.de/destination-secret-name": "signing-keys"},
        },
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": tls.cert_pem, "tls.key": tls.key_pem},
    });
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);
    secrets.create(&PostParams::default(), &serde_json::from_value(source).unwrap()).await.unwrap();

    let web = certs.wait("web", "Ready", &operator, |o| condition_status(o, "Ready") == Some("True")).await;
    certs.wait("inside", "exported", &operator, |o| condition_status(o, "Exported") == Some("True")).await;
    let exported = secrets.get("inside-tls").await.unwrap();
    let key = String::from_utf8(exported.data.as_ref().unwrap()["tls.key"].0.clone()).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "the Secret holds a key to look for");
    let arn = web.data["status"]["certificateArn"].as_str().unwrap_or_default().to_owned();
    assert!(arn.contains(ACCOUNT), "the emulators answer as the distinctive account: {arn}");
    tenants.wait("shop", "Ready", &operator, |o| condition_status(o, "Ready") == Some("True")).await;
    tenants
        .wait("shop-managed", "Ready with its certificate in the spec", &operator, |o| {
            condition_status(o, "Ready") == Some("True") && o.data["spec"]["customizations"]["certificate"]["arn"].is_string()
        })
        .await;
    caches.wait("sessions", "reported", &operator, |o| o.data["status"].is_object()).await;
    wait_until("the rotator's target", &operator, || async { secrets.get_opt("signing-keys").await.unwrap().is_some() }).await;

    // A drift between two certificates, reported: both ARNs are named, with the account masked.
    aws.attach_certificate_outside("shop", &aws.other_certificate).await;
    tenants.annotate("shop", "blockwork.dev/drift-policy", "report").await;
    let drifted = tenants.wait("shop", "DriftDetected", &operator, |o| reason(o, "Synced").as_deref() == Some("DriftDetected")).await;
    let drift = condition_message(&drifted, "Synced");
    assert!(drift.contains("certificate is arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/"), "{drift}");

    // Deletion: the Cert's certificate is deleted, the refused tenant released.
    certs.delete("web").await;
    tenants.delete("shop-denied").await;
    wait_until("the Cert to go", &operator, || certs.gone("web")).await;
    wait_until("the tenant to go", &operator, || tenants.gone("shop-denied")).await;

    // The exported key's own lines too, wherever they might be cut.
    let key_lines = key.lines().filter(|l| !l.starts_with("-----") && l.len() >= 40).map(str::to_owned).collect::<Vec<_>>();
    let scanner = key_lines
        .iter()
        .fold(Scanner::new(), |scanner, line| scanner.needle("the exported private key", line))
        .private_keys()
        .needle("account id", ACCOUNT)
        // The whole ARN is the point of these fields: a Cert's is given to load balancers, a
        // tenant's names it for IAM policies and the AWS CLI.
        .identifier_field("certificateArn")
        .identifier_field("arn")
        // The certificate a tenant serves: the Cert it belongs to finds its users by this ARN.
        .identifier_field("certificateInUse")
        // A copy of the spec as applied, which holds the certificate ARN the user (or, for a
        // managed certificate, the operator, by seed 001's design) wrote into the spec.
        .identifier_field("lastAppliedSpec");
    let kinds = [certs.resource.clone(), tenants.resource.clone(), caches.resource.clone()];
    let mut findings = scanner.namespace(&client, &namespace, &kinds).await.unwrap();
    let logs = operator.logs();
    assert!(logs.contains("controllers started") && logs.contains("INFO"), "the log holds info lines to scan:\n{logs}");
    findings.extend(scanner.text("blockwork log", &logs));
    let metrics = operator.metrics().await;
    assert!(metrics.contains("cloudfront_tenant_operator"), "{metrics}");
    findings.extend(scanner.text("metrics", &metrics));
    assert!(
        findings.is_empty(),
        "the account id is readable:\n{}",
        findings.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
    );
    // The scan saw the events it had to see.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client, &namespace).list(&Default::default()).await.unwrap();
    let reasons: Vec<&str> = events.items.iter().filter_map(|e| e.reason.as_deref()).collect();
    for wanted in ["SpecUpdated", "Failed", "Deleted", "Released"] {
        assert!(reasons.contains(&wanted), "no {wanted} event among {reasons:?}");
    }
}

/// The AWS side: a hosted zone in moto; in MiniStack a multi-tenant distribution on CloudFront's
/// default certificate (so tenants bring certificates), a connection group, two certificates.
struct Aws {
    cloudfront: aws_sdk_cloudfront::Client,
    zone_id: String,
    distribution_id: String,
    connection_group_id: String,
    domain: String,
    certificate: String,
    other_certificate: String,
}

impl Aws {
    async fn new(emulators: &Emulators, domain: &str) -> Self {
        let route53 = aws_sdk_route53::Client::new(&sdk_config(&emulators.moto.endpoint()).await);
        let zone_id = hosted_zone(&route53, domain).await;
        let config = sdk_config(&emulators.ministack.endpoint()).await;
        let cloudfront = aws_sdk_cloudfront::Client::new(&config);
        let acm = aws_sdk_acm::Client::new(&config);
        let certificate = request_certificate(&acm, &[format!("*.{domain}")]).await;
        let other_certificate = request_certificate(&acm, &[format!("other.{domain}")]).await;
        let group = cloudfront.create_connection_group().name(domain.replace('.', "-")).enabled(true).send().await.unwrap();
        let connection_group_id = group.connection_group().unwrap().id().unwrap().to_owned();
        let distribution_id = tenant_only_distribution(&cloudfront, domain, None, &[]).await;
        Self { cloudfront, zone_id, distribution_id, connection_group_id, domain: domain.to_owned(), certificate, other_certificate }
    }

    /// A DistributionTenant object: with `certificate`, else a managed certificate request.
    fn tenant(&self, name: &str, label: &str, certificate: Option<&str>, dns: bool) -> Value {
        let mut spec = json!({
            "distributionId": self.distribution_id,
            "connectionGroupId": self.connection_group_id,
            "domains": [{"domain": format!("{label}.{}", self.domain)}],
        });
        match certificate {
            Some(arn) => spec["customizations"] = json!({"certificate": {"arn": arn}}),
            None => spec["managedCertificateRequest"] = json!({"validationTokenHost": "self-hosted"}),
        }
        if dns {
            spec["dns"] = json!({"provider": "route53", "hostedZoneId": self.zone_id});
        }
        json!({"metadata": {"name": name}, "spec": spec})
    }

    /// Points the tenant at another certificate behind the operator's back.
    async fn attach_certificate_outside(&self, name: &str, arn: &str) {
        let current = self.cloudfront.get_distribution_tenant().identifier(name).send().await.unwrap();
        let tenant = current.distribution_tenant().unwrap();
        let domains: Vec<DomainItem> = tenant.domains().iter().map(|d| DomainItem::builder().domain(d.domain()).build().unwrap()).collect();
        self.cloudfront
            .update_distribution_tenant()
            .id(tenant.id().unwrap())
            .if_match(current.e_tag().unwrap())
            .distribution_id(tenant.distribution_id().unwrap())
            .set_domains(Some(domains))
            .customizations(Customizations::builder().certificate(Certificate::builder().arn(arn).build().unwrap()).build())
            .send()
            .await
            .unwrap();
    }
}

/// The test's objects of one of Blockwork's kinds, as JSON.
struct Kind {
    api: Api<DynamicObject>,
    resource: ApiResource,
}

impl Kind {
    fn new(client: &Client, namespace: &str, gvk: (&str, &str, &str), plural: &str) -> Self {
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(gvk.0, gvk.1, gvk.2), plural);
        Self { api: Api::namespaced_with(client.clone(), namespace, &resource), resource }
    }

    async fn create(&self, object: Value) {
        let mut object = object;
        object["apiVersion"] = json!(self.resource.api_version);
        object["kind"] = json!(self.resource.kind);
        self.api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    }

    async fn annotate(&self, name: &str, key: &str, value: &str) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    async fn delete(&self, name: &str) {
        self.api.delete(name, &DeleteParams::default()).await.unwrap();
    }

    async fn gone(&self, name: &str) -> bool {
        self.api.get_opt(name).await.unwrap().is_none()
    }

    /// Polls (up to 4 minutes: the binary runs with the seeds' intervals) until `check` holds.
    async fn wait(&self, name: &str, what: &str, operator: &Operator, check: impl Fn(&DynamicObject) -> bool) -> DynamicObject {
        operator
            .eventually(&format!("{name} to be {what}"), SETTLE, async || {
                let object = self.api.get(name).await.map_err(|e| e.to_string())?;
                if check(&object) { Ok(object) } else { Err(format!("status: {:#}", object.data["status"])) }
            })
            .await
    }
}

async fn wait_until<Fut: Future<Output = bool>>(what: &str, operator: &Operator, check: impl Fn() -> Fut) {
    operator.eventually(what, SETTLE, async || if check().await { Ok(()) } else { Err("not yet".into()) }).await
}

fn condition<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    object.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn condition_status<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a str> {
    condition(object, type_).and_then(|c| c["status"].as_str())
}

fn reason(object: &DynamicObject, type_: &str) -> Option<String> {
    condition(object, type_).and_then(|c| c["reason"].as_str()).map(str::to_owned)
}

fn condition_message(object: &DynamicObject, type_: &str) -> String {
    condition(object, type_).and_then(|c| c["message"].as_str()).unwrap_or_default().to_owned()
}
