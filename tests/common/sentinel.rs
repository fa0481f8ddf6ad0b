//! Redis Sentinel for the tests: a master, its replicas and three sentinels, all throwaway
//! processes on free loopback ports.
//!
//! - [`SentinelSet::start`]: 1 master + N replicas (`--repl-diskless-sync-delay 0`, so a
//!   replica syncs at once) + 3 sentinels (`down-after-milliseconds 500`, quorum 2), each
//!   sentinel with its config in a temp dir of its own (a sentinel rewrites its config).
//!   Ready when every replica's link is up and every sentinel knows the master, all its
//!   replicas and the other sentinels: waited for on those events, never a fixed sleep.
//! - [`SentinelSet::wait_for_failover`]: after the master was killed, waits until every live
//!   sentinel names a new master and that server says it is one. [`SentinelSet::manual_failover`],
//!   [`SentinelSet::named_masters`] and [`SentinelSet::wait_replica_online`] watch the steps of
//!   one (tests/it/failover.rs).
//! - `REDIS_SERVER_BIN` is honoured (`redis-server --sentinel` works for Redis 6.2, 7.0 and
//!   Valkey). `Drop` kills every process (the data nodes through their own `RedisServer`).

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::tls::Pki;
use super::{POLL, RedisServer, Wrapper, free_port, redis_server_bin, wait_until};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "mymaster";

/// How long a set may take to be ready, or a failover to complete (measured: about 2 s).
const READY: Duration = Duration::from_secs(30);

/// One sentinel process.
pub struct SentinelProc {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl SentinelProc {
    fn start(master_port: u16, options: &Options) -> Self {
        let (master_password, password) = (options.data_password, options.sentinel_password);
        let dir = tempfile::Builder::new()
            .prefix("redlock-test-sentinel-")
            .tempdir()
            .expect("tempdir for a sentinel");
        let mut last_err = String::new();
        for _attempt in 0..20 {
            let port = free_port();
            let mut conf = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                 sentinel failover-timeout {MASTER_NAME} 2000\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir = dir.path().display()
            );
            if let Some(pw) = master_password {
                conf.push_str(&format!("sentinel auth-pass {MASTER_NAME} {pw}\n"));
            }
            if let Some(pw) = password {
                conf.push_str(&format!("requirepass {pw}\n"));
            }
            if let Some(pki) = options.tls {
                // The sentinels reach the data nodes over TLS (their own port stays plain).
                conf.push_str(&format!(
                    "tls-replication yes\ntls-cert-file {}\ntls-key-file {}\n\
                     tls-ca-cert-file {}\n",
                    pki.path("server.crt").display(),
                    pki.path("server.key").display(),
                    pki.ca().display()
                ));
            }
            let conf_path = dir.path().join("sentinel.conf");
            fs::write(&conf_path, conf).expect("write sentinel.conf");
            let mut child = Command::new(redis_server_bin())
                .arg(&conf_path)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(dir.path().join("stderr.log")).expect("stderr file"))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot spawn {:?}: {e}", redis_server_bin()));
            match wait_answering(&mut child, port, &dir, password) {
                Ok(()) => {
                    return SentinelProc {
                        child: Some(child),
                        port,
                        dir,
                    };
                }
                Err(e) => {
                    // Most likely the port was taken meanwhile: try another.
                    last_err = e;
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        panic!("could not start a sentinel: {last_err}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until the sentinel on `port` answers PING; its log as the error if it exits.
fn wait_answering(
    child: &mut Child,
    port: u16,
    dir: &TempDir,
    password: Option<&str>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let read = |f: &str| fs::read_to_string(dir.path().join(f)).unwrap_or_default();
            return Err(format!(
                "sentinel on port {port} exited early ({status}); stderr:\n{}\nlog:\n{}",
                read("stderr.log"),
                read("sentinel.log")
            ));
        }
        if cli_at(port, password, &["PING"]).is_some_and(|r| r == "PONG") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("sentinel on port {port} did not answer within 15s"));
        }
        std::thread::sleep(POLL);
    }
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `redis-cli -p PORT ARGS` (with `-a` for a password): trimmed stdout, `None` if redis-cli
/// failed or the reply is an error.
pub fn cli_at(port: u16, password: Option<&str>, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new(std::env::var_os("REDIS_CLI_BIN").unwrap_or("redis-cli".into()));
    cmd.arg("-p").arg(port.to_string());
    if let Some(pw) = password {
        cmd.args(["-a", pw, "--no-auth-warning"]);
    }
    let out = cmd.args(args).stdin(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim_end().to_owned();
    let error = text.starts_with("ERR")
        || text.starts_with("NOAUTH")
        || text.starts_with("WRONGPASS")
        || text.starts_with("Could not connect");
    (out.status.success() && !error).then_some(text)
}

/// Options of a set.
#[derive(Default, Clone, Copy)]
pub struct Options<'a> {
    /// Replicas of the master (at least 1).
    pub replicas: usize,
    /// `--requirepass` of every data node (the sentinels are told with `auth-pass`).
    pub data_password: Option<&'a str>,
    /// `requirepass` of every sentinel.
    pub sentinel_password: Option<&'a str>,
    /// Data nodes that also listen with TLS (certificates from this PKI), replicate over it,
    /// and are monitored by the sentinels on their TLS ports: what the sentinels name.
    pub tls: Option<&'a Pki>,
}

/// A master, its replicas and three sentinels.
pub struct SentinelSet {
    /// The data nodes; `nodes[0]` is the first master.
    pub nodes: Vec<RedisServer>,
    /// The port of each node that the sentinels know: its TLS port with `Options::tls`.
    ports: Vec<u16>,
    pub sentinels: Vec<SentinelProc>,
    sentinel_password: Option<String>,
}

impl SentinelSet {
    /// A master with `replicas` replicas and three sentinels, ready.
    pub fn start(replicas: usize) -> Self {
        Self::start_with(Options {
            replicas,
            ..Options::default()
        })
    }

