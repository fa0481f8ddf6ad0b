//! Shared harness for the integration tests.
//!
//! - [`RedisServer`]: a throwaway `redis-server` on a free loopback port, with its own temp dir
//!   and log file. Its `Drop` kills it (SIGKILL) and reaps it. Every readiness failure panics
//!   with the server log.
//! - [`Wrapper`] / [`Running`] / [`Outcome`]: run `redlock-run` in the foreground or the
//!   background, with stdout and stderr captured to files (so an orphaned grandchild holding
//!   the pipe can never hang a test), bounded waits, and panic messages that print the command
//!   line, the exit status, stdout and stderr.
//! - [`PidGuard`], [`pid_alive`], [`wait_until`]: bounded polling on events (files appearing,
//!   processes dying, keys vanishing) instead of sleeps.
//! - [`RedisServer::version`], [`RedisServer::is_valkey`], [`skip`]: what the server under test
//!   is (asked with `INFO server`), for the few tests that need a feature some servers lack.
//!   `REDIS_SERVER_BIN` / `REDIS_CLI_BIN` choose the binaries (scripts/test-servers).
//! - Small helpers several test modules share: [`secs`], [`ms`], [`now_ns`], [`read_trimmed`],
//!   [`parse_json`], [`start_primary_and_replica`].
//!
//! Included by the one integration-test binary, `tests/it/main.rs`, as its `common` module.
//!
//! Nothing here talks to the Redis at 127.0.0.1:6379, and every loop is bounded.

#![allow(dead_code)]

pub mod cluster;
pub mod history;
pub mod proxy;
pub mod quorum;
pub mod sentinel;
pub mod tls;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// How often the polling helpers look again.
pub const POLL: Duration = Duration::from_millis(10);

/// Default bound for a wrapper run that is expected to finish on its own.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Prefix of every line the wrapper itself writes to stderr.
pub const MSG_PREFIX: &str = "redlock-run: ";

// ---------------------------------------------------------------------------------------------
// Polling helpers
// ---------------------------------------------------------------------------------------------

/// Polls `cond` every [`POLL`] until it holds or `timeout` passes. Returns whether it held.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL);
    }
}

/// Like [`poll_until`], but panics naming `what` on timeout. Returns the time it took.
pub fn wait_until(timeout: Duration, what: &str, cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    if !poll_until(timeout, cond) {
        panic!("timed out after {timeout:?} waiting for: {what}");
    }
    start.elapsed()
}

/// Whether `pid` names a live (non-zombie) process.
pub fn pid_alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    // A zombie still answers kill(pid, 0); it is dead for our purposes.
    match proc_stat(pid) {
        Some((state, _)) => state != 'Z' && state != 'X',
        None => false,
    }
}

/// The state letter of `pid` (`R`, `S`, `T` stopped, `Z`...), if it exists.
pub fn process_state(pid: i32) -> Option<char> {
    proc_stat(pid).map(|(state, _)| state)
}

/// State letter and start time (field 22) from /proc/PID/stat.
fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let fields = proc_stat_fields(pid)?;
    let state = fields.first()?.chars().next()?;
    // Field 22 is index 19.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// The fields of /proc/PID/stat from field 3 (state) on: field N is index N - 3.
pub fn proc_stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(String::from).collect())
}

/// Kills a process (that the test learned about from a marker file) on drop, if it is still
/// the same process. Guards against a broken wrapper leaving children behind.
pub struct PidGuard {
    pid: i32,
    start_time: Option<u64>,
}

