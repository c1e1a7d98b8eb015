//! What the admission webhook says about export (pure): refusals for a template the API server
//! would refuse on the Secret (so the mistake shows at `kubectl apply`, not as a failed write
//! later), and warnings that never refuse: what export costs, that it is fixed when a
//! certificate is requested, and that it is not enabled in this installation.

use std::sync::LazyLock;

use regex::Regex;

use crate::api::CertSpec;

/// A qualified name, as label and annotation keys are (Kubernetes' `IsQualifiedName`): an
/// optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
static NAME: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$").ok());
static PREFIX: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").ok());

fn matches(regex: &LazyLock<Option<Regex>>, text: &str) -> bool {
    regex.as_ref().is_some_and(|r| r.is_match(text))
}

fn qualified(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && matches(&PREFIX, p));
    prefix_ok && !name.is_empty() && name.len() <= 63 && matches(&NAME, name)
}

/// Why the spec's Secret template would be refused on a Secret; empty when it would not.
pub fn template_problems(spec: &CertSpec) -> Vec<String> {
    let Some(template) = spec.export.as_ref().and_then(|e| e.secret_template.as_ref()) else { return Vec::new() };
    let mut problems = Vec::new();
    for key in template.labels.keys().chain(template.annotations.keys()).filter(|k| !qualified(k)) {
        problems.push(format!(
            "spec.export.secretTemplate: {key:?} is not a valid label or annotation key (an optional DNS-subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.')"
        ));
    }
    for (key, value) in template.labels.iter().filter(|(_, v)| v.len() > 63 || !matches(&NAME, v)) {
        problems.push(format!(
            "spec.export.secretTemplate.labels[{key:?}]: {value:?} is not a valid label value (at most 63 alphanumerics, '-', '_' or '.')"
        ));
    }
    problems
}

/// Warnings for a Cert created (`old` `None`) or changed to `new`; `enabled`: export is enabled
/// in this installation.
pub fn warnings(old: Option<&CertSpec>, new: &CertSpec, enabled: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    if new.export.is_some() && !enabled {
        warnings.push(format!("{}; this Cert fails without requesting a certificate until it is", super::look::not_enabled_message()));
    }
    let exports_public = new.export.is_some() && new.certificate_authority_arn.is_none();
    let newly = old.is_none_or(|old| old.export.is_none() || old.certificate_authority_arn.is_some());
    if exports_public && newly {
        warnings.push(
            "an exportable public certificate is charged by ACM at issuance and at each renewal (AWS Certificate Manager pricing); \
             a private certificate (spec.certificateAuthorityArn) is charged by AWS Private CA instead"
                .to_owned(),
        );
    }
    if let Some(old) = old
        && (old.export.is_some() != new.export.is_some() || old.certificate_authority_arn != new.certificate_authority_arn)
    {
        warnings.push(
            "whether a certificate is exportable, and which CA issues it, is fixed when it is requested: this change requests a new \
             certificate, and the current one follows deleteOnRemoval (docs/cert.md, Changing the names)"
                .to_owned(),
        );
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ExportSpec, SecretTemplate};

    fn exporting(template: Option<SecretTemplate>) -> CertSpec {
        CertSpec {
            service_name: "api".into(),
            environment: "prod".into(),
            export: Some(ExportSpec { secret_name: "api-tls".into(), secret_template: template }),
            ..CertSpec::default()
        }
    }

    #[test]
    fn asking_for_export_warns_of_the_cost_once() {
        let new = exporting(None);
        let created = warnings(None, &new, true);
        assert_eq!(created.len(), 1, "{created:?}");
        assert!(created[0].contains("charged by ACM at issuance and at each renewal"));
        assert!(warnings(Some(&new), &new, true).is_empty(), "an unrelated change says nothing");
    }

    #[test]
    fn turning_export_on_or_off_warns_that_a_new_certificate_is_requested() {
        let plain = CertSpec { export: None, ..exporting(None) };
        let on = warnings(Some(&plain), &exporting(None), true);
        assert!(on.iter().any(|w| w.contains("requests a new certificate")), "{on:?}");
        let off = warnings(Some(&exporting(None)), &plain, true);
        assert!(off.iter().any(|w| w.contains("requests a new certificate")), "{off:?}");
    }

    #[test]
    fn export_not_enabled_in_this_installation_is_said_at_admission() {
        let said = warnings(None, &exporting(None), false);
        assert!(said.iter().any(|w| w.contains("not enabled in this installation")), "{said:?}");
    }

    #[test]
    fn a_private_certificate_is_not_charged_by_acm() {
        let private = CertSpec {
            certificate_authority_arn: Some("arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/x".into()),
            ..exporting(None)
        };
        assert!(warnings(None, &private, true).is_empty());
    }

    #[test]
    fn template_keys_and_values_the_api_server_would_refuse_are_refused() {
        let template = SecretTemplate {
            labels: [
                ("team".to_owned(), "a".to_owned()),
                ("bad key!".to_owned(), "x".to_owned()),
                ("v".to_owned(), "no spaces".to_owned()),
            ]
            .into(),
            annotations: [("rotator.gw.ei.telekom.de/source-secret".to_owned(), "true".to_owned()), ("/empty".to_owned(), String::new())]
                .into(),
        };
        let problems = template_problems(&exporting(Some(template)));
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems.iter().any(|p| p.contains("\"bad key!\"")));
        assert!(problems.iter().any(|p| p.contains("\"/empty\"")));
        assert!(problems.iter().any(|p| p.contains("\"no spaces\"")));
    }
}
