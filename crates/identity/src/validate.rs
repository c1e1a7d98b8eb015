//! What makes a mapping wrong among the others — the admission webhook's rules, which the
//! controllers apply again to mappings stored without it (ADR 0014). Pure.
//!
//! - **Overlaps**: a namespace listed by another AwsIdentity. Per namespace: the others of the
//!   mapping are not affected.
//! - **Contradictions**, which make the whole mapping unusable: a zone listed twice, a zone
//!   reached through roles of two different accounts (a zone lives in one account), a granted
//!   name outside its zone, an ExternalId without a role (also CEL), the reserved name.

use std::collections::BTreeSet;

use blockwork_aws::dns_name;
use blockwork_aws::mask_accounts;
use blockwork_aws::principal::{OPERATOR, account_of_arn};
use kube::ResourceExt as _;

use crate::api::{AwsIdentity, HostedZoneGrant};

/// What is wrong with one mapping among the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problems {
    /// (namespace, the other AwsIdentity listing it).
    pub overlaps: Vec<(String, String)>,
    /// What makes the mapping unusable, each naming its field.
    pub contradictions: Vec<String>,
}

impl Problems {
    pub fn is_empty(&self) -> bool {
        self.overlaps.is_empty() && self.contradictions.is_empty()
    }

    /// Every problem, as the webhook tells them.
    pub fn messages(&self) -> Vec<String> {
        let overlaps = self.overlaps.iter().map(|(namespace, other)| {
            format!(
                "spec.namespaces: {namespace} is already mapped by AwsIdentity {other}; a namespace acts through one identity (remove it from one of them)"
            )
        });
        overlaps.chain(self.contradictions.iter().cloned()).collect()
    }
}

/// The problems of `identity` among `all` (which may hold it: compared by name).
pub fn problems(identity: &AwsIdentity, all: &[&AwsIdentity]) -> Problems {
    let name = identity.name_any();
    let others: Vec<&AwsIdentity> = all.iter().copied().filter(|other| other.name_any() != name).collect();
    let mut problems = Problems::default();
    for namespace in &identity.spec.namespaces {
        for other in &others {
            if other.spec.namespaces.contains(namespace) {
                problems.overlaps.push((namespace.clone(), other.name_any()));
            }
        }
    }
    problems.contradictions = contradictions(identity, &others);
    problems
}

fn contradictions(identity: &AwsIdentity, others: &[&AwsIdentity]) -> Vec<String> {
    let spec = &identity.spec;
    let mut found = Vec::new();
    if identity.name_any() == OPERATOR {
        found.push(format!("metadata.name {OPERATOR} is reserved for the operator's own identity"));
    }
    if spec.external_id.is_some() && spec.role_arn.is_none() {
        found.push("spec.externalId needs spec.roleArn: only an assumed role is asked for an ExternalId".to_owned());
    }
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (index, zone) in spec.hosted_zones.iter().enumerate() {
        let field = format!("spec.hostedZones[{index}]");
        let (id, name) = (zone_id(&zone.id), dns_name::normalize(&zone.name));
        if !ids.insert(id.clone()) || !names.insert(name.clone()) {
            found.push(format!("{field}: zone {name} ({id}) is granted twice; grant each zone once"));
        }
        if zone.external_id.is_some() && zone.role_arn.is_none() {
            found.push(format!("{field}.externalId needs {field}.roleArn"));
        }
        for (position, domain) in zone.domains.iter().enumerate() {
            if !dns_name::within(domain, &name) {
                found.push(format!("{field}.domains[{position}]: {} is not in the zone {name}", dns_name::normalize(domain)));
            }
        }
        let account = zone_account(spec.role_arn.as_deref(), zone);
        for other in others {
            for theirs in other.spec.hosted_zones.iter().filter(|theirs| zone_id(&theirs.id) == id) {
                let their_account = zone_account(other.spec.role_arn.as_deref(), theirs);
                if let (Some(ours), Some(their)) = (account, their_account)
                    && ours != their
                {
                    found.push(format!(
                        "{field}: zone {id} is reached through a role of another account than in AwsIdentity {} (a hosted zone lives in one account): check the zone id and {field}.roleArn",
                        other.name_any()
                    ));
                }
            }
        }
    }
    found.into_iter().map(|problem| mask_accounts(&problem)).collect()
}

