//! Two small state machines as pure functions: deleting a tenant (seed 001: disable → wait for
//! Deployed → delete with the ETag → delete DNS records → release, one step per reconcile) and
//! following a CloudFront-managed certificate.

/// CloudFront's tenant status once a change has propagated.
pub const DEPLOYED: &str = "Deployed";

/// What deletion does next, given what was observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionStep {
    /// CloudFront refuses to delete an enabled tenant (409 ResourceNotDisabled): disable it.
    Disable,
    /// Disabled, the change still propagating: look again later.
    WaitForDeployed,
    /// Disabled and deployed: delete with the current ETag.
    DeleteTenant,
    /// The tenant is gone; its DNS records are not.
    DeleteDns,
    /// Nothing left: release the object.
    Done,
}

/// The observed tenant, as far as deletion cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed<'a> {
    pub enabled: bool,
    pub status: Option<&'a str>,
}

pub fn deletion_step(tenant: Option<Observed<'_>>, dns_records_remain: bool) -> DeletionStep {
    match tenant {
        Some(Observed { enabled: true, .. }) => DeletionStep::Disable,
        Some(Observed { status, .. }) if status != Some(DEPLOYED) => DeletionStep::WaitForDeployed,
        Some(_) => DeletionStep::DeleteTenant,
        None if dns_records_remain => DeletionStep::DeleteDns,
        None => DeletionStep::Done,
    }
}

/// Where a managed certificate stands, and what the operator does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertificateStep {
    /// The spec asks for no managed certificate.
    NotRequested,
    /// Requested, CloudFront has no details yet, or validation is under way.
    Pending { status: String },
    /// Issued, its ARN not in the spec yet: the operator writes it into
    /// `customizations.certificate.arn` (one write), from where the next reconcile pushes it to
    /// CloudFront.
    Attach { arn: String },
    /// Issued and named in the spec, not yet on the tenant in CloudFront: the update pushes it.
    Pushing { arn: String },
    /// Issued and used by the tenant.
    Attached { arn: String },
    /// Failed, timed out, revoked or expired: needs a person.
    Failed { status: String },
}

/// `details` is CloudFront's (status, certificate ARN), `None` when it has none yet; `spec_arn`
/// the certificate the spec names, `attached_arn` the one the tenant in CloudFront uses.
pub fn certificate_step(
    requested: bool,
    details: Option<(&str, Option<&str>)>,
    spec_arn: Option<&str>,
    attached_arn: Option<&str>,
) -> CertificateStep {
    if !requested {
        return CertificateStep::NotRequested;
    }
    match details {
        None => CertificateStep::Pending { status: "pending-validation".to_owned() },
        Some(("issued", Some(arn))) if attached_arn == Some(arn) => CertificateStep::Attached { arn: arn.to_owned() },
        Some(("issued", Some(arn))) if spec_arn == Some(arn) => CertificateStep::Pushing { arn: arn.to_owned() },
        Some(("issued", Some(arn))) => CertificateStep::Attach { arn: arn.to_owned() },
        Some((status @ ("failed" | "validation-timed-out" | "revoked" | "expired" | "inactive"), _)) => {
            CertificateStep::Failed { status: status.to_owned() }
        }
        Some((status, _)) => CertificateStep::Pending { status: status.to_owned() },
    }
}

impl CertificateStep {
    /// The `CertificateReady` condition: (status, reason, message); `None` when not requested.
    pub fn condition(&self) -> Option<(bool, &'static str, String)> {
        match self {
            Self::NotRequested => None,
            Self::Pending { status } => {
                Some((false, "CertificatePending", format!("the managed certificate is {status}; waiting for its validation")))
            }
            Self::Attach { .. } => Some((
                false,
                "CertificateIssued",
                "the managed certificate is issued; writing its ARN into spec.customizations.certificate.arn".to_owned(),
            )),
            Self::Pushing { .. } => {
                Some((false, "CertificateIssued", "the managed certificate is issued; attaching it to the tenant".to_owned()))
            }
            Self::Attached { .. } => Some((true, "CertificateAttached", "the managed certificate is issued and attached".to_owned())),
            Self::Failed { status } => {
                Some((false, "CertificateFailed", format!("the managed certificate is {status}; it needs attention")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(enabled: bool, status: &str) -> Option<Observed<'_>> {
        Some(Observed { enabled, status: Some(status) })
    }

    #[test]
    fn enabled_tenant_is_disabled_first() {
        assert_eq!(deletion_step(tenant(true, "Deployed"), true), DeletionStep::Disable);
        assert_eq!(deletion_step(tenant(true, "InProgress"), false), DeletionStep::Disable);
    }

    #[test]
    fn disabled_tenant_in_progress_is_waited_for() {
        assert_eq!(deletion_step(tenant(false, "InProgress"), false), DeletionStep::WaitForDeployed);
    }

    #[test]
    fn disabled_deployed_tenant_is_deleted() {
        assert_eq!(deletion_step(tenant(false, "Deployed"), true), DeletionStep::DeleteTenant);
    }

    #[test]
    fn dns_records_go_after_the_tenant() {
        assert_eq!(deletion_step(None, true), DeletionStep::DeleteDns);
    }

    #[test]
    fn nothing_left_releases_the_object() {
        assert_eq!(deletion_step(None, false), DeletionStep::Done);
    }

    #[test]
    fn no_request_means_no_certificate_step() {
        assert_eq!(certificate_step(false, Some(("issued", Some("arn"))), None, None), CertificateStep::NotRequested);
    }

    #[test]
    fn requested_certificate_without_details_is_pending() {
        assert!(matches!(certificate_step(true, None, None, None), CertificateStep::Pending { .. }));
    }

    #[test]
    fn pending_validation_is_pending() {
        assert_eq!(
            certificate_step(true, Some(("pending-validation", Some("arn"))), None, None),
            CertificateStep::Pending { status: "pending-validation".to_owned() }
        );
    }

    #[test]
    fn issued_certificate_missing_from_the_spec_is_attached() {
        assert_eq!(
            certificate_step(true, Some(("issued", Some("arn:c"))), None, None),
            CertificateStep::Attach { arn: "arn:c".to_owned() }
        );
    }

    #[test]
    fn issued_certificate_in_the_spec_but_not_on_the_tenant_is_being_pushed() {
        assert_eq!(
            certificate_step(true, Some(("issued", Some("arn:c"))), Some("arn:c"), None),
            CertificateStep::Pushing { arn: "arn:c".to_owned() }
        );
    }

    #[test]
    fn issued_certificate_on_the_tenant_is_attached() {
        assert_eq!(
            certificate_step(true, Some(("issued", Some("arn:c"))), Some("arn:c"), Some("arn:c")),
            CertificateStep::Attached { arn: "arn:c".to_owned() }
        );
    }

    #[test]
    fn failed_and_timed_out_certificates_are_surfaced() {
        for status in ["failed", "validation-timed-out", "revoked"] {
            let step = certificate_step(true, Some((status, None)), None, None);
            assert_eq!(step, CertificateStep::Failed { status: status.to_owned() });
            assert_eq!(step.condition().map(|c| (c.0, c.1)), Some((false, "CertificateFailed")));
        }
    }

    #[test]
    fn attached_certificate_is_ready() {
        let step = CertificateStep::Attached { arn: "arn:c".to_owned() };
        assert_eq!(step.condition().map(|c| c.0), Some(true));
    }
}
