//! The `AwsIdentity` API, `aws.blockwork.dev/v1alpha1`: cluster-scoped, written by the platform
//! team (ADR 0014). Field docs become `kubectl explain` text; what the object alone shows (ARN,
//! ExternalId and name syntax, an ExternalId without a role, the reserved name) is refused by the
//! schema and CEL; what needs the other mappings (a namespace listed twice, a zone reached
//! through two accounts) by the admission webhook ([`crate::validate`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "aws.blockwork.dev";
pub const VERSION: &str = "v1alpha1";

/// An IAM role ARN in any partition: what STS AssumeRole takes.
pub const ROLE_ARN_PATTERN: &str = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$";
/// STS's ExternalId: characters of `[\w+=,.@:/-]` (2–1224 of them: a length rule, as the API
/// server's regular expressions repeat at most 1,000 times).
pub const EXTERNAL_ID_PATTERN: &str = r"^[A-Za-z0-9_+=,.@:/-]+$";
/// A namespace name (an RFC 1123 label).
pub const NAMESPACE_PATTERN: &str = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";
/// A DNS name without a wildcard, optionally absolute.
pub const NAME_PATTERN: &str = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$";
/// A Route 53 hosted zone id.
pub const ZONE_ID_PATTERN: &str = r"^(/hostedzone/)?[A-Z0-9]{1,32}$";
/// The most namespaces one mapping lists, and the most zones it grants.
pub const MAX_NAMESPACES: usize = 1000;
pub const MAX_ZONES: usize = 100;

/// Which namespaces act in AWS through which role, and which Route 53 hosted zones (and names in
/// them) their Certs and DistributionTenants may write records into. A namespace is listed by at
/// most one AwsIdentity. Cluster-scoped: only the platform team (who may write cluster-scoped
/// objects) grants an account.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "aws.blockwork.dev",
    version = "v1alpha1",
    kind = "AwsIdentity",
    plural = "awsidentities",
    shortname = "awsid",
    status = "AwsIdentityStatus",
    doc = "Which namespaces act in AWS through which role, and which hosted zones they may use (Blockwork, ADR 0014).",
    printcolumn = r#"{"name":"Namespaces","type":"string","jsonPath":".spec.namespaces"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name != 'operator'").message("metadata.name operator is reserved: it names the operator's own identity in metrics and messages"),
    validation = Rule::new("size(self.metadata.name) <= 63").message("metadata.name must be at most 63 characters: it is a metric label and part of STS session names")
)]
#[x_kube(validation = Rule::new("!has(self.externalId) || has(self.roleArn)").message("spec.externalId needs spec.roleArn: only an assumed role is asked for an ExternalId"))]
#[serde(rename_all = "camelCase")]
pub struct AwsIdentitySpec {
    /// The namespaces that act through this identity, by exact name (at most 1,000). A namespace
    /// is listed by one AwsIdentity at most: the admission webhook refuses a second.
    #[schemars(length(min = 1, max = 1000), inner(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"), length(max = 63)))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub namespaces: Vec<String>,
    /// The IAM role their calls are made with (`arn:aws:iam::ACCOUNT:role/NAME`), which must
    /// trust the operator's own role. Absent: the operator's own identity (its pod's role),
    /// e.g. to grant a namespace some zones of the operator's account only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"), length(max = 2048))]
    pub role_arn: Option<String>,
    /// The ExternalId the role's trust policy asks for (`sts:ExternalId`), 2–1224 characters of
    /// letters, digits and `_+=,.@:/-`. Needs `roleArn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_+=,.@:/-]+$"), length(min = 2, max = 1224))]
    pub external_id: Option<String>,
    /// The Route 53 hosted zones the namespaces' Certs (validation records) and
    /// DistributionTenants (CNAMEs) may write into, at most 100. None: they may write no record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub hosted_zones: Vec<HostedZoneGrant>,
}

/// A hosted zone granted to the namespaces, and how it is reached.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.externalId) || has(self.roleArn)").message("hostedZones[].externalId needs hostedZones[].roleArn"))]
#[serde(rename_all = "camelCase")]
pub struct HostedZoneGrant {
    /// The hosted zone id, e.g. Z0123456789ABC.
    #[schemars(regex(pattern = r"^(/hostedzone/)?[A-Z0-9]{1,32}$"))]
    pub id: String,
    /// The zone's name, e.g. example.com: Certs find their zone by it.
    #[schemars(regex(pattern = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"), length(max = 253))]
    pub name: String,
    /// The role that reaches the zone when it is in another account than `spec.roleArn`'s (e.g.
    /// a central DNS account): records go there through it. Absent: the identity's own role (or,
    /// without one, the operator's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"), length(max = 2048))]
    pub role_arn: Option<String>,
    /// The ExternalId `roleArn`'s trust policy asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_+=,.@:/-]+$"), length(min = 2, max = 1224))]
    pub external_id: Option<String>,
    /// Only these names of the zone, and the names below each (at most 100): a zone shared by
    /// teams, each granted its part. Empty: the whole zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 100),
        inner(regex(pattern = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"), length(max = 253))
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub domains: Vec<String>,
}

/// What the operator found of the mapping: whether it is valid among the others and its roles
/// can be assumed (the condition `Ready`), for the generation it looked at. It names no account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsIdentityStatus {
    /// The generation of the spec the conditions are about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when the mapping is valid among the others and every role it names was
    /// assumed (with its ExternalId); False with the reason otherwise (`InvalidMapping`,
    /// `AssumeRoleFailed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The AwsIdentity CRD, for `blockwork crds` and tests.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    AwsIdentity::crd()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_crd_is_cluster_scoped_with_a_status_short_name_and_printer_columns() {
        let crd = crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.plural, "awsidentities");
        assert_eq!(crd.spec.names.short_names, Some(vec!["awsid".to_owned()]));
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let columns: Vec<_> = version.additional_printer_columns.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, ["Namespaces", "Ready", "Reason", "Age"]);
    }

    #[test]
    fn the_schema_bounds_every_list_and_checks_every_name() {
        let crd = serde_json::to_value(crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["namespaces"]["maxItems"], MAX_NAMESPACES);
        assert_eq!(spec["properties"]["namespaces"]["x-kubernetes-list-type"], "set");
        assert_eq!(spec["properties"]["namespaces"]["items"]["pattern"], NAMESPACE_PATTERN);
        assert_eq!(spec["properties"]["roleArn"]["pattern"], ROLE_ARN_PATTERN);
        assert_eq!(spec["properties"]["externalId"]["pattern"], EXTERNAL_ID_PATTERN);
        let zone = &spec["properties"]["hostedZones"];
        assert_eq!(zone["maxItems"], MAX_ZONES);
        assert_eq!(zone["items"]["properties"]["id"]["pattern"], ZONE_ID_PATTERN);
        assert_eq!(zone["items"]["properties"]["name"]["pattern"], NAME_PATTERN);
        assert_eq!(zone["items"]["properties"]["domains"]["items"]["pattern"], NAME_PATTERN);
        assert!(spec["x-kubernetes-validations"].is_array(), "{spec}");
        assert!(zone["items"]["x-kubernetes-validations"].is_array(), "{zone}");
    }
}
