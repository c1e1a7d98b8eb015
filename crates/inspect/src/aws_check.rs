//! `blockwork check`'s AWS probes: the credentials, and each read call the enabled controllers
//! make, against what they are configured with (the Cert's `--dns-zones`) or asked for (the
//! distributions and hosted zones DistributionTenants name) — as the operator's own identity,
//! and again as each AwsIdentity (ADR 0014: its role, its zones through theirs;
//! [`crate::identity_check`] checks the mappings themselves). Read calls only: the write
//! permissions are proven by IAM's policy simulator instead ([`crate::permissions`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use blockwork_aws::{Aws, AwsError, AwsMetrics, ErrorClass, Principal, classify_sdk_error, mask_accounts};
use blockwork_identity::{AwsIdentity, IdentityArgs};
use blockwork_tenant::DistributionTenant;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt as _};

use crate::finding::{Finding, Verdict};
use crate::identity_check;
use crate::permissions::{self, Targets};

/// What the AWS probes are given: the operator's flags, as `blockwork run` takes them.
pub struct AwsSettings<'a> {
    pub aws: &'a blockwork_aws::AwsArgs,
    pub cert: &'a blockwork_cert::CertArgs,
    pub identity: &'a IdentityArgs,
    /// `--iam-principal`.
    pub iam_principal: Option<&'a str>,
}

const CERT_POLICY: &str = "docs/iam/cert-operator-policy.json";
const TENANT_POLICY: &str = "docs/iam/cloudfront-tenant-operator-policy.json";
/// The Cert controller's policy file: where it is, and what it says.
pub const CERT: (&str, &str) = (CERT_POLICY, include_str!("../../../docs/iam/cert-operator-policy.json"));
/// The DistributionTenant controller's policy file.
pub const TENANT: (&str, &str) = (TENANT_POLICY, blockwork_tenant::IAM_POLICY);

/// Condition values every Route 53 record write of the controllers carries: CNAMEs, upserted
/// or deleted.
fn record_writes() -> Vec<(String, Vec<String>)> {
    vec![
        ("route53:ChangeResourceRecordSetsRecordTypes".to_owned(), vec!["CNAME".to_owned()]),
        ("route53:ChangeResourceRecordSetsActions".to_owned(), vec!["UPSERT".to_owned(), "DELETE".to_owned()]),
    ]
}

/// The findings of one controller's AWS access, as the operator and as each AwsIdentity.
pub async fn findings(controller: &str, args: &AwsSettings<'_>, client: &Client) -> Vec<Finding> {
    if !matches!(controller, "cert" | "tenant" | "aws_identity") {
        return Vec::new();
    }
    // The process's AWS layer, as `blockwork run` builds it from the same flags: the same
    // clients, endpoints and region (its metrics go nowhere).
    let (aws, iam) = match args.aws.config() {
        Ok((config, _deprecations)) => {
            let iam = permissions::client(&config).await;
            (Aws::new(config, Arc::new(AwsMetrics::register(&mut Default::default(), &[]))), iam)
        }
        Err(error) => {
            return vec![Finding {
                check: format!("{controller}: AWS configuration"),
                verdict: Verdict::Fail,
                detail: error.to_string(),
                fix: Some("pass the operator's AWS flags or environment (--aws-*, AWS_*)".into()),
            }];
        }
    };
    // Mappings that cannot be read are skipped; the operator's own identity is checked anyway.
    let (mappings, unreadable) = match identity_check::mappings(client).await {
        Ok(mappings) => (mappings, None),
        Err(unreadable) if controller == "aws_identity" => return vec![unreadable],
        Err(unreadable) => (Vec::new(), Some(unreadable)),
    };
    let settings = args.identity.settings();
    let mut findings = match controller {
        "aws_identity" => {
            let existing = identity_check::namespaces(client).await;
            let refs: Vec<&AwsIdentity> = mappings.iter().collect();
            let mut findings = Vec::new();
            for identity in &mappings {
                findings.extend(identity_check::mapping_findings(identity, &refs, existing.as_ref()));
                findings.extend(identity_check::role_findings(&aws, identity, &settings).await);
            }
            findings
        }
        "cert" => {
            let mut findings = cert(args, &aws, &iam).await;
            for identity in &mappings {
                let grant = blockwork_identity::grant::shared_grant(identity, &settings);
                let check = format!("cert: AwsIdentity {}", identity.name_any());
                findings.push(call_finding(format!("{check}: ACM read access"), acm_read(&aws, &grant.shared).await, CERT_POLICY));
                findings.extend(granted_zones(&aws, &grant, &check, "cert", CERT_POLICY).await);
            }
            findings
        }
        _ => {
            let mut findings = tenant(args, &aws, &iam, client).await;
            for identity in &mappings {
                let grant = blockwork_identity::grant::shared_grant(identity, &settings);
                let check = format!("tenant: AwsIdentity {}", identity.name_any());
                findings.push(call_finding(
                    format!("{check}: CloudFront read access"),
                    cloudfront_read(&aws, &grant.shared).await,
                    TENANT_POLICY,
                ));
                findings.extend(granted_zones(&aws, &grant, &check, "tenant", TENANT_POLICY).await);
            }
            findings
        }
    };
    findings.extend(unreadable);
    findings
}

