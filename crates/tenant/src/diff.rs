//! The comparison of the spec with the tenant CloudFront holds. Both sides are brought into one
//! normal form ([`TenantConfig`]) so that list order and defaults (absent `enabled` = true) never
//! show up as differences. Whether a difference is the user's change or drift is the third leg of
//! the three-way diff: the runtime compares the spec with the last applied one
//! (`status.lastAppliedSpec`), see [`Change`].

use std::collections::{BTreeMap, BTreeSet};

use blockwork_aws::{dns_name, mask_accounts};

use crate::api::{DistributionTenantSpec, GeoRestrictionType, WebAclAction};

/// The part of a tenant the operator manages, in a normal form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantConfig {
    pub distribution_id: String,
    /// Lowercase, without trailing dots.
    pub domains: BTreeSet<String>,
    pub enabled: bool,
    pub connection_group_id: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub certificate_arn: Option<String>,
    pub web_acl: Option<WebAcl>,
    pub geo_restrictions: Option<GeoRestrictions>,
    /// Set when CloudFront manages the certificate: it then attaches one we did not name.
    pub managed_certificate: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebAcl {
    pub action: WebAclAction,
    pub arn: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeoRestrictions {
    pub restriction_type: GeoRestrictionType,
    /// Uppercase country codes.
    pub locations: BTreeSet<String>,
}

/// What one reconcile found, given the spec, the last applied spec and the tenant in AWS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// AWS matches the spec.
    InSync,
    /// The user changed the spec: always pushed.
    SpecChanged(Vec<String>),
    /// The spec is as last applied, yet AWS differs: someone changed the tenant outside.
    Drift(Vec<String>),
}

/// The three-way decision: differences against AWS are the user's change when the spec moved
/// since it was last applied, drift otherwise.
pub fn change(differences: Vec<String>, spec_changed: bool) -> Change {
    match (differences.is_empty(), spec_changed) {
        (true, _) => Change::InSync,
        (false, true) => Change::SpecChanged(differences),
        (false, false) => Change::Drift(differences),
    }
}

impl TenantConfig {
    /// The configuration the spec asks for.
    pub fn desired(spec: &DistributionTenantSpec) -> Self {
        let customizations = spec.customizations.as_ref();
        Self {
            distribution_id: spec.distribution_id.clone(),
            domains: spec.domains.iter().map(|d| dns_name::normalize(&d.domain)).collect(),
            enabled: spec.enabled.unwrap_or(true),
            connection_group_id: spec.connection_group_id.clone(),
            parameters: spec.parameters.iter().map(|p| (p.name.clone(), p.value.clone())).collect(),
            certificate_arn: spec.certificate_arn().map(str::to_owned),
            web_acl: customizations.and_then(|c| c.web_acl.as_ref()).map(|w| WebAcl { action: w.action, arn: w.arn.clone() }),
            geo_restrictions: customizations
                .and_then(|c| c.geo_restrictions.as_ref())
                .and_then(|g| normal_geo(g.restriction_type, g.locations.iter().map(String::as_str))),
            managed_certificate: spec.managed_certificate_request.is_some(),
        }
    }

    /// Human-readable differences between `self` (desired) and `observed`, empty when in sync.
    /// Fields the spec leaves to AWS are not compared: the connection group when none is named
    /// (CloudFront assigns the default one) and the certificate when CloudFront manages it. The
    /// text goes into conditions and events: ARNs in it are shown with the account masked.
    pub fn differences(&self, observed: &TenantConfig) -> Vec<String> {
        let mut out = self.identity_differences(observed);
        out.extend(self.setting_differences(observed));
        out
    }

    /// The differences that make a tenant another one as far as adoption goes (issue 31): its
    /// distribution and its domains. Adoption refuses a tenant with any of them, whatever the
    /// drift policy.
    pub fn identity_differences(&self, observed: &TenantConfig) -> Vec<String> {
        let mut out = Vec::new();
        if self.distribution_id != observed.distribution_id {
            out.push(format!("distributionId is {:?}, want {:?}", observed.distribution_id, self.distribution_id));
        }
        if self.domains != observed.domains {
            out.push(format!("domains are {:?}, want {:?}", observed.domains, self.domains));
        }
        out
    }

