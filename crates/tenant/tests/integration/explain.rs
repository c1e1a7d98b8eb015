//! `blockwork explain` on a DistributionTenant that drifted, against the real kube-apiserver
//! and MiniStack: the drift named, the policy and where it came from, the tenant as observed.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::*;
use blockwork_inspect::diagnose::diagnose;
use blockwork_inspect::read::{self, KindArg};
use blockwork_inspect::render::{self, Explanation};
use blockwork_inspect::report::Origin;
use jiff::Timestamp;

#[tokio::test]
async fn a_drifted_tenant_names_the_drift_the_policy_that_keeps_it_and_its_origin() {
    let h = Harness::start("dt-explain-drift").await;
    h.create_annotated("shop-drift", h.spec(&["www"]), "report").await;
    h.wait_ready("shop-drift").await;
    h.set_enabled_outside("shop-drift", false).await;
    let tenant = h.wait_for("shop-drift", "DriftDetected", |t| condition(t, "Synced").is_some_and(|c| c.1 == "DriftDetected")).await;
    let id = tenant.status.as_ref().and_then(|s| s.observation.id.clone()).unwrap();

    let now = Timestamp::now();
    let report =
        read::report(&h.client, &h.namespace, KindArg::DistributionTenant, "shop-drift", &read::default_keys(), now).await.unwrap();
    let drift = report.policies.iter().find(|p| p.name == "drift").unwrap();
    assert_eq!((drift.value.as_str(), drift.origin, drift.source.as_str()), ("report", Origin::Annotation, "blockwork.dev/drift-policy"));
    let diagnosis = diagnose(&report, now);
    assert!(diagnosis.headline.starts_with("Ready (Succeeded"), "{}", diagnosis.headline);
    assert!(
        diagnosis.headline.contains("but not in sync — DriftDetected: ") && diagnosis.headline.contains("enabled is false, want true"),
        "{}",
        diagnosis.headline
    );
    assert_eq!(diagnosis.hints[0].reason, "DriftDetected");
    assert!(diagnosis.hints[0].fix.contains("drift-policy=enforce"), "{:?}", diagnosis.hints[0]);
    let text = render::explain(&Explanation::of(report, now), now);
    eprintln!("{text}");
    assert!(text.contains(&format!("tenant id             {id}")), "{text}");
    assert!(text.contains("drift                 detected"), "{text}");
    assert!(text.contains(&format!("distribution      {}  [ok]", tenant.spec.distribution_id)), "{text}");
    assert!(!text.contains(blockwork_testenv::emulators::ACCOUNT_ID), "no account id: {text}");
}
