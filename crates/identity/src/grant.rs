//! What a namespace may do in AWS, and as whom: its [`Grant`], resolved from the mappings
//! (ADR 0014). Pure: [`grant`] takes the mappings as they are and the process's settings.
//!
//! - Listed by one valid AwsIdentity: its role (ExternalId, and a session naming the cluster and
//!   the namespace), its zones (each through its own role, or the identity's), their `domains`.
//! - Listed by none: the operator's own identity when `--aws-unmapped-namespaces operator`
//!   allows it — the zones the controller is configured with (Cert's `--dns-zones`), and any zone
//!   of the operator's own account, never through a role; refused otherwise.
//! - Listed by two, or by one with a contradiction ([`crate::validate`]): refused, naming them.
//!
//! A refusal is never an AWS call: the object's condition says why, and the object is woken when
//! a mapping changes.

use std::fmt;
use std::sync::Arc;

use blockwork_aws::principal::{AssumedRole, OPERATOR, Principal, session_name};
use blockwork_aws::{dns_name, mask_accounts};
use kube::ResourceExt as _;

use crate::api::AwsIdentity;
use crate::validate::{self, zone_id};

/// Whether namespaces no AwsIdentity lists act at all (`--aws-unmapped-namespaces`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Unmapped {
    /// As the operator's own identity (single-account installs), without any assumed role.
    #[default]
    Operator,
    /// Not at all: their objects are refused (`NoAwsIdentity`).
    Refuse,
}

/// The process's settings of grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Part of every session name (`--cluster-name`).
    pub cluster: String,
    pub unmapped: Unmapped,
}

/// `--cluster-name` and `--aws-unmapped-namespaces` as they default.
impl Default for Settings {
    fn default() -> Self {
        Self { cluster: "blockwork".to_owned(), unmapped: Unmapped::Operator }
    }
}

/// A zone the operator's own identity may use for unmapped namespaces (Cert's `--dns-zones`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorZone {
    pub id: String,
    /// Normal form.
    pub name: String,
}

/// A hosted zone granted to a namespace, and who reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneGrant {
    /// Without `/hostedzone/`.
    pub id: String,
    /// Normal form.
    pub name: String,
    pub principal: Principal,
    /// Only these names and below (normal form); empty: the whole zone.
    pub domains: Vec<String>,
}

impl ZoneGrant {
    /// Whether `name` may get a record in this zone: in the zone, and in one of its granted
    /// domains when it has any.
    pub fn allows(&self, name: &str) -> bool {
        dns_name::within(name, &self.name) && (self.domains.is_empty() || self.domains.iter().any(|domain| dns_name::within(name, domain)))
    }

    /// The role ARN the zone is reached through, if any.
    pub fn role_arn(&self) -> Option<&str> {
        self.principal.role().map(|role| role.arn.as_str())
    }
}

/// What one namespace may do in AWS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The AwsIdentity's name, or `operator`.
    pub identity: Arc<str>,
    /// The namespace's own calls (session `blockwork.<cluster>.<namespace>`).
    pub principal: Principal,
    /// Work the identity's namespaces share, such as its certificate listing (session
    /// `blockwork.<cluster>.<identity>`).
    pub shared: Principal,
    pub zones: Vec<ZoneGrant>,
    /// Zones of the operator's own account besides `zones` may be used, with the operator's
    /// identity and no role (unmapped namespaces, `--aws-unmapped-namespaces operator`).
    pub any_own_zone: bool,
}

impl Grant {
    /// The granted zone `id` (any form), or for a grant of the operator's own account any zone
    /// reached with its own identity.
    pub fn zone(&self, id: &str) -> Option<ZoneGrant> {
        let id = zone_id(id);
        self.zones.iter().find(|zone| zone.id == id).cloned().or_else(|| {
            self.any_own_zone.then(|| ZoneGrant { id, name: String::new(), principal: self.principal.clone(), domains: Vec::new() })
        })
    }

    /// "AwsIdentity team-a", or "the operator's own identity": how users are told.
    pub fn describe(&self) -> String {
        if &*self.identity == OPERATOR { "the operator's own identity".to_owned() } else { format!("AwsIdentity {}", self.identity) }
    }
}

