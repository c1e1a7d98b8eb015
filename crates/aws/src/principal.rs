//! Who an AWS call acts as: the operator's own identity (its pod's credentials), or a role it
//! assumes for a namespace's AwsIdentity (ADR 0014) — with the ExternalId the role's trust policy
//! asks for and a session name that tells, in the other account's CloudTrail, which cluster and
//! which namespace the calls were for.
//!
//! A principal carries the name users and metrics know it by (the AwsIdentity's name, or
//! [`OPERATOR`]): bounded, and never an account id.

use std::fmt;
use std::sync::Arc;

use crate::limiter::Account;

/// The name of the operator's own identity, in metrics and messages. No AwsIdentity may take it.
pub const OPERATOR: &str = "operator";

/// STS's longest `RoleSessionName`.
pub const MAX_SESSION_NAME: usize = 64;

/// A role the operator assumes. Its `Debug` masks the account, so that a log line never carries it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssumedRole {
    pub arn: String,
    /// What the role's trust policy asks for (`sts:ExternalId`), if anything.
    pub external_id: Option<String>,
    /// The `RoleSessionName` ([`session_name`]).
    pub session_name: String,
}

impl fmt::Debug for AssumedRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssumedRole")
            .field("arn", &crate::sanitize::mask_accounts(&self.arn))
            .field("external_id", &self.external_id.as_ref().map(|_| "…"))
            .field("session_name", &self.session_name)
            .finish()
    }
}

/// Who a call acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    identity: Arc<str>,
    role: Option<Arc<AssumedRole>>,
}

impl Principal {
    /// The operator's own identity.
    pub fn operator() -> Self {
        Self { identity: Arc::from(OPERATOR), role: None }
    }

    /// `identity`'s principal: `role` assumed, or (`None`) the operator's own credentials under
    /// that name (an AwsIdentity without a role).
    pub fn new(identity: &str, role: Option<AssumedRole>) -> Self {
        Self { identity: Arc::from(identity), role: role.map(Arc::new) }
    }

    /// The name users and metrics know it by.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn role(&self) -> Option<&AssumedRole> {
        self.role.as_deref()
    }

    /// Whose quota its calls draw from.
    pub fn account(&self) -> Account {
        self.role.as_deref().map_or(Account::Own, |role| Account::of_role(&role.arn))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Some(_) => write!(f, "AwsIdentity {}", self.identity),
            None if &*self.identity == OPERATOR => f.write_str("the operator's own identity"),
            None => write!(f, "AwsIdentity {} (the operator's own credentials)", self.identity),
        }
    }
}

/// The account id in an ARN (`arn:aws:acm:us-east-1:123456789012:certificate/…` → the fifth
/// field), when it has one.
pub fn account_of_arn(arn: &str) -> Option<&str> {
    let account = arn.split(':').nth(4)?;
    (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())).then_some(account)
}

/// `blockwork.<cluster>.<subject>`: the session name of calls made in `cluster` for `subject` (a
/// namespace, or an AwsIdentity for work its namespaces share). STS takes 2–64 characters of
/// `[\w+=,.@-]`: other characters become `-`, and a longer name is cut and ends with a hash of
/// the whole, so two long names stay apart.
pub fn session_name(cluster: &str, subject: &str) -> String {
    let clean =
        |text: &str| -> String { text.chars().map(|c| if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) { c } else { '-' }).collect() };
    let full = format!("blockwork.{}.{}", clean(cluster), clean(subject));
    if full.len() <= MAX_SESSION_NAME {
        return full;
    }
    let hash = fnv1a(full.as_bytes());
    let suffix = format!("-{hash:08x}");
    // ASCII only by now: cutting at any byte is a character boundary.
    format!("{}{suffix}", &full[..MAX_SESSION_NAME - suffix.len()])
}

/// 32-bit FNV-1a: stable across builds and platforms (a session name must not change when the
/// operator is upgraded), and enough to tell two cut names apart.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(arn: &str) -> AssumedRole {
        AssumedRole { arn: arn.to_owned(), external_id: None, session_name: "s".to_owned() }
    }

    #[test]
    fn an_assumed_role_draws_from_its_account_and_the_operator_from_its_own() {
        let team = Principal::new("team-a", Some(role("arn:aws:iam::111122223333:role/blockwork")));
        assert_eq!(team.account(), Account::Other("111122223333".to_owned()));
        assert_eq!(Principal::operator().account(), Account::Own);
        assert_eq!(Principal::new("platform", None).account(), Account::Own);
    }

    #[test]
    fn a_principal_is_told_by_its_mapping_never_by_its_account() {
        let team = Principal::new("team-a", Some(role("arn:aws:iam::111122223333:role/blockwork")));
        assert_eq!(team.to_string(), "AwsIdentity team-a");
        assert_eq!(Principal::operator().to_string(), "the operator's own identity");
        assert!(!format!("{team} {team:?}").contains("111122223333"), "{team:?}");
    }

    #[test]
    fn session_names_name_cluster_and_subject_within_sts_rules() {
        assert_eq!(session_name("prod-eks", "team-a"), "blockwork.prod-eks.team-a");
        assert_eq!(session_name("prod eks/1", "team-a"), "blockwork.prod-eks-1.team-a");
    }

    #[test]
    fn long_session_names_are_cut_to_64_and_stay_apart() {
        let a = session_name("a-cluster-with-a-long-name", &format!("{}-one", "n".repeat(60)));
        let b = session_name("a-cluster-with-a-long-name", &format!("{}-two", "n".repeat(60)));
        assert_eq!(a.len(), MAX_SESSION_NAME);
        assert_eq!(b.len(), MAX_SESSION_NAME);
        assert_ne!(a, b);
        assert!(a.starts_with("blockwork.a-cluster-with-a-long-name.nnn"), "{a}");
    }

    #[test]
    fn the_account_of_an_arn_is_its_fifth_field() {
        assert_eq!(account_of_arn("arn:aws:acm:us-east-1:123456789012:certificate/abc"), Some("123456789012"));
        assert_eq!(account_of_arn("arn:aws:cloudfront::123456789012:distribution-tenant/dt_1"), Some("123456789012"));
        assert_eq!(account_of_arn("arn:aws:s3:::bucket"), None);
        assert_eq!(account_of_arn("not an arn"), None);
    }
}
