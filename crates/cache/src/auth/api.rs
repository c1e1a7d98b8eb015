//! The `spec.auth` and `status.auth` / `status.binding` of a Cache (both versions): who may talk
//! to the servers, and where an application finds what it needs to.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shortest `rotationPeriod`: a rotation takes the Secret propagation and the grace period.
pub const MIN_ROTATION_PERIOD: &str = "1h";
/// The shortest `gracePeriod`: clients re-read a mounted Secret after the kubelet updates it,
/// which takes up to a minute with its default sync period.
pub const MIN_GRACE_PERIOD: &str = "1m";
pub const DEFAULT_GRACE_PERIOD: &str = "10m";

/// Authentication: clients give a user name and password, kept in a Secret Blockwork owns (or
/// the user's own, `secretRef`), published to applications in the binding Secret
/// (`status.binding.name`). Without `spec.auth`, a new Cache authenticates its clients; one that
/// served without a password before Blockwork knew authentication keeps doing so until set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.enabled || (!has(self.secretRef) && !has(self.rotationPeriod))").message("auth.secretRef and auth.rotationPeriod need auth.enabled: a Cache without authentication has no password"))]
#[x_kube(validation = Rule::new("!has(self.secretRef) || !has(self.rotationPeriod)").message("auth.rotationPeriod rotates a password Blockwork generates; with auth.secretRef the password is yours: change it in that Secret to rotate it"))]
#[x_kube(validation = Rule::new("!has(self.rotationPeriod) || duration(self.rotationPeriod) > duration(self.gracePeriod)").message("auth.rotationPeriod must be longer than auth.gracePeriod"))]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Clients must authenticate (default true). `false` serves every client without a
    /// password: anyone who reaches the Service reads and writes everything.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// With `false`, passwords are issued (ACL users, the binding Secret) but clients without
    /// one are still served: for moving the clients of a Cache that served without a password
    /// to authentication without a failed request. Redis and valkey only (default true).
    #[serde(default = "default_true")]
    pub required: bool,
    /// The application's password, from key `password` of this Secret in the Cache's namespace
    /// (8 to 256 printable characters, no spaces); changing it there rotates it. Without it,
    /// Blockwork generates the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Rotate the generated password this often (`720h`; at least 1h). Without it, a password
    /// rotates on demand only: `blockwork rotate cache/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(h|m|s))+$"), length(max = 16))]
    #[x_kube(validation = Rule::new(format!("duration(self) >= duration('{MIN_ROTATION_PERIOD}')")).message("auth.rotationPeriod must be at least 1h"))]
    pub rotation_period: Option<String>,
    /// How long the previous password keeps working once the binding Secret publishes the new
    /// one: the time clients have to read it (default 10m, at least 1m).
    #[serde(default = "default_grace_period")]
    #[schemars(regex(pattern = r"^([0-9]+(h|m|s))+$"), length(max = 16))]
    #[x_kube(validation = Rule::new(format!("duration(self) >= duration('{MIN_GRACE_PERIOD}')")).message("auth.gracePeriod must be at least 1m: clients read a mounted Secret only after the kubelet updates it"))]
    pub grace_period: String,
}

impl Default for Auth {
    fn default() -> Self {
        Self { enabled: true, required: true, secret_ref: None, rotation_period: None, grace_period: default_grace_period() }
    }
}

/// A Secret in the Cache's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"), length(min = 1, max = 253))]
    pub name: String,
}

fn default_true() -> bool {
    true
}

fn default_grace_period() -> String {
    DEFAULT_GRACE_PERIOD.to_owned()
}

/// The binding Secret (servicebinding.io's provisioned service: `status.binding.name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Binding {
    /// A Secret in the Cache's namespace with what an application needs to connect (type
    /// `servicebinding.io/redis` or `servicebinding.io/memcached`: host, port, username,
    /// password, ssl, ca.crt, and for Sentinel sentinel.master and sentinel.nodes).
    pub name: String,
}

/// How clients authenticate, as the controller last applied it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthStatus {
    /// The user clients authenticate as (none while the Cache serves without a password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Passwords rotated in so far.
    #[serde(default)]
    pub rotations: u64,
    /// When the last rotation ended (the previous password retired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation_time: Option<Time>,
    /// While a rotation is under way: AddingNext (every server learns the new password),
    /// Publishing (the binding Secret gets it), RetiringPrevious (clients move; the previous
    /// password works until `previousRetiresAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationPhase>,
    /// When the previous password stops working, during RetiringPrevious.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_retires_at: Option<Time>,
    /// The value of the `blockwork.dev/rotate-requested-at` annotation the controller last
    /// acted on (`blockwork rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_rotate_at: Option<String>,
}

/// The step a password rotation is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RotationPhase {
    AddingNext,
    Publishing,
    RetiringPrevious,
}
