//! The mappings as the cluster has them: one watch of every AwsIdentity per process (started on
//! first use, so a process without AWS controllers needs neither the CRD nor the permission),
//! shared by the controllers and the admission webhooks, and the grants resolved from it.
//!
//! Nothing is granted before the mappings are read: a namespace a mapping lists must never act
//! as an unmapped one (in the operator's account) because the process has just started.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::broadcast;
use tracing::warn;

use crate::api::AwsIdentity;
use crate::grant::{Grant, OperatorZone, Refusal, Settings, grant};

/// How long a grant waits for the first listing of the mappings before it is refused as not
/// read yet (a transient refusal: the object is retried).
const READ_WAIT: Duration = Duration::from_secs(10);

pub struct Identities {
    settings: Settings,
    /// `None` for a fixed set (tests, tools).
    client: Option<Client>,
    store: OnceLock<Store<AwsIdentity>>,
    changes: broadcast::Sender<()>,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Identities {
    /// The cluster's mappings, watched from the first use on.
    pub fn new(client: Client, settings: Settings) -> Arc<Self> {
        Arc::new(Self { settings, client: Some(client), store: OnceLock::new(), changes: broadcast::channel(64).0 })
    }

    /// A fixed set of mappings, for tests and tools.
    pub fn fixed(identities: Vec<AwsIdentity>, settings: Settings) -> Arc<Self> {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for identity in identities {
            writer.apply_watcher_event(&watcher::Event::InitApply(identity));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        // The store keeps what the writer applied; the writer is not needed any more.
        drop(writer);
        let fixed = Self { settings, client: None, store: OnceLock::new(), changes: broadcast::channel(1).0 };
        let _ = fixed.store.set(store);
        Arc::new(fixed)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn store(&self) -> &Store<AwsIdentity> {
        self.store.get_or_init(|| {
            let (store, writer) = reflector::store();
            if let Some(client) = &self.client {
                let changes = self.changes.clone();
                let events = watcher(Api::<AwsIdentity>::all(client.clone()), watcher::Config::default().any_semantic())
                    .default_backoff()
                    .reflect(writer);
                tokio::spawn(events.for_each(move |event| {
                    match event {
                        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                            // Nobody listening is fine.
                            let _ = changes.send(());
                        }
                        Ok(_) => {}
                        Err(error) => warn!(%error, "watching AwsIdentities"),
                    }
                    async {}
                }));
            }
            store
        })
    }

    /// Every mapping, once read (`None` before: see [`READ_WAIT`]).
    pub async fn all(&self) -> Option<Vec<Arc<AwsIdentity>>> {
        let store = self.store();
        match tokio::time::timeout(READ_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => Some(store.state()),
            _ => None,
        }
    }

    /// What `namespace` may do (`operator_zones`: the zones the caller's controller is
    /// configured with, for unmapped namespaces).
    pub async fn grant(&self, namespace: &str, operator_zones: &[OperatorZone]) -> Result<Grant, Refusal> {
        let all = self.all().await.ok_or(Refusal::NotRead)?;
        let refs: Vec<&AwsIdentity> = all.iter().map(AsRef::as_ref).collect();
        grant(namespace, &refs, &self.settings, operator_zones)
    }

    /// Told each time a mapping is created, changed or deleted (and once the first listing is
    /// read): the objects of the namespaces concerned are woken.
    pub fn changes(&self) -> broadcast::Receiver<()> {
        // The watch starts with the first subscriber too.
        self.store();
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::AwsIdentitySpec;
    use crate::grant::Unmapped;

    #[tokio::test]
    async fn a_fixed_set_grants_at_once() {
        let identity = AwsIdentity::new("team-a", AwsIdentitySpec { namespaces: vec!["team-a".to_owned()], ..AwsIdentitySpec::default() });
        let identities = Identities::fixed(vec![identity], Settings { cluster: "c".to_owned(), unmapped: Unmapped::Refuse });
        assert_eq!(&*identities.grant("team-a", &[]).await.unwrap().identity, "team-a");
        assert_eq!(identities.grant("other", &[]).await.unwrap_err().reason(), "NoAwsIdentity");
    }
}
