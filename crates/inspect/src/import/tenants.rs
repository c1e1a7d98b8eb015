//! Which CloudFront distribution tenants become DistributionTenants, and which DNS records come
//! with them: a pure decision over what CloudFront and Route 53 said.
//!
//! A tenant is printed as it is (domains, enabled, connection group, parameters,
//! customizations), so that adopting it changes nothing. Its `spec.dns` is set only when what is
//! in the given zones is exactly what the controller would keep there: CNAMEs of its domains to
//! its connection group's routing endpoint, all in one zone, and no record of one of its domains
//! in that zone pointing anywhere else (managing DNS would overwrite it). Anything else is left
//! to the user, and said.

use std::collections::{BTreeMap, BTreeSet};

use blockwork_runtime::policy::DELETION_POLICY_ANNOTATION;
use blockwork_tenant::api::{
    CertificateRef, Customizations, DEFAULT_TTL, DnsConfig, DnsProvider, DomainName, GeoRestrictions, Parameter, TenantAdoption,
    WebAclCustomization,
};
use blockwork_tenant::diff::TenantConfig;
use blockwork_tenant::{DistributionTenant, DistributionTenantSpec};

use super::certs::Planned;
use super::names::Names;

/// One tenant as CloudFront tells it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundTenant {
    pub name: String,
    pub id: String,
    pub config: TenantConfig,
}

/// A CNAME of a zone given with `--hosted-zone`, names in their normal form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundRecord {
    pub zone_id: String,
    pub name: String,
    pub value: String,
    pub ttl: Option<i64>,
}

/// The account's connection groups: their routing endpoints, and which is the default one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    pub default: Option<String>,
    pub endpoints: BTreeMap<String, String>,
}

/// The TTLs `spec.dns.ttl` accepts.
const TTL_RANGE: std::ops::RangeInclusive<i64> = 60..=172_800;

/// Whether `name` is a name the DistributionTenant CRD accepts (it is the tenant's name).
fn is_tenant_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (3..=128).contains(&bytes.len())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `spec.dns` for `tenant`, or why not (`None` and no note: no record of its domains at all).
fn dns(tenant: &FoundTenant, records: &[FoundRecord], groups: &Groups) -> (Option<DnsConfig>, Vec<String>) {
    let group = tenant.config.connection_group_id.clone().or_else(|| groups.default.clone());
    let Some(endpoint) = group.and_then(|g| groups.endpoints.get(&g)).map(|e| blockwork_aws::dns_name::normalize(e)) else {
        return (None, Vec::new());
    };
    let of_domains: Vec<&FoundRecord> = records.iter().filter(|r| tenant.config.domains.contains(&r.name)).collect();
    let (pointing, elsewhere): (Vec<&FoundRecord>, Vec<&FoundRecord>) = of_domains.iter().partition(|r| r.value == endpoint);
    let zones: BTreeSet<&str> = pointing.iter().map(|r| r.zone_id.as_str()).collect();
    let about = format!("DistributionTenant {}", tenant.name);
    let zone = match zones.len() {
        0 => {
            let notes = elsewhere
                .iter()
                .map(|r| format!("{about}: no spec.dns: {} in zone {} points to {}, not to the tenant", r.name, r.zone_id, r.value));
            return (None, notes.collect());
        }
        1 => zones.into_iter().next().unwrap_or_default().to_owned(),
        _ => {
            let zones: Vec<&str> = zones.into_iter().collect();
            return (
                None,
                vec![format!("{about}: no spec.dns: its CNAMEs are in zones {}, spec.dns names one; set it by hand", zones.join(", "))],
            );
        }
    };
    if let Some(other) = elsewhere.iter().find(|r| r.zone_id == zone) {
        let note =
            format!("{about}: no spec.dns: {} in zone {zone} points to {}; managing its DNS would overwrite it", other.name, other.value);
        return (None, vec![note]);
    }
    let mut notes = Vec::new();
    let written: BTreeSet<&str> = pointing.iter().map(|r| r.name.as_str()).collect();
    let missing: Vec<&str> = tenant.config.domains.iter().map(String::as_str).filter(|d| !written.contains(d)).collect();
    if !missing.is_empty() {
        notes.push(format!("{about}: zone {zone} has no CNAME for {}; once adopted, the controller writes them", missing.join(", ")));
    }
    let ttls: BTreeSet<i64> = pointing.iter().filter_map(|r| r.ttl).collect();
    let ttl = match ttls.iter().collect::<Vec<_>>().as_slice() {
        [ttl] if TTL_RANGE.contains(ttl) => **ttl,
        _ => {
            notes.push(format!("{about}: its CNAMEs' TTLs {ttls:?} are not one TTL of 60-172800 s; spec.dns.ttl is {DEFAULT_TTL}"));
            DEFAULT_TTL
        }
    };
    (Some(DnsConfig { provider: DnsProvider::Route53, hosted_zone_id: zone, assume_role_arn: None, ttl }), notes)
}

