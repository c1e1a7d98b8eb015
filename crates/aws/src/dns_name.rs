//! DNS names as every Blockwork CRD takes them (a Cert's domain and SANs, a DistributionTenant's
//! domains): one rule and one normal form, so that a name means the same thing in every CRD.
//!
//! - The rule: at least two labels of lowercase letters, digits and hyphens (1–63 characters,
//!   no hyphen at either end), at most 253 characters, optionally a wildcard `*.` as the whole
//!   first label, optionally a trailing dot. A label starting with `xn--` is an IDNA A-label and
//!   must decode (punycode, then the IDNA validity rules): `xn--zz` is refused, as ACM and
//!   CloudFront would refuse it, but only after something had been written for it.
//! - The normal form: lowercase, without the trailing dot. `www.example.com.` (absolute) and
//!   `www.example.com` are the same name: compared, stored and sent to AWS in the normal form.
//!
//! [`PATTERN`] is the part of the rule a CRD schema can hold; [`parse`] is all of it, for the
//! admission webhooks and the controllers (which check again, for objects admitted without the
//! webhook). Decoding A-labels is the `idna` crate's (UTS 46), not ours.

/// The CRD schema's pattern for a DNS name: lowercase LDH labels, an optional leading `*.`, an
/// optional trailing dot. What it cannot check (the total length beside `maxLength`, A-labels)
/// [`parse`] does.
pub const PATTERN: &str = r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$";

/// The longest name, without a trailing dot (RFC 1035's 255 octets on the wire).
pub const MAX_LENGTH: usize = 253;
/// The longest label.
pub const MAX_LABEL_LENGTH: usize = 63;
/// The prefix of an IDNA A-label (RFC 5890).
const ACE_PREFIX: &str = "xn--";

/// Why a name is not a DNS name Blockwork accepts. The message names the name and, where it is
/// one label's fault, the label.
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
        "label {label:?} of {name:?} starts with xn-- but is not a valid IDNA A-label (it does not decode to an internationalized label)"
    )]
    ALabel { name: String, label: String },
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
        if !is_label(label) {
            return Err(DnsNameError::Label { name: name.to_owned(), label: label.to_owned() });
        }
        if is_a_label(label) && !decodes(label) {
            return Err(DnsNameError::ALabel { name: name.to_owned(), label: label.to_owned() });
        }
    }
    Ok(relative.to_owned())
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

fn is_a_label(label: &str) -> bool {
    label.get(..ACE_PREFIX.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(ACE_PREFIX))
}

/// Whether an A-label decodes to a valid U-label (UTS 46 ToUnicode, which also refuses the
/// A-label of a plain ASCII label).
fn decodes(label: &str) -> bool {
    let (_, result) = idna::domain_to_unicode(label);
    result.is_ok()
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
