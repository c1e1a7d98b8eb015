//! `blockwork check`: the preflight a user runs after installing. Each probe makes harmless
//! reads (a dry-run create for the webhooks, which the API server routes through them and then
//! discards; read-only AWS calls), and each finding is decided by a pure function of what the
//! probe saw, with the fix.

use std::fmt::Write as _;

use clap::Args;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{ValidatingWebhook, ValidatingWebhookConfiguration};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kube::{Api, Client};

use crate::aws_check::AwsSettings;
use crate::commands::{KubeArgs, Output};
use crate::finding::{Finding, Verdict};

#[derive(Clone, Debug, Args)]
pub struct CheckArgs {
    /// Controllers whose requirements to check, comma separated [default (also when empty): all].
    #[arg(long, env = "BLOCKWORK_CONTROLLERS", value_delimiter = ',', value_name = "NAMES")]
    pub controllers: Option<Vec<String>>,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "BLOCKWORK_LEADER_ELECTION_NAMESPACE", default_value = "blockwork-system", value_name = "NAMESPACE")]
    pub leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, env = "BLOCKWORK_LEADER_ELECTION_ID", default_value = "blockwork-leader", value_name = "NAME")]
    pub leader_election_id: String,
    /// The IAM user or role whose permissions to simulate, e.g. the operator's IRSA role
    /// [default: the caller's own]. Simulating needs iam:SimulatePrincipalPolicy on it.
    #[arg(long, env = "BLOCKWORK_CHECK_IAM_PRINCIPAL", value_name = "ARN")]
    pub iam_principal: Option<String>,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten, next_help_heading = "AWS (controllers `cert` and `tenant`), as `blockwork run` takes them")]
    pub aws: blockwork_aws::AwsArgs,
    #[command(flatten, next_help_heading = "Cert: ACM certificates (controller `cert`), as `blockwork run` takes them")]
    pub cert: blockwork_cert::CertArgs,
    #[command(flatten, next_help_heading = "DistributionTenant: CloudFront tenants (controller `tenant`), as `blockwork run` takes them")]
    pub tenant: blockwork_tenant::TenantArgs,
    #[command(flatten, next_help_heading = "AWS identities (AwsIdentity), as `blockwork run` takes them")]
    pub identity: blockwork_identity::IdentityArgs,
}

impl CheckArgs {
    /// What the AWS probes are given.
    fn aws_settings(&self) -> AwsSettings<'_> {
        AwsSettings { aws: &self.aws, cert: &self.cert, identity: &self.identity, iam_principal: self.iam_principal.as_deref() }
    }
}

/// What a controller needs installed, from the binary's registry.
#[derive(Clone, Debug)]
pub struct Expected {
    pub controller: &'static str,
    pub crds: Vec<CustomResourceDefinition>,
    pub webhooks: Vec<ValidatingWebhook>,
}

const APPLY_CRDS: &str = "install them: `blockwork crds | kubectl apply --server-side -f -`";

/// A CRD as installed against the one this binary was built with.
pub fn crd_finding(expected: &CustomResourceDefinition, installed: Option<&CustomResourceDefinition>) -> Finding {
    let name = expected.metadata.name.clone().unwrap_or_default();
    let check = format!("CRD {name}");
    let Some(installed) = installed else {
        return Finding::with(Verdict::Fail, check, "not installed", APPLY_CRDS);
    };
    let established = installed
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    if !established {
        return Finding::with(Verdict::Fail, check, "installed but not Established", "read its conditions: `kubectl describe crd NAME`");
    }
    let versions = |crd: &CustomResourceDefinition| -> Vec<(String, bool, bool)> {
        crd.spec.versions.iter().map(|v| (v.name.clone(), v.served, v.storage)).collect()
    };
    let (want, have) = (versions(expected), versions(installed));
    let missing: Vec<&str> = want.iter().filter(|w| !have.contains(w)).map(|w| w.0.as_str()).collect();
    if !missing.is_empty() {
        let have: Vec<String> = have
            .iter()
            .map(|(n, served, storage)| {
                format!("{n}{}{}", if *served { "" } else { " (not served)" }, if *storage { " (storage)" } else { "" })
            })
            .collect();
        return Finding::with(
            Verdict::Fail,
            check,
            format!("installed with versions {}; this Blockwork needs {} as it defines them", have.join(", "), missing.join(", ")),
            format!("upgrade them: {APPLY_CRDS}"),
        );
    }
    let schemas = |crd: &CustomResourceDefinition| -> Vec<Option<serde_json::Value>> {
        crd.spec.versions.iter().map(|v| v.schema.as_ref().and_then(|s| serde_json::to_value(s).ok())).collect()
    };
    if schemas(expected) != schemas(installed) {
        return Finding::with(
            Verdict::Warn,
            check,
            "installed at the expected versions, but its schema differs from this binary's (another Blockwork release)",
            format!("apply this release's: {APPLY_CRDS}"),
        );
    }
    let list: Vec<&str> = want.iter().map(|w| w.0.as_str()).collect();
    Finding::pass(check, format!("installed and Established, versions {}", list.join(", ")))
}

