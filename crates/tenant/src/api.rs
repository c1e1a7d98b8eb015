//! The `DistributionTenant` API, `cloudfront.blockwork.dev/v1alpha1`. Field docs become
//! `kubectl explain` text; what the schema and CEL can reject (the tenant name, TTL bounds, the
//! enums) is rejected by the API server before anything reaches the controller or AWS.

use blockwork_runtime::ManagedStatus;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "cloudfront.blockwork.dev";
pub const VERSION: &str = "v1alpha1";

/// Condition types beside the runtime's `Ready` and `Synced`.
pub const CERTIFICATE_READY: &str = "CertificateReady";
pub const DNS_READY: &str = "DNSReady";

/// A CloudFront distribution tenant of a multi-tenant distribution. `metadata.name` is the
/// tenant's name in CloudFront.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cloudfront.blockwork.dev",
    version = "v1alpha1",
    kind = "DistributionTenant",
    namespaced,
    shortname = "dt",
    status = "DistributionTenantStatus",
    validation = Rule::new("!has(self.spec.managedCertificateRequest) || !has(self.spec.customizations) || !has(self.spec.customizations.certificate) || !has(self.spec.customizations.certificate.certRef)").message("spec.customizations.certificate.certRef and spec.managedCertificateRequest exclude each other: the tenant's certificate is a Cert's or one CloudFront manages"),
    validation = Rule::new("size(self.metadata.name) >= 3 && size(self.metadata.name) <= 128 && self.metadata.name.matches('^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$')").message("metadata.name is the CloudFront tenant name: 3-128 characters, lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"),
    printcolumn = r#"{"name":"Distribution","type":"string","jsonPath":".spec.distributionId"}"#,
    printcolumn = r#"{"name":"Tenant ID","type":"string","jsonPath":".status.id"}"#,
    printcolumn = r#"{"name":"AWS Status","type":"string","jsonPath":".status.distributionTenantStatus"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.reconcileState","priority":1}"#,
    printcolumn = r#"{"name":"Cert","type":"string","jsonPath":".spec.customizations.certificate.certRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DistributionTenantSpec {
    /// The multi-tenant distribution this tenant belongs to (e.g. `E1ABCDEF2GHIJ`).
    #[schemars(length(min = 1, max = MAX_ID_LENGTH))]
    pub distribution_id: String,
    /// The tenant's domains, at most 100 (CloudFront's quota of alternate domain names). Order
    /// does not matter; each at most once (a trailing dot names the same domain). Wildcards
    /// (`*.example.com`) are allowed.
    #[schemars(length(min = 1, max = MAX_DOMAINS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["domain".to_owned()]))]
    pub domains: Vec<DomainName>,
    /// Whether the tenant serves traffic. Absent means enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The connection group routing the tenant's traffic; absent: the account's default group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_ID_LENGTH))]
    pub connection_group_id: Option<String>,
    /// Values for the distribution's tenant parameters, each at most once, at most 100. Order
    /// does not matter. Every parameter the distribution requires without a default must be
    /// given, and only parameters the distribution declares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PARAMETERS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".to_owned()]))]
    pub parameters: Vec<Parameter>,
    /// Per-tenant overrides of the distribution's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customizations: Option<Customizations>,
    /// Asks CloudFront to request and manage the tenant's certificate. Once issued, the operator
    /// writes its ARN into `customizations.certificate.arn` and then attaches it to the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_certificate_request: Option<ManagedCertificateRequest>,
    /// DNS records (CNAMEs to the routing endpoint) managed for the tenant's domains. Absent: DNS
    /// is not managed and `DNSReady` is True with reason `DNSNotConfigured`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(ROLE_ARN_RULE).message("dns.assumeRoleArn must be an IAM role ARN: arn:aws:iam::ACCOUNT:role/NAME"))]
    pub dns: Option<DnsConfig>,
    /// How external changes to the tenant are handled: `enforce` (repair), `report` (set
    /// `Synced=False` with reason `DriftDetected`) or `suspend` (only record
    /// `status.driftDetected`). Absent: the operator's `--drift-policy`. The annotation
    /// `blockwork.dev/drift-policy`, when present, overrides this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<DriftPolicyName>,
    /// Takes over an existing CloudFront tenant instead of creating one (see docs/adopting.md):
    /// the tenant must be in the account the namespace acts in, and have this object's name,
    /// distribution and domains; other settings must match too unless the drift policy is
    /// `enforce`, which corrects them once adopted. Adopting writes only the ownership tags.
    /// Deleting the object afterwards follows `blockwork.dev/deletion-policy` (`Orphan` keeps
    /// the tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<TenantAdoption>,
}

