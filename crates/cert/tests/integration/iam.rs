//! The IAM policy shipped in docs/iam/cert-operator-policy.json allows every AWS operation
//! the cert controller calls through the AWS layer — every ACM operation of
//! `blockwork_aws::acm` (its export included), and the Route 53 operations of `blockwork_aws::route53` it uses
//! (records are written, listed and deleted; it does not wait for changes to be in sync), and
//! the AWS Private CA reads of `blockwork_aws::pca` — and nothing beyond ACM, AWS Private CA and
//! Route53.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeSet;

const POLICY: &str = include_str!("../../../../docs/iam/cert-operator-policy.json");
const ACM: &str = include_str!("../../../aws/src/acm.rs");
const ACM_EXPORT: &str = include_str!("../../../aws/src/acm/export.rs");
const PCA: &str = include_str!("../../../aws/src/pca.rs");
const ROUTE53: &str = include_str!("../../../aws/src/route53.rs");
/// The Route 53 operations the cert controller calls: `Records::upsert_in_background`,
/// `Records::delete` and `Records::lookup`.
const ROUTE53_USED: [&str; 2] = ["ChangeResourceRecordSets", "ListResourceRecordSets"];

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

/// The operations a source file names (`const OP: &str = "..."`, one per call).
fn operations(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("const OP: &str = \""))
        .map(|rest| rest.trim_end_matches("\";").to_owned())
        .collect()
}

#[test]
fn the_iam_policy_allows_every_operation_the_operator_calls() {
    let actions = allowed_actions();
    let mut acm = operations(ACM);
    acm.extend(operations(ACM_EXPORT));
    assert!(acm.len() >= 6 && acm.contains("ExportCertificate"), "{acm:?}");
    for operation in &acm {
        assert!(actions.contains(&format!("acm:{operation}")), "acm:{operation} is not allowed: {actions:?}");
    }
    let route53 = operations(ROUTE53);
    for operation in ROUTE53_USED {
        assert!(route53.contains(operation), "the layer no longer calls {operation}: {route53:?}");
        assert!(actions.contains(&format!("route53:{operation}")), "route53:{operation} is not allowed: {actions:?}");
    }
    for operation in operations(PCA) {
        assert!(actions.contains(&format!("acm-pca:{operation}")), "acm-pca:{operation} is not allowed: {actions:?}");
    }
    // RequestCertificate with tags needs the tagging permission too.
    assert!(actions.contains("acm:AddTagsToCertificate"));
}

#[test]
fn the_iam_policy_grants_only_acm_acm_pca_and_route53_actions_and_no_wildcards() {
    for action in allowed_actions() {
        assert!(action.starts_with("acm:") || action.starts_with("acm-pca:") || action.starts_with("route53:"), "{action}");
        assert!(!action.contains('*'), "{action}");
    }
}
