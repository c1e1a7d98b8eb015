//! The `Cert` API, `acm.blockwork.dev/v1`. Field docs become `kubectl explain` text; what the
//! schema and CEL can reject (label syntax, DNS names, SAN count, an empty zone reference) is
//! rejected by the API server before anything reaches the controller or AWS.

use blockwork_runtime::ManagedStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "acm.blockwork.dev";
pub const VERSION: &str = "v1";

/// ACM's limit on subject alternative names per certificate.
pub const MAX_SANS: usize = 100;

/// An RFC 1123 label: lowercase alphanumerics and hyphens, not starting or ending with a hyphen.
pub const LABEL_PATTERN: &str = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";
/// A DNS name of RFC 1123 labels, optionally a wildcard (`*.example.com`), as ACM accepts them.
pub const DNS_NAME_PATTERN: &str = r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$";
/// The name of a Kubernetes object such as a Secret: a DNS subdomain (RFC 1123).
pub const OBJECT_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The ARN of an ACM Private CA: `arn:<partition>:acm-pca:<region>:<account>:certificate-authority/<id>`.
pub const CERTIFICATE_AUTHORITY_ARN_PATTERN: &str =
    r"^arn:aws[a-z-]*:acm-pca:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:certificate-authority/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$";

/// The ARN of an ACM certificate: `arn:<partition>:acm:<region>:<account>:certificate/<id>`.
pub const CERTIFICATE_ARN_PATTERN: &str =
    r"^arn:aws[a-z-]*:acm:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:certificate/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$";

/// An ACM certificate for `{serviceName}-{environment}.{zone}` (or `domainName`), validated
/// through DNS records in Route53. Its ARN appears in `status.certificateArn` once issued.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "acm.blockwork.dev",
    version = "v1",
    kind = "Cert",
    namespaced,
    shortname = "cert",
    status = "CertStatus",
    doc = "An ACM certificate with Route53 DNS validation, managed by Blockwork's cert controller.",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Domain","type":"string","jsonPath":".status.domainName"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.certReady"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","format":"date-time","jsonPath":".status.expirationDate"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // The ARN is published in the ConfigMap `<name>-certificate` (crate::publish), whose name
    // must fit the 253 characters of an object name.
    validation = Rule::new("size(self.metadata.name) <= 241").message("metadata.name must be at most 241 characters: the Cert publishes its ARN in the ConfigMap <name>-certificate, and an object name has at most 253")
)]
#[x_kube(validation = Rule::new("has(self.domainName) || size(self.serviceName) + size(self.environment) <= 62").message("serviceName-environment must fit one DNS label (63 characters); shorten them or set domainName"))]
#[serde(rename_all = "camelCase")]
pub struct CertSpec {
    /// Name of the service, an RFC 1123 label. With `environment` it makes the certificate's
    /// domain `{serviceName}-{environment}.{zone}` unless `domainName` is set.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"), length(min = 1, max = 63))]
    pub service_name: String,
    /// Environment of the service (e.g. dev, staging, prod), an RFC 1123 label.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"), length(min = 1, max = 63))]
    pub environment: String,
    /// The certificate's primary domain, overriding the generated one; must lie in a hosted zone
    /// granted to the namespace (its AwsIdentity's `hostedZones`, or the operator's
    /// `--dns-zones`). A leading `*.` requests a wildcard certificate. Internationalized names are
    /// given as A-labels (`xn--…`), which must decode to a label IDNA2008 allows; a label with
    /// `--` in its third and fourth characters is an A-label or refused (RFC 5891 reserves them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"),
        length(max = 253)
    )]
    pub domain_name: Option<String>,
    /// Additional domains on the same certificate (at most 100), each once (a trailing dot names
    /// the same domain) and under the same rules as `domainName`. Each must lie in a hosted zone
    /// granted to the namespace; SANs in other zones than the primary domain's get their
    /// validation records in their own zone (through that zone's role, in its account).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 100),
        inner(
            regex(pattern = r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"),
            length(max = 253)
        )
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub subject_alternative_names: Vec<String>,
    /// Delete the ACM certificate (and the validation records this operator created) when this
    /// object is deleted. Default false: the certificate is kept, as load balancers may use it.
    /// A certificate that is in use is never deleted; the status says why.
    #[serde(default)]
    pub delete_on_removal: bool,
    /// The hosted zone for the domain, by id or name, among those granted to the namespace.
    /// Default: the zone with the longest suffix of the domain, else the first granted zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_zone: Option<DnsZoneRef>,
    /// Export the certificate, with its chain and private key, into a `kubernetes.io/tls` Secret
    /// of this namespace, for workloads in the cluster; kept current across ACM's renewals. A
    /// public certificate is then requested exportable, which ACM charges at issuance and at
    /// each renewal. Exportability is fixed when a certificate is requested: setting or removing
    /// this on a Cert that has one requests a new certificate (the old one follows
    /// deleteOnRemoval). Needs export enabled at install (`blockwork run --export-secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportSpec>,
    /// Issue a private certificate from this ACM Private CA (its ARN, in the operator's region and
    /// among the CAs it is configured with, `--certificate-authorities`) instead of a public one:
    /// no DNS validation, no Route 53 record, always exportable. Changing it requests a new
    /// certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^arn:aws[a-z-]*:acm-pca:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:certificate-authority/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$"
    ))]
    pub certificate_authority_arn: Option<String>,
    /// Manage an ACM certificate that already exists (made in the console, by Terraform, by
    /// another operator, or by this Cert's manifest in another cluster) instead of requesting
    /// one. It must match this spec (names, SANs, private CA); adopting writes only Blockwork's
    /// ownership tags on it. Its deletion follows `deleteOnRemoval` (default false: kept). See
    /// docs/adopting.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<AdoptSpec>,
}

