//! One [`Report`] builder per kind: pure functions of the objects as read, and the time now.
//! Here is what only the kind knows — a Cert's validation records and expiry, a tenant's DNS and
//! managed certificate, an Ingress's Certs, a Cache's pods, a rotator target's key slots — written as notes with the
//! numbers a person needs. One file per kind; this one names what the rest of the crate uses.
//!
//! [`Report`]: crate::report::Report

mod cache;
mod cert;
mod deletion;
#[cfg(test)]
mod fixtures;
mod ingress;
mod rotator;
mod tenant;

pub use cache::{CacheObjects, cache, pod_state};
pub use cert::{ACM_USUAL_MINUTES, ChangeNow, RecordNow, cert, exported_secret, published, records_now_note, records_to_read};
pub use ingress::{concerns_blockwork, ingress};
pub use rotator::{RotatorObjects, certificate_expiry, describe_certificate, rotator_source, rotator_target};
pub use tenant::tenant;
