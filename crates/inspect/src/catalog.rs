//! Every reason Blockwork sets — condition reasons and event reasons, of every controller — with
//! what it means and what to do about it. `blockwork explain` shows the entry of each reason an
//! object carries; `docs/troubleshooting.md` lists them all (a test keeps the two the same), and
//! a test scans the operators' sources so that a reason nobody explained fails the build.
//!
//! Reasons that are AWS error codes pass through as AWS sent them (`AccessDeniedException`,
//! `ThrottlingException`, ...): the common ones are listed, and [`lookup`] explains any other
//! by its family (access, throttling, not found, limits), so no reason is ever left without a
//! next step.

mod aws;
mod cache;
mod cert;
mod identity;
mod ingress;
mod ownership;
mod rotator;
mod runtime;
mod tenant;

use serde::Serialize;

/// Which objects a reason is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scope {
    /// Set by the runtime, on every kind it reconciles (Cert, DistributionTenant).
    Runtime,
    Cert,
    DistributionTenant,
    Cache,
    /// The key rotator's events on Secrets.
    Rotator,
    /// An AWS error code passed on as the reason (Cert, DistributionTenant).
    Aws,
    /// Who may act where (ADR 0014): on Certs and DistributionTenants whose namespace's AwsIdentity
    /// refuses them, and the AwsIdentity's own `Ready`.
    Identity,
    /// Ownership of AWS resources (ADR 0017): adoption, handover, the same manifest elsewhere;
    /// on Certs and DistributionTenants.
    Ownership,
    /// The Ingress controller's events on Ingresses that name Certs (ADR 0022).
    Ingress,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runtime => "runtime (Cert, DistributionTenant)",
            Self::Cert => "Cert",
            Self::DistributionTenant => "DistributionTenant",
            Self::Cache => "Cache",
            Self::Rotator => "key rotator (Secrets)",
            Self::Aws => "AWS error code (Cert, DistributionTenant)",
            Self::Identity => "AWS identity (Cert, DistributionTenant; AwsIdentity's Ready)",
            Self::Ownership => "ownership: adoption and handover (Cert, DistributionTenant)",
            Self::Ingress => "Ingress (events of the Ingress controller)",
        }
    }
}

/// Whether a reason is good news, a wait, or something a person must fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// Done, or progressing as it should.
    Fine,
    /// Waiting for something that comes by itself (AWS, DNS, pods); act only if it lasts.
    Waiting,
    /// Retried by the controller, but something outside it is wrong until someone acts.
    Problem,
}

/// One reason, explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub reason: &'static str,
    pub scope: Scope,
    pub severity: Severity,
    /// What it means, in one sentence.
    pub meaning: &'static str,
    /// What to do next.
    pub fix: &'static str,
}

const fn fine(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Fine, meaning, fix }
}

const fn waiting(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Waiting, meaning, fix }
}

const fn problem(reason: &'static str, scope: Scope, meaning: &'static str, fix: &'static str) -> Entry {
    Entry { reason, scope, severity: Severity::Problem, meaning, fix }
}

use Scope::Aws;

const NOTHING: &str = "Nothing to do.";
const WAIT_STATE: &str = "Nothing to do unless it lasts; `blockwork explain` shows how long it has and what it waits for.";
const ACCESS: &str = "Grant the IAM identity the call acts as the action named in the message: the operator's, or the role of the \
namespace's AwsIdentity (`status.awsIdentity` names it; docs/iam/ has each controller's policy; `blockwork check` tests every mapped \
role), then `blockwork retry KIND/NAME`.";
const MAPPING: &str = "Ask the platform team to fix the AwsIdentity mappings (docs/multi-account.md; `kubectl get awsidentities` shows \
each one's Ready); the objects of its namespaces are looked at again as soon as a mapping changes.";
const THROTTLED: &str = "Nothing to do for a burst: the controller backs off (at least a minute) and retries. If it lasts, lower the \
operator's rate limits (--acm-rate-limit, --route53-rate-limit) or ask AWS for a higher quota.";

/// Every reason, in the order `docs/troubleshooting.md` lists them.
/// Every reason, in the order `docs/troubleshooting.md` lists them: one section per concern.
const SECTIONS: &[&[Entry]] = &[
    runtime::ENTRIES,
    cert::ENTRIES,
    tenant::ENTRIES,
    identity::ENTRIES,
    ownership::ENTRIES,
    ingress::ENTRIES,
    aws::ENTRIES,
    cache::ENTRIES,
    rotator::ENTRIES,
];

/// Every entry, in order.
pub fn entries() -> impl Iterator<Item = &'static Entry> {
    SECTIONS.iter().flat_map(|section| section.iter())
}

/// Whether a reason belongs to a family.
type Member = fn(&str) -> bool;

/// Where a reason found no entry of its own: explained by its family.
const FAMILIES: &[(Member, Entry)] = &[
    (
        |r| r.contains("AccessDenied") || r.contains("NotAuthorized") || r.contains("Unauthorized") || r.contains("Forbidden"),
        problem("AccessDenied*", Aws, "AWS refused the call: the operator's IAM identity lacks a permission.", ACCESS),
    ),
    (
        |r| r.contains("Throttl") || r.contains("TooManyRequests") || r.contains("RateExceeded"),
        problem("Throttling*", Aws, "AWS throttled the operator's calls.", THROTTLED),
    ),
    (
        |r| r.contains("LimitExceeded") || r.contains("QuotaExceeded"),
        problem(
            "*LimitExceeded",
            Aws,
            "An AWS quota or limit is reached.",
            "Ask AWS for a higher quota (Service Quotas), or delete unused resources; then `blockwork retry`.",
        ),
    ),
    (
        |r| r.ends_with("NotFound") || r.ends_with("NotFoundException") || r.starts_with("NoSuch"),
        problem("*NotFound", Aws, "Something the object names does not exist.", "Fix the reference in the spec that the message names."),
    ),
    (
        |r| r.starts_with("Invalid") || r.ends_with("ValidationException") || r.ends_with("ValidationError"),
        problem("Invalid*", Aws, "AWS refused the call's input; the message says which.", "Fix the field of the spec the message names."),
    ),
];

