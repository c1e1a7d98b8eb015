//! One set of AWS flags for the whole process (flattened into `blockwork run`), and the
//! [`AwsConfig`] made from them. Every controller uses the same region, endpoints, timeout,
//! quotas and retries; per-service endpoints and quotas override where a user needs them.
//!
//! Flags of earlier versions keep working, hidden, with a warning: the cert controller's
//! `--acm-rate-limit` (an ACM bucket of that rate, burst twice that, on top of AWS's per-API
//! ones) and `--route53-rate-limit` (once per hosted zone, now the account's Route 53 bucket,
//! burst 5), and the tenant controller's `--tenant-aws-endpoint-url` (its CloudFront and ACM
//! calls), `--tenant-route53-endpoint-url` (its Route 53 and STS calls) and
//! `--tenant-aws-region` (the region when `--aws-region` is not given).

use std::time::Duration;

use crate::edge::{AwsConfig, Endpoint, RetryPolicy};
use crate::quota::{Bucket, Override, Quotas, Service, Target};
use crate::route53::BatchPolicy;

/// Parses durations such as `30s`, `5m`, `72h`, `1h30m` (or ISO 8601 `PT5M`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = text.trim().parse().map_err(|e| format!("invalid duration {text:?}: {e}"))?;
    Duration::try_from(signed).map_err(|_| format!("invalid duration {text:?}: must not be negative"))
}

#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct AwsArgs {
    /// AWS region of regional APIs (ACM) [default: the SDK's chain: AWS_REGION, profile, IMDS].
    #[arg(id = "aws_region", long = "aws-region", env = "AWS_REGION", value_name = "REGION")]
    pub region: Option<String>,

    /// Endpoint override for every AWS service, for emulators (e.g. http://127.0.0.1:5000).
    #[arg(id = "aws_endpoint_url", long = "aws-endpoint-url", env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub endpoint_url: Option<String>,

    /// Endpoint override for ACM.
    #[arg(id = "aws_endpoint_url_acm", long = "aws-endpoint-url-acm", env = "AWS_ENDPOINT_URL_ACM", value_name = "URL")]
    pub endpoint_url_acm: Option<String>,

    /// Endpoint override for AWS Private CA (the private CAs Certs name).
    #[arg(id = "aws_endpoint_url_acm_pca", long = "aws-endpoint-url-acm-pca", env = "AWS_ENDPOINT_URL_ACM_PCA", value_name = "URL")]
    pub endpoint_url_acm_pca: Option<String>,

    /// Endpoint override for Route 53.
    #[arg(id = "aws_endpoint_url_route53", long = "aws-endpoint-url-route53", env = "AWS_ENDPOINT_URL_ROUTE_53", value_name = "URL")]
    pub endpoint_url_route53: Option<String>,

    /// Endpoint override for CloudFront.
    #[arg(
        id = "aws_endpoint_url_cloudfront",
        long = "aws-endpoint-url-cloudfront",
        env = "AWS_ENDPOINT_URL_CLOUDFRONT",
        value_name = "URL"
    )]
    pub endpoint_url_cloudfront: Option<String>,

    /// Endpoint override for STS (AssumeRole for a hosted zone in another account).
    #[arg(id = "aws_endpoint_url_sts", long = "aws-endpoint-url-sts", env = "AWS_ENDPOINT_URL_STS", value_name = "URL")]
    pub endpoint_url_sts: Option<String>,

    /// Timeout of each attempt of an AWS call.
    #[arg(id = "aws_default_timeout", long = "aws-default-timeout", env = "BLOCKWORK_AWS_DEFAULT_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// The share of AWS's quotas the process uses (0 < factor ≤ 1): other tools share the
    /// account's.
    #[arg(id = "aws_quota_safety_factor", long = "aws-quota-safety-factor", env = "BLOCKWORK_AWS_QUOTA_SAFETY_FACTOR", default_value_t = crate::quota::DEFAULT_SAFETY_FACTOR, value_name = "FACTOR")]
    pub safety_factor: f64,

    /// The account's quotas where they differ from AWS's defaults (a quota increase), before
    /// the safety factor: `SERVICE[.OPERATION]=RATE[/BURST],...`. `SERVICE` alone is the
    /// account-level bucket, `SERVICE.*` every operation, `route53.changes` the change
    /// throughput, e.g. `acm.RequestCertificate=10,route53.changes=200/2000`.
    #[arg(id = "aws_quota", long = "aws-quota", env = "BLOCKWORK_AWS_QUOTA", value_delimiter = ',', value_name = "QUOTAS")]
    pub quotas: Vec<Override>,

    /// Retries of a throttled or failed (5xx, network) AWS call, with exponential backoff from
    /// 1 s to 30 s and jitter.
    #[arg(id = "aws_max_retries", long = "aws-max-retries", env = "BLOCKWORK_AWS_MAX_RETRIES", default_value_t = 5, value_name = "N")]
    pub max_retries: usize,

    /// The shortest time between two batches of Route 53 changes nobody waits for, per hosted
    /// zone (the first change of a quiet zone goes at once).
    #[arg(id = "aws_route53_batch_interval", long = "aws-route53-batch-interval", env = "BLOCKWORK_AWS_ROUTE53_BATCH_INTERVAL", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub route53_batch_interval: Duration,

    /// Deprecated: an ACM bucket of this rate (burst twice that) on top of AWS's per-API ones;
    /// use `--aws-quota`.
    #[arg(id = "cert_acm_rate_limit", long = "acm-rate-limit", env = "CERT_ACM_RATE_LIMIT", hide = true, value_name = "PER_SECOND")]
    pub deprecated_acm_rate_limit: Option<f64>,

    /// Deprecated: was per hosted zone; now the account's Route 53 bucket (burst 5); use
    /// `--aws-quota`.
    #[arg(
        id = "cert_route53_rate_limit",
        long = "route53-rate-limit",
        env = "CERT_ROUTE53_RATE_LIMIT",
        hide = true,
        value_name = "PER_SECOND"
    )]
    pub deprecated_route53_rate_limit: Option<f64>,

    /// Deprecated: the tenant controller's CloudFront and ACM endpoint.
    #[arg(
        id = "tenant_aws_endpoint_url",
        long = "tenant-aws-endpoint-url",
        env = "TENANT_AWS_ENDPOINT_URL",
        hide = true,
        value_name = "URL"
    )]
    pub deprecated_tenant_endpoint_url: Option<String>,

    /// Deprecated: the tenant controller's Route 53 and STS endpoint.
    #[arg(
        id = "tenant_route53_endpoint_url",
        long = "tenant-route53-endpoint-url",
        env = "TENANT_ROUTE53_ENDPOINT_URL",
        hide = true,
        value_name = "URL"
    )]
    pub deprecated_tenant_route53_endpoint_url: Option<String>,

    /// Deprecated: use `--aws-region`.
    #[arg(id = "tenant_aws_region", long = "tenant-aws-region", env = "TENANT_AWS_REGION", hide = true, value_name = "REGION")]
    pub deprecated_tenant_region: Option<String>,
}

