//! The controllers this binary can run, and what each gets when it starts.
//!
//! Every operator adds one [`Controller`] entry to [`registered`]; `blockwork crds`,
//! `blockwork rbac` and `blockwork run` find it there.

use std::any::Any;
use std::sync::Arc;

use anyhow::Context as _;
use blockwork_runtime::RuntimeMetrics;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, Resource};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;

pub use crate::cli::RunArgs;
pub use crate::shutdown::Shutdown;

/// One controller of the process.
///
/// A new operator's entry looks like:
///
/// ```ignore
/// Controller {
///     name: "cert",
///     crds: || vec![Certificate::crd()],
///     rbac: cert::rbac,
///     webhooks: Webhooks::NONE,
///     register_metrics: no_metrics,
///     run: |ctx| Box::pin(cert::run(ctx)),
/// }
/// ```
///
/// where `cert::run` builds a `blockwork_runtime::Context` from `ctx.client` and
/// `ctx.runtime_metrics`, and calls `blockwork_runtime::run` once per `ctx.namespaces.apis()`
/// with `ctx.max_concurrent_reconciles` and `ctx.shutdown.wait_owned()`.
#[derive(Clone, Copy)]
pub struct Controller {
    /// Unique, `lower_snake_case`: what `--controllers` selects, and the prefix of the
    /// controller's own metrics.
    pub name: &'static str,
    /// The CRDs whose root types this controller owns (`kube::CustomResourceExt::crd()`).
    pub crds: fn() -> Vec<CustomResourceDefinition>,
    /// The cluster permissions the controller needs, kept beside its code; `blockwork rbac`
    /// turns them into a ClusterRole. Leases and events, which every controller of the process
    /// shares, come from [`crate::rbac`].
    pub rbac: fn() -> Vec<PolicyRule>,
    /// The controller's webhooks (CRD conversion, admission), served by every replica, leader
    /// or not; [`Webhooks::NONE`] if there are none.
    pub webhooks: Webhooks,
    /// Registers the controller's own metrics (beyond [`ControllerContext::runtime_metrics`]),
    /// before the metrics server starts, in a sub-registry of the root registry with the
    /// controller's prefix: `blockwork_<name>`, or the metric names its seed prescribes (e.g.
    /// `cert_operator_`). What it returns reaches `run` as [`ControllerContext::metrics`];
    /// [`no_metrics`] if there are none.
    pub register_metrics: fn(&mut Registry) -> ControllerMetrics,
    /// Runs the controller until [`ControllerContext::shutdown`] fires, then drains and returns
    /// `Ok(())`. Returning earlier, with or without an error, stops the process.
    pub run: fn(ControllerContext) -> BoxFuture<'static, anyhow::Result<()>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Whatever a controller's `register_metrics` returned; see [`ControllerContext::metrics`].
pub type ControllerMetrics = Arc<dyn Any + Send + Sync>;

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
    /// The command line, for the controller's own flags.
    pub args: Arc<RunArgs>,
}

/// `register_metrics` for a controller without metrics of its own.
pub fn no_metrics(_: &mut Registry) -> ControllerMetrics {
    Arc::new(())
}