/// Why a namespace may not act.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the AwsIdentity mappings are not read yet (is the AwsIdentity CRD installed and readable by the operator?)")]
    NotRead,
    #[error(
        "namespace {0} is listed by no AwsIdentity, and the operator acts for such namespaces only when allowed (--aws-unmapped-namespaces is refuse): ask the platform team to list it in an AwsIdentity"
    )]
    Unmapped(String),
    #[error(
        "namespace {namespace} is listed by AwsIdentities {}: Blockwork acts for it through none of them until the platform team removes it from all but one",
        .identities.join(" and ")
    )]
    Conflict { namespace: String, identities: Vec<String> },
    #[error("AwsIdentity {identity}, which maps namespace {namespace}, is invalid: {problem}")]
    Invalid { namespace: String, identity: String, problem: String },
}

/// Every reason of a [`Refusal`].
pub const REFUSAL_REASONS: [&str; 4] = ["AwsIdentitiesNotRead", "NoAwsIdentity", "AwsIdentityConflict", "AwsIdentityInvalid"];

impl Refusal {
    /// The condition reason (one of [`REFUSAL_REASONS`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotRead => "AwsIdentitiesNotRead",
            Self::Unmapped(_) => "NoAwsIdentity",
            Self::Conflict { .. } => "AwsIdentityConflict",
            Self::Invalid { .. } => "AwsIdentityInvalid",
        }
    }

    /// Whether it passes without a person: the mappings are being read.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::NotRead)
    }
}

/// `namespace`'s grant among `identities`.
pub fn grant(namespace: &str, identities: &[&AwsIdentity], settings: &Settings, operator_zones: &[OperatorZone]) -> Result<Grant, Refusal> {
    let listing: Vec<&AwsIdentity> = identities.iter().copied().filter(|i| i.spec.namespaces.iter().any(|n| n == namespace)).collect();
    let identity = match listing.as_slice() {
        [] => return unmapped(namespace, settings, operator_zones),
        [identity] => *identity,
        several => {
            let mut names: Vec<String> = several.iter().map(|i| i.name_any()).collect();
            names.sort();
            return Err(Refusal::Conflict { namespace: namespace.to_owned(), identities: names });
        }
    };
    let name = identity.name_any();
    if let Some(problem) = validate::problems(identity, identities).contradictions.into_iter().next() {
        return Err(Refusal::Invalid { namespace: namespace.to_owned(), identity: name, problem });
    }
    Ok(granted(identity, settings, namespace))
}

/// What `identity` grants, with the principals of the calls made for `subject` (a namespace, or
/// the mapping itself for work its namespaces share): sessions `blockwork.<cluster>.<subject>`.
fn granted(identity: &AwsIdentity, settings: &Settings, subject: &str) -> Grant {
    let name = identity.name_any();
    let spec = &identity.spec;
    let role = |arn: Option<&String>, external_id: Option<&String>, subject: &str| {
        arn.map(|arn| AssumedRole {
            arn: arn.clone(),
            external_id: external_id.cloned(),
            session_name: session_name(&settings.cluster, subject),
        })
    };
    let own_role = |subject: &str| role(spec.role_arn.as_ref(), spec.external_id.as_ref(), subject);
    let zones = spec
        .hosted_zones
        .iter()
        .map(|zone| {
            let reach = match &zone.role_arn {
                Some(_) => role(zone.role_arn.as_ref(), zone.external_id.as_ref(), subject),
                None => own_role(subject),
            };
            ZoneGrant {
                id: zone_id(&zone.id),
                name: dns_name::normalize(&zone.name),
                principal: Principal::new(&name, reach),
                domains: zone.domains.iter().map(|d| dns_name::normalize(d)).collect(),
            }
        })
        .collect();
    Grant {
        identity: Arc::from(name.as_str()),
        principal: Principal::new(&name, own_role(subject)),
        shared: Principal::new(&name, own_role(&name)),
        zones,
        any_own_zone: false,
    }
}

/// What `identity` grants as its shared work sees it (every session names the mapping): for
/// checking its roles (`status`, `blockwork check`) without acting for any one namespace.
pub fn shared_grant(identity: &AwsIdentity, settings: &Settings) -> Grant {
    granted(identity, settings, &identity.name_any())
}

fn unmapped(namespace: &str, settings: &Settings, operator_zones: &[OperatorZone]) -> Result<Grant, Refusal> {
    if settings.unmapped == Unmapped::Refuse {
        return Err(Refusal::Unmapped(namespace.to_owned()));
    }
    let zones = operator_zones
        .iter()
        .map(|zone| ZoneGrant { id: zone_id(&zone.id), name: zone.name.clone(), principal: Principal::operator(), domains: Vec::new() })
        .collect();
    Ok(Grant { identity: Arc::from(OPERATOR), principal: Principal::operator(), shared: Principal::operator(), zones, any_own_zone: true })
}

