//! Where an object's AWS resources are against where its namespace acts now (ADR 0014, "Changing
//! a mapping"). The resources' ARNs name their account; the namespace's identity acts in its
//! role's account (or the operator's own). When they differ the mapping was changed under the
//! object: it is held — nothing created in the new account (no duplicate), nothing touched in
//! the old one — until the namespace is mapped back, or the object is deleted (released, told
//! what stays). Pure: the accounts are compared here and nowhere shown.

use blockwork_aws::principal::account_of_arn;
use blockwork_runtime::ExternalError;

/// The reason of a held object, and of the Warning event of one released while held.
pub const AWS_IDENTITY_CHANGED: &str = "AwsIdentityChanged";

/// Where an object's resources are against its namespace's identity now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In the account the identity acts in (or there are none yet).
    Here,
    /// In another account: the mapping moved the namespace.
    Elsewhere,
    /// The identity's account cannot be told now (the operator's own, before STS answered).
    Unknown,
}

/// Where the resources named by `arns` are, for an identity acting in `account` (`None`: not
/// known).
pub fn placement<'a>(arns: impl IntoIterator<Item = &'a str>, account: Option<&str>) -> Placement {
    let accounts: Vec<&str> = arns.into_iter().filter_map(account_of_arn).collect();
    match account {
        _ if accounts.is_empty() => Placement::Here,
        Some(account) if accounts.iter().all(|a| *a == account) => Placement::Here,
        Some(_) => Placement::Elsewhere,
        None => Placement::Unknown,
    }
}

/// The error that holds an object (`kind`, e.g. "Cert") whose `what` (its certificate, its
/// tenant) is in the account it acted in through `before` while its namespace now acts as `now`.
pub fn held(kind: &str, what: &str, before: Option<&str>, now: &str) -> ExternalError {
    let before = before.map_or_else(|| "the identity it acted as before".to_owned(), |b| format!("AwsIdentity {b}"));
    ExternalError::terminal(
        AWS_IDENTITY_CHANGED,
        format!(
            "the namespace now acts as {now}, in another AWS account than {what}, which is in the account of {before}: Blockwork neither creates it again there nor touches it here. Map the namespace back to go on, or delete this {kind} to release it ({what} stays where it is); see docs/multi-account.md, \"Changing a mapping\""
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: &str = "arn:aws:acm:us-east-1:111111111111:certificate/a";
    const THERE: &str = "arn:aws:acm:us-east-1:222222222222:certificate/b";

    #[test]
    fn resources_in_the_identity_s_account_or_none_at_all_are_here() {
        assert_eq!(placement([HERE], Some("111111111111")), Placement::Here);
        assert_eq!(placement([], Some("111111111111")), Placement::Here);
        assert_eq!(placement([], None), Placement::Here);
    }

    #[test]
    fn a_resource_in_another_account_is_elsewhere_and_unknowable_without_the_account() {
        assert_eq!(placement([HERE, THERE], Some("111111111111")), Placement::Elsewhere);
        assert_eq!(placement([THERE], None), Placement::Unknown);
    }

    #[test]
    fn a_held_object_is_told_by_its_mappings_never_its_accounts() {
        let error = held("Cert", "its certificate", Some("team-a"), "AwsIdentity team-b");
        assert_eq!(error.reason, AWS_IDENTITY_CHANGED);
        assert!(error.message.contains("AwsIdentity team-a") && error.message.contains("now acts as AwsIdentity team-b"));
        assert!(!error.message.contains("1111"), "{}", error.message);
    }
}