/// The leader Lease as read (`None`: absent).
pub fn lease_finding(namespace: &str, name: &str, lease: Option<&Lease>, now: Timestamp) -> Finding {
    let check = format!("leader Lease {namespace}/{name}");
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Finding::with(
            Verdict::Warn,
            check,
            "not found: no replica runs with --leader-elect (or with another --leader-election-namespace/-id)",
            "run the operator with --leader-elect when it has more than one replica; without, run exactly one",
        );
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match renewed {
        Some(renewed) if !holder.is_empty() && now.duration_since(renewed).as_secs() <= duration => {
            Finding::pass(check, format!("held by {holder}, renewed {}s ago", now.duration_since(renewed).as_secs()))
        }
        Some(renewed) => Finding::with(
            Verdict::Fail,
            check,
            format!(
                "not held: last renewed by {} {} ago (lease {duration}s)",
                if holder.is_empty() { "nobody" } else { holder.as_str() },
                crate::text::age(renewed, now)
            ),
            "no replica leads, so no controller runs: check the operator's pods (`kubectl -n NAMESPACE get pods`) and their logs",
        ),
        None => Finding::with(Verdict::Fail, check, "never held", "start the operator; read its logs if it does not take the Lease"),
    }
}

/// What a dry-run create through a webhook answered. The webhook answered when the object was
/// stored (and discarded) or refused by the webhook itself; the API server names a webhook it
/// could not call. A refusal by RBAC means the dry run never reached the webhook.
pub fn webhook_finding(check: String, how: &str, answer: &Result<(), kube::Error>) -> Finding {
    match answer {
        Ok(()) => Finding::pass(check, format!("reachable: {how}")),
        Err(kube::Error::Api(status))
            if status.message.contains("failed calling webhook") || status.message.contains("conversion webhook") =>
        {
            Finding::with(
                Verdict::Fail,
                check,
                format!("the API server cannot call it: {}", status.message),
                "check that the operator runs, that its webhook Service has ready endpoints, and that caBundle is the CA of the serving certificate (cert-manager's CA injector, or `blockwork crds/webhooks --webhook-ca-file`)",
            )
        }
        Err(kube::Error::Api(status)) if status.message.contains("admission webhook") && status.message.contains("denied the request") => {
            Finding::pass(check, format!("reachable: {how} (it answered: {})", crate::text::short(&status.message, 100)))
        }
        Err(kube::Error::Api(status)) if status.code == 403 => Finding::with(
            Verdict::Skip,
            check,
            format!("not tested: this identity may not create the dry-run object ({})", crate::text::short(&status.message, 120)),
            "run check as someone who may create the kind (a dry run needs create), e.g. from your workstation",
        ),
        Err(error) => Finding::with(
            Verdict::Fail,
            check,
            format!("the dry run failed: {error}"),
            "read the error; report a bug if the dry-run object is refused by the schema",
        ),
    }
}

/// A read the check needs was refused or failed: skipped (RBAC) or failed, and said so.
fn unreadable(check: String, what: &str, error: &kube::Error) -> Finding {
    match error {
        kube::Error::Api(status) if status.code == 403 => Finding::with(
            Verdict::Skip,
            check,
            format!("not tested: this identity may not read {what}"),
            "run check as someone who may read it (the operator's own RBAC does not include it)",
        ),
        other => Finding::with(Verdict::Fail, check, format!("reading {what} failed: {other}"), "check the connection to the API server"),
    }
}