/// The spec that asks for exactly what the tenant is.
fn spec(tenant: &FoundTenant, groups: &Groups, dns: Option<DnsConfig>) -> DistributionTenantSpec {
    let config = &tenant.config;
    let customizations = Customizations {
        certificate: config.certificate_arn.clone().map(|arn| CertificateRef { arn: Some(arn), cert_ref: None }),
        web_acl: config.web_acl.as_ref().map(|w| WebAclCustomization { action: w.action, arn: w.arn.clone() }),
        geo_restrictions: config
            .geo_restrictions
            .as_ref()
            .map(|g| GeoRestrictions { restriction_type: g.restriction_type, locations: g.locations.iter().cloned().collect() }),
    };
    let customized = customizations != Customizations::default();
    DistributionTenantSpec {
        distribution_id: config.distribution_id.clone(),
        domains: config.domains.iter().map(|domain| DomainName { domain: domain.clone() }).collect(),
        enabled: (!config.enabled).then_some(false),
        // Absent means the account's default group: said so only for another group.
        connection_group_id: config.connection_group_id.clone().filter(|id| Some(id) != groups.default.as_ref()),
        parameters: config.parameters.iter().map(|(name, value)| Parameter { name: name.clone(), value: value.clone() }).collect(),
        customizations: customized.then_some(customizations),
        managed_certificate_request: None,
        dns,
        drift_policy: None,
        adopt: Some(TenantAdoption { tenant_id: tenant.id.clone() }),
    }
}

/// DistributionTenants for the tenants, in the order of their names; a note (on stderr) for each
/// left out or printed without the DNS it has. `records` are the CNAMEs of the hosted `zones`.
pub fn plan(
    mut tenants: Vec<FoundTenant>,
    zones: &[String],
    records: &[FoundRecord],
    groups: &Groups,
    namespace: &str,
    names: &mut Names,
) -> Planned {
    tenants.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
    let mut planned = Planned::default();
    for tenant in &tenants {
        if !is_tenant_name(&tenant.name) {
            planned.notes.push(format!(
                "skipped tenant {} ({}): its name is no DistributionTenant name (3-128 lowercase letters, digits, '.', '-')",
                tenant.name, tenant.id
            ));
            continue;
        }
        let name = names.claim("DistributionTenant", &tenant.name);
        let (dns, notes) = dns(tenant, records, groups);
        if dns.is_none() && notes.is_empty() && !zones.is_empty() {
            planned.notes.push(format!("DistributionTenant {name}: no spec.dns: no CNAME of its domains in zone(s) {}", zones.join(", ")));
        }
        planned.notes.extend(notes);
        let mut object = DistributionTenant::new(&name, spec(tenant, groups, dns));
        object.metadata.namespace = Some(namespace.to_owned());
        object.metadata.annotations = Some([(DELETION_POLICY_ANNOTATION.to_owned(), "Orphan".to_owned())].into());
        match serde_json::to_value(&object) {
            Ok(value) => planned.manifests.push(value),
            Err(e) => planned.notes.push(format!("skipped tenant {}: cannot be written as YAML: {e}", tenant.name)),
        }
    }
    planned
}

#[cfg(test)]
mod tests {
    use blockwork_tenant::api::{GeoRestrictionType, WebAclAction};
    use blockwork_tenant::diff::{GeoRestrictions as NormalGeo, WebAcl};

    use serde_json::{Value, json};

    use super::*;

    const ENDPOINT: &str = "d111.cloudfront.net";

    fn groups() -> Groups {
        Groups {
            default: Some("cg_default".into()),
            endpoints: [("cg_default".to_owned(), ENDPOINT.to_owned()), ("cg_2".to_owned(), "d222.cloudfront.net".to_owned())].into(),
        }
    }

    fn tenant(name: &str, domains: &[&str]) -> FoundTenant {
        FoundTenant {
            name: name.to_owned(),
            id: format!("dt_{name}"),
            config: TenantConfig {
                distribution_id: "E1DIST".into(),
                domains: domains.iter().map(|d| (*d).to_owned()).collect(),
                enabled: true,
                connection_group_id: Some("cg_default".into()),
                ..TenantConfig::default()
            },
        }
    }

    fn cname(zone: &str, name: &str, value: &str) -> FoundRecord {
        FoundRecord { zone_id: zone.into(), name: name.into(), value: value.into(), ttl: Some(300) }
    }

