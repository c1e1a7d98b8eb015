//! Keeps one service of the test environment (a control plane, an emulator, the collector) for
//! the test processes of one test binary under cargo-nextest, until none has used it for a while:
//! `blockwork-testenv-keeper SERVICE DIR`. Test processes start it (`blockwork_testenv::shared`);
//! a person never needs to.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use blockwork_testenv::collector::Collector;
use blockwork_testenv::control_plane::ControlPlane;
use blockwork_testenv::emulators::Emulator;
use blockwork_testenv::shared::{Service, keep};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(service), Some(dir)) = (args.next(), args.next().map(PathBuf::from)) else {
        return Err("usage: blockwork-testenv-keeper SERVICE DIR".into());
    };
    let service = Service::parse(&service).ok_or_else(|| format!("no such service: {service}"))?;
    match service {
        Service::ControlPlane(_) => {
            keep(&dir, async {
                let plane = ControlPlane::start_in(&dir).await?;
                Ok((plane.description(), plane))
            })
            .await?
        }
        Service::Moto => keep(&dir, described(Emulator::moto(Ipv4Addr::LOCALHOST))).await?,
        Service::AccountsMoto => keep(&dir, described(Emulator::multi_account_moto())).await?,
        Service::Ministack => keep(&dir, described(Emulator::ministack(Ipv4Addr::LOCALHOST))).await?,
        Service::Jaeger => {
            keep(&dir, async {
                let collector = Collector::start(Ipv4Addr::LOCALHOST).await?;
                Ok((collector.description(), collector))
            })
            .await?
        }
    }
    Ok(())
}

/// An emulator and how to reach it.
async fn described(
    start: impl Future<Output = Result<Emulator, blockwork_testenv::emulators::Error>>,
) -> Result<(blockwork_testenv::emulators::Description, Emulator), blockwork_testenv::emulators::Error> {
    let emulator = start.await?;
    Ok((emulator.description(), emulator))
}
