//! DNS names: normalization is idempotent and agrees with `parse`, `parse` agrees with the CRD
//! schema's pattern and accepts only labels a public CA takes, for any UTF-8 string.
#![no_main]

use blockwork_properties::dns;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|name: &str| {
    if let Err(violation) = dns::normalization_is_idempotent_and_agrees_with_parse(name) {
        panic!("{violation}");
    }
    if let Err(violation) = dns::parse_and_the_crd_schema_agree(name) {
        panic!("{violation}");
    }
    if let Err(violation) = dns::accepted_labels_are_ones_a_public_ca_takes(name) {
        panic!("{violation}");
    }
});
