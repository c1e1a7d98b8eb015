//! Command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Blockwork: Kubernetes operators that turn platform runbooks into custom resources.
#[derive(Debug, Parser)]
#[command(name = "blockwork", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of every controller as multi-document YAML.
    Crds(CrdsArgs),
    /// Print the least-privilege RBAC (ClusterRole, leader-election Role, bindings) of the
    /// selected controllers as multi-document YAML.
    Rbac(RbacArgs),
    /// Run the controllers.
    #[command(after_help = crate::traces::HELP)]
    Run(Box<RunArgs>),
    /// Print the ValidatingWebhookConfiguration of the selected controllers' admission webhooks
    /// as YAML (nothing if none has any).
    Webhooks(WebhooksArgs),
    /// Write what the Helm chart is generated from (CRDs, each controller's RBAC rules and
    /// admission webhooks) into the chart's `files/` directory; `make chart` runs it.
    #[command(hide = true)]
    ChartFiles(ChartFilesArgs),
    /// For uninstalling: remove Blockwork's finalizers from every object of the selected
    /// controllers' CRDs, so the CRDs and namespaces can be deleted. Stop the operator first;
    /// external resources are left as they are.
    RemoveFinalizers(RemoveFinalizersArgs),
    /// One line per Blockwork object: state, Ready, time in that state, last error, next retry.
    Status(blockwork_inspect::commands::StatusArgs),
    /// Why is it stuck? The whole story of one object and what to do next.
    Explain(Box<blockwork_inspect::commands::ExplainArgs>),
    /// Reconcile an object now, clearing its backoff (annotates blockwork.dev/reconcile-requested-at).
    Retry(blockwork_inspect::commands::RetryArgs),
    /// Stop reconciling an object, deletion included (annotates blockwork.dev/paused=true).
    Pause(blockwork_inspect::commands::PauseArgs),
    /// Reconcile a paused object again (removes blockwork.dev/paused).
    Resume(blockwork_inspect::commands::PauseArgs),
    /// Preflight after installing: API server, CRDs, webhooks, leader Lease, AWS access, hosted
    /// zones; each finding pass or fail with the fix. Run it with the operator's flags and
    /// environment (e.g. `kubectl exec deploy/blockwork -- blockwork check`) to test its identity.
    Check(Box<blockwork_inspect::check::CheckArgs>),
    /// Print manifests that adopt what an AWS account already holds (ACM certificates as Certs),
    /// ready to commit. Reads AWS only, as the AWS default chain's credentials (or --role-arn);
    /// writes nothing anywhere. What it leaves out, and why, goes to stderr (docs/adopting.md).
    Import(Box<blockwork_inspect::import::ImportArgs>),
    /// Print a shell completion script (e.g. `source <(blockwork completions bash)`).
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The name the binary runs under: `kubectl blockwork` when installed as the kubectl plugin
/// `kubectl-blockwork` (kubectl runs plugins by that file name), else `blockwork`.
pub fn display_name(argv0: &std::ffi::OsStr) -> &'static str {
    let file = std::path::Path::new(argv0).file_name().and_then(|f| f.to_str()).unwrap_or_default();
    if file.starts_with("kubectl-blockwork") { "kubectl blockwork" } else { "blockwork" }
}

/// The command line, named as it was run.
pub fn command(name: &'static str) -> clap::Command {
    use clap::CommandFactory as _;
    Cli::command().name(name).bin_name(name)
}

#[derive(Debug, Args)]
pub struct RemoveFinalizersArgs {
    /// Controllers whose objects to release, comma separated [default: all registered controllers].
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub controllers: Option<Vec<String>>,
}

