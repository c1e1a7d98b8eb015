//! The AWS layer against moto, through the fault proxy: Route 53 batching and ownership, the
//! certificate listing shared by its readers, and the process's quota model holding where a
//! client without it is throttled by the proxy's emulation of AWS's buckets.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockwork_aws::acm::{Acm, AcmConfig, CertificateRequest, Freshness};
use blockwork_aws::quota::{Quotas, Service};
use blockwork_aws::route53::{BatchPolicy, Deletion, Record, Zone};
use blockwork_aws::{Aws, AwsConfig, AwsMetrics, Principal, RetryPolicy};
use blockwork_testenv::aws::{hosted_zone, layer_config, sdk_config};
use blockwork_testenv::emulators::moto;
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};

/// A layer through `proxy` with `quotas` (the process's share) and a batch policy.
async fn layer(proxy: &FaultProxy, quotas: Quotas, batch: BatchPolicy) -> Arc<Aws> {
    let config = AwsConfig {
        region: Some("us-east-1".into()),
        endpoint_url: Some(proxy.endpoint()),
        quotas,
        retry: RetryPolicy { base_delay: Duration::from_millis(20), max_delay: Duration::from_millis(200), max_retries: 3 },
        route53_batch: batch,
        ..AwsConfig::default()
    };
    Aws::with_sdk_config(config, sdk_config(&proxy.endpoint()).await, Arc::new(AwsMetrics::unregistered()))
}

/// Quotas far above what a test needs.
fn generous() -> Quotas {
    layer_config().quotas
}

/// A hosted zone of its own in moto (straight, not through the proxy).
async fn zone(name: &str) -> (String, aws_sdk_route53::Client) {
    let route53 = aws_sdk_route53::Client::new(&sdk_config(&moto().await.unwrap().endpoint()).await);
    (hosted_zone(&route53, &format!("{name}-{}.test", uuid_suffix())).await, route53)
}

fn uuid_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

async fn zone_name(route53: &aws_sdk_route53::Client, id: &str) -> String {
    route53.get_hosted_zone().id(id).send().await.unwrap().hosted_zone.unwrap().name.trim_end_matches('.').to_owned()
}

/// A zone of its own behind a fault proxy, and a layer batching its changes (300 ms to gather,
/// no background interval to speak of).
struct Batched {
    proxy: FaultProxy,
    aws: Arc<Aws>,
    id: String,
    route53: aws_sdk_route53::Client,
    name: String,
}

async fn batched(zone_prefix: &str) -> Batched {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy { gather: Duration::from_millis(300), interval: Duration::from_secs(60) }).await;
    let (id, route53) = zone(zone_prefix).await;
    let name = zone_name(&route53, &id).await;
    Batched { proxy, aws, id, route53, name }
}

fn cname(name: &str, value: &str) -> Record {
    Record { name: name.to_owned(), value: value.to_owned(), ttl: 300 }
}

