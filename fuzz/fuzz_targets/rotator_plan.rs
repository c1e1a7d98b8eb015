//! The rotator's plan: a source Secret with arbitrary annotation values and key material (a real
//! certificate, one with bytes of its DER flipped, one cut short, or anything) is planned without a panic, and rotates once
//! per change.
#![no_main]

use arbitrary::Arbitrary;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use blockwork_properties::rotator;
use libfuzzer_sys::fuzz_target;

/// A real certificate (`fuzz/seeds/key_parsing/certificate.der`), for key material that gets
/// past parsing.
const CERTIFICATE: &[u8] = include_bytes!("../seeds/key_parsing/certificate.der");

/// `der` in PEM armour.
fn armour(der: &[u8]) -> Vec<u8> {
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", STANDARD.encode(der)).into_bytes()
}

#[derive(Arbitrary, Debug)]
enum Flag {
    True,
    False,
    Anything(String),
}

impl Flag {
    fn value(&self) -> &str {
        match self {
            Flag::True => "true",
            Flag::False => "false",
            Flag::Anything(text) => text,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Material {
    Certificate,
    Flipped(Vec<(u16, u8)>),
    Cut(u16),
    Anything(Vec<u8>),
}

impl Material {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Material::Certificate => armour(CERTIFICATE),
            Material::Flipped(flips) => {
                let mut bytes = CERTIFICATE.to_vec();
                for &(at, byte) in flips {
                    let at = usize::from(at) % bytes.len();
                    bytes[at] ^= byte | 1;
                }
                armour(&bytes)
            }
            Material::Cut(at) => {
                let pem = armour(CERTIFICATE);
                pem[..usize::from(*at) % pem.len()].to_vec()
            }
            Material::Anything(bytes) => bytes.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Source {
    source: Flag,
    jwks: Flag,
    certificate: Material,
    key: Vec<u8>,
    renewed: Material,
}

fuzz_target!(|input: Source| {
    let source = rotator::source(input.source.value(), input.jwks.value(), input.certificate.bytes(), input.key);
    if let Err(violation) = rotator::plans_any_source_and_rotates_once_per_change(&source, &input.renewed.bytes()) {
        panic!("{violation}");
    }
});
