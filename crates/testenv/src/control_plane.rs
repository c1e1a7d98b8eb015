//! A real kube-apiserver and etcd on loopback, shared by the tests of one test binary (by the
//! tests of one concern, where tests of other concerns would disturb them: [`of`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use tokio::sync::OnceCell;

pub use crate::process::Error;
use crate::process::{Process, accepts, retry_on_port_clash, wait_until};
use crate::shared::{Service, attach, kept};
use crate::tools::{free_port, state_dir, tool};

const ADMIN_TOKEN: &str = "blockwork-testenv-admin";
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// etcd and kube-apiserver, their files, and how to reach them.
#[derive(Debug)]
pub struct ControlPlane {
    config: kube::Config,
    kubeconfig: PathBuf,
    dir: PathBuf,
    processes: Processes,
    /// kube-controller-manager running only its namespace controller, started by the first test
    /// (of this process) that deletes a namespace and waits for it ([`Self::start_namespace_controller`]).
    namespace_controller: OnceCell<Process>,
    /// kube-controller-manager running only its garbage collector, started by the first test (of
    /// this process) that needs owner references honoured ([`Self::start_garbage_collector`]).
    garbage_collector: OnceCell<Process>,
}

#[derive(Debug)]
enum Processes {
    /// Started by this process, which can restart the API server.
    Own {
        etcd: Process,
        /// `None` only while it is being restarted.
        apiserver: Mutex<Option<Process>>,
        apiserver_args: Vec<String>,
        restarts: AtomicUsize,
    },
    /// A keeper's, shared with the other test processes of this binary ([`crate::shared`]).
    Kept(Description),
}

/// How the test processes reach a control plane a keeper keeps.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
pub struct Description {
    kubeconfig: PathBuf,
    dir: PathBuf,
    etcd: u32,
    apiserver: u32,
}

/// The control plane shared by all tests of this test binary; started on first use.
pub async fn control_plane() -> Result<&'static ControlPlane, Error> {
    of("default").await
}

/// Another control plane, with its own etcd: a second cluster for the tests that need two
/// (see [`crate::clusters`]); started on first use, shared by the tests of this test binary.
pub async fn second_control_plane() -> Result<&'static ControlPlane, Error> {
    of("second").await
}

