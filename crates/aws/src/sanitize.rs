use std::sync::LazyLock;

use regex::Regex;

static ARN: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"arn:aws[a-zA-Z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{12}:[^\s,;)'\x22]+").ok());
static ACCOUNT_ID: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\b\d{12}\b").ok());

/// Replaces ARNs with `[ARN]` and 12-digit account ids with `[ACCOUNT_ID]`, so AWS messages
/// can go into status and events that every reader of the namespace sees.
pub fn sanitize(message: &str) -> String {
    let (Some(arn), Some(account)) = (ARN.as_ref(), ACCOUNT_ID.as_ref()) else {
        // The patterns are constants that compile; without them, say nothing rather than leak.
        return "[message withheld]".to_owned();
    };
    let without_arns = arn.replace_all(message, "[ARN]");
    account.replace_all(&without_arns, "[ACCOUNT_ID]").into_owned()
}

/// Masks every 12-digit account id, inside ARNs or not, and keeps the rest: for Blockwork's own
/// text that names a resource by its ARN (a drift between two certificates, a spec field the
/// operator set), where the resource part tells the user which one is meant.
/// `arn:aws:acm:us-east-1:123456789012:certificate/abc` becomes
/// `arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/abc`.
pub fn mask_accounts(text: &str) -> String {
    let Some(account) = ACCOUNT_ID.as_ref() else {
        return "[message withheld]".to_owned();
    };
    account.replace_all(text, "[ACCOUNT_ID]").into_owned()
}

#[cfg(test)]
mod tests {
    use super::{mask_accounts, sanitize};

    #[test]
    fn masked_arns_keep_everything_but_the_account() {
        assert_eq!(
            mask_accounts("certificate is arn:aws:acm:us-east-1:123456789012:certificate/abc-123"),
            "certificate is arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/abc-123"
        );
        assert_eq!(mask_accounts("account 123456789012, 42 requests"), "account [ACCOUNT_ID], 42 requests");
    }

    #[test]
    fn arns_are_replaced_whole() {
        let message = "User: arn:aws:iam::123456789012:user/operator is not authorized to perform: acm:DeleteCertificate";
        assert_eq!(sanitize(message), "User: [ARN] is not authorized to perform: acm:DeleteCertificate");
    }

    #[test]
    fn certificate_arns_with_regions_are_replaced() {
        let message = "Certificate arn:aws:acm:eu-west-1:123456789012:certificate/abc-123 is in use by arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/x/y.";
        assert_eq!(sanitize(message), "Certificate [ARN] is in use by [ARN]");
    }

    #[test]
    fn bare_account_ids_are_replaced() {
        assert_eq!(sanitize("account 123456789012 has no access"), "account [ACCOUNT_ID] has no access");
    }

    #[test]
    fn other_numbers_are_kept() {
        assert_eq!(sanitize("rate 1234567890123 and 42 requests"), "rate 1234567890123 and 42 requests");
    }

    #[test]
    fn partition_specific_arns_are_replaced() {
        assert_eq!(sanitize("role arn:aws-cn:iam::123456789012:role/dns"), "role [ARN]");
    }
}
