//! Blockwork's own webhook certificate authority, for clusters without cert-manager: a CA and a
//! serving certificate kept in one Secret, renewed well before they expire.
//!
//! Pure: [`plan`] decides, from the Secret's data and the clock, what the Secret should hold
//! next; the caller (the leader) reads and writes the Secret and copies [`CA_BUNDLE`] into the
//! `caBundle` of the CRDs and webhook configurations.
//!
//! # Renewal without a failed request
//!
//! The API server must trust a CA before any replica presents a certificate it signed, so a
//! renewal takes several writes, one per [`plan`], and the caller publishes the bundle between
//! them (it patches every `caBundle` before it plans the next write):
//!
//! 1. A new CA, once the current one has less than a third of its validity left: it goes first
//!    in [`CA_BUNDLE`]; the older CAs stay behind it while they are valid, so the serving
//!    certificate they signed is still trusted.
//! 2. A new serving certificate, signed by the newest CA, once the current one has less than a
//!    third of its validity left, was signed by an older CA, or does not name the Service.
//! 3. Expired CAs leave the bundle.
//!
//! One third is cert-manager's default (`renewBefore` of a 90-day certificate: 30 days).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;

use crate::{Error, TlsMaterial};

/// The CAs the API server must trust, newest first (PEM). The serving certificate's issuer is
/// the first.
pub const CA_BUNDLE: &str = "ca.crt";
/// The newest CA's private key (PEM).
pub const CA_KEY: &str = "ca.key";
/// The serving certificate (PEM), as cert-manager names it.
pub const TLS_CERT: &str = "tls.crt";
/// The serving certificate's private key (PEM).
pub const TLS_KEY: &str = "tls.key";

/// Certificates start this long in the past, for API servers whose clock is behind.
const CLOCK_SKEW: Duration = Duration::from_secs(300);
/// How long a new CA waits, once in the bundle, before it replaces a serving certificate that
/// is still valid: the API server picks a `caBundle` change up through its watch, which can lag.
pub const PROPAGATION: Duration = Duration::from_secs(10);

/// What the certificates must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The serving certificate's DNS names (the webhook Service's) or IP addresses.
    pub hosts: Vec<String>,
    pub ca_validity: Duration,
    pub serving_validity: Duration,
}

/// The Secret's data.
pub type Data = BTreeMap<String, Vec<u8>>;

/// What to do with the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to write; look again at `next_check` (the next renewal or expiry).
    Keep { next_check: SystemTime },
    /// Write `data` (replacing the Secret's data), for `reason`.
    Write { data: Data, reason: Reason },
}

/// Why the Secret is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// No usable CA (no Secret yet, or its CA or key is missing or unreadable).
    NewCa,
    /// The CA has less than a third of its validity left.
    RenewCa,
    /// No usable serving certificate (missing, unreadable, or its key does not match).
    NewServingCertificate,
    /// The serving certificate has less than a third of its validity left.
    RenewServingCertificate,
    /// The serving certificate was signed by an older CA.
    ReissueFromNewestCa,
    /// The serving certificate does not name every host of the policy (the Service changed).
    HostsChanged,
    /// CAs that expired leave the bundle.
    DropExpiredCas,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NewCa => "no usable CA: creating one",
            Self::RenewCa => "the CA has less than a third of its validity left: adding a new one",
            Self::NewServingCertificate => "no usable serving certificate: issuing one",
            Self::RenewServingCertificate => "the serving certificate has less than a third of its validity left: renewing it",
            Self::ReissueFromNewestCa => "the serving certificate was signed by an older CA: reissuing it from the newest",
            Self::HostsChanged => "the serving certificate does not name the webhook Service: reissuing it",
            Self::DropExpiredCas => "removing expired CAs from the bundle",
        })
    }
}

/// A certificate as far as renewal cares.
#[derive(Clone, Debug)]
struct Parsed {
    pem: String,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    public_key: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
    hosts: Vec<String>,
}

