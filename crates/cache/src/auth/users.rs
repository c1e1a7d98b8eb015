//! Pure: who may do what on a Cache's servers and Sentinels, and the files the pods read it
//! from. Each part of a Cache authenticates as a user of its own, allowed what it needs and no
//! more (docs/adr/0020-cache-authentication.md):
//!
//! | user | where | may |
//! |---|---|---|
//! | `app` | servers | every command but the administrative ones (`@admin`: CONFIG, ACL, DEBUG, MONITOR, REPLICAOF, SHUTDOWN...), ROLE excepted: what an application does with its cache |
//! | `app` | Sentinels | ask for the primary, the replicas and the Sentinels, and subscribe to their events: what a Sentinel-aware client does |
//! | `replication` | servers | PSYNC, REPLCONF, PING: what a replica asks its primary (`masteruser`) |
//! | `sentinel` | servers | what Sentinel sends to monitor and reconfigure them (its `auth-user`) |
//! | `sentinel` | Sentinels | everything: the Sentinels among themselves (`sentinel-user`) |
//! | `monitor` | both | PING, INFO and the reads the exporter makes; on Sentinels which server is the primary: the probes, the start scripts and the exporter |
//! | `operator` | both | `ACL GETUSER`/`ACL SETUSER` (the passwords of `app` and `default`) and, on Sentinels, `SENTINEL MASTER`: Blockwork's own calls |
//! | `default` | both | off: no client may use it (connections it had before keep working), unless `auth.required` is false: then everything, as without authentication |
//!
//! Memcached has no permissions per user: its auth file lists who may connect (`app` with each
//! of its passwords, and `monitor` for the probes), and each may do everything.

use crate::auth::password::Password;

pub const APP: &str = "app";
pub const REPLICATION: &str = "replication";
pub const SENTINEL: &str = "sentinel";
pub const MONITOR: &str = "monitor";
pub const OPERATOR: &str = "operator";
pub const DEFAULT: &str = "default";

/// What `app` may do on a server: an application's every command but administration. ROLE (in
/// `@admin`) is given back: Sentinel-aware clients ask it to confirm they reached the primary.
const APP_ON_SERVERS: &str = "~* &* +@all -@admin +role";
/// What `app` may do on a Sentinel: the questions Sentinel-aware clients ask, and the events
/// they subscribe to (`+switch-master`). Every command named exists in Redis 7.0 (an unknown one
/// stops a server from loading its users).
const APP_ON_SENTINELS: &str = "allchannels -@all +auth +hello +ping +role +client|setname +client|getname +client|id \
+sentinel|get-master-addr-by-name +sentinel|master +sentinel|masters +sentinel|replicas +sentinel|slaves +sentinel|sentinels \
+subscribe +psubscribe +unsubscribe +punsubscribe";
/// What a replica asks its primary, as Redis' documentation gives it.
const REPLICATION_ON_SERVERS: &str = "-@all +psync +replconf +ping";
/// What Sentinel sends the servers it monitors, as Redis' documentation gives it (REPLICAOF
/// beside SLAVEOF: Valkey's Sentinel sends it).
const SENTINEL_ON_SERVERS: &str = "allchannels -@all +multi +exec +slaveof +replicaof +ping +subscribe +publish +info +role +config|rewrite +client|setname +client|kill +script|kill";
/// The Sentinels among themselves.
const SENTINEL_ON_SENTINELS: &str = "allchannels +@all";
/// The probes' PING, and what redis_exporter reads (measured: its scrape passes with no NOPERM).
const MONITOR_ON_SERVERS: &str = "-@all +ping +info +role +config|get +client|list +client|info +client|setname +slowlog|get +slowlog|len \
+latency|latest +latency|histogram +dbsize +memory|stats +cluster|info +select";
/// The probes' PING, and what a starting pod asks the others' Sentinels.
const MONITOR_ON_SENTINELS: &str = "-@all +ping +sentinel|master +sentinel|replicas";
/// The operator changes only the passwords of `app` and `default` (and reads them back).
const OPERATOR_ON_SERVERS: &str = "-@all +ping +acl|getuser +acl|setuser";
const OPERATOR_ON_SENTINELS: &str = "-@all +ping +acl|getuser +acl|setuser +sentinel|master";
/// The default user's permissions: those of a Cache without authentication. When authentication
/// is required it is off: no client may use it any more, and turning it off at run time (a Cache
/// moved to authentication) leaves the connections it already has working as they did (`ACL
/// SETUSER` re-evaluates an open connection's permissions at each command, so taking them away
/// would fail their requests).
const DEFAULT_PERMISSIONS: &str = "~* &* +@all";

