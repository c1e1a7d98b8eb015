//! The operator and the running servers: it keeps the passwords they accept in step with the
//! Secret, and checks that they are, which is what lets a rotation move on.
//!
//! - **Redis and Valkey** change a user's passwords at run time with `ACL SETUSER`, which keeps
//!   every connection open (`ACL LOAD` of the file would close them all: measured on Redis 7.0
//!   and Valkey 9.1). The operator asks each ready pod's server, and Sentinel, for `app` and
//!   `default` (`ACL GETUSER`, as `operator`), and sets those that differ, by hash: no password
//!   travels. A server that restarts reads the same from the Secret's file.
//! - **Memcached** reads its auth file at start and again on SIGHUP, which the pod itself sends
//!   when the kubelet updates the file (`start.sh`); the operator checks each pod by
//!   authenticating with each password.
//!
//! Each pod is asked by its stable name, over TLS when the Cache serves TLS, verified against the
//! TLS Secret's CA for the name clients use (the Service's). Every call is bounded by
//! [`CALL_TIMEOUT`]; a pod that does not answer is reported, never waited for.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redis::{RedisConnectionInfo, Value};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::auth::password::Password;
use crate::auth::state::State;
use crate::auth::users::{self, APP, OPERATOR, Place, RuntimeUser};

/// Connecting to one pod and its answers, together.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// TLS as the Cache's clients speak it: the TLS Secret's CA, the Service's name.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl Tls {
    /// From the TLS Secret's `ca.crt` (PEM) and the name its certificate gives the servers.
    pub fn new(ca: &[u8], name: &str) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(ca) {
            roots.add(certificate.map_err(|e| format!("ca.crt: {e}"))?).map_err(|e| format!("ca.crt: {e}"))?;
        }
        if roots.is_empty() {
            return Err("ca.crt holds no certificate".to_owned());
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from(name.to_owned()).map_err(|e| format!("{name}: {e}"))?;
        Ok(Self { connector: TlsConnector::from(Arc::new(config)), name })
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

async fn stream(host: &str, port: u16, tls: Option<&Tls>) -> Result<Box<dyn Stream>, String> {
    let tcp = TcpStream::connect((host, port)).await.map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    match tls {
        None => Ok(Box::new(tcp)),
        Some(tls) => {
            let stream = tls.connector.connect(tls.name.clone(), tcp).await.map_err(|e| format!("TLS: {e}"))?;
            Ok(Box::new(stream))
        }
    }
}

/// A connection to the server or Sentinel at `host:port`, authenticated as `user` when given.
pub async fn connect(host: &str, port: u16, tls: Option<&Tls>, user: Option<(&str, &Password)>) -> Result<MultiplexedConnection, String> {
    let mut info = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some((name, password)) = user {
        info = info.set_username(name).set_password(password.expose());
    }
    let stream = stream(host, port, tls).await?;
    let (connection, driver) =
        MultiplexedConnection::new_with_config(&info, stream, AsyncConnectionConfig::new()).await.map_err(|e| e.to_string())?;
    tokio::spawn(driver);
    Ok(connection)
}

/// What the servers said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The pods (`host:port`) whose passwords the operator changed.
    pub changed: Vec<String>,
    /// The pods that could not be asked or set, with why.
    pub failed: Vec<(String, String)>,
}

impl Outcome {
    /// Every pod asked accepts exactly what the Secret lists.
    pub fn in_step(&self) -> bool {
        self.failed.is_empty()
    }
}

/// Brings the servers at `servers` (and, with `sentinels`, the Sentinels beside them) to the
/// passwords of `state`: for each of `app` and `default`, asked and set where it differs.
pub async fn sync_redis(servers: &[String], sentinels: bool, port: u16, state: &State, required: bool, tls: Option<&Tls>) -> Outcome {
    let passwords = state.passwords();
    let mut calls = Vec::new();
    for host in servers {
        calls.push((format!("{host}:{port}"), host.as_str(), port, tls, users::runtime_users(&passwords, required, Place::Server)));
        if sentinels {
            let port = crate::shape::SENTINEL_PORT as u16;
            calls.push((format!("{host}:{port}"), host.as_str(), port, None, users::runtime_users(&passwords, required, Place::Sentinel)));
        }
    }
    let operator = &state.operator;
    let answers = join_all(calls.into_iter().map(|(address, host, port, tls, wanted)| async move {
        let done = tokio::time::timeout(CALL_TIMEOUT, set_users(host, port, tls, operator, &wanted)).await;
        (address, done.unwrap_or_else(|_| Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs()))))
    }))
    .await;
    let mut outcome = Outcome::default();
    for (address, answer) in answers {
        match answer {
            Ok(true) => outcome.changed.push(address),
            Ok(false) => {}
            Err(error) => outcome.failed.push((address, error)),
        }
    }
    outcome
}

