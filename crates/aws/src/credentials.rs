//! Credentials of assumed roles (ADR 0014), one entry per (role, ExternalId, session name):
//!
//! - reused until [`MARGIN`] before they expire, so no call goes out with credentials about to
//!   lapse;
//! - concurrent misses share one AssumeRole (moka's `get_with`): the 300 Certs of a namespace
//!   that appear at once cost one call, not 300;
//! - a refusal (AccessDenied, an ExternalId the trust policy does not accept) is remembered for
//!   [`REFUSAL_KEPT`], so a denied role does not spend the operator's STS quota on every
//!   reconcile of its namespaces; a transient failure is not remembered.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use aws_config::SdkConfig;
use moka::future::Cache;

use crate::error::{AwsError, ErrorClass};
use crate::principal::AssumedRole;

/// Credentials are used until this long before they expire.
pub const MARGIN: Duration = Duration::from_secs(300);
/// How long a refused AssumeRole is answered from memory.
pub const REFUSAL_KEPT: Duration = Duration::from_secs(30);
/// Sessions kept at most (a few hundred namespaces, each with its zones' roles).
const CAPACITY: u64 = 10_000;

/// What an AssumeRole gave.
#[derive(Clone)]
enum Assumed {
    Granted { sdk: Box<SdkConfig>, expires: SystemTime },
    Refused(AwsError),
}

pub(crate) struct Credentials {
    cache: Cache<AssumedRole, Assumed>,
}

impl Credentials {
    pub(crate) fn new() -> Self {
        Self { cache: Cache::builder().max_capacity(CAPACITY).expire_after(Lifetime).build() }
    }

    /// The SDK configuration with `role`'s credentials: cached, or what `assume` gives (once,
    /// however many callers miss at once).
    pub(crate) async fn get(
        &self,
        role: &AssumedRole,
        assume: impl Future<Output = Result<(SdkConfig, SystemTime), AwsError>>,
    ) -> Result<SdkConfig, AwsError> {
        let assumed = self
            .cache
            .get_with_by_ref(role, async {
                match assume.await {
                    Ok((sdk, expires)) => Assumed::Granted { sdk: Box::new(sdk), expires },
                    Err(error) => Assumed::Refused(error),
                }
            })
            .await;
        match assumed {
            Assumed::Granted { sdk, .. } => Ok(*sdk),
            Assumed::Refused(error) => Err(error),
        }
    }
}

/// How long each answer is kept: credentials until shortly before they expire, a refusal a
/// while, a transient failure not at all (its callers still share it).
struct Lifetime;

impl moka::Expiry<AssumedRole, Assumed> for Lifetime {
    fn expire_after_create(&self, _role: &AssumedRole, assumed: &Assumed, _now: Instant) -> Option<Duration> {
        Some(lifetime(assumed, SystemTime::now()))
    }
}

fn lifetime(assumed: &Assumed, now: SystemTime) -> Duration {
    match assumed {
        Assumed::Granted { expires, .. } => expires.duration_since(now).unwrap_or_default().saturating_sub(MARGIN),
        Assumed::Refused(error) if error.class == ErrorClass::Terminal => REFUSAL_KEPT,
        Assumed::Refused(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn role() -> AssumedRole {
        AssumedRole { arn: "arn:aws:iam::111122223333:role/r".into(), external_id: Some("x".into()), session_name: "s".into() }
    }

    fn refused(class: ErrorClass) -> AwsError {
        AwsError { operation: "AssumeRole", code: Some("AccessDenied".into()), class, message: "no".into() }
    }

    #[test]
    fn credentials_are_kept_until_five_minutes_before_they_expire() {
        let now = SystemTime::now();
        let granted = Assumed::Granted { sdk: Box::new(SdkConfig::builder().build()), expires: now + Duration::from_secs(3600) };
        assert_eq!(lifetime(&granted, now), Duration::from_secs(3300));
        let expiring = Assumed::Granted { sdk: Box::new(SdkConfig::builder().build()), expires: now + Duration::from_secs(60) };
        assert_eq!(lifetime(&expiring, now), Duration::ZERO);
    }

    #[test]
    fn a_refusal_is_remembered_a_while_and_a_transient_failure_not_at_all() {
        let now = SystemTime::now();
        assert_eq!(lifetime(&Assumed::Refused(refused(ErrorClass::Terminal)), now), REFUSAL_KEPT);
        assert_eq!(lifetime(&Assumed::Refused(refused(ErrorClass::Throttled)), now), Duration::ZERO);
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_assume_role() {
        let credentials = Arc::new(Credentials::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (credentials, calls) = (Arc::clone(&credentials), Arc::clone(&calls));
                tokio::spawn(async move {
                    credentials
                        .get(&role(), async {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok((SdkConfig::builder().build(), SystemTime::now() + Duration::from_secs(3600)))
                        })
                        .await
                        .is_ok()
                })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_refused_role_is_not_asked_again_at_once() {
        let credentials = Credentials::new();
        let calls = AtomicUsize::new(0);
        for _ in 0..3 {
            let answer = credentials
                .get(&role(), async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(refused(ErrorClass::Terminal))
                })
                .await;
            assert!(answer.is_err());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
