//! The Cert operator's flags (flattened into `blockwork run`; argument ids are prefixed `cert_`
//! so they do not clash with the binary's own) and the configuration made from them.

use std::time::Duration;

use crate::aws::{CacheConfig, RateLimitConfig, RetryConfig};
use crate::logic::DEFAULT_VALIDATION_TIMEOUT;
use crate::manager::Timing;
use crate::zones::{ZoneError, ZoneRegistry};

/// Parses durations such as `30s`, `5m`, `72h`, `1h30m` (or ISO 8601 `PT5M`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = text.trim().parse().map_err(|e| format!("invalid duration {text:?}: {e}"))?;
    Duration::try_from(signed).map_err(|_| format!("invalid duration {text:?}: must not be negative"))
}

#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct CertArgs {
    /// Route53 hosted zones for validation records, `name:id,...`; the first is the default.
    #[arg(id = "cert_dns_zones", long = "dns-zones", env = "CERT_DNS_ZONES", default_value = "", value_name = "NAME:ID,...")]
    pub dns_zones: String,

    /// ACM requests per second (burst twice that).
    #[arg(
        id = "cert_acm_rate_limit",
        long = "acm-rate-limit",
        env = "CERT_ACM_RATE_LIMIT",
        default_value_t = 5.0,
        value_name = "PER_SECOND"
    )]
    pub acm_rate_limit: f64,

    /// Route53 requests per second per hosted zone (burst 5).
    #[arg(
        id = "cert_route53_rate_limit",
        long = "route53-rate-limit",
        env = "CERT_ROUTE53_RATE_LIMIT",
        default_value_t = 3.0,
        value_name = "PER_SECOND"
    )]
    pub route53_rate_limit: f64,

    /// How long an issued certificate's description is cached.
    #[arg(id = "cert_cache_ttl", long = "cache-ttl", env = "CERT_CACHE_TTL", default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub cache_ttl: Duration,

    /// Most certificates cached.
    #[arg(id = "cert_cache_max_size", long = "cache-max-size", env = "CERT_CACHE_MAX_SIZE", default_value_t = 1000, value_name = "N")]
    pub cache_max_size: u64,

    /// Timeout of each AWS call.
    #[arg(id = "cert_aws_default_timeout", long = "aws-default-timeout", env = "CERT_AWS_DEFAULT_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub aws_default_timeout: Duration,

    /// AWS region [default: the SDK's chain: AWS_REGION, profile, IMDS].
    #[arg(id = "cert_aws_region", long = "aws-region", env = "AWS_REGION", value_name = "REGION")]
    pub aws_region: Option<String>,

    /// AWS endpoint override, for emulators (e.g. http://127.0.0.1:5000).
    #[arg(id = "cert_aws_endpoint_url", long = "aws-endpoint-url", env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub aws_endpoint_url: Option<String>,

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
}

impl Default for CertArgs {
    fn default() -> Self {
        Self {
            dns_zones: String::new(),
            acm_rate_limit: 5.0,
            route53_rate_limit: 3.0,
            cache_ttl: Duration::from_secs(300),
            cache_max_size: 1000,
            aws_default_timeout: Duration::from_secs(30),
            aws_region: None,
            aws_endpoint_url: None,
            validation_timeout: DEFAULT_VALIDATION_TIMEOUT,
            metrics_expiry_threshold: 90,
            max_tracked_certificates: 1000,
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
    pub rate_limits: RateLimitConfig,
    pub retry: RetryConfig,
    pub cache: CacheConfig,
    pub aws_timeout: Duration,
    pub aws_region: Option<String>,
    pub aws_endpoint_url: Option<String>,
    pub validation_timeout: Duration,
    pub expiry_threshold_days: u32,
    pub max_tracked_certificates: usize,
    pub timing: Timing,
}

impl CertConfig {
    pub fn from_args(args: &CertArgs) -> Result<Self, ConfigError> {
        let zones: ZoneRegistry = args.dns_zones.parse()?;
        if zones.is_empty() {
            return Err(ZoneError::NoZones.into());
        }
        for (flag, rate) in [("--acm-rate-limit", args.acm_rate_limit), ("--route53-rate-limit", args.route53_rate_limit)] {
            if !rate.is_finite() || rate <= 0.0 {
                return Err(ConfigError::Invalid(format!("{flag} must be a positive number, not {rate}")));
            }
        }
        if args.cache_max_size == 0 {
            return Err(ConfigError::Invalid("--cache-max-size must be at least 1".to_owned()));
        }
        Ok(Self {
            zones,
            rate_limits: RateLimitConfig {
                acm_per_second: args.acm_rate_limit,
                // The seed's bursts: twice the ACM rate, and 5 for Route53 (AWS's per-zone quota).
                acm_burst: burst(args.acm_rate_limit * 2.0),
                route53_per_second: args.route53_rate_limit,
                route53_burst: 5,
            },
            retry: RetryConfig::default(),
            cache: CacheConfig { ttl: args.cache_ttl, max_entries: args.cache_max_size, ..CacheConfig::default() },
            aws_timeout: args.aws_default_timeout,
            aws_region: args.aws_region.clone(),
            aws_endpoint_url: args.aws_endpoint_url.clone(),
            validation_timeout: args.validation_timeout,
            expiry_threshold_days: args.metrics_expiry_threshold,
            max_tracked_certificates: args.max_tracked_certificates,
            timing: Timing::default(),
        })
    }
}

fn burst(value: f64) -> u32 {
    // Saturating float-to-int conversion; at least one token.
    (value.ceil() as u32).max(1)
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
        assert_eq!(config.rate_limits, RateLimitConfig::default());
        assert_eq!(config.cache, CacheConfig::default());
        assert_eq!(config.validation_timeout, Duration::from_secs(72 * 3600));
        assert_eq!(config.aws_timeout, Duration::from_secs(30));
        assert_eq!(config.zones.zones()[0].id, "Z1");
        assert_eq!(config.expiry_threshold_days, 90);
        assert_eq!(config.max_tracked_certificates, 1000);
    }

    #[test]
    fn flags_are_parsed() {
        let cli = Cli::try_parse_from([
            "x",
            "--dns-zones=a.com:Z1,b.org:Z2",
            "--acm-rate-limit=2.5",
            "--route53-rate-limit=1",
            "--cache-ttl=90s",
            "--cache-max-size=10",
            "--aws-default-timeout=5s",
            "--aws-region=eu-west-1",
            "--aws-endpoint-url=http://127.0.0.1:5000",
            "--validation-timeout=1h30m",
            "--metrics-expiry-threshold=30",
            "--max-tracked-certificates=7",
        ])
        .unwrap();
        let config = CertConfig::from_args(&cli.cert).unwrap();
        assert_eq!(config.zones.zones().len(), 2);
        assert_eq!((config.rate_limits.acm_per_second, config.rate_limits.acm_burst), (2.5, 5));
        assert_eq!(config.cache, CacheConfig { ttl: Duration::from_secs(90), max_entries: 10, ..CacheConfig::default() });
        assert_eq!(config.validation_timeout, Duration::from_secs(5400));
        assert_eq!(config.aws_region.as_deref(), Some("eu-west-1"));
        assert_eq!(config.aws_endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(matches!(CertConfig::from_args(&CertArgs::default()), Err(ConfigError::Zones(ZoneError::NoZones))));
        let zero = CertArgs { dns_zones: "a.com:Z1".into(), acm_rate_limit: 0.0, ..CertArgs::default() };
        assert!(CertConfig::from_args(&zero).is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(parse_duration("72h").unwrap(), Duration::from_secs(72 * 3600));
    }
}
