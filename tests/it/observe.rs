//! Issue 23: `--metrics-file` (node_exporter textfile format, checked by a strict parser here
//! and by the `prometheus_client` Python package when it is installed), `--ping` (a real
//! HTTP server on a local port records the pings), and the `finished` JSON event.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;

/// One series: the family's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// A strict reader of the Prometheus text format (0.0.4), as node_exporter's textfile
/// collector reads it: HELP, then TYPE, then the family's samples, together; valid metric
/// and label names; escaped label values; no series twice; a newline at the end.
fn parse_strict(text: &str) -> Result<BTreeMap<Series, f64>, String> {
    fn name_ok(n: &str) -> bool {
        let mut c = n.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("no newline at the end".into());
    }
    let mut out = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    let mut done: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |e: &str| format!("line {}: {e}: {line:?}", i + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            if !name_ok(name) || helped.contains(&name.to_owned()) {
                return Err(at("bad or repeated HELP"));
            }
            helped.push(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without a type"))?;
            if !helped.contains(&name.to_owned()) || types.contains_key(name) {
                return Err(at("TYPE without HELP, or repeated"));
            }
            if !["gauge", "counter"].contains(&kind) {
                return Err(at("unexpected type"));
            }
            if kind == "counter" && !name.ends_with("_total") {
                return Err(at("a counter's name must end in _total"));
            }
            if let Some(prev) = current.replace(name.to_owned()) {
                done.push(prev);
            }
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(at("unexpected comment or empty line"));
        }
        let open = line
            .find('{')
            .ok_or_else(|| at("a sample without labels"))?;
        let name = &line[..open];
        if current.as_deref() != Some(name) || done.contains(&name.to_owned()) {
            return Err(at("a sample outside its family's block"));
        }
        let mut labels = Vec::new();
        let mut rest = &line[open + 1..];
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find("=\"").ok_or_else(|| at("a label without ="))?;
            let label = &rest[..eq];
            if !name_ok(label) || label.starts_with("__") {
                return Err(at("bad label name"));
            }
            let mut value = String::new();
            let mut chars = rest[eq + 2..].char_indices();
            let end = loop {
                let (j, c) = chars.next().ok_or_else(|| at("unterminated label value"))?;
                match c {
                    '\\' => match chars.next().map(|x| x.1) {
                        Some('n') => value.push('\n'),
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        _ => return Err(at("bad escape")),
                    },
                    '"' => break eq + 2 + j + 1,
                    '\n' => return Err(at("raw newline in a label")),
                    c => value.push(c),
                }
            };
            labels.push((label.to_owned(), value));
            rest = &rest[end..];
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if !rest.starts_with('}') {
                return Err(at("labels not separated by ,"));
            }
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value"))?;
        let value: f64 = value.parse().map_err(|_| at("bad value"))?;
        labels.sort();
        if out.insert((name.to_owned(), labels), value).is_some() {
            return Err(at("the same series twice"));
        }
    }
    Ok(out)
}

/// Parse with the `prometheus_client` Python package too, when it is installed.
fn parse_with_python(path: &Path) {
    let have = std::process::Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("prometheus_client not installed: only the strict parser of these tests ran");
        return;
    }
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as p\n\
             n = sum(len(f.samples) for f in p(open(sys.argv[1]).read()))\nprint(n)",
        )
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the file: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap()
    );
}

