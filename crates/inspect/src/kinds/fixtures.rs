//! Objects the kinds' tests share.

use blockwork_cert::api::ValidationRecordStatus;
use blockwork_cert::{Cert, CertState};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).expect("valid")
}

pub fn validating_cert(pending: bool) -> Cert {
    let mut cert =
        Cert::new("api", blockwork_cert::CertSpec { service_name: "api".into(), environment: "prod".into(), ..Default::default() });
    cert.metadata.namespace = Some("team-a".into());
    let mut status = blockwork_cert::CertStatus {
        reconcile_state: Some(blockwork_runtime::ReconcileState::Verifying),
        reconcile_state_since: Some(Time(at(0))),
        ..Default::default()
    };
    status.observation.state = Some(CertState::Validated);
    status.observation.domain_name = Some("api-prod.k8s.example.com".into());
    status.observation.validation_records = vec![ValidationRecordStatus {
        zone_id: "Z123".into(),
        name: "_x.api-prod.k8s.example.com.".into(),
        value: "_y.acm-validations.aws.".into(),
        owned: true,
        pending,
        change_id: None,
    }];
    cert.status = Some(status);
    cert
}
