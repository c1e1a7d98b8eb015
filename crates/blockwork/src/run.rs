//! `blockwork run`: the controllers, the health and metrics servers and leader election, in one
//! process.
//!
//! Start-up: bind the servers (the health server answers `/healthz` from here on), build the
//! client, then either start the controllers or, with `--leader-elect`, become ready as a standby
//! and start them once this process holds the Lease.
//!
//! Shutdown, on the first SIGINT or SIGTERM: readiness ends, the controllers are told to stop and
//! drain (for at most [`DRAIN_TIMEOUT`]), the Lease is released, the servers stop, and the
//! process exits 0. A second signal exits at once. A controller that stops on its own stops the
//! process the same way, with exit code 1. Losing the Lease exits at once with exit code 1.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use blockwork_runtime::RuntimeMetrics;
use blockwork_webhook::{ServingCertificate, TlsMaterial};
use kube::Client;
use prometheus_client::registry::Registry;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{error, info, warn};

use crate::certificates::{self, SelfManaged};
use crate::cli::{BindAddress, RunArgs};
use crate::controllers::{Controller, Host, Namespaces, Runnable, WebhookContext};
use crate::leader::{self, Elector, LeadershipLost, Role};
use crate::server::{self, Status};
use crate::shutdown::{self, Shutdown, ShutdownTrigger};
use crate::telemetry;

/// How long the controllers get to finish their reconciles after shutdown is requested; below
/// Kubernetes' default `terminationGracePeriodSeconds` of 30.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// How often the webhook server looks for a renewed certificate in `--webhook-cert-dir`.
const CERTIFICATE_RELOAD: Duration = Duration::from_secs(30);

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Runs `controllers` (already selected) until shutdown. `Ok` after a clean shutdown.
pub async fn run(args: RunArgs, controllers: Vec<Controller>) -> anyhow::Result<()> {
    // Bad settings fail before anything starts, with the flag in the message.
    let self_managed = SelfManaged::from_args(&args.webhook_certificates, &controllers, &pod_namespace())?;
    crate::controllers::check_args(&controllers, &args)?;
    let (trigger, shutdown) = shutdown::channel();
    let signals = Signals::install()?;
    tokio::spawn(signals.forward(trigger));
    let (controllers_trigger, controllers_shutdown) = shutdown::channel();

    let elector = args.leader_elect.then(|| Elector {
        namespace: args.leader_election_namespace.clone().unwrap_or_else(pod_namespace),
        lease_name: args.leader_election_id.clone(),
        identity: leader::identity(),
    });

    let Metrics { registry, status, runtime: runtime_metrics, runnables, aws: aws_metrics } =
        register_metrics(&controllers, elector.as_ref().map(|e| e.identity.clone()));
    let aws = aws_layer(&args, aws_metrics)?;

    // Before the servers: webhooks check requests against the cluster. Builds no connection yet.
    let client = blockwork_runtime::client::infer().await.context("building the Kubernetes client")?;
    let (servers_trigger, servers_stop) = shutdown::channel();
    let identities = blockwork_identity::Identities::new(client.clone(), args.identity.settings());
    let webhook_context = WebhookContext {
        client: client.clone(),
        fail_closed: args.webhook_fail_closed,
        identities: Arc::clone(&identities),
        args: Arc::new(args.clone()),
    };
    let servers = Servers::start(
        &args,
        &controllers,
        &webhook_context,
        self_managed.as_ref(),
        Arc::clone(&status),
        Arc::new(registry),
        &servers_stop,
    )
    .await?;
    require_crds(&client, &controllers).await?;
    let names: Vec<_> = controllers.iter().map(|c| c.name).collect();
    let namespaces = Namespaces::from_list(args.namespaces.clone());
    info!(controllers = ?names, ?namespaces, leader_elect = args.leader_elect, "starting");

    let mut election = match elector {
        Some(elector) => Some(Election::start(elector).await?),
        None => None,
    };

    // Standby until this process leads (at once without leader election).
    if let Some(election) = election.as_mut() {
        let leading = election.wait_for_leadership(&status, &shutdown).await;
        if !leading {
            info!("shutting down before acquiring leadership");
            status.set_stopping();
            controllers_trigger.trigger();
            election.finish().await;
            servers.stop(servers_trigger).await;
            return Ok(());
        }
    }

    status.set_leader(true);
    let host = Host {
        client,
        namespaces,
        concurrency: args.max_concurrent_reconciles,
        shutdown: controllers_shutdown,
        runtime_metrics,
        aws,
        identities,
        args: Arc::new(args.clone()),
    };
    let mut running = Running::start(runnables, &host);
    if let Some(config) = self_managed.filter(|_| servers.webhooks) {
        running.spawn("webhook-certificates", certificates::maintain(host.client.clone(), config, host.shutdown.clone()));
    }
    status.set_ready();
    info!(controllers = ?names, "controllers started");

    // Until shutdown, a controller stopping, or the Lease lost.
    let failure = tokio::select! {
        () = shutdown.wait() => None,
        stopped = running.next_stopped() => Some(stopped),
        lost = lost(election.as_mut()) => fail_stop(&lost),
    };
    status.set_stopping();
    controllers_trigger.trigger();
    if let Some(stopped) = &failure {
        error!(error = telemetry::error_chain(stopped), "a controller stopped; shutting down");
    } else {
        info!("shutting down: draining the controllers");
    }

    // Keep holding (and renewing) the Lease while draining, so no other leader starts meanwhile.
    let drained = tokio::select! {
        drained = tokio::time::timeout(DRAIN_TIMEOUT, running.drain()) => drained.is_ok(),
        lost = lost(election.as_mut()) => fail_stop(&lost),
    };
    if !drained {
        // Don't release the Lease: the reconciles still running could overlap the next leader's.
        error!(timeout = ?DRAIN_TIMEOUT, "controllers did not stop in time; exiting without releasing the Lease");
        bail!("controllers did not stop within {DRAIN_TIMEOUT:?}");
    }
    if let Some(election) = election.as_mut() {
        election.finish().await;
    }
    servers.stop(servers_trigger).await;
    match failure {
        Some(stopped) => Err(stopped),
        None => {
            info!("shut down cleanly");
            Ok(())
        }
    }
}