/// A webhook's `caBundle`: present, a certificate, valid for how long.
pub fn ca_bundle_finding(check: String, bundle: Option<&[u8]>, now: Timestamp) -> Finding {
    let Some(bundle) = bundle.filter(|b| !b.is_empty()) else {
        return Finding::with(
            Verdict::Fail,
            check,
            "no caBundle: the API server cannot trust the webhook's certificate",
            "let cert-manager inject it (annotation cert-manager.io/inject-ca-from), or apply with --webhook-ca-file",
        );
    };
    match crate::kinds::certificate_expiry(bundle) {
        Some(expiry) if expiry <= now => Finding::with(
            Verdict::Fail,
            check,
            format!("the caBundle's certificate expired {} ago", crate::text::age(expiry, now)),
            "renew the CA and let it be injected again",
        ),
        Some(expiry) if expiry.duration_since(now).as_secs() < 14 * 86_400 => Finding::with(
            Verdict::Warn,
            check,
            format!("the caBundle's certificate expires {}", crate::text::ago_or_in(expiry, now)),
            "renew the CA before then",
        ),
        Some(expiry) => Finding::pass(check, format!("caBundle is a CA valid until {}", expiry.strftime("%Y-%m-%d"))),
        None => Finding::with(Verdict::Fail, check, "the caBundle is not a PEM certificate", "inject the CA's certificate (PEM)"),
    }
}

/// `blockwork check`: every finding, printed; `Ok(true)` when nothing failed.
pub async fn run(args: &CheckArgs, expected: &[Expected]) -> anyhow::Result<(String, bool)> {
    let wanted: Vec<&str> = args.controllers.iter().flatten().map(|c| c.trim()).filter(|c| !c.is_empty()).collect();
    let selected: Vec<&Expected> = expected.iter().filter(|e| wanted.is_empty() || wanted.contains(&e.controller)).collect();
    let mut findings = Vec::new();
    let (client, namespace) = args.kube.connect().await?;
    let now = Timestamp::now();
    match client.apiserver_version().await {
        Ok(version) => findings.push(Finding::pass("API server", format!("reachable, Kubernetes {}", version.git_version))),
        Err(error) => {
            findings.push(Finding::with(
                Verdict::Fail,
                "API server",
                format!("not reachable: {error}"),
                "check the kubeconfig and context (`kubectl cluster-info`)",
            ));
            return Ok(print(&findings, args.output));
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for expected in &selected {
        for crd in &expected.crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let installed = match crds.get_opt(&name).await {
                Ok(installed) => installed,
                Err(error) => {
                    findings.push(unreadable(format!("CRD {name}"), "CustomResourceDefinitions", &error));
                    continue;
                }
            };
            let finding = crd_finding(crd, installed.as_ref());
            let usable = finding.verdict != Verdict::Fail;
            findings.push(finding);
            if let (true, Some(installed)) = (usable, installed) {
                findings.extend(conversion_webhook(&client, &installed, &namespace, now).await);
            }
        }
    }
    findings.extend(validating_webhooks(&client, &selected, &namespace, now).await);
    match Api::<Lease>::namespaced(client.clone(), &args.leader_election_namespace).get_opt(&args.leader_election_id).await {
        Ok(lease) => {
            findings.push(lease_finding(&args.leader_election_namespace, &args.leader_election_id, lease.as_ref(), now));
            let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty());
            if let (Some(holder), true) = (holder, selected.iter().any(|e| e.controller == "cache")) {
                findings.extend(crate::cache_check::check(&client, &args.leader_election_namespace, &holder).await);
            }
        }
        Err(error) => findings.push(unreadable(
            format!("leader Lease {}/{}", args.leader_election_namespace, args.leader_election_id),
            "Leases",
            &error,
        )),
    }
    let settings = args.aws_settings();
    for expected in &selected {
        findings.extend(crate::aws_check::findings(expected.controller, &settings, &client).await);
    }
    Ok(print(&findings, args.output))
}

fn print(findings: &[Finding], output: Output) -> (String, bool) {
    let passed = findings.iter().all(|f| f.verdict != Verdict::Fail);
    let text = match output {
        Output::Json => serde_json::to_string_pretty(findings).unwrap_or_default() + "\n",
        Output::Text => {
            let mut out = String::new();
            for finding in findings {
                let mark = match finding.verdict {
                    Verdict::Pass => "PASS",
                    Verdict::Warn => "WARN",
                    Verdict::Fail => "FAIL",
                    Verdict::Skip => "SKIP",
                };
                let _ = writeln!(out, "{mark}  {}: {}", finding.check, finding.detail);
                if let Some(fix) = &finding.fix {
                    let _ = writeln!(out, "      fix: {fix}");
                }
            }
            let count = |verdict| findings.iter().filter(|f| f.verdict == verdict).count();
            let _ = writeln!(
                out,
                "\nfindings: {} pass, {} warn, {} fail, {} skip",
                count(Verdict::Pass),
                count(Verdict::Warn),
                count(Verdict::Fail),
                count(Verdict::Skip)
            );
            out
        }
    };
    (text, passed)
}

