#![allow(clippy::unwrap_used, clippy::panic)]
//! Many accounts as an operator runs them (ADR 0014): `blockwork check` assumes every role the
//! AwsIdentity mappings name and reports per mapping; `blockwork run` killed (`kill -9`) while an
//! AssumeRole is in flight leaves no duplicate in the mapped account. Against a real
//! kube-apiserver and a moto whose AssumeRole switches accounts, through a fault proxy that
//! checks the ExternalId each role's trust policy asks for. A control plane of its own
//! (`control_plane::of`): `check` reads every mapping of the cluster.

use std::path::Path;
use std::time::Duration;

use blockwork_aws::principal::account_of_arn;
use blockwork_cert::{Cert, CertSpec, CertState};
use blockwork_identity::{AwsIdentity, AwsIdentitySpec, HostedZoneGrant};
use blockwork_testenv::aws::{as_role, fresh_account, hosted_zone};
use blockwork_testenv::emulators::accounts_moto;
use blockwork_testenv::fault_proxy::{Fault, FaultProxy, Operation};
use blockwork_testenv::harness::eventually;
use blockwork_testenv::operator::{AWS_CREDENTIALS, Operator};
use kube::Api;
use kube::api::PostParams;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");

/// An account of a test's own: its role, and a hosted zone there.
struct Account {
    id: String,
    role: String,
    zone: (String, String),
    acm: aws_sdk_acm::Client,
}

impl Account {
    async fn new(endpoint: &str, zone: &str) -> Self {
        let id = fresh_account();
        let role = format!("arn:aws:iam::{id}:role/blockwork");
        let config = as_role(endpoint, &role).await;
        let zone_id = hosted_zone(&aws_sdk_route53::Client::new(&config), zone).await;
        Self { id, role, zone: (zone_id, zone.to_owned()), acm: aws_sdk_acm::Client::new(&config) }
    }

    fn mapping(&self, namespaces: &[&str], external_id: &str) -> AwsIdentitySpec {
        AwsIdentitySpec {
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            role_arn: Some(self.role.clone()),
            external_id: Some(external_id.to_owned()),
            hosted_zones: vec![HostedZoneGrant { id: self.zone.0.clone(), name: self.zone.1.clone(), ..HostedZoneGrant::default() }],
        }
    }
}

async fn map(client: &kube::Client, name: &str, spec: AwsIdentitySpec) {
    Api::<AwsIdentity>::all(client.clone()).create(&PostParams::default(), &AwsIdentity::new(name, spec)).await.unwrap();
}

fn line<'a>(report: &'a str, start: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line starting with {start:?} in:\n{report}"))
}

#[tokio::test]
async fn check_assumes_every_mapped_role_and_reports_per_mapping() {
    let plane = blockwork_testenv::control_plane::of("accounts").await.unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
    let team = plane.namespace("check-team").await.unwrap();
    let moto = accounts_moto().await.unwrap().endpoint();
    let proxy = FaultProxy::start(&moto).await.unwrap();
    let (right, wrong) = (Account::new(&moto, &format!("{team}.test")).await, Account::new(&moto, &format!("{team}-b.test")).await);
    proxy.accounts().require_external_id(&right.role, "the-right-one");
    proxy.accounts().require_external_id(&wrong.role, "the-right-one");
    let client = plane.client();
    map(&client, &format!("{team}-right"), right.mapping(&[&team, &format!("{team}-typo")], "the-right-one")).await;
    map(&client, &format!("{team}-wrong"), wrong.mapping(&[&format!("{team}-b")], "not-what-the-trust-policy-says")).await;
    // Awaited, not blocking: the fault proxy serves on this test's runtime.
    let output = tokio::process::Command::new(BIN)
        .args(["check", "--controllers", "aws_identity,cert", "-n", &team, "--leader-election-namespace", &team])
        .args(["--cluster-name", "prod", "--aws-region", "us-east-1", "--aws-endpoint-url", &proxy.endpoint()])
        .env("KUBECONFIG", plane.kubeconfig_path())
        .envs(AWS_CREDENTIALS)
        .output()
        .await
        .unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "a role cannot be assumed: {report}");
    let mapping = format!("aws_identity: AwsIdentity {team}-right");
    line(&report, &format!("PASS  {mapping}: mapping: 2 namespace(s)"));
    line(&report, &format!("WARN  {mapping}: namespaces: {team}-typo do(es) not exist"));
    line(&report, &format!("PASS  {mapping}: spec.roleArn: assumed with its ExternalId, session blockwork.prod.{team}-right"));
    let failed = line(&report, &format!("FAIL  aws_identity: AwsIdentity {team}-wrong: spec.roleArn: AssumeRole: "));
    assert!(failed.contains("not authorized to perform: sts:AssumeRole"), "{failed}");
    assert!(report.contains("fix: the role's trust policy must trust the operator's role"), "{report}");
    line(&report, &format!("PASS  cert: AwsIdentity {team}-right: ACM read access: allowed (acm:ListCertificates)"));
    line(&report, &format!("PASS  cert: AwsIdentity {team}-right: hosted zone {}: found: {}", right.zone.0, right.zone.1));
    line(&report, &format!("FAIL  cert: AwsIdentity {team}-wrong: ACM read access"));
    for account in [&right.id, &wrong.id] {
        assert!(!report.contains(account.as_str()), "no account id in the report: {report}");
    }
}

