//! Suite 6 of the reliability campaign: property-based fuzzing (proptest) of what takes input
//! from outside — the admission and conversion webhooks (whole HTTP bodies, as the API server
//! sends them, and arbitrary JSON), the Cache round trip v1alpha1 <-> v1beta1, the tenant diff,
//! DNS-name normalization, and the rotator's plan and key parsing with arbitrary PEM and DER.
//! None may panic; each property is asserted.
//!
//! The properties themselves are functions of `blockwork-properties`, which cargo-fuzz's
//! coverage-guided targets (`fuzz/`, `scripts/fuzz`) call too; this file generates the inputs.
//!
//! CI runs proptest's default of 256 cases per property (seconds each); the campaign runs many
//! more: `PROPTEST_CASES=20000 cargo test --release -p blockwork-reliability --test fuzz`.
//! A failing case is shrunk and printed, with a seed to repeat it.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::OnceLock;

use blockwork_cache::api::HIGH_AVAILABILITY_ANNOTATION;
use blockwork_cache::conversion;
use blockwork_properties::cache::{V1ALPHA1, V1BETA1};
use blockwork_properties::webhook::{admission_review, conversion_review, runtime};
use blockwork_properties::{Verdict, cache, dns, rotator, tenant, webhook};
use blockwork_tenant::DistributionTenantSpec;
use k8s_openapi::api::core::v1::Secret;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

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

fn operation() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])
}

/// A property's verdict as a proptest outcome.
fn holds(verdict: Verdict) -> Result<(), TestCaseError> {
    verdict.map_err(TestCaseError::fail)
}

// ---------------------------------------------------------------------------------------------
// The admission webhooks, over HTTP as the API server calls them.

fn cert_router() -> &'static axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER.get_or_init(|| {
        runtime().block_on(async {
            let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
            plane.install_crds(&[blockwork_cert::crd()]).await.unwrap();
            let zones: blockwork_cert::zones::ZoneRegistry = "k8s.example.com:Z0000000000000000001".parse().unwrap();
            let identities = blockwork_identity::Identities::fixed(Vec::new(), blockwork_identity::Settings::default());
            blockwork_cert::webhook::router(plane.client(), identities, &zones, true, Default::default())
        })
    })
}

#[test]
fn the_cert_admission_webhook_answers_every_review_with_a_well_formed_verdict() {
    let router = cert_router();
    proptest!(|(object in cert_object(), op in operation(), uid in "[a-f0-9-]{1,36}")| {
        let review = admission_review(("acm.blockwork.dev", "v1", "Cert", "certs"), object, op, &uid);
        holds(webhook::answers_the_admission_review(router, blockwork_cert::webhook::PATH, &review, &uid))?;
    });
}

#[test]
fn the_tenant_admission_webhook_answers_every_review_with_a_well_formed_verdict() {
    let router =
        blockwork_tenant::webhook::router(blockwork_identity::Identities::fixed(Vec::new(), blockwork_identity::Settings::default()), true);
    proptest!(|(object in tenant_object(), op in operation(), uid in "[a-f0-9-]{1,36}")| {
        let review = admission_review(("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant", "distributiontenants"), object, op, &uid);
        holds(webhook::answers_the_admission_review(&router, blockwork_tenant::webhook::PATH, &review, &uid))?;
    });
}

#[test]
fn the_admission_webhooks_refuse_arbitrary_bodies_with_a_client_error_never_a_crash() {
    let tenant =
        blockwork_tenant::webhook::router(blockwork_identity::Identities::fixed(Vec::new(), blockwork_identity::Settings::default()), true);
    let cert = cert_router();
    proptest!(|(body in prop_oneof![json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()), prop::collection::vec(any::<u8>(), 0..512)])| {
        for (router, path) in [(&tenant, blockwork_tenant::webhook::PATH), (cert, blockwork_cert::webhook::PATH)] {
            holds(webhook::answers_any_body_without_a_server_error(router, path, &body))?;
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The conversion webhook and the Cache round trip.

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
    TestRunner::new(config()).run(&valid_v1beta1_cache(), |beta| holds(cache::v1beta1_round_trip_is_lossless(&beta))).unwrap();
}

#[test]
fn a_valid_v1alpha1_cache_survives_the_round_trip_through_v1beta1_unchanged() {
    TestRunner::new(config()).run(&valid_v1beta1_cache(), |beta| holds(cache::v1alpha1_round_trip_is_lossless(&beta))).unwrap();
}

/// A ConversionReview as the API server sends one, with arbitrary objects (and sometimes the
/// high-availability annotation holding anything).
fn any_conversion_review() -> impl Strategy<Value = (Value, String, usize)> {
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
        (conversion_review(objects, &desired, &uid), uid, count)
    })
}

#[test]
fn the_conversion_webhook_answers_every_review_with_all_objects_converted_or_a_failure() {
    let router = conversion::router();
    proptest!(|((review, uid, count) in any_conversion_review())| {
        holds(webhook::answers_the_conversion_review(&router, blockwork_cache::crd::CONVERSION_PATH, &review, &uid, count))?;
    });
}

