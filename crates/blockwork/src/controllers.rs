//! The controllers this binary can run, and what each gets when it starts.
//!
//! Every operator adds one [`Controller`] entry to [`registered`]; `blockwork crds`,
//! `blockwork rbac` and `blockwork run` find it there. `blockwork run` calls each selected
//! controller's `start` once, before the metrics server starts, with the controller's metrics
//! sub-registry; `start` registers the controller's own metrics there and returns the
//! [`Runnable`] bound to them, which runs once this process leads, with a [`Host`].

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use blockwork_runtime::RuntimeMetrics;
use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use prometheus_client::registry::Registry;

pub use crate::cli::RunArgs;
pub use crate::shutdown::Shutdown;
pub use blockwork_runtime::Namespaces;

/// One controller of the process.
///
/// A new operator's entry looks like:
///
/// ```ignore
/// Controller {
///     name: "widget",
///     crds: || vec![Widget::crd()],
///     rbac: widget::rbac,
///     opt_in_rbac: &[],
///     webhooks: Webhooks::NONE,
///     metrics_prefix: "blockwork_widget",
///     start: |registry| {
///         let metrics = widget::Metrics::register(registry);
///         runnable(move |host| widget::run(host.client, metrics, host.namespaces, host.concurrency, host.shutdown.wait_owned()))
///     },
/// }
/// ```
///
/// where `widget::run` builds a `blockwork_runtime::Context` from the client and
/// `host.runtime_metrics`, and calls `blockwork_runtime::run` once per namespace
/// (`blockwork_runtime::run_in`) until the shutdown future completes.
#[derive(Clone, Copy)]
pub struct Controller {
    /// Unique, `lower_snake_case`: what `--controllers` selects, and the `controller` label of
    /// the runtime's metrics.
    pub name: &'static str,
    /// The CRDs whose root types this controller owns (`kube::CustomResourceExt::crd()`).
    pub crds: fn() -> Vec<CustomResourceDefinition>,
    /// The cluster permissions the controller needs, kept beside its code; `blockwork rbac`
    /// turns them into a ClusterRole. Leases and events, which every controller of the process
    /// shares, come from [`crate::rbac`].
    pub rbac: fn() -> Vec<PolicyRule>,
    /// Permissions of features enabled at install, granted only when asked for (`blockwork rbac
    /// --opt-in <controller>.<name>`; the chart's `controllers.<controller>.<name in camelCase>`).
    pub opt_in_rbac: &'static [OptInRbac],
    /// The controller's webhooks (CRD conversion, admission), served by every replica, leader
    /// or not; [`Webhooks::NONE`] if there are none.
    pub webhooks: Webhooks,
    /// The prefix of the controller's own metrics: `blockwork_<name>`, or the prefix of the names
    /// its seed prescribes, which users' dashboards and alerts use (`cert_operator`).
    pub metrics_prefix: &'static str,
    /// Registers the controller's own metrics, unprefixed, in the registry it is given (the
    /// sub-registry of [`Controller::metrics_prefix`]), and returns the controller bound to
    /// them. Called once, before anything starts.
    pub start: fn(&mut Registry) -> Runnable,
}

/// Permissions a controller needs only for a feature enabled at install (least privilege: without
/// them its RBAC is as if the feature did not exist).
#[derive(Clone, Copy)]
pub struct OptInRbac {
    /// kebab-case, e.g. `export-secrets`: `--opt-in cert.export-secrets`.
    pub name: &'static str,
    pub rules: fn() -> Vec<PolicyRule>,
    /// The feature's flag is on unless turned off (the Cache's NetworkPolicies): `blockwork rbac`
    /// grants it unless `--opt-out`, as the chart's value of the feature defaults to true.
    pub enabled_by_default: bool,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A started controller: runs until [`Host::shutdown`] fires, then drains and returns `Ok(())`.
/// Returning earlier, with or without an error, stops the process.
pub type Runnable = Box<dyn FnOnce(Host) -> BoxFuture<'static, anyhow::Result<()>> + Send>;

/// A [`Runnable`] from an async function of the [`Host`].
pub fn runnable<F>(run: impl FnOnce(Host) -> F + Send + 'static) -> Runnable
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    Box::new(move |host| Box::pin(run(host)))
}

/// What every controller gets when it runs: the same for all controllers of the process.
#[derive(Clone)]
pub struct Host {
    pub client: Client,
    /// Where to watch; `blockwork_runtime::run_in` runs one watch per namespace.
    pub namespaces: Namespaces,
    /// Upper bound of concurrent reconciles per watch, for
    /// `kube::runtime::controller::Config::concurrency`. At least 1.
    pub concurrency: u16,
    /// Fires on SIGINT/SIGTERM; pass `shutdown.wait_owned()` to `blockwork_runtime::run` (or
    /// `Controller::graceful_shutdown_on`).
    pub shutdown: Shutdown,
    /// The runtime's metrics, registered once for all controllers (`blockwork_reconciles_total`
    /// and so on, labelled by controller): for `blockwork_runtime::Context::new`.
    pub runtime_metrics: Arc<RuntimeMetrics>,
    /// The process's AWS layer: every controller's AWS calls go through it, so they share the
    /// account's quotas (`blockwork_aws`).
    pub aws: Arc<blockwork_aws::Aws>,
    /// The platform team's mappings of namespaces to AWS identities (one watch per process, from
    /// its first use): which identity each object's AWS calls act as (ADR 0014).
    pub identities: Arc<blockwork_identity::Identities>,
    /// The command line, for the controller's own flags (flattened into [`RunArgs`]).
    pub args: Arc<RunArgs>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("namespaces", &self.namespaces).field("concurrency", &self.concurrency).finish_non_exhaustive()
    }
}

