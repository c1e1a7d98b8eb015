//! `blockwork check` proves an identity's IAM policy sufficient for the Cert controller's writes
//! without writing, through IAM's policy simulator: against moto extended with
//! SimulatePrincipalPolicy (moto's own evaluator over the users and policies it stores), with
//! identities that hold the shipped policy, lack one action of it, or may not ask the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use blockwork_inspect::aws_check::{CERT, TENANT, cert_targets, permissions_finding, tenant_targets};
use blockwork_inspect::finding::{Finding, Verdict};
use blockwork_testenv::emulators::Emulator;

const SIMULATE: &str = r#"{"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "iam:SimulatePrincipalPolicy", "Resource": "*"}]}"#;

struct Moto {
    _server: Emulator,
    endpoint: String,
    admin: aws_sdk_iam::Client,
}

async fn moto() -> Moto {
    let server = Emulator::moto_with_policy_simulation().await.expect("moto with the policy simulator starts");
    let endpoint = server.endpoint();
    let admin = aws_sdk_iam::Client::new(&blockwork_testenv::aws::sdk_config(&endpoint).await);
    Moto { _server: server, endpoint, admin }
}

/// A user with the given inline policies; its IAM client and its ARN as STS names it.
async fn user(moto: &Moto, name: &str, policies: &[&str]) -> (aws_sdk_iam::Client, String) {
    moto.admin.create_user().user_name(name).send().await.unwrap();
    for (index, policy) in policies.iter().enumerate() {
        moto.admin.put_user_policy().user_name(name).policy_name(format!("p{index}")).policy_document(*policy).send().await.unwrap();
    }
    let key = moto.admin.create_access_key().user_name(name).send().await.unwrap();
    let key = key.access_key().expect("a key");
    let credentials = aws_sdk_iam::config::Credentials::new(key.access_key_id(), key.secret_access_key(), None, None, "test");
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&moto.endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(credentials)
        .load()
        .await;
    let caller = aws_sdk_sts::Client::new(&config).get_caller_identity().send().await.unwrap();
    (aws_sdk_iam::Client::new(&config), caller.arn().expect("an arn").to_owned())
}

async fn check_as(iam: &aws_sdk_iam::Client, caller: &str) -> Finding {
    let zones = [("Z1EXAMPLE".to_owned(), "k8s.example.com".to_owned())];
    let finding = permissions_finding("cert", None, iam, Some(caller), CERT, cert_targets(&zones)).await;
    eprintln!("{finding:?}");
    finding
}

/// The shipped policy without one action (and without its statement when it was the only one).
fn policy_without(action: &str) -> String {
    let mut policy: serde_json::Value = serde_json::from_str(CERT.1).unwrap();
    let statements = policy["Statement"].as_array_mut().unwrap();
    statements.retain(|statement| statement["Action"] != action);
    for statement in statements {
        if let serde_json::Value::Array(actions) = &mut statement["Action"] {
            actions.retain(|a| a != action);
        }
    }
    policy.to_string()
}

#[tokio::test]
async fn an_identity_with_the_shipped_policy_passes() {
    let moto = moto().await;
    let (iam, caller) = user(&moto, "full", &[CERT.1, SIMULATE]).await;
    let finding = check_as(&iam, &caller).await;
    assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
    // Every action of the policy file: 4 reads and 3 writes of ACM (ExportCertificate among them,
    // issue 30), 2 of Route 53, and the Private CA's DescribeCertificateAuthority.
    assert!(finding.detail.contains("all 10 actions of docs/iam/cert-operator-policy.json"), "{}", finding.detail);
    assert!(!finding.detail.contains("123456789012"), "no account id: {}", finding.detail);
}

#[tokio::test]
async fn an_identity_without_the_record_writes_fails_naming_the_action_and_the_policy() {
    let moto = moto().await;
    let (iam, caller) = user(&moto, "no-records", &[&policy_without("route53:ChangeResourceRecordSets"), SIMULATE]).await;
    let finding = check_as(&iam, &caller).await;
    assert_eq!(finding.verdict, Verdict::Fail, "{finding:?}");
    assert!(
        finding.detail.contains("route53:ChangeResourceRecordSets on arn:aws:route53:::hostedzone/Z1EXAMPLE (implicitDeny)"),
        "{}",
        finding.detail
    );
    assert!(!finding.detail.contains("acm:"), "only the refused action is named: {}", finding.detail);
    assert!(finding.fix.as_deref().unwrap_or_default().contains("attach docs/iam/cert-operator-policy.json"), "{finding:?}");
}

#[tokio::test]
async fn an_identity_that_may_not_ask_the_simulator_cannot_be_verified() {
    let moto = moto().await;
    let (iam, caller) = user(&moto, "operator-only", &[CERT.1]).await;
    let finding = check_as(&iam, &caller).await;
    assert_eq!(finding.verdict, Verdict::Skip, "neither pass nor fail: {finding:?}");
    assert!(finding.detail.starts_with("cannot verify: this identity may not call iam:SimulatePrincipalPolicy"), "{}", finding.detail);
    assert!(finding.fix.as_deref().unwrap_or_default().contains("allow iam:SimulatePrincipalPolicy"), "{finding:?}");
}

#[tokio::test]
async fn a_person_may_simulate_the_operators_role_by_name() {
    let moto = moto().await;
    let (_, operator) = user(&moto, "operator", &[&policy_without("acm:DeleteCertificate")]).await;
    let (person, caller) = user(&moto, "person", &[SIMULATE]).await;
    let zones = [("Z1EXAMPLE".to_owned(), "k8s.example.com".to_owned())];
    let finding = permissions_finding("cert", Some(&operator), &person, Some(&caller), CERT, cert_targets(&zones)).await;
    assert_eq!(finding.verdict, Verdict::Fail, "{finding:?}");
    assert!(finding.detail.contains("acm:DeleteCertificate (implicitDeny)"), "{}", finding.detail);
    assert!(finding.detail.contains("user/operator"), "the operator's principal, not the person's: {}", finding.detail);
}

#[tokio::test]
async fn a_tenant_identity_with_its_shipped_policy_passes_on_the_zones_and_roles_the_tenants_name() {
    let moto = moto().await;
    let (iam, caller) = user(&moto, "tenant", &[TENANT.1, SIMULATE]).await;
    let targets = tenant_targets(&["Z2EXAMPLE".to_owned()], &["arn:aws:iam::210987654321:role/blockwork-tenant-dns-shop".to_owned()]);
    let finding = permissions_finding("tenant", None, &iam, Some(&caller), TENANT, targets).await;
    assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
    assert!(finding.detail.contains("all 15 actions of docs/iam/cloudfront-tenant-operator-policy.json"), "{}", finding.detail);
    assert!(!finding.detail.contains("not simulated"), "every statement had something to apply to: {}", finding.detail);
}
