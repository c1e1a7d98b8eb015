//! The Cache conversion v1alpha1 <-> v1beta1 (`blockwork_cache::conversion::convert`).

use blockwork_cache::conversion::convert;
use serde_json::{Value, json};

use crate::{Verdict, check};

pub const V1ALPHA1: &str = "cache.blockwork.dev/v1alpha1";
pub const V1BETA1: &str = "cache.blockwork.dev/v1beta1";

/// A valid v1beta1 Cache converted to v1alpha1 (which has no `highAvailability`) and back is
/// the Cache it was.
pub fn v1beta1_round_trip_is_lossless(beta: &Value) -> Verdict {
    let alpha = convert(beta.clone(), V1ALPHA1)?;
    check(alpha["apiVersion"] == V1ALPHA1, || format!("converted to {}: {alpha}", alpha["apiVersion"]))?;
    check(alpha["spec"].get("highAvailability").is_none(), || format!("v1alpha1 has no highAvailability: {alpha}"))?;
    let back = convert(alpha, V1BETA1)?;
    check(&back == beta, || format!("{beta}\ncame back as\n{back}"))
}

/// The v1alpha1 form of a valid v1beta1 Cache (its `highAvailability` dropped), converted to
/// v1beta1 and back, is the Cache it was.
pub fn v1alpha1_round_trip_is_lossless(beta: &Value) -> Verdict {
    let mut alpha = beta.clone();
    alpha["apiVersion"] = json!(V1ALPHA1);
    if let Some(spec) = alpha["spec"].as_object_mut() {
        spec.remove("highAvailability");
    }
    let back = convert(convert(alpha.clone(), V1BETA1)?, V1ALPHA1)?;
    check(back == alpha, || format!("{alpha}\ncame back as\n{back}"))
}