/// Which existing tenant a `DistributionTenant` takes over.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.tenantId == oldSelf.tenantId").message("spec.adopt.tenantId cannot change: an object adopts one tenant; remove spec.adopt, or delete the object and adopt the other tenant with a new one"))]
#[serde(rename_all = "camelCase")]
pub struct TenantAdoption {
    /// The id CloudFront gives the tenant (`dt_…`; `aws cloudfront list-distribution-tenants`
    /// shows it), not its name or ARN.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"), length(min = 1, max = MAX_ID_LENGTH))]
    pub tenant_id: String,
}

/// The longest AWS identifier (distribution, connection group, hosted zone) a spec may hold: far
/// above any real one. Every string and list of the spec is bounded, so that no object can be
/// too big to check, compare or send to AWS (the AWS SDK refuses, with a panic, to build a
/// request whose URI is too long); the controller checks the same bounds for objects stored
/// before them ([`crate::validate`]).
pub const MAX_ID_LENGTH: usize = 128;
/// The longest ARN (AWS's limit for ARNs in IAM policies).
pub const MAX_ARN_LENGTH: usize = 2048;
/// The most domains of a tenant: CloudFront's default quota of alternate domain names.
pub const MAX_DOMAINS: usize = 100;
/// The most parameters of a tenant.
pub const MAX_PARAMETERS: usize = 100;
/// The longest parameter name.
pub const MAX_PARAMETER_NAME: usize = 128;
/// The longest parameter value (CloudFront's limit).
pub const MAX_PARAMETER_VALUE: usize = 256;

/// `dns.assumeRoleArn`, when set, names an IAM role (any partition): what STS AssumeRole takes.
pub const ROLE_ARN_RULE: &str =
    r"!has(self.assumeRoleArn) || self.assumeRoleArn.matches('^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$')";

/// One domain of the tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainName {
    /// A fully qualified domain name of lowercase DNS labels, optionally a wildcard
    /// (`*.example.com`) and absolute (`www.example.com.`, the same domain as without the dot).
    /// Internationalized names are given as A-labels (`xn--…`), which must decode to a label
    /// IDNA2008 allows; a label with `--` in its third and fourth characters is an A-label or
    /// refused (RFC 5891 reserves them).
    #[schemars(regex(pattern = blockwork_aws::dns_name::PATTERN), length(max = 254))]
    pub domain: String,
}

/// A value for one of the distribution's tenant parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct Parameter {
    /// The parameter's name, as declared by the distribution.
    #[schemars(length(min = 1, max = MAX_PARAMETER_NAME))]
    pub name: String,
    /// The parameter's value (CloudFront takes 1 to 256 characters).
    #[schemars(length(min = 1, max = MAX_PARAMETER_VALUE))]
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Customizations {
    /// The tenant's own certificate. Must be an ACM certificate in us-east-1 whose names cover
    /// every domain of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateRef>,
    /// Overrides or disables the distribution's AWS WAF web ACL for this tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_acl: Option<WebAclCustomization>,
    /// Restricts the countries the tenant serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo_restrictions: Option<GeoRestrictions>,
}

/// The tenant's certificate: an ACM certificate by its ARN, or the certificate of a Cert of the
/// tenant's namespace, followed when the Cert replaces it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.arn) != has(self.certRef)").message("spec.customizations.certificate needs exactly one of arn (an ACM certificate's ARN) and certRef (a Cert of this namespace)"))]
#[serde(rename_all = "camelCase")]
pub struct CertificateRef {
    /// The ACM certificate's ARN (`arn:aws:acm:us-east-1:…`). Exclusive with `certRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/.+$"), length(max = MAX_ARN_LENGTH))]
    pub arn: Option<String>,
    /// A Cert of this namespace whose certificate the tenant uses: the tenant waits until the
    /// Cert is Ready, and follows its certificate when the Cert replaces it (a name added). The
    /// Cert must be in us-east-1 and its names must cover every domain of the tenant (CloudFront's
    /// rules). While the tenant uses its certificate, the Cert's deletion waits for it. Exclusive
    /// with `arn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_ref: Option<CertRef>,
}

