//! The webhooks over HTTP, as the API server calls them: an `axum::Router` and a body. Every body
//! gets an answer (never a panic, a hang or a server error), and a review gets a well-formed one.

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::{Verdict, Violation, check};

/// How long a webhook may take before it counts as hung (the API server's own limit is 10 s at
/// most; this is generous for a loaded machine).
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The runtime the properties call the routers on; a router that spawns tasks (the Cert
/// webhook's watch) is built on it too.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime starts"))
}

/// POSTs `body` to `router` at `path`: the status and the body of the answer.
pub fn post(router: &Router, path: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), Violation> {
    let request = http::Request::post(path).header("content-type", "application/json").body(Body::from(body)).map_err(|e| e.to_string())?;
    runtime().block_on(async {
        let call = router.clone().oneshot(request);
        let response = tokio::time::timeout(ANSWER_WITHIN, call)
            .await
            .map_err(|_| format!("{path}: no answer within {ANSWER_WITHIN:?}"))?
            .map_err(|e| format!("{path}: {e}"))?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(|e| format!("{path}: reading the answer: {e}"))?.to_bytes().to_vec();
        Ok((status, body))
    })
}

/// An AdmissionReview as the API server sends one: `object` under `operation` (`kind` is group,
/// version, kind, resource). An object without a name (a CREATE with `generateName`) has no
/// `request.name`: the API server omits an empty one, it never sends `null`.
pub fn admission_review(kind: (&str, &str, &str, &str), object: Value, operation: &str, uid: &str) -> Value {
    let (group, version, kind, resource) = kind;
    let mut review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "operation": operation, "userInfo": {"username": "fuzz"},
            "namespace": "fuzz",
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": if operation == "CREATE" { Value::Null } else { object.clone() },
        }
    });
    if let Some(name) = object["metadata"]["name"].as_str() {
        review["request"]["name"] = json!(name);
    }
    review
}

/// An admission webhook answers `review` (asking about `uid`) with 200 and a well-formed
/// AdmissionReview for `uid`: allowed, or denied with a message saying why.
pub fn answers_the_admission_review(router: &Router, path: &str, review: &Value, uid: &str) -> Verdict {
    let (status, body) = post(router, path, serde_json::to_vec(review).map_err(|e| e.to_string())?)?;
    let text = || String::from_utf8_lossy(&body).into_owned();
    check(status == 200, || format!("{path}: status {status}: {}", text()))?;
    let answer: Value = serde_json::from_slice(&body).map_err(|e| format!("{path}: not JSON ({e}): {}", text()))?;
    check(answer["apiVersion"] == "admission.k8s.io/v1" && answer["kind"] == "AdmissionReview", || {
        format!("{path}: not an AdmissionReview: {answer}")
    })?;
    let response = &answer["response"];
    check(response["uid"] == uid, || format!("{path}: answers uid {} for {uid:?}", response["uid"]))?;
    let allowed = response["allowed"].as_bool().ok_or_else(|| format!("{path}: no `allowed`: {answer}"))?;
    check(allowed || response["status"]["message"].as_str().is_some_and(|m| !m.is_empty()), || {
        format!("{path}: a denial without a reason: {answer}")
    })
}

/// A webhook answers any body with 200 (a review it could read) or a client error — never a
/// server error, a hang or a crash.
pub fn answers_any_body_without_a_server_error(router: &Router, path: &str, body: &[u8]) -> Verdict {
    let (status, answer) = post(router, path, body.to_vec())?;
    check(status == 200 || (400..500).contains(&status), || format!("{path}: status {status}: {}", String::from_utf8_lossy(&answer)))
}

/// A ConversionReview as the API server sends one.
pub fn conversion_review(objects: Vec<Value>, desired: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    })
}

/// The conversion webhook answers `review` (of `count` objects, asking about `uid`) with 200
/// and either every object converted to the desired version, or a failure saying why.
pub fn answers_the_conversion_review(router: &Router, path: &str, review: &Value, uid: &str, count: usize) -> Verdict {
    let (status, body) = post(router, path, serde_json::to_vec(review).map_err(|e| e.to_string())?)?;
    check(status == 200, || format!("{path}: status {status}: {}", String::from_utf8_lossy(&body)))?;
    let answer: Value = serde_json::from_slice(&body).map_err(|e| format!("{path}: not JSON ({e})"))?;
    let response = &answer["response"];
    check(response["uid"] == uid, || format!("{path}: answers uid {} for {uid:?}", response["uid"]))?;
    match response["result"]["status"].as_str() {
        Some("Success") => {
            let converted = response["convertedObjects"].as_array().map(Vec::as_slice).unwrap_or_default();
            check(converted.len() == count, || format!("{path}: {} objects converted of {count}: {answer}", converted.len()))?;
            let desired = &review["request"]["desiredAPIVersion"];
            check(converted.iter().all(|o| &o["apiVersion"] == desired), || format!("{path}: not all converted to {desired}: {answer}"))
        }
        Some("Failure") => check(response["result"]["message"].as_str().is_some_and(|m| !m.is_empty()), || {
            format!("{path}: a failure without a message: {answer}")
        }),
        other => Err(format!("{path}: result status {other:?}: {answer}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first crash of `scripts/fuzz` (fuzz/seeds/admission_webhook/crash-b9c5f4e0…): a
    /// DistributionTenant without `metadata.name` was reviewed with `"name": null`, which the
    /// API server never sends and kube refuses with a 422 — the harness, not the webhook, was
    /// wrong.
    #[test]
    fn an_object_without_a_name_is_reviewed_without_one_and_gets_a_well_formed_verdict() {
        let object = json!({
            "apiVersion": "cloudfront.blockwork.dev/v1alpha1", "kind": "DistributionTenant",
            "metadata": {"na0me": "domains-too-many"},
            "spec": {"distributionId": "E1ABCDEF2GHIJ", "domains": []},
        });
        let kind = ("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant", "distributiontenants");
        // No API server: a Cert the object named could not be read, which admission tells as a warning.
        let nowhere = runtime().block_on(async { kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))) });
        let router = blockwork_tenant::webhook::router(
            nowhere.expect("a client"),
            blockwork_identity::Identities::fixed(Vec::new(), blockwork_identity::Settings::default()),
            None,
            true,
        );
        for operation in ["CREATE", "UPDATE", "DELETE"] {
            let review = admission_review(kind, object.clone(), operation, "uid-1");
            assert!(review["request"].get("name").is_none(), "{review}");
            assert_eq!(answers_the_admission_review(&router, blockwork_tenant::webhook::PATH, &review, "uid-1"), Ok(()));
        }
    }
}
