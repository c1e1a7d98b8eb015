//! The conversion webhook: v1alpha1 <-> v1beta1. v1alpha1 has no `highAvailability`; it is kept
//! in an annotation while an object is read as v1alpha1, so a round trip loses nothing.

use axum::Json;
use axum::routing::post;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::response::Status;
use serde_json::Value;

use crate::api::HIGH_AVAILABILITY_ANNOTATION;
use crate::crd::CONVERSION_PATH;

const V1ALPHA1: &str = "cache.blockwork.dev/v1alpha1";
const V1BETA1: &str = "cache.blockwork.dev/v1beta1";

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
        (V1BETA1, V1ALPHA1) => {
            if let Some(ha) = object["spec"].as_object_mut().and_then(|spec| spec.remove("highAvailability")) {
                annotations(&mut object)?.insert(HIGH_AVAILABILITY_ANNOTATION.to_owned(), Value::String(ha.to_string()));
            }
        }
        (V1ALPHA1, V1BETA1) => {
            if let Some(saved) = annotations(&mut object)?.remove(HIGH_AVAILABILITY_ANNOTATION) {
                let ha: Value = serde_json::from_str(saved.as_str().unwrap_or_default())
                    .map_err(|e| format!("annotation {HIGH_AVAILABILITY_ANNOTATION} is not valid JSON: {e}"))?;
                if let Some(spec) = object["spec"].as_object_mut() {
                    spec.insert("highAvailability".into(), ha);
                }
            }
        }
        (from, to) => return Err(format!("cannot convert Cache from {from:?} to {to:?}")),
    }
    object["apiVersion"] = Value::String(desired.to_owned());
    Ok(object)
}

fn annotations(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, String> {
    let metadata = object.get_mut("metadata").and_then(Value::as_object_mut).ok_or("the object has no metadata")?;
    let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Default::default());
    }
    annotations.as_object_mut().ok_or_else(|| "metadata.annotations is not an object".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn beta() -> Value {
        json!({"apiVersion": V1BETA1, "kind": "Cache", "metadata": {"name": "c"},
               "spec": {"engine": "redis", "memory": "1Gi", "replicas": 3, "highAvailability": {"enabled": true, "autoFailover": false}}})
    }

    #[test]
    fn round_trip_through_v1alpha1_keeps_high_availability() {
        let alpha = convert(beta(), V1ALPHA1).expect("down");
        assert!(alpha["spec"].get("highAvailability").is_none());
        assert_eq!(alpha["apiVersion"], V1ALPHA1);
        let back = convert(alpha, V1BETA1).expect("up");
        assert_eq!(back, {
            let mut expected = beta();
            expected["metadata"]["annotations"] = json!({});
            expected
        });
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
}
