//! Whether a child object already is what the controller would apply, so that a reconcile
//! with nothing to change writes nothing.
//!
//! A server-side apply that changes nothing is still a write request: the API server decodes,
//! merges and compares it, and audit logs and admission webhooks see it. The Cache controller
//! reconciles on every status change of its StatefulSet, so without this check one change of a
//! Cache became ten applies of each child (measured by the end-to-end suite's audit log).
//!
//! The decision: the desired body is stamped with a hash of itself ([`ANNOTATION`]); the live
//! object is left alone when it holds every field of the stamped body with the same value. The
//! stamp catches what a field-by-field check cannot: a field the controller stopped setting
//! (apply removes it, a subset check would call it fine). The field check catches the rest:
//! someone else's edit of a field the controller owns.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// On each child: a hash of the body last applied.
pub const ANNOTATION: &str = "cache.blockwork.dev/applied";

/// Adds the stamp of `body` (its hash, computed without the stamp) to its annotations.
pub fn stamp(body: &mut Value) {
    if let Some(annotations) = body.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        annotations.remove(ANNOTATION);
    }
    let hash = hex::encode(&Sha256::digest(body.to_string().as_bytes())[..8]);
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(ANNOTATION.to_owned(), Value::String(hash));
        }
    }
}

/// Whether `live` holds every field of `desired` with the same value (objects: each key of
/// `desired`; arrays: the same length, element by element). Fields only `live` has (defaults,
/// status, other managers' fields) do not matter. A zero value (`""`, `0`, `false`, empty) the
/// live object lacks is held: the API server omits such fields (Go's `omitempty`), so an
/// environment variable `{name: X, value: ""}` comes back as `{name: X}`.
pub fn holds(live: &Value, desired: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| match have.get(key) {
            Some(have) => holds(have, value),
            None => is_zero(value),
        }),
        (Value::Array(want), Value::Array(have)) => want.len() == have.len() && want.iter().zip(have).all(|(w, h)| holds(h, w)),
        (want, have) => want == have,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stamped(mut body: Value) -> Value {
        stamp(&mut body);
        body
    }

    #[test]
    fn a_live_object_with_defaults_and_status_added_holds_what_was_applied() {
        let desired = stamped(json!({"metadata": {"name": "c"}, "spec": {"replicas": 1, "ports": [{"port": 6379}]}}));
        let mut live = desired.clone();
        live["spec"]["ports"][0]["protocol"] = json!("TCP");
        live["spec"]["revisionHistoryLimit"] = json!(10);
        live["status"] = json!({"readyReplicas": 1});
        assert!(holds(&live, &desired));
    }

    #[test]
    fn an_empty_value_the_api_server_omitted_is_held() {
        let desired = stamped(json!({"metadata": {}, "env": [{"name": "CACHE_CLI", "value": ""}]}));
        let mut live = desired.clone();
        live["env"] = json!([{"name": "CACHE_CLI"}]);
        assert!(holds(&live, &desired));
        live["env"] = json!([{"name": "CACHE_CLI", "value": "redis-cli"}]);
        assert!(!holds(&live, &desired));
    }

    #[test]
    fn another_value_in_a_field_the_controller_sets_does_not_hold() {
        let desired = stamped(json!({"metadata": {"name": "c"}, "spec": {"replicas": 3}}));
        let mut live = desired.clone();
        live["spec"]["replicas"] = json!(1);
        assert!(!holds(&live, &desired));
    }

    #[test]
    fn a_field_the_controller_stopped_setting_changes_the_stamp() {
        let before = stamped(json!({"metadata": {"name": "c"}, "data": {"redis.conf": "x", "sentinel.sh": "y"}}));
        let after = stamped(json!({"metadata": {"name": "c"}, "data": {"redis.conf": "x"}}));
        assert!(!holds(&before, &after), "the live object still has sentinel.sh: apply must remove it");
    }

    #[test]
    fn an_array_of_another_length_does_not_hold() {
        let desired = stamped(json!({"metadata": {}, "volumes": [{"name": "config"}]}));
        let mut live = desired.clone();
        live["volumes"] = json!([{"name": "config"}, {"name": "tls"}]);
        assert!(!holds(&live, &desired));
    }

    #[test]
    fn the_stamp_is_the_same_for_the_same_body_and_ignores_an_old_stamp() {
        let body = json!({"metadata": {"name": "c", "annotations": {"a": "b"}}, "spec": {"x": 1}});
        let once = stamped(body.clone());
        assert_eq!(stamped(once.clone()), once);
        assert_eq!(stamped(body), once);
        assert_eq!(once["metadata"]["annotations"]["a"], "b");
    }
}
