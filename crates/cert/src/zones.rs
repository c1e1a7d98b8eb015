//! The hosted zones a Cert may write validation records into — its namespace's grant (ADR 0014):
//! an AwsIdentity's `hostedZones`, or `--dns-zones` for namespaces the operator acts for with its
//! own identity — and which zone each domain of a certificate belongs to.

use std::fmt;
use std::str::FromStr;

use crate::api::DnsZoneRef;

/// A Route53 hosted zone a Cert may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Lowercase, without a trailing dot.
    pub name: String,
    /// The hosted zone id without the `/hostedzone/` prefix.
    pub id: String,
    /// Only these names of the zone and below (normal form); empty: the whole zone.
    pub domains: Vec<String>,
}

impl Zone {
    pub fn to_ref(&self) -> DnsZoneRef {
        DnsZoneRef { id: Some(self.id.clone()), name: Some(self.name.clone()) }
    }

    /// Whether `domain` is the zone's apex or below it, label-aligned: `api.example.com` is in
    /// `example.com`, `fooexample.com` is not (the seed's plain suffix test got that wrong).
    pub fn contains(&self, domain: &str) -> bool {
        blockwork_aws::dns_name::within(domain, &self.name)
    }

    /// Whether a Cert may use `domain` in this zone: in the zone and, where only some of its
    /// names are granted, in one of them.
    pub fn allows(&self, domain: &str) -> bool {
        self.contains(domain)
            && (self.domains.is_empty() || self.domains.iter().any(|granted| blockwork_aws::dns_name::within(domain, granted)))
    }

    /// `domain` in this zone, if the grant allows it.
    fn check(&self, domain: &str) -> Result<(), ZoneError> {
        if self.allows(domain) {
            return Ok(());
        }
        Err(ZoneError::NotGranted { domain: domain.to_owned(), zone: self.name.clone(), granted: self.domains.join(", ") })
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.id)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("invalid --dns-zones entry {0:?}: expected name:id, e.g. example.com:Z0123456789ABC")]
    InvalidEntry(String),
    #[error("--dns-zones names zone {0} twice")]
    Duplicate(String),
    #[error(
        "no hosted zone is granted to this namespace (an AwsIdentity's hostedZones, or --dns-zones where the operator acts with its own identity)"
    )]
    NoZones,
    #[error("dnsZone {0} is not one of the hosted zones granted to this namespace")]
    UnknownZone(String),
    #[error("{domain} is not in the zone {zone}")]
    NotInZone { domain: String, zone: String },
    #[error("{0} is in none of the hosted zones granted to this namespace")]
    NoZoneFor(String),
    #[error("{domain} is in the zone {zone}, where this namespace is granted only {granted}")]
    NotGranted { domain: String, zone: String, granted: String },
}

/// The configured zones, in configuration order (the first is the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneRegistry {
    zones: Vec<Zone>,
}

impl FromStr for ZoneRegistry {
    type Err = ZoneError;

    /// Parses `"name:id,name:id"`; blanks are ignored, names are lowercased and lose a trailing
    /// dot, ids lose a `/hostedzone/` prefix.
    fn from_str(text: &str) -> Result<Self, ZoneError> {
        let mut zones: Vec<Zone> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((name, id)) = entry.split_once(':') else {
                return Err(ZoneError::InvalidEntry(entry.to_owned()));
            };
            let name = normalize(name);
            let id = normalize_id(id);
            if name.is_empty() || id.is_empty() || id.contains(':') {
                return Err(ZoneError::InvalidEntry(entry.to_owned()));
            }
            if zones.iter().any(|z| z.name == name || z.id == id) {
                return Err(ZoneError::Duplicate(name));
            }
            zones.push(Zone { name, id, domains: Vec::new() });
        }
        Ok(Self { zones })
    }
}