    pub fn start_with(options: Options) -> Self {
        assert!(
            options.replicas >= 1,
            "a set needs a replica to fail over to"
        );
        let mut data_args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
        if let Some(pw) = options.data_password {
            // The replicas log in to the master with it, too.
            for a in ["--requirepass", pw, "--masterauth", pw] {
                data_args.push(a.into());
            }
        }
        let start_node = |replica_of: Option<u16>| {
            let mut args = data_args.clone();
            let tls_port = options.tls.map(|pki| {
                let port = free_port();
                let path = |f: &str| pki.path(f).to_string_lossy().into_owned();
                args.extend([
                    "--tls-port".into(),
                    port.to_string(),
                    "--tls-cert-file".into(),
                    path("server.crt"),
                    "--tls-key-file".into(),
                    path("server.key"),
                    "--tls-ca-cert-file".into(),
                    path("ca.crt"),
                    "--tls-auth-clients".into(),
                    "no".into(),
                    "--tls-replication".into(),
                    "yes".into(),
                ]);
                port
            });
            if let Some(port) = replica_of {
                args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let node = RedisServer::start_with(&args);
            let port = tls_port.unwrap_or(node.port());
            (node, port)
        };
        let (master, master_port) = start_node(None);
        let mut nodes = vec![master];
        let mut ports = vec![master_port];
        for _ in 0..options.replicas {
            let (node, port) = start_node(Some(master_port));
            nodes.push(node);
            ports.push(port);
        }
        let sentinels = (0..3)
            .map(|_| SentinelProc::start(master_port, &options))
            .collect();
        let set = SentinelSet {
            nodes,
            ports,
            sentinels,
            sentinel_password: options.sentinel_password.map(str::to_owned),
        };
        set.wait_ready(options.replicas);
        set
    }

    /// Every replica linked, every sentinel knowing the master, its replicas and its peers.
    fn wait_ready(&self, replicas: usize) {
        let connected = format!("connected_slaves:{replicas}");
        self.wait(READY, "the replicas' links up", || {
            self.nodes[0]
                .cli(&["info", "replication"])
                .contains(&connected)
        });
        for s in &self.sentinels {
            self.wait(
                READY,
                "every sentinel knows the replicas and the others",
                || {
                    let Some(info) =
                        self.sentinel_cli(s.port, &["SENTINEL", "MASTER", MASTER_NAME])
                    else {
                        return false;
                    };
                    field(&info, "num-slaves") == Some(replicas.to_string())
                        && field(&info, "num-other-sentinels") == Some("2".to_owned())
                        && field(&info, "flags").as_deref() == Some("master")
                },
            );
        }
    }

    fn sentinel_cli(&self, port: u16, args: &[&str]) -> Option<String> {
        cli_at(port, self.sentinel_password.as_deref(), args)
    }

    /// Like `wait_until`, with every log in the panic message.
    pub fn wait(&self, timeout: Duration, what: &str, cond: impl FnMut() -> bool) {
        if !super::poll_until(timeout, cond) {
            panic!(
                "timed out after {timeout:?} waiting for: {what}\n{}",
                self.logs()
            );
        }
    }

    /// The logs of the sentinels and of the data nodes, for panic messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for s in &self.sentinels {
            text.push_str(&format!("--- sentinel {} ---\n{}\n", s.port, s.log()));
        }
        for n in &self.nodes {
            text.push_str(&format!("--- node {} ---\n{}\n", n.port(), n.log()));
        }
        text
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`.
    pub fn url(&self) -> String {
        let ports: Vec<u16> = self.sentinels.iter().map(|s| s.port).collect();
        sentinel_url(&ports)
    }

    /// `--redis URL --key KEY` for this set.
    pub fn wrapper(&self, key: &str) -> Wrapper {
        Wrapper::new().args(["--redis", &self.url(), "--key", key])
    }

    /// The port the first live sentinel names as the master's.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .find_map(|s| self.named_master(s.port))
            .unwrap_or_else(|| panic!("no sentinel names a master\n{}", self.logs()))
    }

    /// What each live sentinel names as the master now (`None`: no answer).
    pub fn named_masters(&self) -> Vec<Option<u16>> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .map(|s| self.named_master(s.port))
            .collect()
    }

    /// Asks the first live sentinel for a manual failover (`SENTINEL FAILOVER`); panics
    /// unless it says OK.
    pub fn manual_failover(&self) {
        let s = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .expect("a sentinel");
        let reply = self.sentinel_cli(s.port, &["SENTINEL", "FAILOVER", MASTER_NAME]);
        assert_eq!(
            reply.as_deref(),
            Some("OK"),
            "SENTINEL FAILOVER\n{}",
            self.logs()
        );
    }

    /// Waits until the node on `master` lists the node on `replica` as an online replica
    /// (data nodes without a password).
    pub fn wait_replica_online(&self, master: u16, replica: u16) {
        let needle = format!("port={replica},state=online");
        self.wait(READY, "the replica online on the master", || {
            cli_at(master, None, &["INFO", "replication"]).is_some_and(|i| i.contains(&needle))
        });
    }

    fn named_master(&self, sentinel_port: u16) -> Option<u16> {
        let reply = self.sentinel_cli(
            sentinel_port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        )?;
        reply.lines().nth(1)?.trim().parse().ok()
    }

    /// The data node the sentinels know at `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        let i = self.index(port);
        &self.nodes[i]
    }

