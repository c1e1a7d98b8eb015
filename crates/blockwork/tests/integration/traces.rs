#![allow(clippy::unwrap_used, clippy::panic)]
//! Issue 32's traces, as a user turns them on: `blockwork run` with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! pointing at a real collector (Jaeger, `blockwork_testenv::collector`), the span trees read back
//! from the collector's query API.
//!
//! - a Cert created with a `traceparent` (as a CI tool applies it): its webhook call, and every
//!   reconcile until issuance as children of that parent, with the throttled ACM call retried,
//!   the validation records in a Route 53 batch linked to the reconcile that queued them, the
//!   reconcile the batch woke linked to it, the latency histograms' exemplars naming the trace,
//!   and no account id anywhere;
//! - a DistributionTenant updated: the reconcile the change woke, its CloudFront call and its
//!   status write;
//! - a rotation (over OTLP/gRPC): the reconcile of the source's first sight as the child of the
//!   source's `traceparent`, the rotation after it a trace of its own linked to it.
//!
//! Each test's operator exports under a service name of its own, so the tests share the
//! collector (and the control plane) and read only their own spans.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use blockwork_cert::{Cert, CertSpec, CertState, DnsZoneRef};
use blockwork_tenant::api::DomainName;
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};
use blockwork_testenv::collector::{self, Collector, Span, Tree};
use blockwork_testenv::commands::kubectl_ok;
use blockwork_testenv::emulators::{ACCOUNT_ID, ministack, moto};
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};
use blockwork_testenv::harness::eventually;
use blockwork_testenv::operator::Operator;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
/// Long enough for a loaded machine; a Cert is Ready within seconds on an idle one.
const TIMEOUT: Duration = Duration::from_secs(180);

/// A W3C trace context of the test's own, as a CI tool would set it: (trace id, span id, header).
fn traceparent() -> (String, String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let span_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    let header = format!("00-{trace_id}-{span_id}-01");
    (trace_id, span_id, header)
}

/// `blockwork run` exporting to `collector` under `service`, over `protocol`.
fn traced(operator: Operator, collector: &Collector, service: &str, grpc: bool) -> Operator {
    let endpoint = if grpc { collector.otlp_grpc() } else { collector.otlp_http() };
    operator
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", if grpc { "grpc" } else { "http/protobuf" })
        .env("OTEL_SERVICE_NAME", service)
        // Export every tenth of a second, not every five: the test reads them back at once.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
}

/// Polls the collector until `check` finds what it looks for in `service`'s spans.
async fn spans_until<T>(collector: &Collector, service: &str, what: &str, check: impl Fn(&[Span]) -> Result<T, String>) -> T {
    eventually(what, TIMEOUT, async || {
        let spans = collector.spans(service).await.map_err(|e| e.to_string())?;
        check(&spans).map_err(|missing| format!("{missing}; {} spans:\n{}", spans.len(), outline_all(&spans)))
    })
    .await
}

/// Every trace among `spans`, outlined.
fn outline_all(spans: &[Span]) -> String {
    let mut traces: Vec<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    traces.sort_unstable();
    traces.dedup();
    traces.iter().map(|t| format!("trace {t}:\n{}", Tree::of(spans, t).outline())).collect()
}

fn reconciles<'a>(spans: &'a [Span], kind: &str, name: &str) -> Vec<&'a Span> {
    let mut found: Vec<&Span> =
        spans.iter().filter(|s| s.name == format!("reconcile {kind}") && s.attribute("blockwork.name") == Some(name)).collect();
    found.sort_by_key(|s| s.start_unix_nano);
    found
}

/// No span says the account id (in a name, an attribute, or its status message).
fn assert_no_account_id(spans: &[Span]) {
    for span in spans {
        let said = format!("{} {:?} {}", span.name, span.attributes, span.status_message);
        assert!(!said.contains(ACCOUNT_ID), "a span tells the account id: {span:?}");
    }
}

