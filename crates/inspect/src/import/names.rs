//! Object names for what `blockwork import` prints: from a domain when nothing better names a
//! resource, and unique per kind within one run (the manifests go to one namespace).

use std::collections::BTreeSet;

/// The longest name an imported object gets: the Cert's limit (it publishes its ARN in the
/// ConfigMap `<name>-certificate`, which must fit 253 characters).
const MAX_NAME: usize = 241;

/// Whether `value` is an RFC 1123 label, as a Cert's `serviceName` and `environment` must be.
pub fn is_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

/// Whether `value` is a Kubernetes object name (an RFC 1123 subdomain) short enough for a Cert.
pub fn is_object_name(value: &str) -> bool {
    value.len() <= MAX_NAME && value.split('.').all(|part| !part.is_empty() && part.len() <= 253 && is_subdomain_part(part))
}

fn is_subdomain_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `*.shop.example.com.` → `wildcard-shop-example-com`: the domain's labels joined by `-`.
pub fn name_from_domain(domain: &str) -> String {
    let normal = blockwork_aws::dns_name::normalize(domain);
    let spelled = match normal.strip_prefix("*.") {
        Some(rest) => format!("wildcard.{rest}"),
        None => normal,
    };
    let joined: String = spelled.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let cut: String = joined.chars().take(MAX_NAME).collect();
    let name = cut.trim_matches('-').to_owned();
    if name.is_empty() { "imported".to_owned() } else { name }
}

/// The names taken so far, per kind.
#[derive(Debug, Default)]
pub struct Names {
    taken: BTreeSet<(String, String)>,
}

impl Names {
    /// `preferred` if no object of `kind` has it yet, else `preferred-2`, `-3`…
    pub fn claim(&mut self, kind: &str, preferred: &str) -> String {
        let mut candidate = preferred.to_owned();
        let mut n = 2;
        while self.taken.contains(&(kind.to_owned(), candidate.clone())) {
            let suffix = format!("-{n}");
            let stem: String = preferred.chars().take(MAX_NAME - suffix.len()).collect();
            candidate = format!("{}{suffix}", stem.trim_end_matches('-'));
            n += 1;
        }
        self.taken.insert((kind.to_owned(), candidate.clone()));
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_becomes_its_labels_joined_by_hyphens() {
        assert_eq!(name_from_domain("Shop.Example.com."), "shop-example-com");
    }

    #[test]
    fn a_wildcard_domain_is_named_wildcard() {
        assert_eq!(name_from_domain("*.shop.example.com"), "wildcard-shop-example-com");
    }

    #[test]
    fn a_long_domain_is_cut_to_a_name_a_cert_may_have() {
        let domain = format!("{}.example.com", ["a".repeat(63), "b".repeat(63), "c".repeat(63)].join("."));
        let name = name_from_domain(&domain);
        assert!(name.len() <= MAX_NAME && is_object_name(&name), "{name}");
    }

    #[test]
    fn a_taken_name_gets_a_numbered_suffix_per_kind() {
        let mut names = Names::default();
        assert_eq!(names.claim("Cert", "shop"), "shop");
        assert_eq!(names.claim("Cert", "shop"), "shop-2");
        assert_eq!(names.claim("Cert", "shop"), "shop-3");
        assert_eq!(names.claim("DistributionTenant", "shop"), "shop");
    }

    #[test]
    fn labels_are_lowercase_alphanumerics_and_inner_hyphens() {
        assert!(is_label("prod-eu"));
        assert!(!is_label("Prod") && !is_label("-prod") && !is_label("") && !is_label(&"a".repeat(64)));
    }
}