/// Why a DistributionTenant's `spec.dns` is not granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsRefusal(pub String);

impl fmt::Display for DnsRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The zone a DistributionTenant writes its CNAMEs into (`spec.dns.hostedZoneId`), checked
/// against the grant: the zone granted, each domain within its granted names, and
/// `spec.dns.assumeRoleArn`, when given, the role the grant reaches the zone through.
pub fn tenant_zone(grant: &Grant, zone: &str, assume_role_arn: Option<&str>, domains: &[String]) -> Result<ZoneGrant, DnsRefusal> {
    let who = grant.describe();
    let Some(granted) = grant.zone(zone) else {
        return Err(DnsRefusal(format!(
            "spec.dns.hostedZoneId {} is not a hosted zone {who} grants this namespace (ask the platform team to add it to the AwsIdentity's hostedZones)",
            zone_id(zone)
        )));
    };
    if let Some(asked) = assume_role_arn
        && Some(asked) != granted.role_arn()
    {
        let how = match granted.role_arn() {
            Some(_) => "through another role",
            None if grant.any_own_zone => "with the operator's own identity: unmapped namespaces assume no role",
            None => "without a role of its own",
        };
        return Err(DnsRefusal(mask_accounts(&format!(
            "spec.dns.assumeRoleArn {asked} is not granted: {who} reaches hosted zone {} {how}; leave spec.dns.assumeRoleArn out (the mapping says how to reach the zone) or ask the platform team",
            granted.id
        ))));
    }
    if !granted.name.is_empty()
        && let Some(outside) = domains.iter().find(|domain| !granted.allows(domain))
    {
        return Err(DnsRefusal(format!(
            "spec.domains: {} may not get a record in hosted zone {} ({}): {who} grants {}",
            dns_name::normalize(outside),
            granted.id,
            granted.name,
            granted_names(&granted)
        )));
    }
    Ok(granted)
}

