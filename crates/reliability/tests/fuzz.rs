//! Suite 6 of the reliability campaign: property-based fuzzing (proptest) of what takes input
//! from outside — the admission and conversion webhooks (whole HTTP bodies, as the API server
//! sends them, and arbitrary JSON), the Cache round trip v1alpha1 <-> v1beta1, the tenant diff,
//! DNS-name normalization, and the rotator's plan and key parsing with arbitrary PEM and DER.
//! None may panic; each property is asserted.
//!
//! CI runs proptest's default of 256 cases per property (seconds each); the campaign runs many
//! more: `PROPTEST_CASES=20000 cargo test --release -p blockwork-reliability --test fuzz`.
//! A failing case is shrunk and printed, with a seed to repeat it.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::body::Body;
use blockwork_aws::dns_name;
use blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION;
use blockwork_cache::conversion;
use blockwork_tenant::DistributionTenantSpec;
use blockwork_tenant::diff::TenantConfig;
use http_body_util::BodyExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt as _;

// ---------------------------------------------------------------------------------------------
// Inputs

/// Strings as hostile input brings them: anything, DNS-like, Unicode look-alikes, long.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9.*-]{0,80}",
        "[a-zA-Z0-9.\u{430}\u{435}\u{ff0e}\u{200b} _-]{0,40}",
        "(xn--[a-z0-9-]{0,12}\\.){0,3}[a-z]{1,10}\\.[a-z]{2,4}\\.?",
        Just("a".repeat(70_000)),
    ]
}

/// Any JSON document.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A Cert as an admission request carries one: the schema's types, any strings.
fn cert_object() -> impl Strategy<Value = Value> {
    (text(), text(), text(), proptest::option::of(text()), prop::collection::vec(text(), 0..4), any::<bool>(), proptest::option::of(text()))
        .prop_map(|(name, service, environment, domain, sans, delete, zone)| {
            let mut spec = json!({"serviceName": service, "environment": environment, "subjectAlternativeNames": sans, "deleteOnRemoval": delete});
            if let Some(domain) = domain {
                spec["domainName"] = json!(domain);
            }
            if let Some(zone) = zone {
                spec["dnsZone"] = json!({"name": zone});
            }
            json!({"apiVersion": "acm.blockwork.dev/v1", "kind": "Cert", "metadata": {"name": name, "namespace": "fuzz", "uid": "7d1f"}, "spec": spec})
        })
}

/// A DistributionTenant as an admission request carries one: the schema's types and enums, any
/// strings.
fn tenant_object() -> impl Strategy<Value = Value> {
    let parameters = prop::collection::vec((text(), text()).prop_map(|(n, v)| json!({"name": n, "value": v})), 0..3);
    let geo = (prop::sample::select(vec!["whitelist", "blacklist", "none"]), prop::collection::vec(text(), 0..3))
        .prop_map(|(kind, locations)| json!({"restrictionType": kind, "locations": locations}));
    let managed = (prop::sample::select(vec!["cloudfront", "self-hosted"]), proptest::option::of(text()))
        .prop_map(|(host, primary)| json!({"validationTokenHost": host, "primaryDomainName": primary}));
    (text(), text(), prop::collection::vec(text(), 0..4), proptest::option::of(any::<bool>()), parameters, proptest::option::of(text()), proptest::option::of(geo), proptest::option::of(managed))
        .prop_map(|(name, distribution, domains, enabled, parameters, certificate, geo, managed)| {
            let mut spec = json!({
                "distributionId": distribution,
                "domains": domains.iter().map(|d| json!({"domain": d})).collect::<Vec<_>>(),
                "parameters": parameters,
                "enabled": enabled,
            });
            let mut customizations = json!({});
            if let Some(arn) = certificate {
                customizations["certificate"] = json!({"arn": arn});
            }
            if let Some(geo) = geo {
                customizations["geoRestrictions"] = geo;
            }
            spec["customizations"] = customizations;
            if let Some(managed) = managed {
                spec["managedCertificateRequest"] = managed;
            }
            json!({"apiVersion": "cloudfront.blockwork.dev/v1alpha1", "kind": "DistributionTenant", "metadata": {"name": name, "namespace": "fuzz", "uid": "8e2a"}, "spec": spec})
        })
}