async fn cnames(route53: &aws_sdk_route53::Client, zone: &str) -> Vec<(String, String)> {
    let sets = route53.list_resource_record_sets().hosted_zone_id(zone).send().await.unwrap();
    let mut found: Vec<(String, String)> = sets
        .resource_record_sets()
        .iter()
        .filter(|s| *s.r#type() == aws_sdk_route53::types::RrType::Cname)
        .map(|s| (s.name().trim_end_matches('.').to_owned(), s.resource_records()[0].value().to_owned()))
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn concurrent_changes_to_one_zone_go_in_one_request_and_share_its_status() {
    let Batched { proxy, aws, id, route53, name } = batched("batch").await;
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let writes = (0..10).map(|i| {
        let (records, zone) = (Arc::clone(&records), zone.clone());
        let record = cname(&format!("r{i}.{name}"), "target.example.net");
        async move { records.upsert(if i % 2 == 0 { "cert" } else { "tenant" }, &zone, vec![record]).await.unwrap() }
    });
    let ids = futures::future::join_all(writes).await;
    assert_eq!(proxy.calls("ChangeResourceRecordSets"), 1, "ten requests, one call: {:?}", proxy.all_calls());
    assert!(ids.iter().all(|id| id == &ids[0] && id.is_some()), "one change id for all: {ids:?}");
    assert_eq!(cnames(&route53, &id).await.len(), 10);
    let change = ids[0].clone().unwrap();
    let statuses = futures::future::join_all((0..10).map(|_| records.in_sync("tenant", &zone, &change))).await;
    assert!(statuses.iter().all(|s| *s.as_ref().unwrap()), "moto reports INSYNC");
    assert_eq!(proxy.calls("GetChange"), 1, "one GetChange for every waiter: {:?}", proxy.all_calls());
}

/// A batch is signed by one principal: changes of two namespaces' identities in one zone go in
/// two requests (CloudTrail attributes each to its namespace), one at a time.
#[tokio::test]
async fn changes_made_as_two_principals_go_in_a_request_each() {
    let Batched { proxy, aws, id, route53, name } = batched("principals").await;
    let records = aws.records();
    let writes = (0..6).map(|i| {
        let principal = Principal::new(if i % 2 == 0 { "team-a" } else { "team-b" }, None);
        let (records, zone) = (Arc::clone(&records), Zone::new(&id, principal));
        let record = cname(&format!("p{i}.{name}"), "target.example.net");
        async move { records.upsert("cert", &zone, vec![record]).await.unwrap() }
    });
    futures::future::join_all(writes).await;
    assert_eq!(proxy.calls("ChangeResourceRecordSets"), 2, "one request per principal: {:?}", proxy.all_calls());
    assert_eq!(aws.metrics().calls_as("team-a", Service::Route53, "ChangeResourceRecordSets"), 1);
    assert_eq!(cnames(&route53, &id).await.len(), 6);
}

#[tokio::test]
async fn a_refused_change_fails_only_its_own_request() {
    let Batched { proxy, aws, id, route53, name } = batched("split").await;
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let write = |record: Record| {
        let (records, zone) = (Arc::clone(&records), zone.clone());
        async move { records.upsert("cert", &zone, vec![record]).await.map(|_| ()) }
    };
    // A name outside the zone: Route 53 refuses the whole batch for it (InvalidChangeBatch).
    let outside = write(cname("www.elsewhere.test", "target.example.net"));
    let goods = futures::future::join_all((0..5).map(|i| write(cname(&format!("ok{i}.{name}"), "target.example.net"))));
    let (goods, refused) = tokio::join!(goods, outside);
    assert!(goods.iter().all(Result::is_ok), "{goods:?}");
    assert_eq!(refused.unwrap_err().code.as_deref(), Some("InvalidChangeBatch"));
    assert_eq!(cnames(&route53, &id).await.len(), 5, "the neighbours were written");
    assert!(proxy.calls("ChangeResourceRecordSets") > 1, "refused, then searched: {:?}", proxy.all_calls());
}

/// Issue 37: IAM refuses a whole ChangeResourceRecordSets when a policy denies any name in it;
/// the batch is searched for the denied change as a refused one is, so the neighbours are
/// written at once and only the denied change fails (terminally, for its own object).
#[tokio::test]
async fn a_change_whose_name_iam_denies_fails_alone_and_its_batch_neighbours_are_written() {
    let Batched { proxy, aws, id, route53, name } = batched("denied").await;
    proxy.deny_record_names(&[&format!("secret.{name}")]);
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let writes = (0..8).map(|i| {
        let (records, zone) = (Arc::clone(&records), zone.clone());
        let label = if i == 5 { "secret".to_owned() } else { format!("r{i}") };
        let record = cname(&format!("{label}.{name}"), "target.example.net");
        async move { records.upsert("tenant", &zone, vec![record]).await }
    });
    let results = futures::future::join_all(writes).await;
    for (i, result) in results.iter().enumerate() {
        match result {
            Err(error) if i == 5 => {
                assert_eq!((error.code.as_deref(), error.class), (Some("AccessDenied"), blockwork_aws::ErrorClass::Terminal));
                assert!(!error.message.contains("123456789012"), "sanitized: {error}");
            }
            Ok(_) if i != 5 => {}
            other => panic!("change {i}: {other:?}"),
        }
    }
    assert_eq!(cnames(&route53, &id).await.len(), 7, "every change but the denied one is in the zone");
    let requests = proxy.calls("ChangeResourceRecordSets");
    assert!(requests <= 1 + 4, "the batch of 8 and at most log2(8) + 1 more: {requests}");
}

/// Issue 37: a zone's batches are a call its objects share. While they fail (a 503 past the
/// layer's retries), every object with a change in them is told the same wait — the zone, AWS's
/// answer, since when — at each retry, so none writes a retry count of its own; the first batch
/// that goes through ends it.
#[tokio::test]
async fn objects_whose_batch_keeps_failing_are_told_one_wait_for_the_whole_outage() {
    let Batched { proxy, aws, id, name, .. } = batched("outage").await;
    proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::ServerError(503), usize::MAX);
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let attempt = || {
        futures::future::join_all((0..3).map(|i| {
            let (records, zone) = (Arc::clone(&records), zone.clone());
            let record = cname(&format!("o{i}.{name}"), "target.example.net");
            async move { records.upsert("cert", &zone, vec![record]).await.unwrap_err() }
        }))
    };
    let first = attempt().await;
    let told = &first[0];
    assert_eq!(told.code.as_deref(), Some(blockwork_aws::shared::SHARED_CALL_FAILING), "{told}");
    for said in [format!("hosted zone {id}"), "ServiceUnavailable".to_owned(), "has been failing since".to_owned()] {
        assert!(told.message.contains(&said), "{said}: {told}");
    }
    assert!(first.iter().all(|error| error == told), "every object is told the same: {first:?}");
    let again = attempt().await;
    assert!(again.iter().all(|error| error == told), "a retry during the outage, the same words (no new status write): {again:?}");
    proxy.clear();
    let written = records.upsert("cert", &zone, vec![cname(&format!("o0.{name}"), "target.example.net")]).await;
    assert!(written.as_ref().is_ok_and(Option::is_some), "the outage over, the changes go through: {written:?}");
    // A second later (the wait names its start to the second), a new outage is a new wait.
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::ServerError(503), usize::MAX);
    let later = attempt().await;
    assert_eq!(later[0].code, told.code);
    assert_ne!(later[0].message, told.message, "told since the new outage's start, not the old one's");
}

