//! DNS names (`blockwork_aws::dns_name`): the normal form, `parse`, and the CRD schema's pattern.

use std::sync::OnceLock;

use blockwork_aws::dns_name;
use regex::Regex;

use crate::{Verdict, check};

/// Normalizing is idempotent, and for a name `parse` accepts, the normal form is what `parse`
/// returns, which parses to itself, with or without a trailing dot.
pub fn normalization_is_idempotent_and_agrees_with_parse(name: &str) -> Verdict {
    let normal = dns_name::normalize(name);
    let again = dns_name::normalize(&normal);
    check(again == normal, || format!("{name:?}: normalized {normal:?}, normalized again {again:?}"))?;
    let Ok(parsed) = dns_name::parse(name) else { return Ok(()) };
    check(parsed == normal, || format!("{name:?}: parse gives {parsed:?} but the normal form is {normal:?}"))?;
    let reparsed = dns_name::parse(&parsed);
    check(reparsed.as_ref() == Ok(&parsed), || format!("{name:?}: the parsed {parsed:?} parses to {reparsed:?}"))?;
    let dotted = dns_name::parse(&format!("{parsed}."));
    check(dotted.as_ref() == Ok(&parsed), || format!("{name:?}: with a trailing dot, {parsed:?} parses to {dotted:?}"))
}

/// A name the controller accepts passes the CRD schema (pattern and length), and the schema
/// passes no plain (non-IDNA) name that fits the length and that the controller refuses: the
/// two layers agree, so nothing the schema stores is refused later for its name alone.
pub fn parse_and_the_crd_schema_agree(name: &str) -> Verdict {
    let parsed = dns_name::parse(name);
    let schema = schema_pattern().is_match(name) && name.len() <= dns_name::MAX_LENGTH + 1;
    if parsed.is_ok() {
        check(schema, || format!("{name:?} is accepted by parse but refused by the CRD schema"))?;
    }
    let relative = name.strip_suffix('.').unwrap_or(name);
    if schema && relative.len() <= dns_name::MAX_LENGTH && !name.contains("xn--") {
        check(parsed.is_ok(), || format!("{name:?} passes the CRD schema but parse refuses it: {parsed:?}"))?;
    }
    Ok(())
}

fn schema_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| Regex::new(dns_name::PATTERN).expect("dns_name::PATTERN is a valid regex (blockwork-aws tests it)"))
}