/// The existing ACM certificate a Cert adopts.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("self.certificateArn.matches('^arn:aws[a-z-]*:acm:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:certificate/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$')").message("spec.adopt.certificateArn must be the ARN of an ACM certificate, arn:<partition>:acm:<region>:<account id>:certificate/<id>; an ACM Private CA, CloudFront, IAM or other ARN names another kind of resource"))]
#[serde(rename_all = "camelCase")]
pub struct AdoptSpec {
    /// The certificate's ARN, in the account and region the namespace acts in (its AwsIdentity).
    #[schemars(length(max = 2048))]
    pub certificate_arn: String,
}

/// Where and how the certificate is exported.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportSpec {
    /// The `kubernetes.io/tls` Secret of this namespace that receives the certificate (`tls.crt`:
    /// the certificate then its chain; `tls.key`: the private key, unencrypted PKCS#8 PEM;
    /// `ca.crt`: the chain's root). A Secret of that name that this Cert did not write is never
    /// overwritten.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"), length(min = 1, max = 253))]
    pub secret_name: String,
    /// Labels and annotations for the Secret, e.g. the key rotator's source annotations
    /// (`rotator.gw.ei.telekom.de/source-secret: "true"`). Keys under `acm.blockwork.dev/` and
    /// the `app.kubernetes.io/managed-by` label are Blockwork's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_template: Option<SecretTemplate>,
}

/// Metadata given to the exported Secret.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("self.labels.all(k, !k.startsWith('acm.blockwork.dev/') && k != 'app.kubernetes.io/managed-by') && self.annotations.all(k, !k.startsWith('acm.blockwork.dev/'))").message("keys under acm.blockwork.dev/ and the app.kubernetes.io/managed-by label are Blockwork's own on the exported Secret"))]
#[serde(rename_all = "camelCase")]
pub struct SecretTemplate {
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A Route53 hosted zone, by id, name or both.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("has(self.id) || has(self.name)").message("dnsZone needs an id or a name"))]
#[serde(rename_all = "camelCase")]
pub struct DnsZoneRef {
    /// Hosted zone id, e.g. Z0123456789ABC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(/hostedzone/)?[A-Z0-9]{1,32}$"))]
    pub id: Option<String>,
    /// Zone name, e.g. example.com.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"), length(max = 253))]
    pub name: Option<String>,
}

/// The Cert operator's own lifecycle, shown in `status.state` (the runtime's machine is in
/// `status.reconcileState`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CertState {
    /// No ACM certificate yet.
    #[default]
    Pending,
    /// The certificate is requested; its DNS validation records are being created.
    Created,
    /// The validation records are in place; waiting for ACM to issue the certificate.
    Validated,
    /// Issued; the ARN is in `certificateArn`.
    Ready,
    /// Needs a person: validation timed out or failed, the certificate was revoked or expired,
    /// or AWS refused a call. Retried every few minutes and whenever the spec changes.
    Failed,
}

impl CertState {
    pub const ALL: [Self; 5] = [Self::Pending, Self::Created, Self::Validated, Self::Ready, Self::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Created => "Created",
            Self::Validated => "Validated",
            Self::Ready => "Ready",
            Self::Failed => "Failed",
        }
    }
}

/// A DNS validation record of this Cert's certificates, so the operator deletes exactly the records
/// it wrote (and no record someone else, or another certificate, put there first). A record is
/// listed, with whether it is ours, before it is written: a status write lost after the write
/// would otherwise make ours look like someone else's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationRecordStatus {
    /// The hosted zone id the record is in.
    pub zone_id: String,
    /// The CNAME's name, as ACM gave it.
    pub name: String,
    /// The CNAME's value.
    pub value: String,
    /// True when this operator created the record (it existed with another or no value before);
    /// only such records are deleted with the certificate.
    #[serde(default)]
    pub owned: bool,
    /// True while an owned record is listed but not yet written to Route53 (the next look
    /// writes it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// The Route 53 change id of the batch that wrote the record (records of several Certs may
    /// share one batch), e.g. `/change/C0123456789ABC`: `blockwork explain` asks Route 53 whether
    /// it is PENDING or INSYNC. Absent for a record this operator did not write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<String>,
}