/// What a controller serves on the webhook server.
#[derive(Clone, Copy)]
pub struct Webhooks {
    /// The routes (e.g. `/convert/cache`, `/validate/cert`); an error stops start-up.
    pub routes: fn(&WebhookContext) -> anyhow::Result<axum::Router>,
    /// The validating webhooks to register for its routes, with `clientConfig.service.path` set
    /// to the route; `blockwork webhooks` fills in where the server is.
    pub validating: fn() -> Vec<ValidatingWebhook>,
}

impl Webhooks {
    pub const NONE: Self = Self { routes: |_| Ok(axum::Router::new()), validating: Vec::new };
}

/// What webhook routes get when the server starts.
#[derive(Clone)]
pub struct WebhookContext {
    /// For checks across objects (e.g. a domain used by two Certs).
    pub client: Client,
    /// `--webhook-fail-closed`: deny invalid requests (default), or allow them with a warning.
    pub fail_closed: bool,
    /// The process's mappings of namespaces to AWS identities, shared with the controllers.
    pub identities: Arc<blockwork_identity::Identities>,
    /// The command line, for the controller's own flags.
    pub args: Arc<RunArgs>,
}

/// Every controller of Blockwork. Each operator adds its entry here.
pub fn registered() -> Vec<Controller> {
    vec![
        Controller {
            name: "cache",
            crds: || vec![blockwork_cache::crd::crd()],
            rbac: blockwork_cache::rbac,
            opt_in_rbac: &[OptInRbac { name: "network-policies", rules: blockwork_cache::network_policy_rbac, enabled_by_default: true }],
            webhooks: Webhooks { routes: |_| Ok(blockwork_cache::conversion::router()), validating: Vec::new },
            metrics_prefix: "blockwork_cache",
            start: |registry| {
                let metrics = blockwork_cache::metrics::CacheMetrics::register(registry);
                runnable(move |host| run_cache(host, metrics))
            },
        },
        Controller {
            name: blockwork_identity::CONTROLLER,
            crds: || vec![blockwork_identity::crd()],
            rbac: blockwork_identity::rbac,
            opt_in_rbac: &[],
            webhooks: Webhooks {
                routes: |ctx| Ok(blockwork_identity::webhook::router(Arc::clone(&ctx.identities), ctx.fail_closed)),
                validating: || vec![blockwork_identity::webhook::validating_webhook()],
            },
            metrics_prefix: "blockwork_aws_identity",
            start: |_| runnable(run_aws_identity),
        },
        Controller {
            name: blockwork_cert::CONTROLLER,
            // The mappings are read by the controller: its CRD is required with it.
            crds: || vec![blockwork_cert::crd(), blockwork_identity::crd()],
            rbac: blockwork_cert::rbac,
            opt_in_rbac: &[OptInRbac { name: "export-secrets", rules: blockwork_cert::export_rbac, enabled_by_default: false }],
            webhooks: Webhooks { routes: cert_webhook, validating: || vec![blockwork_cert::webhook::validating_webhook()] },
            // Seed 000's names, which its dashboards and alerts use.
            metrics_prefix: "cert_operator",
            start: |registry| {
                let metrics = blockwork_cert::CertMetrics::register(registry);
                runnable(move |host| run_cert(host, metrics))
            },
        },
        Controller {
            name: blockwork_tenant::CONTROLLER,
            crds: || vec![blockwork_tenant::crd(), blockwork_identity::crd()],
            rbac: blockwork_tenant::rbac,
            opt_in_rbac: &[],
            webhooks: Webhooks {
                routes: |ctx| Ok(blockwork_tenant::webhook::router(Arc::clone(&ctx.identities), ctx.fail_closed)),
                validating: || vec![blockwork_tenant::webhook::validating_webhook()],
            },
            // Seed 001's names.
            metrics_prefix: blockwork_tenant::metrics::PREFIX,
            start: |registry| {
                let metrics = blockwork_tenant::TenantMetrics::register(registry);
                runnable(move |host| run_tenant(host, metrics))
            },
        },
        Controller {
            name: "rotator",
            crds: Vec::new,
            rbac: blockwork_rotator::rbac,
            opt_in_rbac: &[],
            webhooks: Webhooks::NONE,
            metrics_prefix: "blockwork_rotator",
            start: |registry| {
                let metrics = blockwork_rotator::Metrics::register(registry);
                runnable(move |host| run_rotator(host, metrics))
            },
        },
    ]
}