impl Parsed {
    fn all(pem: &[u8]) -> Vec<Self> {
        CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).filter_map(|der| Self::from_der(&der)).collect()
    }

    fn from_der(der: &CertificateDer<'_>) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let time =
            |t: x509_parser::time::ASN1Time| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(t.timestamp()).ok()?));
        let hosts = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                        x509_parser::extensions::GeneralName::IPAddress(bytes) => ip_from_bytes(bytes),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let pem = pem_encode(der);
        Some(Self {
            pem,
            subject: cert.subject().as_raw().to_vec(),
            issuer: cert.issuer().as_raw().to_vec(),
            public_key: cert.public_key().subject_public_key.data.to_vec(),
            not_before: time(cert.validity().not_before)?,
            not_after: time(cert.validity().not_after)?,
            hosts,
        })
    }

    /// Whether less than a third of the validity is left at `now`.
    fn renewal_due(&self, now: SystemTime) -> bool {
        now >= self.renew_at()
    }

    /// A third of the validity before expiry, measured from issuance (`not_before` is
    /// backdated by [`CLOCK_SKEW`]).
    fn renew_at(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.issued()).unwrap_or_default();
        self.not_after.checked_sub(lifetime / 3).unwrap_or(self.not_after)
    }

    fn issued(&self) -> SystemTime {
        self.not_before + CLOCK_SKEW
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(|b| std::net::IpAddr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes).ok().map(|b| std::net::IpAddr::from(b).to_string()),
        _ => None,
    }
}