/// The Cert operator's status fields, beside the runtime's (`reconcileState`, `message`,
/// `conditions`, `observedGeneration`, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertObservation {
    /// Pending, Created, Validated, Ready or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CertState>,
    /// The ACM certificate's ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_arn: Option<String>,
    /// Certificates this Cert requested before a change of its domain or SANs, kept until the
    /// current one is issued and then deleted (deleteOnRemoval: true; with false a replaced
    /// certificate is kept and forgotten at once). One in use stays listed until it is detached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_certificate_arns: Vec<String>,
    /// The certificate's primary domain (generated or from `spec.domainName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_name: Option<String>,
    /// When the certificate expires (ACM renews it before then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<Time>,
    /// True once the certificate is issued and usable.
    #[serde(default)]
    pub cert_ready: bool,
    /// The hosted zone of the primary domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_zone: Option<DnsZoneRef>,
    /// The AwsIdentity this Cert acts through (`operator`: the operator's own identity), as its
    /// namespace's mapping says; its certificate is in that identity's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_identity: Option<String>,
    /// ACM's managed renewal status (PENDING_AUTO_RENEWAL, PENDING_VALIDATION, SUCCESS, FAILED)
    /// while a renewal is under way or after one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal_status: Option<String>,
    /// The DNS validation records written for this certificate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_records: Vec<ValidationRecordStatus>,
    /// The certificate (its ARN, the account masked) another Blockwork object (e.g. the same
    /// manifest in another cluster) took over from this Cert: this Cert no longer acts on it, and on deletion deletes nothing in
    /// AWS. Sticky: to manage it here again, delete this Cert and apply it with `spec.adopt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership_lost: Option<String>,
    /// Who took `ownershipLost` over: the Blockwork object's `<namespace>/<name>`, as the
    /// certificate's tags named it when this Cert lost it (absent when they did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership_lost_to: Option<String>,
    /// The Secret the certificate was last exported into (`spec.export`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportStatus>,
}

/// The certificate as Blockwork last wrote it into the exported Secret. Never the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportStatus {
    /// The Secret, in the Cert's namespace.
    pub secret_name: String,
    /// The ACM certificate exported.
    pub certificate_arn: String,
    /// The exported certificate's serial number (hex bytes separated by colons, as ACM shows it);
    /// after a renewal ACM's serial differs until the Secret is exported again.
    pub serial: String,
    /// When the exported certificate expires.
    pub not_after: Time,
    /// When Blockwork last exported it.
    pub exported_at: Time,
    /// The Secret's resourceVersion after Blockwork wrote it: another means someone else changed
    /// it since (the drift policy decides).
    pub resource_version: String,
}

/// `status` of a Cert: the runtime's fields with [`CertObservation`] flattened beside them.
pub type CertStatus = ManagedStatus<CertObservation>;

/// The Cert CRD, for `blockwork crds` and tests.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Cert::crd()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn crd_has_the_issue_s_names_and_printer_columns() {
        let crd = crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.short_names, Some(vec!["cert".to_owned()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        let columns: Vec<_> = version.additional_printer_columns.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["State", "Domain", "Ready", "Expires", "Age"]);
    }

    #[test]
    fn schema_limits_sans_and_validates_labels() {
        let crd = serde_json::to_value(crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["subjectAlternativeNames"]["maxItems"], 100);
        assert_eq!(spec["properties"]["subjectAlternativeNames"]["x-kubernetes-list-type"], "set");
        assert_eq!(spec["properties"]["serviceName"]["pattern"], LABEL_PATTERN);
        assert_eq!(spec["properties"]["domainName"]["pattern"], DNS_NAME_PATTERN);
        assert_eq!(spec["properties"]["deleteOnRemoval"]["default"], false);
        assert!(spec["x-kubernetes-validations"].is_array(), "{spec}");
        assert!(spec["properties"]["dnsZone"]["x-kubernetes-validations"].is_array(), "{spec}");
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        for field in [
            "state",
            "message",
            "certificateArn",
            "domainName",
            "expirationDate",
            "certReady",
            "resolvedZone",
            "conditions",
            "observedGeneration",
            "reconcileState",
        ] {
            assert!(status.get(field).is_some(), "status.{field} missing: {status}");
        }
    }

    #[test]
    fn the_seed_s_example_manifest_parses_with_only_the_api_version_changed() {
        let cert: Cert = serde_json::from_value(serde_json::json!({
            "apiVersion": "acm.blockwork.dev/v1",
            "kind": "Cert",
            "metadata": {"name": "my-service"},
            "spec": {"serviceName": "my-service", "environment": "prod"},
        }))
        .unwrap();
        assert!(!cert.spec.delete_on_removal);
        assert_eq!(cert.spec.service_name, "my-service");
    }
}