    /// The rest: the settings a drift policy `enforce` corrects.
    pub fn setting_differences(&self, observed: &TenantConfig) -> Vec<String> {
        let mut out = Vec::new();
        if self.enabled != observed.enabled {
            out.push(format!("enabled is {}, want {}", observed.enabled, self.enabled));
        }
        if self.connection_group_id.is_some() && self.connection_group_id != observed.connection_group_id {
            out.push(format!("connectionGroupId is {:?}, want {:?}", observed.connection_group_id, self.connection_group_id));
        }
        if self.parameters != observed.parameters {
            out.push(format!("parameters are {:?}, want {:?}", observed.parameters, self.parameters));
        }
        let certificate_managed_by_aws = self.certificate_arn.is_none() && self.managed_certificate;
        if !certificate_managed_by_aws && self.certificate_arn != observed.certificate_arn {
            out.push(format!(
                "certificate is {}, want {}",
                shown(observed.certificate_arn.as_deref()),
                shown(self.certificate_arn.as_deref())
            ));
        }
        if self.web_acl != observed.web_acl {
            let web_acl = |acl: &Option<WebAcl>| match acl {
                None => "none".to_owned(),
                Some(WebAcl { action: WebAclAction::Disable, .. }) => "disabled".to_owned(),
                Some(WebAcl { action: WebAclAction::Override, arn }) => format!("override with {}", shown(arn.as_deref())),
            };
            out.push(format!("webAcl is {}, want {}", web_acl(&observed.web_acl), web_acl(&self.web_acl)));
        }
        if self.geo_restrictions != observed.geo_restrictions {
            out.push(format!("geoRestrictions are {:?}, want {:?}", observed.geo_restrictions, self.geo_restrictions));
        }
        out
    }
}

/// An ARN as conditions and events show it: with the account masked.
fn shown(arn: Option<&str>) -> String {
    arn.map_or_else(|| "none".to_owned(), mask_accounts)
}