impl PidGuard {
    pub fn new(pid: i32) -> Self {
        PidGuard {
            pid,
            start_time: proc_stat(pid).map(|(_, t)| t),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for PidGuard {
    fn drop(&mut self) {
        let Some(t0) = self.start_time else { return };
        if pid_alive(self.pid) && proc_stat(self.pid).map(|(_, t)| t) == Some(t0) {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// Reads a pid the child wrote with `echo $$ > FILE`, waiting until the file holds a full line.
pub fn read_pid_file(path: &Path, timeout: Duration) -> i32 {
    let mut pid = None;
    let ok = poll_until(timeout, || {
        let Ok(s) = fs::read_to_string(path) else {
            return false;
        };
        if !s.ends_with('\n') {
            return false;
        }
        pid = s.trim().parse().ok();
        pid.is_some()
    });
    assert!(ok, "no pid in {} after {timeout:?}", path.display());
    pid.unwrap()
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

fn shell_quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,%+".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

// ---------------------------------------------------------------------------------------------
// Throwaway redis-server
// ---------------------------------------------------------------------------------------------

/// A `redis-server` owned by one test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    extra: Vec<String>,
    password: Option<String>,
}

/// Set once a server refused `--enable-debug-command` as an unknown directive (Redis before
/// 7.0, where DEBUG is always allowed): later servers start without it.
static NO_DEBUG_COMMAND_OPTION: AtomicBool = AtomicBool::new(false);

/// The server binary under test: `REDIS_SERVER_BIN`, or `redis-server` on the PATH.
pub fn redis_server_bin() -> OsString {
    std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into())
}

pub fn redis_cli_bin() -> OsString {
    std::env::var_os("REDIS_CLI_BIN").unwrap_or_else(|| "redis-cli".into())
}

impl RedisServer {
    /// Starts a server with the default test settings.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments (`--requirepass secret`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redlock-test-redis-")
            .tempdir()
            .expect("tempdir for redis-server");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let password = extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| extra.get(i + 1).cloned());
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            extra,
            password,
        };
        let mut last_err = String::new();
        for _attempt in 0..20 {
            server.port = free_port();
            match server.try_spawn(Duration::from_secs(15)) {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start redis-server after 20 attempts; last error: {last_err}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's own stderr: a config error is reported there, before the log file opens.
    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("stderr.log")
    }

    /// The server's log so far (for panic messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    /// Spawns on `self.port` and waits for it to answer PING.
    fn try_spawn(&mut self, timeout: Duration) -> Result<(), String> {
        let _ = fs::remove_file(self.log_path());
        let mut cmd = Command::new(redis_server_bin());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"]);
        if !NO_DEBUG_COMMAND_OPTION.load(Ordering::Relaxed) {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(self.stderr_path()).expect("server stderr file"));
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot spawn {:?}: {e}", redis_server_bin()))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let stderr = fs::read_to_string(self.stderr_path()).unwrap_or_default();
                if stderr.contains("enable-debug-command") && stderr.contains("Bad directive") {
                    // Try again without it (the callers retry).
                    NO_DEBUG_COMMAND_OPTION.store(true, Ordering::Relaxed);
                }
                return Err(format!(
                    "redis-server on port {} exited early ({status}); stderr:\n{stderr}\nlog:\n{}",
                    self.port,
                    self.log()
                ));
            }
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-server on port {} did not answer PING within {timeout:?}; log:\n{}",
                    self.port,
                    self.log()
                );
            }
            thread::sleep(POLL);
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server not running").id() as i32
    }

    /// `redis://127.0.0.1:PORT` (no password, even if the server requires one).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli -p PORT ARGS...` (authenticating if the server has a password) and
    /// returns its trimmed stdout. Error replies come back as text ("WRONGTYPE ...").
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(redis_cli_bin());
        cmd.arg("-p").arg(self.port.to_string());
        if let Some(pw) = &self.password {
            cmd.args(["-a", pw, "--no-auth-warning"]);
        }
        cmd.args(args).stdin(Stdio::null());
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        if !out.status.success() {
            panic!(
                "redis-cli -p {} {:?} failed ({}):\nstdout: {}\nstderr: {}\nserver log:\n{}",
                self.port,
                args,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        }
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// `cli` parsed as an integer reply.
    pub fn cli_int(&self, args: &[&str]) -> i64 {
        let s = self.cli(args);
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("redis-cli {args:?}: expected an integer, got {s:?}"))
    }

    pub fn exists(&self, key: &str) -> bool {
        self.cli_int(&["EXISTS", key]) == 1
    }

    /// The value of a string key, or None if the key does not exist.
    pub fn get(&self, key: &str) -> Option<String> {
        if !self.exists(key) {
            return None;
        }
        Some(self.cli(&["GET", key]))
    }

    pub fn pttl(&self, key: &str) -> i64 {
        self.cli_int(&["PTTL", key])
    }

    pub fn dbsize(&self) -> i64 {
        self.cli_int(&["DBSIZE"])
    }

    /// A field of `INFO`, e.g. `total_connections_received`.
    pub fn info_field(&self, field: &str) -> i64 {
        let info = self.cli(&["INFO", "everything"]);
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no integer field {field} in INFO"))
    }

    /// `INFO server` as `field:value` pairs.
    pub fn info_server(&self) -> Vec<(String, String)> {
        self.cli(&["INFO", "server"])
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn info_server_version(&self, field: &str) -> Option<(u32, u32, u32)> {
        let info = self.info_server();
        let v = &info.iter().find(|(k, _)| k == field)?.1;
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        Some((
            parts.next()?,
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        ))
    }

    /// Whether the server says it is Valkey (`INFO server` has `valkey_version`).
    pub fn is_valkey(&self) -> bool {
        self.info_server_version("valkey_version").is_some()
    }

    /// The server's own version, as it says in `INFO server`: `valkey_version` on Valkey,
    /// `redis_version` on Redis.
    pub fn version(&self) -> (u32, u32, u32) {
        self.info_server_version("valkey_version")
            .or_else(|| self.info_server_version("redis_version"))
            .unwrap_or_else(|| panic!("no version in INFO server:\n{:?}", self.info_server()))
    }

    /// The Redis version the server is compatible with (`redis_version`; Valkey 8 and 9 say
    /// 7.2.4): what decides which Redis features and reply formats it has.
    pub fn redis_compat_version(&self) -> (u32, u32, u32) {
        self.info_server_version("redis_version")
            .unwrap_or_else(|| panic!("no redis_version in INFO server:\n{:?}", self.info_server()))
    }

    /// `Redis 6.2.14` or `Valkey 9.1.2`: for skip messages.
    pub fn describe(&self) -> String {
        let (a, b, c) = self.version();
        let name = if self.is_valkey() { "Valkey" } else { "Redis" };
        format!("{name} {a}.{b}.{c}")
    }

    /// Freezes the server (SIGSTOP): connections are accepted by the kernel, nothing answers.
    pub fn pause(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGSTOP).expect("SIGSTOP redis-server");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGCONT).expect("SIGCONT redis-server");
    }