/// A CRD converted by a webhook: its caBundle, and a dry-run create at a version that is not the
/// storage version, which the API server converts through the webhook and then discards.
async fn conversion_webhook(client: &Client, crd: &CustomResourceDefinition, namespace: &str, now: Timestamp) -> Vec<Finding> {
    let Some(conversion) = crd.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook") else { return Vec::new() };
    let name = crd.metadata.name.clone().unwrap_or_default();
    let config = conversion.webhook.as_ref().and_then(|w| w.client_config.as_ref());
    let bundle = config.and_then(|c| c.ca_bundle.as_ref()).map(|b| b.0.as_slice());
    let mut findings = vec![ca_bundle_finding(format!("conversion webhook of {name}"), bundle, now)];
    let Some(version) = crd.spec.versions.iter().find(|v| v.served && !v.storage) else { return findings };
    let Some(sample) = sample(&crd.spec.group, &crd.spec.names.kind, &version.name) else { return findings };
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", crd.spec.group, version.name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let answer = api.create(&PostParams { dry_run: true, field_manager: Some("blockwork-check".into()) }, &sample).await.map(drop);
    let how = format!("a dry-run {} {} was converted to the storage version", crd.spec.names.kind, version.name);
    findings.push(webhook_finding(
        format!(
            "conversion webhook of {name} ({})",
            where_(
                config.and_then(|c| c.url.clone()),
                config.and_then(|c| c.service.as_ref().map(|s| (s.namespace.clone(), s.name.clone())))
            )
        ),
        &how,
        &answer,
    ));
    findings
}

fn where_(url: Option<String>, service: Option<(String, String)>) -> String {
    match (url, service) {
        (Some(url), _) => url,
        (None, Some((namespace, name))) => format!("Service {namespace}/{name}"),
        (None, None) => "no client config".to_owned(),
    }
}