fn read_metrics(path: &Path) -> BTreeMap<Series, f64> {
    let text = std::fs::read_to_string(path).unwrap();
    parse_with_python(path);
    parse_strict(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn get(m: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.sort();
    m.get(&(name.to_owned(), l)).copied()
}

fn runs(m: &BTreeMap<Series, f64>, key: &str, outcome: &str) -> f64 {
    get(
        m,
        "redlock_run_runs_total",
        &[("key", key), ("outcome", outcome)],
    )
    .unwrap_or(-1.0)
}

fn last_outcome(m: &BTreeMap<Series, f64>, key: &str) -> Vec<String> {
    m.iter()
        .filter(|((n, l), v)| {
            n == "redlock_run_last_run_outcome"
                && **v == 1.0
                && l.contains(&("key".into(), key.into()))
        })
        .flat_map(|((_, l), _)| {
            l.iter()
                .filter(|(k, _)| k == "outcome")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn metrics_after_failure_success_skip_and_busy() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redlock.prom");
    let key = "redlock:job";
    let run = |extra: &[&str], cmd: &[&str]| {
        Wrapper::on(&redis, "job")
            .arg("--metrics-file")
            .arg(&file)
            .args(extra)
            .arg("--")
            .args(cmd)
            .run()
    };

    run(&[], &["sh", "-c", "exit 3"]).expect_code(3);
    let m = read_metrics(&file);
    assert_eq!(runs(&m, key, "failed"), 1.0);
    assert_eq!(runs(&m, key, "succeeded"), 0.0, "every outcome starts at 0");
    assert_eq!(last_outcome(&m, key), ["failed"]);
    assert_eq!(
        get(&m, "redlock_run_last_run_exit_code", &[("key", key)]),
        Some(3.0)
    );
    assert_eq!(
        get(
            &m,
            "redlock_run_last_success_timestamp_seconds",
            &[("key", key)]
        ),
        None,
        "no success yet"
    );

    let ok = run(
        &["--once-per", "day", "-v", "--log-format", "json"],
        &["sh", "-c", "sleep 0.3"],
    );
    ok.expect_code(0);
    let m = read_metrics(&file);
    assert_eq!(runs(&m, key, "failed"), 1.0, "kept across runs");
    assert_eq!(runs(&m, key, "succeeded"), 1.0);
    let start = get(
        &m,
        "redlock_run_last_run_start_timestamp_seconds",
        &[("key", key)],
    )
    .unwrap();
    let end = get(
        &m,
        "redlock_run_last_run_end_timestamp_seconds",
        &[("key", key)],
    )
    .unwrap();
    let took = get(&m, "redlock_run_last_run_duration_seconds", &[("key", key)]).unwrap();
    assert!((end - start - took).abs() < 0.002, "{start} {end} {took}");
    assert!((0.3..5.0).contains(&took), "{took}");
    assert!((now_secs() - end).abs() < 30.0, "{end}");
    let success = get(
        &m,
        "redlock_run_last_success_timestamp_seconds",
        &[("key", key)],
    )
    .expect("the last success from the run record");
    assert!((success - end).abs() < 5.0, "{success} vs {end}");
    // The finished event carries what a log pipeline needs.
    let finished: serde_json::Value = ok
        .stderr_lines()
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|o| o["event"] == "finished")
        .unwrap_or_else(|| panic!("no finished event\n{ok}"));
    assert_eq!(finished["outcome"], "succeeded", "{ok}");
    assert_eq!(finished["exit_code"], 0, "{ok}");
    assert!(
        finished["duration_ms"].as_u64().is_some_and(|d| d >= 300),
        "{ok}"
    );
    assert!(
        finished["waited_ms"].is_u64() && finished["fence"].is_u64(),
        "{ok}"
    );

    run(&["--once-per", "day"], &["sh", "-c", "exit 9"]).expect_code(0);
    let m = read_metrics(&file);
    assert_eq!(runs(&m, key, "skipped"), 1.0);
    assert_eq!(last_outcome(&m, key), ["skipped"]);
    assert_eq!(
        get(
            &m,
            "redlock_run_last_success_timestamp_seconds",
            &[("key", key)]
        ),
        Some(success),
        "a skip keeps the last success"
    );

    redis.cli(&["SET", key, "someone", "PX", "60000"]);
    run(&["-q"], &["true"]).expect_code(75);
    let m = read_metrics(&file);
    assert_eq!(runs(&m, key, "busy"), 1.0);
    assert_eq!(runs(&m, key, "succeeded"), 1.0);
    assert_eq!(last_outcome(&m, key), ["busy"]);
    assert_eq!(
        get(&m, "redlock_run_last_run_exit_code", &[("key", key)]),
        Some(75.0)
    );
    assert_eq!(
        get(
            &m,
            "redlock_run_last_success_timestamp_seconds",
            &[("key", key)]
        ),
        Some(success),
        "a busy run reads the last success of the job"
    );
}

/// Two keys in one file, their runs ending at once, while a reader reads the file over and
/// over: it never sees half a file, and no update is lost.
#[test]
fn two_keys_share_a_file_atomically() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redlock.prom");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (file, stop) = (file.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u32;
            while !stop.load(Ordering::Relaxed) {
                match std::fs::read_to_string(&file) {
                    Ok(text) => {
                        if let Err(e) = parse_strict(&text) {
                            return Err(format!("{e}\n{text}"));
                        }
                        if !text.contains("# TYPE redlock_run_runs_total counter") {
                            return Err(format!("a partial file:\n{text}"));
                        }
                        reads += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(reads)
        })
    };
    const RUNS: usize = 8;
    let workers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|key| {
            let (url, file) = (redis.url(), file.clone());
            std::thread::spawn(move || {
                for _ in 0..RUNS {
                    let out = Wrapper::new()
                        .args(["--redis", &url, "--key", key, "--metrics-file"])
                        .arg(&file)
                        .args(["--", "true"])
                        .run();
                    out.expect_code(0);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert!(reads > 0, "the reader never saw the file");
    let m = read_metrics(&file);
    for key in ["redlock:a", "redlock:b"] {
        assert_eq!(
            runs(&m, key, "succeeded"),
            RUNS as f64,
            "{key}: an update was lost"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "redlock.prom")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn bad_metrics_paths_and_ping_urls_are_usage_errors_before_redis() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "x").unwrap();
    // Nothing listens there: a run that reached for Redis would exit 69.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--metrics-file".into(), "/no/such/dir/m.prom".into()],
            "/no/such/dir",
        ),
        (
            vec![
                "--metrics-file".into(),
                plain.join("m.prom").display().to_string(),
            ],
            "not a directory",
        ),
        (
            vec!["--metrics-file".into(), dir.path().display().to_string()],
            "is a directory",
        ),
        (
            vec!["--ping".into(), "ftp://example.com/x".into()],
            "--ping",
        ),
        (vec!["--ping".into(), "http://host:99999/x".into()], "port"),
        (
            vec!["--ping".into(), "https://u:secret@host/x".into()],
            "not supported",
        ),
        (vec!["--ping-output".into(), "5".into()], "--ping"),
        (
            vec![
                "--ping".into(),
                "http://h/x".into(),
                "--ping-output".into(),
                "5000".into(),
            ],
            "at most",
        ),
    ];
    for (args, needle) in cases {
        let out = Wrapper::new()
            .args(["--redis", &nowhere, "--key", "k"])
            .args(&args)
            .args(["--", "sh", "-c", "touch ran"])
            .current_dir(dir.path())
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(needle), "{args:?}: {line}");
        assert!(!line.contains("secret"), "{line}");
        assert!(!dir.path().join("ran").exists());
    }
}

/// What the test's monitor does with a connection.
#[derive(Clone, Copy, PartialEq)]
enum Monitor {
    Answers,
    /// Reads the request and never answers.
    Silent,
}

/// A request the monitor got: path (with query) and body.
#[derive(Debug, Clone)]
struct Ping {
    path: String,
    body: String,
}

struct Server {
    port: u16,
    pings: Arc<Mutex<Vec<Ping>>>,
}

impl Server {
    fn start(mode: Monitor) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pings = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&pings);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(conn, mode, &seen));
            }
        });
        Server { port, pings }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ping/check-1", self.port)
    }

    fn take(&self) -> Vec<Ping> {
        std::mem::take(&mut *self.pings.lock().unwrap())
    }

    /// The pings' paths without the run id, all of one run (one rid).
    fn take_paths(&self) -> Vec<String> {
        let pings = self.take();
        let rids: std::collections::BTreeSet<&str> = pings
            .iter()
            .map(|p| p.path.split("rid=").nth(1).unwrap_or("none"))
            .collect();
        assert_eq!(rids.len(), 1, "one run id: {pings:?}");
        pings
            .iter()
            .map(|p| p.path.split('?').next().unwrap().to_owned())
            .collect()
    }
}

