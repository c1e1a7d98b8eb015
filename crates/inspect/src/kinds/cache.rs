//! A Cache's report: its phase and conditions, the StatefulSet, Services and pods it owns, its
//! TLS Secret.

use blockwork_cache::api::{Cache, Phase};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, Service};
use kube::ResourceExt;

use crate::report::{self, ConditionView, ErrorView, Field, Kind, Origin, Owned, Policy, Reference, Report};
use crate::text::age;

/// What a Cache owns and references, as read.
#[derive(Clone, Debug, Default)]
pub struct CacheObjects {
    pub stateful_set: Option<StatefulSet>,
    pub services: Vec<Service>,
    pub pods: Vec<Pod>,
    /// The TLS Secret the spec names, if it names one: `None` when it does not exist.
    pub tls_secret: Option<Option<Secret>>,
}

/// Whether clients authenticate, as the status says: the user and the binding Secret, where a
/// rotation is; or that it serves without a password.
fn authentication(cache: &Cache) -> String {
    let status = cache.status.as_ref();
    let binding = status.and_then(|s| s.binding.as_ref()).map(|b| b.name.clone()).unwrap_or_default();
    match status.and_then(|s| s.auth.as_ref()) {
        Some(auth) if auth.user.is_some() => {
            let user = auth.user.clone().unwrap_or_default();
            let mut text = format!("user {user}, password in Secret {binding}; {} rotations", auth.rotations);
            if let Some(phase) = auth.rotation {
                text.push_str(&format!(", rotating ({phase:?})"));
            }
            text
        }
        _ => "none: every client is served without a password".to_owned(),
    }
}

/// A Cache: its phase and conditions, the StatefulSet, Services and pods it owns, its TLS Secret.
pub fn cache(cache: &Cache, events: &[Event], objects: &CacheObjects, now: Timestamp) -> Report {
    let mut report = Report::new(Kind::Cache, &cache.namespace().unwrap_or_default(), &cache.name_any());
    report.deleting = cache.metadata.deletion_timestamp.is_some();
    report.set_events(events);
    let status = cache.status.clone().unwrap_or_default();
    report.state = status.phase.map(|p| format!("{p:?}")).unwrap_or_else(|| "New".to_owned());
    report.conditions = status.conditions.iter().map(ConditionView::from_condition).collect();
    report.ready = Some(status.phase == Some(Phase::Ready));
    report.state_since = report.condition("Ready").map(|c| c.since);
    report.behind = report::behind(cache.metadata.generation, status.observed_generation);
    report.message = report.condition("Ready").map(|c| c.message.clone()).filter(|m| !m.is_empty());
    // What the controller waits out (`status.lastError`: class and the latest retry); else a
    // failing condition it records no retry for (PrimaryKnown, a pause). Not `Authenticated`:
    // serving without a password is how the Cache is set, not an error (explain names it).
    report.last_error = status.last_error.as_ref().map(ErrorView::from_last_error).or_else(|| {
        let posture = blockwork_cache::auth::status::AUTHENTICATED;
        report.conditions.iter().find(|c| !c.is_true() && c.type_ != "Ready" && c.type_ != posture).map(|c| ErrorView {
            reason: c.reason.clone(),
            message: c.message.clone(),
            class: None,
            since: Some(c.since),
            attempts: None,
            retry_at: None,
        })
    });
    let paused = cache.annotations().get(blockwork_runtime::policy::PAUSED_ANNOTATION);
    report.policies.push(match paused {
        Some(value) => Policy {
            name: "paused",
            value: value.trim().to_owned(),
            origin: Origin::Annotation,
            source: blockwork_runtime::policy::PAUSED_ANNOTATION.to_owned(),
        },
        None => Policy { name: "paused", value: "false".into(), origin: Origin::Default, source: "not annotated".into() },
    });
    report.observed.push(Field::new("engine", format!("{:?}", cache.spec.engine).to_lowercase()));
    report.observed.push(Field::new("replicas", format!("{} ready of {}", status.ready_replicas, cache.spec.replicas)));
    if let Some(endpoint) = &status.endpoint {
        report.observed.push(Field::new("endpoint", endpoint));
    }
    if let Some(primary) = &status.primary {
        // Whether Sentinel said so at the last look, or this is the last primary known.
        let current = report.condition(blockwork_cache::sentinel::PRIMARY_KNOWN).is_none_or(|c| c.is_true());
        report.observed.push(Field::new("primary", if current { primary.clone() } else { format!("{primary} (last known)") }));
    }
    report.observed.push(Field::new("authentication", authentication(cache)));
    if let Some(failover) = &status.last_failover {
        let when = crate::text::ago_or_in(failover.time.0, now);
        report.observed.push(Field::new("last failover", format!("{} → {}, {when} ({})", failover.from, failover.to, failover.time.0)));
    }
    if let Some(name) = blockwork_cache::refs::tls_secret_name(cache) {
        let (state, ok) = match &objects.tls_secret {
            Some(Some(secret)) => {
                let data = secret.data.clone().unwrap_or_default();
                let missing: Vec<&str> =
                    ["tls.crt", "tls.key"].into_iter().filter(|k| data.get(*k).is_none_or(|v| v.0.is_empty())).collect();
                if missing.is_empty() {
                    ("exists with tls.crt and tls.key".to_owned(), true)
                } else {
                    (format!("lacks {}", missing.join(", ")), false)
                }
            }
            Some(None) => ("does not exist (read now)".to_owned(), false),
            None => ("not read".to_owned(), false),
        };
        report.references.push(Reference { what: "TLS Secret".into(), name: name.to_owned(), state, ok });
    }
    if let Some(sts) = &objects.stateful_set {
        let sts_status = sts.status.clone().unwrap_or_default();
        let wanted = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready = sts_status.ready_replicas.unwrap_or(0);
        report.owned.push(Owned {
            kind: "StatefulSet".into(),
            name: sts.name_any(),
            state: format!("{ready}/{wanted} ready, {} created", sts_status.replicas),
            ready: ready >= wanted,
        });
    } else {
        report.owned.push(Owned {
            kind: "StatefulSet".into(),
            name: blockwork_cache::shape::resource_name(cache),
            state: "missing".into(),
            ready: false,
        });
    }
    for service in &objects.services {
        let headless = service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
        report.owned.push(Owned {
            kind: "Service".into(),
            name: service.name_any(),
            state: if headless { "headless".into() } else { "exists".into() },
            ready: true,
        });
    }
    for pod in &objects.pods {
        let (state, ready) = pod_state(pod, now);
        report.owned.push(Owned { kind: "Pod".into(), name: pod.name_any(), state, ready });
    }
    if status.phase != Some(Phase::Ready) && objects.pods.is_empty() && objects.stateful_set.is_some() {
        report.notes.push(
            "The StatefulSet has no pods: nothing has created them yet (is the cluster's controller-manager running? a quota or an admission webhook refusing them shows in `kubectl describe statefulset`)."
                .to_owned(),
        );
    }
    report
}

