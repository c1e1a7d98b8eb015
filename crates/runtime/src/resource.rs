//! The trait an operator implements for its external resource: the calls to its own API, and
//! nothing about Kubernetes (seed 003's ResourceManager).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::NamespaceResourceScope;
use kube::core::object::{HasSpec, HasStatus};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::outcome::{DeleteOutcome, ErrorClass, ExternalError, MutateOutcome, Observed, Operation, WithConditions};
use crate::policy::{DriftPolicy, Policies};
use crate::status::{CreatePending, ManagedStatus};

/// What each call is given: the object and what the runtime decided about it before the call.
/// `D` is what `verify` derived ([`ExternalResource::Derived`]): `()` in `verify` itself.
#[derive(Debug)]
pub struct Request<'a, K: HasSpec, D = ()> {
    /// The object, its spec as it asks to be applied: on the live path, with the values it takes
    /// from its dependencies filled in ([`ExternalResource::resolve`]).
    pub object: &'a K,
    /// Whether the object lives or is being deleted (the runtime's finalizer is running): an
    /// operator reads this, not `deletionTimestamp`.
    pub phase: Phase,
    /// The access, deletion and drift policies in force for the object (annotations over the
    /// operator's defaults).
    pub policies: &'a Policies,
    /// The spec against the one last applied to the external resource.
    pub spec_change: &'a SpecChange<K::Spec>,
    /// The custom resources this object depends on, all Ready, in the order `dependencies` named them.
    pub dependencies: &'a [DynamicObject],
    /// Derived from the object's UID: the same for every attempt to create this object, so a
    /// create repeated after a crash finds or returns the resource the first attempt made.
    pub idempotency_token: &'a str,
    /// The create-pending marker as read: set from before a `create` call until its result is
    /// in the status. In `verify` it means a create for `marker.spec` may have happened whose
    /// result was never recorded (the status write after it was refused, or the process died):
    /// an operator whose resources cannot be found again by the token alone looks for that.
    pub create_pending: Option<&'a CreatePending>,
    /// What `verify` derived from the object in this reconcile, for the calls after it
    /// ([`ExternalResource::Derived`]).
    pub derived: &'a D,
}

impl<'a, K: HasSpec> Request<'a, K> {
    /// The same request for the calls after `verify`, carrying what it derived.
    pub(crate) fn with_derived<'b, D>(&self, derived: &'b D) -> Request<'b, K, D>
    where
        'a: 'b,
    {
        Request {
            object: self.object,
            phase: self.phase,
            policies: self.policies,
            spec_change: self.spec_change,
            dependencies: self.dependencies,
            idempotency_token: self.idempotency_token,
            create_pending: self.create_pending,
            derived,
        }
    }
}

/// Where the object is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Live,
    /// Deleted in Kubernetes, held by the finalizer until its external resource is dealt with
    /// (only reached when the deletion policy deletes it).
    Deleting,
}

/// The spec against the one last applied to the external resource.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecChange<S> {
    /// The spec differs from the last applied one, or none was applied yet: a difference in the
    /// external resource is the user's change, not drift.
    pub changed: bool,
    /// The spec when it was last applied, for operators that cannot read back every field they
    /// set. `None` when none was applied, or it no longer reads as this version's spec.
    pub last_applied: Option<S>,
}

/// What one reconcile did, handed to [`ExternalResource::reconciled`] for the operator's own
/// metrics.
#[derive(Debug)]
pub struct Report<'a, K> {
    /// The object as the reconcile read it: its status is the state at the start.
    pub object: &'a K,
    /// Each call the runtime made to the operator, in order, with the class of its error
    /// (`None`: it succeeded).
    pub calls: &'a [(Operation, Option<ErrorClass>)],
    /// Whether the reconcile ended without a Kubernetes error.
    pub kubernetes_succeeded: bool,
    pub duration: Duration,
}

impl<K> Report<'_, K> {
    /// Every call, to the operator's API and to Kubernetes, succeeded.
    pub fn succeeded(&self) -> bool {
        self.kubernetes_succeeded && self.calls.iter().all(|(_, failed)| failed.is_none())
    }
}

/// What one object asks of the runtime beyond its annotations, read from the object (typically
/// spec fields the user set): asked once per reconcile, before the policies are settled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asks {
    /// The object's own drift policy, if it has one; else the operator's default
    /// ([`crate::ControllerConfig::default_drift`]). The `blockwork.dev/drift-policy`
    /// annotation beats both: it stays the one override that works the same for every kind.
    pub drift_policy: Option<DriftPolicy>,
    /// Custom resources that must be Ready before this object is reconciled: found, not being
    /// deleted, `Ready=True` for their current generation.
    pub dependencies: Vec<DependencyRef>,
}

/// A custom resource this object waits for: it is reconciled only while each is Ready, and
/// woken when one changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DependencyRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// `None`: the dependent object's own namespace (or a cluster-scoped kind).
    pub namespace: Option<String>,
}