/// Every controller of Blockwork. Each operator adds its entry here.
pub fn registered() -> Vec<Controller> {
    vec![
        Controller {
            name: "cache",
            crds: || vec![blockwork_cache::crd::crd()],
            rbac: blockwork_cache::rbac,
            webhooks: Webhooks { routes: |_| Ok(blockwork_cache::conversion::router()), validating: Vec::new },
            register_metrics: no_metrics,
            run: |ctx| Box::pin(run_cache(ctx)),
        },
        Controller {
            name: blockwork_cert::CONTROLLER,
            crds: || vec![blockwork_cert::crd()],
            rbac: blockwork_cert::rbac,
            webhooks: Webhooks { routes: cert_webhook, validating: || vec![blockwork_cert::webhook::validating_webhook()] },
            // Seed 000's metric names, which its dashboards and alerts use.
            register_metrics: |registry| blockwork_cert::CertMetrics::register(registry.sub_registry_with_prefix("cert_operator")),
            run: |ctx| Box::pin(run_cert(ctx)),
        },
        Controller {
            name: blockwork_tenant::CONTROLLER,
            crds: || vec![blockwork_tenant::crd()],
            rbac: blockwork_tenant::rbac,
            webhooks: Webhooks {
                routes: |ctx| Ok(blockwork_tenant::webhook::router(ctx.fail_closed)),
                validating: || vec![blockwork_tenant::webhook::validating_webhook()],
            },
            // Seed 001's metric names (`cloudfront_tenant_operator_…`), registered at the root.
            register_metrics: |registry| blockwork_tenant::TenantMetrics::register(registry),
            run: |ctx| Box::pin(run_tenant(ctx)),
        },
        Controller {
            name: "rotator",
            crds: Vec::new,
            rbac: blockwork_rotator::rbac,
            webhooks: Webhooks::NONE,
            register_metrics: |registry| blockwork_rotator::Metrics::register(registry.sub_registry_with_prefix("blockwork_rotator")),
            run: |ctx| Box::pin(run_rotator(ctx)),
        },
    ]
}

fn cert_webhook(ctx: &WebhookContext) -> anyhow::Result<axum::Router> {
    let config = blockwork_cert::CertConfig::from_args(&ctx.args.cert)
        .context("controller `cert` is not configured (leave it out of --controllers if you do not use it)")?;
    Ok(blockwork_cert::webhook::router(ctx.client.clone(), config.zones, ctx.fail_closed))
}

async fn run_cert(ctx: ControllerContext) -> anyhow::Result<()> {
    let metrics = ctx.metrics::<blockwork_cert::CertMetrics>()?;
    let config = blockwork_cert::CertConfig::from_args(&ctx.args.cert)
        .context("controller `cert` is not configured (leave it out of --controllers if you do not use it)")?;
    let namespaces = match &ctx.namespaces {
        Namespaces::All => None,
        Namespaces::Only(namespaces) => Some(namespaces.clone()),
    };
    blockwork_cert::run(
        ctx.client,
        config,
        ctx.aws,
        ctx.runtime_metrics,
        metrics,
        namespaces,
        ctx.max_concurrent_reconciles,
        ctx.shutdown.wait_owned(),
    )
    .await;
    Ok(())
}

async fn run_tenant(ctx: ControllerContext) -> anyhow::Result<()> {
    let metrics = ctx.metrics::<blockwork_tenant::TenantMetrics>()?;
    let namespaces = match &ctx.namespaces {
        Namespaces::All => None,
        Namespaces::Only(namespaces) => Some(namespaces.clone()),
    };
    let args = ctx.args.tenant.clone();
    blockwork_tenant::run(
        ctx.client,
        args,
        ctx.aws,
        ctx.runtime_metrics,
        metrics,
        namespaces,
        ctx.max_concurrent_reconciles,
        ctx.shutdown.wait_owned(),
    )
    .await;
    Ok(())
}