/// ACM's listing, as `principal` (ListCertificates, one item).
async fn acm_read(aws: &Aws, principal: &Principal) -> Result<String, AwsError> {
    let acm = aws.acm("cert", None, principal).await?;
    acm.list_certificates()
        .max_items(1)
        .send()
        .await
        .map(|_| "allowed (acm:ListCertificates)".to_owned())
        .map_err(|e| classify_sdk_error("ListCertificates", &e))
}

/// CloudFront's connection groups, as `principal`.
async fn cloudfront_read(aws: &Aws, principal: &Principal) -> Result<String, AwsError> {
    let cloudfront = aws.cloudfront("tenant", principal).await?;
    cloudfront
        .list_connection_groups()
        .send()
        .await
        .map(|out| format!("allowed (cloudfront:ListConnectionGroups: {} group(s))", out.connection_groups().len()))
        .map_err(|e| classify_sdk_error("ListConnectionGroups", &e))
}

/// Each hosted zone a mapping grants, read as the grant reaches it (through the zone's role).
async fn granted_zones(aws: &Aws, grant: &blockwork_identity::Grant, check: &str, controller: &'static str, policy: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for zone in &grant.zones {
        let finding = match aws.route53(controller, &zone.principal).await {
            Ok(route53) => zone_finding(&route53, &zone.id, Some(&zone.name), controller, policy).await,
            Err(error) => call_finding(format!("{controller}: hosted zone {}", zone.id), Err(error), policy),
        };
        findings.push(Finding { check: format!("{check}: hosted zone {}", zone.id), ..finding });
    }
    findings
}

/// A read call's outcome as a finding: what it shows when allowed, the fix when not.
pub fn call_finding(check: String, result: Result<String, AwsError>, policy: &str) -> Finding {
    match result {
        Ok(detail) => Finding { check, verdict: Verdict::Pass, detail, fix: None },
        Err(error) => {
            let code = error.code.clone().unwrap_or_else(|| "no error code".into());
            let fix = match (error.class, code.as_str()) {
                (_, c) if c.contains("AccessDenied") || c.contains("Unauthorized") => {
                    format!("grant the operator's IAM identity {} (the policy is {policy})", error.operation_action())
                }
                (ErrorClass::NotFound, _) => "fix the id: it names nothing in this account".to_owned(),
                (ErrorClass::Throttled, _) => "AWS throttled the check; run it again".to_owned(),
                (_, "InvalidClientTokenId" | "UnrecognizedClientException" | "ExpiredToken" | "SignatureDoesNotMatch") => {
                    "the credentials are invalid or expired: check the operator's AWS credentials (IRSA / Pod Identity / AWS_* variables)"
                        .to_owned()
                }
                (ErrorClass::Retryable, _) => {
                    "AWS could not be reached: check the network path (proxy, VPC endpoints) and --aws-endpoint-url".to_owned()
                }
                _ => "read AWS's message above".to_owned(),
            };
            Finding { check, verdict: Verdict::Fail, detail: format!("{code}: {}", error.message), fix: Some(fix) }
        }
    }
}

