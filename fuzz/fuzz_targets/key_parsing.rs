//! The rotator's key parsing: any bytes as a certificate PEM (so PEM armour around any DER, seeded
//! with a real certificate) parse to a JWK or an error, never a panic.
#![no_main]

use blockwork_properties::rotator;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Err(violation) = rotator::any_key_material_parses_to_a_key_or_an_error(input) {
        panic!("{violation}");
    }
});