fn serve(conn: TcpStream, mode: Monitor, seen: &Mutex<Vec<Ping>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    let mut words = first.split_whitespace();
    assert_eq!(words.next(), Some("POST"), "{first}");
    seen.lock().unwrap().push(Ping {
        path: words.next().unwrap_or_default().to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    match mode {
        Monitor::Answers => {
            let mut conn = conn;
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
        }
        Monitor::Silent => std::thread::sleep(Duration::from_secs(60)),
    }
}

#[test]
fn pings_for_success_failure_signal_and_busy() {
    let redis = RedisServer::start();
    let monitor = Server::start(Monitor::Answers);
    let run = |cmd: &str, extra: &[&str]| {
        Wrapper::on(&redis, "pinged")
            .args(["--ping", &monitor.url()])
            .args(extra)
            .args(["--", "sh", "-c", cmd])
            .run()
    };
    run("echo SECRET-OUTPUT; echo SECRET-ERR >&2", &[]).expect_code(0);
    let pings = monitor.take();
    assert_eq!(
        pings
            .iter()
            .map(|p| p.path.split('?').next().unwrap())
            .collect::<Vec<_>>(),
        ["/ping/check-1/start", "/ping/check-1"],
        "{pings:?}"
    );
    for p in &pings {
        assert!(
            !p.body.contains("SECRET"),
            "output sent without --ping-output: {p:?}"
        );
    }

    run("exit 3", &[]).expect_code(3);
    assert_eq!(
        monitor.take_paths(),
        ["/ping/check-1/start", "/ping/check-1/3"]
    );

    let killed = run("kill -TERM $$", &[]);
    assert_eq!(killed.code(), Some(143), "{killed}");
    assert_eq!(
        monitor.take_paths(),
        ["/ping/check-1/start", "/ping/check-1/143"]
    );

    redis.cli(&["SET", "redlock:pinged", "someone", "PX", "60000"]);
    run("touch ran", &["-q"]).expect_code(75);
    let busy = monitor.take();
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].path.starts_with("/ping/check-1/log?rid="),
        "{busy:?}"
    );
    assert!(busy[0].body.contains("busy"), "{busy:?}");
    redis.cli(&["DEL", "redlock:pinged"]);

    // Asked for: the last lines of the output, stdout and stderr (in the order read: the
    // pauses keep the two streams apart; lines written at the same moment may be read in
    // either order).
    run(
        "echo line-1; sleep 0.3; echo line-2 >&2; sleep 0.3; echo line-3; echo line-4; exit 4",
        &["--ping-output", "3"],
    )
    .expect_code(4);
    let pings = monitor.take();
    let last = pings.last().unwrap();
    assert!(last.path.starts_with("/ping/check-1/4?"), "{pings:?}");
    assert!(
        last.body.ends_with("\nline-2\nline-3\nline-4\n"),
        "{last:?}"
    );
    assert!(!last.body.contains("line-1"), "{last:?}");
}