#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Controllers to grant, comma separated [default: all registered controllers].
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub controllers: Option<Vec<String>>,
    /// Name of the ClusterRole and prefix of the other objects.
    #[arg(long, default_value = "blockwork")]
    pub name: String,
    /// Namespace the operator runs in (its ServiceAccount and leader-election Lease).
    #[arg(long, default_value = "blockwork-system")]
    pub namespace: String,
    /// The operator's ServiceAccount.
    #[arg(long, default_value = "blockwork")]
    pub service_account: String,
    /// Namespaces the operator watches, comma separated: Roles in each instead of a ClusterRole
    /// (Blockwork's own kinds stay readable cluster-wide, for the admission webhooks)
    /// [default: all namespaces].
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACES")]
    pub namespaces: Vec<String>,
    /// The Secret of self-managed webhook certificates (`blockwork run
    /// --webhook-certificate-secret`): grants it, and patching the `caBundle` of the CRDs and
    /// the ValidatingWebhookConfiguration.
    #[arg(long, value_name = "NAME")]
    pub webhook_certificate_secret: Option<String>,
    /// The ValidatingWebhookConfiguration whose `caBundle` the operator patches.
    #[arg(long, default_value = "blockwork", value_name = "NAME")]
    pub webhook_configuration_name: String,
    /// Permissions of features enabled at install, comma separated, granted where the
    /// controllers' own rules are: `cert.export-secrets` (Secrets, for `blockwork run
    /// --export-secrets`) [default: none].
    #[arg(long = "opt-in", value_delimiter = ',', value_name = "CONTROLLER.FEATURE")]
    pub opt_in: Vec<String>,
    /// Features on by default whose permissions not to grant, comma separated, for features
    /// turned off at install: `cache.network-policies` (NetworkPolicies, for `blockwork run
    /// --cache-network-policies=false`) [default: none].
    #[arg(long = "opt-out", value_delimiter = ',', value_name = "CONTROLLER.FEATURE")]
    pub opt_out: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ChartFilesArgs {
    /// The chart's `files/` directory (charts/blockwork/files).
    #[arg(long, value_name = "DIR")]
    pub output_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<crd name>.yaml` per CRD into this directory instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    #[command(flatten)]
    pub location: WebhookLocation,
}

/// Where the API server reaches Blockwork's webhook server.
#[derive(Clone, Debug, Args)]
pub struct WebhookLocation {
    /// Base URL of the webhook server (e.g. `https://127.0.0.1:9443` for a local `blockwork
    /// run`), with `--webhook-ca-file` [default: the Service below].
    #[arg(long, value_name = "URL", requires = "webhook_ca_file")]
    pub webhook_url: Option<String>,
    /// PEM file of the CA that signed the webhook server's certificate (the `caBundle`).
    #[arg(long, value_name = "FILE", requires = "webhook_url")]
    pub webhook_ca_file: Option<PathBuf>,
    /// The webhook Service's namespace, when no URL is given (its `caBundle` is injected by
    /// cert-manager from the Certificate `<namespace>/<service>`).
    #[arg(long, default_value = "blockwork-system", value_name = "NAMESPACE")]
    pub webhook_service_namespace: String,
    /// The webhook Service's name, when no URL is given.
    #[arg(long, default_value = "blockwork-webhook", value_name = "NAME")]
    pub webhook_service_name: String,
}

#[derive(Debug, Args)]
pub struct WebhooksArgs {
    /// Controllers whose webhooks to register, comma separated [default: all registered controllers].
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub controllers: Option<Vec<String>>,
    #[command(flatten)]
    pub location: WebhookLocation,
    /// `failurePolicy` when the API server cannot reach the webhook: `true` rejects the request
    /// (Fail), `false` lets it through (Ignore).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub fail_closed: bool,
}

