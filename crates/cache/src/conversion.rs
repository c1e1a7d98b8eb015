//! The conversion webhook: v1alpha1 <-> v1beta1. v1alpha1 has no `highAvailability`; it is kept
//! in an annotation while an object is read as v1alpha1, so a round trip loses nothing.
//!
//! A version's rules hold however an object arrives. The API server validates a v1alpha1 write
//! against v1alpha1's schema, which cannot see `highAvailability`, and then stores what this
//! conversion makes of it without validating again. So when the annotation brings
//! `highAvailability` back, this conversion checks it as v1beta1's schema would (its type, then
//! every CEL rule of v1beta1, evaluated by `kube-cel`) and refuses to convert an object that
//! v1beta1 itself would refuse: a write through v1alpha1 can store nothing a v1beta1 write
//! could not.

use std::sync::OnceLock;

use axum::Json;
use axum::routing::post;
use kube::CustomResourceExt as _;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::response::Status;
use kube_cel::CompiledSchema;
use serde_json::{Map, Value};

use crate::api::{HIGH_AVAILABILITY_ANNOTATION, HighAvailability, v1beta1};
use crate::crd::CONVERSION_PATH;

const V1ALPHA1: &str = "cache.blockwork.dev/v1alpha1";
const V1BETA1: &str = "cache.blockwork.dev/v1beta1";
/// The fields of `highAvailability`, all the annotation may hold.
const HIGH_AVAILABILITY_FIELDS: [&str; 2] = ["enabled", "autoFailover"];

/// The route the webhook server serves.
pub fn router() -> axum::Router {
    axum::Router::new().route(CONVERSION_PATH, post(|Json(review): Json<ConversionReview>| async move { Json(review_response(review)) }))
}

pub fn review_response(review: ConversionReview) -> ConversionReview {
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => return ConversionResponse::invalid(Status::failure("the ConversionReview has no request", "BadRequest")).into_review(),
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<Value>, String> = request.objects.iter().map(|object| convert(object.clone(), &desired)).collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(message) => response.failure(Status::failure(&message, "ConversionFailed")),
    }
    .into_review()
}

/// Converts one object to `desired` (`group/version`).
pub fn convert(mut object: Value, desired: &str) -> Result<Value, String> {
    let from = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    match (from.as_str(), desired) {
        (a, b) if a == b => {}
        (V1BETA1, V1ALPHA1) => match object["spec"].as_object_mut().and_then(|spec| spec.remove("highAvailability")) {
            Some(ha) => {
                annotations(&mut object)?.insert(HIGH_AVAILABILITY_ANNOTATION.to_owned(), Value::String(ha.to_string()));
            }
            // Only this conversion writes the annotation: one found on a v1beta1 object without
            // highAvailability was written by hand and must not come back as highAvailability.
            None => remove_annotation(&mut object),
        },
        (V1ALPHA1, V1BETA1) => {
            let saved = object.pointer("/metadata/annotations").and_then(|a| a.get(HIGH_AVAILABILITY_ANNOTATION)).cloned();
            remove_annotation(&mut object);
            if let Some(saved) = saved {
                let ha = high_availability(&saved)?;
                if let Some(spec) = object["spec"].as_object_mut() {
                    spec.insert("highAvailability".into(), ha);
                }
                object["apiVersion"] = Value::String(desired.to_owned());
                holds_v1beta1_rules(&object)?;
            }
        }
        (from, to) => return Err(format!("cannot convert Cache from {from:?} to {to:?}")),
    }
    object["apiVersion"] = Value::String(desired.to_owned());
    Ok(object)
}

/// `highAvailability` from the annotation, as v1beta1's schema types it: an object of the two
/// known fields, each a boolean; written back with its defaults.
fn high_availability(saved: &Value) -> Result<Value, String> {
    let invalid = |why: String| format!("annotation {HIGH_AVAILABILITY_ANNOTATION} is not a v1beta1 highAvailability: {why}");
    let text = saved.as_str().ok_or_else(|| invalid("not a string".into()))?;
    let value: Value = serde_json::from_str(text).map_err(|e| invalid(format!("not JSON ({e})")))?;
    let fields = value.as_object().ok_or_else(|| invalid(format!("{value} is not an object")))?;
    if let Some(unknown) = fields.keys().find(|k| !HIGH_AVAILABILITY_FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!("unknown field {unknown:?}, expected {}", HIGH_AVAILABILITY_FIELDS.join(" or "))));
    }
    let typed: HighAvailability = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    serde_json::to_value(typed).map_err(|e| invalid(e.to_string()))
}

/// Every CEL rule of v1beta1's schema, on the whole converted object.
fn holds_v1beta1_rules(object: &Value) -> Result<(), String> {
    static SCHEMA: OnceLock<Result<CompiledSchema, String>> = OnceLock::new();
    let schema = SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(v1beta1::Cache::crd()).map_err(|e| e.to_string())?;
        let schema = crd.pointer("/spec/versions/0/schema/openAPIV3Schema").ok_or("the v1beta1 CRD has no schema")?;
        Ok(kube_cel::compile_schema(schema))
    });
    let schema = schema.as_ref().map_err(|e| format!("cannot check the v1beta1 rules: {e}"))?;
    kube_cel::validate_compiled(schema, object, None).map_err(|errors| {
        let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "with highAvailability from annotation {HIGH_AVAILABILITY_ANNOTATION}, this Cache breaks v1beta1's rules: {}",
            problems.join("; ")
        )
    })
}