/// The account whose role reaches `zone`, when a role does (the operator's own account is not
/// known here).
fn zone_account<'a>(identity_role: Option<&'a str>, zone: &'a HostedZoneGrant) -> Option<&'a str> {
    zone.role_arn.as_deref().or(identity_role).and_then(account_of_arn)
}

/// A zone id without the `/hostedzone/` prefix.
pub fn zone_id(id: &str) -> String {
    id.trim().trim_start_matches("/hostedzone/").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AwsIdentitySpec;

    fn identity(name: &str, namespaces: &[&str], role: Option<&str>, zones: Vec<HostedZoneGrant>) -> AwsIdentity {
        AwsIdentity::new(
            name,
            AwsIdentitySpec {
                namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
                role_arn: role.map(str::to_owned),
                external_id: None,
                hosted_zones: zones,
            },
        )
    }

    fn zone(id: &str, name: &str, role: Option<&str>, domains: &[&str]) -> HostedZoneGrant {
        HostedZoneGrant {
            id: id.to_owned(),
            name: name.to_owned(),
            role_arn: role.map(str::to_owned),
            external_id: None,
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    const A: &str = "arn:aws:iam::111111111111:role/a";
    const B: &str = "arn:aws:iam::222222222222:role/b";
    const B2: &str = "arn:aws:iam::222222222222:role/another";

    #[test]
    fn a_namespace_listed_by_another_mapping_is_an_overlap_naming_both() {
        let (a, b) = (identity("a", &["team-a", "shared"], Some(A), vec![]), identity("b", &["shared"], Some(B), vec![]));
        let found = problems(&a, &[&a, &b]);
        assert_eq!(found.overlaps, [("shared".to_owned(), "b".to_owned())]);
        assert!(found.contradictions.is_empty());
        assert!(found.messages()[0].contains("shared is already mapped by AwsIdentity b"), "{:?}", found.messages());
    }

    #[test]
    fn a_zone_reached_through_two_accounts_is_a_contradiction_without_an_account_id() {
        let central = identity("central", &["x"], Some(A), vec![zone("Z1", "example.com", Some(B), &[])]);
        let elsewhere = identity("elsewhere", &["y"], Some(A), vec![zone("Z1", "example.com", None, &[])]);
        let found = problems(&elsewhere, &[&central, &elsewhere]);
        assert_eq!(found.contradictions.len(), 1, "{found:?}");
        assert!(found.contradictions[0].contains("AwsIdentity central"), "{found:?}");
        assert!(!found.messages().concat().contains("111111111111"));
        let same_account = identity("same", &["z"], Some(B2), vec![zone("Z1", "example.com", None, &[])]);
        assert!(problems(&same_account, &[&central, &same_account]).is_empty(), "two roles of the zone's account agree");
    }

    #[test]
    fn a_zone_granted_twice_a_name_outside_its_zone_and_an_external_id_without_a_role_are_contradictions() {
        let mut twice =
            identity("t", &["x"], None, vec![zone("Z1", "example.com", None, &[]), zone("/hostedzone/Z1", "other.org", None, &[])]);
        assert_eq!(problems(&twice, &[]).contradictions.len(), 1);
        twice.spec.hosted_zones = vec![zone("Z1", "example.com", None, &["shop.example.com", "shop.example.org"])];
        let found = problems(&twice, &[]);
        assert_eq!(found.contradictions, ["spec.hostedZones[0].domains[1]: shop.example.org is not in the zone example.com"]);
        twice.spec.hosted_zones = vec![];
        twice.spec.external_id = Some("x1".to_owned());
        assert!(problems(&twice, &[]).contradictions[0].contains("spec.externalId needs spec.roleArn"));
    }

    #[test]
    fn the_operator_s_name_is_reserved() {
        let reserved = identity(OPERATOR, &["x"], None, vec![]);
        assert!(problems(&reserved, &[]).contradictions[0].contains("reserved"));
    }
}
