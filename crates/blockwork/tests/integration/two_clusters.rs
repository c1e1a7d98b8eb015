#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 31 across two clusters: two control planes of the test environment, each with its own
//! `blockwork run` (`blockwork_testenv::clusters`), against the same moto behind one fault proxy
//! that counts every call of both: the same Cert manifests applied in both — a move to a new
//! cluster, and both adopting one certificate at once — end with one owner, no duplicate
//! certificate, no deletion and no flapping (ADR 0017, docs/adopting.md).

use std::path::Path;
use std::time::Duration;

use blockwork_cert::api::AdoptSpec;
use blockwork_cert::{Cert, CertSpec, CertState};
use blockwork_testenv::aws::{hosted_zone, request_certificate, sdk_config};
use blockwork_testenv::clusters::TwoClusters;
use blockwork_testenv::emulators::moto;
use blockwork_testenv::fault_proxy::FaultProxy;
use blockwork_testenv::harness::eventually;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const TIMEOUT: Duration = Duration::from_secs(120);

struct World {
    clusters: TwoClusters,
    proxy: FaultProxy,
    acm: aws_sdk_acm::Client,
    zone: String,
    args: Vec<String>,
}

impl World {
    /// Both clusters with the Cert CRD and one namespace, a hosted zone in moto; no operator yet.
    async fn new(prefix: &str) -> Self {
        let clusters = TwoClusters::new(prefix, &[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
        let moto = moto().await.unwrap().endpoint();
        let direct = sdk_config(&moto).await;
        let zone = format!("{}.test", clusters.namespace);
        let zone_id = hosted_zone(&aws_sdk_route53::Client::new(&direct), &zone).await;
        let proxy = FaultProxy::start(&moto).await.unwrap();
        let args = [
            "--controllers",
            "cert",
            "--namespaces",
            &clusters.namespace,
            "--log-level",
            "warn",
            "--aws-endpoint-url",
            &proxy.endpoint(),
            "--aws-region",
            "us-east-1",
            "--dns-zones",
            &format!("{zone}:{zone_id}"),
            // Each Cert confirms its certificate's owner at every look a second apart.
            "--ownership-check-interval",
            "1s",
        ]
        .map(str::to_owned)
        .to_vec();
        Self { clusters, proxy, acm: aws_sdk_acm::Client::new(&direct), zone, args }
    }

    async fn run_both(&mut self) {
        let args = self.args.clone();
        self.clusters.first.run(Path::new(BIN), &args).await.unwrap();
        self.clusters.second.run(Path::new(BIN), &args).await.unwrap();
    }

    fn spec(&self) -> CertSpec {
        CertSpec {
            domain_name: Some(format!("api.{}", self.zone)),
            ..CertSpec { service_name: "api".into(), environment: "prod".into(), ..CertSpec::default() }
        }
    }

    async fn owner_uid(&self, arn: &str) -> Option<String> {
        let listed = self.acm.list_tags_for_certificate().certificate_arn(arn).send().await.unwrap();
        listed.tags().iter().find(|t| t.key() == "blockwork.dev/owner-uid").and_then(|t| t.value()).map(str::to_owned)
    }

    async fn certificates(&self) -> Vec<String> {
        let domain = format!("api.{}", self.zone);
        let listed = self.acm.list_certificates().send().await.unwrap();
        listed
            .certificate_summary_list()
            .iter()
            .filter(|s| s.domain_name() == Some(domain.as_str()))
            .filter_map(|s| s.certificate_arn().map(str::to_owned))
            .collect()
    }
}

fn reason(cert: &Cert) -> Option<String> {
    cert.status.as_ref().and_then(|s| s.condition("Ready")).map(|c| c.reason.clone())
}

async fn wait_for(api: &Api<Cert>, what: &str, check: impl Fn(&Cert) -> bool) -> Cert {
    eventually(what, TIMEOUT, async || {
        let cert = api.get("api").await.map_err(|e| e.to_string())?;
        if check(&cert) { Ok(cert) } else { Err(format!("{:?}", cert.status)) }
    })
    .await
}

/// Wakes the Cert (an annotation change makes its controller look).
async fn touch(api: &Api<Cert>, value: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {"example.com/touched": value}}});
    api.patch("api", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

#[tokio::test]
async fn moving_to_a_new_cluster_with_the_same_manifests_requests_no_duplicate_and_releases_the_old_without_deleting() {
    let mut world = World::new("move").await;
    world.run_both().await;
    let (old, new) = world.clusters.apis::<Cert>();
    let deleting = CertSpec { delete_on_removal: true, ..world.spec() };

    // The old cluster's Cert requests its certificate.
    old.create(&PostParams::default(), &Cert::new("api", deleting.clone())).await.unwrap();
    let ready =
        wait_for(&old, "the old cluster's Cert Ready", |c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready))
            .await;
    let arn = ready.status.unwrap().observation.certificate_arn.unwrap();

    // The same manifest in the new cluster: no duplicate, advice to adopt.
    new.create(&PostParams::default(), &Cert::new("api", deleting.clone())).await.unwrap();
    wait_for(&new, "OwnedElsewhere in the new cluster", |c| reason(c).as_deref() == Some("OwnedElsewhere")).await;
    assert_eq!(world.proxy.calls("RequestCertificate"), 1, "no second certificate: {:?}", world.proxy.all_calls());

    // The documented path: adopt it there.
    let adopt = serde_json::json!({"spec": {"adopt": AdoptSpec { certificate_arn: arn.clone() }}});
    let adopting = new.patch("api", &PatchParams::default(), &Patch::Merge(adopt)).await.unwrap();
    wait_for(&new, "the new cluster's Cert Ready", |c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready)).await;
    assert_eq!(world.owner_uid(&arn).await, adopting.metadata.uid);

    // The old cluster's Cert notices, and its deletion deletes nothing.
    touch(&old, "moved").await;
    wait_for(&old, "OwnershipLost in the old cluster", |c| reason(c).as_deref() == Some("OwnershipLost")).await;
    let records_changed = world.proxy.calls("ChangeResourceRecordSets");
    old.delete("api", &DeleteParams::default()).await.unwrap();
    eventually("the old cluster's Cert to go", TIMEOUT, async || match old.get_opt("api").await {
        Ok(None) => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;

    assert_eq!(world.proxy.calls("RequestCertificate"), 1, "{:?}", world.proxy.all_calls());
    assert_eq!(world.proxy.calls("DeleteCertificate"), 0);
    assert_eq!(world.proxy.calls("ChangeResourceRecordSets"), records_changed, "no record deleted");
    assert_eq!(world.certificates().await, vec![arn.clone()], "one certificate for the names");
    assert_eq!(world.owner_uid(&arn).await, adopting.metadata.uid);
    assert_eq!(new.get("api").await.ok().and_then(|c| reason(&c)).as_deref(), Some("Available"));
}

#[tokio::test]
async fn two_clusters_adopting_one_certificate_at_once_end_with_exactly_one_owner_and_no_flapping() {
    let mut world = World::new("adopt-at-once").await;
    let arn = request_certificate(&world.acm, &[format!("api.{}", world.zone)]).await;
    world.run_both().await;
    let (first, second) = world.clusters.apis::<Cert>();
    let adopting = CertSpec { adopt: Some(AdoptSpec { certificate_arn: arn.clone() }), ..world.spec() };

    let cert = Cert::new("api", adopting);
    let post = PostParams::default();
    let (a, b) = tokio::join!(first.create(&post, &cert), second.create(&post, &cert));
    let uids = [a.unwrap().metadata.uid.unwrap(), b.unwrap().metadata.uid.unwrap()];
    let settled = |c: &Cert| matches!(reason(c).as_deref(), Some("Available" | "OwnershipLost"));
    wait_for(&first, "the first cluster's Cert to settle", settled).await;
    wait_for(&second, "the second cluster's Cert to settle", settled).await;

    // Each looks again, repeatedly, past several ownership intervals: the loser stays lost, the
    // winner stays the owner, nobody writes the tags again.
    for round in 0..3 {
        touch(&first, &round.to_string()).await;
        touch(&second, &round.to_string()).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let owner = world.owner_uid(&arn).await.unwrap();
    let winner = usize::from(owner == uids[1]);
    assert!(uids.contains(&owner), "the tags name one of the two: {owner}");
    let apis = [&first, &second];
    wait_for(apis[winner], "the owner Ready", |c| reason(c).as_deref() == Some("Available")).await;
    wait_for(apis[1 - winner], "the other OwnershipLost", |c| reason(c).as_deref() == Some("OwnershipLost")).await;
    let tag_writes = world.proxy.calls("AddTagsToCertificate");
    assert!(tag_writes <= 2, "each adopted once at most: {tag_writes}");

    for round in 3..5 {
        touch(&first, &round.to_string()).await;
        touch(&second, &round.to_string()).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert_eq!(world.proxy.calls("AddTagsToCertificate"), tag_writes, "no flapping: the lost one never takes it back");
    assert_eq!(world.owner_uid(&arn).await.as_deref(), Some(owner.as_str()));
    assert_eq!(world.proxy.calls("RequestCertificate"), 0);
    assert_eq!(world.proxy.calls("DeleteCertificate"), 0);
    assert_eq!(world.certificates().await, vec![arn]);
}

#[tokio::test]
async fn a_new_cluster_s_operator_killed_during_the_handover_ends_with_one_owner_and_no_second_tag_write_after_restart() {
    use blockwork_testenv::fault_proxy::{Fault, Operation};
    let mut world = World::new("adopt-kill").await;
    world.run_both().await;
    let (old, new) = world.clusters.apis::<Cert>();
    old.create(&PostParams::default(), &Cert::new("api", world.spec())).await.unwrap();
    let ready =
        wait_for(&old, "the old cluster's Cert Ready", |c| c.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready))
            .await;
    let arn = ready.status.unwrap().observation.certificate_arn.unwrap();

    // The tag write takes effect, and its answer is held: the new cluster's operator dies
    // before it hears it, so before the status records the adoption.
    world.proxy.inject(Operation::named("AddTagsToCertificate"), Fault::SlowResponse(Duration::from_secs(30)), 1);
    let adopting = CertSpec { adopt: Some(AdoptSpec { certificate_arn: arn.clone() }), ..world.spec() };
    let created = new.create(&PostParams::default(), &Cert::new("api", adopting)).await.unwrap();
    eventually("the tag write to take effect", TIMEOUT, async || match world.owner_uid(&arn).await {
        Some(uid) if Some(&uid) == created.metadata.uid.as_ref() => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    world.clusters.second.kill();
    world.clusters.second.restart().await.unwrap();

    wait_for(&new, "the new cluster's Cert Ready after the restart", |c| reason(c).as_deref() == Some("Available")).await;
    touch(&old, "after-kill").await;
    wait_for(&old, "OwnershipLost in the old cluster", |c| reason(c).as_deref() == Some("OwnershipLost")).await;
    assert_eq!(
        world.proxy.calls("AddTagsToCertificate"),
        1,
        "the restarted adoption finds its tags written: {:?}",
        world.proxy.all_calls()
    );
    assert_eq!(world.proxy.calls("RequestCertificate"), 1, "only the old cluster's own request");
    assert_eq!(world.proxy.calls("DeleteCertificate"), 0);
    assert_eq!(world.owner_uid(&arn).await, created.metadata.uid);
    assert_eq!(world.certificates().await, vec![arn]);
}
