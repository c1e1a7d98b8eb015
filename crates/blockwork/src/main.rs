//! The `blockwork` binary: `blockwork crds` prints the CRDs, `blockwork rbac` the RBAC,
//! `blockwork run` runs the controllers, `blockwork remove-finalizers` releases their objects.

use std::process::ExitCode;

use anyhow::Context as _;
use blockwork::cli::{Cli, Command};
use blockwork::{chart, controllers, crds, finalizers, rbac, run, telemetry, traces, webhooks};
use clap::{CommandFactory as _, FromArgMatches as _};

/// jemalloc instead of glibc's malloc: glibc gives each thread that allocates an arena of its own
/// and returns little of a fragmented arena to the system, so the operator's resident memory grew
/// well past what it holds (docs/benchmarks.md, "Cert: … 2,500 Certs").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The stack of each async worker thread (see where the runtime is built).
const WORKER_STACK: usize = 8 << 20;

fn main() -> ExitCode {
    let name = blockwork::cli::display_name(&std::env::args_os().next().unwrap_or_default());
    let cli = match Cli::from_arg_matches(&blockwork::cli::command(name).get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Status(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::commands::status(&args))),
        Command::Explain(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::commands::explain(&args))),
        Command::Retry(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::commands::retry(&args))),
        Command::Pause(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::commands::pause(&args, true))),
        Command::Resume(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::commands::pause(&args, false))),
        Command::Check(args) => match blockwork_inspect::commands::block_on_check(blockwork_inspect::check::run(&args, &expected())) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => report(Err(e)),
        },
        Command::Import(args) => report(blockwork_inspect::commands::block_on(blockwork_inspect::import::command(&args))),
        Command::Completions(args) => {
            clap_complete::generate(args.shell, &mut blockwork::cli::command(name), name, &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Crds(args) => report(
            webhooks::Endpoint::from_location(&args.location)
                .and_then(|endpoint| crds::run(&controllers::registered(), args.output_dir.as_deref(), &endpoint)),
        ),
        Command::ChartFiles(args) => report(chart::write_files(&controllers::registered(), &args.output_dir)),
        Command::Webhooks(args) => {
            let selected = match controllers::select(controllers::registered(), args.controllers.as_deref()) {
                Ok(selected) => selected,
                Err(message) => usage_error("webhooks", format!("invalid value for '--controllers': {message}")),
            };
            report(webhooks::run(&selected, &args.location, args.fail_closed))
        }
        Command::Rbac(args) => {
            let selected = match controllers::select(controllers::registered(), args.controllers.as_deref()) {
                Ok(selected) => selected,
                Err(message) => usage_error("rbac", format!("invalid value for '--controllers': {message}")),
            };
            for (flag, features) in [("--opt-in", &args.opt_in), ("--opt-out", &args.opt_out)] {
                if let Err(message) = rbac::check_opt_ins(&selected, features) {
                    usage_error("rbac", format!("invalid value for '{flag}': {message}"));
                }
            }
            let identity = rbac::Identity { name: args.name, namespace: args.namespace, service_account: args.service_account };
            let scope = rbac::Scope {
                namespaces: args.namespaces,
                opt_ins: rbac::features(&selected, &args.opt_in, &args.opt_out),
                webhook_certificates: args
                    .webhook_certificate_secret
                    .map(|secret| rbac::WebhookCertificates { secret, configuration_name: args.webhook_configuration_name }),
            };
            report(rbac::manifests(&selected, &identity, &scope).map(|yaml| print!("{yaml}")))
        }
        Command::RemoveFinalizers(args) => {
            let selected = match controllers::select(controllers::registered(), args.controllers.as_deref()) {
                Ok(selected) => selected,
                Err(message) => usage_error("remove-finalizers", format!("invalid value for '--controllers': {message}")),
            };
            let released = async {
                let client = blockwork_runtime::client::infer().await.context("building the Kubernetes client")?;
                finalizers::remove_all(&client, &selected).await
            };
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")
                .and_then(|runtime| runtime.block_on(released));
            report(result.map(|released| println!("released {released} object(s)")))
        }
        Command::Run(args) => {
            let selected = match controllers::select(controllers::registered(), args.controllers.as_deref()) {
                Ok(selected) => selected,
                Err(message) => usage_error("run", format!("invalid value for '--controllers': {message}")),
            };
            // Reconciles are deep async state machines; unoptimized (`make dev`, the tests, the
            // e2e node) their poll frames outgrow the 2 MiB default stack (a Cert reconcile since
            // adoption and per-account shares). Only touched pages cost memory.
            let runtime = match tokio::runtime::Builder::new_multi_thread().thread_stack_size(WORKER_STACK).enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => return report(Err(anyhow::Error::new(e).context("starting the async runtime"))),
            };
            // The exporter starts within the runtime: its gRPC client spawns its connection there.
            let exporter = {
                let _inside = runtime.enter();
                match traces::Traces::from_env().and_then(|traces| start_exporter(&traces)) {
                    Ok(exporter) => exporter,
                    Err(e) => return report(Err(e)),
                }
            };
            if let Err(e) = telemetry::init(args.log_format, &args.log_level, exporter.as_ref()) {
                return report(Err(e));
            }
            let result = runtime.block_on(run::run(*args, selected));
            // The last reconciles' spans, before the runtime (and the gRPC client with it) goes.
            if let Some(exporter) = &exporter {
                exporter.shutdown();
            }
            // Don't wait for tasks that ignore the shutdown (e.g. a hung request).
            runtime.shutdown_background();
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = telemetry::error_chain(&e), "exiting");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The trace exporter the environment asks for, if any.
fn start_exporter(traces: &traces::Traces) -> anyhow::Result<Option<traces::Exporter>> {
    match traces {
        traces::Traces::Off => Ok(None),
        traces::Traces::Otlp { .. } => traces::Exporter::start().map(Some),
    }
}

/// What `blockwork check` expects installed: each registered controller's CRDs and webhooks.
fn expected() -> Vec<blockwork_inspect::check::Expected> {
    controllers::registered()
        .iter()
        .map(|c| blockwork_inspect::check::Expected { controller: c.name, crds: (c.crds)(), webhooks: (c.webhooks.validating)() })
        .collect()
}

/// Exits like clap does on a bad argument: message, usage of `subcommand`, exit code 2.
fn usage_error(subcommand: &str, message: String) -> ! {
    let mut command = Cli::command();
    command.build();
    match command.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(clap::error::ErrorKind::InvalidValue, message).exit(),
        None => command.error(clap::error::ErrorKind::InvalidValue, message).exit(),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", telemetry::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