fn admission_review(kind: (&str, &str, &str, &str), object: Value, operation: &str, uid: &str) -> Value {
    let (group, version, kind, resource) = kind;
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "operation": operation, "userInfo": {"username": "fuzz"},
            "name": object["metadata"]["name"], "namespace": "fuzz",
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": if operation == "CREATE" { Value::Null } else { object },
        }
    })
}

fn operation() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])
}

// ---------------------------------------------------------------------------------------------
// The admission webhooks, over HTTP as the API server calls them.

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// POSTs `body` to `router` at `path`; the status and the body.
async fn post(router: &axum::Router, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let request = http::Request::post(path).header("content-type", "application/json").body(Body::from(body)).unwrap();
    let call = router.clone().oneshot(request);
    let response = tokio::time::timeout(std::time::Duration::from_secs(20), call).await.expect("answered, not hung").unwrap();
    let status = response.status().as_u16();
    (status, response.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// A well-formed AdmissionReview answering `uid`: allowed, or denied with a message.
fn well_formed_answer(status: u16, body: &[u8], uid: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(status, 200, "{}", String::from_utf8_lossy(body));
    let review: Value = serde_json::from_slice(body).map_err(|e| TestCaseError::fail(format!("not JSON: {e}")))?;
    prop_assert_eq!(&review["apiVersion"], "admission.k8s.io/v1");
    prop_assert_eq!(&review["kind"], "AdmissionReview");
    let response = &review["response"];
    prop_assert_eq!(&response["uid"], uid);
    let allowed = response["allowed"].as_bool().ok_or_else(|| TestCaseError::fail("no allowed"))?;
    if !allowed {
        prop_assert!(response["status"]["message"].as_str().is_some_and(|m| !m.is_empty()), "a denial says why: {review}");
    }
    Ok(())
}

fn cert_router() -> &'static axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER.get_or_init(|| {
        runtime().block_on(async {
            let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
            plane.install_crds(&[blockwork_cert::crd()]).await.unwrap();
            let zones: blockwork_cert::zones::ZoneRegistry = "k8s.example.com:Z0000000000000000001".parse().unwrap();
            blockwork_cert::webhook::router(plane.client(), zones, true)
        })
    })
}

#[test]
fn the_cert_admission_webhook_answers_every_review_with_a_well_formed_verdict() {
    let router = cert_router();
    proptest!(|(object in cert_object(), op in operation(), uid in "[a-f0-9-]{1,36}")| {
        let review = admission_review(("acm.blockwork.dev", "v1", "Cert", "certs"), object, op, &uid);
        let (status, body) = runtime().block_on(post(router, blockwork_cert::webhook::PATH, serde_json::to_vec(&review).unwrap()));
        well_formed_answer(status, &body, &uid)?;
    });
}

#[test]
fn the_tenant_admission_webhook_answers_every_review_with_a_well_formed_verdict() {
    let router = blockwork_tenant::webhook::router(true);
    proptest!(|(object in tenant_object(), op in operation(), uid in "[a-f0-9-]{1,36}")| {
        let review = admission_review(("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant", "distributiontenants"), object, op, &uid);
        let (status, body) = runtime().block_on(post(&router, blockwork_tenant::webhook::PATH, serde_json::to_vec(&review).unwrap()));
        well_formed_answer(status, &body, &uid)?;
    });
}

