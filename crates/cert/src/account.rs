//! The AWS account a Cert acts in (ADR 0014): its namespace's grant — the AwsIdentity that maps
//! it, or the operator's own identity where unmapped namespaces are allowed — resolved before
//! any AWS call, and what the grant gives: the principal of the namespace's calls, the ACM
//! listing of the identity's account, and the hosted zones (and names) its Certs may use.
//!
//! How Cert code obtains it: [`Accounts::of`] once per reconcile, then every ACM call goes
//! through [`CertAccount::acm`] as [`CertAccount::principal`], and every record through
//! [`CertAccount::zone`].
//!
//! One certificate listing per identity (per account and region, swept in the background and
//! shared by the identity's namespaces); the Certs are woken by any listing's changes
//! ([`Accounts::changes`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use blockwork_aws::acm::{Acm, AcmConfig};
use blockwork_aws::route53::Zone as HostedZone;
use blockwork_aws::{Aws, AwsError, Principal};
use blockwork_identity::{Grant, Identities, OperatorZone, Refusal};
use blockwork_runtime::trace::Traced;
use blockwork_runtime::{ErrorClass, ExternalError};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::zones::{Zone, ZoneRegistry};

/// What a Cert of one namespace acts as, and where.
pub struct CertAccount {
    pub grant: Grant,
    /// The identity's ACM (listing and calls) in the controller's region.
    pub acm: Arc<Acm>,
    /// The hosted zones the namespace's Certs may use.
    pub zones: ZoneRegistry,
}

impl CertAccount {
    /// Who the namespace's calls act as.
    pub fn principal(&self) -> &Principal {
        &self.grant.principal
    }

    /// The hosted zone `zone_id` as the grant reaches it; an error (before any call) when the
    /// namespace is not, or no longer, granted it.
    pub fn zone(&self, zone_id: &str) -> Result<HostedZone, AwsError> {
        match self.grant.zone(zone_id) {
            Some(zone) => Ok(HostedZone::new(&zone.id, zone.principal)),
            None => Err(AwsError {
                operation: "Route53",
                code: Some("HostedZoneNotGranted".to_owned()),
                class: ErrorClass::Terminal,
                message: format!(
                    "hosted zone {zone_id} is not granted to this namespace by {}: its validation records are neither written nor deleted there (grant the zone again, or remove them by hand)",
                    self.grant.describe()
                ),
            }),
        }
    }
}

/// The refusal of a grant as the runtime sees it: needs a person, except while the mappings are
/// being read.
pub fn refused(refusal: &Refusal) -> ExternalError {
    let class = if refusal.is_transient() { ErrorClass::Retryable } else { ErrorClass::Terminal };
    ExternalError::new(class, refusal.reason(), refusal.to_string())
}

/// The accounts of the controller's Certs, and their certificate listings.
pub struct Accounts {
    aws: Arc<Aws>,
    identities: Arc<Identities>,
    /// `--dns-zones`: what the operator's own identity grants unmapped namespaces.
    operator_zones: Vec<OperatorZone>,
    acm: AcmConfig,
    /// By the principal of the identity's shared work.
    listings: Mutex<HashMap<Principal, Arc<Acm>>>,
    changes: broadcast::Sender<Traced<Vec<String>>>,
    /// Each listing's sweeps and the forwarding of its changes: as long as the controller runs.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Accounts {
    pub fn new(aws: Arc<Aws>, identities: Arc<Identities>, operator_zones: &ZoneRegistry, acm: AcmConfig) -> Self {
        let operator_zones = operator_zones.operator_zones();
        Self {
            aws,
            identities,
            operator_zones,
            acm,
            listings: Mutex::default(),
            changes: broadcast::channel(1024).0,
            tasks: Mutex::default(),
        }
    }

    pub fn identities(&self) -> &Arc<Identities> {
        &self.identities
    }

    /// The zones the operator's own identity grants (for the webhook).
    pub fn operator_zones(&self) -> &[OperatorZone] {
        &self.operator_zones
    }

    /// The account of `namespace`'s Certs; a refusal needs no AWS call to tell.
    pub async fn of(&self, namespace: &str) -> Result<CertAccount, ExternalError> {
        let grant = self.identities.grant(namespace, &self.operator_zones).await.map_err(|refusal| refused(&refusal))?;
        let acm = self.listing(&grant.shared);
        let zones = registry(&grant);
        Ok(CertAccount { grant, acm, zones })
    }

    /// The share of the controller's concurrency `namespace`'s Certs take: its AwsIdentity's, so
    /// that each account's Certs have reconciles in flight of their own (`blockwork_runtime::shares`).
    /// `operator` for an unmapped namespace; `""` for one refused (which makes no call).
    pub async fn share(&self, namespace: &str) -> String {
        self.identities.grant(namespace, &self.operator_zones).await.map(|grant| grant.identity.to_string()).unwrap_or_default()
    }

    /// The certificate listing of an identity's account, started (swept in the background, its
    /// changes forwarded) the first time one of its Certs is looked at.
    fn listing(&self, principal: &Principal) -> Arc<Acm> {
        let mut listings = self.listings.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(acm) = listings.get(principal) {
            return Arc::clone(acm);
        }
        let acm = Acm::new(&self.aws, crate::CONTROLLER, None, principal.clone(), self.acm);
        let mut changed = acm.changes();
        let forward = self.changes.clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.push(tokio::spawn(Arc::clone(&acm).keep_swept()));
        tasks.push(tokio::spawn(async move {
            loop {
                match changed.recv().await {
                    // Nobody listening is fine: the Certs' requeues cover it.
                    Ok(arns) => drop(forward.send(arns)),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }));
        listings.insert(principal.clone(), Arc::clone(&acm));
        acm
    }

    /// The account id `principal` acts in (for comparing accounts only, never shown).
    pub async fn account_id(&self, principal: &Principal) -> Option<String> {
        self.aws.account_id(crate::CONTROLLER, principal).await
    }

    /// The ARNs of certificates that changed, after each sweep of any listing, with the sweep's
    /// span.
    pub fn changes(&self) -> broadcast::Receiver<Traced<Vec<String>>> {
        self.changes.subscribe()
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }
}

/// The zones of a grant, as the Cert's decisions use them.
pub fn registry(grant: &Grant) -> ZoneRegistry {
    ZoneRegistry::new(grant.zones.iter().map(|z| Zone { name: z.name.clone(), id: z.id.clone(), domains: z.domains.clone() }).collect())
}
