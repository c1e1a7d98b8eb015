//! The Cache round trip v1beta1 -> v1alpha1 -> v1beta1 and v1alpha1 -> v1beta1 -> v1alpha1 is
//! lossless for every Cache v1beta1's schema and CEL rules accept, built here from arbitrary
//! choices (the shape of the proptest's `valid_v1beta1_cache`).
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use blockwork_properties::cache::{self, V1BETA1};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug)]
struct Choices {
    engine: u8,
    eviction: u8,
    memory: u16,
    in_gibibytes: bool,
    replicas: u8,
    tls_secret: Option<String>,
    high_availability: Option<(bool, bool)>,
    annotations: BTreeMap<String, String>,
    name: String,
}

/// A Kubernetes name made of `text`'s lowercase letters and digits (never empty).
fn name(text: &str) -> String {
    let kept: String = text.chars().filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit()).take(40).collect();
    format!("c{kept}")
}

fn valid_v1beta1_cache(choices: Choices) -> Option<Value> {
    let engine = ["redis", "valkey", "memcached"][usize::from(choices.engine % 3)];
    let eviction = ["allkeys-lru", "volatile-lru", "noeviction"][usize::from(choices.eviction % 3)];
    let replicas = i32::from(choices.replicas % 10) + 1;
    // v1beta1's CEL rules: memcached cannot evict only keys with a TTL; highAvailability needs
    // redis or valkey and 3 replicas.
    if engine == "memcached" && eviction == "volatile-lru" {
        return None;
    }
    if matches!(choices.high_availability, Some((true, _))) && (engine == "memcached" || replicas < 3) {
        return None;
    }
    let memory =
        if choices.in_gibibytes { format!("{}Gi", choices.memory % 1024 + 1) } else { format!("{}Mi", choices.memory % 9936 + 64) };
    let mut spec = json!({"engine": engine, "memory": memory, "replicas": replicas, "evictionPolicy": eviction});
    if let Some(secret) = choices.tls_secret {
        spec["tls"] = json!({"enabled": true, "secretName": name(&secret)});
    }
    if let Some((enabled, auto_failover)) = choices.high_availability {
        spec["highAvailability"] = json!({"enabled": enabled, "autoFailover": auto_failover});
    }
    let mut metadata = json!({"name": name(&choices.name), "namespace": "fuzz"});
    let annotations: BTreeMap<String, String> =
        choices.annotations.into_iter().map(|(key, value)| (format!("{}.example.com/a", name(&key)), value)).collect();
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    Some(json!({"apiVersion": V1BETA1, "kind": "Cache", "metadata": metadata, "spec": spec}))
}

fuzz_target!(|choices: Choices| {
    let Some(beta) = valid_v1beta1_cache(choices) else { return };
    if let Err(violation) = cache::v1beta1_round_trip_is_lossless(&beta) {
        panic!("{violation}");
    }
    if let Err(violation) = cache::v1alpha1_round_trip_is_lossless(&beta) {
        panic!("{violation}");
    }
});