fn annotations(object: &mut Value) -> Result<&mut Map<String, Value>, String> {
    let metadata = object.get_mut("metadata").and_then(Value::as_object_mut).ok_or("the object has no metadata")?;
    let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Map::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Map::default());
    }
    annotations.as_object_mut().ok_or_else(|| "metadata.annotations is not an object".to_owned())
}

/// Removes the annotation, and the annotations with it if it was the only one: the conversion to
/// v1alpha1 added them, and a round trip gives back the object it was given.
fn remove_annotation(object: &mut Value) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let emptied = match metadata.get_mut("annotations").and_then(Value::as_object_mut) {
        Some(annotations) => annotations.remove(HIGH_AVAILABILITY_ANNOTATION).is_some() && annotations.is_empty(),
        None => false,
    };
    if emptied {
        metadata.remove("annotations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn beta() -> Value {
        json!({"apiVersion": V1BETA1, "kind": "Cache", "metadata": {"name": "c"},
               "spec": {"engine": "redis", "memory": "1Gi", "replicas": 3, "highAvailability": {"enabled": true, "autoFailover": false}}})
    }

    fn alpha_with(spec: Value, annotation: &str) -> Value {
        json!({"apiVersion": V1ALPHA1, "kind": "Cache", "metadata": {"name": "c", "annotations": {HIGH_AVAILABILITY_ANNOTATION: annotation}},
               "spec": spec})
    }

    #[test]
    fn round_trip_through_v1alpha1_keeps_high_availability() {
        let alpha = convert(beta(), V1ALPHA1).expect("down");
        assert!(alpha["spec"].get("highAvailability").is_none());
        assert_eq!(alpha["apiVersion"], V1ALPHA1);
        let back = convert(alpha, V1BETA1).expect("up");
        assert_eq!(back["spec"], beta()["spec"]);
    }

    /// Found by the reliability campaign's fuzzing (issue 15): the round trip left an empty
    /// `annotations` behind on an object that had none.
    #[test]
    fn round_trip_of_an_object_without_annotations_adds_none() {
        let alpha = convert(beta(), V1ALPHA1).expect("to v1alpha1");
        assert!(alpha["metadata"]["annotations"].get(HIGH_AVAILABILITY_ANNOTATION).is_some());
        assert_eq!(convert(alpha, V1BETA1).expect("back"), beta());
    }

    #[test]
    fn v1alpha1_without_annotation_converts_to_v1beta1_without_high_availability() {
        let alpha =
            json!({"apiVersion": V1ALPHA1, "kind": "Cache", "metadata": {"name": "c"}, "spec": {"engine": "memcached", "memory": "64Mi"}});
        let beta = convert(alpha, V1BETA1).expect("up");
        assert_eq!(beta["apiVersion"], V1BETA1);
        assert!(beta["spec"].get("highAvailability").is_none());
    }

    #[test]
    fn unknown_versions_are_refused() {
        assert!(convert(beta(), "cache.blockwork.dev/v9").expect_err("unknown").contains("v9"));
    }

    #[test]
    fn high_availability_for_memcached_through_the_annotation_is_refused_with_v1beta1_s_message() {
        let alpha = alpha_with(json!({"engine": "memcached", "memory": "64Mi", "replicas": 3}), r#"{"enabled":true}"#);
        let error = convert(alpha, V1BETA1).expect_err("memcached does not replicate");
        assert!(error.contains("memcached does not replicate") && error.contains(HIGH_AVAILABILITY_ANNOTATION), "{error}");
    }

    #[test]
    fn high_availability_with_two_replicas_through_the_annotation_is_refused() {
        let alpha = alpha_with(json!({"engine": "redis", "memory": "64Mi", "replicas": 2}), r#"{"enabled":true,"autoFailover":true}"#);
        let error = convert(alpha, V1BETA1).expect_err("2 replicas");
        assert!(error.contains("at least 3 replicas"), "{error}");
    }

    #[test]
    fn an_annotation_that_is_not_a_high_availability_object_is_refused() {
        for (annotation, expected) in [
            ("yes", "not JSON"),
            ("[true]", "not an object"),
            (r#"{"enabled":"yes"}"#, "invalid type"),
            (r#"{"enable":true}"#, "\"enable\""),
        ] {
            let alpha = alpha_with(json!({"engine": "redis", "memory": "64Mi", "replicas": 3}), annotation);
            let error = convert(alpha, V1BETA1).expect_err(annotation);
            assert!(error.contains(expected) && error.contains(HIGH_AVAILABILITY_ANNOTATION), "{annotation}: {error}");
        }
    }

    #[test]
    fn a_valid_annotation_becomes_high_availability_with_its_defaults() {
        let alpha = alpha_with(json!({"engine": "valkey", "memory": "64Mi", "replicas": 3}), r#"{"enabled":true}"#);
        let beta = convert(alpha, V1BETA1).expect("valid");
        assert_eq!(beta["spec"]["highAvailability"], json!({"enabled": true, "autoFailover": true}));
        assert!(beta["metadata"]["annotations"].get(HIGH_AVAILABILITY_ANNOTATION).is_none());
    }

    #[test]
    fn an_annotation_written_on_a_v1beta1_object_does_not_come_back_as_high_availability() {
        let mut stored = beta();
        stored["spec"].as_object_mut().expect("spec").remove("highAvailability");
        stored["metadata"]["annotations"] = json!({HIGH_AVAILABILITY_ANNOTATION: r#"{"enabled":true}"#});
        let alpha = convert(stored, V1ALPHA1).expect("down");
        assert!(alpha["metadata"]["annotations"].get(HIGH_AVAILABILITY_ANNOTATION).is_none());
        assert!(convert(alpha, V1BETA1).expect("up")["spec"].get("highAvailability").is_none());
    }
}