fn cert_config(args: &RunArgs) -> anyhow::Result<blockwork_cert::CertConfig> {
    blockwork_cert::CertConfig::from_args(&args.cert)
        .context("controller `cert` is not configured (leave it out of --controllers if you do not use it)")
}

fn cert_webhook(ctx: &WebhookContext) -> anyhow::Result<axum::Router> {
    let config = cert_config(&ctx.args)?;
    let issuance = blockwork_cert::webhook::Issuance {
        export_secrets: config.export_secrets,
        certificate_authorities: config.certificate_authorities,
        region: ctx.args.aws.region.clone(),
    };
    Ok(blockwork_cert::webhook::router(ctx.client.clone(), Arc::clone(&ctx.identities), &config.zones, ctx.fail_closed, issuance))
}

async fn run_cert(host: Host, metrics: Arc<blockwork_cert::CertMetrics>) -> anyhow::Result<()> {
    let config = cert_config(&host.args)?;
    let shutdown = host.shutdown.wait_owned();
    let (aws, identities) = (host.aws, host.identities);
    blockwork_cert::run(host.client, config, aws, identities, host.runtime_metrics, metrics, host.namespaces, host.concurrency, shutdown)
        .await;
    Ok(())
}

/// The mappings' status (`Ready`), kept by the leader.
async fn run_aws_identity(host: Host) -> anyhow::Result<()> {
    blockwork_identity::status::run(host.client, host.identities, host.aws, host.shutdown.wait_owned()).await;
    Ok(())
}

async fn run_tenant(host: Host, metrics: Arc<blockwork_tenant::TenantMetrics>) -> anyhow::Result<()> {
    let args = host.args.tenant.clone();
    let shutdown = host.shutdown.wait_owned();
    let (aws, identities) = (host.aws, host.identities);
    blockwork_tenant::run(host.client, args, aws, identities, host.runtime_metrics, metrics, host.namespaces, host.concurrency, shutdown)
        .await;
    Ok(())
}

async fn run_rotator(host: Host, metrics: Arc<blockwork_rotator::Metrics>) -> anyhow::Result<()> {
    let config = rotator_config(&host.args.rotator, &host.namespaces, host.concurrency)?;
    blockwork_rotator::run(host.client, config, metrics, host.shutdown.wait_owned()).await?;
    Ok(())
}

/// The rotator's own namespaces (`ROTATOR_NAMESPACES`, as the original operator reads them) win
/// over the process's `--namespaces`.
fn rotator_config(
    args: &blockwork_rotator::RotatorArgs,
    namespaces: &Namespaces,
    concurrency: u16,
) -> anyhow::Result<blockwork_rotator::Config> {
    let global = match namespaces {
        Namespaces::All => Vec::new(),
        Namespaces::Only(namespaces) => namespaces.clone(),
    };
    Ok(blockwork_rotator::Config::new(args, &global, concurrency)?)
}

fn cache_settings(args: &RunArgs) -> anyhow::Result<blockwork_cache::settings::Settings> {
    blockwork_cache::settings::Settings::from_args(&args.cache).context("controller `cache` cannot build pods with these settings")
}

/// Checks the flags of the `selected` controllers that need no connection, so a value no
/// controller could work with stops the process before anything starts, with the flag named.
pub fn check_args(selected: &[Controller], args: &RunArgs) -> anyhow::Result<()> {
    if selected.iter().any(|c| c.name == "cache") {
        cache_settings(args)?;
    }
    Ok(())
}