/// The control plane shared by the tests of `concern` in this test binary, apart from the
/// others': for tests that change what the whole cluster does (a cluster-wide admission webhook,
/// say), which would disturb the tests of other concerns. Started on first use.
pub async fn of(concern: &'static str) -> Result<&'static ControlPlane, Error> {
    cell_of(concern)
        .get_or_try_init(|| async {
            if kept() {
                let description = attach::<Description>(Service::ControlPlane(concern.to_owned())).await?;
                return ControlPlane::reach(description).await;
            }
            // The binary's first control plane keeps its files in the binary's directory.
            let dir = || -> Result<PathBuf, Error> {
                let dir = if concern == "default" { state_dir()? } else { state_dir()?.join(concern) };
                std::fs::create_dir_all(&dir).map_err(Error::Io)?;
                Ok(dir)
            };
            retry_on_port_clash(|| ControlPlane::start(dir())).await
        })
        .await
}

/// The cell of `concern`'s control plane in this process.
fn cell_of(concern: &'static str) -> &'static OnceCell<ControlPlane> {
    static PLANES: Mutex<BTreeMap<&str, &OnceCell<ControlPlane>>> = Mutex::new(BTreeMap::new());
    let mut planes = PLANES.lock().unwrap_or_else(PoisonError::into_inner);
    match planes.get(concern) {
        Some(&cell) => cell,
        None => {
            let cell = Box::leak(Box::new(OnceCell::new()));
            planes.insert(concern, cell);
            cell
        }
    }
}

impl ControlPlane {
    /// A control plane of the caller's own, with its files in a new directory: for a test that
    /// restarts the API server ([`Self::restart_apiserver`]), which would cut every other test's
    /// connections. Its processes stop when it is dropped.
    pub async fn start_own() -> Result<Self, Error> {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let dir = state_dir()?.join(format!("own-{}", STARTED.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir)?;
        retry_on_port_clash(|| Self::start(Ok(dir.clone()))).await
    }

    /// A control plane with its files in `dir` (a keeper's, [`crate::shared`]).
    pub async fn start_in(dir: &Path) -> Result<Self, Error> {
        retry_on_port_clash(|| Self::start(Ok(dir.to_path_buf()))).await
    }

    /// How the test processes reach it.
    pub fn description(&self) -> Description {
        let (etcd, apiserver) = self.pids();
        Description { kubeconfig: self.kubeconfig.clone(), dir: self.dir.clone(), etcd, apiserver }
    }

    /// The control plane a keeper started, as `description` says.
    async fn reach(description: Description) -> Result<Self, Error> {
        let config = kube_config(&description.kubeconfig).await?;
        Ok(Self {
            config,
            kubeconfig: description.kubeconfig.clone(),
            dir: description.dir.clone(),
            processes: Processes::Kept(description),
            namespace_controller: OnceCell::new(),
            garbage_collector: OnceCell::new(),
        })
    }

    /// Starts etcd and kube-apiserver with their files in `dir`.
    async fn start(dir: Result<PathBuf, Error>) -> Result<Self, Error> {
        let dir = dir?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd = Process::start(
            "etcd",
            &tool("etcd")?,
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &[("ETCD_UNSUPPORTED_ARCH", String::new())],
            &dir,
        )?;
        wait_until(&etcd, READY_TIMEOUT, || accepts(std::net::Ipv4Addr::LOCALHOST, etcd_port)).await?;

        let pki = Pki::generate()?;
        let file = |name: &str, contents: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            std::fs::write(&path, contents)?;
            Ok(path)
        };
        let ca = file("ca.crt", &pki.ca_pem)?;
        let serving_cert = file("apiserver.crt", &pki.serving_cert_pem)?;
        let serving_key = file("apiserver.key", &pki.serving_key_pem)?;
        let sa_key = file("service-account.key", &pki.service_account_key_pem)?;
        let sa_public_key = file("service-account.pub", &pki.service_account_public_key_pem)?;
        let tokens = file("tokens.csv", &format!("{ADMIN_TOKEN},admin,admin,\"system:masters\"\n"))?;
        // In this process's own directory, whose path is short enough for a Unix socket's.
        static SOCKETS: AtomicUsize = AtomicUsize::new(0);
        let socket = state_dir()?.join(format!("egress-{}.sock", SOCKETS.fetch_add(1, Ordering::SeqCst)));
        crate::egress::start(&socket, &dir.join(ROUTES))?;
        let egress = file("egress-selector.yaml", &crate::egress::configuration(&socket))?;

        let port = free_port()?;
        let apiserver_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", serving_cert.display()),
            format!("--tls-private-key-file={}", serving_key.display()),
            format!("--client-ca-file={}", ca.display()),
            format!("--token-auth-file={}", tokens.display()),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://127.0.0.1".into(),
            format!("--service-account-key-file={}", sa_public_key.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            format!("--egress-selector-config-file={}", egress.display()),
            "--v=1".into(),
        ];
        let apiserver = Process::start("kube-apiserver", &tool("kube-apiserver")?, &apiserver_args, &[], &dir)?;

        let kubeconfig = file("kubeconfig", &kubeconfig_yaml(port, &pki.ca_pem))?;
        let config = kube_config(&kubeconfig).await?;
        let client = kube::Client::try_from(config.clone()).map_err(|e| Error::Setup(format!("client: {e}")))?;
        wait_until(&apiserver, READY_TIMEOUT, || is_ready(&client)).await?;
        Ok(Self {
            config,
            kubeconfig,
            dir,
            processes: Processes::Own { etcd, apiserver: Mutex::new(Some(apiserver)), apiserver_args, restarts: AtomicUsize::new(0) },
            namespace_controller: OnceCell::new(),
            garbage_collector: OnceCell::new(),
        })
    }

    /// Starts kube-controller-manager with only its namespace controller (once per test
    /// process), so that a deleted namespace empties and goes as in a cluster: it deletes every
    /// object in the namespace, waits for their finalizers, then removes the namespace. Only the
    /// tests that delete a namespace need it; the rest of the control plane runs without
    /// controllers. The binary is built with the end-to-end node's tools
    /// (`scripts/install-test-tools node`, which `make test` runs).
    pub async fn start_namespace_controller(&self) -> Result<(), Error> {
        self.start_controller_manager(&self.namespace_controller, "kube-controller-manager", "namespace-controller").await
    }

    /// Starts kube-controller-manager with only its garbage collector (once per test process), so
    /// that an object whose owner is deleted goes as in a cluster (`ownerReferences`). Built with
    /// the end-to-end node's tools, as for [`Self::start_namespace_controller`].
    pub async fn start_garbage_collector(&self) -> Result<(), Error> {
        self.start_controller_manager(&self.garbage_collector, "kube-controller-manager-gc", "garbagecollector").await
    }

    /// kube-controller-manager running only `controllers`, once per test process (`running`), its
    /// log named after `name`. Under nextest several may run at once against a shared control
    /// plane (without leader election): their controllers' work is idempotent.
    async fn start_controller_manager(&self, running: &OnceCell<Process>, name: &str, controllers: &str) -> Result<(), Error> {
        let args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--controllers={controllers}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        let tool = tool("kube-controller-manager")?;
        running.get_or_try_init(|| async { Process::start(name, &tool, &args, &[], &self.dir) }).await.map(|_| ())
    }

    /// Kills kube-apiserver (SIGKILL) and starts it again on the same port with the same flags
    /// (etcd keeps the state), as a crashed or upgraded API server comes back; returns once it is
    /// ready. Clients see their connections and watches dropped, and refused connections
    /// meanwhile. Its log is `kube-apiserver-restart-<n>.log` in [`Self::dir`].
    pub async fn restart_apiserver(&self) -> Result<(), Error> {
        let Processes::Own { apiserver, apiserver_args, restarts, .. } = &self.processes else {
            return Err(Error::Setup("only a control plane of the test's own restarts (ControlPlane::start_own)".into()));
        };
        let restart = restarts.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut running = apiserver.lock().unwrap_or_else(PoisonError::into_inner);
            // Dropping a Process kills it and waits for it, so the port is free again.
            drop(running.take());
            let name = format!("kube-apiserver-restart-{restart}");
            *running = Some(Process::start(&name, &tool("kube-apiserver")?, apiserver_args, &[], &self.dir)?);
        }
        let client = self.client();
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while !is_ready(&client).await {
            if let Some(process) = apiserver.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                process.check_running()?;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Setup(format!("kube-apiserver was not ready {READY_TIMEOUT:?} after restart {restart}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A new client for the calling test's tokio runtime (a client's connection pool belongs to
    /// the runtime that made it, so clients are not shared between tests).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config.clone()).unwrap_or_else(|e| unreachable_config(&e))
    }

    pub fn kube_config(&self) -> kube::Config {
        self.config.clone()
    }

    /// A kubeconfig with an admin token, for kubectl and child processes.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the control plane keeps its files and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process ids of etcd and kube-apiserver (0 while it restarts).
    pub fn pids(&self) -> (u32, u32) {
        match &self.processes {
            Processes::Own { etcd, apiserver, .. } => {
                (etcd.pid(), apiserver.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map_or(0, Process::pid))
            }
            Processes::Kept(description) => (description.etcd, description.apiserver),
        }
    }

    /// Holds `what` for this test alone among the tests sharing this control plane, in this
    /// process and the others, until the guard is dropped (or the process ends): for tests that
    /// register the same cluster-wide object in turn.
    pub async fn exclusive(&self, what: &str) -> Result<Exclusive, Error> {
        let dir = self.dir.join("locks");
        std::fs::create_dir_all(&dir)?;
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(what))?;
        tokio::task::spawn_blocking(move || file.lock().map(|()| Exclusive { _lock: file }))
            .await
            .map_err(|e| Error::Setup(format!("waiting for {what}: {e}")))?
            .map_err(Error::Io)
    }

    /// Server-side-applies CRDs and waits until each is Established and its resources are served
    /// (a loaded API server answered "404 page not found" to a create just after Established).
    /// Idempotent.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<(), Error> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let params = PatchParams::apply("blockwork-testenv").force();
        for crd in crds {
            let name = crd.metadata.name.clone().ok_or_else(|| Error::Setup("a CRD without a name".into()))?;
            api.patch(&name, &params, &Patch::Apply(crd)).await.map_err(|e| Error::Setup(format!("applying CRD {name}: {e}")))?;
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            tokio::time::timeout(Duration::from_secs(30), established)
                .await
                .map_err(|_| Error::Setup(format!("CRD {name} was not Established within 30 s")))?
                .map_err(|e| Error::Setup(format!("waiting for CRD {name}: {e}")))?;
            tokio::time::timeout(Duration::from_secs(30), self.served(crd))
                .await
                .map_err(|_| Error::Setup(format!("CRD {name}'s resources were not served within 30 s")))?
                .map_err(|e| Error::Setup(format!("listing CRD {name}'s resources: {e}")))?;
        }
        Ok(())
    }

    /// Resolves once a list of `crd`'s resources is answered, not 404: in the storage version,
    /// which needs no conversion webhook.
    async fn served(&self, crd: &CustomResourceDefinition) -> Result<(), kube::Error> {
        let spec = &crd.spec;
        for version in spec.versions.iter().filter(|v| v.served && v.storage) {
            let resource = kube::api::ApiResource {
                group: spec.group.clone(),
                version: version.name.clone(),
                api_version: format!("{}/{}", spec.group, version.name),
                kind: spec.names.kind.clone(),
                plural: spec.names.plural.clone(),
            };
            let objects: Api<kube::api::DynamicObject> = Api::all_with(self.client(), &resource);
            loop {
                match objects.list(&kube::api::ListParams::default().limit(1)).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(status)) if status.code == 404 => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(())
    }

    /// Sends the API server's requests for Service `namespace/name` on `port` (its webhooks and
    /// conversions) to `backends`, in turn, as kube-proxy would in a cluster; see
    /// [`crate::egress`]. The Service must exist and have a ClusterIP. With the backends other
    /// test processes sharing this control plane route to it, while each lives.
    pub async fn route_service(&self, namespace: &str, name: &str, port: u16, backends: &[std::net::SocketAddr]) -> Result<(), Error> {
        let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(self.client(), namespace)
            .get(name)
            .await
            .map_err(|e| Error::Setup(format!("reading Service {namespace}/{name}: {e}")))?;
        let ip = service
            .spec
            .and_then(|spec| spec.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None")
            .ok_or_else(|| Error::Setup(format!("Service {namespace}/{name} has no ClusterIP")))?;
        crate::egress::set_route(&self.dir.join(ROUTES), &format!("{ip}:{port}"), backends)
    }

    /// A new namespace named `<prefix>-<random>`.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        let mut clean: String =
            prefix.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(40).collect();
        clean = clean.trim_matches('-').to_owned();
        if clean.is_empty() {
            clean = "test".into();
        }
        let name = format!("{clean}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        self.namespace_named(&name).await?;
        Ok(name)
    }

    /// Creates the namespace `name` (e.g. one another control plane has too: the same manifests
    /// applied to two clusters).
    pub async fn namespace_named(&self, name: &str) -> Result<(), Error> {
        let name = name.to_owned();
        let namespace = Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() }, ..Namespace::default() };
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| Error::Setup(format!("creating namespace {name}: {e}")))?;
        Ok(())
    }
}

/// Where the egress proxy finds the Services' backends ([`ControlPlane::route_service`]).
const ROUTES: &str = "routes";

/// A test's hold on something shared ([`ControlPlane::exclusive`]): released when dropped.
#[derive(Debug)]
pub struct Exclusive {
    _lock: std::fs::File,
}

/// The client configuration of a kubeconfig file.
async fn kube_config(kubeconfig: &Path) -> Result<kube::Config, Error> {
    let config = Kubeconfig::read_from(kubeconfig).map_err(|e| Error::Setup(format!("kubeconfig: {e}")))?;
    kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await.map_err(|e| Error::Setup(format!("kubeconfig: {e}")))
}

/// True when kube-apiserver answers `/readyz` with `ok`.
async fn is_ready(client: &kube::Client) -> bool {
    match http::Request::get("/readyz").body(Vec::new()) {
        Ok(request) => client.request_text(request).await.is_ok_and(|body| body.trim() == "ok"),
        Err(_) => false,
    }
}

fn unreachable_config(error: &kube::Error) -> kube::Client {
    // The same configuration built a client during start-up, so this cannot fail; if it ever
    // does, the test cannot go on.
    #[allow(clippy::panic)]
    {
        panic!("the test control plane's client configuration stopped working: {error}")
    }
}

fn kubeconfig_yaml(port: u16, ca_pem: &str) -> String {
    use base64::Engine as _;
    use std::fmt::Write as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut yaml = String::new();
    let _ = write!(
        yaml,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: admin\n    namespace: default\ncurrent-context: testenv\n"
    );
    yaml
}

/// A CA, a serving certificate for 127.0.0.1 signed by it, and a service-account signing key.
struct Pki {
    ca_pem: String,
    serving_cert_pem: String,
    serving_key_pem: String,
    service_account_key_pem: String,
    service_account_public_key_pem: String,
}

impl Pki {
    fn generate() -> Result<Self, Error> {
        let tls = |e: rcgen::Error| Error::Setup(format!("generating test certificates: {e}"));
        let ca_key = KeyPair::generate().map_err(tls)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "blockwork-testenv-ca");
        let ca_cert = ca_params.self_signed(&ca_key).map_err(tls)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate().map_err(tls)?;
        let mut serving = CertificateParams::new(vec!["localhost".to_owned()]).map_err(tls)?;
        serving.subject_alt_names.push(SanType::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        let serving_cert = serving.signed_by(&serving_key, &issuer).map_err(tls)?;

        let service_account_key = KeyPair::generate().map_err(tls)?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            serving_cert_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            service_account_key_pem: service_account_key.serialize_pem(),
            service_account_public_key_pem: service_account_key.public_key_pem(),
        })
    }
}
