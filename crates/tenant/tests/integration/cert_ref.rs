//! A DistributionTenant that names its Cert (`spec.customizations.certificate.certRef`, issue 40):
//! the tenant and Cert controllers in one test process against a real kube-apiserver, MiniStack's
//! CloudFront (through `h.proxy`) and moto's ACM and Route 53 (through `h.dns_proxy`: the tenant's
//! ACM calls go there too, where the Cert's certificates are), every call counted at the proxies.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::{Harness, condition};
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Seed};
use blockwork_cert::{Cert, CertArgs, CertConfig, CertMetrics, CertSpec, CertState};
use blockwork_runtime::{Namespaces, RuntimeMetrics};
use blockwork_tenant::DistributionTenantSpec;
use blockwork_tenant::api::{CertRef, CertificateRef, Customizations};
use blockwork_testenv::aws::{layer_config, sdk_config};
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, eventually};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::json;

/// The tenant harness, its controller's ACM at moto, and a Cert controller beside it.
struct Composed {
    /// Crashed before the harness goes (fields drop in order).
    _certs_controller: ControllerTask,
    h: Harness,
    certs: Api<Cert>,
}

impl Composed {
    /// Certs are requested in `region` (the installation's, `--aws-region`).
    async fn start(prefix: &str, region: &str) -> Self {
        let mut h = Harness::start(prefix).await;
        h.plane.install_crds(&[blockwork_cert::crd()]).await.unwrap();
        h.use_acm(&h.dns_proxy.endpoint()).await;
        // The operator's intervals; the certificate listing swept quickly (its sweeps wake the Certs).
        let zones = format!("{}.example.com:{}", h.namespace, h.zone_id);
        let config = CertConfig {
            acm: blockwork_aws::acm::AcmConfig {
                sweep: Duration::from_secs(2),
                busy_sweep: Duration::from_millis(200),
                ..blockwork_aws::acm::AcmConfig::default()
            },
            ..CertConfig::from_args(&CertArgs { dns_zones: zones, ..CertArgs::default() }).unwrap()
        };
        let endpoint = h.dns_proxy.endpoint();
        let aws_config = AwsConfig { endpoint_url: Some(endpoint.clone()), region: Some(region.to_owned()), ..layer_config() };
        let mut registry = Registry::default();
        let sdk = sdk_config(&endpoint).await.to_builder().region(aws_config::Region::new(region.to_owned())).build();
        let aws = Aws::with_sdk_config(aws_config, sdk, Arc::new(AwsMetrics::register(&mut registry, &[Seed::Cert])));
        let (metrics, runtime) = (CertMetrics::register(&mut registry), RuntimeMetrics::register(&mut registry));
        let mut controller = ControllerTask::default();
        controller.start(blockwork_cert::run(
            h.client.clone(),
            config,
            aws,
            Arc::clone(&h.identities),
            runtime,
            metrics,
            Namespaces::Only(vec![h.namespace.clone()]),
            4,
            std::future::pending(),
        ));
        let certs = Api::namespaced(h.client.clone(), &h.namespace);
        Self { _certs_controller: controller, h, certs }
    }

    /// A Cert for `www` of the test's zone, and `sans` of it.
    async fn create_cert(&self, name: &str, label: &str, sans: &[&str], delete_on_removal: bool) {
        let spec = CertSpec {
            service_name: name.to_owned(),
            environment: "prod".to_owned(),
            domain_name: Some(self.h.domain(label)),
            subject_alternative_names: sans.iter().map(|s| self.h.domain(s)).collect(),
            delete_on_removal,
            ..CertSpec::default()
        };
        self.certs.create(&PostParams::default(), &Cert::new(name, spec)).await.unwrap();
    }

    async fn wait_cert(&self, name: &str, what: &str, done: impl Fn(&Cert) -> bool) -> Cert {
        eventually(&format!("Cert {name}: {what}"), TIMEOUT, async || match self.certs.get_opt(name).await.unwrap() {
            Some(cert) if done(&cert) => Ok(cert),
            other => Err(format!("{:?}", other.and_then(|c| c.status))),
        })
        .await
    }

    async fn wait_cert_ready(&self, name: &str) -> String {
        let ready = |c: &Cert| c.status.as_ref().is_some_and(|s| s.observation.state == Some(CertState::Ready));
        let cert = self.wait_cert(name, "Ready", ready).await;
        cert.status.unwrap().observation.certificate_arn.unwrap()
    }

    /// A tenant of `www` naming the Cert `cert`.
    fn tenant(&self, cert: &str, labels: &[&str]) -> DistributionTenantSpec {
        let certificate = CertificateRef { arn: None, cert_ref: Some(CertRef { name: cert.to_owned() }) };
        DistributionTenantSpec {
            customizations: Some(Customizations { certificate: Some(certificate), ..Customizations::default() }),
            ..self.h.spec(labels)
        }
    }

    /// The certificate CloudFront serves for the tenant `name`.
    async fn served(&self, name: &str) -> Option<String> {
        let (tenant, _) = self.h.aws_tenant(name).await?;
        tenant.customizations().and_then(|c| c.certificate()).map(|c| c.arn().to_owned())
    }