    /// Kills the server (SIGKILL) and reaps it. The port stays reserved for `restart`.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills (if running) and starts again on the same port, with an empty dataset.
    pub fn restart(&mut self) {
        self.kill();
        let mut last_err = String::new();
        for _attempt in 0..50 {
            match self.try_spawn(Duration::from_secs(15)) {
                Ok(()) => return,
                Err(e) => last_err = e,
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "could not restart redis-server on port {}: {last_err}",
            self.port
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too.
        self.kill();
    }
}

/// One raw `PING`; true on `+PONG` or `-NOAUTH` (a server with a password is up, too).
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => {
            let reply = &buf[..n];
            reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH")
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// The wrapper under test
// ---------------------------------------------------------------------------------------------

/// The binary under test. `REDLOCK_TEST_BIN` points the suite at another build (to check
/// that a regression test fails on the code before its fix).
pub fn wrapper_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("REDLOCK_TEST_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_redlock-run").to_owned())
    })
}

/// Builder for one `redlock-run` invocation.
#[derive(Clone, Default)]
pub struct Wrapper {
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    /// `ulimit -n` for the wrapper.
    nofile: Option<u64>,
    /// Run this `sh -c` script instead of the wrapper itself (it execs the wrapper).
    shell: Option<String>,
}

impl Wrapper {
    /// No arguments at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// `--redis URL --key KEY` for `server`.
    pub fn on(server: &RedisServer, key: &str) -> Self {
        Self::new().args(["--redis", &server.url(), "--key", key])
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `-c SCRIPT`.
    pub fn sh(self, script: &str) -> Self {
        self.args(["-c", script])
    }

    /// Sets an environment variable for the wrapper (applied after REDLOCK_* are cleared).
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    /// Working directory of the wrapper (and so of the child): where marker files land.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Start the wrapper with `ulimit -n limit`.
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Bytes fed to the wrapper's stdin (default: /dev/null).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    pub fn cmdline(&self) -> String {
        let mut s = String::from("redlock-run");
        for a in &self.args {
            s.push(' ');
            s.push_str(&shell_quote(a));
        }
        s
    }