/// Issue 37: a record the status lists but that was never written (its write was lost with a
/// killed process) is not there to delete: no DELETE is sent for it, and it counts as gone.
#[tokio::test]
async fn a_record_that_is_not_there_gets_no_delete_and_counts_as_gone() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let (id, route53) = zone("absent").await;
    let name = zone_name(&route53, &id).await;
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let never_written = cname(&format!("_never.{name}"), "_x.acm-validations.aws.");
    let deletions = records.delete("cert", &zone, vec![never_written]).await.unwrap();
    assert_eq!(deletions, [Deletion::NotFound]);
    assert_eq!(proxy.calls("ChangeResourceRecordSets"), 0, "no DELETE without a record to delete: {:?}", proxy.all_calls());
}

#[tokio::test]
async fn a_record_is_deleted_only_with_the_value_written() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let (id, route53) = zone("owned").await;
    let name = zone_name(&route53, &id).await;
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    let ours = cname(&format!("ours.{name}"), "target.example.net");
    let repointed = cname(&format!("repointed.{name}"), "target.example.net");
    records.upsert("tenant", &zone, vec![ours.clone(), repointed.clone()]).await.unwrap();
    // Someone points one elsewhere.
    records.upsert("someone", &zone, vec![cname(&repointed.name, "elsewhere.example.net")]).await.unwrap();
    let before = proxy.calls("ChangeResourceRecordSets");
    let deletions = records.delete("tenant", &zone, vec![ours, repointed.clone()]).await.unwrap();
    assert_eq!(deletions, [Deletion::Deleted, Deletion::NotFound]);
    assert_eq!(cnames(&route53, &id).await, [(repointed.name, "elsewhere.example.net".to_owned())]);
    assert_eq!(proxy.calls("ChangeResourceRecordSets") - before, 1, "one DELETE, of the record still ours");
}

#[tokio::test]
async fn lookups_read_the_zone_once_and_compare_names_in_the_normal_form() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let (id, route53) = zone("lookup").await;
    let name = zone_name(&route53, &id).await;
    let records = aws.records();
    let zone = Zone::new(&id, Principal::operator());
    records
        .upsert("cert", &zone, vec![cname(&format!("*.{name}"), "wild.example.net"), cname(&format!("a.{name}"), "a.example.net")])
        .await
        .unwrap();
    let before = proxy.calls("ListResourceRecordSets");
    let names = [format!("*.{name}."), format!("A.{}", name.to_uppercase()), format!("missing.{name}")];
    let (first, second) = tokio::join!(records.lookup("cert", &zone, &names), records.lookup("cert", &zone, &names));
    let found: Vec<Option<String>> = first.unwrap().into_iter().map(|r| r.map(|r| r.value)).collect();
    assert_eq!(found, [Some("wild.example.net".to_owned()), Some("a.example.net".to_owned()), None]);
    assert_eq!(second.unwrap().len(), 3);
    assert_eq!(proxy.calls("ListResourceRecordSets") - before, 1, "two lookups at once, one listing");
}

