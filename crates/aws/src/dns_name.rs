//! DNS names as every Blockwork CRD takes them (a Cert's domain, generated name and SANs, a
//! DistributionTenant's domains): one rule and one normal form, so that a name means the same
//! thing in every CRD, and a name a public CA would refuse is refused at admission, naming the
//! field, the label and the rule, rather than by ACM or CloudFront after something was written.
//!
//! - The rule: at least two labels, at most 253 characters, optionally a wildcard `*.` as the
//!   whole first label, optionally a trailing dot. Every other label is either
//!   - an LDH label (lowercase letters, digits and hyphens, 1–63 characters, no hyphen at
//!     either end) without `--` in its third and fourth characters: those are reserved for
//!     IDNA (RFC 5891 §4.2.3.1, "R-LDH labels"), and the CA/Browser Forum's Baseline
//!     Requirements allow only non-reserved LDH labels and P-labels in certificates; or
//!   - an IDNA A-label (`xn--`, a P-label) that decodes to a valid U-label: UTS #46's checks as
//!     the `idna` crate makes them (punycode, NFC, hyphens, joiners, bidi), then IDNA2008's code
//!     point rules ([`crate::idna2008`]), which refuse the symbols and emoji UTS #46 takes
//!     (`xn--n3h`, ☃): a label IDNA2008 disallows is no valid internationalized name, and no
//!     registry registers one. `xn--bcher-kva` (bücher) is admitted; `xn--zz` and `xn--n3h`
//!     are not.
//! - The normal form: lowercase, without the trailing dot. `www.example.com.` (absolute) and
//!   `www.example.com` are the same name: compared, stored and sent to AWS in the normal form,
//!   and a list that names one domain twice ([`parse_list`]) is refused.
//!
//! [`PATTERN`] is the part of the rule a CRD schema can hold; [`parse`] is all of it, for the
//! admission webhooks and the controllers (which check again, for objects admitted without the
//! webhook).

use crate::idna2008::{self, Derived};
use idna::uts46::{AsciiDenyList, Hyphens, Uts46};

/// The CRD schema's pattern for a DNS name: lowercase LDH labels, an optional leading `*.`, an
/// optional trailing dot. What it cannot check (the total length beside `maxLength`, reserved
/// labels, A-labels) [`parse`] does.
pub const PATTERN: &str = r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$";

/// The longest name, without a trailing dot (RFC 1035's 255 octets on the wire).
pub const MAX_LENGTH: usize = 253;
/// The longest label.
pub const MAX_LABEL_LENGTH: usize = 63;
/// The prefix of an IDNA A-label (RFC 5890).
const ACE_PREFIX: &str = "xn--";

/// Why a name is not a DNS name Blockwork accepts. The message names the name and, where it is
/// one label's fault, the label and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsNameError {
    #[error("{name:?} is longer than {MAX_LENGTH} characters")]
    TooLong { name: String },
    #[error("{name:?} needs at least two labels (e.g. example.com)")]
    SingleLabel { name: String },
    #[error(
        "label {label:?} of {name:?} is not a DNS label: lowercase letters, digits and '-', 1-{MAX_LABEL_LENGTH} characters, not starting or ending with '-'"
    )]
    Label { name: String, label: String },
    #[error("{name:?}: a wildcard is allowed only as the whole first label (*.example.com)")]
    Wildcard { name: String },
    #[error(
        "label {label:?} of {name:?} has '--' in its third and fourth characters, which are reserved for IDNA A-labels (xn--; RFC 5891 4.2.3.1): public CAs refuse such a label"
    )]
    ReservedLabel { name: String, label: String },
    #[error(
        "label {label:?} of {name:?} starts with xn-- but is not a valid IDNA A-label (it does not decode to a valid internationalized label)"
    )]
    ALabel { name: String, label: String },
    #[error("label {label:?} of {name:?} is the internationalized label {u_label:?}, {}", refusal(.refused))]
    Idna2008 { name: String, label: String, u_label: String, refused: idna2008::Refused },
}