impl ZoneRegistry {
    pub fn new(zones: Vec<Zone>) -> Self {
        Self { zones }
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// What these zones grant the namespaces the operator acts for with its own identity (ADR
    /// 0014).
    pub fn operator_zones(&self) -> Vec<blockwork_identity::OperatorZone> {
        self.zones.iter().map(|z| blockwork_identity::OperatorZone { id: z.id.clone(), name: z.name.clone() }).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    /// The zone a `dnsZone` reference names (by id or name; both must agree if both are set).
    pub fn find(&self, reference: &DnsZoneRef) -> Result<&Zone, ZoneError> {
        let id = reference.id.as_deref().map(normalize_id);
        let name = reference.name.as_deref().map(normalize);
        self.zones
            .iter()
            .find(|z| id.as_ref().is_none_or(|id| *id == z.id) && name.as_ref().is_none_or(|name| *name == z.name))
            .ok_or_else(|| ZoneError::UnknownZone(describe(reference)))
    }

    /// The zone with the longest name that contains `domain`: the most specific one.
    pub fn longest_match(&self, domain: &str) -> Option<&Zone> {
        self.zones.iter().filter(|z| z.contains(domain)).max_by_key(|z| z.name.len())
    }

    /// The zone of the primary domain: the spec's `dnsZone`, else (for an explicit domain) the
    /// longest suffix match, else the first configured zone. The domain must lie in it.
    pub fn resolve_primary(&self, explicit: Option<&DnsZoneRef>, domain_name: Option<&str>) -> Result<&Zone, ZoneError> {
        let zone = match (explicit, domain_name) {
            (Some(reference), _) => self.find(reference)?,
            (None, Some(domain)) => match self.longest_match(domain) {
                Some(zone) => zone,
                None => self.zones.first().ok_or(ZoneError::NoZones)?,
            },
            (None, None) => self.zones.first().ok_or(ZoneError::NoZones)?,
        };
        if let Some(domain) = domain_name {
            if !zone.contains(domain) {
                return Err(ZoneError::NotInZone { domain: domain.to_owned(), zone: zone.name.clone() });
            }
            zone.check(domain)?;
        }
        Ok(zone)
    }

    /// The zone of a SAN: the longest match among the configured zones, so a SAN in a
    /// delegated subzone gets its record where resolvers look for it.
    pub fn resolve_san(&self, san: &str) -> Result<&Zone, ZoneError> {
        let zone = self.longest_match(san).ok_or_else(|| ZoneError::NoZoneFor(san.to_owned()))?;
        zone.check(san)?;
        Ok(zone)
    }
}

/// Lowercase, no trailing dot: Blockwork's one normal form of DNS names.
pub use blockwork_aws::dns_name::normalize;

fn normalize_id(id: &str) -> String {
    let id = id.trim();
    id.strip_prefix("/hostedzone/").unwrap_or(id).to_owned()
}

/// The name without a wildcard label: `*.example.com` is validated (and zoned) as `example.com`.
pub fn base_domain(domain: &str) -> &str {
    domain.strip_prefix("*.").unwrap_or(domain)
}

fn describe(reference: &DnsZoneRef) -> String {
    match (&reference.id, &reference.name) {
        (Some(id), Some(name)) => format!("{name} ({id})"),
        (Some(id), None) => id.clone(),
        (None, Some(name)) => name.clone(),
        (None, None) => "(empty)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn registry() -> ZoneRegistry {
        "example.com:Z1, staging.example.com:/hostedzone/Z2,Other.ORG.:Z3".parse().unwrap()
    }

    #[test]
    fn parses_name_id_pairs_and_normalizes() {
        let zones = registry();
        let names: Vec<_> = zones.zones().iter().map(|z| (z.name.as_str(), z.id.as_str())).collect();
        assert_eq!(names, [("example.com", "Z1"), ("staging.example.com", "Z2"), ("other.org", "Z3")]);
        assert!("".parse::<ZoneRegistry>().unwrap().is_empty());
    }

    #[test]
    fn rejects_malformed_and_duplicate_entries() {
        assert_eq!("example.com".parse::<ZoneRegistry>(), Err(ZoneError::InvalidEntry("example.com".into())));
        assert_eq!(":Z1".parse::<ZoneRegistry>(), Err(ZoneError::InvalidEntry(":Z1".into())));
        assert_eq!("a.com:Z1,a.com:Z2".parse::<ZoneRegistry>(), Err(ZoneError::Duplicate("a.com".into())));
    }

    #[test]
    fn longest_suffix_wins_and_matches_whole_labels() {
        let zones = registry();
        assert_eq!(zones.longest_match("api.staging.example.com").unwrap().id, "Z2");
        assert_eq!(zones.longest_match("api.example.com").unwrap().id, "Z1");
        assert_eq!(zones.longest_match("*.staging.example.com").unwrap().id, "Z2");
        assert_eq!(zones.longest_match("example.com").unwrap().id, "Z1");
        assert!(zones.longest_match("fooexample.com").is_none());
    }

    #[test]
    fn resolution_order_is_explicit_then_suffix_then_first() {
        let zones = registry();
        let explicit = DnsZoneRef { id: Some("Z3".into()), name: None };
        assert_eq!(zones.resolve_primary(Some(&explicit), None).unwrap().id, "Z3");
        assert_eq!(zones.resolve_primary(None, Some("a.staging.example.com")).unwrap().id, "Z2");
        assert_eq!(zones.resolve_primary(None, None).unwrap().id, "Z1");
        let by_name = DnsZoneRef { id: None, name: Some("staging.example.com.".into()) };
        assert_eq!(zones.resolve_primary(Some(&by_name), None).unwrap().id, "Z2");
    }

    #[test]
    fn explicit_zone_must_exist_and_contain_the_domain() {
        let zones = registry();
        let unknown = DnsZoneRef { id: Some("Z9".into()), name: None };
        assert!(matches!(zones.resolve_primary(Some(&unknown), None), Err(ZoneError::UnknownZone(_))));
        let mismatch = DnsZoneRef { id: Some("Z1".into()), name: Some("other.org".into()) };
        assert!(zones.resolve_primary(Some(&mismatch), None).is_err());
        let other = DnsZoneRef { id: Some("Z3".into()), name: None };
        assert!(matches!(zones.resolve_primary(Some(&other), Some("a.example.com")), Err(ZoneError::NotInZone { .. })));
        assert!(matches!(zones.resolve_primary(None, Some("a.nowhere.net")), Err(ZoneError::NotInZone { .. })));
    }

    #[test]
    fn no_zones_configured_is_an_error() {
        assert_eq!(ZoneRegistry::default().resolve_primary(None, None), Err(ZoneError::NoZones));
    }

    #[test]
    fn a_zone_granted_in_part_allows_only_its_granted_names() {
        let shared = Zone { name: "example.com".into(), id: "Z1".into(), domains: vec!["shop.example.com".into()] };
        let zones = ZoneRegistry::new(vec![shared]);
        assert!(zones.resolve_san("www.shop.example.com").is_ok());
        let refused = zones.resolve_san("api.example.com").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "api.example.com is in the zone example.com, where this namespace is granted only shop.example.com"
        );
        let explicit = DnsZoneRef { id: None, name: Some("example.com".into()) };
        assert!(zones.resolve_primary(Some(&explicit), Some("api.example.com")).is_err());
        assert!(zones.resolve_primary(None, Some("shop.example.com")).is_ok());
    }

    #[test]
    fn each_san_gets_its_most_specific_zone() {
        let zones = registry();
        assert_eq!(zones.resolve_san("b.staging.example.com").unwrap().id, "Z2");
        assert_eq!(zones.resolve_san("www.other.org").unwrap().id, "Z3");
        assert!(matches!(zones.resolve_san("x.nowhere.net"), Err(ZoneError::NoZoneFor(_))));
    }
}