trait ActionName {
    /// The IAM action of the failed call, e.g. `acm:ListCertificates`.
    fn operation_action(&self) -> String;
}

impl ActionName for AwsError {
    fn operation_action(&self) -> String {
        let service = match self.operation {
            "ListCertificates" | "DescribeCertificate" => "acm",
            "ListResourceRecordSets" | "GetHostedZone" => "route53",
            "GetCallerIdentity" | "AssumeRole" => "sts",
            _ => "cloudfront",
        };
        format!("{service}:{}", self.operation)
    }
}

/// The credentials' finding, and the caller's ARN when they are usable.
async fn identity(aws: &Aws, controller: &str, check: &str) -> (Finding, Option<String>) {
    const OP: &str = "GetCallerIdentity";
    let answer = aws.sts(controller).await.get_caller_identity().send().await.map_err(|e| classify_sdk_error(OP, &e));
    let caller = answer.as_ref().ok().and_then(|out| out.arn()).map(str::to_owned);
    let result = answer.map(|out| format!("usable, as {}", mask_accounts(out.arn().unwrap_or("an unnamed identity"))));
    let unreachable = matches!(&result, Err(error) if error.class == ErrorClass::Retryable);
    let mut finding = call_finding(check.to_owned(), result, "any");
    if finding.verdict == Verdict::Fail && !unreachable {
        finding.fix = Some(
            "give the operator AWS credentials: IRSA or EKS Pod Identity in a cluster, AWS_* variables or a profile elsewhere".to_owned(),
        );
    }
    (finding, caller)
}

/// What the Cert controller's requests act on: its configured zones, its certificates' tag, its
/// CNAME writes.
pub fn cert_targets(zones: &[(String, String)]) -> Targets {
    let mut context = record_writes();
    context.push((format!("aws:ResourceTag/{}", blockwork_cert::decisions::TAG_MANAGED_BY), vec!["blockwork-cert".to_owned()]));
    Targets { zones: zones.iter().map(|(id, name)| (id.clone(), Some(name.clone()))).collect(), context, ..Targets::default() }
}

/// What the DistributionTenant controller's requests act on: the hosted zones and DNS roles the
/// tenants name, its CNAME writes.
pub fn tenant_targets(zones: &[String], roles: &[String]) -> Targets {
    Targets {
        zones: zones.iter().map(|zone| (zone.clone(), None)).collect(),
        roles: roles.to_vec(),
        context: record_writes(),
        ..Targets::default()
    }
}

/// The IAM permissions of `principal` (`--iam-principal`), or of the caller's own, simulated.
pub async fn permissions_finding(
    controller: &str,
    principal: Option<&str>,
    iam: &aws_sdk_iam::Client,
    caller: Option<&str>,
    policy: (&str, &str),
    mut targets: Targets,
) -> Finding {
    let (path, document) = policy;
    let check = format!("{controller}: IAM permissions");
    let Some(principal) = principal.map(str::to_owned).or_else(|| caller.and_then(permissions::principal)) else {
        return Finding {
            check,
            verdict: Verdict::Skip,
            detail: format!(
                "cannot verify: the caller ({}) is not an IAM user or role the policy simulator can name",
                mask_accounts(caller.unwrap_or("unknown"))
            ),
            fix: Some(format!("name the operator's role with --iam-principal ARN, or compare its policy with {path}")),
        };
    };
    targets.account = principal.split(':').nth(4).unwrap_or_default().to_owned();
    let (simulations, left_out) = permissions::simulations(document, &targets);
    let answer = permissions::simulate(iam, &principal, &simulations).await;
    permissions::finding(controller, path, &principal, answer, &left_out)
}

