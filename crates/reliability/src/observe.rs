//! What a suite watches while it runs, and what it scans at the end.
//!
//! - [`FailedWatch`]: every time a Cert or DistributionTenant shows `Failed` (the state that
//!   means "needs a person"), with its message: a transient fault must never get there.
//! - [`scan_for_leaks`]: `blockwork_testenv::leaks` over every status and event of the suite's
//!   namespace, the operator's logs and its metrics, for the account id, the access key, the
//!   secret key and private key material.

use std::sync::{Arc, Mutex, PoisonError};

use blockwork_testenv::leaks::{Finding, Scanner};
use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use tokio::task::JoinHandle;

use crate::workload::{cache_resource, cert_resource, tenant_resource};
use crate::world::{ACCESS_KEY_ID, ACCOUNT, SECRET_ACCESS_KEY};

/// Records every `Failed` state seen; stops when dropped.
pub struct FailedWatch {
    seen: Arc<Mutex<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FailedWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FailedWatch {
    pub fn start(client: &Client, namespace: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let tasks = [cert_resource(), tenant_resource()]
            .into_iter()
            .map(|resource| {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut events = watcher(api, watcher::Config::default()).boxed();
                    while let Some(event) = events.next().await {
                        let objects = match event {
                            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => vec![object],
                            _ => continue,
                        };
                        for object in objects {
                            let status = &object.data["status"];
                            if status["state"] == "Failed" || status["reconcileState"] == "Failed" {
                                let message = status["message"].as_str().unwrap_or_default();
                                let entry = format!("{} {}: {message}", resource.kind, object.name_any());
                                let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                                if !seen.contains(&entry) {
                                    seen.push(entry);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Self { seen, tasks }
    }

    /// Each distinct `Failed` seen: kind, name and message.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Statuses and events of `namespace`, `logs` and `metrics`, scanned for what must never be
/// readable.
pub async fn scan_for_leaks(client: &Client, namespace: &str, logs: &str, metrics: &str) -> anyhow::Result<Vec<Finding>> {
    let scanner = Scanner::new()
        .needle("account id", ACCOUNT)
        .needle("access key id", ACCESS_KEY_ID)
        .needle("secret access key", SECRET_ACCESS_KEY)
        .private_keys()
        // The whole ARN is the point of these fields: a Cert's is given to load balancers, a
        // tenant's names it for IAM policies and the AWS CLI.
        .identifier_field("certificateArn")
        // The certificates a Cert's recreate replaced, until they are deleted.
        .identifier_field("previousCertificateArns")
        .identifier_field("arn")
        // The certificate a tenant serves: the Cert it belongs to finds its users by this ARN.
        .identifier_field("certificateInUse")
        // Copies of the spec the user wrote (which names the tenants' certificate by ARN): the
        // spec as last applied, and the spec a create under way is for.
        .identifier_field("lastAppliedSpec")
        .identifier_field("createPending");
    let kinds = [cert_resource(), tenant_resource(), cache_resource()];
    let mut findings = scanner.namespace(client, namespace, &kinds).await?;
    findings.extend(scanner.text("blockwork log", logs));
    findings.extend(scanner.text("metrics", metrics));
    Ok(findings)
}