#[test]
fn a_monitor_that_is_down_is_a_warning_within_the_bound() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Refused: nothing listens.
    let refused = format!("http://127.0.0.1:{}/check", free_port());
    let out = Wrapper::on(&redis, "down")
        .args(["--ping", &refused, "--", "sh", "-c", "exit 3"])
        .run();
    out.expect_code(3);
    assert!(out.elapsed < Duration::from_secs(3), "{out}");
    out.expect_stderr_contains("could not send");

    // Never answers: the command starts at once, and the exit waits at most the bound (5s).
    let silent = Server::start(Monitor::Silent);
    let started = Instant::now();
    let mut running = Wrapper::on(&redis, "down")
        .args(["--ping", &silent.url(), "--", "sh", "-c", "touch started"])
        .current_dir(dir.path())
        .spawn();
    running.wait_for_file(&dir.path().join("started"), Duration::from_secs(2));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the start waited for the monitor"
    );
    // The lock is released while the wrapper still waits for the monitor.
    assert!(
        poll_until(Duration::from_secs(3), || !redis.exists("redlock:down")),
        "the release waited for the monitor"
    );
    assert!(running.is_running(), "gave up on the monitor at once");
    let out = running.wait(Duration::from_secs(20));
    out.expect_code(0);
    assert!(
        out.elapsed < Duration::from_secs(8),
        "the exit waited too long: {out}"
    );
    out.expect_stderr_contains("did not answer");
    assert!(
        !out.stderr.contains("check-1"),
        "the check's path is shown: {out}"
    );
}

