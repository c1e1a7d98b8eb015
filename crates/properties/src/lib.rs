//! The properties Blockwork's fuzzers check, as functions of one input each: the admission and
//! conversion webhooks answer every body with a well-formed response, the Cache round trip
//! v1alpha1 <-> v1beta1 loses nothing, the tenant diff sees no difference between a spec and
//! itself reordered, DNS-name normalization is idempotent and agrees with the CRD schema, and the
//! rotator parses any key material and rotates once per change.
//!
//! Two fuzzers call them, each generating inputs its own way: proptest
//! (`crates/reliability/tests/integration/fuzz.rs`, in every CI run) and cargo-fuzz's coverage-guided
//! libFuzzer (`fuzz/`, `scripts/fuzz`). One property, one function: a fix or a sharper check
//! reaches both. A property returns the [`Violation`] it found; the caller fails the case (a
//! proptest failure, a libFuzzer crash with the input saved).

pub mod cache;
pub mod dns;
pub mod rotator;
pub mod tenant;
pub mod webhook;

/// What a property found wrong, as a sentence naming the input.
pub type Violation = String;

/// The outcome of checking a property on one input.
pub type Verdict = Result<(), Violation>;

/// `Ok` when `holds`, else the violation `describe` writes.
fn check(holds: bool, describe: impl FnOnce() -> String) -> Verdict {
    if holds { Ok(()) } else { Err(describe()) }
}
