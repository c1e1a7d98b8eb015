//! Pure: why a Cache's pods do not start, from what Kubernetes says about them, so the Cache's
//! own status and events name it (not only the StatefulSet's events, which its author may not
//! think to read): a pod the API server refused to create (Pod Security admission, a quota, a
//! webhook: the StatefulSet controller's `FailedCreate` event), a pod no node takes, an image
//! that cannot be pulled, a container that cannot be created or keeps crashing.
//!
//! Kubernetes' messages are passed on as they are, with account ids masked: an image in a
//! private registry (ECR) names the account that owns it.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;

/// Why the pods do not start, with Kubernetes' own words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stuck {
    #[error("the API server refused to create pod {pod}: {message}")]
    CreateRefused { refusal: Refusal, pod: String, message: String },
    #[error("no node can take pod {pod}: {message}")]
    Unschedulable { pod: String, message: String },
    #[error("pod {pod} cannot pull image {image} of container {container} ({reason}): {message}")]
    ImagePull { pod: String, container: String, image: String, reason: String, message: String },
    #[error("pod {pod} cannot create container {container} ({reason}): {message}")]
    ContainerConfig { pod: String, container: String, reason: String, message: String },
    #[error("container {container} of pod {pod} keeps crashing: {message}")]
    Crashing { pod: String, container: String, message: String },
}

/// Who refused to create a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The namespace's Pod Security level.
    PodSecurity,
    /// A ResourceQuota of the namespace.
    Quota,
    /// Anything else: a LimitRange, an admission webhook, a policy engine.
    Other,
}

impl Stuck {
    /// The condition and event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::CreateRefused { refusal: Refusal::PodSecurity, .. } => "PodSecurityRejected",
            Self::CreateRefused { refusal: Refusal::Quota, .. } => "QuotaExceeded",
            Self::CreateRefused { refusal: Refusal::Other, .. } => "PodCreateRefused",
            Self::Unschedulable { .. } => "Unschedulable",
            Self::ImagePull { .. } => "ImagePullFailed",
            Self::ContainerConfig { .. } => "ContainerConfigError",
            Self::Crashing { .. } => "ContainerCrashing",
        }
    }
}

/// The StatefulSet controller's `FailedCreate` message: `create Pod NAME in StatefulSet STS
/// failed error: <the API server's refusal>`.
fn refusal(message: &str) -> (Refusal, String, String) {
    let pod = message.strip_prefix("create Pod ").and_then(|rest| rest.split_whitespace().next()).unwrap_or("?").to_owned();
    let refusal = message.split_once("failed error: ").map_or(message, |(_, refusal)| refusal).to_owned();
    let kind = if refusal.contains("violates PodSecurity") {
        Refusal::PodSecurity
    } else if refusal.contains("exceeded quota") || refusal.contains("must specify limits") && refusal.contains("quota") {
        Refusal::Quota
    } else {
        Refusal::Other
    };
    (kind, pod, refusal)
}

/// Why the pods of a Cache do not start, if something says: `created` of `wanted` pods exist,
/// `pods` are they, and `failed_create` is the StatefulSet's latest `FailedCreate` event.
/// A refused creation comes first (it is why pods are missing), then the pods in order.
pub fn diagnose(wanted: i32, created: i32, pods: &[&Pod], failed_create: Option<&Event>) -> Option<Stuck> {
    if created < wanted
        && let Some(message) = failed_create.and_then(|event| event.message.as_deref())
    {
        let (refusal, pod, message) = refusal(message);
        return Some(Stuck::CreateRefused { refusal, pod, message: blockwork_aws::mask_accounts(&message) });
    }
    let mut pods = pods.to_vec();
    pods.sort_by_key(|pod| pod.name_any());
    pods.into_iter().find_map(pod_trouble)
}

