//! The command line of `status`, `explain`, `retry`, `rotate`, `pause`, `resume` and `check`, with
//! kubectl's connection flags, and what each command does.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use blockwork_rotator::Keys;
use clap::{Args, ValueEnum};
use jiff::Timestamp;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::actions::{self, Retried, Rotated};
use crate::read::{self, KindArg, Scope};
use crate::render::{self, Explanation, Row};

/// kubectl's connection flags.
#[derive(Clone, Debug, Default, Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The namespace [default: the context's].
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

impl KubeArgs {
    /// The client and the namespace to use, as kubectl picks them.
    pub async fn connect(&self) -> anyhow::Result<(Client, String)> {
        let options = KubeConfigOptions { context: self.context.clone(), cluster: self.cluster.clone(), user: self.user.clone() };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.context("loading the kubeconfig")?
            }
            None if options.context.is_some() || options.cluster.is_some() || options.user.is_some() => {
                kube::Config::from_kubeconfig(&options).await.context("loading the kubeconfig")?
            }
            None => kube::Config::infer().await.context("finding a kubeconfig (or the in-cluster configuration)")?,
        };
        let namespace = self.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
        let client = blockwork_runtime::client::client(config).context("building the Kubernetes client")?;
        Ok((client, namespace))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    #[default]
    Text,
    /// For scripts.
    Json,
}

/// The key rotator's annotation prefix, when it runs with another than the default.
#[derive(Clone, Debug, Args)]
pub struct RotatorPrefix {
    /// The key rotator's annotation prefix (its `--rotator-annotation-prefix`).
    #[arg(long = "rotator-annotation-prefix", env = "ROTATOR_ANNOTATION_PREFIX", default_value = blockwork_rotator::DEFAULT_ANNOTATION_PREFIX, value_name = "PREFIX")]
    pub prefix: String,
}

impl RotatorPrefix {
    fn keys(&self) -> anyhow::Result<Keys> {
        Ok(Keys::new(&self.prefix)?)
    }
}

#[derive(Clone, Debug, Args)]
pub struct StatusArgs {
    /// Only this kind: cert, dt (distributiontenant), cache or secret (the key rotator's).
    #[arg(value_name = "KIND", value_parser = KindArg::parse)]
    pub kind: Option<KindArg>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub rotator: RotatorPrefix,
}

#[derive(Clone, Debug, Args)]
pub struct ExplainArgs {
    /// The object, e.g. cert/api-prod, dt/shop, cache/sessions, secret/jwks-source.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub rotator: RotatorPrefix,
    /// For a Cert waiting for ACM, its validation records are read from Route 53 (read-only),
    /// with the AWS configuration `blockwork run` takes.
    #[command(flatten, next_help_heading = "AWS, as `blockwork run` takes it")]
    pub aws: blockwork_aws::AwsArgs,
}

#[derive(Clone, Debug, Args)]
pub struct RetryArgs {
    /// The object, e.g. cert/api-prod (a rotator target's source is retried).
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// How long to wait for the controller to take the request (`0s`: do not wait).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub rotator: RotatorPrefix,
}