/// "the whole zone example.com" or "only shop.example.com, api.example.com".
pub fn granted_names(zone: &ZoneGrant) -> String {
    if zone.domains.is_empty() { format!("the whole zone {}", zone.name) } else { format!("only {}", zone.domains.join(", ")) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::{AwsIdentitySpec, HostedZoneGrant};

    const TEAM: &str = "arn:aws:iam::111111111111:role/team";
    const DNS: &str = "arn:aws:iam::222222222222:role/dns";

    fn settings(unmapped: Unmapped) -> Settings {
        Settings { cluster: "prod".to_owned(), unmapped }
    }

    fn team_a() -> AwsIdentity {
        AwsIdentity::new(
            "team-a",
            AwsIdentitySpec {
                namespaces: vec!["team-a".to_owned(), "team-a-dev".to_owned()],
                role_arn: Some(TEAM.to_owned()),
                external_id: Some("ext-a".to_owned()),
                hosted_zones: vec![
                    HostedZoneGrant { id: "ZA".to_owned(), name: "team-a.example.com".to_owned(), ..HostedZoneGrant::default() },
                    HostedZoneGrant {
                        id: "/hostedzone/ZC".to_owned(),
                        name: "Example.com.".to_owned(),
                        role_arn: Some(DNS.to_owned()),
                        external_id: Some("ext-dns".to_owned()),
                        domains: vec!["shop.example.com".to_owned()],
                    },
                ],
            },
        )
    }

    #[test]
    fn a_mapped_namespace_acts_through_its_role_with_its_external_id_and_a_session_naming_cluster_and_namespace() {
        let team = team_a();
        let grant = grant("team-a-dev", &[&team], &settings(Unmapped::Refuse), &[]).unwrap();
        assert_eq!(&*grant.identity, "team-a");
        let role = grant.principal.role().unwrap();
        assert_eq!((role.arn.as_str(), role.external_id.as_deref()), (TEAM, Some("ext-a")));
        assert_eq!(role.session_name, "blockwork.prod.team-a-dev");
        assert_eq!(grant.shared.role().unwrap().session_name, "blockwork.prod.team-a", "shared work names the mapping");
        assert!(!grant.any_own_zone);
    }

    #[test]
    fn a_zone_in_another_account_is_reached_through_its_own_role_and_the_others_through_the_identity_s() {
        let team = team_a();
        let grant = grant("team-a", &[&team], &settings(Unmapped::Operator), &[]).unwrap();
        let own = grant.zone("ZA").unwrap();
        assert_eq!(own.role_arn(), Some(TEAM));
        let central = grant.zone("ZC").unwrap();
        let role = central.principal.role().unwrap();
        assert_eq!(
            (role.arn.as_str(), role.external_id.as_deref(), role.session_name.as_str()),
            (DNS, Some("ext-dns"), "blockwork.prod.team-a")
        );
        assert_eq!((central.name.as_str(), central.principal.identity()), ("example.com", "team-a"));
        assert!(grant.zone("ZX").is_none(), "a mapped namespace has only its zones");
    }

    #[test]
    fn granted_domains_narrow_a_shared_zone() {
        let central = grant("team-a", &[&team_a()], &settings(Unmapped::Refuse), &[]).unwrap().zone("ZC").unwrap();
        assert!(central.allows("shop.example.com"));
        assert!(central.allows("*.shop.example.com"));
        assert!(!central.allows("api.example.com"));
        assert!(!central.allows("shop.example.org"));
    }

    #[test]
    fn an_unmapped_namespace_acts_as_the_operator_only_where_the_admin_allows_it() {
        let zones = [OperatorZone { id: "Z1".to_owned(), name: "example.com".to_owned() }];
        let operator = grant("other", &[&team_a()], &settings(Unmapped::Operator), &zones).unwrap();
        assert_eq!((&*operator.identity, operator.principal.role(), operator.any_own_zone), (OPERATOR, None, true));
        assert_eq!(operator.zones.len(), 1);
        assert_eq!(grant("other", &[&team_a()], &settings(Unmapped::Refuse), &zones), Err(Refusal::Unmapped("other".to_owned())));
    }

    #[test]
    fn a_namespace_listed_twice_is_refused_naming_both_and_the_others_of_the_mapping_still_act() {
        let team = team_a();
        let mut other = team_a();
        other.metadata.name = Some("intruder".to_owned());
        other.spec.namespaces = vec!["team-a".to_owned()];
        other.spec.hosted_zones = vec![];
        let refused = grant("team-a", &[&team, &other], &settings(Unmapped::Operator), &[]).unwrap_err();
        assert_eq!(refused.reason(), "AwsIdentityConflict");
        assert!(refused.to_string().contains("intruder and team-a"), "{refused}");
        assert!(grant("team-a-dev", &[&team, &other], &settings(Unmapped::Operator), &[]).is_ok());
    }

    #[test]
    fn a_contradictory_mapping_grants_nothing() {
        let mut team = team_a();
        team.spec.hosted_zones[1].domains = vec!["shop.example.org".to_owned()];
        let refused = grant("team-a", &[&team], &settings(Unmapped::Operator), &[]).unwrap_err();
        assert_eq!(refused.reason(), "AwsIdentityInvalid");
        assert!(refused.to_string().contains("AwsIdentity team-a, which maps namespace team-a, is invalid"), "{refused}");
    }

    #[test]
    fn a_tenant_s_zone_role_and_domains_are_checked_against_the_grant_naming_the_field() {
        let grant = grant("team-a", &[&team_a()], &settings(Unmapped::Operator), &[]).unwrap();
        let shop = ["shop.example.com".to_owned()];
        assert_eq!(tenant_zone(&grant, "ZC", None, &shop).unwrap().role_arn(), Some(DNS), "the role may be left out");
        assert!(tenant_zone(&grant, "ZC", Some(DNS), &shop).is_ok());
        let hostile = tenant_zone(&grant, "ZC", Some("arn:aws:iam::999999999999:role/admin"), &shop).unwrap_err().to_string();
        assert!(hostile.starts_with("spec.dns.assumeRoleArn") && !hostile.contains("999999999999"), "{hostile}");
        let unknown = tenant_zone(&grant, "ZX", None, &shop).unwrap_err().to_string();
        assert!(unknown.starts_with("spec.dns.hostedZoneId ZX"), "{unknown}");
        let outside = tenant_zone(&grant, "ZC", None, &["api.example.com".to_owned()]).unwrap_err().to_string();
        assert!(outside.contains("spec.domains: api.example.com") && outside.contains("only shop.example.com"), "{outside}");
    }

    #[test]
    fn an_unmapped_tenant_may_use_any_zone_of_the_operator_s_account_but_assume_no_role() {
        let operator = grant("other", &[], &settings(Unmapped::Operator), &[]).unwrap();
        let zone = tenant_zone(&operator, "Z9", None, &["www.example.net".to_owned()]).unwrap();
        assert_eq!(zone.principal, Principal::operator());
        let refused = tenant_zone(&operator, "Z9", Some(DNS), &[]).unwrap_err().to_string();
        assert!(refused.contains("unmapped namespaces assume no role"), "{refused}");
    }
}