/// The Cert controller: configured zones, credentials, ACM and Route53 reads.
async fn cert(args: &AwsSettings<'_>, aws: &Aws, iam: &aws_sdk_iam::Client) -> Vec<Finding> {
    let config = match blockwork_cert::CertConfig::from_args(args.cert) {
        Ok(config) => config,
        Err(error) => {
            return vec![Finding {
                check: "cert: configuration".into(),
                verdict: Verdict::Fail,
                detail: error.to_string(),
                fix: Some("pass the operator's flags or environment (--dns-zones NAME:ID,… / CERT_DNS_ZONES), or leave `cert` out of --controllers".into()),
            }];
        }
    };
    let mut findings = Vec::new();
    if config.zones.is_empty() {
        findings.push(Finding::with(
            Verdict::Warn,
            "cert: configuration",
            "no --dns-zones: Certs of namespaces no AwsIdentity maps have no hosted zone",
            "fine when every namespace with Certs is mapped (docs/multi-account.md); else pass --dns-zones NAME:ID,… (CERT_DNS_ZONES)",
        ));
    }
    let (credentials, caller) = identity(aws, "cert", "cert: AWS credentials").await;
    let failed = credentials.verdict == Verdict::Fail;
    findings.push(credentials);
    if failed {
        return findings;
    }
    findings.push(call_finding("cert: ACM read access".into(), acm_read(aws, &Principal::operator()).await, CERT_POLICY));
    match aws.route53("cert", &Principal::operator()).await {
        Ok(route53) => {
            for zone in config.zones.zones() {
                findings.push(zone_finding(&route53, &zone.id, Some(&zone.name), "cert", CERT_POLICY).await);
            }
        }
        Err(error) => findings.push(call_finding("cert: Route 53".into(), Err(error), CERT_POLICY)),
    }
    let zones: Vec<(String, String)> = config.zones.zones().iter().map(|zone| (zone.id.clone(), zone.name.clone())).collect();
    let principal = args.iam_principal;
    findings.push(permissions_finding("cert", principal, iam, caller.as_deref(), CERT, cert_targets(&zones)).await);
    findings
}

/// A hosted zone by id: it exists, its records can be read (route53:ListResourceRecordSets,
/// which the controllers call), and it is the zone `name` says (the first record of a zone is
/// its apex).
async fn zone_finding(route53: &aws_sdk_route53::Client, id: &str, name: Option<&str>, controller: &str, policy: &str) -> Finding {
    const OP: &str = "ListResourceRecordSets";
    let check = format!("{controller}: hosted zone {id}");
    let listed = route53.list_resource_record_sets().hosted_zone_id(id).max_items(1).send().await.map_err(|e| classify_sdk_error(OP, &e));
    let apex = match listed {
        Ok(out) => out.resource_record_sets().first().map(|r| r.name().trim_end_matches('.').to_ascii_lowercase()),
        Err(error) => return call_finding(check, Err(error), policy),
    };
    match (name, apex) {
        (Some(want), Some(apex)) if apex != want.trim_end_matches('.').to_ascii_lowercase() => Finding {
            check,
            verdict: Verdict::Fail,
            detail: format!("found, but it is the zone {apex}, not {want}"),
            fix: Some("fix the zone's id or name in --dns-zones (NAME:ID)".into()),
        },
        (_, apex) => Finding {
            check,
            verdict: Verdict::Pass,
            detail: format!(
                "found{}, records readable (route53:ListResourceRecordSets)",
                apex.map(|a| format!(": {a}")).unwrap_or_default()
            ),
            fix: None,
        },
    }
}