/// The registered ValidatingWebhookConfiguration `blockwork`: each expected webhook present
/// with a caBundle, and reached by a dry-run create of its kind.
async fn validating_webhooks(client: &Client, selected: &[&Expected], namespace: &str, now: Timestamp) -> Vec<Finding> {
    let wanted: Vec<&ValidatingWebhook> = selected.iter().flat_map(|e| &e.webhooks).collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let configuration = match Api::<ValidatingWebhookConfiguration>::all(client.clone()).get_opt("blockwork").await {
        Ok(configuration) => configuration,
        Err(error) => return vec![unreadable("admission webhooks".to_owned(), "ValidatingWebhookConfigurations", &error)],
    };
    let registered = configuration.and_then(|c| c.webhooks).unwrap_or_default();
    let mut findings = Vec::new();
    for webhook in wanted {
        let check = format!("admission webhook {}", webhook.name);
        let Some(found) = registered.iter().find(|r| r.name == webhook.name) else {
            findings.push(Finding::with(
                Verdict::Fail,
                check,
                "not registered: objects are admitted without its checks",
                "register it: `blockwork webhooks | kubectl apply --server-side -f -`",
            ));
            continue;
        };
        let bundle = found.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
        findings.push(ca_bundle_finding(check.clone(), bundle, now));
        let Some(rule) = found.rules.iter().flatten().next() else { continue };
        let (Some(group), Some(version), Some(plural)) =
            (rule.api_groups.iter().flatten().next(), rule.api_versions.iter().flatten().next(), rule.resources.iter().flatten().next())
        else {
            continue;
        };
        let kind = match plural.as_str() {
            "certs" => "Cert",
            "distributiontenants" => "DistributionTenant",
            _ => continue,
        };
        let Some(sample) = sample(group, kind, version) else { continue };
        let resource = ApiResource {
            group: group.clone(),
            version: version.clone(),
            api_version: format!("{group}/{version}"),
            kind: kind.to_owned(),
            plural: plural.clone(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let answer = api.create(&PostParams { dry_run: true, field_manager: Some("blockwork-check".into()) }, &sample).await.map(drop);
        let location =
            where_(found.client_config.url.clone(), found.client_config.service.as_ref().map(|s| (s.namespace.clone(), s.name.clone())));
        findings.push(webhook_finding(format!("{check} ({location})"), &format!("a dry-run {kind} went through it"), &answer));
    }
    findings
}

/// A small object of a kind that passes its schema, for a dry run.
fn sample(group: &str, kind: &str, version: &str) -> Option<DynamicObject> {
    let spec = match kind {
        "Cache" => serde_json::json!({"engine": "redis", "memory": "64Mi"}),
        "Cert" => serde_json::json!({"serviceName": "blockwork-check", "environment": "dryrun"}),
        "DistributionTenant" => {
            serde_json::json!({"distributionId": "EBLOCKWORKCHECK", "domains": [{"domain": "check.blockwork.invalid"}]})
        }
        _ => return None,
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": kind,
        "metadata": {"name": "blockwork-check-dry-run"},
        "spec": spec,
    }))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("valid")
    }

    fn lease(holder: &str, renewed: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(at(renewed))),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_renewed_within_its_duration_is_held() {
        let finding = lease_finding("ops", "blockwork-leader", Some(&lease("pod-a", 990)), at(1_000));
        assert_eq!((finding.verdict, finding.detail.as_str()), (Verdict::Pass, "held by pod-a, renewed 10s ago"));
    }

    #[test]
    fn an_expired_lease_fails_and_says_since_when() {
        let finding = lease_finding("ops", "blockwork-leader", Some(&lease("pod-a", 400)), at(1_000));
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.detail.contains("last renewed by pod-a 10m ago"), "{}", finding.detail);
    }

    #[test]
    fn no_lease_is_a_warning_about_leader_election() {
        let finding = lease_finding("ops", "blockwork-leader", None, at(1_000));
        assert_eq!(finding.verdict, Verdict::Warn);
        assert!(finding.fix.as_deref().is_some_and(|f| f.contains("--leader-elect")));
    }

    #[test]
    fn a_missing_crd_fails_with_the_install_command() {
        let finding = crd_finding(&blockwork_cert::crd(), None);
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.fix.as_deref().is_some_and(|f| f.contains("blockwork crds")));
    }

    #[test]
    fn a_crd_without_a_version_this_binary_needs_fails() {
        let expected = blockwork_cache::crd::crd();
        let mut installed = expected.clone();
        installed.spec.versions.retain(|v| v.name == "v1alpha1");
        installed.spec.versions[0].storage = true;
        installed.status =
            Some(serde_json::from_value(serde_json::json!({"conditions": [{"type": "Established", "status": "True"}]})).expect("status"));
        let finding = crd_finding(&expected, Some(&installed));
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.detail.contains("needs v1beta1"), "{}", finding.detail);
    }

    #[test]
    fn a_webhook_that_answered_is_reachable_even_when_it_refused_the_object() {
        let refused = Err(kube::Error::Api(
            kube::core::Status::failure("admission webhook \"cert.acm.blockwork.dev\" denied the request: no zone", "Forbidden")
                .with_code(403)
                .boxed(),
        ));
        assert_eq!(webhook_finding("w".into(), "dry run", &refused).verdict, Verdict::Pass);
        let unreachable = Err(kube::Error::Api(
            kube::core::Status::failure(
                "Internal error occurred: failed calling webhook \"cert.acm.blockwork.dev\": tls: failed to verify certificate",
                "InternalError",
            )
            .with_code(500)
            .boxed(),
        ));
        let finding = webhook_finding("w".into(), "dry run", &unreachable);
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.detail.contains("failed to verify certificate"));
    }

    #[test]
    fn a_dry_run_refused_by_rbac_is_not_a_webhook_answer() {
        let forbidden = Err(kube::Error::Api(
            kube::core::Status::failure(
                "certs.acm.blockwork.dev \"blockwork-check-dry-run\" is forbidden: User \"system:serviceaccount:ops:blockwork\" cannot create resource \"certs\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        ));
        let finding = webhook_finding("w".into(), "dry run", &forbidden);
        assert_eq!(finding.verdict, Verdict::Skip, "{finding:?}");
        assert!(finding.detail.contains("may not create"));
    }

    #[test]
    fn a_missing_ca_bundle_fails() {
        assert_eq!(ca_bundle_finding("w".into(), None, at(0)).verdict, Verdict::Fail);
        assert_eq!(ca_bundle_finding("w".into(), Some(b"junk"), at(0)).verdict, Verdict::Fail);
    }
}