impl Default for AwsArgs {
    fn default() -> Self {
        Self {
            region: None,
            endpoint_url: None,
            endpoint_url_acm: None,
            endpoint_url_acm_pca: None,
            endpoint_url_route53: None,
            endpoint_url_cloudfront: None,
            endpoint_url_sts: None,
            timeout: Duration::from_secs(30),
            safety_factor: crate::quota::DEFAULT_SAFETY_FACTOR,
            quotas: Vec::new(),
            max_retries: 5,
            route53_batch_interval: BatchPolicy::default().interval,
            deprecated_acm_rate_limit: None,
            deprecated_route53_rate_limit: None,
            deprecated_tenant_endpoint_url: None,
            deprecated_tenant_route53_endpoint_url: None,
            deprecated_tenant_region: None,
        }
    }
}

/// Flags that make no sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid AWS configuration: {0}")]
pub struct ConfigError(pub String);

impl AwsArgs {
    /// The configuration, and a warning for each deprecated flag used.
    pub fn config(&self) -> Result<(AwsConfig, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        let mut quotas = Quotas::aws().with(&self.quotas).scaled(self.safety_factor).map_err(|e| ConfigError(e.0))?;
        let mut deprecated = Vec::new();
        if let Some(rate) = self.deprecated_acm_rate_limit {
            let bucket = positive("--acm-rate-limit", rate)?;
            deprecated.push(Override { service: Service::Acm, target: Target::Account, bucket: Bucket::new(bucket, burst(bucket * 2.0)) });
            warnings.push(format!(
                "--acm-rate-limit is deprecated: it adds an ACM bucket of {rate}/s to AWS's per-API quotas; use --aws-quota acm={rate}/{}",
                burst(rate * 2.0)
            ));
        }
        if let Some(rate) = self.deprecated_route53_rate_limit {
            let bucket = positive("--route53-rate-limit", rate)?;
            deprecated.push(Override { service: Service::Route53, target: Target::Account, bucket: Bucket::new(bucket, 5) });
            warnings.push(format!("--route53-rate-limit is deprecated and no longer per hosted zone: Route 53 throttles per account; it now sets the account's bucket to {rate}/s; use --aws-quota route53=RATE/BURST"));
        }
        quotas = quotas.with(&deprecated);

        let mut endpoints = Vec::new();
        for (service, url) in [
            (Service::Acm, &self.endpoint_url_acm),
            (Service::AcmPca, &self.endpoint_url_acm_pca),
            (Service::Route53, &self.endpoint_url_route53),
            (Service::CloudFront, &self.endpoint_url_cloudfront),
            (Service::Sts, &self.endpoint_url_sts),
        ] {
            if let Some(url) = url {
                endpoints.push(Endpoint { controller: None, service, url: url.clone() });
            }
        }
        if let Some(url) = &self.deprecated_tenant_endpoint_url {
            warnings
                .push("--tenant-aws-endpoint-url is deprecated: use --aws-endpoint-url-cloudfront (and --aws-endpoint-url-acm)".to_owned());
            for service in [Service::CloudFront, Service::Acm] {
                endpoints.push(Endpoint { controller: Some("tenant"), service, url: url.clone() });
            }
        }
        // As before: the tenant's Route 53 and STS calls went to its own endpoint otherwise.
        if let Some(url) = self.deprecated_tenant_route53_endpoint_url.as_ref().or(self.deprecated_tenant_endpoint_url.as_ref()) {
            if self.deprecated_tenant_route53_endpoint_url.is_some() {
                warnings.push(
                    "--tenant-route53-endpoint-url is deprecated: use --aws-endpoint-url-route53 and --aws-endpoint-url-sts".to_owned(),
                );
            }
            for service in [Service::Route53, Service::Sts] {
                endpoints.push(Endpoint { controller: Some("tenant"), service, url: url.clone() });
            }
        }
        if self.deprecated_tenant_region.is_some() {
            warnings.push("--tenant-aws-region is deprecated: use --aws-region".to_owned());
        }
        if self.timeout.is_zero() {
            return Err(ConfigError("--aws-default-timeout must be longer than zero".to_owned()));
        }
        let config = AwsConfig {
            region: self.region.clone().or_else(|| self.deprecated_tenant_region.clone()),
            endpoint_url: self.endpoint_url.clone(),
            endpoints,
            timeout: self.timeout,
            quotas,
            retry: RetryPolicy { max_retries: self.max_retries, ..RetryPolicy::default() },
            route53_batch: BatchPolicy { interval: self.route53_batch_interval, ..BatchPolicy::default() },
        };
        Ok((config, warnings))
    }
}