/// A small HTTPS monitor or HTTP proxy in Python on a loopback port, writing the first line
/// of every request it gets to a log (one line each; `TLS-FAILED` when a handshake fails).
/// The proxy tunnels `CONNECT host:port` and forwards absolute-form requests, as a real one
/// does, so the pings that pass through it reach their monitor.
const PY_SERVER: &str = r#"
import socket, ssl, sys, threading, time
mode, log = sys.argv[1], sys.argv[2]
lock = threading.Lock()
def record(line):
    with lock, open(log, 'a') as f:
        f.write(line + '\n')
def read_head(conn):
    data = b''
    while b'\r\n\r\n' not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b'\r\n\r\n')
    return head.decode('latin-1'), rest
def monitor(conn):
    head, rest = read_head(conn)
    lines = head.split('\r\n')
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(':')
        if name.strip().lower() == 'content-length':
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(4096)
        if not chunk:
            break
        rest += chunk
    record(lines[0])
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK')
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def proxy(conn):
    head, rest = read_head(conn)
    lines = head.split('\r\n')
    record(lines[0])
    method, target, version = lines[0].split(' ')
    if method == 'CONNECT':
        host, port = target.rsplit(':', 1)
        up = socket.create_connection((host, int(port)), timeout=30)
        conn.sendall(b'HTTP/1.1 200 Connection established\r\n\r\n')
        up.sendall(rest)
    else:
        authority, _, path = target.split('://', 1)[1].partition('/')
        host, port = authority.rsplit(':', 1)
        up = socket.create_connection((host, int(port)), timeout=30)
        lines[0] = method + ' /' + path + ' ' + version
        up.sendall(('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1') + rest)
    back = threading.Thread(target=pipe, args=(up, conn), daemon=True)
    back.start()
    pipe(conn, up)
    back.join(30)
    up.close()
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen(64)
if mode == 'https':
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
def handle(conn):
    conn.settimeout(30)
    try:
        if mode == 'https':
            try:
                conn = ctx.wrap_socket(conn, server_side=True)
            except OSError:
                record('TLS-FAILED')
                return
            monitor(conn)
        else:
            proxy(conn)
    except (OSError, ValueError) as e:
        record('ERROR ' + type(e).__name__)
    finally:
        conn.close()
# Bounded: gone after five minutes even if the test that started it never ends.
threading.Thread(target=lambda: (time.sleep(300), sys.exit()), daemon=True).start()
print(srv.getsockname()[1], flush=True)
srv.settimeout(300)
while True:
    c, _ = srv.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"#;