fn refusal(refused: &idna2008::Refused) -> String {
    let c = refused.code_point;
    let code_point = format!("U+{:04X} {c:?}", u32::from(c));
    match refused.derived {
        Derived::Unassigned => format!("which has {code_point}, not an assigned Unicode character"),
        Derived::ContextO | Derived::ContextJ => {
            format!("which has {code_point} where IDNA2008's contextual rule for it does not hold (RFC 5892 Appendix A)")
        }
        Derived::Disallowed | Derived::Pvalid => format!(
            "which has {code_point}, a code point IDNA2008 disallows in domain names (RFC 5892: symbols, emoji, punctuation, capitals and compatibility forms are not valid in an internationalized name)"
        ),
    }
}

/// A name of a spec field that breaks the rule, or names a domain its list already has. The
/// message starts with the field (`spec.domains[1]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("{field}: {error}")]
    Invalid { field: String, error: DnsNameError },
    #[error("{field}: {name:?} names {normal} a second time (as {first} does; case and a trailing dot make no other name): list it once")]
    Duplicate { field: String, name: String, normal: String, first: String },
}

/// Checks the name of one field (`field`, e.g. `spec.domainName`) and returns its normal form.
pub fn parse_field(field: &str, name: &str) -> Result<String, FieldError> {
    parse(name).map_err(|error| FieldError::Invalid { field: field.to_owned(), error })
}

/// Checks every name of a list field (`field[0]`, `field[1]`, ...) and that no two name the same
/// domain; returns their normal forms in order, or every problem.
pub fn parse_list<'a>(field: &str, names: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, Vec<FieldError>> {
    let mut normals: Vec<(usize, String)> = Vec::new();
    let mut problems = Vec::new();
    for (index, name) in names.into_iter().enumerate() {
        let item = format!("{field}[{index}]");
        match parse_field(&item, name) {
            Err(problem) => problems.push(problem),
            Ok(normal) => match normals.iter().find(|(_, earlier)| *earlier == normal) {
                Some((first, _)) => {
                    problems.push(FieldError::Duplicate { field: item, name: name.to_owned(), normal, first: format!("{field}[{first}]") });
                }
                None => normals.push((index, normal)),
            },
        }
    }
    if problems.is_empty() { Ok(normals.into_iter().map(|(_, normal)| normal).collect()) } else { Err(problems) }
}

/// The normal form: lowercase, without surrounding blanks and the trailing dot. For comparing
/// names from anywhere (a spec, Route53, ACM); it does not check them. Blanks and dots go from
/// the end together, so that a blank before the trailing dot goes too and the normal form is its
/// own normal form.
pub fn normalize(name: &str) -> String {
    name.trim_start().trim_end_matches(|c: char| c == '.' || c.is_whitespace()).to_ascii_lowercase()
}

/// A name as Route 53 returns it (a trailing dot, and characters other than letters, digits,
/// `-`, `_` and `.` escaped as three octal digits: `\052` for `*`) in the normal form, for
/// comparing with names from anywhere else.
pub fn from_route53(name: &str) -> String {
    let mut unescaped = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('\\') {
        unescaped.push_str(&rest[..at]);
        let escape = &rest[at + 1..];
        let octal = escape.get(..3).filter(|digits| digits.bytes().all(|b| (b'0'..=b'7').contains(&b)));
        match octal.and_then(|digits| u8::from_str_radix(digits, 8).ok()) {
            Some(byte) => {
                unescaped.push(char::from(byte));
                rest = &escape[3..];
            }
            None => {
                unescaped.push('\\');
                rest = escape;
            }
        }
    }
    unescaped.push_str(rest);
    normalize(&unescaped)
}