#[tokio::test]
async fn background_writes_are_told_when_done() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy { gather: Duration::from_millis(50), interval: Duration::from_millis(500) }).await;
    let (id, route53) = zone("background").await;
    let name = zone_name(&route53, &id).await;
    let records = aws.records();
    let mut completions = records.completions();
    let record = cname(&format!("_v.{name}."), "_x.acm-validations.aws.");
    records.upsert_in_background("cert", &Zone::new(&id, Principal::operator()), vec![record.clone()]);
    assert!(matches!(
        records.written(&id, &record.name),
        Some(blockwork_aws::route53::Written::Queued | blockwork_aws::route53::Written::Done(_))
    ));
    let done = tokio::time::timeout(Duration::from_secs(30), completions.recv()).await.unwrap().unwrap();
    assert_eq!(done.value, [(id.clone(), format!("_v.{name}"))]);
    assert!(matches!(records.written(&id, &record.name), Some(blockwork_aws::route53::Written::Done(_))));
    assert_eq!(cnames(&route53, &id).await.len(), 1);
}

#[tokio::test]
async fn prior_request_not_complete_is_waited_out_per_zone() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let (id, route53) = zone("prior").await;
    let name = zone_name(&route53, &id).await;
    proxy.inject(Operation::named("ChangeResourceRecordSets"), Fault::PriorRequestNotComplete, 2);
    aws.records()
        .upsert("tenant", &Zone::new(&id, Principal::operator()), vec![cname(&format!("p.{name}"), "t.example.net")])
        .await
        .unwrap();
    assert_eq!(proxy.calls("ChangeResourceRecordSets"), 3);
    assert_eq!(cnames(&route53, &id).await.len(), 1);
}

#[tokio::test]
async fn readers_missing_the_certificate_listing_at_once_share_one_sweep() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let acm = Acm::new(&aws, "cert", None, Principal::operator(), AcmConfig::default());
    let request = CertificateRequest {
        domain: format!("l{}.example.com", uuid_suffix()),
        sans: Vec::new(),
        token: uuid_suffix(),
        tags: Vec::new(),
        exportable: false,
        authority: None,
    };
    let arn = acm.request(&Principal::operator(), &request).await.unwrap();
    let listings = futures::future::join_all((0..6).map(|_| acm.list_certificates(Freshness::Recent))).await;
    assert!(listings.iter().all(|l| l.as_ref().unwrap().iter().any(|(_, a)| *a == arn)));
    assert_eq!(proxy.calls("ListCertificates"), 1, "six readers, one sweep: {:?}", proxy.all_calls());
    acm.list_certificates(Freshness::Recent).await.unwrap();
    assert_eq!(proxy.calls("ListCertificates"), 1, "a recent listing is reused");
    acm.list_certificates(Freshness::Current).await.unwrap();
    assert_eq!(proxy.calls("ListCertificates"), 2, "a current one is swept after the call began");
}

/// Issue 37: while the certificate listing fails, its readers are told at once (the same words
/// for each, none kept in the sweep's retries), the background sweeps retry it without waiting
/// for the next sweep interval, and the sweep that succeeds again is told to the followers.
#[tokio::test]
async fn a_failing_listing_is_told_to_its_readers_at_once_and_retried_by_the_background_sweeps() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let config = AcmConfig { sweep: Duration::from_secs(3600), busy_sweep: Duration::from_millis(100), ..AcmConfig::default() };
    let acm = Acm::new(&aws, "cert", None, Principal::operator(), config);
    acm.list_certificates(Freshness::Current).await.unwrap();
    let sweeps = tokio::spawn(Arc::clone(&acm).keep_swept());
    let mut changes = acm.changes();
    // More failures than the layer retries (1 + 3 attempts): a sweep fails for good.
    proxy.inject(Operation::named("ListCertificates"), Fault::ServerError(503), 6);
    let failed = acm.list_certificates(Freshness::Current).await.unwrap_err();
    assert_eq!((failed.code.as_deref(), failed.class), (Some("SharedCallFailing"), blockwork_aws::ErrorClass::Retryable), "{failed}");
    assert!(failed.message.contains("ServiceUnavailable") && failed.message.contains("has been failing since"), "{failed}");
    let told = futures::future::join_all((0..5).map(|_| acm.list_certificates(Freshness::Current))).await;
    for again in &told {
        let again = again.as_ref().err();
        assert!(again.is_none_or(|again| again.message == failed.message), "the same words while it fails: {again:?}");
    }
    // The background sweeps retry it (the next interval is an hour away), and tell when it answers.
    let recovered = tokio::time::timeout(Duration::from_secs(30), changes.recv()).await;
    assert!(recovered.is_ok_and(|told| told.is_ok()), "the sweep that succeeded again is told");
    acm.list_certificates(Freshness::Recent).await.unwrap();
    sweeps.abort();
}