#[tokio::test]
async fn a_cert_create_is_one_trace_under_its_traceparent_from_the_webhook_call_to_issuance() {
    let plane = blockwork_testenv::control_plane::of("traces").await.unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
    let namespace = plane.namespace("traces-cert").await.unwrap();
    let moto = moto().await.unwrap().endpoint();
    let route53 = aws_sdk_route53::Client::new(&blockwork_testenv::aws::sdk_config(&moto).await);
    let zone = format!("{namespace}.example.com");
    let zone_id = blockwork_testenv::aws::hosted_zone(&route53, &zone).await;
    let proxy = FaultProxy::start(&moto).await.unwrap();
    // ACM throttles the first RequestCertificate: the layer retries it after its backoff.
    proxy.inject(Operation::named("RequestCertificate"), Fault::Throttling, 1);
    let collector = collector::jaeger().await.unwrap();
    let service = Collector::service("cert");

    let operator = Operator::new(Path::new(BIN), plane.kubeconfig_path())
        .unwrap()
        .args(["--controllers", "cert", "--namespaces", &namespace])
        .args(["--aws-endpoint-url", &proxy.endpoint(), "--aws-region", "us-east-1", "--dns-zones", &format!("{zone}:{zone_id}")])
        // The runtime's plan, logged within each reconcile: its lines carry the trace id.
        .args(["--log-level", "info,blockwork_runtime=debug"]);
    let mut operator = traced(operator, collector, &service, false).start().unwrap();
    operator.wait_listening(Duration::from_secs(60)).await.unwrap();
    let registration = operator.manifests("webhooks", &["--controllers", "cert"]).unwrap();
    kubectl_ok(plane.kubeconfig_path(), &["apply", "--server-side", "--force-conflicts", "-f", "-"], registration.as_bytes()).unwrap();

    let (trace_id, parent_id, header) = traceparent();
    let mut cert = Cert::new(
        "traced",
        CertSpec {
            service_name: "api".into(),
            environment: "prod".into(),
            dns_zone: Some(DnsZoneRef { id: None, name: Some(zone.clone()) }),
            ..CertSpec::default()
        },
    );
    cert.metadata.annotations = Some(BTreeMap::from([("traceparent".to_owned(), header)]));
    let certs: Api<Cert> = Api::namespaced(plane.client(), &namespace);
    create_through_the_webhook(&certs, &cert).await;
    operator
        .eventually("the Cert Ready", TIMEOUT, async || {
            let cert = certs.get("traced").await.map_err(|e| e.to_string())?;
            let state = cert.status.as_ref().and_then(|s| s.observation.state);
            if state == Some(CertState::Ready) { Ok(()) } else { Err(format!("{state:?}")) }
        })
        .await;

    let spans = spans_until(collector, &service, "the Cert's trace up to issuance and its batch", |spans| {
        let ours: Vec<&Span> = reconciles(spans, "Cert", "traced").into_iter().filter(|s| s.trace_id == trace_id).collect();
        if ours.last().is_none_or(|s| s.attribute("blockwork.outcome") != Some("Succeeded")) {
            return Err("no reconcile of the trace ended Succeeded yet".into());
        }
        if !spans.iter().any(|s| s.name == "Route53 batch") {
            return Err("no Route 53 batch yet".into());
        }
        Ok(spans.to_vec())
    })
    .await;
    let tree = Tree::of(&spans, &trace_id);
    let outline = tree.outline();
    // The picture in docs/observability.md (`-- --nocapture` shows it).
    println!("the Cert's trace:\n{outline}\nevery trace of the operator:\n{}", outline_all(&spans));

    // Every reconcile until Ready is a child of the traceparent, each with its trigger and time
    // queued; the first was woken by the Cert's creation.
    let ours = reconciles(&spans, "Cert", "traced");
    let joined: Vec<&&Span> = ours.iter().filter(|s| s.trace_id == trace_id).collect();
    assert!(joined.len() >= 2, "the create's reconciles, in the traceparent's trace:\n{outline}");
    for reconcile in &joined {
        assert_eq!(reconcile.parent_span_id, parent_id, "a child of the traceparent:\n{outline}");
        assert!(reconcile.attribute("blockwork.queued_s").is_some(), "time queued: {reconcile:?}");
        assert!(reconcile.attribute("blockwork.trigger").is_some(), "trigger: {reconcile:?}");
        assert_eq!(reconcile.attribute("k8s.namespace.name"), Some(namespace.as_str()));
    }
    assert_eq!(joined[0].attribute("blockwork.trigger"), Some("object changed"), "{outline}");

    // The certificate's request: throttled once, then sent again, both in one reconcile.
    let requests: Vec<&&Span> = tree.spans.iter().filter(|s| s.name == "ACM/RequestCertificate").collect();
    assert_eq!(requests.len(), 2, "one throttled attempt and its retry:\n{outline}");
    let (throttled, retried) =
        if requests[0].attribute("blockwork.aws.attempt") == Some("1") { (requests[0], requests[1]) } else { (requests[1], requests[0]) };
    assert_eq!(throttled.attribute("blockwork.aws.throttled"), Some("true"), "{throttled:?}");
    assert_eq!(throttled.attribute("error.type"), Some("throttled"), "{throttled:?}");
    assert!(throttled.is_error());
    assert_eq!(retried.attribute("blockwork.aws.attempt"), Some("2"));
    assert!(!retried.is_error(), "{retried:?}");
    assert_eq!(throttled.parent_span_id, retried.parent_span_id, "attempts of one call, in one reconcile");
    assert_eq!((throttled.attribute("rpc.system"), throttled.attribute("rpc.service")), (Some("aws-api"), Some("ACM")));
    assert!(throttled.attribute("blockwork.aws.quota_wait_s").is_some());

    // Its status writes, within the reconciles.
    assert!(tree.spans.iter().any(|s| s.name == "apply Cert status" && s.attribute("k8s.verb") == Some("apply")), "{outline}");

    // The validation records went out in a Route 53 batch: a trace of its own, linked to the
    // reconcile that queued them, with the ChangeResourceRecordSets call in it.
    let joined_ids: Vec<&str> = joined.iter().map(|s| s.span_id.as_str()).collect();
    let batch = spans
        .iter()
        .find(|s| s.name == "Route53 batch" && s.links.iter().any(|(t, span, _)| *t == trace_id && joined_ids.contains(&span.as_str())))
        .unwrap_or_else(|| panic!("a Route 53 batch linked to the Cert's reconciles:\n{}", outline_all(&spans)));
    assert_eq!(batch.attribute("blockwork.route53.zone"), Some(zone_id.trim_start_matches("/hostedzone/")));
    let batch_tree = Tree::of(&spans, &batch.trace_id);
    assert!(
        batch_tree.children(batch).iter().any(|s| s.name == "Route53/ChangeResourceRecordSets"),
        "the batch's call:\n{}",
        batch_tree.outline()
    );

    // The reconcile woken when that batch's records were written follows from it: its trigger
    // links to the batch, so its trace tells what woke it.
    let woken: Vec<&&Span> = joined.iter().copied().filter(|s| s.attribute("blockwork.trigger") == Some("woken")).collect();
    assert!(
        woken.iter().any(|s| s.links.iter().any(|(t, id, kind)| (t, id, kind.as_str()) == (&batch.trace_id, &batch.span_id, "trigger"))),
        "a reconcile woken by the batch, linked to it: {woken:#?}\n{outline}"
    );

    // Every woken reconcile links to what woke it (issue 37): a batch, a sweep, or the
    // reconcile whose listed validation records the once-a-second check found not yet queued.
    for reconcile in ours.iter().filter(|s| s.attribute("blockwork.trigger") == Some("woken")) {
        assert!(
            reconcile.links.iter().any(|(_, _, kind)| kind == "trigger"),
            "a woken reconcile without its trigger: {reconcile:?}\n{outline}"
        );
    }

    // The latency histograms name the trace of an observation in each bucket (OpenMetrics
    // exemplars): the Cert's reconciles, and its ACM calls within them.
    let metrics = operator.metrics().await;
    let exemplar = format!(r#"# {{trace_id="{trace_id}"}}"#);
    for histogram in ["blockwork_reconcile_duration_seconds_bucket{", "blockwork_aws_call_duration_seconds_bucket{"] {
        assert!(
            metrics.lines().any(|line| line.starts_with(histogram) && line.contains(&exemplar)),
            "{histogram} with the Cert's trace as an exemplar:\n{metrics}"
        );
    }
    let named: Vec<&str> = metrics
        .lines()
        .filter_map(|line| line.split_once(r#"# {trace_id=""#))
        .filter_map(|(_, rest)| rest.split_once('"'))
        .map(|(id, _)| id)
        .collect();
    spans_until(collector, &service, "every trace an exemplar names", |spans| {
        match named.iter().find(|id| !spans.iter().any(|s| s.trace_id == **id)) {
            Some(missing) => Err(format!("an exemplar names trace {missing}, which the collector does not have")),
            None => Ok(()),
        }
    })
    .await;

    // The API server asked the validating webhook before storing the Cert.
    let webhook = spans.iter().find(|s| s.name == "POST /validate/cert");
    let webhook = webhook.unwrap_or_else(|| panic!("the webhook's span:\n{}", outline_all(&spans)));
    assert_eq!(webhook.attribute("http.response.status_code"), Some("200"));
    assert_eq!(webhook.attribute("blockwork.webhook"), Some("admission"));

    assert_no_account_id(&spans);

    // The status names the trace of the reconcile that made it Ready, and `blockwork explain`
    // prints it.
    let cert = certs.get("traced").await.unwrap();
    assert_eq!(cert.status.as_ref().and_then(|s| s.last_trace_id.as_deref()), Some(trace_id.as_str()));
    let explained = std::process::Command::new(BIN)
        .args(["explain", "cert/traced", "-n", &namespace])
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .unwrap();
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(explained.lines().any(|l| l.starts_with("Trace:") && l.contains(&trace_id)), "{explained}");

    // Log lines within a reconcile carry its trace id.
    let logs = operator.logs();
    assert!(logs.lines().any(|line| line.contains(&format!("trace_id=\"{trace_id}\"")) && line.contains("planned")), "{logs}");

    // So do the lines about a reconcile that failed (issue 37): another Cert's create, whose
    // DescribeCertificate is slow while the Cert is changed, so its status write is refused (409).
    proxy.inject(Operation::named("DescribeCertificate"), Fault::Latency(Duration::from_secs(3)), 1);
    let described = proxy.calls("DescribeCertificate");
    let spec = CertSpec { environment: "conflict".into(), ..cert.spec.clone() };
    create_through_the_webhook(&certs, &Cert::new("conflicted", spec)).await;
    proxy.wait_for_calls("DescribeCertificate", described + 1).await;
    let touched = serde_json::json!({"metadata": {"labels": {"touched": "during-the-create"}}});
    certs.patch("conflicted", &PatchParams::default(), &Patch::Merge(&touched)).await.unwrap();
    let failed = operator
        .eventually("the failed reconcile's log lines", TIMEOUT, async || {
            let logs = operator.logs();
            let about = |what: &str| logs.lines().find(|line| line.contains(what) && line.contains("conflicted")).map(str::to_owned);
            match (about("reconcile error"), about("reconcile failed")) {
                (Some(error), Some(failed)) => Ok((error, failed)),
                _ => Err("no reconcile error and failed lines about conflicted yet".to_owned()),
            }
        })
        .await;
    let trace_of = |line: &str| line.split("trace_id=\"").nth(1).and_then(|rest| rest.split('"').next()).map(str::to_owned);
    let (error_trace, failed_trace) = (trace_of(&failed.0), trace_of(&failed.1));
    assert!(error_trace.as_ref().is_some_and(|id| id.len() == 32), "reconcile error carries the trace id: {}", failed.0);
    assert_eq!(error_trace, failed_trace, "both lines name the failed reconcile's trace: {failed:?}");
}

/// Creates `cert`, retrying while the API server cannot reach the webhook just registered.
async fn create_through_the_webhook(api: &Api<Cert>, cert: &Cert) {
    eventually("the Cert created through the webhook", Duration::from_secs(30), async || {
        match api.create(&PostParams::default(), cert).await {
            Ok(_) => Ok(()),
            Err(error) => Err(error.to_string()),
        }
    })
    .await;
}

#[tokio::test]
async fn a_tenant_update_is_the_trace_of_the_reconcile_the_change_woke() {
    let plane = blockwork_testenv::control_plane::of("traces").await.unwrap();
    plane.install_crds(&[blockwork_tenant::crd(), blockwork_identity::crd()]).await.unwrap();
    let namespace = plane.namespace("traces-tenant").await.unwrap();
    let ministack = ministack().await.unwrap().endpoint();
    let config = blockwork_testenv::aws::sdk_config(&ministack).await;
    let zone = format!("{namespace}.example.com");
    let certificate = blockwork_testenv::aws::request_certificate(&aws_sdk_acm::Client::new(&config), &[format!("*.{zone}")]).await;
    let cloudfront = aws_sdk_cloudfront::Client::new(&config);
    let distribution = blockwork_testenv::aws::tenant_only_distribution(&cloudfront, &namespace, Some(&certificate), &[]).await;
    let collector = collector::jaeger().await.unwrap();
    let service = Collector::service("tenant");
    let operator = Operator::new(Path::new(BIN), plane.kubeconfig_path())
        .unwrap()
        .args(["--controllers", "tenant", "--namespaces", &namespace])
        .args(["--tenant-aws-endpoint-url", &ministack, "--tenant-aws-region", "us-east-1"]);
    let mut operator = traced(operator, collector, &service, false).start().unwrap();
    operator.wait_ready(Duration::from_secs(60)).await.unwrap();

    let tenants: Api<DistributionTenant> = Api::namespaced(plane.client(), &namespace);
    let spec = DistributionTenantSpec {
        distribution_id: distribution,
        domains: vec![DomainName { domain: format!("shop.{zone}") }],
        ..DistributionTenantSpec::default()
    };
    tenants.create(&PostParams::default(), &DistributionTenant::new("shop", spec)).await.unwrap();
    let ready = async || {
        let tenant = tenants.get("shop").await.map_err(|e| e.to_string())?;
        let status = tenant.status.as_ref();
        let ready = status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let current = status.and_then(|s| s.observed_generation) == tenant.metadata.generation;
        if ready && current { Ok(()) } else { Err(format!("{status:?}")) }
    };
    operator.eventually("the tenant Ready", TIMEOUT, ready).await;

    // The update: disabled.
    let patch = serde_json::json!({ "spec": { "enabled": false } });
    tenants.patch("shop", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    operator.eventually("the update Ready", TIMEOUT, ready).await;

    let (update, spans) = spans_until(collector, &service, "the update's reconcile", |spans| {
        let update = reconciles(spans, "DistributionTenant", "shop").into_iter().find(|reconcile| {
            Tree::of(spans, &reconcile.trace_id).descendants(reconcile).iter().any(|s| s.name == "CloudFront/UpdateDistributionTenant")
        });
        update.map(|u| (u.clone(), spans.to_vec())).ok_or_else(|| "no reconcile with an UpdateDistributionTenant call yet".to_owned())
    })
    .await;
    let tree = Tree::of(&spans, &update.trace_id);
    let outline = tree.outline();
    assert!(update.parent_span_id.is_empty(), "no traceparent: the reconcile is its trace's root:\n{outline}");
    assert_eq!(update.attribute("blockwork.trigger"), Some("object changed"), "{outline}");
    assert_eq!(update.attribute("blockwork.controller"), Some("tenant"));
    let below = tree.descendants(&update);
    let call = below.iter().find(|s| s.name == "CloudFront/UpdateDistributionTenant").unwrap();
    assert_eq!((call.attribute("rpc.method"), call.attribute("blockwork.aws.attempt")), (Some("UpdateDistributionTenant"), Some("1")));
    assert!(below.iter().any(|s| s.name == "apply DistributionTenant status"), "its status write:\n{outline}");
    assert!(update.attribute("blockwork.outcome").is_some() && update.attribute("blockwork.requeue_after_s").is_some(), "{update:?}");
    assert_no_account_id(&spans);
}

#[tokio::test]
async fn a_rotation_over_grpc_follows_the_first_sight_that_joined_the_sources_traceparent() {
    let plane = blockwork_testenv::control_plane::of("traces").await.unwrap();
    let namespace = plane.namespace("traces-rotator").await.unwrap();
    let collector = collector::jaeger().await.unwrap();
    let service = Collector::service("rotator");
    let operator =
        Operator::new(Path::new(BIN), plane.kubeconfig_path()).unwrap().args(["--controllers", "rotator", "--namespaces", &namespace]);
    let mut operator = traced(operator, collector, &service, true).start().unwrap();
    operator.wait_ready(Duration::from_secs(60)).await.unwrap();

    let keys = blockwork_rotator::Keys::default();
    let (trace_id, parent_id, header) = traceparent();
    let source = |crt: &str| Secret {
        metadata: ObjectMeta {
            name: Some("issuer".into()),
            namespace: Some(namespace.clone()),
            annotations: Some(BTreeMap::from([
                (keys.source.clone(), "true".into()),
                (keys.destination.clone(), "jwks".into()),
                ("traceparent".into(), header.clone()),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".into(), ByteString(crt.as_bytes().to_vec())),
            ("tls.key".into(), ByteString(b"key".to_vec())),
        ])),
        ..Secret::default()
    };
    let secrets: Api<Secret> = Api::namespaced(plane.client(), &namespace);
    secrets.create(&PostParams::default(), &source("first")).await.unwrap();
    let first = spans_until(collector, &service, "the first sight", |spans| {
        let created = reconciles(spans, "Secret", "issuer").into_iter().find(|s| s.attribute("blockwork.outcome") == Some("created"));
        created.cloned().ok_or_else(|| "no reconcile created the target yet".to_owned())
    })
    .await;
    assert_eq!(
        (first.trace_id.as_str(), first.parent_span_id.as_str()),
        (trace_id.as_str(), parent_id.as_str()),
        "the traceparent's child"
    );

    // cert-manager renews the source: one rotation, a trace of its own (the source settled for
    // its traceparent with the first sight), linked to it.
    let renewed = serde_json::json!({ "data": { "tls.crt": k8s_openapi::ByteString(b"second".to_vec()) } });
    secrets.patch("issuer", &PatchParams::default(), &Patch::Merge(&renewed)).await.unwrap();
    let (rotation, spans) = spans_until(collector, &service, "the rotation", |spans| {
        let rotated = reconciles(spans, "Secret", "issuer").into_iter().find(|s| s.attribute("blockwork.outcome") == Some("rotated"));
        rotated.map(|r| (r.clone(), spans.to_vec())).ok_or_else(|| "no reconcile rotated the target yet".to_owned())
    })
    .await;
    let tree = Tree::of(&spans, &rotation.trace_id);
    let outline = tree.outline();
    assert_ne!(rotation.trace_id, trace_id, "a trace of its own:\n{outline}");
    assert!(rotation.links.iter().any(|(t, s, kind)| *t == trace_id && *s == parent_id && kind == "traceparent"), "{rotation:?}");
    assert_eq!(rotation.attribute("blockwork.trigger"), Some("object changed"));
    let writes: Vec<&str> = tree.descendants(&rotation).iter().map(|s| s.name.as_str()).collect();
    assert_eq!(writes, ["replace Secret target"], "one write, the commit point:\n{outline}");
    let first_tree = Tree::of(&spans, &trace_id);
    let first_writes: Vec<&str> = first_tree.descendants(&first).iter().map(|s| s.name.as_str()).collect();
    assert_eq!(first_writes, ["create Secret target"], "{}", first_tree.outline());
}
