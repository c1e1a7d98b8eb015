//! What an Ingress asks of Blockwork, read from its annotations under the rule every Blockwork
//! annotation follows (`blockwork_runtime::policy`): values trimmed, flags compared ignoring ASCII
//! case, anything else — a value that is not documented, a `blockwork.dev/` key the Ingress
//! controller does not read — an error naming what is accepted, never ignored. Pure.

use std::collections::BTreeMap;

use blockwork_runtime::policy::{AnnotationError, PREFIX, parse_flag, unknown_annotation};

/// The Certs (of the Ingress's namespace, comma-separated) whose certificates the load balancer
/// serves: their ARNs go into [`ALB_CERTIFICATE_ARN`] once every one is Ready.
pub const CERTIFICATES: &str = "blockwork.dev/certificates";
/// `"true"`: one Cert for the Ingress's TLS hosts, named after it and owned by it (cert-manager's
/// ingress-shim, for ACM).
pub const FROM_HOSTS: &str = "blockwork.dev/certificate-from-hosts";
/// The annotations of an Ingress the Ingress controller reads.
pub const INGRESS_ANNOTATIONS: &[&str] = &[CERTIFICATES, FROM_HOSTS];
/// Where the AWS Load Balancer Controller reads the certificates of an Ingress's HTTPS listener:
/// ARNs, comma-separated, the first the listener's default.
pub const ALB_CERTIFICATE_ARN: &str = "alb.ingress.kubernetes.io/certificate-arn";

/// What an Ingress asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    /// The Certs named in [`CERTIFICATES`], in order, each once.
    pub certs: Vec<String>,
    /// [`FROM_HOSTS`] is true.
    pub from_hosts: bool,
}

impl Asked {
    /// Whether the Ingress asks for anything at all.
    pub fn any(&self) -> bool {
        !self.certs.is_empty() || self.from_hosts
    }
}

/// What the annotations ask for; every problem (each naming the annotation and what it accepts)
/// when one is invalid.
pub fn read(annotations: &BTreeMap<String, String>) -> Result<Asked, Vec<AnnotationError>> {
    let mut problems = Vec::new();
    if let Err(unknown) = unknown_annotation(annotations, PREFIX, INGRESS_ANNOTATIONS) {
        problems.push(unknown);
    }
    let certs = match annotations.get(CERTIFICATES).map(|value| cert_names(value)) {
        None => Vec::new(),
        Some(Ok(names)) => names,
        Some(Err(problem)) => {
            problems.push(problem);
            Vec::new()
        }
    };
    let from_hosts = match annotations.get(FROM_HOSTS).map(|value| parse_flag(FROM_HOSTS, value)) {
        None => false,
        Some(Ok(flag)) => flag,
        Some(Err(problem)) => {
            problems.push(problem);
            false
        }
    };
    if problems.is_empty() { Ok(Asked { certs, from_hosts }) } else { Err(problems) }
}

/// `a, b`: Cert names (Kubernetes object names), at least one, each once.
fn cert_names(value: &str) -> Result<Vec<String>, AnnotationError> {
    let expected = "the names of Certs of this namespace, comma-separated (e.g. `api,www`)";
    let mut names: Vec<String> = Vec::new();
    for name in value.split(',').map(str::trim) {
        if !is_object_name(name) {
            return Err(AnnotationError::invalid(CERTIFICATES, value, expected));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// A Kubernetes object name (a DNS subdomain, as a Cert's name is).
fn is_object_name(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (1..=253).contains(&name.len()) && name.split('.').all(label)
}

/// The ARNs an [`ALB_CERTIFICATE_ARN`] value lists, in order.
pub fn arns(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|arn| !arn.is_empty()).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn certs_are_read_trimmed_in_order_each_once_and_the_flag_ignoring_case() {
        let asked = read(&annotations(&[(CERTIFICATES, " api, www ,api"), (FROM_HOSTS, " True ")])).expect("valid");
        assert_eq!(asked, Asked { certs: vec!["api".into(), "www".into()], from_hosts: true });
        assert!(!read(&annotations(&[("kubernetes.io/ingress.class", "alb")])).expect("valid").any(), "nothing asked");
    }

    #[test]
    fn a_bad_value_is_refused_naming_what_is_accepted() {
        for value in ["", "api,,www", "API", "api/www", "-api"] {
            let problems = read(&annotations(&[(CERTIFICATES, value)])).expect_err(value);
            assert_eq!(problems.len(), 1, "{value}");
            assert!(problems[0].to_string().contains("expected the names of Certs of this namespace, comma-separated"), "{}", problems[0]);
        }
        let problems = read(&annotations(&[(FROM_HOSTS, "yes")])).expect_err("not a flag");
        assert_eq!(problems[0].to_string(), "annotation blockwork.dev/certificate-from-hosts=\"yes\" is invalid: expected true or false");
    }

    #[test]
    fn a_blockwork_key_the_ingress_controller_does_not_read_is_refused_listing_the_ones_it_does() {
        let problems = read(&annotations(&[("blockwork.dev/certificate", "api")])).expect_err("a typo");
        let said = problems[0].to_string();
        assert!(said.contains("blockwork.dev/certificate=") && said.contains(CERTIFICATES) && said.contains(FROM_HOSTS), "{said}");
    }

    #[test]
    fn the_load_balancer_s_arns_are_split_on_commas() {
        assert_eq!(arns("arn:a, arn:b,,"), ["arn:a", "arn:b"]);
        assert!(arns("").is_empty());
    }
}