#[tokio::test]
async fn a_sweep_tells_which_certificates_changed() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let aws = layer(&proxy, generous(), BatchPolicy::default()).await;
    let acm = Acm::new(&aws, "cert", None, Principal::operator(), AcmConfig::default());
    let request = CertificateRequest {
        domain: format!("c{}.example.com", uuid_suffix()),
        sans: Vec::new(),
        token: uuid_suffix(),
        tags: Vec::new(),
        exportable: false,
        authority: None,
    };
    let arn = acm.request(&Principal::operator(), &request).await.unwrap();
    acm.list_certificates(Freshness::Current).await.unwrap();
    let mut changes = acm.changes();
    proxy.set_certificate_status(&arn, "REVOKED");
    acm.list_certificates(Freshness::Current).await.unwrap();
    let changed = changes.try_recv().unwrap().value;
    assert!(changed.contains(&arn), "{changed:?}");
    assert_eq!(acm.summary(&arn, Freshness::Recent).await.unwrap().unwrap().status, blockwork_aws::acm::AcmStatus::Revoked);
}

/// The proxy enforces AWS's buckets: a client that paces each hosted zone on its own (the seed's
/// "5 TPS per zone", here three per second for each of eight zones) is throttled, because
/// Route 53's buckets are the account's; the layer, drawing the same calls from the account's
/// buckets, is not.
#[tokio::test]
async fn the_throttling_emulator_throttles_per_zone_pacing_and_not_the_layer() {
    let proxy = FaultProxy::start(&moto().await.unwrap().endpoint()).await.unwrap();
    let (id, _) = zone("emulated").await;
    proxy.enforce_quotas(Quotas::aws());
    let direct = aws_sdk_route53::Client::new(&sdk_config(&proxy.endpoint()).await);
    const ZONES: usize = 8;
    const SECONDS: u64 = 6;
    // Per-zone pacing: each "zone" gets 3 calls a second (24 a second in all) after a burst of 5.
    // Each call is sent at its time on the schedule, not after the previous answer: the demand is
    // the pacing's (184 calls in 6 s against the account's 50 + 10 a second) however slowly the
    // shared emulator answers on a loaded machine (waiting for answers, 109 calls were sent).
    let paced = (0..ZONES).flat_map(|_| {
        (0..5 + 3 * SECONDS).map(|call| {
            let (direct, id) = (direct.clone(), id.clone());
            let at = Duration::from_millis(333 * call.saturating_sub(4));
            async move {
                tokio::time::sleep(at).await;
                let _ = direct.list_resource_record_sets().hosted_zone_id(&id).max_items(1).send().await;
            }
        })
    });
    futures::future::join_all(paced).await;
    let throttled = proxy.throttled("ListResourceRecordSets");
    assert!(throttled > 0, "per-zone pacing overdraws the account's bucket: {:?}", proxy.all_calls());

    // The same demand through the layer, at AWS's quotas times the default safety factor.
    proxy.clear();
    proxy.enforce_quotas(Quotas::aws());
    let aws = layer(&proxy, Quotas::aws().scaled(blockwork_aws::quota::DEFAULT_SAFETY_FACTOR).unwrap(), BatchPolicy::default()).await;
    let client = aws.route53("tenant", &Principal::operator()).await.unwrap();
    let account = Principal::operator().account();
    let started = Instant::now();
    let layered = (0..ZONES).map(|_| {
        let (aws, client, account, id) = (Arc::clone(&aws), client.clone(), account.clone(), id.clone());
        async move {
            while started.elapsed() < Duration::from_secs(SECONDS) {
                let call = blockwork_aws::Call {
                    callers: &["tenant"],
                    identity: blockwork_aws::OPERATOR,
                    scope: blockwork_aws::Scope::new(account.clone(), Service::Route53, None),
                    operation: "ListResourceRecordSets",
                    changes: 0,
                };
                aws.call(call, || async {
                    client
                        .list_resource_record_sets()
                        .hosted_zone_id(&id)
                        .max_items(1)
                        .send()
                        .await
                        .map_err(|e| blockwork_aws::classify_sdk_error("ListResourceRecordSets", &e))
                })
                .await
                .unwrap();
            }
        }
    });
    futures::future::join_all(layered).await;
    assert_eq!(proxy.throttled("ListResourceRecordSets"), 0, "the layer stays within AWS's buckets: {:?}", proxy.all_calls());
    assert!(proxy.calls("ListResourceRecordSets") > 40, "and still calls at the account's rate: {:?}", proxy.all_calls());
}