fn positive(flag: &str, rate: f64) -> Result<f64, ConfigError> {
    if rate.is_finite() && rate > 0.0 { Ok(rate) } else { Err(ConfigError(format!("{flag} must be a positive number, not {rate}"))) }
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
        aws: AwsArgs,
    }

    fn config(argv: &[&str]) -> (AwsConfig, Vec<String>) {
        let mut args = vec!["x"];
        args.extend_from_slice(argv);
        Cli::try_parse_from(args).unwrap().aws.config().unwrap()
    }

    #[test]
    fn defaults_are_aws_s_quotas_at_the_safety_factor() {
        let (config, warnings) = config(&[]);
        assert!(warnings.is_empty());
        assert_eq!(config, AwsConfig::default());
        assert_eq!(config.quotas.service(Service::Acm).operation("RequestCertificate"), Bucket::new(4.0, 4));
    }

    #[test]
    fn quota_overrides_apply_before_the_safety_factor() {
        let (config, _) =
            config(&["--aws-quota", "acm.RequestCertificate=10,route53.changes=200/2000", "--aws-quota-safety-factor", "0.5"]);
        assert_eq!(config.quotas.service(Service::Acm).operation("RequestCertificate"), Bucket::new(5.0, 5));
        assert_eq!(config.quotas.service(Service::Route53).changes, Some(Bucket::new(100.0, 1000)));
    }

    #[test]
    fn per_service_endpoints_override_the_process_s() {
        let (config, _) = config(&["--aws-endpoint-url", "http://all", "--aws-endpoint-url-route53", "http://r53"]);
        assert_eq!(config.endpoint_url.as_deref(), Some("http://all"));
        assert_eq!(config.endpoints, [Endpoint { controller: None, service: Service::Route53, url: "http://r53".into() }]);
    }

    #[test]
    fn deprecated_flags_keep_working_and_say_what_replaces_them() {
        let (config, warnings) = config(&[
            "--acm-rate-limit",
            "5",
            "--route53-rate-limit",
            "3",
            "--tenant-aws-endpoint-url",
            "http://ministack",
            "--tenant-route53-endpoint-url",
            "http://moto",
            "--tenant-aws-region",
            "eu-west-1",
        ]);
        assert_eq!(warnings.len(), 5, "one per deprecated flag: {warnings:?}");
        assert_eq!(config.quotas.service(Service::Acm).account, Some(Bucket::new(5.0, 10)));
        assert_eq!(config.quotas.service(Service::Route53).account, Some(Bucket::new(3.0, 5)));
        assert_eq!(config.region.as_deref(), Some("eu-west-1"));
        let tenant =
            |service| config.endpoints.iter().find(|e| e.controller == Some("tenant") && e.service == service).map(|e| e.url.as_str());
        assert_eq!(tenant(Service::CloudFront), Some("http://ministack"));
        assert_eq!(tenant(Service::Acm), Some("http://ministack"));
        assert_eq!(tenant(Service::Route53), Some("http://moto"));
        assert_eq!(tenant(Service::Sts), Some("http://moto"));
    }

    #[test]
    fn nonsense_is_refused() {
        for argv in [&["--aws-quota-safety-factor", "0"][..], &["--acm-rate-limit", "0"], &["--aws-default-timeout", "0s"]] {
            let mut args = vec!["x"];
            args.extend_from_slice(argv);
            assert!(Cli::try_parse_from(args).unwrap().aws.config().is_err(), "{argv:?}");
        }
        assert!(Cli::try_parse_from(["x", "--aws-quota", "s3=1"]).is_err(), "an unknown service is refused while parsing");
    }
}