impl fmt::Display for DependencyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {}/{}", self.kind, namespace, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// An external resource managed by create/read/update/delete calls.
///
/// Contract: every call may run again after a crash at any point. `create` must not make a
/// second resource when called again with the same idempotency token (use the API's token, or
/// tag the resource with it and look it up in `verify`). `create` is only called under a
/// create-pending marker written for the object's current spec ([`Request::create_pending`]):
/// if its result is lost, what it may have made is for the marker's spec, and `verify` must find
/// it (or the next `create` must return it) before the marker is replaced. `delete` of a missing
/// resource succeeds (or returns an error of class `NotFound`). `create`, `update` and `delete`
/// are called only after `verify` in the same reconcile, for the same object and with the
/// observation it left, so what `verify` checked (a valid spec) they need not check again, and
/// what it derived from the object (a desired configuration) they are handed
/// ([`Self::Derived`], in [`Request::derived`]) instead of deriving it again.
/// `verify` only reads: every write it finds needed it returns as an
/// [`crate::outcome::Upkeep`], which the runtime gates by the phase, the plan and the access
/// permissions and then hands to `maintain`. Every call returns
/// the operator's own conditions it decided as data beside its outcome
/// ([`crate::outcome::Conditions`]); the runtime writes them with `Ready` and `Synced`.
/// The operator's constants (timing, default deletion and drift policies) are not asked of it:
/// they are given at registration ([`crate::ControllerConfig`]).
pub trait ExternalResource: Send + Sync + 'static {
    type Object: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + HasSpec<Spec: Clone + Serialize + DeserializeOwned + fmt::Debug + Send + Sync>
        + HasStatus<Status = ManagedStatus<Self::Observation>>
        + Clone
        + fmt::Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// The operator's own status fields (e.g. the ARN), kept in status beside the runtime's and
    /// handed back to every call.
    type Observation: Clone + fmt::Debug + Default + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The operator's own description of an upkeep `verify` asks for, handed back to `maintain`.
    type Upkeep: fmt::Debug + Send + Sync + 'static;
    /// What `verify` derives from the object that the calls after it in the same reconcile use
    /// too (the tenant's desired configuration and where its DNS records are managed): `verify`
    /// returns it on every path ([`Observed::derived`]) and the runtime hands it to `create`,
    /// `update`, `delete`, `maintain` and `on_success` in [`Request::derived`], so one reconcile
    /// derives it once and every call acts on the same value. `()` when they need nothing.
    type Derived: Send + Sync + 'static;

    /// Observes the external resource; never writes (see [`Observed`]).
    fn verify(
        &self,
        request: &Request<'_, Self::Object>,
        observation: &mut Self::Observation,
    ) -> impl Future<Output = Observed<Self::Upkeep, Self::Derived>> + Send;
    fn create(
        &self,
        request: &Request<'_, Self::Object, Self::Derived>,
        observation: &mut Self::Observation,
    ) -> impl Future<Output = WithConditions<MutateOutcome>> + Send;
    fn update(
        &self,
        request: &Request<'_, Self::Object, Self::Derived>,
        observation: &mut Self::Observation,
    ) -> impl Future<Output = WithConditions<MutateOutcome>> + Send;
    fn delete(
        &self,
        request: &Request<'_, Self::Object, Self::Derived>,
        observation: &mut Self::Observation,
    ) -> impl Future<Output = WithConditions<DeleteOutcome>> + Send;

    /// Does an upkeep `verify` asked for, once the runtime allowed it (`machine::upkeep_runs`).
    /// Called after `verify` in the same reconcile, with the observation it left; an error is
    /// that reconcile's error, as if `verify` had failed.
    fn maintain(
        &self,
        _request: &Request<'_, Self::Object, Self::Derived>,
        _observation: &mut Self::Observation,
        _work: Self::Upkeep,
    ) -> impl Future<Output = WithConditions<Result<(), ExternalError>>> + Send {
        async { Ok(()).into() }
    }

    /// Follow-up Kubernetes work once the resource is ready (e.g. publish a Secret). Runs on
    /// every reconcile that ends in `Succeeded`, so it must be idempotent.
    fn on_success(
        &self,
        _request: &Request<'_, Self::Object, Self::Derived>,
        _observation: &Self::Observation,
        _client: &Client,
    ) -> impl Future<Output = Result<(), ExternalError>> + Send {
        async { Ok(()) }
    }

    /// Called after every reconcile with what it did: for operator-specific metrics.
    fn reconciled(&self, _report: &Report<'_, Self::Object>) {}

    /// What `object` asks of the runtime: its own drift policy and the objects it waits for.
    fn asks(&self, _object: &Self::Object) -> Asks {
        Asks::default()
    }

    /// What this operator reads of a dependency (in [`Self::resolve`], or the calls): a change of
    /// it wakes the dependents, and so does any change of whether the dependency is Ready (for
    /// its generation, not being deleted); its other changes (status writes about its own work)
    /// wake nobody. By default its spec and status, every change of them.
    fn dependency_view(dependency: &DynamicObject) -> serde_json::Value
    where
        Self: Sized,
    {
        serde_json::json!({ "spec": dependency.data["spec"], "status": dependency.data["status"] })
    }

    /// The spec `object` asks for once its dependencies are resolved (every one Ready, in
    /// `dependencies` in the order [`Asks::dependencies`] named them): the values it takes from
    /// them (a Cert's certificate ARN) written into it. That spec is what every call of the live
    /// path is handed ([`Request::object`]) and what the runtime records (`lastAppliedSpec`, the
    /// create-pending marker), so a dependency's new value is a change of the spec, applied
    /// whatever the drift policy, never mistaken for drift. An error refuses the object before
    /// any call (a dependency it may not use, named in the message), as a failed `verify` would.
    /// By default the spec as it is.
    fn resolve(&self, object: &Self::Object, _dependencies: &[DynamicObject]) -> Result<<Self::Object as HasSpec>::Spec, ExternalError> {
        Ok(object.spec().clone())
    }

    /// Which share of the controller's concurrency `object`'s reconciles take
    /// ([`crate::shares`]): each share has the controller's concurrency of reconciles in flight
    /// of its own. An operator whose objects act in AWS accounts of their own answers the
    /// AwsIdentity the object acts as (ADR 0014), so that one account's work never queues behind
    /// another's. One share for every object by default.
    fn share(&self, _object: &Self::Object) -> impl Future<Output = String> + Send {
        std::future::ready(String::new())
    }
}