/// Whether `name` is `ancestor` or below it, by whole labels, whatever the case or trailing dots:
/// `api.example.com` is within `example.com`, `fooexample.com` is not. A wildcard name is within
/// where its base is (`*.shop.example.com` within `shop.example.com`).
pub fn within(name: &str, ancestor: &str) -> bool {
    let (name, ancestor) = (normalize(name), normalize(ancestor));
    let name = name.strip_prefix("*.").unwrap_or(&name);
    name == ancestor || name.strip_suffix(ancestor.as_str()).is_some_and(|rest| rest.ends_with('.'))
}

/// Checks `name` against the rule and returns its normal form.
pub fn parse(name: &str) -> Result<String, DnsNameError> {
    let relative = name.strip_suffix('.').unwrap_or(name);
    if relative.len() > MAX_LENGTH {
        return Err(DnsNameError::TooLong { name: name.to_owned() });
    }
    let labels = relative.strip_prefix("*.").unwrap_or(relative);
    if labels.split('.').count() < 2 {
        return Err(DnsNameError::SingleLabel { name: name.to_owned() });
    }
    for label in labels.split('.') {
        if label.contains('*') {
            return Err(DnsNameError::Wildcard { name: name.to_owned() });
        }
        check_label(label).map_err(|rule| rule.of(name, label))?;
    }
    Ok(relative.to_owned())
}

/// Which rule a label breaks; [`LabelRule::of`] makes it the error for the name.
enum LabelRule {
    Ldh,
    Reserved,
    ALabel,
    Idna2008 { u_label: String, refused: idna2008::Refused },
}

impl LabelRule {
    fn of(self, name: &str, label: &str) -> DnsNameError {
        let (name, label) = (name.to_owned(), label.to_owned());
        match self {
            Self::Ldh => DnsNameError::Label { name, label },
            Self::Reserved => DnsNameError::ReservedLabel { name, label },
            Self::ALabel => DnsNameError::ALabel { name, label },
            Self::Idna2008 { u_label, refused } => DnsNameError::Idna2008 { name, label, u_label, refused },
        }
    }
}

/// A label other than the wildcard: LDH, and if it has `--` in its third and fourth characters,
/// an A-label whose U-label IDNA2008 allows.
fn check_label(label: &str) -> Result<(), LabelRule> {
    if !is_label(label) {
        return Err(LabelRule::Ldh);
    }
    if label.get(2..4) != Some("--") {
        return Ok(());
    }
    if !label.starts_with(ACE_PREFIX) {
        return Err(LabelRule::Reserved);
    }
    let u_label = decode(label).ok_or(LabelRule::ALabel)?;
    idna2008::check_u_label(&u_label).map_err(|refused| LabelRule::Idna2008 { u_label, refused })
}

/// Whether `label` is an LDH label: lowercase letters, digits and hyphens, 1–63 characters, no
/// hyphen at either end.
pub fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_LENGTH
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