/// `none` without locations is the same as no restriction at all.
pub fn normal_geo<'a>(restriction_type: GeoRestrictionType, locations: impl Iterator<Item = &'a str>) -> Option<GeoRestrictions> {
    let locations: BTreeSet<String> = locations.map(str::to_ascii_uppercase).collect();
    if restriction_type == GeoRestrictionType::None && locations.is_empty() {
        return None;
    }
    Some(GeoRestrictions { restriction_type, locations })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Customizations, DomainName, GeoRestrictions as SpecGeo, Parameter};

    fn spec() -> DistributionTenantSpec {
        DistributionTenantSpec {
            distribution_id: "E1ABC".to_owned(),
            domains: vec![DomainName { domain: "a.example.com".to_owned() }, DomainName { domain: "b.example.com".to_owned() }],
            parameters: vec![
                Parameter { name: "origin".to_owned(), value: "o.example.com".to_owned() },
                Parameter { name: "path".to_owned(), value: "/x".to_owned() },
            ],
            ..DistributionTenantSpec::default()
        }
    }

    #[test]
    fn list_order_is_not_a_difference() {
        let desired = TenantConfig::desired(&spec());
        let mut reversed = spec();
        reversed.domains.reverse();
        reversed.parameters.reverse();
        assert!(desired.differences(&TenantConfig::desired(&reversed)).is_empty());
    }

    #[test]
    fn absent_enabled_equals_enabled_true() {
        let mut explicit = spec();
        explicit.enabled = Some(true);
        assert!(TenantConfig::desired(&spec()).differences(&TenantConfig::desired(&explicit)).is_empty());
    }

    #[test]
    fn disabled_tenant_differs_from_enabled_spec() {
        let observed = TenantConfig { enabled: false, ..TenantConfig::desired(&spec()) };
        let differences = TenantConfig::desired(&spec()).differences(&observed);
        assert_eq!(differences, ["enabled is false, want true"]);
    }

    #[test]
    fn changed_domain_is_a_difference() {
        let mut observed = TenantConfig::desired(&spec());
        observed.domains.insert("c.example.com".to_owned());
        assert_eq!(TenantConfig::desired(&spec()).differences(&observed).len(), 1);
    }

    #[test]
    fn default_connection_group_is_not_compared_when_none_is_named() {
        let observed = TenantConfig { connection_group_id: Some("cg_default".to_owned()), ..TenantConfig::desired(&spec()) };
        assert!(TenantConfig::desired(&spec()).differences(&observed).is_empty());
    }

    #[test]
    fn named_connection_group_is_compared() {
        let mut named = spec();
        named.connection_group_id = Some("cg_1".to_owned());
        let observed = TenantConfig { connection_group_id: Some("cg_default".to_owned()), ..TenantConfig::desired(&named) };
        assert_eq!(TenantConfig::desired(&named).differences(&observed).len(), 1);
    }

    #[test]
    fn managed_certificate_attached_by_cloudfront_is_not_a_difference() {
        let mut managed = spec();
        managed.managed_certificate_request = Some(Default::default());
        let observed = TenantConfig {
            certificate_arn: Some("arn:aws:acm:us-east-1:123456789012:certificate/m".to_owned()),
            ..TenantConfig::desired(&managed)
        };
        assert!(TenantConfig::desired(&managed).differences(&observed).is_empty());
    }

    #[test]
    fn certificate_removed_outside_is_a_difference() {
        let mut with_certificate = spec();
        with_certificate.customizations = Some(Customizations {
            certificate: Some(crate::api::CertificateRef {
                arn: Some("arn:aws:acm:us-east-1:123456789012:certificate/c".to_owned()),
                cert_ref: None,
            }),
            ..Customizations::default()
        });
        let observed = TenantConfig { certificate_arn: None, ..TenantConfig::desired(&with_certificate) };
        assert_eq!(TenantConfig::desired(&with_certificate).differences(&observed).len(), 1);
    }

    #[test]
    fn certificate_drift_shows_both_certificates_without_the_account() {
        let with = |arn: &str| TenantConfig { certificate_arn: Some(arn.to_owned()), ..TenantConfig::desired(&spec()) };
        let differences = with("arn:aws:acm:us-east-1:123456789012:certificate/want")
            .differences(&with("arn:aws:acm:us-east-1:123456789012:certificate/other"));
        assert_eq!(
            differences,
            [
                "certificate is arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/other, want arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/want"
            ]
        );
    }

    #[test]
    fn web_acl_drift_shows_the_acl_without_the_account() {
        let arn = "arn:aws:wafv2:us-east-1:123456789012:global/webacl/shop/1";
        let desired = TenantConfig {
            web_acl: Some(WebAcl { action: WebAclAction::Override, arn: Some(arn.to_owned()) }),
            ..TenantConfig::desired(&spec())
        };
        let observed = TenantConfig { web_acl: Some(WebAcl { action: WebAclAction::Disable, arn: None }), ..desired.clone() };
        assert_eq!(
            desired.differences(&observed),
            ["webAcl is disabled, want override with arn:aws:wafv2:us-east-1:[ACCOUNT_ID]:global/webacl/shop/1"]
        );
    }

    #[test]
    fn a_trailing_dot_is_not_a_difference() {
        let mut absolute = spec();
        absolute.domains[0].domain.push('.');
        assert!(TenantConfig::desired(&absolute).differences(&TenantConfig::desired(&spec())).is_empty());
    }

    #[test]
    fn geo_restriction_none_without_locations_equals_no_restriction() {
        let mut none = spec();
        none.customizations = Some(Customizations {
            geo_restrictions: Some(SpecGeo { restriction_type: GeoRestrictionType::None, locations: vec![] }),
            ..Customizations::default()
        });
        assert!(TenantConfig::desired(&none).differences(&TenantConfig::desired(&spec())).is_empty());
    }

    #[test]
    fn geo_locations_compare_as_sets_of_uppercase_codes() {
        let geo = |locations: &[&str]| {
            let mut s = spec();
            s.customizations = Some(Customizations {
                geo_restrictions: Some(SpecGeo {
                    restriction_type: GeoRestrictionType::Whitelist,
                    locations: locations.iter().map(|l| (*l).to_owned()).collect(),
                }),
                ..Customizations::default()
            });
            TenantConfig::desired(&s)
        };
        assert!(geo(&["DE", "fr"]).differences(&geo(&["FR", "DE"])).is_empty());
    }

    #[test]
    fn differences_after_a_spec_change_are_pushed() {
        assert_eq!(change(vec!["d".to_owned()], true), Change::SpecChanged(vec!["d".to_owned()]));
    }

    #[test]
    fn differences_with_an_unchanged_spec_are_drift() {
        assert_eq!(change(vec!["d".to_owned()], false), Change::Drift(vec!["d".to_owned()]));
    }

    #[test]
    fn no_differences_are_in_sync_whatever_the_spec_did() {
        assert_eq!(change(vec![], true), Change::InSync);
        assert_eq!(change(vec![], false), Change::InSync);
    }
}