    /// Starts the wrapper in the background.
    pub fn spawn(&self) -> Running {
        let out_dir = tempfile::Builder::new()
            .prefix("redlock-test-out-")
            .tempdir()
            .expect("tempdir for output");
        let out_path = out_dir.path().join("stdout");
        let err_path = out_dir.path().join("stderr");
        let mut cmd = match &self.shell {
            Some(script) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", script]);
                sh
            }
            None => Command::new(wrapper_bin()),
        };
        cmd.args(&self.args);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("REDLOCK_") {
                cmd.env_remove(&k);
            }
        }
        // No config file unless a test names one: a /etc/redlock-run.toml on the machine
        // must not change what the tests see.
        cmd.env("REDLOCK_CONFIG", "");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd.stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        // A test runner started from a script's background job inherits SIGINT and SIGQUIT
        // ignored; the wrapper would (rightly) keep them ignored for the child and the
        // forwarding tests would fail for the wrong reason. Start it with defaults.
        // SAFETY: signal(2) and setrlimit(2) are async-signal-safe; nothing else runs between
        // fork and exec.
        let nofile = self.nofile;
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                if let Some(limit) = nofile {
                    let lim = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", wrapper_bin()));
        if let Some(bytes) = self.stdin.clone() {
            let mut pipe = child.stdin.take().unwrap();
            thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        Running {
            pid: child.id() as i32,
            child,
            status: None,
            cmdline: self.cmdline(),
            started: Instant::now(),
            out_path,
            err_path,
            _out_dir: out_dir,
            guards: Vec::new(),
        }
    }

    /// Runs `sh -c script` (which execs the wrapper itself) to completion, with this
    /// builder's environment, directory and output capture.
    pub fn run_via_shell(mut self, script: &str) -> Outcome {
        self.shell = Some(script.to_owned());
        self.run()
    }

    /// Runs to completion (bounded by [`RUN_TIMEOUT`]).
    pub fn run(&self) -> Outcome {
        self.spawn().wait(RUN_TIMEOUT)
    }
}

/// A wrapper running in the background. Killed (SIGKILL) on drop if still running, together
/// with any child pids registered through [`Running::child_pid`].
pub struct Running {
    child: Child,
    pub pid: i32,
    status: Option<ExitStatus>,
    cmdline: String,
    pub started: Instant,
    out_path: PathBuf,
    err_path: PathBuf,
    _out_dir: TempDir,
    guards: Vec<PidGuard>,
}

impl Running {
    pub fn signal(&self, sig: Signal) {
        assert!(
            self.status.is_none(),
            "cannot send {sig:?}: wrapper already exited\n{}",
            self.describe()
        );
        kill(Pid::from_raw(self.pid), sig)
            .unwrap_or_else(|e| panic!("kill({}, {sig:?}): {e}\n{}", self.pid, self.describe()));
    }