/// A [`PY_SERVER`] process, killed on drop.
struct PyServer {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PyServer {
    /// `mode` is `https` (then `extra` is the certificate and key files) or `proxy`.
    fn start(mode: &str, extra: &[&Path]) -> PyServer {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests");
        std::fs::write(&log, "").unwrap();
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(PY_SERVER)
            .arg(mode)
            .arg(&log)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 for the test's HTTPS server and proxy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("python server did not start: {line:?}"));
        PyServer {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// The first lines of the requests so far, and forgets them.
    fn take(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap();
        std::fs::write(&self.log, "").unwrap();
        text.lines().map(str::to_owned).collect()
    }

    /// The request lines' targets without the query (`/check/start`), or the line itself.
    fn take_paths(&self) -> Vec<String> {
        self.take()
            .iter()
            .map(|l| match l.split(' ').nth(1) {
                Some(target) => target.split('?').next().unwrap().to_owned(),
                None => l.clone(),
            })
            .collect()
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// No proxy from the test's own environment: the lower-case names are read first, and an
/// empty value counts as unset.
fn without_proxies(w: Wrapper) -> Wrapper {
    w.env("https_proxy", "")
        .env("http_proxy", "")
        .env("no_proxy", "")
}

/// HTTPS pings over the rustls the binary has: trusted through `SSL_CERT_FILE` (a private CA),
/// and a monitor whose certificate is not trusted is a warning that leaves the exit code as
/// it is (and gets no request: nothing is sent over a connection that was not verified).
#[test]
fn https_pings_trust_the_ca_in_ssl_cert_file_and_an_untrusted_monitor_is_a_warning() {
    let redis = RedisServer::start();
    let pki = crate::common::tls::Pki::new();
    let monitor = PyServer::start("https", &[&pki.path("server.crt"), &pki.path("server.key")]);
    let url = format!("https://127.0.0.1:{}/check", monitor.port);
    let run = |ca: &Path, cmd: &str| {
        without_proxies(Wrapper::on(&redis, "tls-ping"))
            .env("SSL_CERT_FILE", ca)
            .args(["--ping", &url, "--", "sh", "-c", cmd])
            .run()
    };

    let out = run(&pki.ca(), "exit 0");
    out.expect_code(0);
    assert!(!out.stderr.contains("ping-failed"), "{out}");
    assert_eq!(monitor.take_paths(), ["/check/start", "/check"], "{out}");

    let out = run(&pki.ca(), "exit 3");
    out.expect_code(3);
    assert_eq!(monitor.take_paths(), ["/check/start", "/check/3"], "{out}");

    // Signed by a CA the wrapper was not told to trust.
    let out = run(&pki.path("other-ca.crt"), "exit 3");
    out.expect_code(3);
    out.expect_stderr_contains("certificate");
    assert!(
        !out.stderr.contains("/check"),
        "the check's path is shown: {out}"
    );
    // The server notes the failed handshake once the client has gone.
    let mut seen = Vec::new();
    poll_until(Duration::from_secs(10), || {
        seen.extend(monitor.take());
        seen.len() >= 2
    });
    assert!(
        !seen.is_empty() && seen.iter().all(|l| l == "TLS-FAILED"),
        "a request went over an unverified connection: {seen:?}\n{out}"
    );
}

/// `http_proxy` (absolute-form requests), `https_proxy` (a CONNECT tunnel; TLS with the
/// monitor itself, through it) and `no_proxy` (straight to the monitor).
#[test]
fn pings_go_through_the_proxy_from_the_environment_unless_no_proxy_names_the_host() {
    let redis = RedisServer::start();
    let proxy = PyServer::start("proxy", &[]);
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);

    // Plain HTTP: the proxy gets the whole URL and forwards it.
    let plain = Server::start(Monitor::Answers);
    let out = Wrapper::on(&redis, "proxied")
        .env("http_proxy", &proxy_url)
        .env("no_proxy", "")
        .args(["--ping", &plain.url(), "--", "true"])
        .run();
    out.expect_code(0);
    assert!(!out.stderr.contains("ping-failed"), "{out}");
    let origin = format!("http://127.0.0.1:{}/ping/check-1", plain.port);
    let through: Vec<String> = proxy.take();
    assert_eq!(through.len(), 2, "{through:?}");
    assert!(
        through[0].starts_with(&format!("POST {origin}/start?rid="))
            && through[1].starts_with(&format!("POST {origin}?rid=")),
        "{through:?}"
    );
    assert_eq!(plain.take_paths(), ["/ping/check-1/start", "/ping/check-1"]);

    // HTTPS: a tunnel to the monitor's host and port; the proxy sees nothing else.
    let pki = crate::common::tls::Pki::new();
    let secure = PyServer::start("https", &[&pki.path("server.crt"), &pki.path("server.key")]);
    let out = Wrapper::on(&redis, "proxied")
        .env("https_proxy", &proxy_url)
        .env("no_proxy", "")
        .env("SSL_CERT_FILE", pki.ca())
        .args([
            "--ping",
            &format!("https://127.0.0.1:{}/check", secure.port),
        ])
        .args(["--", "sh", "-c", "exit 5"])
        .run();
    out.expect_code(5);
    assert!(!out.stderr.contains("ping-failed"), "{out}");
    let tunnel = format!("CONNECT 127.0.0.1:{} HTTP/1.1", secure.port);
    assert_eq!(
        proxy.take(),
        [tunnel.clone(), tunnel],
        "two pings, two tunnels"
    );
    assert_eq!(secure.take_paths(), ["/check/start", "/check/5"]);

    // no_proxy names the host: straight to the monitor, the proxy sees nothing.
    let out = Wrapper::on(&redis, "proxied")
        .env("http_proxy", &proxy_url)
        .env("no_proxy", "example.org, 127.0.0.1")
        .args(["--ping", &plain.url(), "--", "true"])
        .run();
    out.expect_code(0);
    assert_eq!(proxy.take(), Vec::<String>::new(), "{out}");
    assert_eq!(plain.take_paths(), ["/ping/check-1/start", "/ping/check-1"]);

    // A proxy this client cannot use is a warning naming the variable (never its value,
    // which may hold a password), not a way around it; the exit code stands.
    for (value, needle) in [
        ("socks5://127.0.0.1:9", "only an http:// proxy"),
        ("http://user:secret@127.0.0.1:9", "user or password"),
    ] {
        let out = Wrapper::on(&redis, "proxied")
            .env("http_proxy", value)
            .env("no_proxy", "")
            .args(["--ping", &plain.url(), "--", "sh", "-c", "exit 4"])
            .run();
        out.expect_code(4);
        out.expect_stderr_contains("http_proxy");
        out.expect_stderr_contains(needle);
        assert!(!out.stderr.contains("secret"), "{out}");
        let direct = plain.take();
        assert!(
            direct.is_empty(),
            "went around the proxy: {direct:?}\n{out}"
        );
    }
}

/// The run record's last success (`ended_at`) in seconds since 1970, from `status --json`.
fn recorded_success(w: Wrapper) -> f64 {
    let out = w.args(["status", "--json"]).run();
    out.expect_code(0);
    let status = parse_json(out.stdout.trim());
    let ended = status["last_success"]["ended_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no last success in {status}"));
    let at: jiff::Timestamp = ended.parse().unwrap();
    at.as_millisecond() as f64 / 1000.0
}

/// On any topology: a success on "another host" (a run without this host's metrics file)
/// is the job's last success in this host's file, read by a run that `--once-per` skipped
/// and by one that failed (the record read after the release); the skipped run pings `/log`.
fn last_success_comes_from_the_run_record(w: impl Fn() -> Wrapper) {
    let dir = scratch();
    let file = dir.path().join("job.prom");
    let monitor = Server::start(Monitor::Answers);
    w().args(["--once-per", "day", "--", "true"])
        .run()
        .expect_code(0);
    let success = recorded_success(w());

    let skipped = w()
        .args(["--once-per", "day", "--metrics-file"])
        .arg(&file)
        .args(["--ping", &monitor.url(), "--", "sh", "-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    skipped.expect_code(0);
    assert!(!dir.path().join("ran").exists(), "{skipped}");
    let m = read_metrics(&file);
    let key = "redlock:k";
    assert_eq!(runs(&m, key, "skipped"), 1.0, "{skipped}");
    assert_eq!(runs(&m, key, "succeeded"), 0.0, "{skipped}");
    let last = |m: &BTreeMap<Series, f64>| {
        get(
            m,
            "redlock_run_last_success_timestamp_seconds",
            &[("key", key)],
        )
    };
    assert!(
        last(&m).is_some_and(|s| (s - success).abs() < 0.0015),
        "{:?} vs the record's {success}\n{skipped}",
        last(&m)
    );
    assert_eq!(monitor.take_paths(), ["/ping/check-1/log"]);

    // Another success elsewhere, then a failure here: the record read after the release.
    w().args(["--", "true"]).run().expect_code(0);
    let newer = recorded_success(w());
    assert!(newer > success, "{newer} {success}");
    w().args(["--metrics-file"])
        .arg(&file)
        .args(["--", "sh", "-c", "exit 3"])
        .run()
        .expect_code(3);
    let m = read_metrics(&file);
    assert_eq!(runs(&m, key, "failed"), 1.0);
    assert!(
        last(&m).is_some_and(|s| (s - newer).abs() < 0.0015),
        "{:?} vs the record's {newer}",
        last(&m)
    );
}

#[test]
fn sentinel_metrics_last_success_from_the_run_record() {
    let set = crate::common::sentinel::SentinelSet::start(1);
    last_success_comes_from_the_run_record(|| set.wrapper("k"));
}

#[test]
fn cluster_metrics_last_success_from_the_run_record() {
    let cluster = crate::common::cluster::Cluster::start(3, 0);
    last_success_comes_from_the_run_record(|| cluster.wrapper("k"));
}

#[test]
fn redlock_metrics_last_success_from_the_run_record() {
    let nodes = crate::common::quorum::Nodes::start(3);
    last_success_comes_from_the_run_record(|| nodes.wrapper("k"));
}