    /// The zones given are those `records` are in.
    fn one(tenant: FoundTenant, records: &[FoundRecord]) -> (Value, Vec<String>) {
        let zones: Vec<String> = records.iter().map(|r| r.zone_id.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        let planned = plan(vec![tenant], &zones, records, &groups(), "web", &mut Names::default());
        (planned.manifests.into_iter().next().unwrap_or_default(), planned.notes)
    }

    #[test]
    fn a_tenant_is_printed_as_it_is_with_adoption_and_the_orphan_deletion_policy() {
        let mut found = tenant("shop", &["shop.example.com", "www.shop.example.com"]);
        found.config.parameters = [("origin".to_owned(), "eu".to_owned())].into();
        found.config.enabled = false;
        let (object, notes) = one(found, &[]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((&object["apiVersion"], &object["kind"]), (&json!("cloudfront.blockwork.dev/v1alpha1"), &json!("DistributionTenant")));
        assert_eq!(object["metadata"]["name"], "shop");
        assert_eq!(object["metadata"]["namespace"], "web");
        assert_eq!(object["metadata"]["annotations"]["blockwork.dev/deletion-policy"], "Orphan");
        assert_eq!(object["spec"]["adopt"]["tenantId"], "dt_shop");
        assert_eq!(object["spec"]["distributionId"], "E1DIST");
        assert_eq!(object["spec"]["domains"], json!([{"domain": "shop.example.com"}, {"domain": "www.shop.example.com"}]));
        assert_eq!(object["spec"]["parameters"], json!([{"name": "origin", "value": "eu"}]));
        assert_eq!(object["spec"]["enabled"], false);
        assert!(object["spec"].get("connectionGroupId").is_none(), "the default group is left implicit: {object}");
        assert!(object["spec"].get("dns").is_none() && object["spec"].get("customizations").is_none(), "{object}");
    }

    #[test]
    fn customizations_and_another_connection_group_are_printed() {
        let mut found = tenant("shop", &["shop.example.com"]);
        found.config.connection_group_id = Some("cg_2".into());
        found.config.certificate_arn = Some("arn:aws:acm:us-east-1:123456789012:certificate/c1".into());
        found.config.web_acl = Some(WebAcl { action: WebAclAction::Disable, arn: None });
        found.config.geo_restrictions =
            Some(NormalGeo { restriction_type: GeoRestrictionType::Whitelist, locations: ["DE".to_owned(), "FR".to_owned()].into() });
        let (object, _) = one(found, &[]);
        assert_eq!(object["spec"]["connectionGroupId"], "cg_2");
        let customizations = &object["spec"]["customizations"];
        assert_eq!(customizations["certificate"]["arn"], "arn:aws:acm:us-east-1:123456789012:certificate/c1");
        assert_eq!(customizations["webAcl"], json!({"action": "disable"}));
        assert_eq!(customizations["geoRestrictions"], json!({"restrictionType": "whitelist", "locations": ["DE", "FR"]}));
    }

    #[test]
    fn cnames_of_its_domains_to_its_endpoint_in_one_zone_become_its_dns() {
        let records = [
            cname("Z1", "shop.example.com", ENDPOINT),
            cname("Z1", "www.shop.example.com", ENDPOINT),
            cname("Z1", "other.example.com", "x"),
        ];
        let (object, notes) = one(tenant("shop", &["shop.example.com", "www.shop.example.com"]), &records);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(object["spec"]["dns"], json!({"provider": "route53", "hostedZoneId": "Z1", "ttl": 300}));
    }

    #[test]
    fn a_record_of_its_domain_pointing_elsewhere_in_that_zone_leaves_dns_out_and_says_why() {
        let records = [cname("Z1", "shop.example.com", ENDPOINT), cname("Z1", "www.shop.example.com", "legacy.example.net")];
        let (object, notes) = one(tenant("shop", &["shop.example.com", "www.shop.example.com"]), &records);
        assert!(object["spec"].get("dns").is_none(), "{object}");
        assert!(notes[0].contains("would overwrite") && notes[0].contains("legacy.example.net"), "{notes:?}");
    }

    #[test]
    fn records_in_two_zones_leave_dns_to_the_user() {
        let records = [cname("Z1", "shop.example.com", ENDPOINT), cname("Z2", "www.shop.example.com", ENDPOINT)];
        let (object, notes) = one(tenant("shop", &["shop.example.com", "www.shop.example.com"]), &records);
        assert!(object["spec"].get("dns").is_none(), "{object}");
        assert!(notes[0].contains("Z1, Z2"), "{notes:?}");
    }

    #[test]
    fn a_domain_without_its_record_is_named_as_one_the_controller_will_write() {
        let (object, notes) =
            one(tenant("shop", &["shop.example.com", "www.shop.example.com"]), &[cname("Z1", "shop.example.com", ENDPOINT)]);
        assert_eq!(object["spec"]["dns"]["hostedZoneId"], "Z1");
        assert!(notes[0].contains("no CNAME for www.shop.example.com"), "{notes:?}");
    }

    #[test]
    fn a_tenant_without_a_cname_in_the_given_zones_says_why_it_has_no_dns() {
        let (object, notes) = one(tenant("shop", &["shop.example.com"]), &[cname("Z1", "other.example.com", ENDPOINT)]);
        assert!(object["spec"].get("dns").is_none(), "{object}");
        assert!(notes[0].contains("no CNAME of its domains in zone(s) Z1"), "{notes:?}");
    }

    #[test]
    fn a_tenant_whose_name_no_object_may_have_is_skipped() {
        let planned = plan(vec![tenant("Shop_EU", &["shop.example.com"])], &[], &[], &groups(), "web", &mut Names::default());
        assert!(planned.manifests.is_empty());
        assert!(planned.notes[0].starts_with("skipped tenant Shop_EU"), "{:?}", planned.notes);
    }
}
