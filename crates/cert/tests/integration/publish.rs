//! The certificate ARN published for consumers (a load balancer's Ingress): the ConfigMap
//! `<cert>-certificate`, against the real kube-apiserver and moto.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use blockwork_cert::CertState;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;

fn value<'a>(map: &'a ConfigMap, key: &str) -> Option<&'a str> {
    map.data.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn a_ready_cert_publishes_its_arn_updates_it_on_change_and_removes_it_with_the_cert() {
    let h = Harness::start("publish", &["main"]).await;
    let created = h.create("api", spec("api", "dev")).await;
    let cert = h.wait_for_state("api", CertState::Ready).await;
    let observed = &status(&cert).observation;
    let arn = observed.certificate_arn.clone().unwrap();
    let map = h.wait_for_configmap("api-certificate", "published", |m| m.is_some()).await.unwrap();
    assert_eq!(value(&map, "certificateArn"), Some(arn.as_str()));
    assert_eq!(value(&map, "domainName"), observed.domain_name.as_deref());
    assert_eq!(value(&map, "expirationDate").map(str::to_owned), observed.expiration_date.as_ref().map(|t| t.0.to_string()));
    assert_eq!(map.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("blockwork"));
    let owner = &map.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Cert", "api"));
    assert_eq!(Some(owner.uid.clone()), created.uid(), "owned by the Cert: garbage-collected with it");

    // A new domain means a new certificate: the ConfigMap follows it.
    h.merge("api", json!({"spec": {"environment": "qa"}})).await;
    let domain = format!("api-qa.{}", h.zones[0].name);
    let map = h
        .wait_for_configmap("api-certificate", "updated", |m| m.and_then(|m| value(m, "domainName")) == Some(domain.as_str()))
        .await
        .unwrap();
    let renamed = h.wait_for_state("api", CertState::Ready).await;
    let new_arn = status(&renamed).observation.certificate_arn.clone().unwrap();
    assert_ne!(new_arn, arn);
    assert_eq!(value(&map, "certificateArn"), Some(new_arn.as_str()));

    // This control plane runs no garbage collector: the finalizer removes it.
    h.delete_and_wait("api").await;
    h.wait_for_configmap("api-certificate", "deleted", |m| m.is_none()).await;
}

/// Issue 37: a publish made from a copy of the Cert read before its deletion (another process
/// draining a reconcile while the new one releases the Cert) does not leave the ConfigMap
/// behind, whether the Cert is still being deleted or already gone.
#[tokio::test]
async fn a_publish_racing_the_cert_s_deletion_leaves_no_configmap_behind() {
    let mut h = Harness::start("publish-race", &["main"]).await;
    let created = h.create("api", spec("api", "dev")).await;
    let cert = h.wait_for_state("api", CertState::Ready).await;
    h.wait_for_configmap("api-certificate", "published", |m| m.is_some()).await;
    let observation = status(&cert).observation.clone();
    // The controller is gone; a finalizer of the test's own keeps the Cert while it is deleted.
    h.controller.crash();
    h.merge("api", json!({"metadata": {"finalizers": ["acm.blockwork.dev/finalizer", "test/hold"]}})).await;
    h.api().delete("api", &kube::api::DeleteParams::default()).await.unwrap();
    h.api_of::<ConfigMap>().delete("api-certificate", &Default::default()).await.unwrap();

    // Being deleted: the late write is taken back.
    blockwork_cert::publish::publish(&h.client, &created, &observation).await.unwrap();
    assert!(h.api_of::<ConfigMap>().get_opt("api-certificate").await.unwrap().is_none(), "the Cert is being deleted");

    // Gone: likewise.
    h.merge("api", json!({"metadata": {"finalizers": null}})).await;
    h.wait_gone("api").await;
    blockwork_cert::publish::publish(&h.client, &created, &observation).await.unwrap();
    assert!(h.api_of::<ConfigMap>().get_opt("api-certificate").await.unwrap().is_none(), "the Cert is gone");
}

#[tokio::test]
async fn a_configmap_of_the_same_name_that_is_not_the_cert_s_is_left_alone_and_the_cert_says_so() {
    let h = Harness::start("publish-conflict", &["main"]).await;
    let theirs = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("api-certificate".into()), ..Default::default() },
        data: Some([("certificateArn".to_owned(), "someone-else".to_owned())].into()),
        ..ConfigMap::default()
    };
    h.api_of::<ConfigMap>().create(&PostParams::default(), &theirs).await.unwrap();
    h.create("api", spec("api", "dev")).await;
    let cert = h
        .wait_for("api", "reporting the conflict", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.condition("Synced"))
                .is_some_and(|c| c.status == "False" && c.message.contains("does not belong"))
        })
        .await;
    assert_eq!(status(&cert).observation.state, Some(CertState::Ready), "the certificate itself is fine");
    let map = h.api_of::<ConfigMap>().get("api-certificate").await.unwrap();
    assert_eq!(value(&map, "certificateArn"), Some("someone-else"));

    // Deleting the Cert leaves the other ConfigMap too.
    h.delete_and_wait("api").await;
    assert!(h.api_of::<ConfigMap>().get_opt("api-certificate").await.unwrap().is_some());
}