/// For a reason nothing here explains (an AWS code no one has seen yet).
const UNKNOWN: Entry = problem(
    "*",
    Aws,
    "An error passed on as it came (usually an AWS error code); the message is AWS's own.",
    "Read the message; `blockwork check` tests the operator's access to AWS.",
);

/// The entry for `reason` on an object of `scope` (a reason set by the runtime counts for Cert
/// and DistributionTenant): its own, else one of any scope, else its family's, else the
/// catch-all. Never `None`: every reason gets a next step.
pub fn lookup(scope: Scope, reason: &str) -> &'static Entry {
    let own = |s: Scope| entries().find(|e| e.reason == reason && e.scope == s);
    let runtime_kind = matches!(scope, Scope::Cert | Scope::DistributionTenant);
    own(scope)
        .or_else(|| if runtime_kind { own(Scope::Runtime).or_else(|| own(Scope::Aws)) } else { None })
        .or_else(|| entries().find(|e| e.reason == reason))
        .or_else(|| FAMILIES.iter().find(|(matches, _)| matches(reason)).map(|(_, entry)| entry))
        .unwrap_or(&UNKNOWN)
}

/// Whether `reason` has an entry of its own (not only a family's).
pub fn explains(reason: &str) -> bool {
    entries().any(|e| e.reason == reason)
}

/// Where the generated tables begin and end in `docs/troubleshooting.md`.
pub const MARKDOWN_BEGIN: &str = "<!-- reasons: generated from crates/inspect/src/catalog.rs -->";
pub const MARKDOWN_END: &str = "<!-- end of reasons -->";

/// Every entry as Markdown tables, one per scope, for `docs/troubleshooting.md`.
pub fn markdown() -> String {
    let mut out = String::new();
    let mut scope = None;
    for entry in entries() {
        if scope != Some(entry.scope) {
            scope = Some(entry.scope);
            out.push_str(&format!("\n### {}\n\n| reason | | what it means | what to do |\n|---|---|---|---|\n", entry.scope.as_str()));
        }
        let severity = match entry.severity {
            Severity::Fine => "fine",
            Severity::Waiting => "waiting",
            Severity::Problem => "**problem**",
        };
        out.push_str(&format!(
            "| `{}` | {severity} | {} | {} |\n",
            entry.reason,
            entry.meaning.replace('|', "\\|"),
            entry.fix.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_s_own_entry_wins_over_another_kind_s() {
        assert_eq!(lookup(Scope::Cache, "InvalidSpec").scope, Scope::Cache);
        assert_eq!(lookup(Scope::Cert, "InvalidSpec").scope, Scope::Cert);
        assert_eq!(lookup(Scope::DistributionTenant, "Failed").scope, Scope::Runtime);
        assert_eq!(lookup(Scope::Cache, "Failed").scope, Scope::Cache);
    }

    #[test]
    fn the_ownership_reasons_are_explained_on_certs_and_tenants_alike() {
        use blockwork_aws::ownership::{ADOPTION_MISMATCH, ADOPTION_REFUSED, OWNED_ELSEWHERE, OWNERSHIP_LOST};
        for reason in [ADOPTION_MISMATCH, ADOPTION_REFUSED, OWNERSHIP_LOST, OWNED_ELSEWHERE] {
            for kind in [Scope::Cert, Scope::DistributionTenant] {
                let entry = lookup(kind, reason);
                assert_eq!((entry.reason, entry.scope, entry.severity), (reason, Scope::Ownership, Severity::Problem));
            }
        }
    }

    #[test]
    fn an_aws_code_nobody_listed_is_explained_by_its_family() {
        assert_eq!(lookup(Scope::Cert, "UnauthorizedOperation").fix, ACCESS);
        assert_eq!(lookup(Scope::Cert, "ProvisionedThroughputExceededThrottling").fix, THROTTLED);
        assert!(lookup(Scope::Cert, "NoSuchBucket").meaning.contains("does not exist"));
        assert_eq!(lookup(Scope::Cert, "Zzz").reason, "*", "the catch-all still says what to do");
    }

    #[test]
    fn a_reason_has_one_entry_per_scope() {
        let all: Vec<&Entry> = entries().collect();
        for (i, entry) in all.iter().enumerate() {
            let twin = all.iter().take(i).find(|e| e.reason == entry.reason && e.scope == entry.scope);
            assert!(twin.is_none(), "{} twice for {:?}", entry.reason, entry.scope);
        }
    }

    #[test]
    fn every_entry_says_what_it_means_and_what_to_do() {
        for entry in entries() {
            assert!(entry.meaning.ends_with('.') && entry.fix.ends_with('.'), "{entry:?}");
            assert!(entry.meaning.len() > 20 && entry.fix.len() > 10, "{entry:?}");
        }
    }
}