/// A Cert of the tenant's namespace (only a name: another namespace's Cert cannot be named).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CertRef {
    /// The Cert's name.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"), length(min = 1, max = 253))]
    pub name: String,
}

impl DistributionTenantSpec {
    /// The ARN of the certificate the spec names: `customizations.certificate.arn` (on the live
    /// path, the one a `certRef` resolved to).
    pub fn certificate_arn(&self) -> Option<&str> {
        self.certificate().and_then(|c| c.arn.as_deref())
    }

    /// The Cert `customizations.certificate.certRef` names, if any.
    pub fn cert_ref(&self) -> Option<&str> {
        self.certificate().and_then(|c| c.cert_ref.as_ref()).map(|r| r.name.as_str())
    }

    fn certificate(&self) -> Option<&CertificateRef> {
        self.customizations.as_ref().and_then(|c| c.certificate.as_ref())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.action != 'override' || has(self.arn)").message("customizations.webAcl.arn is required with action override"))]
#[x_kube(validation = Rule::new("self.action == 'override' || !has(self.arn)").message("customizations.webAcl.arn is used only with action override; remove it to disable the web ACL"))]
pub struct WebAclCustomization {
    /// `override` uses `arn` instead of the distribution's web ACL; `disable` removes it.
    pub action: WebAclAction,
    /// The web ACL's ARN (with action `override`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_ARN_LENGTH))]
    pub arn: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WebAclAction {
    #[default]
    Override,
    Disable,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.restrictionType == 'none' || (has(self.locations) && size(self.locations) > 0)").message("geoRestrictions.locations must name at least one country for a whitelist or blacklist"))]
#[x_kube(validation = Rule::new("self.restrictionType != 'none' || !has(self.locations) || size(self.locations) == 0").message("geoRestrictions.locations must be empty with restrictionType none"))]
#[serde(rename_all = "camelCase")]
pub struct GeoRestrictions {
    /// `whitelist` serves only `locations`, `blacklist` all but them, `none` everyone.
    pub restriction_type: GeoRestrictionType,
    /// ISO 3166-1 alpha-2 country codes in capitals (`DE`, `FR`), each at most once. Order does
    /// not matter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "country_codes")]
    pub locations: Vec<String>,
}

/// The schema of geo-restriction locations: a set of ISO 3166-1 alpha-2 codes (the `isocountry`
/// crate's list), so that the API server refuses `UK` or `XX` naming the field.
fn country_codes(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let codes: Vec<&str> = isocountry::CountryCode::iter().map(isocountry::CountryCode::alpha2).collect();
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "string", "enum": codes },
        "maxItems": codes.len(),
        "x-kubernetes-list-type": "set",
    })
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GeoRestrictionType {
    Whitelist,
    Blacklist,
    #[default]
    None,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedCertificateRequest {
    /// Who serves the HTTP validation token: `cloudfront` (needs the CNAMEs to resolve to
    /// CloudFront first) or `self-hosted` (your origin serves it).
    pub validation_token_host: ValidationTokenHost,
    /// The certificate's primary domain, one of `domains`; absent: CloudFront picks one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 254))]
    pub primary_domain_name: Option<String>,
    /// Whether the certificate is logged to certificate transparency logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_transparency_logging_preference: Option<TransparencyPreference>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ValidationTokenHost {
    #[default]
    Cloudfront,
    SelfHosted,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TransparencyPreference {
    #[default]
    Enabled,
    Disabled,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsConfig {
    /// The DNS service holding the zone. Only `route53`.
    pub provider: DnsProvider,
    /// The Route53 hosted zone the CNAMEs are written to: one the namespace's AwsIdentity grants
    /// (or, for a namespace the operator acts for with its own identity, one of its account).
    #[schemars(length(min = 1, max = MAX_ID_LENGTH))]
    pub hosted_zone_id: String,
    /// The IAM role (`arn:aws:iam::ACCOUNT:role/NAME`) that reaches the zone when it is in another
    /// account. Optional: the namespace's AwsIdentity says how each zone it grants is reached; when
    /// given it must be that role, or the tenant is refused (naming this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assume_role_arn: Option<String>,
    /// The records' TTL in seconds, 60–172800.
    #[serde(default = "default_ttl")]
    #[schemars(range(min = 60, max = 172800))]
    pub ttl: i64,
}

/// Seed 001's default record TTL.
pub const DEFAULT_TTL: i64 = 300;

fn default_ttl() -> i64 {
    DEFAULT_TTL
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DnsProvider {
    #[default]
    Route53,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DriftPolicyName {
    Enforce,
    Report,
    Suspend,
}

impl From<DriftPolicyName> for blockwork_runtime::DriftPolicy {
    fn from(name: DriftPolicyName) -> Self {
        match name {
            DriftPolicyName::Enforce => Self::Enforce,
            DriftPolicyName::Report => Self::Report,
            DriftPolicyName::Suspend => Self::Suspend,
        }
    }
}

pub type DistributionTenantStatus = ManagedStatus<TenantObservation>;

/// The operator's own status fields, beside the runtime's (`reconcileState`, `conditions` with
/// `Ready` and `Synced`, `observedGeneration`, `driftDetected`, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantObservation {
    /// The tenant's CloudFront id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tenant's ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    /// The tenant's ETag when last read, the `IfMatch` of the next update or delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<String>,
    /// CloudFront's status of the tenant: `InProgress` or `Deployed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution_tenant_status: Option<String>,
    /// The Route53 change id of the last record change (DNS management only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_change_id: Option<String>,
    /// The domains whose records the change `dnsChangeId` upserted: the records a new tenant
    /// waits for. (`dnsRecords` also holds records that may have been written.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_change_domains: Vec<String>,
    /// The CNAME target of the tenant's domains: the connection group's routing endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_target: Option<String>,
    /// The managed certificate's ARN, once CloudFront requested it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_arn: Option<String>,
    /// The ACM certificate the tenant serves in CloudFront, as last read or written: a Cert whose
    /// certificate it is keeps it (and is not deleted) until the tenant lets go of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_in_use: Option<String>,
    /// The managed certificate's status: `pending-validation`, `issued`, `inactive`, `expired`,
    /// `validation-timed-out`, `revoked` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_certificate_status: Option<String>,
    /// The domains whose CNAME records this operator wrote (DNS management only): the records
    /// it may delete, once a domain leaves the spec or the object is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_records: Vec<String>,
    /// The AwsIdentity this tenant acts through (`operator`: the operator's own identity), as
    /// its namespace's mapping says; the tenant is in that identity's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_identity: Option<String>,
    /// The domains whose CNAME records an adopted tenant had when it was adopted (DNS management
    /// only): shared with whoever wrote them, so never deleted by this object, even when it
    /// writes them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_shared: Vec<String>,
    /// Set once this object took its tenant over through `spec.adopt` (rather than creating it):
    /// from then on it is the tenant's owner, like one it created.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// Set once another object (in another cluster, say) took this object's tenant over: this
    /// object no longer changes or deletes the tenant or its records, and deleting it deletes
    /// nothing in AWS. For good: see docs/adopting.md to take the tenant back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ownership_lost: bool,
}

/// The CustomResourceDefinition, for `blockwork crds`.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    DistributionTenant::crd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_has_short_name_printer_columns_and_the_name_rule() {
        let crd = crd();
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["dt".to_owned()][..]));
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["Distribution", "Tenant ID", "AWS Status", "Ready", "State", "Cert", "Age"]);
        let schema = serde_json::to_string(&version.schema).expect("serializes");
        assert!(schema.contains("self.metadata.name.matches"), "{schema}");
    }

    #[test]
    fn dns_ttl_defaults_to_300_when_omitted() {
        let dns: DnsConfig = serde_json::from_value(serde_json::json!({"provider": "route53", "hostedZoneId": "Z1"})).expect("parses");
        assert_eq!(dns.ttl, DEFAULT_TTL);
    }
}
