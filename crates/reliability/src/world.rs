//! Everything a suite runs against: the shared test control plane with Blockwork's CRDs, a moto
//! and a MiniStack of the suite's own that answer as a distinctive account (so the leak scan can
//! look for it), a fault proxy in front of each, and the AWS objects the workload needs — a
//! hosted zone with foreign records in it, a tenant-only distribution, a connection group and a
//! wildcard certificate for the tenants.

use std::collections::BTreeMap;

use anyhow::{Context as _, anyhow};
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
use blockwork_testenv::aws::{hosted_zone, request_certificate, tenant_only_distribution};
use blockwork_testenv::control_plane::ControlPlane;
use blockwork_testenv::emulators::Emulators;
use blockwork_testenv::fault_proxy::FaultProxy;

/// The account the suites' emulators answer as: no test data, emulator default or example uses it.
pub const ACCOUNT: &str = "604827193516";
/// The access key the operator signs with: the leak scan looks for it too.
pub const ACCESS_KEY_ID: &str = "AKIARELIABILITY7TEST";
pub const SECRET_ACCESS_KEY: &str = "reliability/campaign+secret/0123456789abcdefghij";

/// A record someone else wrote in the zone; the operator must never touch it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub name: String,
    pub kind: String,
    pub value: String,
}

pub struct World {
    pub emulators: Emulators,
    /// Between the operator and moto (ACM, Route53, STS).
    pub moto: FaultProxy,
    /// Between the operator and MiniStack (CloudFront, its ACM).
    pub ministack: FaultProxy,
    pub acm: aws_sdk_acm::Client,
    pub route53: aws_sdk_route53::Client,
    pub cloudfront: aws_sdk_cloudfront::Client,
    pub zone: Zone,
    pub distribution_id: String,
    pub connection_group_id: String,
    /// A `*.<zone>` certificate in MiniStack's ACM, for the tenants.
    pub tenant_certificate: String,
    pub foreign_records: Vec<Record>,
}

#[derive(Clone, Debug)]
pub struct Zone {
    pub name: String,
    pub id: String,
}

impl World {
    /// Starts the emulators and proxies, installs the CRDs in `plane` and creates the AWS objects;
    /// `domain` names the hosted zone (unique per suite run, e.g. from its namespace).
    pub async fn start(plane: &ControlPlane, domain: &str) -> anyhow::Result<Self> {
        let crds: Vec<_> = blockwork::controllers::registered().iter().flat_map(|c| (c.crds)()).collect();
        plane.install_crds(&crds).await.context("installing the CRDs")?;
        let emulators = Emulators::for_account(ACCOUNT).await.context("the emulators")?;
        let moto = FaultProxy::start(&emulators.moto.endpoint()).await.context("the moto proxy")?;
        let ministack = FaultProxy::start(&emulators.ministack.endpoint()).await.context("the MiniStack proxy")?;

        let moto_config = sdk_config(&emulators.moto.endpoint()).await;
        let ministack_config = sdk_config(&emulators.ministack.endpoint()).await;
        let acm = aws_sdk_acm::Client::new(&moto_config);
        let route53 = aws_sdk_route53::Client::new(&moto_config);
        let cloudfront = aws_sdk_cloudfront::Client::new(&ministack_config);

        let zone = Zone { name: domain.to_owned(), id: hosted_zone(&route53, domain).await };
        let tenant_acm = aws_sdk_acm::Client::new(&ministack_config);
        let tenant_certificate = request_certificate(&tenant_acm, &[format!("*.{domain}")]).await;
        let group = cloudfront
            .create_connection_group()
            .name(domain.replace('.', "-"))
            .enabled(true)
            .send()
            .await
            .context("CreateConnectionGroup")?;
        let connection_group_id =
            group.connection_group().and_then(|g| g.id()).ok_or_else(|| anyhow!("no connection group id"))?.to_owned();
        let distribution_id = tenant_only_distribution(&cloudfront, domain, None, &[]).await;

        let mut world = Self {
            emulators,
            moto,
            ministack,
            acm,
            route53,
            cloudfront,
            zone,
            distribution_id,
            connection_group_id,
            tenant_certificate,
            foreign_records: Vec::new(),
        };
        world.seed_foreign_records().await?;
        Ok(world)
    }

