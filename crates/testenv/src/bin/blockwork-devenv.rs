//! Starts the test environment for a person: a real kube-apiserver and etcd, moto and
//! MiniStack on loopback, until Ctrl-C. `make dev` runs it; it writes an env file with
//! `KUBECONFIG` and the emulator endpoints once everything is ready.

use std::path::PathBuf;

use blockwork_testenv::control_plane::control_plane;
use blockwork_testenv::emulators::{ministack, moto};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env_file = std::env::args().nth(1).map(PathBuf::from).ok_or("usage: blockwork-devenv ENV_FILE")?;
    let plane = control_plane().await?;
    let moto = moto().await?;
    let ministack = ministack().await?;
    let env = format!(
        "export KUBECONFIG={}\nexport BLOCKWORK_MOTO_ENDPOINT={}\nexport BLOCKWORK_MINISTACK_ENDPOINT={}\n",
        plane.kubeconfig_path().display(),
        moto.endpoint(),
        ministack.endpoint(),
    );
    std::fs::write(&env_file, &env)?;
    eprint!("{env}");
    eprintln!("blockwork-devenv: control plane and AWS emulators ready; Ctrl-C stops them");
    tokio::signal::ctrl_c().await?;
    // Child processes die with this one (PR_SET_PDEATHSIG).
    Ok(())
}
