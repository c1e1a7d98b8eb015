//! `blockwork import`: what an AWS account already holds, printed as manifests that adopt it
//! (issue 31), ready to commit to Git. It reads AWS and nothing else (no cluster, no write
//! anywhere); printing is its only mode. What it cannot turn into a manifest it names on stderr,
//! with the reason.
//!
//! - [`certs`]: which ACM certificates become Certs, and how they are named and labelled;
//! - [`tenants`]: which distribution tenants become DistributionTenants, with which DNS;
//! - [`names`]: object names, unique per kind;
//! - [`read`]: the read calls.

pub mod certs;
pub mod names;
mod read;
pub mod tenants;

use std::sync::Arc;

use anyhow::Context as _;
use blockwork_aws::{AssumedRole, Aws, AwsMetrics, Principal};
use clap::Args;
use serde_json::Value;

use self::certs::Labels;
use self::names::Names;

/// `blockwork import`'s flags.
#[derive(Clone, Debug, Args)]
pub struct ImportArgs {
    /// The namespace of every printed object (the one you will apply them to). Its AwsIdentity
    /// (or the operator's own identity) must reach the account read here, or the objects are
    /// refused with `AdoptionRefused`.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: String,

    /// Leave ACM certificates out (they are read by default, in --aws-region).
    #[arg(long)]
    pub no_certificates: bool,

    /// Print the tenants of this multi-tenant distribution (repeat, or separate by commas).
    #[arg(long = "distribution", value_delimiter = ',', value_name = "ID")]
    pub distributions: Vec<String>,

    /// Hosted zones whose CNAMEs to the tenants' routing endpoints become the tenants'
    /// `spec.dns` (repeat, or separate by commas); read as the same identity.
    #[arg(long = "hosted-zone", value_delimiter = ',', value_name = "ID", requires = "distributions")]
    pub hosted_zones: Vec<String>,

    /// `spec.serviceName` of every Cert whose certificate lacks the --service-name-tag tag.
    #[arg(long, value_name = "LABEL")]
    pub service_name: Option<String>,
    /// A tag of the certificates whose value is their Cert's `spec.serviceName`.
    #[arg(long, value_name = "KEY")]
    pub service_name_tag: Option<String>,
    /// `spec.environment` of every Cert whose certificate lacks the --environment-tag tag.
    #[arg(long, value_name = "LABEL")]
    pub environment: Option<String>,
    /// A tag of the certificates whose value is their Cert's `spec.environment`.
    #[arg(long, value_name = "KEY")]
    pub environment_tag: Option<String>,

    /// Read as this IAM role (e.g. the `roleArn` of the namespace's AwsIdentity) instead of the
    /// credentials of the AWS default chain, which then only need sts:AssumeRole on it.
    #[arg(long, value_name = "ARN")]
    pub role_arn: Option<String>,
    /// The ExternalId the role's trust policy asks for.
    #[arg(long, value_name = "ID", requires = "role_arn")]
    pub external_id: Option<String>,

    #[command(flatten, next_help_heading = "AWS, as `blockwork run` takes it (endpoints, region, retries)")]
    pub aws: blockwork_aws::AwsArgs,
}

/// What to import, from the flags.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub namespace: String,
    pub certificates: bool,
    pub labels: Labels,
    pub distributions: Vec<String>,
    pub hosted_zones: Vec<String>,
}

impl ImportArgs {
    fn request(&self) -> Request {
        Request {
            namespace: self.namespace.clone(),
            certificates: !self.no_certificates,
            labels: Labels {
                service_name: self.service_name.clone(),
                service_name_tag: self.service_name_tag.clone(),
                environment: self.environment.clone(),
                environment_tag: self.environment_tag.clone(),
            },
            distributions: self.distributions.clone(),
            hosted_zones: self.hosted_zones.clone(),
        }
    }

    /// Who the reads act as: the role asked for, else the default chain's credentials.
    fn principal(&self) -> Principal {
        let role = self.role_arn.as_ref().map(|arn| AssumedRole {
            arn: arn.clone(),
            external_id: self.external_id.clone(),
            session_name: blockwork_aws::principal::session_name("import", &self.namespace),
        });
        match role {
            Some(role) => Principal::new("import", Some(role)),
            None => Principal::operator(),
        }
    }
}

/// The manifests (multi-document YAML) and what was left out, one line each.
#[derive(Debug, Default)]
pub struct Imported {
    pub manifests: Vec<Value>,
    pub notes: Vec<String>,
}

impl Imported {
    pub fn yaml(&self) -> anyhow::Result<String> {
        serde_saphyr::to_string_multiple(&self.manifests).context("writing the manifests as YAML")
    }
}

/// Reads what `request` asks for as `principal` and makes the manifests.
pub async fn import(aws: &Aws, principal: &Principal, request: &Request) -> anyhow::Result<Imported> {
    let reader = read::Reader { aws, principal };
    let mut names = Names::default();
    let mut imported = Imported::default();
    if request.certificates {
        let found = reader.certificates().await.context("reading ACM's certificates")?;
        let planned = certs::plan(found, &request.namespace, &request.labels, &mut names);
        imported.manifests.extend(planned.manifests);
        imported.notes.extend(planned.notes);
    }
    if !request.distributions.is_empty() {
        let groups = reader.groups().await.context("reading CloudFront's connection groups")?;
        let mut records = Vec::new();
        for zone in &request.hosted_zones {
            records.extend(reader.cnames(zone).await.with_context(|| format!("reading the records of hosted zone {zone}"))?);
        }
        let mut found = Vec::new();
        for distribution in &request.distributions {
            found
                .extend(reader.tenants(distribution).await.with_context(|| format!("reading the tenants of distribution {distribution}"))?);
        }
        let planned = tenants::plan(found, &request.hosted_zones, &records, &groups, &request.namespace, &mut names);
        imported.manifests.extend(planned.manifests);
        imported.notes.extend(planned.notes);
    }
    Ok(imported)
}

/// `blockwork import`: prints the notes on stderr, returns the manifests to print on stdout.
pub async fn command(args: &ImportArgs) -> anyhow::Result<String> {
    let (config, _deprecations) = args.aws.config().context("the AWS flags")?;
    let aws = Aws::new(config, Arc::new(AwsMetrics::register(&mut Default::default(), &[])));
    let imported = import(&aws, &args.principal(), &args.request()).await?;
    for note in &imported.notes {
        eprintln!("{note}");
    }
    eprintln!(
        "{} object(s) printed, {} left out",
        imported.manifests.len(),
        imported.notes.iter().filter(|n| n.starts_with("skipped")).count()
    );
    imported.yaml()
}
