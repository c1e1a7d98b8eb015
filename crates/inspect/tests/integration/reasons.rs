#![allow(clippy::unwrap_used, clippy::panic)]
//! Every reason an operator sets is explained: the sources of every controller are scanned for
//! CamelCase string literals (condition and event reasons are written as such, or as AWS error
//! codes the controllers pass on), and each must be in the catalog or named below as something
//! else. A new reason without an entry fails here, naming the file.

use std::path::{Path, PathBuf};

use blockwork_inspect::catalog;

/// CamelCase literals of the operators that are not reasons, by what they are.
const NOT_REASONS: &[&str] = &[
    // Kinds and type names.
    "Cache",
    "CacheStatus",
    "Cert",
    "CertStatus",
    "ConfigMap",
    "DistributionTenant",
    "DistributionTenantStatus",
    "PodDisruptionBudget",
    "Secret",
    "Service",
    "StatefulSet",
    "NetworkPolicy",
    "TenantCount",
    "Rotator",
    "Publisher",
    "Material",
    "Opaque",
    "Aws",
    "AwsIdentity",
    "AwsIdentityStatus",
    "Identities",
    "AssumedRole",
    // CRD schema words: scope, conversion strategy, printer columns.
    "Namespaced",
    "Cluster",
    "Namespaces",
    "Reason",
    "Webhook",
    "Age",
    "State",
    "Domain",
    "Distribution",
    "Engine",
    "Expires",
    "Memory",
    "Phase",
    "Replicas",
    "Primary",
    // Condition types and statuses (their reasons are in the catalog).
    "Synced",
    "PrimaryKnown",
    "NetworkIsolated",
    "Renewed",
    "True",
    "False",
    "CertificateReady",
    "NotReady",
    // Event actions (the `action` field, not the reason).
    "Create",
    "Read",
    "Reconcile",
    "Release",
    "RenderJwks",
    "Rotate",
    "Update",
    // AWS operation names (metric labels and error context).
    "ACMDescribeCertificate",
    "AddTagsToCertificate",
    "AssumeRole",
    "GetCallerIdentity",
    "Route53",
    "CloudFront",
    "ChangeResourceRecordSets",
    "CreateDistributionTenant",
    "CreateHostedZone",
    "DeleteCertificate",
    "DeleteDistributionTenant",
    "DeleteHostedZone",
    "DescribeCertificate",
    "DescribeCertificateAuthority",
    "ExportCertificate",
    "GetCertificate",
    "GetChange",
    "GetConnectionGroup",
    "GetDistribution",
    "GetDistributionTenant",
    "GetManagedCertificateDetails",
    "ListCertificates",
    "ListConnectionGroups",
    "ListResourceRecordSets",
    "ListTagsForCertificate",
    "RemoveTagsFromCertificate",
    "RenewCertificate",
    "RequestCertificate",
    "Route53ChangeResourceRecordSets",
    "Route53GetChange",
    "UpdateDistributionTenant",
    "TagResource",
    // CloudFront's tenant status values, and the Cert's own states (`status.state`, beside the
    // runtime's `reconcileState`), which `blockwork explain` shows as such.
    "Deployed",
    "Validated",
    // Kubernetes' word for "no ClusterIP" and a webhook's "no side effects".
    "None",
    // Quantity units and JWK algorithm and curve names.
    "Mi",
    "Gi",
    "EdDSA",
    "Ed25519",
    // The Kubernetes Status reason of a malformed ConversionReview (the API server's, never shown on an object).
    "BadRequest",
    // Kubernetes' own words about pods, which the Cache reads (its reasons are in the catalog)
    // or writes into a pod template.
    "Pod",
    "Event",
    "PodScheduled",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
    "ScheduleAnyway",
    "DoNotSchedule",
    // A NetworkPolicy's words: its policy type, a label selector's operator.
    "Ingress",
    "In",
    "RuntimeDefault",
    "Always",
    "IfNotPresent",
    "Never",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
            out.push(path);
        }
    }
}

/// The code before the file's first `#[cfg(test)]`, without comment lines.
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

#[test]
fn every_camel_case_literal_of_the_operators_is_an_explained_reason_or_named_as_something_else() {
    let literal = regex::Regex::new(r#""([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)""#).unwrap();
    let mut files = Vec::new();
    for krate in ["runtime", "aws", "identity", "cert", "tenant", "cache", "rotator"] {
        rust_files(&workspace().join("crates").join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 40, "the operators' sources are found: {files:?}");
    let mut unexplained = Vec::new();
    let mut explained = 0;
    for file in &files {
        for capture in literal.captures_iter(&production_code(file)) {
            let word = &capture[1];
            if catalog::explains(word) {
                explained += 1;
            } else if !NOT_REASONS.contains(&word) {
                unexplained.push(format!("{word} ({})", file.strip_prefix(workspace()).unwrap_or(file).display()));
            }
        }
    }
    unexplained.sort();
    unexplained.dedup();
    assert!(
        unexplained.is_empty(),
        "reasons without an entry in crates/inspect/src/catalog.rs (add one, or name the literal in NOT_REASONS if it is no reason):\n{}",
        unexplained.join("\n")
    );
    assert!(explained > 100, "the scan finds the reasons it should: {explained}");
}

#[test]
fn every_runtime_state_and_cache_phase_is_explained() {
    // Published as event reasons from the enums, not as literals.
    for state in blockwork_runtime::ReconcileState::ALL {
        assert!(catalog::explains(state.as_str()), "{state}");
    }
    for phase in ["Pending", "Provisioning", "Ready", "Failed"] {
        assert_eq!(catalog::lookup(catalog::Scope::Cache, phase).scope, catalog::Scope::Cache, "{phase}");
    }
}

#[test]
fn nothing_named_as_no_reason_is_in_the_catalog() {
    let both: Vec<&&str> = NOT_REASONS.iter().filter(|w| catalog::explains(w)).collect();
    assert!(both.is_empty(), "{both:?}");
}

#[test]
fn the_troubleshooting_page_lists_every_reason_with_its_fix() {
    let path = workspace().join("docs/troubleshooting.md");
    let generated = catalog::markdown();
    if std::env::var_os("BLOCKWORK_UPDATE_DOCS").is_some() {
        let page = std::fs::read_to_string(&path).unwrap();
        let (head, rest) = page.split_once(catalog::MARKDOWN_BEGIN).unwrap();
        let (_, tail) = rest.split_once(catalog::MARKDOWN_END).unwrap();
        std::fs::write(&path, format!("{head}{}\n{generated}{}{tail}", catalog::MARKDOWN_BEGIN, catalog::MARKDOWN_END)).unwrap();
    }
    let page = std::fs::read_to_string(&path).unwrap();
    assert!(
        page.contains(&generated),
        "docs/troubleshooting.md's reason tables differ from the catalog: run `BLOCKWORK_UPDATE_DOCS=1 cargo test -p blockwork-inspect --test reasons`"
    );
    assert!(page.starts_with("# Troubleshooting"), "the page's title");
    assert!(page.find("blockwork explain").is_some_and(|at| at < 400), "the page starts with `blockwork explain`");
}
