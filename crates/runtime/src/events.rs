//! Kubernetes Events, published the same way by every controller of the process.
//!
//! One [`Publisher`] per controller: its `reportingController` is the controller's field manager
//! (`blockwork-<name>`), and its `reportingInstance` the pod, by one rule ([`instance`]), so
//! `kubectl events` tells the controllers and the replicas apart whichever controller wrote.
//! Events are best effort: a failure to publish is logged and never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

/// The API server refuses an Event whose note is longer (`events.k8s.io/v1`, in bytes).
pub const NOTE_LIMIT: usize = 1024;

/// Publishes the Events of one controller. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    recorder: Recorder,
    controller: String,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("controller", &self.controller).finish_non_exhaustive()
    }
}

impl Publisher {
    /// Events reported by `controller` (e.g. `blockwork-cache`) from this [`instance`].
    pub fn new(client: Client, controller: impl Into<String>) -> Self {
        let controller = controller.into();
        let reporter = Reporter { controller: controller.clone(), instance: instance() };
        Self { recorder: Recorder::new(client, reporter), controller }
    }

    /// Publishes an Event about `object`, its note cut to [`NOTE_LIMIT`]; a failure is logged.
    pub async fn publish(&self, object: &ObjectReference, type_: EventType, reason: &str, action: &str, note: &str) {
        let event = Event { type_, reason: reason.to_owned(), note: Some(truncate(note)), action: action.to_owned(), secondary: None };
        let kind = object.kind.as_deref().unwrap_or_default();
        if let Err(error) = crate::trace::kubernetes_write("create", "event", kind, self.recorder.publish(&event, object)).await {
            warn!(controller = %self.controller, %error, reason, object = ?object.name, "could not publish an event");
        }
    }
}

/// The `reportingInstance` of every Event of this process: the pod's name (`POD_NAME`, from the
/// downward API in the chart), else the host name (`HOSTNAME`, which is the pod's name in a pod
/// too), else none.
pub fn instance() -> Option<String> {
    instance_from(|name| std::env::var(name).ok())
}

fn instance_from(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["POD_NAME", "HOSTNAME"].into_iter().filter_map(var).map(|v| v.trim().to_owned()).find(|v| !v.is_empty())
}

/// `note` if it fits in [`NOTE_LIMIT`] bytes, else its longest prefix (at a character boundary)
/// that fits with `...` appended.
fn truncate(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_owned();
    }
    let mut cut = NOTE_LIMIT - 3;
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &note[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_note_is_kept_whole() {
        assert_eq!(truncate("created"), "created");
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(truncate(&exact), exact);
    }

    #[test]
    fn a_long_note_is_cut_to_the_limit_in_bytes_at_a_character_boundary() {
        let cut = truncate(&"é".repeat(NOTE_LIMIT));
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert!(cut.trim_end_matches("...").chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_instance_is_the_pod_name_else_the_host_name() {
        fn env(pod: Option<&'static str>, host: Option<&'static str>) -> impl Fn(&str) -> Option<String> {
            move |name| match name {
                "POD_NAME" => pod.map(str::to_owned),
                "HOSTNAME" => host.map(str::to_owned),
                _ => None,
            }
        }
        assert_eq!(instance_from(env(Some("blockwork-0"), Some("node"))).as_deref(), Some("blockwork-0"));
        assert_eq!(instance_from(env(Some(""), Some("blockwork-1"))).as_deref(), Some("blockwork-1"), "an empty POD_NAME is unset");
        assert_eq!(instance_from(env(None, None)), None);
    }
}