#[derive(Clone, Debug, Args)]
pub struct RotateArgs {
    /// The Cache, e.g. cache/sessions.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// How long to wait for the controller to start the rotation (`0s`: do not wait).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(Clone, Debug, Args)]
pub struct PauseArgs {
    /// The object, e.g. cert/api-prod.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    #[command(flatten)]
    pub kube: KubeArgs,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::Span = text.parse().map_err(|e| format!("expected a duration like 30s or 2m: {e}"))?;
    let signed = span.to_duration(jiff::SpanRelativeTo::days_are_24_hours()).map_err(|e| e.to_string())?;
    Duration::try_from(signed).map_err(|e| e.to_string())
}

fn target(text: &str) -> anyhow::Result<(KindArg, String)> {
    read::parse_target(text).map_err(anyhow::Error::msg)
}

/// `blockwork status`: one row per object.
pub async fn status(args: &StatusArgs) -> anyhow::Result<String> {
    let (client, namespace) = args.kube.connect().await?;
    let scope = if args.all_namespaces { Scope::All } else { Scope::Namespace(namespace) };
    let kinds: Vec<KindArg> = match args.kind {
        Some(kind) => vec![kind],
        None => KindArg::ALL.to_vec(),
    };
    let now = Timestamp::now();
    let (reports, unlisted) = read::reports(&client, &scope, &kinds, &args.rotator.keys()?, now).await?;
    let rows: Vec<Row> = reports.iter().map(|r| Row::of(r, now)).collect();
    Ok(match args.output {
        Output::Json => {
            // Scripts read the rows on stdout; what could not be listed goes to stderr.
            for why in &unlisted {
                eprintln!("{}", why.note(&scope));
            }
            serde_json::to_string_pretty(&rows)? + "\n"
        }
        Output::Text => {
            let mut text = if rows.is_empty() {
                match &scope {
                    Scope::All => "No Blockwork objects.\n".to_owned(),
                    Scope::Namespace(namespace) => format!("No Blockwork objects in namespace {namespace} (-A for all namespaces).\n"),
                }
            } else {
                render::table(&rows, now)
            };
            for why in &unlisted {
                text.push_str(&why.note(&scope));
                text.push('\n');
            }
            text
        }
    })
}

/// `blockwork explain KIND/NAME`: the whole story of one object.
pub async fn explain(args: &ExplainArgs) -> anyhow::Result<String> {
    let (kind, name) = target(&args.target)?;
    let (client, namespace) = args.kube.connect().await?;
    let now = Timestamp::now();
    let mut report = read::report(&client, &namespace, kind, &name, &args.rotator.keys()?, now).await?;
    if kind == KindArg::Cert {
        let records = read::records_now(&client, &namespace, &name, &args.aws).await?;
        report.notes.extend(crate::kinds::records_now_note(&records, now));
        report.owned.extend(read::export_now(&client, &namespace, &name, &args.aws).await?);
    }
    let explanation = Explanation::of(report, now);
    Ok(match args.output {
        Output::Json => serde_json::to_string_pretty(&explanation)? + "\n",
        Output::Text => render::explain(&explanation, now),
    })
}

/// `blockwork retry KIND/NAME`.
pub async fn retry(args: &RetryArgs) -> anyhow::Result<String> {
    let (kind, name) = target(&args.target)?;
    let (client, namespace) = args.kube.connect().await?;
    let keys = args.rotator.keys()?;
    let reference = format!("{}/{name}", read::kind_name(kind).to_lowercase());
    match actions::retry(&client, &namespace, kind, &name, &keys, args.wait).await? {
        Retried::Handled { value } => {
            let now = Timestamp::now();
            let report = read::report(&client, &namespace, kind, &name, &keys, now).await?;
            let headline = crate::diagnose::diagnose(&report, now).headline;
            Ok(format!("retried {reference} (request {value}, taken by the controller); now: {headline}\n"))
        }
        Retried::Requested { value } => Ok(format!(
            "requested a retry of {reference} ({} = {value}); the controller has not taken it within {}s: is it running? `blockwork check`\n",
            blockwork_runtime::policy::RECONCILE_REQUESTED_ANNOTATION,
            args.wait.as_secs()
        )),
        Retried::Source { name: source } => Ok(format!("requested a reconcile of the rotator source secret/{source}\n")),
    }
}

/// `blockwork rotate cache/NAME`.
pub async fn rotate(args: &RotateArgs) -> anyhow::Result<String> {
    let (kind, name) = target(&args.target)?;
    let (client, namespace) = args.kube.connect().await?;
    let binding = format!("{name}-cache-binding");
    Ok(match actions::rotate(&client, &namespace, kind, &name, args.wait).await? {
        Rotated::Started { value } => format!(
            "rotation of cache/{name} started (request {value}): every server learns a new password, then the binding Secret {binding} publishes it and the previous one keeps working for the Cache's auth.gracePeriod; `blockwork explain cache/{name}` follows it\n"
        ),
        Rotated::Requested { value } => format!(
            "requested a rotation of cache/{name} ({} = {value}); the controller has not started it within {}s: a rotation under way finishes first, or the operator is not running (`blockwork check`)\n",
            blockwork_cache::auth::ROTATE_ANNOTATION,
            args.wait.as_secs()
        ),
    })
}

/// `blockwork pause|resume KIND/NAME`.
pub async fn pause(args: &PauseArgs, paused: bool) -> anyhow::Result<String> {
    let (kind, name) = target(&args.target)?;
    let (client, namespace) = args.kube.connect().await?;
    Ok(actions::set_paused(&client, &namespace, kind, &name, paused).await? + "\n")
}

/// Runs one of the commands on a runtime of its own and prints what it returns.
pub fn block_on(command: impl std::future::Future<Output = anyhow::Result<String>>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let text = runtime.block_on(command)?;
    print!("{text}");
    Ok(())
}

/// Runs `check` on a runtime of its own, prints its findings, and tells whether all passed.
pub fn block_on_check(check: impl std::future::Future<Output = anyhow::Result<(String, bool)>>) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let (text, passed) = runtime.block_on(check)?;
    print!("{text}");
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_people_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