#[test]
fn the_conversion_webhook_refuses_arbitrary_bodies_with_a_client_error_never_a_crash() {
    let router = conversion::router();
    proptest!(|(body in json_value())| {
        holds(webhook::answers_any_body_without_a_server_error(&router, blockwork_cache::crd::CONVERSION_PATH, &serde_json::to_vec(&body).unwrap()))?;
    });
}

// ---------------------------------------------------------------------------------------------
// The tenant diff.

/// A spec the CRD admits: DNS names as domains, each parameter named once (its list map), any
/// other strings.
fn tenant_spec() -> impl Strategy<Value = DistributionTenantSpec> {
    (tenant_object(), prop::collection::vec("(\\*\\.)?([a-z0-9-]{1,12}\\.){1,3}[a-z]{2,6}\\.?", 1..5))
        .prop_filter_map("a spec the CRD admits", |(object, domains)| {
            tenant::as_the_crd_admits(serde_json::from_value(object["spec"].clone()).ok()?, domains)
        })
}

#[test]
fn a_tenant_spec_never_differs_from_itself_whatever_the_order_case_and_trailing_dots() {
    proptest!(|(spec in tenant_spec(), rotate in 0usize..4)| {
        holds(tenant::a_spec_never_differs_from_itself(&spec, rotate))?;
    });
}

#[test]
fn a_tenant_diff_names_every_changed_field_and_masks_account_ids() {
    proptest!(|(spec in tenant_spec(), account in "[0-9]{12}", extra in "[a-z]{1,10}\\.example\\.org")| {
        holds(tenant::a_diff_names_every_changed_field_and_masks_account_ids(&spec, &account, &extra))?;
    });
}

// ---------------------------------------------------------------------------------------------
// DNS names.

fn dns_like() -> impl Strategy<Value = String> {
    prop_oneof![
        text(),
        "(\\*\\.)?([a-z0-9-]{1,20}\\.){1,5}[a-z]{2,10}\\.?",
        "([a-z0-9-]{60,63}\\.){3,4}[a-z]{2,3}\\.?",
        internationalized(),
    ]
}

/// Names with a label of letters from several scripts, symbols, emoji, joiners, middle dots and
/// Arabic-Indic digits, encoded as UTS #46 encodes them: A-labels IDNA2008 takes, and ones it
/// refuses though UTS #46 encodes them.
fn internationalized() -> impl Strategy<Value = String> {
    "[a-z0-9\u{df}\u{b7}\u{3b1}-\u{3c9}\u{375}\u{430}-\u{44f}\u{5d0}-\u{5ea}\u{5f3}\u{627}-\u{64a}\u{660}-\u{669}\u{6f0}-\u{6f9}\u{30a2}-\u{30f3}\u{30fb}\u{4e00}-\u{4e2f}\u{200d}\u{2603}\u{2665}\u{1f4a9}-]{1,10}"
        .prop_map(|label| {
            let name = format!("{label}.example.com");
            idna::domain_to_ascii(&name).unwrap_or(name)
        })
}

/// Lists of names from a few domains, some with a trailing dot, some invalid.
fn domain_lists() -> impl Strategy<Value = Vec<String>> {
    let name = prop_oneof![
        Just("a.example.com".to_owned()),
        Just("b.example.com".to_owned()),
        Just("xn--bcher-kva.example.com".to_owned()),
        Just("zz--shop.example.com".to_owned()),
        Just("xn--n3h.example.com".to_owned()),
        dns_like(),
    ];
    prop::collection::vec((name, any::<bool>()).prop_map(|(name, dot)| if dot { format!("{name}.") } else { name }), 0..6)
}

#[test]
fn dns_normalization_is_idempotent_and_agrees_with_parse() {
    proptest!(|(name in dns_like())| {
        holds(dns::normalization_is_idempotent_and_agrees_with_parse(&name))?;
    });
}

#[test]
fn dns_names_the_controller_accepts_pass_the_crd_schema_and_the_schema_passes_every_plain_name_that_fits() {
    proptest!(|(name in dns_like())| {
        holds(dns::parse_and_the_crd_schema_agree(&name))?;
    });
}

#[test]
fn dns_names_the_controller_accepts_have_only_labels_a_public_ca_takes() {
    proptest!(|(name in dns_like())| {
        holds(dns::accepted_labels_are_ones_a_public_ca_takes(&name))?;
    });
}

#[test]
fn a_list_of_dns_names_is_taken_exactly_when_each_is_valid_and_none_repeats_another() {
    proptest!(|(names in domain_lists())| {
        holds(dns::a_list_names_each_domain_once(&names))?;
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
        holds(rotator::any_key_material_parses_to_a_key_or_an_error(&input))?;
    });
}

/// A source with valid or arbitrary annotation values and arbitrary key material.
fn source() -> impl Strategy<Value = Secret> {
    let flag = prop_oneof![Just("true".to_owned()), Just("false".to_owned()), text()];
    (flag.clone(), flag, pem_input(), prop::collection::vec(any::<u8>(), 0..64))
        .prop_map(|(source, jwks, crt, key)| rotator::source(&source, &jwks, crt, key))
}

#[test]
fn the_rotator_plans_any_source_without_panicking_and_rotates_once_per_change() {
    proptest!(|(source in source(), renewed in pem_input())| {
        holds(rotator::plans_any_source_and_rotates_once_per_change(&source, &renewed))?;
    });
}
