//! The IAM policy shipped in docs/iam/cert-operator-policy.json allows every AWS operation
//! the operator's SDK layer calls, and nothing beyond ACM and Route53.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeSet;

const POLICY: &str = include_str!("../../../docs/iam/cert-operator-policy.json");
const SDK: &str = include_str!("../src/aws/sdk.rs");

fn allowed_actions() -> BTreeSet<String> {
    let policy: serde_json::Value = serde_json::from_str(POLICY).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
    let mut actions = BTreeSet::new();
    for statement in policy["Statement"].as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow");
        match &statement["Action"] {
            serde_json::Value::String(action) => {
                actions.insert(action.clone());
            }
            serde_json::Value::Array(list) => actions.extend(list.iter().map(|a| a.as_str().unwrap().to_owned())),
            other => panic!("unexpected Action {other}"),
        }
    }
    actions
}

/// The operations the SDK layer names (`const OP: &str = "..."`, one per call).
fn sdk_operations() -> BTreeSet<String> {
    SDK.lines()
        .filter_map(|line| line.trim().strip_prefix("const OP: &str = \""))
        .map(|rest| rest.trim_end_matches("\";").to_owned())
        .collect()
}

#[test]
fn the_iam_policy_allows_every_operation_the_operator_calls() {
    let actions = allowed_actions();
    let operations = sdk_operations();
    assert!(operations.len() >= 7, "{operations:?}");
    for operation in &operations {
        let service = if operation.contains("ResourceRecordSets") { "route53" } else { "acm" };
        assert!(actions.contains(&format!("{service}:{operation}")), "{service}:{operation} is not allowed: {actions:?}");
    }
    // RequestCertificate with tags needs the tagging permission too.
    assert!(actions.contains("acm:AddTagsToCertificate"));
}

#[test]
fn the_iam_policy_grants_only_acm_and_route53_actions_and_no_wildcards() {
    for action in allowed_actions() {
        assert!(action.starts_with("acm:") || action.starts_with("route53:"), "{action}");
        assert!(!action.contains('*'), "{action}");
    }
}
