//! "Two clusters": two control planes of the test environment (each its own etcd and
//! kube-apiserver), each with its own `blockwork run`, against the same emulators behind one
//! fault proxy — two Kubernetes clusters sharing an AWS account, as when a team moves to a new
//! cluster, or runs staging and prod in one account. The same namespace exists in both, so the
//! same manifests apply to both; the proxy (the caller's) counts every call of both operators:
//! creates, tag writes, deletes.
//!
//! Each cluster's operator can be killed (`kill -9`) and started again; the other keeps running.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Resource};

use crate::control_plane::{ControlPlane, Error, control_plane, second_control_plane};
use crate::operator::Operator;

/// How long an operator may take to answer `/readyz`.
const READY: Duration = Duration::from_secs(90);

/// Two clusters with the same namespace and CRDs; their operators start when the test says.
pub struct TwoClusters {
    /// The namespace both clusters have.
    pub namespace: String,
    /// The cluster that had the objects first (the old one in a move).
    pub first: Cluster,
    /// The other (the new one in a move).
    pub second: Cluster,
}

/// One control plane and its operator (started by [`Cluster::run`]).
pub struct Cluster {
    /// Names the operator's replica in logs (`HOSTNAME`).
    pub name: &'static str,
    pub plane: &'static ControlPlane,
    pub operator: Option<Operator>,
}

impl TwoClusters {
    /// Both control planes (started on first use), `crds` installed in both, and one new
    /// namespace named `<prefix>-<random>` in both.
    pub async fn new(prefix: &str, crds: &[CustomResourceDefinition]) -> Result<Self, Error> {
        let first = control_plane().await?;
        let second = second_control_plane().await?;
        first.install_crds(crds).await?;
        second.install_crds(crds).await?;
        let namespace = first.namespace(prefix).await?;
        second.namespace_named(&namespace).await?;
        Ok(Self {
            namespace,
            first: Cluster { name: "first-cluster", plane: first, operator: None },
            second: Cluster { name: "second-cluster", plane: second, operator: None },
        })
    }

    /// The Api of kind `K` in the namespace, in the first and the second cluster.
    pub fn apis<K>(&self) -> (Api<K>, Api<K>)
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        (self.first.api(&self.namespace), self.second.api(&self.namespace))
    }
}

impl Cluster {
    /// Starts this cluster's `blockwork run` (`binary`, with `args`) and waits until it is ready.
    pub async fn run(&mut self, binary: &Path, args: &[String]) -> Result<(), Error> {
        let mut operator = Operator::new(binary, self.plane.kubeconfig_path())?.named(self.name).args(args).start()?;
        operator.wait_ready(READY).await?;
        self.operator = Some(operator);
        Ok(())
    }

    /// The Api of kind `K` in `namespace` of this cluster.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.plane.client(), namespace)
    }

    /// `kill -9` of this cluster's operator (as its node dies); the next [`Self::restart`]
    /// starts it again.
    pub fn kill(&mut self) {
        if let Some(operator) = self.operator.as_mut() {
            operator.kill();
        }
    }

    /// A new incarnation of the operator after [`Self::kill`], and waits until it is ready.
    pub async fn restart(&mut self) -> Result<(), Error> {
        let operator = self.operator.as_mut().ok_or_else(|| Error::Setup(format!("{}: no operator to restart", self.name)))?;
        operator.restart()?;
        operator.wait_ready(READY).await
    }

    /// Stops this cluster's operator for good (the cluster is gone, in a move).
    pub fn stop(&mut self) {
        self.operator = None;
    }
}