fn pod_trouble(pod: &Pod) -> Option<Stuck> {
    let name = pod.name_any();
    let status = pod.status.as_ref()?;
    let mask = blockwork_aws::mask_accounts;
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    if let Some(condition) = unschedulable {
        return Some(Stuck::Unschedulable { pod: name, message: mask(condition.message.as_deref().unwrap_or_default()) });
    }
    status.container_statuses.iter().flatten().find_map(|container| {
        let waiting = container.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.clone().unwrap_or_default();
        let message = mask(waiting.message.as_deref().unwrap_or_default());
        let (pod, name) = (name.clone(), container.name.clone());
        match reason.as_str() {
            "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
                Some(Stuck::ImagePull { pod, container: name, image: mask(&container.image), reason, message })
            }
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                Some(Stuck::ContainerConfig { pod, container: name, reason, message })
            }
            "CrashLoopBackOff" => {
                let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                let message = match last {
                    Some(ended) => format!(
                        "exited with code {} ({}), restarted {} times{}",
                        ended.exit_code,
                        ended.reason.as_deref().unwrap_or("no reason"),
                        container.restart_count,
                        ended.message.as_deref().map(|m| format!(": {}", mask(m.trim()))).unwrap_or_default()
                    ),
                    None => message,
                };
                Some(Stuck::Crashing { pod, container: name, message })
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "c-cache-0"}, "status": status})).expect("a pod")
    }

    fn event(message: &str) -> Event {
        serde_json::from_value(json!({"metadata": {"name": "e"}, "involvedObject": {}, "reason": "FailedCreate", "message": message}))
            .expect("an event")
    }

    fn waiting(reason: &str, message: &str) -> Pod {
        pod(
            json!({"containerStatuses": [{"name": "cache", "image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/redis:7.2", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]}),
        )
    }

    #[test]
    fn a_pod_refused_by_pod_security_is_named_with_the_refusal() {
        let refused = event(
            "create Pod c-cache-0 in StatefulSet c-cache failed error: pods \"c-cache-0\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false",
        );
        let stuck = diagnose(1, 0, &[], Some(&refused)).expect("stuck");
        assert_eq!(stuck.reason(), "PodSecurityRejected");
        assert_eq!(
            stuck.to_string(),
            "the API server refused to create pod c-cache-0: pods \"c-cache-0\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        );
    }

    #[test]
    fn a_pod_refused_by_a_quota_is_a_quota_exceeded() {
        let refused = event(
            "create Pod c-cache-2 in StatefulSet c-cache failed error: pods \"c-cache-2\" is forbidden: exceeded quota: small, requested: requests.memory=64Mi, used: requests.memory=128Mi, limited: requests.memory=128Mi",
        );
        let stuck = diagnose(3, 2, &[], Some(&refused)).expect("stuck");
        assert_eq!((stuck.reason(), matches!(&stuck, Stuck::CreateRefused { pod, .. } if pod == "c-cache-2")), ("QuotaExceeded", true));
    }

    #[test]
    fn an_old_refusal_means_nothing_once_every_pod_exists() {
        let refused = event("create Pod c-cache-0 in StatefulSet c-cache failed error: webhook denied");
        assert_eq!(diagnose(1, 1, &[], Some(&refused)), None);
        assert_eq!(diagnose(1, 0, &[], Some(&refused)).map(|s| s.reason()), Some("PodCreateRefused"));
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_named_without_the_account() {
        let stuck = diagnose(
            1,
            1,
            &[&waiting("ImagePullBackOff", "Back-off pulling image \"123456789012.dkr.ecr.eu-west-1.amazonaws.com/redis:7.2\"")],
            None,
        )
        .expect("stuck");
        assert_eq!(stuck.reason(), "ImagePullFailed");
        assert!(!stuck.to_string().contains("123456789012"), "{stuck}");
        assert!(stuck.to_string().contains("dkr.ecr.eu-west-1.amazonaws.com/redis:7.2"), "{stuck}");
    }

    #[test]
    fn a_missing_key_or_a_crash_loop_is_named() {
        assert_eq!(
            diagnose(1, 1, &[&waiting("CreateContainerConfigError", "secret \"s\" not found")], None).map(|s| s.reason()),
            Some("ContainerConfigError")
        );
        let crashing = pod(
            json!({"containerStatuses": [{"name": "cache", "image": "redis:7.2", "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "Bad directive\n"}}}]}),
        );
        let stuck = diagnose(1, 1, &[&crashing], None).expect("stuck");
        assert_eq!(
            stuck.to_string(),
            "container cache of pod c-cache-0 keeps crashing: exited with code 1 (Error), restarted 4 times: Bad directive"
        );
    }

    #[test]
    fn a_pod_no_node_takes_is_unschedulable() {
        let pending = pod(
            json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints."}]}),
        );
        assert_eq!(diagnose(3, 3, &[&pending], None).map(|s| s.reason()), Some("Unschedulable"));
    }

    #[test]
    fn pods_that_start_as_they_should_say_nothing() {
        let starting = waiting("ContainerCreating", "");
        assert_eq!(diagnose(1, 1, &[&starting], None), None);
        assert_eq!(diagnose(1, 0, &[], None), None);
    }
}