fn pem_encode(der: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// The newest CA with its key, if both are there and belong together.
struct SigningCa {
    cert: Parsed,
    key_pem: String,
}

/// Decides the Secret's next content. `data` is `None` when the Secret does not exist.
pub fn plan(data: Option<&Data>, policy: &Policy, now: SystemTime) -> Result<Plan, Error> {
    let empty = Data::new();
    let data = data.unwrap_or(&empty);
    let text = |key: &str| data.get(key).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();

    let bundle: Vec<Parsed> = Parsed::all(text(CA_BUNDLE).as_bytes()).into_iter().filter(|ca| ca.not_after > now).collect();
    let expired_in_bundle = Parsed::all(text(CA_BUNDLE).as_bytes()).len() != bundle.len();
    let signing = bundle.first().and_then(|ca| {
        let key = KeyPair::from_pem(&text(CA_KEY)).ok()?;
        (rcgen::PublicKeyData::der_bytes(&key) == ca.public_key.as_slice()).then(|| SigningCa { cert: ca.clone(), key_pem: text(CA_KEY) })
    });

    // 1. A CA to sign with.
    let signing = match signing {
        None => return new_ca(data, &bundle, policy, now, Reason::NewCa),
        Some(ca) if ca.cert.renewal_due(now) => return new_ca(data, &bundle, policy, now, Reason::RenewCa),
        Some(ca) => ca,
    };

    // 2. A serving certificate from it.
    let serving = Parsed::all(text(TLS_CERT).as_bytes()).into_iter().next().filter(|_| {
        let material = TlsMaterial { cert_pem: text(TLS_CERT), key_pem: text(TLS_KEY), ca_pem: String::new() };
        material.certified_key().is_ok()
    });
    let reissue = match &serving {
        None => Some(Reason::NewServingCertificate),
        Some(cert) if cert.not_after <= now || cert.renewal_due(now) => Some(Reason::RenewServingCertificate),
        Some(cert) if cert.issuer != signing.cert.subject => Some(Reason::ReissueFromNewestCa),
        Some(cert) if !policy.hosts.iter().all(|h| cert.hosts.contains(h)) => Some(Reason::HostsChanged),
        Some(_) => None,
    };
    // A CA younger than PROPAGATION may not be trusted by the API server yet: a certificate it
    // signed waits, unless there is no valid one to serve meanwhile.
    let trusted_at = signing.cert.issued() + PROPAGATION;
    if reissue.is_some() && now < trusted_at && serving.as_ref().is_some_and(|cert| cert.not_after > now) {
        return Ok(Plan::Keep { next_check: trusted_at });
    }
    if let Some(reason) = reissue {
        let mut next = data.clone();
        let (cert_pem, key_pem) = issue_serving(&signing, policy, now)?;
        next.insert(TLS_CERT.to_owned(), cert_pem.into_bytes());
        next.insert(TLS_KEY.to_owned(), key_pem.into_bytes());
        next.insert(CA_BUNDLE.to_owned(), bundle_pem(&bundle).into_bytes());
        return Ok(Plan::Write { data: next, reason });
    }

    // 3. Only valid CAs in the bundle.
    if expired_in_bundle {
        let mut next = data.clone();
        next.insert(CA_BUNDLE.to_owned(), bundle_pem(&bundle).into_bytes());
        return Ok(Plan::Write { data: next, reason: Reason::DropExpiredCas });
    }

    let serving_renewal = serving.as_ref().map_or(now, Parsed::renew_at);
    let next_check =
        [signing.cert.renew_at(), serving_renewal].into_iter().chain(bundle.iter().map(|ca| ca.not_after)).min().unwrap_or(now);
    Ok(Plan::Keep { next_check })
}

fn bundle_pem(bundle: &[Parsed]) -> String {
    bundle.iter().map(|ca| ca.pem.as_str()).collect()
}

/// A new CA, first in the bundle; the serving certificate stays as it is until the next plan,
/// after the caller published the bundle.
fn new_ca(data: &Data, bundle: &[Parsed], policy: &Policy, now: SystemTime, reason: Reason) -> Result<Plan, Error> {
    let err = |e: rcgen::Error| Error::Certificate(e.to_string());
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    // A distinct name per CA: a serving certificate's issuer tells which CA signed it.
    let serial = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    params.distinguished_name.push(DnType::CommonName, format!("blockwork-webhook-ca-{serial}"));
    params.not_before = offset(now.checked_sub(CLOCK_SKEW).unwrap_or(now))?;
    params.not_after = offset(now + policy.ca_validity)?;
    let cert = params.self_signed(&key).map_err(err)?;
    let mut next = data.clone();
    let older: String = bundle.iter().map(|ca| ca.pem.as_str()).collect();
    next.insert(CA_BUNDLE.to_owned(), format!("{}{older}", cert.pem()).into_bytes());
    next.insert(CA_KEY.to_owned(), key.serialize_pem().into_bytes());
    Ok(Plan::Write { data: next, reason })
}

fn issue_serving(ca: &SigningCa, policy: &Policy, now: SystemTime) -> Result<(String, String), Error> {
    let err = |e: rcgen::Error| Error::Certificate(e.to_string());
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(err)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert.pem, ca_key).map_err(err)?;
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.distinguished_name.push(DnType::CommonName, policy.hosts.first().map_or("blockwork-webhook", String::as_str));
    for host in &policy.hosts {
        params.subject_alt_names.push(match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.clone().try_into().map_err(err)?),
        });
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = offset(now.checked_sub(CLOCK_SKEW).unwrap_or(now))?;
    // Never past the CA: a certificate outliving its issuer would not verify.
    params.not_after = offset((now + policy.serving_validity).min(ca.cert.not_after))?;
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn offset(time: SystemTime) -> Result<OffsetDateTime, Error> {
    let seconds = time.duration_since(SystemTime::UNIX_EPOCH).map_err(|e| Error::Certificate(e.to_string()))?.as_secs();
    OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).unwrap_or(i64::MAX)).map_err(|e| Error::Certificate(e.to_string()))
}