async fn run_rotator(ctx: ControllerContext) -> anyhow::Result<()> {
    let metrics = ctx.metrics::<blockwork_rotator::Metrics>()?;
    let config = rotator_config(&ctx.args.rotator, &ctx.namespaces, ctx.max_concurrent_reconciles)?;
    blockwork_rotator::run(ctx.client, config, metrics, ctx.shutdown.wait_owned()).await?;
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

async fn run_cache(ctx: ControllerContext) -> anyhow::Result<()> {
    let context = blockwork_cache::controller::Context::new(ctx.client.clone());
    let scopes: Vec<Option<String>> = match &ctx.namespaces {
        Namespaces::All => vec![None],
        Namespaces::Only(namespaces) => namespaces.iter().cloned().map(Some).collect(),
    };
    let runs = scopes.into_iter().map(|namespace| {
        let api = match &namespace {
            Some(ns) => Api::namespaced(ctx.client.clone(), ns),
            None => Api::all(ctx.client.clone()),
        };
        blockwork_cache::controller::run(context.clone(), api, namespace, ctx.max_concurrent_reconciles, ctx.shutdown.wait_owned())
    });
    futures::future::join_all(runs).await;
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

/// The namespaces the controllers watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    All,
    /// Never empty.
    Only(Vec<String>),
}

impl Namespaces {
    /// `All` for an empty list (blank entries, e.g. from an empty environment variable, ignored).
    pub fn from_list(namespaces: Vec<String>) -> Self {
        let namespaces: Vec<String> = namespaces.into_iter().map(|ns| ns.trim().to_owned()).filter(|ns| !ns.is_empty()).collect();
        if namespaces.is_empty() { Self::All } else { Self::Only(namespaces) }
    }

    /// One `Api` per watched namespace, or a single cluster-wide one: a controller runs one
    /// `kube::runtime::Controller` (or one watcher) per `Api`.
    pub fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match self {
            Self::All => vec![Api::all(client.clone())],
            Self::Only(namespaces) => namespaces.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect(),
        }
    }
}

/// What a controller gets when it starts.
#[derive(Clone)]
pub struct ControllerContext {
    pub client: Client,
    pub namespaces: Namespaces,
    /// Upper bound of concurrent reconciles, for `kube::runtime::controller::Config::concurrency`.
    /// At least 1.
    pub max_concurrent_reconciles: u16,
    /// Fires on SIGINT/SIGTERM; pass `shutdown.wait_owned()` to `blockwork_runtime::run` (or
    /// `Controller::graceful_shutdown_on`).
    pub shutdown: Shutdown,
    /// The runtime's metrics, registered once for all controllers (`blockwork_reconciles_total`
    /// and so on, labelled by controller): for `blockwork_runtime::Context::new`.
    pub runtime_metrics: Arc<RuntimeMetrics>,
    /// What the controller's `register_metrics` returned.
    pub metrics: ControllerMetrics,
    /// The command line, for the controller's own flags (flattened into [`RunArgs`]).
    pub args: Arc<RunArgs>,
    /// The process's AWS layer: every controller's AWS calls go through it, so they share the
    /// account's quotas (`blockwork_aws`).
    pub aws: Arc<blockwork_aws::Aws>,
}

impl ControllerContext {
    /// The controller's metrics as the type its `register_metrics` returned.
    pub fn metrics<T: Any + Send + Sync>(&self) -> anyhow::Result<Arc<T>> {
        downcast_metrics(&self.metrics)
    }
}

fn downcast_metrics<T: Any + Send + Sync>(metrics: &ControllerMetrics) -> anyhow::Result<Arc<T>> {
    Arc::clone(metrics).downcast::<T>().ok().with_context(|| format!("controller metrics are not a {}", std::any::type_name::<T>()))
}

impl std::fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerContext")
            .field("namespaces", &self.namespaces)
            .field("max_concurrent_reconciles", &self.max_concurrent_reconciles)
            .field("runtime_metrics", &self.runtime_metrics)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(name: &'static str) -> Controller {
        Controller {
            name,
            crds: Vec::new,
            rbac: Vec::new,
            webhooks: Webhooks::NONE,
            register_metrics: no_metrics,
            run: |_| Box::pin(async { Ok(()) }),
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

    #[test]
    fn metrics_downcast_to_the_registered_type() {
        let metrics: ControllerMetrics = Arc::new(7_u32);
        assert_eq!(*downcast_metrics::<u32>(&metrics).expect("u32"), 7);
        assert!(downcast_metrics::<String>(&metrics).is_err());
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

    #[test]
    fn namespaces_from_an_empty_list_is_all() {
        assert_eq!(Namespaces::from_list(vec![]), Namespaces::All);
        assert_eq!(Namespaces::from_list(vec![String::new()]), Namespaces::All);
        assert_eq!(Namespaces::from_list(vec!["a".into()]), Namespaces::Only(vec!["a".into()]));
    }
}
