//! The DistributionTenant admission webhook over HTTP: any body gets 200 or a client error, and
//! a body that is a DistributionTenant, sent in an AdmissionReview under each operation, gets a
//! well-formed verdict. (The Cert webhook needs a kube-apiserver for its index of Certs; the
//! proptest suite covers it.)
#![no_main]

use std::sync::OnceLock;

use blockwork_properties::webhook::{self, admission_review};
use blockwork_tenant::DistributionTenant;
use blockwork_tenant::webhook::{PATH, router};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const KIND: (&str, &str, &str, &str) = ("cloudfront.blockwork.dev", "v1alpha1", "DistributionTenant", "distributiontenants");

fn tenant_router() -> &'static axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    // No AwsIdentity: every namespace acts as the operator, as in a single-account install.
    ROUTER.get_or_init(|| router(blockwork_identity::Identities::fixed(Vec::new(), blockwork_identity::Settings::default()), true))
}

fuzz_target!(|body: &[u8]| {
    if let Err(violation) = webhook::answers_any_body_without_a_server_error(tenant_router(), PATH, body) {
        panic!("{violation}");
    }
    // What the API server sends: an object its schema admitted (here: one that deserializes).
    let Ok(object) = serde_json::from_slice::<Value>(body) else { return };
    if serde_json::from_value::<DistributionTenant>(object.clone()).is_err() {
        return;
    }
    for operation in ["CREATE", "UPDATE", "DELETE"] {
        let review = admission_review(KIND, object.clone(), operation, "fuzz-uid");
        if let Err(violation) = webhook::answers_the_admission_review(tenant_router(), PATH, &review, "fuzz-uid") {
            panic!("{operation}: {violation}");
        }
    }
});
