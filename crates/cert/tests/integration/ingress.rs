//! Ingresses that name Certs (issue 40): the Ingress controller beside the Cert controller, against
//! a real kube-apiserver and moto through the fault proxy. The load balancer's annotation written
//! by server-side apply under Blockwork's own field manager (a value someone else set is never
//! overwritten), followed through a replacement and removed with the annotation; a Cert made from
//! the TLS hosts, owned by the Ingress and garbage-collected with it; nothing made where the
//! namespace's AwsIdentity does not grant the hosts.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::{Harness, spec, status};
use blockwork_cert::ingress::annotations::{ALB_CERTIFICATE_ARN, CERTIFICATES, FROM_HOSTS};
use blockwork_cert::{Cert, CertConfig, CertState};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant};
use blockwork_runtime::Namespaces;
use blockwork_testenv::control_plane;
use blockwork_testenv::harness::{ControllerTask, TIMEOUT, TestNamespace, eventually};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The Cert controller with Ingresses among the users of Certs, and the Ingress controller.
struct Ingresses {
    _controller: ControllerTask,
    h: Harness,
    ingresses: Api<Ingress>,
}

impl Ingresses {
    async fn start(prefix: &str) -> Self {
        Self::start_in(TestNamespace::new(prefix).await).await
    }

    /// In `namespace`, on the control plane it is on.
    async fn start_in(namespace: TestNamespace<Cert>) -> Self {
        let h = Harness::start_on(namespace, &["a"], |config: &mut CertConfig, _| config.ingress_users = true).await;
        let operator_zones = blockwork_cert::zones::ZoneRegistry::new(h.zones.clone()).operator_zones();
        let mut controller = ControllerTask::default();
        let namespaces = Namespaces::Only(vec![h.namespace.clone()]);
        let metrics = blockwork_cert::ingress::metrics::IngressMetrics::register(&mut prometheus_client::registry::Registry::default());
        let identities = std::sync::Arc::clone(&h.identities);
        controller.start(blockwork_cert::ingress::run(
            h.client.clone(),
            identities,
            operator_zones,
            metrics,
            namespaces,
            4,
            std::future::pending(),
        ));
        let ingresses = Api::namespaced(h.client.clone(), &h.namespace);
        Self { _controller: controller, h, ingresses }
    }

    fn host(&self, label: &str) -> String {
        format!("{label}.{}", self.h.zones[0].name)
    }

    /// A Cert for `label` of the test's zone.
    async fn cert(&self, name: &str, label: &str) -> String {
        let spec = blockwork_cert::CertSpec { domain_name: Some(self.host(label)), delete_on_removal: true, ..spec(name, "prod") };
        self.h.create(name, spec).await;
        let ready = self.h.wait_for_state(name, CertState::Ready).await;
        status(&ready).observation.certificate_arn.clone().unwrap()
    }

    /// An Ingress of `hosts` (TLS) with `annotations`, its annotations written by `manager`.
    async fn ingress(&self, name: &str, annotations: serde_json::Value, hosts: &[String], manager: &str) {
        let ingress = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "ingressClassName": "alb",
                "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
                "tls": [{"hosts": hosts}],
            },
        });
        self.ingresses.patch(name, &PatchParams::apply(manager), &Patch::Apply(&ingress)).await.unwrap();
    }

    async fn annotation(&self, name: &str) -> Option<String> {
        self.ingresses.get(name).await.unwrap().metadata.annotations.unwrap_or_default().get(ALB_CERTIFICATE_ARN).cloned()
    }

    async fn wait_annotation(&self, name: &str, want: Option<&str>) {
        eventually(&format!("{ALB_CERTIFICATE_ARN} of {name} to be {want:?}"), TIMEOUT, async || {
            let seen = self.annotation(name).await;
            if seen.as_deref() == want { Ok(()) } else { Err(format!("{seen:?}")) }
        })
        .await;
    }
}

