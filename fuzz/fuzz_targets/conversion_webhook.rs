//! The Cache conversion webhook over HTTP: any body gets 200 or a client error, and a body that
//! is JSON — an object, or an array of objects — sent in a ConversionReview to each version gets
//! every object converted or a failure saying why.
#![no_main]

use std::sync::OnceLock;

use blockwork_cache::crd::CONVERSION_PATH;
use blockwork_properties::cache::{V1ALPHA1, V1BETA1};
use blockwork_properties::webhook::{self, conversion_review};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn conversion_router() -> &'static axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER.get_or_init(blockwork_cache::conversion::router)
}

fuzz_target!(|body: &[u8]| {
    let router = conversion_router();
    if let Err(violation) = webhook::answers_any_body_without_a_server_error(router, CONVERSION_PATH, body) {
        panic!("{violation}");
    }
    let objects = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(objects)) => objects,
        Ok(object) => vec![object],
        Err(_) => return,
    };
    for desired in [V1ALPHA1, V1BETA1] {
        let review = conversion_review(objects.clone(), desired, "fuzz-uid");
        if let Err(violation) = webhook::answers_the_conversion_review(router, CONVERSION_PATH, &review, "fuzz-uid", objects.len()) {
            panic!("to {desired}: {violation}");
        }
    }
});