    /// The index in `nodes` of the node the sentinels know at `port`.
    pub fn index(&self, port: u16) -> usize {
        self.ports
            .iter()
            .position(|p| *p == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// After the master on `old` was killed: waits until every live sentinel names another
    /// master and that server says it is one. Returns its port.
    pub fn wait_for_failover(&self, old: u16) -> u16 {
        let mut new = 0;
        self.wait(READY, "every sentinel names a new master", || {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.is_running())
                .map(|s| self.named_master(s.port))
                .collect();
            match named.first() {
                Some(Some(port)) if *port != old && named.iter().all(|n| *n == Some(*port)) => {
                    new = *port;
                    true
                }
                _ => false,
            }
        });
        self.wait(READY, "the new master says ROLE master", || {
            self.node(new)
                .cli(&["ROLE"])
                .lines()
                .next()
                .is_some_and(|l| l == "master")
        });
        new
    }
}

/// `redis+sentinel://` naming the sentinels on `ports`, in that order.
pub fn sentinel_url(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
}

/// The value after `name` in redis-cli's one-item-per-line output of a flat map.
fn field(reply: &str, name: &str) -> Option<String> {
    let mut lines = reply.lines();
    while let Some(line) = lines.next() {
        if line.trim() == name {
            return lines.next().map(|v| v.trim().to_owned());
        }
    }
    None
}

/// Waits (bounded) until `port` accepts no connection: for tests that need a dead address.
pub fn wait_port_closed(port: u16) {
    wait_until(Duration::from_secs(10), "the port to close", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
}
