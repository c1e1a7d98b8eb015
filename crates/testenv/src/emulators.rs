//! AWS emulators on loopback, one of each per test binary (kept for its test processes under
//! nextest, [`crate::shared`]): moto (ACM, Route53, STS,
//! CloudFront distributions) and MiniStack (the CloudFront tenant APIs moto answers with 404).
//! A test that needs an account of its own starts a private pair ([`Emulators::for_account`]).

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::sync::OnceCell;

pub use crate::process::Error;
use crate::process::{Process, accepts, retry_on_port_clash, wait_until};
use crate::shared::{Service, attach, kept};
use crate::tools::{free_port, state_dir, tool};

/// Seconds moto keeps a certificate in PENDING_VALIDATION before issuing it.
pub const MOTO_ACM_VALIDATION_WAIT_SECONDS: u64 = 1;
/// The account moto and MiniStack pretend to be.
pub const ACCOUNT_ID: &str = "123456789012";

#[derive(Debug)]
pub struct Emulator {
    host: Ipv4Addr,
    port: u16,
    pid: u32,
    /// `None` when a keeper runs it.
    _process: Option<Process>,
}

/// How the test processes reach an emulator a keeper keeps.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
pub struct Description {
    host: Ipv4Addr,
    port: u16,
    pid: u32,
}

static MOTO: OnceCell<Emulator> = OnceCell::const_new();
static ACCOUNTS_MOTO: OnceCell<Emulator> = OnceCell::const_new();
static MINISTACK: OnceCell<Emulator> = OnceCell::const_new();

/// The moto server shared by the tests of this binary, answering as [`ACCOUNT_ID`].
pub async fn moto() -> Result<&'static Emulator, Error> {
    MOTO.get_or_try_init(|| kept_or(Service::Moto, start_moto("moto", Some(ACCOUNT_ID), Ipv4Addr::LOCALHOST, Moto::Plain))).await
}

/// The moto server shared by the tests of this binary whose AssumeRole switches accounts, as AWS
/// does: calls with a role's credentials act in the role's account (the operator's own
/// credentials in [`ACCOUNT_ID`]). For tests of which account something lands in; each uses
/// accounts of its own (`crate::aws::fresh_account`).
pub async fn accounts_moto() -> Result<&'static Emulator, Error> {
    ACCOUNTS_MOTO
        .get_or_try_init(|| kept_or(Service::AccountsMoto, start_moto("moto-accounts", None, Ipv4Addr::LOCALHOST, Moto::Plain)))
        .await
}

/// The MiniStack server shared by the tests of this binary, answering as [`ACCOUNT_ID`].
pub async fn ministack() -> Result<&'static Emulator, Error> {
    MINISTACK.get_or_try_init(|| kept_or(Service::Ministack, start_ministack("ministack", ACCOUNT_ID, Ipv4Addr::LOCALHOST))).await
}

/// The emulator a keeper keeps for this binary's test processes, or else the one `start` starts.
async fn kept_or(service: Service, start: impl Future<Output = Result<Emulator, Error>>) -> Result<Emulator, Error> {
    if !kept() {
        return start.await;
    }
    let Description { host, port, pid } = attach::<Description>(service).await?;
    Ok(Emulator { host, port, pid, _process: None })
}

/// A moto and a MiniStack of a test's own that answer as `account`, stopped when dropped: for a
/// test that looks for the account id where it must not appear (statuses, events, logs).
#[derive(Debug)]
pub struct Emulators {
    pub moto: Emulator,
    pub ministack: Emulator,
}

impl Emulators {
    pub async fn for_account(account: &str) -> Result<Self, Error> {
        let (moto_name, ministack_name) = (format!("moto-{account}"), format!("ministack-{account}"));
        let (moto, ministack) = tokio::try_join!(
            start_moto(&moto_name, Some(account), Ipv4Addr::LOCALHOST, Moto::Plain),
            start_ministack(&ministack_name, account, Ipv4Addr::LOCALHOST)
        )?;
        Ok(Self { moto, ministack })
    }
}

/// Which moto: moto's server through a script of ours that changes what moto gets wrong or
/// lacks (each script's docstring says what and how).
#[derive(Clone, Copy, Debug)]
enum Moto {
    /// `emulators/moto_with_consistent_listings.py`: ACM's ListCertificates under concurrent
    /// requests.
    Plain,
    /// `emulators/moto_with_policy_simulation.py`: IAM's SimulatePrincipalPolicy.
    WithPolicySimulation,
}