/// A pod's readiness in a few words, with why it is not ready where the pod says.
pub fn pod_state(pod: &Pod, now: Timestamp) -> (String, bool) {
    let status = pod.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
    if ready {
        let started = status.start_time.as_ref().map(|t| format!(", up {}", age(t.0, now))).unwrap_or_default();
        return (format!("{phase}, ready{started}"), true);
    }
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref()).map(|w| w.reason.clone().unwrap_or_default()));
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| format!("{}: {}", c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()));
    let why = waiting.or(unschedulable).map(|w| format!(" ({w})")).unwrap_or_default();
    (format!("{phase}, not ready{why}"), false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::fixtures::at;

    fn failed_over_cache(primary_known: bool) -> Cache {
        let mut cache: Cache = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ha", "namespace": "team-a"},
            "spec": {"engine": "redis", "memory": "64Mi", "replicas": 3, "highAvailability": {"enabled": true}},
            "status": {"phase": "Ready", "readyReplicas": 3, "primary": "ha-cache-1",
                       "lastFailover": {"time": "1970-01-01T00:01:40Z", "from": "ha-cache-0", "to": "ha-cache-1"}},
        }))
        .expect("a Cache");
        let known = blockwork_runtime::status::condition("PrimaryKnown", primary_known, "SentinelReported", "", Some(1));
        cache.status.as_mut().expect("a status").conditions.push(known);
        cache
    }

    #[test]
    fn a_cache_names_its_primary_and_its_last_failover() {
        let report = cache(&failed_over_cache(true), &[], &CacheObjects::default(), at(400));
        let observed: Vec<(&str, &str)> = report.observed.iter().map(|f| (f.label.as_str(), f.value.as_str())).collect();
        assert!(observed.contains(&("primary", "ha-cache-1")), "{observed:?}");
        assert!(observed.contains(&("last failover", "ha-cache-0 → ha-cache-1, 5m ago (1970-01-01T00:01:40Z)")), "{observed:?}");
    }

    #[test]
    fn a_primary_sentinel_no_longer_confirms_is_the_last_known() {
        let report = cache(&failed_over_cache(false), &[], &CacheObjects::default(), at(400));
        assert!(report.observed.iter().any(|f| f.label == "primary" && f.value == "ha-cache-1 (last known)"), "{:?}", report.observed);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status})).expect("a pod")
    }

    #[test]
    fn a_pod_says_why_it_is_not_ready() {
        let pulling = pod(serde_json::json!({"phase": "Pending", "containerStatuses": [
            {"name": "redis", "image": "redis", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}
        ]}));
        assert_eq!(pod_state(&pulling, at(0)), ("Pending, not ready (ImagePullBackOff)".to_owned(), false));
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes have enough memory"}
        ]}));
        assert_eq!(pod_state(&unschedulable, at(0)).0, "Pending, not ready (Unschedulable: 0/3 nodes have enough memory)");
        let ready = pod(
            serde_json::json!({"phase": "Running", "startTime": "1970-01-01T00:00:00Z", "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(pod_state(&ready, at(7200)), ("Running, ready, up 2h".to_owned(), true));
    }
}