    /// Records the operator did not write, some shaped like its own: a validation-style CNAME, a
    /// CNAME and a TXT next to the tenants' names, an A record.
    async fn seed_foreign_records(&mut self) -> anyhow::Result<()> {
        let zone = &self.zone.name;
        let records = vec![
            Record { name: format!("_0a1b2c3d4e5f.foreign.{zone}."), kind: "CNAME".into(), value: "_9f8e7d.acm-validations.aws.".into() },
            Record { name: format!("foreign-www.{zone}."), kind: "CNAME".into(), value: "elsewhere.example.net.".into() },
            Record { name: format!("foreign-txt.{zone}."), kind: "TXT".into(), value: "\"owned by someone else\"".into() },
            Record { name: format!("foreign-a.{zone}."), kind: "A".into(), value: "192.0.2.10".into() },
            Record { name: format!("t0-foreign.{zone}."), kind: "CNAME".into(), value: "d111111abcdef8.cloudfront.net.".into() },
        ];
        let changes: Vec<Change> = records
            .iter()
            .map(|r| {
                let set = ResourceRecordSet::builder()
                    .name(&r.name)
                    .r#type(RrType::from(r.kind.as_str()))
                    .ttl(300)
                    .resource_records(ResourceRecord::builder().value(&r.value).build()?)
                    .build()?;
                Change::builder().action(ChangeAction::Create).resource_record_set(set).build()
            })
            .collect::<Result<_, _>>()?;
        self.route53
            .change_resource_record_sets()
            .hosted_zone_id(&self.zone.id)
            .change_batch(ChangeBatch::builder().set_changes(Some(changes)).build()?)
            .send()
            .await
            .context("seeding foreign records")?;
        self.foreign_records = records;
        Ok(())
    }

    /// Every record of the zone but its SOA and NS.
    pub async fn records(&self) -> anyhow::Result<Vec<Record>> {
        let mut records = Vec::new();
        let mut start: Option<(String, RrType)> = None;
        loop {
            let mut request = self.route53.list_resource_record_sets().hosted_zone_id(&self.zone.id);
            if let Some((name, kind)) = &start {
                request = request.start_record_name(name).start_record_type(kind.clone());
            }
            let page = request.send().await.context("ListResourceRecordSets")?;
            for set in page.resource_record_sets() {
                if matches!(set.r#type(), RrType::Soa | RrType::Ns) {
                    continue;
                }
                let value = set.resource_records().iter().map(|r| r.value()).collect::<Vec<_>>().join(",");
                records.push(Record { name: set.name().to_owned(), kind: set.r#type().as_str().to_owned(), value });
            }
            match (page.is_truncated(), page.next_record_name(), page.next_record_type()) {
                (true, Some(name), Some(kind)) => start = Some((name.to_owned(), kind.clone())),
                _ => break,
            }
        }
        records.sort();
        Ok(records)
    }

    /// Every ACM certificate in moto, with its owner UID tag (if any).
    pub async fn certificates(&self) -> anyhow::Result<Vec<(String, Option<String>)>> {
        let mut arns = Vec::new();
        let mut pages = self.acm.list_certificates().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.context("ListCertificates")?;
            arns.extend(page.certificate_summary_list().iter().filter_map(|s| s.certificate_arn().map(str::to_owned)));
        }
        let mut certificates = Vec::new();
        for arn in arns {
            // moto is shared with the other tests running: a certificate one of them deleted
            // since the listing is not there to own anything.
            let tags = match self.acm.list_tags_for_certificate().certificate_arn(&arn).send().await {
                Ok(tags) => tags,
                Err(error) if error.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => continue,
                Err(error) => return Err(anyhow::Error::new(error).context("ListTagsForCertificate")),
            };
            let owner = tags.tags().iter().find(|t| t.key() == "blockwork.dev/owner-uid").and_then(|t| t.value()).map(str::to_owned);
            certificates.push((arn, owner));
        }
        Ok(certificates)
    }

    /// The names (primary and alternative) of a certificate in moto, sorted.
    pub async fn certificate_names(&self, arn: &str) -> anyhow::Result<Vec<String>> {
        let described = self.acm.describe_certificate().certificate_arn(arn).send().await.context("DescribeCertificate")?;
        let mut names = described.certificate().map(|c| c.subject_alternative_names().to_vec()).unwrap_or_default();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Every CloudFront tenant in MiniStack by name, with its domains (sorted) and how many
    /// tenants carry that name.
    pub async fn tenants(&self) -> anyhow::Result<BTreeMap<String, (Vec<String>, usize)>> {
        let mut tenants: BTreeMap<String, (Vec<String>, usize)> = BTreeMap::new();
        let mut marker: Option<String> = None;
        loop {
            let page =
                self.cloudfront.list_distribution_tenants().set_marker(marker.clone()).send().await.context("ListDistributionTenants")?;
            for tenant in page.distribution_tenant_list() {
                let mut domains: Vec<String> = tenant.domains().iter().map(|d| d.domain().to_owned()).collect();
                domains.sort();
                let entry = tenants.entry(tenant.name().to_owned()).or_insert((domains, 0));
                entry.1 += 1;
            }
            match page.next_marker() {
                Some(next) if !next.is_empty() && Some(next) != marker.as_deref() => marker = Some(next.to_owned()),
                _ => break,
            }
        }
        Ok(tenants)
    }
}

/// An SDK configuration for a checker that talks to an emulator directly.
pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_acm::config::Credentials::new("checker", "checker", None, None, "reliability"))
        .load()
        .await
}