/// The process's one AWS layer, from the AWS flags. Loads no credentials yet (a process whose
/// controllers never call AWS never does).
fn aws_layer(args: &RunArgs, metrics: Arc<blockwork_aws::AwsMetrics>) -> anyhow::Result<Arc<blockwork_aws::Aws>> {
    let (config, warnings) = args.aws.config()?;
    for warning in warnings {
        warn!("{warning}");
    }
    Ok(blockwork_aws::Aws::new(config, metrics))
}

/// Every metric the process exports, registered once.
pub struct Metrics {
    pub registry: Registry,
    pub status: Arc<Status>,
    pub runtime: Arc<RuntimeMetrics>,
    /// Each controller's `start`, bound to its metrics, with its name, in order.
    pub runnables: Vec<(&'static str, Runnable)>,
    /// The AWS layer's, with the seed names of the controllers that run.
    pub aws: Arc<blockwork_aws::AwsMetrics>,
}

/// The process's metrics (`blockwork_…`: leadership, the runtime's), each controller's (under its
/// `metrics_prefix`, registered by its `start`), then the AWS layer's (`blockwork_aws_…`, and the
/// seeds' AWS-call names for `cert` and `tenant`). `identity` is the leader-election identity, if
/// any.
pub fn register_metrics(controllers: &[Controller], identity: Option<String>) -> Metrics {
    let mut registry = Registry::default();
    let process = registry.sub_registry_with_prefix("blockwork");
    let status = Status::new(identity, process);
    let runtime = RuntimeMetrics::register(process);
    let runnables = controllers.iter().map(|c| (c.name, (c.start)(registry.sub_registry_with_prefix(c.metrics_prefix)))).collect();
    let seeds: Vec<blockwork_aws::Seed> = controllers.iter().filter_map(|c| blockwork_aws::Seed::of(c.name)).collect();
    let aws = Arc::new(blockwork_aws::AwsMetrics::register(&mut registry, &seeds));
    Metrics { registry, status, runtime, runnables, aws }
}

/// The pod's namespace, or `default` outside a pod.
fn pod_namespace() -> String {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_owned())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// Exits at once: fail-stop on lost leadership.
fn fail_stop(lost: &LeadershipLost) -> ! {
    error!(error = %lost, "lost leadership; exiting without waiting for in-flight reconciles");
    std::process::exit(1)
}

/// Completes when leadership is lost; never without leader election.
async fn lost(election: Option<&mut Election>) -> LeadershipLost {
    match election {
        Some(election) => election.lost().await,
        None => std::future::pending().await,
    }
}

/// SIGINT and SIGTERM, handled once for the whole process.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }

    /// First signal: graceful shutdown. Second: exit at once.
    async fn forward(mut self, trigger: ShutdownTrigger) {
        let name = self.next().await;
        info!(signal = name, "shutdown requested");
        trigger.trigger();
        let name = self.next().await;
        warn!(signal = name, "second signal; exiting at once");
        std::process::exit(1);
    }
}

struct Servers {
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Whether the webhook server runs (some selected controller has webhooks).
    webhooks: bool,
}

impl Servers {
    /// Binds both servers before serving either, so a taken port fails start-up.
    async fn start(
        args: &RunArgs,
        controllers: &[Controller],
        webhook_context: &WebhookContext,
        self_managed: Option<&SelfManaged>,
        status: Arc<Status>,
        registry: Arc<Registry>,
        stop: &Shutdown,
    ) -> anyhow::Result<Self> {
        let health = match args.health_probe_bind_address {
            BindAddress::At(addr) => Some(server::bind(addr, "health probe").await?),
            BindAddress::Disabled => None,
        };
        let metrics = match args.metrics_bind_address {
            BindAddress::At(addr) => Some(server::bind(addr, "metrics").await?),
            BindAddress::Disabled => None,
        };
        let mut tasks = Vec::new();
        let mut webhooks_served = false;
        if let Some(listener) = health {
            tasks.push(server::spawn(listener, server::health_router(Arc::clone(&status)), stop.clone(), "health probe"));
        }
        if let Some(listener) = metrics {
            tasks.push(server::spawn(listener, server::metrics_router(registry), stop.clone(), "metrics"));
        }
        if let BindAddress::At(addr) = args.webhook_bind_address {
            let mut webhooks = axum::Router::new();
            for controller in controllers {
                webhooks = webhooks.merge((controller.webhooks.routes)(webhook_context)?);
            }
            if webhooks.has_routes() {
                let certificate = match (&args.webhook_cert_dir, self_managed) {
                    (Some(dir), _) => {
                        let certificate = ServingCertificate::new(&TlsMaterial::from_dir(dir)?)?;
                        certificate.reload_from(dir.clone(), CERTIFICATE_RELOAD, stop.clone().wait_owned());
                        certificate
                    }
                    (None, Some(config)) => {
                        // A stand-in nobody trusts until the Secret's certificate is loaded; not ready meanwhile.
                        status.wait_for_webhook_certificate(format!("Secret {}/{}", config.namespace, config.secret));
                        let certificate = ServingCertificate::new(&TlsMaterial::self_signed(
                            &config.policy.hosts.iter().map(String::as_str).collect::<Vec<_>>(),
                        )?)?;
                        let loaded = Arc::clone(&status);
                        tokio::spawn(certificates::follow(
                            webhook_context.client.clone(),
                            config.clone(),
                            Arc::clone(&certificate),
                            move || loaded.set_webhook_certificate_loaded(),
                            stop.clone(),
                        ));
                        certificate
                    }
                    (None, None) => {
                        warn!("no --webhook-cert-dir: serving webhooks with a self-signed certificate (development only)");
                        ServingCertificate::new(&TlsMaterial::self_signed(&["localhost", "127.0.0.1"])?)?
                    }
                };
                let (bound, task) = blockwork_webhook::serve(addr, webhooks, &certificate, stop.clone().wait_owned()).await?;
                info!(server = "webhook", addr = %bound, "serving");
                tasks.push(tokio::spawn(async move { task.await.context("webhook server") }));
                webhooks_served = true;
            }
        }
        Ok(Self { tasks, webhooks: webhooks_served })
    }

    async fn stop(self, trigger: ShutdownTrigger) {
        trigger.trigger();
        for task in self.tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = telemetry::error_chain(&e), "server failed"),
                Err(e) => warn!(error = %e, "server task failed"),
            }
        }
    }
}

/// The leader-election task.
struct Election {
    role: watch::Receiver<Role>,
    /// Stops the task (which releases the Lease).
    stop: ShutdownTrigger,
    /// `None` once the task ended.
    task: Option<JoinHandle<Result<(), LeadershipLost>>>,
    lease: (String, String),
}

impl Election {
    async fn start(elector: Elector) -> anyhow::Result<Self> {
        let client = leader::client().await?;
        let (role_tx, role) = watch::channel(Role::Starting);
        let (stop, stop_rx) = shutdown::channel();
        let lease = (elector.namespace.clone(), elector.lease_name.clone());
        let task = tokio::spawn(elector.run(client, role_tx, stop_rx));
        Ok(Self { role, stop, task: Some(task), lease })
    }