/// The U-label of an A-label, if it is one: UTS #46 ToUnicode with its strict options (STD3
/// ASCII rules, CheckHyphens), which refuses what does not decode, decodes to plain ASCII, or
/// breaks NFC, the hyphen, joiner or bidi rules.
fn decode(label: &str) -> Option<String> {
    let (u_label, result) = Uts46::new().to_unicode(label.as_bytes(), AsciiDenyList::STD3, Hyphens::Check);
    result.ok().map(|()| u_label.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the 20,000-case fuzz run (issue 15): `"е ."` normalized to `"е "`, whose normal form
    /// is `"е"`.
    #[test]
    fn a_name_is_within_its_ancestors_by_whole_labels() {
        assert!(super::within("api.Example.com.", "example.com"));
        assert!(super::within("example.com", "example.com."));
        assert!(super::within("*.shop.example.com", "shop.example.com"));
        assert!(!super::within("fooexample.com", "example.com"));
        assert!(!super::within("example.com", "api.example.com"));
    }

    #[test]
    fn a_blank_before_the_trailing_dot_goes_with_it_and_normalizing_twice_changes_nothing() {
        for name in ["е .", "Example.COM .", " . . ", "www.example.com.\t"] {
            let normal = normalize(name);
            assert_eq!(normalize(&normal), normal, "{name:?}");
        }
        assert_eq!(normalize("Example.COM . "), "example.com");
    }

    #[test]
    fn names_of_ldh_labels_are_accepted_in_their_normal_form() {
        assert_eq!(parse("www.example.com"), Ok("www.example.com".to_owned()));
        assert_eq!(parse("a-1.b2.example.co.uk"), Ok("a-1.b2.example.co.uk".to_owned()));
    }

    #[test]
    fn trailing_dot_names_the_same_name() {
        assert_eq!(parse("www.example.com."), parse("www.example.com"));
        assert_eq!(normalize("WWW.Example.com."), "www.example.com");
    }

    #[test]
    fn names_as_route53_returns_them_compare_in_the_normal_form() {
        assert_eq!(from_route53("\\052.example.com."), "*.example.com");
        assert_eq!(from_route53("WWW.Example.com"), "www.example.com");
        assert_eq!(from_route53("_a1.api.example.com."), "_a1.api.example.com");
        assert_eq!(from_route53("odd\\\\name\\9.example.com"), "odd\\\\name\\9.example.com", "not an octal escape: kept");
    }

    #[test]
    fn wildcard_is_accepted_as_the_whole_first_label_only() {
        assert_eq!(parse("*.example.com"), Ok("*.example.com".to_owned()));
        assert!(matches!(parse("www.*.example.com"), Err(DnsNameError::Wildcard { .. })));
        assert!(matches!(parse("w*.example.com"), Err(DnsNameError::Wildcard { .. })));
        assert!(matches!(parse("*.com"), Err(DnsNameError::SingleLabel { .. })));
    }

    #[test]
    fn a_labels_that_decode_are_accepted() {
        // münchen.de and 例え.jp
        assert_eq!(parse("xn--mnchen-3ya.de"), Ok("xn--mnchen-3ya.de".to_owned()));
        assert!(parse("www.xn--r8jz45g.jp").is_ok());
    }

    #[test]
    fn a_labels_that_do_not_decode_are_refused_naming_the_label() {
        for name in [
            "xn--zz.example.com",
            "www.xn--zz.example.com",
            "xn--abc.example.com",
            "xn--a-ecp.example.com",
            "xn--9999999999999.example.com",
        ] {
            let error = parse(name).expect_err(name);
            assert!(matches!(error, DnsNameError::ALabel { .. }), "{name}: {error:?}");
            assert!(error.to_string().contains("xn--"), "{error}");
        }
    }

    #[test]
    fn a_label_with_two_hyphens_in_its_third_and_fourth_characters_that_is_no_a_label_is_refused_naming_it() {
        for (name, label) in
            [("zz--shop.example.com", "zz--shop"), ("www.bq---abc.example.com", "bq---abc"), ("h---test.example.org", "h---test")]
        {
            let error = parse(name).expect_err(name);
            assert_eq!(error, DnsNameError::ReservedLabel { name: name.to_owned(), label: label.to_owned() });
            let message = error.to_string();
            assert!(message.contains(&format!("label {label:?}")) && message.contains("reserved for IDNA A-labels"), "{message}");
        }
        assert!(parse("a--b.example.com").is_ok(), "hyphens in the second and third characters are not reserved");
        assert!(parse("ab-c--d.example.com").is_ok(), "nor further on");
    }

    #[test]
    fn a_labels_of_code_points_idna2008_disallows_are_refused_naming_the_label_and_the_code_point() {
        // ☃ (a symbol) and 💩 (an emoji): valid under UTS #46, DISALLOWED by IDNA2008.
        for (name, label, u_label, code_point) in
            [("xn--n3h.example.com", "xn--n3h", "☃", "U+2603"), ("www.xn--ls8h.example.com", "xn--ls8h", "💩", "U+1F4A9")]
        {
            let error = parse(name).expect_err(name);
            assert!(matches!(&error, DnsNameError::Idna2008 { label: l, u_label: u, .. } if l == label && u == u_label), "{error:?}");
            let message = error.to_string();
            assert!(
                message.contains(&format!("label {label:?}")) && message.contains(code_point) && message.contains("IDNA2008"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_labels_whose_u_label_is_not_nfc_or_breaks_a_contextual_rule_are_refused() {
        // Let's Encrypt's example of a label that is not NFC.
        assert!(matches!(parse("xn--109-3veba6djs1bfxlfmx6c9g.xn--f1awi.xn--p1ai"), Err(DnsNameError::ALabel { .. })));
        // "a·b": a middle dot outside Catalan's l·l.
        let middle_dot = idna::domain_to_ascii("a\u{b7}b.example.com").expect("UTS #46 encodes it");
        assert!(matches!(parse(&middle_dot), Err(DnsNameError::Idna2008 { .. })), "{middle_dot}: {:?}", parse(&middle_dot));
    }

    #[test]
    fn internationalized_names_a_ca_issues_for_are_accepted() {
        // bücher, ß, βόλος, Arabic with an Arabic-script TLD, col·lecció (Catalan's middle dot).
        let collection = idna::domain_to_ascii("col\u{b7}lecci\u{f3}.cat").expect("UTS #46 encodes it");
        for name in ["xn--bcher-kva.example.com", "xn--zca.example.com", "xn--nxasmm1c.com", "xn--4gbrim.xn--wgbh1c", &collection] {
            assert_eq!(parse(name), Ok(name.to_owned()), "{name}");
        }
    }

    #[test]
    fn a_list_naming_one_domain_twice_is_refused_naming_both_fields() {
        let problems =
            parse_list("spec.subjectAlternativeNames", ["api.example.org", "www.example.org", "api.example.org."]).expect_err("twice");
        let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "spec.subjectAlternativeNames[2]: \"api.example.org.\" names api.example.org a second time (as spec.subjectAlternativeNames[0] does; case and a trailing dot make no other name): list it once"
            ]
        );
        assert_eq!(
            parse_list("spec.domains", ["a.example.com", "b.example.com."]),
            Ok(vec!["a.example.com".to_owned(), "b.example.com".to_owned()])
        );
    }

    #[test]
    fn a_list_reports_every_invalid_name_with_its_index() {
        let problems =
            parse_list("spec.domains", ["zz--shop.example.com", "ok.example.com", "xn--n3h.example.com"]).expect_err("two invalid");
        let fields: Vec<String> = problems.iter().map(|p| p.to_string().split(':').next().unwrap_or_default().to_owned()).collect();
        assert_eq!(fields, ["spec.domains[0]", "spec.domains[2]"]);
    }

    #[test]
    fn labels_breaking_the_ldh_rule_are_refused_naming_the_label() {
        for (name, label) in [("-a.example.com", "-a"), ("a_b.example.com", "a_b"), ("Www.example.com", "Www"), ("a..example.com", "")] {
            assert_eq!(parse(name), Err(DnsNameError::Label { name: name.to_owned(), label: label.to_owned() }));
        }
        assert!(parse(&format!("{}.example.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn single_labels_and_overlong_names_are_refused() {
        assert!(matches!(parse("localhost"), Err(DnsNameError::SingleLabel { .. })));
        let long = format!("{}.com", vec!["a".repeat(63); 4].join("."));
        assert!(matches!(parse(&long), Err(DnsNameError::TooLong { .. })));
    }

    #[test]
    fn the_schema_pattern_and_the_parser_agree_on_the_ldh_rule() {
        let pattern = regex::Regex::new(PATTERN).expect("the pattern compiles");
        for name in ["www.example.com", "www.example.com.", "*.example.com", "Www.example.com", "a..b", "localhost", "-a.example.com"] {
            assert_eq!(pattern.is_match(name), parse(name).is_ok(), "{name}");
        }
    }
}
