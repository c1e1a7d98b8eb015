//! The tenant diff (`blockwork_tenant::diff::TenantConfig`): what the controller compares
//! against CloudFront to decide whether to write.

use std::collections::BTreeSet;

use blockwork_aws::dns_name;
use blockwork_tenant::DistributionTenantSpec;
use blockwork_tenant::api::DomainName;
use blockwork_tenant::diff::TenantConfig;

use crate::{Verdict, check};

/// `spec` as far as the CRD admits it: its domains that are DNS names, and `None` when a
/// parameter is named twice (the parameters are a list map keyed by name).
pub fn as_the_crd_admits(mut spec: DistributionTenantSpec, domains: Vec<String>) -> Option<DistributionTenantSpec> {
    spec.domains = domains.into_iter().filter(|d| dns_name::parse(d).is_ok()).map(|domain| DomainName { domain }).collect();
    let names: BTreeSet<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    (names.len() == spec.parameters.len()).then_some(spec)
}

/// A spec does not differ from itself, nor from itself with its domains rotated by `rotate`,
/// uppercased and with a trailing dot, and its parameters reversed.
pub fn a_spec_never_differs_from_itself(spec: &DistributionTenantSpec, rotate: usize) -> Verdict {
    let desired = TenantConfig::desired(spec);
    let differences = desired.differences(&desired);
    check(differences.is_empty(), || format!("differs from itself: {differences:?}"))?;
    let mut shuffled = spec.clone();
    let n = shuffled.domains.len().max(1);
    shuffled.domains.rotate_left(rotate % n);
    shuffled.parameters.reverse();
    for domain in &mut shuffled.domains {
        domain.domain = format!("{}.", domain.domain.to_ascii_uppercase());
    }
    let differences = desired.differences(&TenantConfig::desired(&shuffled));
    check(differences.is_empty(), || format!("differs from itself reordered: {differences:?}"))
}

/// With a domain `extra` added and a certificate of `account` in CloudFront, the diff names the
/// domains and (when the spec sets the certificate) the certificate, and never the account id.
pub fn a_diff_names_every_changed_field_and_masks_account_ids(spec: &DistributionTenantSpec, account: &str, extra: &str) -> Verdict {
    let desired = TenantConfig::desired(spec);
    let mut observed = desired.clone();
    observed.domains.insert(extra.to_owned());
    observed.certificate_arn = Some(format!("arn:aws:acm:us-east-1:{account}:certificate/0a1b"));
    let differences = desired.differences(&observed);
    if !desired.domains.contains(extra) {
        check(differences.iter().any(|d| d.starts_with("domains")), || format!("{extra} added, no domains difference: {differences:?}"))?;
    }
    if spec.managed_certificate_request.is_none() || desired.certificate_arn.is_some() {
        check(differences.iter().any(|d| d.starts_with("certificate")), || format!("no certificate difference: {differences:?}"))?;
    }
    check(differences.iter().all(|d| !d.contains(account)), || format!("the account id {account} shows: {differences:?}"))
}
