//! The Cert operator's flags (flattened into `blockwork run`; argument ids are prefixed `cert_`
//! so they do not clash with the binary's own) and the configuration made from them. The AWS
//! flags (region, endpoints, timeout, quotas) are the process's, in `blockwork_aws::AwsArgs`.

use std::time::Duration;

use blockwork_aws::acm::AcmConfig;
pub use blockwork_aws::parse_duration;

use crate::decisions::DEFAULT_VALIDATION_TIMEOUT;
use crate::external::default_timing;
use crate::zones::{ZoneError, ZoneRegistry};
use blockwork_runtime::Timing;

#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct CertArgs {
    /// Route53 hosted zones for validation records of namespaces no AwsIdentity maps (the
    /// operator's own identity), `name:id,...`; the first is the default. Mapped namespaces use
    /// their AwsIdentity's `hostedZones`.
    #[arg(id = "cert_dns_zones", long = "dns-zones", env = "CERT_DNS_ZONES", default_value = "", value_name = "NAME:ID,...")]
    pub dns_zones: String,

    /// How often the account's certificate listing is swept when no certificate is awaited (a
    /// revoked or expired certificate is seen within this, and each sweep costs one
    /// ListCertificates per 1,000 certificates).
    #[arg(id = "cert_listing_interval", long = "certificate-listing-interval", env = "CERT_CERTIFICATE_LISTING_INTERVAL", default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub listing_interval: Duration,

    /// How long an issued certificate's description is reused (shorter than the listing
    /// interval, so that a renewing certificate is described at each sweep).
    #[arg(id = "cert_cache_ttl", long = "cache-ttl", env = "CERT_CACHE_TTL", default_value = "4m", value_parser = parse_duration, value_name = "DURATION")]
    pub cache_ttl: Duration,

    /// Most certificate descriptions cached.
    #[arg(id = "cert_cache_max_size", long = "cache-max-size", env = "CERT_CACHE_MAX_SIZE", default_value_t = 1000, value_name = "N")]
    pub cache_max_size: u64,

    /// A certificate still pending validation after this long fails.
    #[arg(id = "cert_validation_timeout", long = "validation-timeout", env = "CERT_VALIDATION_TIMEOUT", default_value = "72h", value_parser = parse_duration, value_name = "DURATION")]
    pub validation_timeout: Duration,

    /// Certificates expiring within this many days get their own expiry metric.
    #[arg(
        id = "cert_metrics_expiry_threshold",
        long = "metrics-expiry-threshold",
        env = "CERT_METRICS_EXPIRY_THRESHOLD",
        default_value_t = 90,
        value_name = "DAYS"
    )]
    pub metrics_expiry_threshold: u32,

    /// Most certificates with their own expiry metric; the rest are counted as not tracked.
    #[arg(
        id = "cert_max_tracked_certificates",
        long = "max-tracked-certificates",
        env = "CERT_MAX_TRACKED_CERTIFICATES",
        default_value_t = 1000,
        value_name = "N"
    )]
    pub max_tracked_certificates: usize,

    /// Let Certs export their certificate into a Secret of their namespace (`spec.export`). The
    /// operator then reads, watches, writes and deletes Secrets: grant it with `blockwork rbac
    /// --opt-in cert.export-secrets` (the chart's `controllers.cert.exportSecrets` does both).
    /// Without it a Cert asking for export fails before any certificate is requested.
    #[arg(id = "cert_export_secrets", long = "export-secrets", env = "CERT_EXPORT_SECRETS", default_value_t = false)]
    pub export_secrets: bool,

    /// ACM Private CAs Certs may issue private certificates from (`spec.certificateAuthorityArn`),
    /// by ARN, comma separated [default: none: no private certificates].
    #[arg(
        id = "cert_certificate_authorities",
        long = "certificate-authorities",
        env = "CERT_CERTIFICATE_AUTHORITIES",
        value_delimiter = ',',
        value_name = "ARN,..."
    )]
    pub certificate_authorities: Vec<String>,

    /// How often a held certificate's ownership tags are read when nothing is written for it,
    /// so that a Cert whose certificate another object (another cluster) adopted notices it
    /// (`OwnershipLost`) within this; before any write or deletion they are always read. One
    /// ListTagsForCertificate per certificate per interval, each Cert at its own point of the
    /// interval (after a start: a random one), so a restart reads no tags at once
    /// (docs/adopting.md). At least 1s.
    #[arg(id = "cert_ownership_check_interval", long = "ownership-check-interval", env = "CERT_OWNERSHIP_CHECK_INTERVAL", default_value = "6h", value_parser = parse_duration, value_name = "DURATION")]
    pub ownership_check_interval: Duration,
}