/// The DistributionTenant controller: credentials, CloudFront reads, and the distributions and
/// hosted zones the tenants in the cluster name.
async fn tenant(args: &AwsSettings<'_>, aws: &Aws, iam: &aws_sdk_iam::Client, client: &Client) -> Vec<Finding> {
    let (credentials, caller) = identity(aws, "tenant", "tenant: AWS credentials").await;
    let mut findings = vec![credentials];
    if findings[0].verdict == Verdict::Fail {
        return findings;
    }
    let cloudfront = match aws.cloudfront("tenant", &Principal::operator()).await {
        Ok(cloudfront) => cloudfront,
        Err(error) => {
            findings.push(call_finding("tenant: CloudFront read access".into(), Err(error), TENANT_POLICY));
            return findings;
        }
    };
    let groups = cloudfront
        .list_connection_groups()
        .send()
        .await
        .map(|out| format!("allowed (cloudfront:ListConnectionGroups: {} group(s))", out.connection_groups().len()))
        .map_err(|e| classify_sdk_error("ListConnectionGroups", &e));
    findings.push(call_finding("tenant: CloudFront read access".into(), groups, TENANT_POLICY));
    let tenants = match Api::<DistributionTenant>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(_) => Vec::new(),
    };
    let distributions: BTreeSet<&str> = tenants.iter().map(|t| t.spec.distribution_id.as_str()).collect();
    for id in distributions {
        const OP: &str = "GetDistribution";
        let named = tenants.iter().filter(|t| t.spec.distribution_id == id).count();
        let result = cloudfront
            .get_distribution()
            .id(id)
            .send()
            .await
            .map(|_| format!("found; named by {named} DistributionTenant(s)"))
            .map_err(|e| classify_sdk_error(OP, &e));
        findings.push(call_finding(format!("tenant: distribution {id}"), result, TENANT_POLICY));
    }
    let route53 = match aws.route53("tenant", &Principal::operator()).await {
        Ok(route53) => route53,
        Err(error) => {
            findings.push(call_finding("tenant: Route 53".into(), Err(error), TENANT_POLICY));
            return findings;
        }
    };
    let zones: BTreeSet<&str> = tenants
        .iter()
        .filter_map(|t| t.spec.dns.as_ref())
        .filter(|d| d.assume_role_arn.is_none())
        .map(|d| d.hosted_zone_id.as_str())
        .collect();
    for zone in &zones {
        findings.push(zone_finding(&route53, zone, None, "tenant", TENANT_POLICY).await);
    }
    let roles: BTreeSet<&str> = tenants.iter().filter_map(|t| t.spec.dns.as_ref()).filter_map(|d| d.assume_role_arn.as_deref()).collect();
    let zones: Vec<String> = zones.into_iter().map(str::to_owned).collect();
    let targets = tenant_targets(&zones, &roles.into_iter().map(str::to_owned).collect::<Vec<_>>());
    findings.push(permissions_finding("tenant", args.iam_principal, iam, caller.as_deref(), TENANT, targets).await);
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(operation: &'static str, code: &str, class: ErrorClass) -> AwsError {
        AwsError { operation, code: Some(code.into()), class, message: "m".into() }
    }

    #[test]
    fn access_denied_names_the_action_to_grant_and_the_policy() {
        let finding = call_finding("c".into(), Err(error("ListCertificates", "AccessDeniedException", ErrorClass::Terminal)), CERT_POLICY);
        assert_eq!(finding.verdict, Verdict::Fail);
        let fix = finding.fix.unwrap_or_default();
        assert!(fix.contains("acm:ListCertificates") && fix.contains(CERT_POLICY), "{fix}");
    }

    #[test]
    fn invalid_credentials_say_so() {
        let finding = call_finding("c".into(), Err(error("GetCallerIdentity", "InvalidClientTokenId", ErrorClass::Terminal)), "any");
        assert!(finding.fix.unwrap_or_default().contains("credentials are invalid"));
    }
}