#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Controllers to run, comma separated [default (also when empty): all registered controllers].
    #[arg(long, env = "BLOCKWORK_CONTROLLERS", value_delimiter = ',', value_name = "NAMES")]
    pub controllers: Option<Vec<String>>,

    /// Namespaces to watch, comma separated [default: all namespaces].
    #[arg(long, env = "BLOCKWORK_NAMESPACES", value_delimiter = ',', value_name = "NAMESPACES")]
    pub namespaces: Vec<String>,

    /// Run the controllers only while holding the leader-election Lease.
    #[arg(long, env = "BLOCKWORK_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease [default: the pod's namespace, read from the
    /// service account, else `default`].
    #[arg(long, env = "BLOCKWORK_LEADER_ELECTION_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Name of the leader-election Lease.
    #[arg(long, env = "BLOCKWORK_LEADER_ELECTION_ID", default_value = "blockwork-leader", value_name = "NAME")]
    pub leader_election_id: String,

    /// Address of the metrics server (`/metrics`); `0` disables it.
    #[arg(long, env = "BLOCKWORK_METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080", value_parser = parse_bind_address, value_name = "ADDR")]
    pub metrics_bind_address: BindAddress,

    /// Address of the health probe server (`/healthz`, `/readyz`); `0` disables it.
    #[arg(long, env = "BLOCKWORK_HEALTH_PROBE_BIND_ADDRESS", default_value = "0.0.0.0:8081", value_parser = parse_bind_address, value_name = "ADDR")]
    pub health_probe_bind_address: BindAddress,

    /// Address of the HTTPS server for the controllers' webhooks (CRD conversion); `0` disables it.
    #[arg(long, env = "BLOCKWORK_WEBHOOK_BIND_ADDRESS", default_value = "0.0.0.0:9443", value_parser = parse_bind_address, value_name = "ADDR")]
    pub webhook_bind_address: BindAddress,

    /// Directory with the webhook server's `tls.crt` and `tls.key` (e.g. a cert-manager Secret
    /// mount) [default: `--webhook-certificate-secret` if given, else a self-signed certificate,
    /// for development only].
    #[arg(long, env = "BLOCKWORK_WEBHOOK_CERT_DIR", value_name = "DIR", conflicts_with = "webhook_certificate_secret")]
    pub webhook_cert_dir: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Self-managed webhook certificates")]
    pub webhook_certificates: WebhookCertificateArgs,

    /// Validating webhooks deny invalid requests; `false` allows them with a warning instead.
    #[arg(long, env = "BLOCKWORK_WEBHOOK_FAIL_CLOSED", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub webhook_fail_closed: bool,

    /// Most reconciles each controller runs at once; the Cert and DistributionTenant controllers
    /// run this many per AwsIdentity, so each account's objects proceed in parallel.
    #[arg(long, env = "BLOCKWORK_MAX_CONCURRENT_RECONCILES", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..), value_name = "N")]
    pub max_concurrent_reconciles: u16,

    /// Log format.
    #[arg(long, env = "BLOCKWORK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, in `tracing_subscriber::EnvFilter` syntax (e.g. `info,blockwork=debug`).
    #[arg(long, env = "RUST_LOG", default_value = "info", value_name = "FILTER")]
    pub log_level: String,

    #[command(flatten, next_help_heading = "AWS (every controller: one set of quotas, retries and clients for the process)")]
    pub aws: blockwork_aws::AwsArgs,

    #[command(flatten, next_help_heading = "AWS identities: which namespaces act as whom (AwsIdentity, docs/multi-account.md)")]
    pub identity: blockwork_identity::IdentityArgs,

    #[command(flatten, next_help_heading = "Cert: ACM certificates (controller `cert`)")]
    pub cert: blockwork_cert::CertArgs,

    #[command(flatten, next_help_heading = "DistributionTenant: CloudFront tenants (controller `tenant`)")]
    pub tenant: blockwork_tenant::TenantArgs,

    #[command(flatten, next_help_heading = "Key rotator (controller `rotator`)")]
    pub rotator: blockwork_rotator::RotatorArgs,

    #[command(flatten, next_help_heading = "Cache: the pods of every Cache (controller `cache`)")]
    pub cache: blockwork_cache::settings::CacheArgs,
}

/// `--webhook-certificate-secret` and what goes with it: Blockwork keeps its own CA and serving
/// certificate (no cert-manager needed).
#[derive(Clone, Debug, Args)]
pub struct WebhookCertificateArgs {
    /// Keep the webhook's CA and serving certificate in this Secret (in the Service's namespace),
    /// renew them well before expiry and patch the `caBundle` of the CRDs and the
    /// ValidatingWebhookConfiguration; the leader writes, every replica serves the current one.
    #[arg(long, env = "BLOCKWORK_WEBHOOK_CERTIFICATE_SECRET", value_name = "NAME")]
    pub webhook_certificate_secret: Option<String>,

    /// The webhook Service: the serving certificate names `<name>.<namespace>.svc`.
    #[arg(long = "webhook-service-name", env = "BLOCKWORK_WEBHOOK_SERVICE_NAME", default_value = "blockwork-webhook", value_name = "NAME")]
    pub service_name: String,

    /// The webhook Service's (and the Secret's) namespace [default: the pod's namespace].
    #[arg(long = "webhook-service-namespace", env = "BLOCKWORK_WEBHOOK_SERVICE_NAMESPACE", value_name = "NAMESPACE")]
    pub service_namespace: Option<String>,

    /// The ValidatingWebhookConfiguration whose `caBundle` to keep current (if it exists).
    #[arg(
        long = "webhook-configuration-name",
        env = "BLOCKWORK_WEBHOOK_CONFIGURATION_NAME",
        default_value = "blockwork",
        value_name = "NAME"
    )]
    pub configuration_name: String,

    /// Validity of each serving certificate; renewed when a third is left.
    #[arg(long = "webhook-certificate-validity", env = "BLOCKWORK_WEBHOOK_CERTIFICATE_VALIDITY", default_value = "2160h", value_parser = blockwork_cert::config::parse_duration, value_name = "DURATION")]
    pub certificate_validity: Duration,

    /// Validity of each CA; a new one is added to the bundle when a third is left.
    #[arg(long = "webhook-ca-validity", env = "BLOCKWORK_WEBHOOK_CA_VALIDITY", default_value = "43800h", value_parser = blockwork_cert::config::parse_duration, value_name = "DURATION")]
    pub ca_validity: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Where a server listens, if at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindAddress {
    Disabled,
    At(SocketAddr),
}

fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    if s == "0" {
        return Ok(BindAddress::Disabled);
    }
    s.parse().map(BindAddress::At).map_err(|e| format!("expected `host:port` or `0`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_kubectl_plugin_is_named_as_kubectl_runs_it() {
        assert_eq!(display_name(std::ffi::OsStr::new("/usr/local/bin/kubectl-blockwork")), "kubectl blockwork");
        assert_eq!(display_name(std::ffi::OsStr::new("kubectl-blockwork")), "kubectl blockwork");
        assert_eq!(display_name(std::ffi::OsStr::new("./target/debug/blockwork")), "blockwork");
        command("kubectl blockwork").debug_assert();
    }

    #[test]
    fn explain_takes_kubectl_s_flags() {
        let cli =
            Cli::try_parse_from(["blockwork", "explain", "cert/api", "-n", "team-a", "--context", "prod", "-o", "json"]).expect("parses");
        let Command::Explain(args) = cli.command else { unreachable!("explain") };
        assert_eq!(
            (args.target.as_str(), args.kube.namespace.as_deref(), args.kube.context.as_deref()),
            ("cert/api", Some("team-a"), Some("prod"))
        );
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind_address("0"), Ok(BindAddress::Disabled));
        assert_eq!(parse_bind_address("127.0.0.1:9"), Ok(BindAddress::At(SocketAddr::from(([127, 0, 0, 1], 9)))));
        assert!(parse_bind_address("localhost").is_err());
    }

    #[test]
    fn run_defaults() {
        let cli = Cli::try_parse_from(["blockwork", "run"]).expect("parses");
        let Command::Run(args) = cli.command else { unreachable!("run") };
        assert_eq!(args.controllers, None);
        assert!(args.namespaces.is_empty());
        assert!(!args.leader_elect);
        assert_eq!(args.leader_election_id, "blockwork-leader");
        assert_eq!(args.max_concurrent_reconciles, 3);
        assert_eq!(args.metrics_bind_address, BindAddress::At(SocketAddr::from(([0, 0, 0, 0], 8080))));
        assert_eq!(args.health_probe_bind_address, BindAddress::At(SocketAddr::from(([0, 0, 0, 0], 8081))));
    }

    #[test]
    fn lists_are_comma_separated() {
        let cli = Cli::try_parse_from(["blockwork", "run", "--controllers", "a,b", "--namespaces", "x,y"]).expect("parses");
        let Command::Run(args) = cli.command else { unreachable!("run") };
        assert_eq!(args.controllers, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(args.namespaces, ["x", "y"]);
    }

    #[test]
    fn import_takes_its_namespace_and_lists_of_distributions_and_zones() {
        let argv = ["blockwork", "import", "-n", "team-a", "--distribution", "E1,E2", "--hosted-zone", "Z1", "--environment", "prod"];
        let Command::Import(args) = Cli::try_parse_from(argv).expect("parses").command else { unreachable!("import") };
        assert_eq!((args.namespace.as_str(), args.distributions.as_slice()), ("team-a", ["E1", "E2"].map(str::to_owned).as_slice()));
        assert_eq!((args.hosted_zones.as_slice(), args.environment.as_deref()), (["Z1".to_owned()].as_slice(), Some("prod")));
    }

    #[test]
    fn import_refuses_to_guess_a_namespace_or_read_zones_without_a_distribution() {
        assert!(Cli::try_parse_from(["blockwork", "import"]).is_err());
        assert!(Cli::try_parse_from(["blockwork", "import", "-n", "a", "--hosted-zone", "Z1"]).is_err());
        assert!(Cli::try_parse_from(["blockwork", "import", "-n", "a", "--external-id", "x"]).is_err());
    }

    #[test]
    fn run_s_help_names_the_opentelemetry_variables_it_honours() {
        use clap::CommandFactory as _;
        let mut command = Cli::command();
        let help = command.find_subcommand_mut("run").expect("run").render_help().to_string();
        for variable in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_SDK_DISABLED"] {
            assert!(help.contains(variable), "{variable} missing from:\n{help}");
        }
    }

    #[test]
    fn zero_concurrent_reconciles_is_rejected() {
        assert!(Cli::try_parse_from(["blockwork", "run", "--max-concurrent-reconciles", "0"]).is_err());
    }
}
