//! `blockwork check`'s finding about Caches that serve without a password: each is named with
//! why (its `Authenticated` condition), read from the Caches as any client reads them.

use blockwork_cache::api::Cache;
use blockwork_cache::auth::status::AUTHENTICATED;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::finding::{Finding, Verdict};

const CHECK: &str = "Caches without authentication";

/// The finding for `caches` (every Cache, as listed).
pub fn finding(caches: &[Cache]) -> Finding {
    let open: Vec<String> = caches
        .iter()
        .filter_map(|cache| {
            let condition = cache.status.as_ref()?.conditions.iter().find(|c| c.type_ == AUTHENTICATED && c.status == "False")?;
            Some(format!("{}/{} ({})", cache.namespace().unwrap_or_default(), cache.name_any(), condition.reason))
        })
        .collect();
    if open.is_empty() {
        return Finding::pass(CHECK, format!("none: no Cache serves a client without a password ({} Caches)", caches.len()));
    }
    Finding::with(
        Verdict::Warn,
        CHECK,
        format!("{} of {} Caches serve every client without a password: {}", open.len(), caches.len(), open.join(", ")),
        "move each to authentication (docs/cache.md, \"Moving a Cache to authentication\"), or set spec.auth.enabled: false where it is meant",
    )
}

/// Lists every Cache (skipped, saying why, when this identity may not).
pub async fn check(client: &Client) -> Finding {
    match Api::<Cache>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => finding(&list.items),
        Err(kube::Error::Api(status)) if status.code == 403 => Finding::with(
            Verdict::Skip,
            CHECK,
            "not tested: this identity may not list Caches in every namespace",
            "run check as someone who may (e.g. with the view role cluster-wide)",
        ),
        Err(error) => {
            Finding::with(Verdict::Fail, CHECK, format!("listing Caches failed: {error}"), "check the connection to the API server")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwork_cache::api::{CacheSpec, CacheStatus, Engine, EvictionPolicy};
    use blockwork_runtime::status::condition;

    fn cache(name: &str, authenticated: Option<(bool, &str)>) -> Cache {
        let mut cache = Cache::new(
            name,
            CacheSpec {
                engine: Engine::Redis,
                memory: "64Mi".into(),
                replicas: 1,
                eviction_policy: EvictionPolicy::AllkeysLru,
                access: None,
                tls: None,
                high_availability: None,
                auth: None,
            },
        );
        cache.metadata.namespace = Some("team-a".into());
        cache.status = authenticated.map(|(status, reason)| CacheStatus {
            conditions: vec![condition(AUTHENTICATED, status, reason, "m", Some(1))],
            ..CacheStatus::default()
        });
        cache
    }

    #[test]
    fn caches_that_serve_without_a_password_are_named_with_why() {
        let finding = finding(&[
            cache("sessions", Some((false, "AuthenticationNotConfigured"))),
            cache("pages", Some((true, "PasswordRequired"))),
            cache("legacy", Some((false, "AuthenticationDisabled"))),
        ]);
        assert_eq!(finding.verdict, Verdict::Warn);
        assert_eq!(
            finding.detail,
            "2 of 3 Caches serve every client without a password: team-a/sessions (AuthenticationNotConfigured), team-a/legacy (AuthenticationDisabled)"
        );
    }

    #[test]
    fn every_cache_authenticating_passes() {
        assert_eq!(finding(&[cache("pages", Some((true, "PasswordRequired"))), cache("new", None)]).verdict, Verdict::Pass);
    }
}
