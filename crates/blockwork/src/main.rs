//! The `blockwork` binary: `blockwork crds` prints the CRDs, `blockwork rbac` the RBAC,
//! `blockwork run` runs the controllers, `blockwork remove-finalizers` releases their objects.

use std::process::ExitCode;

use anyhow::Context as _;
use blockwork::cli::{Cli, Command};
use blockwork::{chart, controllers, crds, finalizers, rbac, run, telemetry, webhooks};
use clap::{CommandFactory as _, Parser as _};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
            let identity = rbac::Identity { name: args.name, namespace: args.namespace, service_account: args.service_account };
            let scope = rbac::Scope {
                namespaces: args.namespaces,
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
                let client = kube::Client::try_default().await.context("building the Kubernetes client")?;
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
            if let Err(e) = telemetry::init(args.log_format, &args.log_level) {
                return report(Err(e));
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => return report(Err(anyhow::Error::new(e).context("starting the async runtime"))),
            };
            let result = runtime.block_on(run::run(*args, selected));
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