    /// Waits until this process leads (`true`) or shutdown is requested (`false`); ready as a
    /// standby meanwhile.
    async fn wait_for_leadership(&mut self, status: &Status, shutdown: &Shutdown) -> bool {
        loop {
            match *self.role.borrow_and_update() {
                Role::Starting => {}
                Role::Standby => status.set_ready(),
                Role::Leader => return true,
            }
            tokio::select! {
                biased;
                () = shutdown.wait() => return false,
                lost = task_lost(&mut self.task, &self.lease) => fail_stop(&lost),
                changed = self.role.changed() => {
                    if changed.is_err() {
                        // The task ended; `lost()` reports why on the next turn.
                        continue;
                    }
                }
            }
        }
    }

    /// Completes when the task ends by losing leadership (or panicking).
    async fn lost(&mut self) -> LeadershipLost {
        task_lost(&mut self.task, &self.lease).await
    }

    /// Stops the task, which releases the Lease if held.
    async fn finish(&mut self) {
        self.stop.trigger();
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(lost)) => warn!(error = %lost, "leadership lost while shutting down"),
                Err(e) => warn!(error = %e, "the leader-election task failed"),
            }
        }
    }
}

async fn task_lost(task: &mut Option<JoinHandle<Result<(), LeadershipLost>>>, lease: &(String, String)) -> LeadershipLost {
    let Some(handle) = task.as_mut() else { return std::future::pending().await };
    let result = handle.await;
    *task = None;
    let (namespace, name) = lease.clone();
    match result {
        Err(e) => LeadershipLost { namespace, name, reason: format!("the leader-election task failed: {e}") },
        Ok(Ok(())) => LeadershipLost { namespace, name, reason: "the leader-election task stopped".to_owned() },
        Ok(Err(lost)) => lost,
    }
}

/// The controller tasks.
struct Running {
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Running {
    fn start(runnables: Vec<(&'static str, Runnable)>, host: &Host) -> Self {
        let mut tasks = JoinSet::new();
        let mut names = HashMap::new();
        for (name, run) in runnables {
            let handle = tasks.spawn(run(host.clone()));
            names.insert(handle.id(), name);
        }
        Self { tasks, names }
    }

    /// Runs `task` beside the controllers, under `name`: it stops the process like a controller
    /// when it ends before shutdown.
    fn spawn(&mut self, name: &'static str, task: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// Completes when a controller stops, with why; never if none runs.
    async fn next_stopped(&mut self) -> anyhow::Error {
        let Some(result) = self.tasks.join_next_with_id().await else { return std::future::pending().await };
        let (name, result) = self.outcome(result);
        match result {
            Ok(()) => anyhow::anyhow!("controller `{name}` stopped before shutdown was requested"),
            Err(e) => e.context(format!("controller `{name}` failed")),
        }
    }

    /// Waits for every controller to stop.
    async fn drain(&mut self) {
        while let Some(result) = self.tasks.join_next_with_id().await {
            match self.outcome(result) {
                (name, Ok(())) => info!(controller = name, "controller stopped"),
                (name, Err(e)) => warn!(controller = name, error = telemetry::error_chain(&e), "controller failed while stopping"),
            }
        }
    }

    fn outcome(&self, result: Result<(tokio::task::Id, anyhow::Result<()>), tokio::task::JoinError>) -> (&'static str, anyhow::Result<()>) {
        let name = |id| self.names.get(&id).copied().unwrap_or("?");
        match result {
            Ok((id, result)) => (name(id), result),
            Err(e) => (name(e.id()), Err(anyhow::anyhow!("panicked: {e}"))),
        }
    }
}

/// Fails fast, with the fix in the message, when a controller's CRD is not served: a controller
/// watching a missing kind would only retry forever.
async fn require_crds(client: &Client, controllers: &[Controller]) -> anyhow::Result<()> {
    for controller in controllers {
        for crd in (controller.crds)() {
            let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else { continue };
            let gvk = kube::api::GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
            if kube::discovery::pinned_kind(client, &gvk).await.is_err() {
                bail!(
                    "controller `{}` needs the CRD {} ({}/{}), which the API server does not serve: install it with `blockwork crds | kubectl apply --server-side -f -`",
                    controller.name,
                    crd.metadata.name.unwrap_or_default(),
                    crd.spec.group,
                    version.name,
                );
            }
        }
    }
    Ok(())
}