async fn run_cache(host: Host, metrics: Arc<blockwork_cache::metrics::CacheMetrics>) -> anyhow::Result<()> {
    use blockwork_cache::controller::{Context, run};
    let context = Context::new(host.client.clone(), cache_settings(&host.args)?, metrics);
    blockwork_runtime::run_in(&host.namespaces, |scope| {
        let api = blockwork_runtime::namespaces::api(&host.client, scope.as_deref());
        run(Arc::clone(&context), api, scope, host.concurrency, host.shutdown.wait_owned())
    })
    .await;
    Ok(())
}

/// The names of the [`registered`] controllers, in order.
pub fn names() -> Vec<&'static str> {
    registered().iter().map(|c| c.name).collect()
}

/// Picks the controllers named in `wanted` (all of them if `None` or empty, e.g. from an empty
/// environment variable), in registry order. Fails on an unknown or repeated name, listing the
/// valid ones.
pub fn select(available: Vec<Controller>, wanted: Option<&[String]>) -> Result<Vec<Controller>, String> {
    let wanted: Vec<String> = wanted.unwrap_or_default().iter().map(|w| w.trim().to_owned()).filter(|w| !w.is_empty()).collect();
    if wanted.is_empty() {
        return Ok(available);
    }
    let valid = || {
        let names: Vec<_> = available.iter().map(|c| c.name).collect();
        if names.is_empty() { "none (no controller is registered yet)".to_owned() } else { names.join(", ") }
    };
    let unknown: Vec<&str> = wanted.iter().map(String::as_str).filter(|w| !available.iter().any(|c| c.name == *w)).collect();
    if !unknown.is_empty() {
        return Err(format!("unknown controller(s): {}; valid controllers: {}", unknown.join(", "), valid()));
    }
    for (i, name) in wanted.iter().enumerate() {
        if wanted[..i].contains(name) {
            return Err(format!("controller `{name}` is listed twice"));
        }
    }
    Ok(available.into_iter().filter(|c| wanted.iter().any(|w| w == c.name)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(name: &'static str) -> Controller {
        Controller {
            name,
            crds: Vec::new,
            rbac: Vec::new,
            opt_in_rbac: &[],
            webhooks: Webhooks::NONE,
            metrics_prefix: "blockwork_fake",
            start: |_| runnable(|_| async { Ok(()) }),
        }
    }

    fn names(controllers: &[Controller]) -> Vec<&'static str> {
        controllers.iter().map(|c| c.name).collect()
    }

    #[test]
    fn names_are_unique() {
        let mut all = super::names();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), registered().len());
    }

    #[test]
    fn select_defaults_to_all_and_keeps_registry_order() {
        let available = vec![fake("a"), fake("b"), fake("c")];
        assert_eq!(names(&select(available.clone(), None).expect("all")), ["a", "b", "c"]);
        let wanted = ["c".to_owned(), "a".to_owned()];
        assert_eq!(names(&select(available, Some(&wanted)).expect("some")), ["a", "c"]);
    }

    #[test]
    fn select_rejects_unknown_names_listing_the_valid_ones() {
        let err = select(vec![fake("a"), fake("b")], Some(&["nosuch".to_owned()])).expect_err("unknown");
        assert_eq!(err, "unknown controller(s): nosuch; valid controllers: a, b");
        let err = select(vec![], Some(&["nosuch".to_owned()])).expect_err("unknown");
        assert!(err.contains("nosuch") && err.contains("none"), "{err}");
        let err = select(vec![fake("a")], Some(&["a".to_owned(), "a".to_owned()])).expect_err("twice");
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn select_treats_an_empty_list_as_all() {
        let selected = select(vec![fake("a"), fake("b")], Some(&[String::new()])).expect("all");
        assert_eq!(names(&selected), ["a", "b"]);
    }

    fn rotator_namespaces(argv: &[&str]) -> Option<Vec<String>> {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from(argv).expect("parses");
        let crate::cli::Command::Run(args) = cli.command else { unreachable!("run") };
        rotator_config(&args.rotator, &Namespaces::from_list(args.namespaces.clone()), 1).expect("valid").namespaces
    }

    #[test]
    fn the_rotator_follows_namespaces_unless_it_has_its_own() {
        assert_eq!(rotator_namespaces(&["blockwork", "run"]), None, "all namespaces");
        assert_eq!(rotator_namespaces(&["blockwork", "run", "--namespaces", "a,b"]), Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(rotator_namespaces(&["blockwork", "run", "--namespaces", "a", "--rotator-namespaces", "c"]), Some(vec!["c".to_owned()]));
    }
}