/// What replicas serve from the Secret's data: the serving certificate, its key and the bundle.
pub fn serving_material(data: &Data) -> Option<TlsMaterial> {
    let text = |key: &str| data.get(key).map(|v| String::from_utf8_lossy(v).into_owned());
    Some(TlsMaterial { cert_pem: text(TLS_CERT)?, key_pem: text(TLS_KEY)?, ca_pem: text(CA_BUNDLE).unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn policy() -> Policy {
        Policy {
            hosts: vec!["blockwork-webhook.ops.svc".into(), "blockwork-webhook.ops.svc.cluster.local".into()],
            ca_validity: 300 * DAY,
            serving_validity: 90 * DAY,
        }
    }

    fn at(days: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + days * 86_400)
    }

    /// Plans until the Secret is settled; returns the data and the reasons of the writes.
    fn settle(mut data: Option<Data>, policy: &Policy, now: SystemTime) -> (Data, Vec<Reason>, SystemTime) {
        let mut reasons = Vec::new();
        loop {
            match plan(data.as_ref(), policy, now).expect("plans") {
                Plan::Keep { next_check } => return (data.unwrap_or_default(), reasons, next_check),
                Plan::Write { data: next, reason } => {
                    assert!(reasons.len() < 5, "no settling: {reasons:?}");
                    reasons.push(reason);
                    data = Some(next);
                }
            }
        }
    }

    fn cas(data: &Data) -> Vec<Parsed> {
        Parsed::all(&data[CA_BUNDLE])
    }

    fn serving(data: &Data) -> Parsed {
        Parsed::all(&data[TLS_CERT]).remove(0)
    }

    #[test]
    fn a_missing_secret_gets_a_ca_then_a_serving_certificate_for_the_service() {
        let (data, reasons, _) = settle(None, &policy(), at(0));
        assert_eq!(reasons, [Reason::NewCa, Reason::NewServingCertificate]);
        let (cas, serving) = (cas(&data), serving(&data));
        assert_eq!(cas.len(), 1);
        assert_eq!(serving.issuer, cas[0].subject);
        assert_eq!(serving.hosts, policy().hosts);
        assert!(serving_material(&data).expect("material").certified_key().is_ok());
    }

    #[test]
    fn a_settled_secret_is_kept_until_a_third_of_the_serving_validity_is_left() {
        let (data, _, next_check) = settle(None, &policy(), at(0));
        assert_eq!(next_check, serving(&data).renew_at());
        assert!(matches!(plan(Some(&data), &policy(), at(59)).expect("plans"), Plan::Keep { .. }));
        let (renewed, reasons, _) = settle(Some(data.clone()), &policy(), at(61));
        assert_eq!(reasons, [Reason::RenewServingCertificate]);
        assert_eq!(renewed[CA_BUNDLE], data[CA_BUNDLE], "the CA stays");
        assert_ne!(renewed[TLS_CERT], data[TLS_CERT]);
    }

    #[test]
    fn a_new_ca_is_trusted_before_it_signs_and_the_old_one_stays_until_it_expires() {
        let (data, _, _) = settle(None, &policy(), at(0));
        let old_ca = cas(&data)[0].subject.clone();
        let (data, _, _) = settle(Some(data), &policy(), at(190));
        // Two thirds into the CA's life: the new CA comes first, alone in its write.
        let Plan::Write { data: step1, reason } = plan(Some(&data), &policy(), at(201)).expect("plans") else { unreachable!("write") };
        assert_eq!(reason, Reason::RenewCa);
        assert_eq!(step1[TLS_CERT], data[TLS_CERT], "the serving certificate waits for the bundle to be published");
        assert_eq!(cas(&step1).iter().map(|ca| ca.subject.clone()).next_back(), Some(old_ca.clone()));
        // Once the API server can trust it, the serving certificate moves to the new CA.
        let (step2, reasons, _) = settle(Some(step1.clone()), &policy(), at(202));
        assert_eq!(reasons, [Reason::ReissueFromNewestCa]);
        assert_eq!(serving(&step2).issuer, cas(&step1)[0].subject);
        assert_eq!(cas(&step2).len(), 2, "the old CA is still trusted");
        // Renewed once more before the old CA expires, then the old CA leaves the bundle.
        let (step3, _, _) = settle(Some(step2), &policy(), at(270));
        assert_eq!(cas(&step3).len(), 2);
        let (step4, reasons, _) = settle(Some(step3), &policy(), at(301));
        assert_eq!(reasons, [Reason::DropExpiredCas]);
        assert_eq!(cas(&step4).len(), 1);
        assert!(cas(&step4).iter().all(|ca| ca.subject != old_ca));
    }

    #[test]
    fn a_new_ca_signs_a_replacement_only_once_the_api_server_can_trust_it() {
        let seconds = |n: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
        let short = Policy { ca_validity: Duration::from_secs(90), serving_validity: Duration::from_secs(30), ..policy() };
        let (data, _, _) = settle(None, &short, seconds(0));
        // 61 s in: the CA (90 s) and the serving certificate (30 s, renewed at 20 s and 40 s) are due.
        let (data, _, _) = settle(Some(data), &short, seconds(20));
        let (data, _, _) = settle(Some(data), &short, seconds(40));
        let Plan::Write { data: with_new_ca, reason } = plan(Some(&data), &short, seconds(61)).expect("plans") else {
            unreachable!("write")
        };
        assert_eq!(reason, Reason::RenewCa);
        assert_eq!(plan(Some(&with_new_ca), &short, seconds(62)).expect("plans"), Plan::Keep { next_check: seconds(61) + PROPAGATION });
        let (_, reasons, _) = settle(Some(with_new_ca), &short, seconds(61) + PROPAGATION);
        assert_eq!(reasons, [Reason::RenewServingCertificate]);
    }

    #[test]
    fn short_validities_settle_instead_of_renewing_in_a_loop() {
        let short = Policy { ca_validity: Duration::from_secs(90), serving_validity: Duration::from_secs(30), ..policy() };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (_, reasons, next_check) = settle(None, &short, now);
        assert_eq!(reasons, [Reason::NewCa, Reason::NewServingCertificate]);
        assert_eq!(next_check, now + Duration::from_secs(20));
    }

    #[test]
    fn a_serving_certificate_that_does_not_name_the_service_is_reissued() {
        let (data, _, _) = settle(None, &policy(), at(0));
        let moved = Policy { hosts: vec!["blockwork-webhook.other.svc".into()], ..policy() };
        let (data, reasons, _) = settle(Some(data), &moved, at(1));
        assert_eq!(reasons, [Reason::HostsChanged]);
        assert_eq!(serving(&data).hosts, moved.hosts);
    }

    #[test]
    fn garbage_in_the_secret_is_replaced_not_trusted() {
        let garbage: Data = [CA_BUNDLE, CA_KEY, TLS_CERT, TLS_KEY].into_iter().map(|k| (k.to_owned(), b"not pem".to_vec())).collect();
        let (data, reasons, _) = settle(Some(garbage), &policy(), at(0));
        assert_eq!(reasons, [Reason::NewCa, Reason::NewServingCertificate]);
        assert_eq!(cas(&data).len(), 1);
    }

    #[test]
    fn a_ca_key_that_does_not_match_its_certificate_means_a_new_ca() {
        let (mut data, _, _) = settle(None, &policy(), at(0));
        data.insert(CA_KEY.into(), KeyPair::generate().expect("key").serialize_pem().into_bytes());
        let Plan::Write { reason, .. } = plan(Some(&data), &policy(), at(1)).expect("plans") else { unreachable!("write") };
        assert_eq!(reason, Reason::NewCa);
    }

    #[test]
    fn the_serving_certificate_never_outlives_its_ca() {
        let short_ca = Policy { ca_validity: 30 * DAY, ..policy() };
        let (data, _, _) = settle(None, &short_ca, at(0));
        assert!(serving(&data).not_after <= cas(&data)[0].not_after);
    }
}
