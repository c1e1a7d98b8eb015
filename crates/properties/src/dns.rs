//! DNS names (`blockwork_aws::dns_name`): the normal form, `parse`, the CRD schema's pattern,
//! what a public CA takes, and lists that name a domain once.

use std::sync::OnceLock;

use blockwork_aws::dns_name::{self, FieldError};
use icu_properties::CodePointMapData;
use icu_properties::props::GeneralCategory;
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
/// passes no plain name that fits the length and that the controller refuses: the two layers
/// agree, so nothing the schema stores is refused later for its name alone. Plain: no label
/// with `--` in its third and fourth characters (A-labels and reserved labels, which only the
/// webhook and the controller can judge).
pub fn parse_and_the_crd_schema_agree(name: &str) -> Verdict {
    let parsed = dns_name::parse(name);
    let schema = schema_pattern().is_match(name) && name.len() <= dns_name::MAX_LENGTH + 1;
    if parsed.is_ok() {
        check(schema, || format!("{name:?} is accepted by parse but refused by the CRD schema"))?;
    }
    let relative = name.strip_suffix('.').unwrap_or(name);
    let plain = !relative.split('.').any(|label| label.get(2..4) == Some("--"));
    if schema && relative.len() <= dns_name::MAX_LENGTH && plain {
        check(parsed.is_ok(), || format!("{name:?} passes the CRD schema but parse refuses it: {parsed:?}"))?;
    }
    Ok(())
}

/// Every label of a name `parse` accepts is one a public CA takes (the CA/Browser Forum's
/// non-reserved LDH labels and P-labels): `--` in its third and fourth characters only in an
/// A-label (`xn--`), and an A-label decodes to a U-label that encodes back to it and holds only
/// what IDNA2008 admits: letters, marks, decimal digits, the hyphen, and the few code points RFC
/// 5892 lists by hand (§2.6). Never a symbol, an emoji, punctuation or a space.
pub fn accepted_labels_are_ones_a_public_ca_takes(name: &str) -> Verdict {
    let Ok(parsed) = dns_name::parse(name) else { return Ok(()) };
    for label in parsed.strip_prefix("*.").unwrap_or(&parsed).split('.') {
        if label.get(2..4) != Some("--") {
            continue;
        }
        check(label.starts_with("xn--"), || format!("{name:?}: the reserved label {label:?} is accepted"))?;
        let (u_label, decoded) = idna::domain_to_unicode(label);
        check(decoded.is_ok(), || format!("{name:?}: the A-label {label:?} is accepted but does not decode"))?;
        let encoded = idna::domain_to_ascii(&u_label).ok();
        check(encoded.as_deref() == Some(label), || format!("{name:?}: {label:?} decodes to {u_label:?}, which encodes to {encoded:?}"))?;
        let foreign = u_label.chars().find(|&c| !idna2008_admits(c));
        check(foreign.is_none(), || {
            format!("{name:?}: the A-label {label:?} decodes to {u_label:?}, with {foreign:?}, which IDNA2008 refuses")
        })?;
    }
    Ok(())
}

/// Letters, marks, decimal digits, the hyphen, or one of RFC 5892's exceptions (§2.6) that are
/// not: ARABIC SIGN SINDHI AMPERSAND and POSTPOSITION MEN, TIBETAN MARK INTERSYLLABIC TSHEG,
/// IDEOGRAPHIC NUMBER ZERO, and the five with a contextual rule (middle dots, Greek keraia,
/// Hebrew geresh and gershayim).
fn idna2008_admits(c: char) -> bool {
    use GeneralCategory as Gc;
    let category = CodePointMapData::<GeneralCategory>::new().get(c);
    let letter_mark_digit = matches!(
        category,
        Gc::LowercaseLetter
            | Gc::UppercaseLetter
            | Gc::OtherLetter
            | Gc::ModifierLetter
            | Gc::NonspacingMark
            | Gc::SpacingMark
            | Gc::DecimalNumber
    );
    letter_mark_digit
        || matches!(
            c,
            '-' | '\u{06FD}' | '\u{06FE}' | '\u{0F0B}' | '\u{3007}' | '\u{00B7}' | '\u{0375}' | '\u{05F3}' | '\u{05F4}' | '\u{30FB}'
        )
}

/// A list field takes its names exactly when each parses and no two share a normal form; every
/// problem names an entry that is invalid or repeats an earlier one, and a repeat names that
/// earlier entry.
pub fn a_list_names_each_domain_once(names: &[String]) -> Verdict {
    let parsed: Vec<Option<String>> = names.iter().map(|name| dns_name::parse(name).ok()).collect();
    let repeats = |index: usize| parsed[..index].iter().any(|earlier| earlier.is_some() && *earlier == parsed[index]);
    let expected: Vec<usize> = (0..names.len()).filter(|&i| parsed[i].is_none() || repeats(i)).collect();
    let result = dns_name::parse_list("spec.domains", names.iter().map(String::as_str));
    let field = |index: usize| format!("spec.domains[{index}]");
    match result {
        Ok(normals) => {
            check(expected.is_empty(), || format!("{names:?}: taken, though entries {expected:?} are invalid or repeated"))?;
            let all: Vec<String> = parsed.into_iter().flatten().collect();
            check(normals == all, || format!("{names:?}: gives {normals:?}, not the normal forms {all:?}"))
        }
        Err(problems) => {
            let named: Vec<String> = problems
                .iter()
                .map(|problem| match problem {
                    FieldError::Invalid { field, .. } | FieldError::Duplicate { field, .. } => field.clone(),
                })
                .collect();
            let wanted: Vec<String> = expected.iter().map(|&i| field(i)).collect();
            check(named == wanted, || format!("{names:?}: refused naming {named:?}, but {wanted:?} are the invalid or repeated entries"))?;
            let index_of = |name: &str| (0..names.len()).find(|&i| field(i) == name);
            for problem in &problems {
                if let FieldError::Duplicate { field: at, first, normal, .. } = problem {
                    let normal_at = |i: usize| parsed[i].as_deref() == Some(normal.as_str());
                    let earlier = match (index_of(first), index_of(at)) {
                        (Some(first), Some(at)) => first < at && normal_at(first) && normal_at(at),
                        _ => false,
                    };
                    check(earlier, || format!("{names:?}: {at} is said to repeat {first}, which is not an earlier entry naming {normal}"))?;
                }
            }
            Ok(())
        }
    }
}

fn schema_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| Regex::new(dns_name::PATTERN).expect("dns_name::PATTERN is a valid regex (blockwork-aws tests it)"))
}