    /// Whether moto still has the certificate `arn`.
    async fn exists(&self, arn: &str) -> bool {
        let acm = aws_sdk_acm::Client::new(&sdk_config(&blockwork_testenv::emulators::moto().await.unwrap().endpoint()).await);
        acm.describe_certificate().certificate_arn(arn).send().await.is_ok()
    }
}

fn tenant_writes(h: &Harness) -> usize {
    h.proxy.calls("CreateDistributionTenant") + h.proxy.calls("UpdateDistributionTenant")
}

#[tokio::test]
async fn a_tenant_created_before_its_cert_waits_without_polling_and_is_ready_after_it() {
    let c = Composed::start("dt-cert-before", "us-east-1").await;
    let h = &c.h;
    h.create("shop-before", c.tenant("shop", &["www"])).await;
    let waiting =
        h.wait_for("shop-before", "waiting for its Cert", |t| condition(t, "Ready").is_some_and(|r| r.1 == "DependenciesNotReady")).await;
    let message = condition(&waiting, "Ready").unwrap().2;
    assert_eq!(message, "waiting for Cert shop: not found");
    // Woken by the Cert's watch, not polled: nothing is asked of CloudFront while it waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.proxy.calls("GetDistributionTenant"), 0, "{:?}", h.proxy.all_calls());

    c.create_cert("shop", "www", &[], false).await;
    let arn = c.wait_cert_ready("shop").await;
    let ready = h.wait_ready("shop-before").await;
    assert_eq!(c.served("shop-before").await.as_deref(), Some(arn.as_str()), "CloudFront serves the Cert's certificate");
    let status = ready.status.as_ref().unwrap();
    assert_eq!(status.observation.certificate_in_use.as_deref(), Some(arn.as_str()));
    assert!(status.last_applied_spec.as_deref().is_some_and(|applied| applied.contains(&arn)), "the ARN is applied as the spec's");
    assert_eq!(h.proxy.calls("CreateDistributionTenant"), 1, "{:?}", h.proxy.all_calls());
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 0, "{:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn a_name_added_to_the_cert_updates_the_tenant_once_and_the_old_certificate_goes_only_after() {
    let c = Composed::start("dt-cert-replaced", "us-east-1").await;
    let h = &c.h;
    c.create_cert("shop", "www", &[], true).await;
    h.create("shop-replaced", c.tenant("shop", &["www"])).await;
    let old = c.wait_cert_ready("shop").await;
    h.wait_ready("shop-replaced").await;
    assert_eq!(c.served("shop-replaced").await.as_deref(), Some(old.as_str()));
    // The tenant is held (paused) while the Cert replaces its certificate: the old one stays as
    // long as the tenant serves it, whatever the Cert does meanwhile.
    h.annotate("shop-replaced", "blockwork.dev/paused", Some("true")).await;
    let patch = json!({"spec": {"subjectAlternativeNames": [h.domain("api")]}});
    c.certs.patch("shop", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let replaced = c
        .wait_cert("shop", "Ready with a new certificate", |cert| {
            cert.status.as_ref().is_some_and(|s| {
                s.observation.state == Some(CertState::Ready) && s.observation.certificate_arn.as_deref().is_some_and(|arn| arn != old)
            })
        })
        .await;
    let new = replaced.status.as_ref().unwrap().observation.certificate_arn.clone().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cert = c.certs.get("shop").await.unwrap();
    assert_eq!(cert.status.unwrap().observation.previous_certificate_arns, std::slice::from_ref(&old), "kept while the tenant serves it");
    assert!(c.exists(&old).await, "the old certificate is not deleted");
    assert_eq!(h.dns_proxy.calls("DeleteCertificate"), 0, "{:?}", h.dns_proxy.all_calls());
    assert_eq!(c.served("shop-replaced").await.as_deref(), Some(old.as_str()));

    h.annotate("shop-replaced", "blockwork.dev/paused", None).await;
    h.wait_for("shop-replaced", "serving the new certificate", |t| {
        t.status.as_ref().and_then(|s| s.observation.certificate_in_use.as_deref()) == Some(new.as_str())
            && condition(t, "Ready").is_some_and(|r| r.0 == "True")
    })
    .await;
    assert_eq!(c.served("shop-replaced").await.as_deref(), Some(new.as_str()));
    assert_eq!(h.proxy.calls("UpdateDistributionTenant"), 1, "one update: {:?}", h.proxy.all_calls());
    c.wait_cert("shop", "the old certificate settled", |cert| {
        cert.status.as_ref().is_some_and(|s| s.observation.previous_certificate_arns.is_empty())
    })
    .await;
    assert!(!c.exists(&old).await, "deleted once the tenant moved to the new one");
    assert_eq!(h.dns_proxy.calls("DeleteCertificate"), 1, "{:?}", h.dns_proxy.all_calls());
}

#[tokio::test]
async fn a_cert_whose_names_do_not_cover_the_domains_is_refused_naming_the_field_with_no_write() {
    let c = Composed::start("dt-cert-narrow", "us-east-1").await;
    let h = &c.h;
    c.create_cert("other", "other", &[], false).await;
    c.wait_cert_ready("other").await;
    h.create("shop-narrow", c.tenant("other", &["www"])).await;
    let refused = h.wait_for("shop-narrow", "refused", |t| condition(t, "Ready").is_some_and(|r| r.1 == "CertificateSANMismatch")).await;
    assert_eq!(
        condition(&refused, "Ready").unwrap().2,
        format!("spec.customizations.certificate.certRef: Cert other's names do not cover the domains {}", h.domain("www"))
    );
    assert_eq!(tenant_writes(h), 0, "{:?}", h.proxy.all_calls());
    assert_eq!(h.proxy.calls("GetDistributionTenant"), 0, "refused before any call: {:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn a_cert_outside_us_east_1_is_refused_naming_the_field_with_no_write() {
    let c = Composed::start("dt-cert-region", "eu-west-1").await;
    let h = &c.h;
    c.create_cert("shop", "www", &[], false).await;
    let arn = c.wait_cert_ready("shop").await;
    assert!(arn.starts_with("arn:aws:acm:eu-west-1:"), "{arn}");
    h.create("shop-region", c.tenant("shop", &["www"])).await;
    let refused = h.wait_for("shop-region", "refused", |t| condition(t, "Ready").is_some_and(|r| r.1 == "InvalidSpec")).await;
    assert_eq!(
        condition(&refused, "Ready").unwrap().2,
        "spec.customizations.certificate.certRef: Cert shop's certificate is in eu-west-1, but CloudFront only uses certificates from us-east-1"
    );
    assert_eq!(tenant_writes(h), 0, "{:?}", h.proxy.all_calls());
}

#[tokio::test]
async fn deleting_a_cert_in_use_keeps_its_certificate_names_the_user_and_finishes_when_the_tenant_lets_go() {
    let c = Composed::start("dt-cert-held", "us-east-1").await;
    let h = &c.h;
    c.create_cert("shop", "www", &[], true).await;
    h.create("shop-held", c.tenant("shop", &["www"])).await;
    let arn = c.wait_cert_ready("shop").await;
    h.wait_ready("shop-held").await;

    c.certs.delete("shop", &DeleteParams::default()).await.unwrap();
    let held = c
        .wait_cert("shop", "held for its user", |cert| {
            cert.status.as_ref().and_then(|s| s.last_error.as_ref()).is_some_and(|e| e.reason == "HeldByUsers")
        })
        .await;
    let message = &held.status.as_ref().unwrap().last_error.as_ref().unwrap().message;
    assert!(message.contains("in use by DistributionTenant shop-held (named in spec.customizations.certificate.certRef; serves arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/"), "{message}");
    assert!(message.contains("remove the reference to this Cert from each user, or delete the users"), "{message}");
    // The event is published beside the status write, not before it: read until it is there.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events = blockwork_inspect::read::events_of(&h.client, &held).await.unwrap();
        if events.iter().any(|e| e.reason.as_deref() == Some("HeldByUsers") && e.type_.as_deref() == Some("Warning")) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no HeldByUsers Warning event: {events:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let explained = blockwork_inspect::read::report(
        &h.client,
        &h.namespace,
        blockwork_inspect::read::KindArg::Cert,
        "shop",
        &blockwork_inspect::read::default_keys(),
        jiff::Timestamp::now(),
    )
    .await
    .unwrap();
    let text = blockwork_inspect::render::explain(
        &blockwork_inspect::render::Explanation::of(explained, jiff::Timestamp::now()),
        jiff::Timestamp::now(),
    );
    assert!(text.contains("Used by:") && text.contains("DistributionTenant  shop-held"), "{text}");
    assert!(text.contains("HeldByUsers"), "{text}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(c.exists(&arn).await, "the certificate stays while the tenant serves it");
    assert_eq!(h.dns_proxy.calls("DeleteCertificate"), 0, "{:?}", h.dns_proxy.all_calls());
    // The tenant says its Cert is going away; CloudFront still serves the certificate.
    let told = h
        .wait_for("shop-held", "told its Cert is being deleted", |t| {
            condition(t, "Ready")
                .is_some_and(|r| r.1 == "DependenciesNotReady" && r.2 == "waiting for Cert shop to be Ready: it is being deleted")
        })
        .await;
    assert_eq!(told.status.unwrap().observation.certificate_in_use.as_deref(), Some(arn.as_str()));
    assert_eq!(c.served("shop-held").await.as_deref(), Some(arn.as_str()));

    // The tenant lets go: deleted, its CloudFront tenant with it; the Cert finishes.
    h.api().delete("shop-held", &DeleteParams::default()).await.unwrap();
    eventually("the Cert to be gone", TIMEOUT, async || match c.certs.get_opt("shop").await.unwrap() {
        None => Ok(()),
        Some(cert) => Err(format!("{:?}", cert.status)),
    })
    .await;
    assert!(!c.exists(&arn).await, "deleted with the Cert once no user is left");
    assert_eq!(h.dns_proxy.calls("DeleteCertificate"), 1, "{:?}", h.dns_proxy.all_calls());
}
