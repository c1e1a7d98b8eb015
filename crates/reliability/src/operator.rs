//! `blockwork run` as the suites run it ([`blockwork_testenv::operator::Operator`]): every
//! controller, one namespace, against the suite's emulators through their fault proxies, signing
//! with the suite's own access key (the leak scan looks for it). It can be killed with SIGKILL and
//! started again; its log (every incarnation) and metrics are kept for the leak scan.

use std::path::{Path, PathBuf};

use blockwork_testenv::operator::Operator;

use crate::world::{ACCESS_KEY_ID, SECRET_ACCESS_KEY, World};

/// How to start the operator.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `blockwork` binary.
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub namespace: String,
    /// ACM and Route53 (the cert controller; the tenant's DNS).
    pub moto_endpoint: String,
    /// CloudFront and its ACM (the tenant controller).
    pub ministack_endpoint: String,
    /// `--dns-zones`.
    pub dns_zones: String,
    /// `--leader-elect`, with the Lease in the suite's namespace.
    pub leader_elect: bool,
}

impl Launch {
    pub fn new(binary: &Path, world: &World, kubeconfig: &Path, namespace: &str) -> Self {
        Self {
            binary: binary.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            moto_endpoint: world.moto.endpoint(),
            ministack_endpoint: world.ministack.endpoint(),
            dns_zones: format!("{}:{}", world.zone.name, world.zone.id),
            leader_elect: false,
        }
    }

    /// Starts the first incarnation; `name` tells replicas (and their restarts) apart.
    pub fn start(&self, name: &str) -> anyhow::Result<Operator> {
        let mut args = vec!["--namespaces", &self.namespace, "--log-level", "info"];
        args.extend(["--aws-endpoint-url", &self.moto_endpoint, "--aws-region", "us-east-1", "--dns-zones", &self.dns_zones]);
        args.extend(["--tenant-aws-endpoint-url", &self.ministack_endpoint, "--tenant-route53-endpoint-url", &self.moto_endpoint]);
        args.extend(["--tenant-aws-region", "us-east-1"]);
        if self.leader_elect {
            args.extend(["--leader-elect", "--leader-election-namespace", &self.namespace]);
        }
        Ok(Operator::new(&self.binary, &self.kubeconfig)?
            .named(name)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
            .args(args)
            .start()?)
    }
}