impl Moto {
    /// The program and its leading arguments.
    fn command(self) -> Result<(std::path::PathBuf, Vec<String>), Error> {
        let script = match self {
            Self::Plain => "moto_with_consistent_listings.py",
            Self::WithPolicySimulation => "moto_with_policy_simulation.py",
        };
        // moto's own interpreter: the virtualenv moto_server links into.
        let python = std::fs::read_link(tool("moto_server")?).map_err(Error::Io)?.with_file_name("python3");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("emulators").join(script);
        Ok((python, vec![script.display().to_string()]))
    }
}

/// `account`: the account it answers as whatever the credentials; `None`: [`ACCOUNT_ID`] until
/// AssumeRole switches to the role's account, as AWS does.
async fn start_moto(name: &str, account: Option<&str>, host: Ipv4Addr, moto: Moto) -> Result<Emulator, Error> {
    retry_on_port_clash(|| async {
        let port = free_port()?;
        let mut envs = vec![("MOTO_ACM_VALIDATION_WAIT", MOTO_ACM_VALIDATION_WAIT_SECONDS.to_string())];
        envs.extend(account.map(|account| ("MOTO_ACCOUNT_ID", account.to_owned())));
        let (program, mut args) = moto.command()?;
        args.extend(["-H".into(), host.to_string(), "-p".into(), port.to_string()]);
        let process = Process::start(name, &program, &args, &envs, &state_dir()?)?;
        wait_until(&process, Duration::from_secs(60), || accepts(host, port)).await?;
        Ok(Emulator { host, port, pid: process.pid(), _process: Some(process) })
    })
    .await
}

async fn start_ministack(name: &str, account: &str, host: Ipv4Addr) -> Result<Emulator, Error> {
    retry_on_port_clash(|| async {
        let port = free_port()?;
        let process = Process::start(
            name,
            &tool("ministack")?,
            &[],
            &[
                ("GATEWAY_PORT", port.to_string()),
                ("BIND_HOST", host.to_string()),
                ("MINISTACK_ACCOUNT_ID", account.to_owned()),
                ("LOG_LEVEL", "WARNING".to_owned()),
            ],
            &state_dir()?,
        )?;
        wait_until(&process, Duration::from_secs(60), || accepts(host, port)).await?;
        Ok(Emulator { host, port, pid: process.pid(), _process: Some(process) })
    })
    .await
}

impl Emulator {
    /// A moto server of its own listening on `host` (the end-to-end suite binds the node's
    /// bridge address, where pods reach it), answering as [`ACCOUNT_ID`]; killed with this
    /// process.
    pub async fn moto(host: Ipv4Addr) -> Result<Self, Error> {
        start_moto("moto", Some(ACCOUNT_ID), host, Moto::Plain).await
    }

    /// A moto server of its own on loopback, answering as [`ACCOUNT_ID`], that also answers
    /// IAM's SimulatePrincipalPolicy from the users, roles and policies it stores, with moto's
    /// own policy evaluator (`emulators/moto_with_policy_simulation.py`; moto has no such call):
    /// for `blockwork check`'s proof of an identity's permissions.
    pub async fn moto_with_policy_simulation() -> Result<Self, Error> {
        start_moto("moto-policy-simulation", Some(ACCOUNT_ID), Ipv4Addr::LOCALHOST, Moto::WithPolicySimulation).await
    }

    /// A moto server of its own on loopback whose AssumeRole switches accounts, as AWS does (the
    /// shared one answers as [`ACCOUNT_ID`] whatever the credentials): for a test that checks
    /// in which account something lands.
    pub async fn multi_account_moto() -> Result<Self, Error> {
        start_moto("moto-multi-account", None, Ipv4Addr::LOCALHOST, Moto::Plain).await
    }

    /// A MiniStack server of its own listening on `host`, answering as [`ACCOUNT_ID`].
    pub async fn ministack(host: Ipv4Addr) -> Result<Self, Error> {
        start_ministack("ministack", ACCOUNT_ID, host).await
    }

    /// e.g. `http://127.0.0.1:40123`: the SDK's endpoint override, or a fault proxy's upstream.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the test processes reach it (a keeper's, [`crate::shared`]).
    pub fn description(&self) -> Description {
        Description { host: self.host, port: self.port, pid: self.pid }
    }
}