    /// Exit status if it has exited (reaps it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.out_path).unwrap_or_default()).into_owned()
    }

    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.err_path).unwrap_or_default()).into_owned()
    }

    /// Command line, state, stdout and stderr so far: for panic messages.
    pub fn describe(&self) -> String {
        let state = match self.status {
            Some(s) => format!("exited: {s}"),
            None => "still running".to_string(),
        };
        format!(
            "command: {}\nstate: {state} (after {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}\n---",
            self.cmdline,
            self.started.elapsed(),
            self.stdout_so_far(),
            self.stderr_so_far()
        )
    }

    /// Waits for `cond`, panicking with the wrapper's state on timeout. Returns the time it took.
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut cond: impl FnMut() -> bool,
    ) -> Duration {
        let start = Instant::now();
        let ok = poll_until(timeout, &mut cond);
        if !ok {
            self.try_status();
            panic!(
                "timed out after {timeout:?} waiting for: {what}\n{}",
                self.describe()
            );
        }
        start.elapsed()
    }

    /// Waits for a marker file the child creates.
    pub fn wait_for_file(&mut self, path: &Path, timeout: Duration) {
        let what = format!("file {} to exist", path.display());
        self.wait_until(timeout, &what, || path.exists());
    }

    /// Reads the pid the child wrote with `echo $$ > FILE` and registers it to be killed if
    /// the test ends while it is still alive.
    pub fn child_pid(&mut self, path: &Path, timeout: Duration) -> i32 {
        let what = format!("a pid line in {}", path.display());
        let mut pid = None;
        self.wait_until(timeout, &what, || {
            let s = fs::read_to_string(path).unwrap_or_default();
            pid = s.strip_suffix('\n').and_then(|l| l.trim().parse().ok());
            pid.is_some()
        });
        let pid = pid.unwrap();
        self.guards.push(PidGuard::new(pid));
        pid
    }

    /// Waits for the wrapper to exit, at most `timeout`; on timeout kills it and panics with
    /// its output.
    pub fn wait(mut self, timeout: Duration) -> Outcome {
        let ok = poll_until(timeout, || self.try_status().is_some());
        if !ok {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!(
                "wrapper did not exit within {timeout:?} (killed it)\n{}",
                self.describe()
            );
        }
        Outcome {
            cmdline: self.cmdline.clone(),
            status: self.status.unwrap(),
            stdout: self.stdout_so_far(),
            stderr: self.stderr_so_far(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // self.guards drop next and kill leftover children.
    }
}

/// The result of one finished wrapper run.
pub struct Outcome {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to observed exit.
    pub elapsed: Duration,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "command: {}\nstatus: {} (after {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}\n---",
            self.cmdline, self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

impl Outcome {
    /// The exit code as a shell's `$?` shows it: 128+N for a wrapper that ended by signal N
    /// (it ends by its command's signal, as timeout(1) and sudo do).
    pub fn code(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .code()
            .or_else(|| self.status.signal().map(|sig| 128 + sig))
    }

    /// The signal the wrapper ended by, if it did.
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }

    /// Panics unless the wrapper's `$?` is `code` (128+N also by dying by signal N).
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), Some(code), "expected exit code {code}\n{self}");
        self
    }

    /// Non-empty stderr lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// Panics unless every stderr line is one of the wrapper's own (`redlock-run: ...`).
    pub fn expect_all_lines_prefixed(&self) -> &Self {
        for l in self.stderr_lines() {
            assert!(
                l.starts_with(MSG_PREFIX),
                "stderr line does not start with {MSG_PREFIX:?}: {l:?}\n{self}"
            );
        }
        self
    }

    /// Panics unless stderr is exactly one `redlock-run: ...` line; returns it.
    pub fn expect_one_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one line on stderr, got {}\n{self}",
            lines.len()
        );
        assert!(
            lines[0].starts_with(MSG_PREFIX),
            "stderr line does not start with {MSG_PREFIX:?}\n{self}"
        );
        lines[0]
    }

    pub fn expect_stderr_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "expected stderr to contain {needle:?}\n{self}"
        );
        self
    }
}

/// Says on the test run's own stderr (not captured by the test harness, so it shows in a plain
/// `cargo test`) that the current test, or one check of it, is skipped on `server`, and why.
/// Use only where the server lacks what the check is about (or for a known, reported bug),
/// and keep every check that holds there.
pub fn skip(server: &RedisServer, reason: &str) {
    let current = thread::current();
    let test = current.name().unwrap_or("?");
    let line = format!("SKIPPED {test} on {}: {reason}\n", server.describe());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A per-test scratch directory for marker files; the child runs with it as its cwd.
pub fn scratch() -> TempDir {
    tempfile::Builder::new()
        .prefix("redlock-test-")
        .tempdir()
        .expect("scratch tempdir")
}

// ---------------------------------------------------------------------------------------------
// Shared small helpers
// ---------------------------------------------------------------------------------------------

/// `Duration::from_secs(n)`, short for the many bounds in the tests.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `Duration::from_millis(n)`.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Wall-clock nanoseconds, comparable with `date +%s%N` written by a child.
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A marker file's content without surrounding whitespace; panics naming the file.
pub fn read_trimmed(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// A primary and a replica of it, once the replication link is up.
pub fn start_primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_until(Duration::from_secs(20), "replica link up", || {
        replica
            .cli(&["info", "replication"])
            .contains("master_link_status:up")
            && primary
                .cli(&["info", "replication"])
                .contains("connected_slaves:1")
    });
    (primary, replica)
}

/// One JSON document (`status --json`, a `--log-format json` line), parsed; panics with the
/// text when it is not JSON.
pub fn parse_json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `script(1)`, to run a command on a pseudo-terminal, with the job-control signals at their
/// defaults: a test run started in the background of a script (`cmd &` ignores SIGINT and
/// SIGQUIT, and an ignored signal stays ignored across exec) would otherwise hand that to the
/// shell and the command under test, and Ctrl-C or Ctrl-\ would do nothing there.
pub fn script_command() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("script");
    // SAFETY: only sigaction (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{SigHandler, Signal, signal};
            for sig in [
                Signal::SIGINT,
                Signal::SIGQUIT,
                Signal::SIGTSTP,
                Signal::SIGTTIN,
                Signal::SIGTTOU,
            ] {
                signal(sig, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    cmd
}