/// `kill -9` while the operator waits for an AssumeRole (its answer comes late): the next process
/// assumes again, and the Cert ends up with one certificate, in the mapped account.
#[tokio::test]
async fn a_killed_operator_assuming_a_role_leaves_one_certificate_in_the_mapped_account() {
    let plane = blockwork_testenv::control_plane::of("accounts").await.unwrap();
    let team = plane.namespace("kill-assume").await.unwrap();
    let moto = accounts_moto().await.unwrap().endpoint();
    let proxy = FaultProxy::start(&moto).await.unwrap();
    let account = Account::new(&moto, &format!("{team}.test")).await;
    proxy.accounts().require_external_id(&account.role, "ext");
    let mut operator = Operator::new(Path::new(BIN), plane.kubeconfig_path()).unwrap();
    plane.install_crds(&[blockwork_cert::crd(), blockwork_identity::crd()]).await.unwrap();
    operator = operator
        .args(["--controllers", "aws_identity,cert", "--namespaces", &team, "--aws-unmapped-namespaces", "refuse"])
        .args(["--aws-region", "us-east-1", "--aws-endpoint-url", &proxy.endpoint(), "--certificate-listing-interval", "2s"])
        .start()
        .unwrap();
    let client = plane.client();
    proxy.inject(Operation::named("AssumeRole"), Fault::SlowResponse(Duration::from_secs(5)), 1);
    map(&client, &format!("{team}-id"), account.mapping(&[&team], "ext")).await;
    let certs: Api<Cert> = Api::namespaced(client, &team);
    let spec = CertSpec {
        domain_name: Some(format!("web.{}", account.zone.1)),
        ..CertSpec { service_name: "web".into(), environment: "prod".into(), ..CertSpec::default() }
    };
    certs.create(&PostParams::default(), &Cert::new("web", spec)).await.unwrap();
    proxy.wait_for_calls("AssumeRole", 1).await;
    operator.kill();
    operator.restart().unwrap();
    let ready = eventually("web to be Ready", Duration::from_secs(120), async || match certs.get("web").await {
        Ok(cert) if cert.status.as_ref().and_then(|s| s.observation.state) == Some(CertState::Ready) => Ok(cert),
        other => Err(format!("{other:?}\n{}", operator.logs())),
    })
    .await;
    let arn = ready.status.unwrap().observation.certificate_arn.unwrap();
    assert_eq!(account_of_arn(&arn), Some(account.id.as_str()));
    let listed = account.acm.list_certificates().send().await.unwrap();
    let arns: Vec<&str> = listed.certificate_summary_list().iter().filter_map(|s| s.certificate_arn()).collect();
    assert_eq!(arns, [arn.as_str()], "one certificate in the mapped account");
    assert!(proxy.calls("AssumeRole") >= 2, "assumed again after the kill: {:?}", proxy.all_calls());
}