/// Sets each of `wanted` that differs on one server or Sentinel; whether any did.
async fn set_users(host: &str, port: u16, tls: Option<&Tls>, operator: &Password, wanted: &[(RuntimeUser, &str)]) -> Result<bool, String> {
    let mut connection = connect(host, port, tls, Some((OPERATOR, operator))).await?;
    let mut changed = false;
    for (user, rules) in wanted {
        let live: Value = redis::cmd("ACL").arg("GETUSER").arg(user.name).query_async(&mut connection).await.map_err(|e| e.to_string())?;
        if parse_user(user.name, &live).as_ref() == Some(user) {
            continue;
        }
        let _: () =
            redis::cmd("ACL").arg("SETUSER").arg(user.setuser(rules)).query_async(&mut connection).await.map_err(|e| e.to_string())?;
        changed = true;
    }
    Ok(changed)
}

/// `ACL GETUSER`'s answer (a map, or RESP2's list of names and values) as the fields we keep.
fn parse_user(name: &'static str, answer: &Value) -> Option<RuntimeUser> {
    let pairs: Vec<(&Value, &Value)> = match answer {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items.chunks(2).filter_map(|pair| Some((pair.first()?, pair.get(1)?))).collect(),
        _ => return None,
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let list = |key: &str| -> Vec<String> {
        pairs.iter().find(|(k, _)| text(k).as_deref() == Some(key)).map_or_else(Vec::new, |(_, value)| match value {
            Value::Array(items) | Value::Set(items) => items.iter().filter_map(text).collect(),
            _ => Vec::new(),
        })
    };
    let flags = list("flags");
    let mut hashes = list("passwords");
    hashes.sort();
    Some(RuntimeUser { name, enabled: flags.iter().any(|f| f == "on"), nopass: flags.iter().any(|f| f == "nopass"), hashes })
}

/// Whether memcached at each of `servers` accepts every password `app` has in `state`.
pub async fn check_memcached(servers: &[String], port: u16, state: &State, tls: Option<&Tls>) -> Outcome {
    let passwords = state.passwords().app;
    let answers = join_all(servers.iter().map(|host| {
        let passwords = &passwords;
        async move {
            let address = format!("{host}:{port}");
            let mut refused = Vec::new();
            for (slot, password) in passwords.iter().enumerate() {
                let answer = tokio::time::timeout(CALL_TIMEOUT, memcached_accepts(host, port, tls, password)).await;
                match answer.unwrap_or_else(|_| Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs()))) {
                    Ok(true) => {}
                    Ok(false) => refused.push(format!("refuses password {} of {}", slot + 1, passwords.len())),
                    Err(error) => return (address, Some(error)),
                }
            }
            (address, (!refused.is_empty()).then(|| format!("{} (its auth file is not reloaded yet)", refused.join(", "))))
        }
    }))
    .await;
    Outcome { changed: Vec::new(), failed: answers.into_iter().filter_map(|(address, failure)| Some((address, failure?))).collect() }
}

/// memcached's authentication (a `set` whose data is `USER PASSWORD`, the first command of a
/// connection): `STORED` when it accepts.
pub async fn memcached_accepts(host: &str, port: u16, tls: Option<&Tls>, password: &Password) -> Result<bool, String> {
    let stream = stream(host, port, tls).await?;
    let mut stream = BufReader::new(stream);
    let token = format!("{APP} {}", password.expose());
    let request = format!("set auth 0 0 {}\r\n{token}\r\n", token.len());
    stream.get_mut().write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut line = String::new();
    stream.read_line(&mut line).await.map_err(|e| e.to_string())?;
    let _ = stream.get_mut().write_all(b"quit\r\n").await;
    match line.trim_end() {
        "STORED" => Ok(true),
        refused if refused.starts_with("CLIENT_ERROR") => Ok(false),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn getuser_s_answer_is_read_in_resp2_and_resp3() {
        let fields = vec![
            bulk("flags"),
            Value::Array(vec![bulk("on"), bulk("sanitize-payload")]),
            bulk("passwords"),
            Value::Array(vec![bulk("bb"), bulk("aa")]),
            bulk("commands"),
            bulk("+@all -@admin"),
        ];
        let expected = RuntimeUser { name: APP, enabled: true, nopass: false, hashes: vec!["aa".into(), "bb".into()] };
        assert_eq!(parse_user(APP, &Value::Array(fields.clone())), Some(expected.clone()));
        let map = Value::Map(fields.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect());
        assert_eq!(parse_user(APP, &map), Some(expected));
    }

    #[test]
    fn a_user_turned_off_without_passwords_is_read_as_such() {
        let fields = Value::Array(vec![bulk("flags"), Value::Array(vec![bulk("off")]), bulk("passwords"), Value::Array(vec![])]);
        assert_eq!(parse_user("default", &fields), Some(RuntimeUser { name: "default", enabled: false, nopass: false, hashes: vec![] }));
    }

    #[test]
    fn a_ca_without_a_certificate_is_refused() {
        assert!(Tls::new(b"not a certificate", "c-cache.ns.svc.cluster.local").is_err());
    }
}