#[test]
fn the_admission_webhooks_refuse_arbitrary_bodies_with_a_client_error_never_a_crash() {
    let tenant = blockwork_tenant::webhook::router(true);
    let cert = cert_router();
    proptest!(|(body in prop_oneof![json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()), prop::collection::vec(any::<u8>(), 0..512)])| {
        for (router, path) in [(&tenant, blockwork_tenant::webhook::PATH), (cert, blockwork_cert::webhook::PATH)] {
            let (status, answer) = runtime().block_on(post(router, path, body.clone()));
            prop_assert!(status == 200 || (400..500).contains(&status), "{path}: {status} {}", String::from_utf8_lossy(&answer));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The conversion webhook and the Cache round trip.

const V1ALPHA1: &str = "cache.blockwork.dev/v1alpha1";
const V1BETA1: &str = "cache.blockwork.dev/v1beta1";

/// A v1beta1 Cache its schema and CEL rules accept, with annotations of its own.
fn valid_v1beta1_cache() -> impl Strategy<Value = Value> {
    let engine = prop::sample::select(vec!["redis", "valkey", "memcached"]);
    let eviction = prop::sample::select(vec!["allkeys-lru", "volatile-lru", "noeviction"]);
    let memory = prop_oneof![(64u32..=9999).prop_map(|m| format!("{m}Mi")), (1u32..=1024).prop_map(|g| format!("{g}Gi"))];
    let annotations = prop::collection::btree_map("[a-z]{1,8}\\.example\\.com/[a-z]{1,8}", any::<String>(), 0..3);
    let name = "[a-z]([a-z0-9-]{0,20}[a-z0-9])?";
    let tls = proptest::option::of(name);
    (engine, eviction, memory, 1i32..=10, tls, proptest::option::of((any::<bool>(), any::<bool>())), annotations, name)
        .prop_filter("memcached cannot evict only keys with a TTL", |(engine, eviction, ..)| {
            !(*engine == "memcached" && *eviction == "volatile-lru")
        })
        .prop_filter("highAvailability needs redis or valkey and 3 replicas", |(engine, _, _, replicas, _, ha, ..)| {
            !matches!(ha, Some((true, _))) || (*engine != "memcached" && *replicas >= 3)
        })
        .prop_map(|(engine, eviction, memory, replicas, tls, ha, annotations, name)| {
            let mut spec = json!({"engine": engine, "memory": memory, "replicas": replicas, "evictionPolicy": eviction});
            if let Some(secret) = tls {
                spec["tls"] = json!({"enabled": true, "secretName": secret});
            }
            if let Some((enabled, auto_failover)) = ha {
                spec["highAvailability"] = json!({"enabled": enabled, "autoFailover": auto_failover});
            }
            let mut metadata = json!({"name": name, "namespace": "fuzz"});
            if !annotations.is_empty() {
                metadata["annotations"] = json!(annotations);
            }
            json!({"apiVersion": V1BETA1, "kind": "Cache", "metadata": metadata, "spec": spec})
        })
}

fn config() -> Config {
    Config::default()
}

#[test]
fn a_valid_v1beta1_cache_survives_the_round_trip_through_v1alpha1_unchanged() {
    TestRunner::new(config())
        .run(&valid_v1beta1_cache(), |beta| {
            let alpha = conversion::convert(beta.clone(), V1ALPHA1).map_err(TestCaseError::fail)?;
            prop_assert_eq!(&alpha["apiVersion"], V1ALPHA1);
            prop_assert!(alpha["spec"].get("highAvailability").is_none(), "v1alpha1 has no highAvailability: {alpha}");
            let back = conversion::convert(alpha, V1BETA1).map_err(TestCaseError::fail)?;
            prop_assert_eq!(back, beta);
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_valid_v1alpha1_cache_survives_the_round_trip_through_v1beta1_unchanged() {
    TestRunner::new(config())
        .run(&valid_v1beta1_cache(), |beta| {
            let mut alpha = beta;
            alpha["apiVersion"] = json!(V1ALPHA1);
            if let Some(spec) = alpha["spec"].as_object_mut() {
                spec.remove("highAvailability");
            }
            let converted = conversion::convert(alpha.clone(), V1BETA1).map_err(TestCaseError::fail)?;
            let back = conversion::convert(converted, V1ALPHA1).map_err(TestCaseError::fail)?;
            prop_assert_eq!(back, alpha);
            Ok(())
        })
        .unwrap();
}

/// A ConversionReview as the API server sends one, with arbitrary objects (and sometimes the
/// high-availability annotation holding anything).
fn conversion_review() -> impl Strategy<Value = (Value, String, usize)> {
    let object = prop_oneof![
        valid_v1beta1_cache(),
        json_value(),
        (valid_v1beta1_cache(), json_value()).prop_map(|(mut cache, saved)| {
            cache["apiVersion"] = json!(V1ALPHA1);
            cache["metadata"]["annotations"] = json!({HIGH_AVAILABILITY_ANNOTATION: saved.to_string()});
            cache
        }),
    ];
    let desired = prop::sample::select(vec![V1ALPHA1.to_owned(), V1BETA1.to_owned(), "cache.blockwork.dev/v2".to_owned()]);
    (prop::collection::vec(object, 0..4), desired, "[a-f0-9-]{1,36}").prop_map(|(objects, desired, uid)| {
        let count = objects.len();
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        });
        (review, uid, count)
    })
}

#[test]
fn the_conversion_webhook_answers_every_review_with_all_objects_converted_or_a_failure() {
    let router = conversion::router();
    proptest!(|((review, uid, count) in conversion_review())| {
        let path = blockwork_cache::crd::CONVERSION_PATH;
        let (status, body) = runtime().block_on(post(&router, path, serde_json::to_vec(&review).unwrap()));
        prop_assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        let response = &answer["response"];
        prop_assert_eq!(&response["uid"], uid.as_str());
        match response["result"]["status"].as_str() {
            Some("Success") => {
                let converted = response["convertedObjects"].as_array().cloned().unwrap_or_default();
                prop_assert_eq!(converted.len(), count);
                let desired = &review["request"]["desiredAPIVersion"];
                prop_assert!(converted.iter().all(|o| &o["apiVersion"] == desired), "{answer}");
            }
            Some("Failure") => prop_assert!(response["result"]["message"].as_str().is_some_and(|m| !m.is_empty())),
            other => prop_assert!(false, "result status {other:?}: {answer}"),
        }
    });
}

#[test]
fn the_conversion_webhook_refuses_arbitrary_bodies_with_a_client_error_never_a_crash() {
    let router = conversion::router();
    proptest!(|(body in json_value())| {
        let (status, _) = runtime().block_on(post(&router, blockwork_cache::crd::CONVERSION_PATH, serde_json::to_vec(&body).unwrap()));
        prop_assert!(status == 200 || (400..500).contains(&status), "{status}");
    });
}

// ---------------------------------------------------------------------------------------------
// The tenant diff.

/// A spec the CRD admits: DNS names as domains, each parameter named once (its list map), any
/// other strings.
fn tenant_spec() -> impl Strategy<Value = DistributionTenantSpec> {
    (tenant_object(), prop::collection::vec("(\\*\\.)?([a-z0-9-]{1,12}\\.){1,3}[a-z]{2,6}\\.?", 1..5)).prop_filter_map(
        "a spec the CRD admits",
        |(object, domains)| {
            let mut spec: DistributionTenantSpec = serde_json::from_value(object["spec"].clone()).ok()?;
            spec.domains = domains
                .into_iter()
                .filter(|d| dns_name::parse(d).is_ok())
                .map(|domain| blockwork_tenant::api::DomainName { domain })
                .collect();
            let names: std::collections::BTreeSet<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
            (names.len() == spec.parameters.len()).then_some(spec)
        },
    )
}

#[test]
fn a_tenant_spec_never_differs_from_itself_whatever_the_order_case_and_trailing_dots() {
    proptest!(|(spec in tenant_spec(), rotate in 0usize..4)| {
        let desired = TenantConfig::desired(&spec);
        prop_assert!(desired.differences(&desired).is_empty());
        let mut shuffled = spec.clone();
        let n = shuffled.domains.len().max(1);
        shuffled.domains.rotate_left(rotate % n);
        shuffled.parameters.reverse();
        for domain in &mut shuffled.domains {
            domain.domain = format!("{}.", domain.domain.to_ascii_uppercase());
        }
        let differences = desired.differences(&TenantConfig::desired(&shuffled));
        prop_assert!(differences.is_empty(), "{differences:?}");
    });
}

#[test]
fn a_tenant_diff_names_every_changed_field_and_masks_account_ids() {
    proptest!(|(spec in tenant_spec(), account in "[0-9]{12}", extra in "[a-z]{1,10}\\.example\\.org")| {
        let desired = TenantConfig::desired(&spec);
        let mut observed = desired.clone();
        observed.domains.insert(extra);
        observed.certificate_arn = Some(format!("arn:aws:acm:us-east-1:{account}:certificate/0a1b"));
        let differences = desired.differences(&observed);
        prop_assert!(differences.iter().any(|d| d.starts_with("domains")), "{differences:?}");
        if spec.managed_certificate_request.is_none() || desired.certificate_arn.is_some() {
            prop_assert!(differences.iter().any(|d| d.starts_with("certificate")), "{differences:?}");
        }
        prop_assert!(differences.iter().all(|d| !d.contains(&account)), "{differences:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// DNS names.

fn schema_pattern() -> &'static regex::Regex {
    static PATTERN: OnceLock<regex::Regex> = OnceLock::new();
    PATTERN.get_or_init(|| regex::Regex::new(dns_name::PATTERN).unwrap())
}

fn dns_like() -> impl Strategy<Value = String> {
    prop_oneof![text(), "(\\*\\.)?([a-z0-9-]{1,20}\\.){1,5}[a-z]{2,10}\\.?", "([a-z0-9-]{60,63}\\.){3,4}[a-z]{2,3}\\.?"]
}

#[test]
fn dns_normalization_is_idempotent_and_agrees_with_parse() {
    proptest!(|(name in dns_like())| {
        let normal = dns_name::normalize(&name);
        prop_assert_eq!(dns_name::normalize(&normal), normal.clone());
        if let Ok(parsed) = dns_name::parse(&name) {
            prop_assert_eq!(&parsed, &normal, "the normal form of a valid name is what parse returns");
            prop_assert_eq!(dns_name::parse(&parsed), Ok(parsed.clone()), "a parsed name parses to itself");
            prop_assert_eq!(dns_name::parse(&format!("{parsed}.")), Ok(parsed.clone()), "a trailing dot names the same domain");
        }
    });
}

#[test]
fn dns_names_the_controller_accepts_pass_the_crd_schema_and_the_schema_passes_every_plain_name_that_fits() {
    proptest!(|(name in dns_like())| {
        let parsed = dns_name::parse(&name);
        let schema = schema_pattern().is_match(&name) && name.len() <= dns_name::MAX_LENGTH + 1;
        if parsed.is_ok() {
            prop_assert!(schema, "{name:?} is accepted by parse but refused by the CRD schema");
        }
        let relative = name.strip_suffix('.').unwrap_or(&name);
        if schema && relative.len() <= dns_name::MAX_LENGTH && !name.contains("xn--") {
            prop_assert!(parsed.is_ok(), "{name:?} passes the CRD schema but parse refuses it: {parsed:?}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The rotator: key parsing and the plan.

fn certificate_pem() -> &'static (String, Vec<u8>) {
    static PEM: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    PEM.get_or_init(|| {
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(vec!["fuzz.example.com".to_owned()]).unwrap().self_signed(&key).unwrap();
        (certificate.pem(), certificate.der().to_vec())
    })
}

/// PEM-ish bytes: anything; PEM armour around arbitrary DER; a real certificate with bytes flipped.
fn pem_input() -> impl Strategy<Value = Vec<u8>> {
    use base64::Engine as _;
    let (pem, der) = certificate_pem().clone();
    let armour = |der: &[u8]| {
        format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", base64::engine::general_purpose::STANDARD.encode(der))
            .into_bytes()
    };
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..2048),
        prop::collection::vec(any::<u8>(), 0..2048).prop_map(move |der| armour(&der)),
        prop::collection::vec((0..der.len(), any::<u8>()), 1..8).prop_map(move |flips| {
            let mut mutated = der.clone();
            for (at, byte) in flips {
                mutated[at] ^= byte | 1;
            }
            armour(&mutated)
        }),
        (0..pem.len()).prop_map(move |cut| pem.as_bytes()[..cut].to_vec()),
    ]
}

#[test]
fn jwk_parsing_of_arbitrary_pem_and_der_returns_an_error_or_a_key_never_panics() {
    proptest!(|(input in pem_input())| {
        if let Ok(jwk) = blockwork_rotator::jwks::jwk(&input, "kid") {
            prop_assert!(!jwk.kty.is_empty() && !jwk.x5c.is_empty());
        }
    });
}

fn secret(name: &str, annotations: BTreeMap<String, String>, data: BTreeMap<String, Vec<u8>>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("fuzz".to_owned()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("1".to_owned()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Secret::default()
    }
}

/// A source with valid or arbitrary annotation values and arbitrary key material.
fn source() -> impl Strategy<Value = Secret> {
    let flag = prop_oneof![Just("true".to_owned()), Just("false".to_owned()), text()];
    (flag.clone(), flag, pem_input(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(source, jwks, crt, key)| {
        let prefix = blockwork_rotator::DEFAULT_ANNOTATION_PREFIX;
        let annotations = BTreeMap::from([
            (format!("{prefix}/source-secret"), source),
            (format!("{prefix}/destination-secret-name"), "target".to_owned()),
            (format!("{prefix}/jwks"), jwks),
        ]);
        secret("source", annotations, BTreeMap::from([("tls.crt".to_owned(), crt), ("tls.key".to_owned(), key)]))
    })
}

#[test]
fn the_rotator_plans_any_source_without_panicking_and_rotates_once_per_change() {
    use blockwork_rotator::plan::{Input, plan};
    use blockwork_rotator::{Action, Keys};
    let keys = Keys::default();
    let now = jiff::Timestamp::from_second(1_750_000_000).unwrap();
    proptest!(|(source in source(), renewed in pem_input())| {
        let first = plan(&Input { keys: &keys, source: &source, target: None, other_claim_active: false, now });
        let Some(mut target) = first.write.clone() else { return Ok(()) };
        target.metadata.resource_version = Some("2".to_owned());
        let again = plan(&Input { keys: &keys, source: &source, target: Some(&target), other_claim_active: false, now });
        prop_assert_eq!(&again.action, &Action::Unchanged, "planning again after the write changes nothing: {:?}", again.reasons);

        // The source renewed: one rotation, then nothing.
        let mut renewed_source = source.clone();
        renewed_source.data.get_or_insert_default().insert("tls.crt".to_owned(), ByteString(renewed));
        let rotated = plan(&Input { keys: &keys, source: &renewed_source, target: Some(&target), other_claim_active: false, now });
        if let Some(mut written) = rotated.write.clone() {
            written.metadata.resource_version = Some("3".to_owned());
            let settled = plan(&Input { keys: &keys, source: &renewed_source, target: Some(&written), other_claim_active: false, now });
            prop_assert_eq!(&settled.action, &Action::Unchanged, "a second plan after a rotation rotates again: {:?}", settled.reasons);
        }
    });
}