impl Default for CertArgs {
    fn default() -> Self {
        Self {
            dns_zones: String::new(),
            listing_interval: AcmConfig::default().sweep,
            cache_ttl: AcmConfig::default().describe_ttl,
            cache_max_size: AcmConfig::default().describe_capacity,
            validation_timeout: DEFAULT_VALIDATION_TIMEOUT,
            metrics_expiry_threshold: 90,
            max_tracked_certificates: 1000,
            export_secrets: false,
            certificate_authorities: Vec::new(),
            ownership_check_interval: crate::external::OWNERSHIP_INTERVAL,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error(transparent)]
    Zones(#[from] ZoneError),
    #[error("invalid cert configuration: {0}")]
    Invalid(String),
}

/// Everything [`crate::run`] needs besides the client, metrics and shutdown signal.
#[derive(Clone, Debug, PartialEq)]
pub struct CertConfig {
    pub zones: ZoneRegistry,
    /// The certificate listing's sweeps and the description cache.
    pub acm: AcmConfig,
    pub validation_timeout: Duration,
    pub expiry_threshold_days: u32,
    pub max_tracked_certificates: usize,
    pub timing: Timing,
    /// Certs may export into Secrets (`--export-secrets`).
    pub export_secrets: bool,
    /// The private CAs Certs may issue from (`--certificate-authorities`).
    pub certificate_authorities: Vec<String>,
    /// How often a held certificate's ownership is confirmed when nothing is written for it.
    pub ownership_interval: Duration,
    /// Ingresses are among the users of Certs (`crate::users`): the Ingress controller runs in
    /// this process, so it may watch them. Not a flag: `blockwork run` sets it.
    pub ingress_users: bool,
}

impl CertConfig {
    pub fn from_args(args: &CertArgs) -> Result<Self, ConfigError> {
        // Empty is valid: every namespace may be mapped to an AwsIdentity with zones of its own.
        let zones: ZoneRegistry = args.dns_zones.parse()?;
        if args.cache_max_size == 0 {
            return Err(ConfigError::Invalid("--cache-max-size must be at least 1".to_owned()));
        }
        let pattern = regex::Regex::new(crate::api::CERTIFICATE_AUTHORITY_ARN_PATTERN).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let certificate_authorities: Vec<String> =
            args.certificate_authorities.iter().map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect();
        if let Some(bad) = certificate_authorities.iter().find(|a| !pattern.is_match(a)) {
            return Err(ConfigError::Invalid(format!(
                "--certificate-authorities: {bad:?} is not the ARN of an ACM Private CA (arn:aws:acm-pca:REGION:ACCOUNT:certificate-authority/ID)"
            )));
        }
        if args.listing_interval < Duration::from_secs(1) {
            return Err(ConfigError::Invalid("--certificate-listing-interval must be at least 1s".to_owned()));
        }
        if args.ownership_check_interval < Duration::from_secs(1) {
            return Err(ConfigError::Invalid("--ownership-check-interval must be at least 1s".to_owned()));
        }
        Ok(Self {
            zones,
            acm: AcmConfig {
                sweep: args.listing_interval,
                describe_ttl: args.cache_ttl,
                describe_capacity: args.cache_max_size,
                ..AcmConfig::default()
            },
            validation_timeout: args.validation_timeout,
            expiry_threshold_days: args.metrics_expiry_threshold,
            max_tracked_certificates: args.max_tracked_certificates,
            timing: default_timing(),
            export_secrets: args.export_secrets,
            certificate_authorities,
            ownership_interval: args.ownership_check_interval,
            ingress_users: false,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cert: CertArgs,
    }

    #[test]
    fn defaults_are_the_seed_s() {
        let cli = Cli::try_parse_from(["x", "--dns-zones", "example.com:Z1"]).unwrap();
        let config = CertConfig::from_args(&cli.cert).unwrap();
        assert_eq!(config.acm, AcmConfig::default());
        assert_eq!(config.validation_timeout, Duration::from_secs(72 * 3600));
        assert_eq!(config.zones.zones()[0].id, "Z1");
        assert_eq!(config.expiry_threshold_days, 90);
        assert_eq!(config.max_tracked_certificates, 1000);
        assert!(!config.export_secrets, "least privilege: exporting into Secrets is enabled at install");
    }

    #[test]
    fn flags_are_parsed() {
        let cli = Cli::try_parse_from([
            "x",
            "--dns-zones=a.com:Z1,b.org:Z2",
            "--certificate-listing-interval=2m",
            "--cache-ttl=90s",
            "--cache-max-size=10",
            "--validation-timeout=1h30m",
            "--metrics-expiry-threshold=30",
            "--max-tracked-certificates=7",
        ])
        .unwrap();
        let config = CertConfig::from_args(&cli.cert).unwrap();
        assert_eq!(config.zones.zones().len(), 2);
        assert_eq!(
            config.acm,
            AcmConfig {
                sweep: Duration::from_secs(120),
                describe_ttl: Duration::from_secs(90),
                describe_capacity: 10,
                ..AcmConfig::default()
            }
        );
        assert_eq!(config.validation_timeout, Duration::from_secs(5400));
    }

    #[test]
    fn private_cas_are_given_by_arn() {
        let ca = "arn:aws:acm-pca:us-east-1:123456789012:certificate-authority/11111111-2222-3333-4444-555555555555";
        let cli = Cli::try_parse_from(["x", "--dns-zones", "a.com:Z1", "--certificate-authorities", &format!("{ca}, ")]).unwrap();
        assert_eq!(CertConfig::from_args(&cli.cert).unwrap().certificate_authorities, [ca]);
        let bad = Cli::try_parse_from(["x", "--dns-zones", "a.com:Z1", "--certificate-authorities", "my-ca"]).unwrap();
        assert!(CertConfig::from_args(&bad.cert).unwrap_err().to_string().contains("\"my-ca\" is not the ARN"));
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(CertConfig::from_args(&CertArgs::default()).is_ok_and(|c| c.zones.is_empty()), "mapped namespaces need no --dns-zones");
        assert!(matches!(
            CertConfig::from_args(&CertArgs { dns_zones: "a.com".into(), ..CertArgs::default() }),
            Err(ConfigError::Zones(_))
        ));
        let zero = CertArgs { dns_zones: "a.com:Z1".into(), cache_max_size: 0, ..CertArgs::default() };
        assert!(CertConfig::from_args(&zero).is_err());
        let constant = CertArgs { ownership_check_interval: Duration::from_millis(100), ..CertArgs::default() };
        assert!(CertConfig::from_args(&constant).unwrap_err().to_string().contains("--ownership-check-interval"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(parse_duration("72h").unwrap(), Duration::from_secs(72 * 3600));
    }
}
