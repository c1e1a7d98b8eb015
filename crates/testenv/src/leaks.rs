//! Looking for what users must never read — an AWS account id, an access key — in everything a
//! user can read of Blockwork: the statuses of its objects, the events about them, the
//! operator's logs and metrics. A [`Scanner`] holds the needles (exact strings, e.g. the
//! distinctive account id the emulators were started with, see
//! [`Emulators::for_account`](crate::emulators::Emulators::for_account)) and the identifier
//! fields where one may appear because users need the identifier whole (a Cert's
//! `status.certificateArn` is what a load balancer is given). Every hit comes back as a
//! [`Finding`] that says where, so a failing test shows what leaked and from which object, event
//! or log line.

use std::fmt;

use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::Value;

/// Where a needle was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was found, e.g. `account id`.
    pub what: String,
    /// What was read, e.g. `DistributionTenant ns/shop status`, `event ns/shop.1234`, `log`.
    pub source: String,
    /// Where in it: a JSON pointer (`/conditions/0/message`) or `line 12`.
    pub location: String,
    /// The text around the hit.
    pub excerpt: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {} at {}: {}", self.what, self.source, self.location, self.excerpt)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Scanner {
    /// (what, text)
    needles: Vec<(String, String)>,
    /// Field names whose value may hold a needle.
    identifier_fields: Vec<String>,
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks for `text`, reported as `what`.
    pub fn needle(mut self, what: &str, text: &str) -> Self {
        self.needles.push((what.to_owned(), text.to_owned()));
        self
    }

    /// JSON fields named `name` (at any depth) are identifiers users need whole, such as an ARN:
    /// a needle inside them is not a finding. Say why at the call.
    pub fn identifier_field(mut self, name: &str) -> Self {
        self.identifier_fields.push(name.to_owned());
        self
    }

    /// Every needle in `text`, by line.
    pub fn text(&self, source: &str, text: &str) -> Vec<Finding> {
        text.lines().enumerate().flat_map(|(index, line)| self.hits(source, &format!("line {}", index + 1), line)).collect()
    }

    /// Every needle in the strings (and keys) of `value`, but those of identifier fields.
    pub fn json(&self, source: &str, value: &Value) -> Vec<Finding> {
        let mut findings = Vec::new();
        self.walk(source, "", value, &mut findings);
        findings
    }

    /// The statuses of every object of `kinds` in `namespace`, and every event there.
    pub async fn namespace(&self, client: &Client, namespace: &str, kinds: &[ApiResource]) -> Result<Vec<Finding>, kube::Error> {
        let mut findings = Vec::new();
        for kind in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, kind);
            for object in api.list(&ListParams::default()).await? {
                let source = format!("{} {namespace}/{} status", kind.kind, object.name_any());
                findings.extend(self.json(&source, &object.data["status"]));
            }
        }
        let events: Api<Event> = Api::namespaced(client.clone(), namespace);
        for event in events.list(&ListParams::default()).await? {
            let source = format!("event {namespace}/{}", event.name_any());
            let mut value = serde_json::to_value(&event).unwrap_or(Value::Null);
            if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            findings.extend(self.json(&source, &value));
        }
        Ok(findings)
    }

    fn walk(&self, source: &str, pointer: &str, value: &Value, findings: &mut Vec<Finding>) {
        match value {
            Value::String(text) => findings.extend(self.hits(source, pointer, text)),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.walk(source, &format!("{pointer}/{index}"), item, findings);
                }
            }
            Value::Object(fields) => {
                for (name, field) in fields {
                    let pointer = format!("{pointer}/{name}");
                    findings.extend(self.hits(source, &pointer, name));
                    if !self.identifier_fields.iter().any(|allowed| allowed == name) {
                        self.walk(source, &pointer, field, findings);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => findings.extend(self.hits(source, pointer, &value.to_string())),
        }
    }

    fn hits(&self, source: &str, location: &str, text: &str) -> Vec<Finding> {
        self.needles
            .iter()
            .filter(|(_, needle)| text.contains(needle.as_str()))
            .map(|(what, _)| Finding {
                what: what.clone(),
                source: source.to_owned(),
                location: location.to_owned(),
                excerpt: excerpt(text),
            })
            .collect()
    }
}

/// At most 200 characters of a hit's text.
fn excerpt(text: &str) -> String {
    let mut short: String = text.chars().take(200).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNT: &str = "731902846215";

    fn scanner() -> Scanner {
        Scanner::new().needle("account id", ACCOUNT).identifier_field("certificateArn")
    }

    #[test]
    fn needle_in_a_log_line_is_found_with_its_line() {
        let log = format!("starting\nUser: arn:aws:iam::{ACCOUNT}:user/op is not authorized\n");
        let findings = scanner().text("log", &log);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!((findings[0].what.as_str(), findings[0].location.as_str()), ("account id", "line 2"));
    }

    #[test]
    fn needle_in_a_condition_message_is_found_with_its_pointer() {
        let status = serde_json::json!({"conditions": [{"type": "Ready", "message": format!("certificate arn:aws:acm:us-east-1:{ACCOUNT}:certificate/x")}]});
        let findings = scanner().json("Thing ns/a status", &status);
        assert_eq!(findings.iter().map(|f| f.location.as_str()).collect::<Vec<_>>(), ["/conditions/0/message"]);
    }

    #[test]
    fn needle_in_an_identifier_field_is_not_a_finding() {
        let status = serde_json::json!({"certificateArn": format!("arn:aws:acm:us-east-1:{ACCOUNT}:certificate/x"), "message": "ready"});
        assert!(scanner().json("Cert ns/a status", &status).is_empty());
    }

    #[test]
    fn masked_account_is_not_a_finding() {
        assert!(scanner().text("log", "certificate arn:aws:acm:us-east-1:[ACCOUNT_ID]:certificate/x").is_empty());
    }
}