#[tokio::test]
async fn an_ingress_gets_its_certs_arns_follows_a_replacement_and_loses_them_with_the_annotation() {
    let i = Ingresses::start("ing-named").await;
    let (api, www) = (i.cert("api", "api").await, i.cert("www", "www").await);
    i.ingress("web", json!({CERTIFICATES: "www, api", "kubernetes.io/ingress.class": "alb"}), &[i.host("www")], "kubectl").await;
    i.wait_annotation("web", Some(&format!("{www},{api}"))).await;
    i.h.wait_for_event("web", "CertificatesWritten").await;

    // A name added to `www`: a new certificate, followed on the load balancer.
    let patch = json!({"spec": {"subjectAlternativeNames": [i.host("www2")]}});
    i.h.api().patch("www", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let replaced =
        i.h.wait_for("www", "Ready with a new certificate", |c| {
            c.status.as_ref().is_some_and(|s| {
                s.observation.state == Some(CertState::Ready) && s.observation.certificate_arn.as_deref().is_some_and(|a| a != www)
            })
        })
        .await;
    let www2 = status(&replaced).observation.certificate_arn.clone().unwrap();
    i.wait_annotation("web", Some(&format!("{www2},{api}"))).await;
    i.h.wait_for("www", "done with the replaced certificate", |c| status(c).observation.previous_certificate_arns.is_empty()).await;
    assert!(!i.h.certificate_exists(&www).await, "the old certificate went once the load balancer moved");

    // Deleting a Cert the Ingress names: held, naming the Ingress, until the annotation goes.
    i.h.api().delete("api", &DeleteParams::default()).await.unwrap();
    let held =
        i.h.wait_for("api", "held for the Ingress", |c| {
            c.status.as_ref().and_then(|s| s.last_error.as_ref()).is_some_and(|e| e.reason == "HeldByUsers")
        })
        .await;
    let message = &status(&held).last_error.as_ref().unwrap().message;
    assert!(message.contains("in use by Ingress web (named in the annotation blockwork.dev/certificates"), "{message}");
    assert!(i.h.certificate_exists(&api).await);
    let ingress = i.ingresses.get("web").await.unwrap();
    assert_eq!(ingress.metadata.annotations.unwrap()["kubernetes.io/ingress.class"], "alb", "the user's own annotations stay");

    // The annotation goes: only what Blockwork wrote is removed, and the Cert finishes.
    i.ingress("web", json!({"kubernetes.io/ingress.class": "alb"}), &[i.host("www")], "kubectl").await;
    i.wait_annotation("web", None).await;
    i.h.wait_gone("api").await;
    assert!(!i.h.certificate_exists(&api).await, "deleted once no user is left");
}

#[tokio::test]
async fn a_load_balancer_value_someone_else_set_is_not_overwritten_and_an_event_says_so() {
    let i = Ingresses::start("ing-conflict").await;
    i.cert("www", "www").await;
    let theirs = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0000-4000-8000-0000000000ff";
    i.ingress("web", json!({CERTIFICATES: "www", ALB_CERTIFICATE_ARN: theirs}), &[i.host("www")], "argocd").await;
    let told = i.h.wait_for_event("web", "AnnotationConflict").await;
    assert_eq!(told[0].type_, "Warning");
    assert!(told[0].note.contains("is set by someone else") && told[0].note.contains("argocd"), "{}", told[0].note);
    assert_eq!(i.annotation("web").await.as_deref(), Some(theirs), "not overwritten");
    // Theirs to remove: Blockwork's value goes in once it is gone.
    i.ingress("web", json!({CERTIFICATES: "www"}), &[i.host("www")], "argocd").await;
    let www = status(&i.h.get("www").await.unwrap()).observation.certificate_arn.clone().unwrap();
    i.wait_annotation("web", Some(&www)).await;
}

#[tokio::test]
async fn a_cert_made_from_the_tls_hosts_is_ready_on_the_load_balancer_and_goes_with_its_ingress() {
    // The garbage collector deletes any object whose owner is gone: on a control plane of its
    // own, so that it tidies nothing another test expects its operator to.
    let plane = control_plane::of("garbage-collection").await.unwrap();
    plane.start_garbage_collector().await.unwrap();
    let i = Ingresses::start_in(TestNamespace::on(plane, "ing-shim").await).await;
    let hosts = [i.host("shop"), i.host("www.shop")];
    i.ingress("shop", json!({FROM_HOSTS: "True"}), &hosts, "kubectl").await;
    let made = i.h.wait_for_state("shop", CertState::Ready).await;
    assert_eq!(made.spec.domain_name.as_deref(), Some(hosts[0].as_str()));
    assert_eq!(made.spec.subject_alternative_names, [hosts[1].clone()]);
    let owner = &made.metadata.owner_references.as_ref().unwrap()[0];
    let ingress = i.ingresses.get("shop").await.unwrap();
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Ingress", "shop", Some(true)));
    assert_eq!(Some(&owner.uid), ingress.metadata.uid.as_ref());
    let arn = status(&made).observation.certificate_arn.clone().unwrap();
    i.wait_annotation("shop", Some(&arn)).await;

    // The garbage collector deletes the Cert with its Ingress; its certificate goes with it.
    i.ingresses.delete("shop", &DeleteParams::default()).await.unwrap();
    i.h.wait_gone("shop").await;
    eventually("the certificate to be deleted", TIMEOUT, async || {
        if i.h.certificate_exists(&arn).await { Err("still in ACM".to_owned()) } else { Ok(()) }
    })
    .await;
}

#[tokio::test]
async fn an_ingress_in_a_namespace_without_the_grant_gets_nothing_and_an_event_says_why() {
    let i = Ingresses::start("ing-grant").await;
    // The namespace is granted only names under `granted.` of the zone.
    let zone = &i.h.zones[0];
    let mapping = AwsIdentitySpec {
        namespaces: vec![i.h.namespace.clone()],
        role_arn: None,
        external_id: None,
        hosted_zones: vec![HostedZoneGrant {
            id: zone.id.clone(),
            name: zone.name.clone(),
            domains: vec![i.host("granted")],
            ..HostedZoneGrant::default()
        }],
    };
    let identities: Api<AwsIdentity> = Api::all(i.h.client.clone());
    identities.create(&PostParams::default(), &AwsIdentity::new(&format!("id-{}", i.h.namespace), mapping)).await.unwrap();
    i.ingress("shop", json!({FROM_HOSTS: "true"}), &[i.host("shop")], "kubectl").await;
    let told = i.h.wait_for_event("shop", "CertificateNotMade").await;
    assert_eq!(told[0].type_, "Warning");
    assert!(told[0].note.contains(&i.host("shop")), "names the host: {}", told[0].note);
    assert!(i.h.get("shop").await.is_none(), "no Cert is made");
    assert!(i.h.certificates_for(&i.host("shop")).await.is_empty(), "nothing is requested from ACM");
    assert_eq!(i.h.proxy.calls("RequestCertificate"), 0);
    assert_eq!(i.annotation("shop").await, None);
    identities.delete(&format!("id-{}", i.h.namespace), &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn a_bad_annotation_is_a_warning_event_naming_the_accepted_values_and_nothing_is_done() {
    let i = Ingresses::start("ing-invalid").await;
    i.ingress("web", json!({FROM_HOSTS: "yes", "blockwork.dev/certificate": "www"}), &[i.host("www")], "kubectl").await;
    let told = i.h.wait_for_event("web", "InvalidAnnotation").await;
    assert_eq!(told[0].type_, "Warning");
    assert!(told[0].note.contains("blockwork.dev/certificate-from-hosts=\"yes\" is invalid: expected true or false"), "{}", told[0].note);
    assert!(told[0].note.contains("blockwork.dev/certificate=\"www\" is invalid: expected one of the annotations"), "{}", told[0].note);
    assert!(i.h.get("web").await.is_none(), "no Cert is made");
}