/// Every password of a Cache: the application's (up to three during a rotation) and one per
/// internal user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passwords {
    /// Accepted from `app`, oldest first: the previous (retiring), the current (published), the
    /// next (being added).
    pub app: Vec<Password>,
    pub replication: Password,
    pub sentinel: Password,
    pub monitor: Password,
    pub operator: Password,
}

/// A user whose passwords the operator keeps in step on running servers, where they change
/// without a restart (`ACL SETUSER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeUser {
    pub name: &'static str,
    /// `on`: may authenticate.
    pub enabled: bool,
    /// May authenticate without a password (`default` while authentication is not required).
    pub nopass: bool,
    /// The SHA-256 of each password it accepts, sorted.
    pub hashes: Vec<String>,
}

impl RuntimeUser {
    /// Its state and passwords in ACL words: `on #HASH...`, `on nopass` or `off`.
    fn words(&self) -> Vec<String> {
        let mut words = vec![if self.enabled { "on" } else { "off" }.to_owned()];
        if self.nopass {
            words.push("nopass".to_owned());
        }
        words.extend(self.hashes.iter().map(|hash| format!("#{hash}")));
        words
    }

    /// The `ACL SETUSER NAME ...` arguments that make a user exactly this, its permissions
    /// given as `rules` (passwords by hash: no password travels).
    pub fn setuser(&self, rules: &str) -> Vec<String> {
        let mut arguments = vec![self.name.to_owned(), "reset".to_owned()];
        arguments.extend(self.words());
        arguments.extend(rules.split_whitespace().map(str::to_owned));
        arguments
    }

    /// Its line in an ACL file.
    fn line(&self, rules: &str) -> String {
        format!("user {} {} {rules}\n", self.name, self.words().join(" "))
    }
}

/// Where a user is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Server,
    Sentinel,
}

/// The users the operator keeps in step at run time (`app` and `default`), as `place` wants
/// them, with the permissions they are set with.
pub fn runtime_users(passwords: &Passwords, required: bool, place: Place) -> Vec<(RuntimeUser, &'static str)> {
    let mut hashes: Vec<String> = passwords.app.iter().map(Password::sha256).collect();
    hashes.sort();
    hashes.dedup();
    let app_rules = match place {
        Place::Server => APP_ON_SERVERS,
        Place::Sentinel => APP_ON_SENTINELS,
    };
    let default = (RuntimeUser { name: DEFAULT, enabled: !required, nopass: true, hashes: Vec::new() }, DEFAULT_PERMISSIONS);
    vec![(RuntimeUser { name: APP, enabled: true, nopass: false, hashes }, app_rules), default]
}

fn internal(name: &str, password: &Password, rules: &str) -> String {
    format!("user {name} on #{} {rules}\n", password.sha256())
}

fn runtime_lines(passwords: &Passwords, required: bool, place: Place) -> String {
    runtime_users(passwords, required, place).iter().map(|(user, rules)| user.line(rules)).collect()
}

/// The servers' ACL file (`aclfile`): every user, passwords by hash.
pub fn server_acl(passwords: &Passwords, required: bool) -> String {
    let mut file = runtime_lines(passwords, required, Place::Server);
    file.push_str(&internal(REPLICATION, &passwords.replication, REPLICATION_ON_SERVERS));
    file.push_str(&internal(SENTINEL, &passwords.sentinel, SENTINEL_ON_SERVERS));
    file.push_str(&internal(MONITOR, &passwords.monitor, MONITOR_ON_SERVERS));
    file.push_str(&internal(OPERATOR, &passwords.operator, OPERATOR_ON_SERVERS));
    file
}

/// The Sentinels' users, as lines of their configuration (Sentinel reads `user` lines, not an
/// ACL file).
pub fn sentinel_acl(passwords: &Passwords, required: bool) -> String {
    let mut file = runtime_lines(passwords, required, Place::Sentinel);
    file.push_str(&internal(SENTINEL, &passwords.sentinel, SENTINEL_ON_SENTINELS));
    file.push_str(&internal(MONITOR, &passwords.monitor, MONITOR_ON_SENTINELS));
    file.push_str(&internal(OPERATOR, &passwords.operator, OPERATOR_ON_SENTINELS));
    file
}

/// How the Sentinels of Cache `master` authenticate to its servers and to each other (lines of
/// their configuration, after `sentinel monitor`).
pub fn sentinel_auth(passwords: &Passwords, master: &str) -> String {
    let password = passwords.sentinel.expose();
    format!(
        "sentinel auth-user {master} {SENTINEL}\nsentinel auth-pass {master} {password}\nsentinel sentinel-user {SENTINEL}\nsentinel sentinel-pass {password}\n"
    )
}

/// How a replica authenticates to its primary (`include`d by the server's configuration).
pub fn replication_conf(passwords: &Passwords) -> String {
    format!("masteruser {REPLICATION}\nmasterauth {}\n", passwords.replication.expose())
}

/// redis_exporter's password file: the address it scrapes, and `monitor`'s password.
pub fn exporter_passwords(passwords: &Passwords, address: &str) -> String {
    serde_json::json!({ address: passwords.monitor.expose() }).to_string()
}

/// memcached's auth file (`-Y`): `app` with each of its passwords, `monitor` for the probes.
pub fn memcached_auth(passwords: &Passwords) -> String {
    let mut file: String = passwords.app.iter().map(|password| format!("{APP}:{}\n", password.expose())).collect();
    file.push_str(&format!("{MONITOR}:{}\n", passwords.monitor.expose()));
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    fn password(text: &str) -> Password {
        Password::parse(text.as_bytes()).expect("valid")
    }

    fn passwords(app: &[&str]) -> Passwords {
        Passwords {
            app: app.iter().map(|p| password(p)).collect(),
            replication: password("replication-pw"),
            sentinel: password("sentinel-pw"),
            monitor: password("monitor-pw"),
            operator: password("operator-pw"),
        }
    }

    #[test]
    fn the_acl_file_names_passwords_by_hash_only() {
        let file = server_acl(&passwords(&["current-pw", "next-pw-1"]), true);
        for plain in ["current-pw", "next-pw-1", "replication-pw", "sentinel-pw", "monitor-pw", "operator-pw"] {
            assert!(!file.contains(plain), "{plain} in {file}");
            assert!(file.contains(&format!("#{}", password(plain).sha256())), "no hash of {plain} in {file}");
        }
    }

    #[test]
    fn the_default_user_is_off_when_authentication_is_required_and_open_when_not() {
        let required = server_acl(&passwords(&["current-pw"]), true);
        assert!(required.contains("user default off nopass ~* &* +@all\n"), "{required}");
        let optional = server_acl(&passwords(&["current-pw"]), false);
        assert!(optional.contains("user default on nopass ~* &* +@all\n"), "{optional}");
    }

    #[test]
    fn app_may_not_administer_the_server_and_replication_may_only_replicate() {
        let file = server_acl(&passwords(&["current-pw"]), true);
        let app = file.lines().find(|l| l.starts_with("user app ")).expect("app");
        assert!(app.ends_with("~* &* +@all -@admin +role"), "{app}");
        let replication = file.lines().find(|l| l.starts_with("user replication ")).expect("replication");
        assert!(replication.ends_with("-@all +psync +replconf +ping"), "{replication}");
    }

    #[test]
    fn setuser_replaces_the_passwords_by_hash() {
        let users = runtime_users(&passwords(&["previous-pw", "current-pw"]), true, Place::Server);
        let (app, rules) = &users[0];
        let arguments = app.setuser(rules);
        assert_eq!(&arguments[..3], ["app", "reset", "on"]);
        let mut hashes = [password("previous-pw").sha256(), password("current-pw").sha256()];
        hashes.sort();
        assert_eq!(arguments[3..5], [format!("#{}", hashes[0]), format!("#{}", hashes[1])]);
        assert!(arguments.iter().all(|a| !a.contains("current-pw")), "{arguments:?}");
        let (default, rules) = &users[1];
        assert_eq!(default.setuser(rules), ["default", "reset", "off", "nopass", "~*", "&*", "+@all"]);
    }

    #[test]
    fn sentinels_authenticate_to_the_servers_and_each_other_as_sentinel() {
        let auth = sentinel_auth(&passwords(&["current-pw"]), "sessions");
        assert_eq!(
            auth,
            "sentinel auth-user sessions sentinel\nsentinel auth-pass sessions sentinel-pw\nsentinel sentinel-user sentinel\nsentinel sentinel-pass sentinel-pw\n"
        );
    }

    #[test]
    fn memcached_accepts_every_password_of_app_and_the_monitor() {
        assert_eq!(
            memcached_auth(&passwords(&["old-password", "new-password"])),
            "app:old-password\napp:new-password\nmonitor:monitor-pw\n"
        );
    }

    #[test]
    fn the_exporter_reads_the_monitor_password_for_its_address() {
        assert_eq!(exporter_passwords(&passwords(&["current-pw"]), "redis://127.0.0.1:6379"), r#"{"redis://127.0.0.1:6379":"monitor-pw"}"#);
    }
}
