//! Network faults between the wrapper and Redis, made by the harness's TCP fault proxy:
//! a write and its WAIT travel together, a silently dead connection is replaced, and a waiter
//! interrupted while its acquire's reply is lost leaves nothing behind.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use nix::sys::signal::Signal;

use crate::common::proxy::{Dir, FaultProxy};
use crate::common::*;

fn ended_by_sigint(out: &Outcome) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.code() == Some(130) || out.status.signal() == Some(2)
}

fn proxy_to(redis: &RedisServer) -> FaultProxy {
    FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], redis.port())))
}

/// The commands a server runs, as MONITOR shows them, collected by a thread until dropped.
struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(redis: &RedisServer) -> Monitor {
        let mut conn = TcpStream::connect(("127.0.0.1", redis.port())).expect("connect");
        conn.set_read_timeout(Some(ms(100))).unwrap();
        conn.write_all(b"MONITOR\r\n").unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, done) = (Arc::clone(&lines), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let mut reader = BufReader::new(conn);
            let mut line = String::new();
            while !done.load(Ordering::Relaxed) {
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        seen.lock().unwrap().push(line.trim_end().to_owned());
                        line.clear();
                    }
                    // A read timeout: look at the stop flag again; a partial line stays.
                    Err(_) => {}
                }
            }
        });
        let monitor = Monitor {
            lines,
            stop,
            thread: Some(thread),
        };
        wait_until(secs(5), "MONITOR to start", || {
            monitor.lines().iter().any(|l| l == "+OK")
        });
        monitor
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The client address (`[db addr]`) of a MONITOR line.
    fn client(line: &str) -> Option<&str> {
        let open = line.find('[')?;
        let close = line[open..].find(']')? + open;
        line[open + 1..close].split_whitespace().nth(1)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `--min-replicas`: the WAIT that confirms a write must ride on the write's connection, in
/// the same pipeline. Sent as a call of its own after the script's reply, it can land on a
/// connection re-established in between, where it counts nothing and answers at once. Shown
/// here by holding every reply back: the WAIT reaches the server anyway, right behind its
/// script, from the same client.
#[test]
fn the_replica_wait_travels_with_the_write_it_confirms() {
    let (primary, _replica) = start_primary_and_replica();
    let proxy = proxy_to(&primary);
    let monitor = Monitor::start(&primary);
    proxy.hold(Dir::Down);
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k"])
        .args(["--min-replicas", "1", "--replica-timeout", "5s"])
        .args(["--connect-timeout", "10s", "--", "true"])
        .spawn();
    let waited = poll_until(secs(5), || {
        monitor.lines().iter().any(|l| l.contains("\"WAIT\""))
    });
    let lines = monitor.lines();
    proxy.release(Dir::Down);
    let out = run.wait(secs(30));
    assert!(
        waited,
        "no WAIT reached the server while the script's reply was held back:\n{}\n{out}",
        lines.join("\n")
    );
    let wait_at = lines.iter().position(|l| l.contains("\"WAIT\"")).unwrap();
    let script = lines[..wait_at]
        .iter()
        .rev()
        .find(|l| l.contains("\"EVAL") && l.contains("redlock:k"))
        .unwrap_or_else(|| panic!("no script before the WAIT:\n{}", lines.join("\n")));
    assert_eq!(
        Monitor::client(script),
        Monitor::client(&lines[wait_at]),
        "the WAIT came from another connection than its script:\n{}",
        lines.join("\n")
    );
    out.expect_code(0);
}

/// A connection that dies silently (no FIN, no RST; new connections work) must be dropped
/// after a timeout and replaced. A waiter with `--wait forever` whose connection froze once
/// waited for ever on a free lock.
#[test]
fn a_silently_dead_connection_is_replaced() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "someone-else", "PX", "60000"]);
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--wait", "forever"])
        .args(["--connect-timeout", "500ms"])
        .sh("touch ran")
        .current_dir(dir.path())
        .spawn();
    // Waiting: its connections are open and it has polled at least once.
    wait_until(secs(10), "the waiter to connect", || {
        proxy.connections() >= 1
    });
    // Its acquire script has run (busy: it queued), so the server has it cached. (Counting
    // commands instead let the harness's own commands through, and then the first EVALSHA's
    // NOSCRIPT was held with every reply: the acquire never reached the server.)
    wait_until(secs(10), "the waiter to poll", || {
        redis.cli_int(&["ZCARD", "{redlock:k}:queue"]) == 1
    });
    proxy.freeze_all();
    redis.cli(&["DEL", "redlock:k"]);
    let ran = poll_until(secs(15), || dir.path().join("ran").exists());
    proxy.thaw_all();
    assert!(
        ran,
        "the waiter did not take the free lock within 15 s of its connection freezing\n{}",
        run.describe()
    );
    run.wait(secs(30)).expect_code(0);
}

/// A waiter interrupted (SIGINT) while an acquire attempt's reply is lost must take back
/// the SET that landed: "a run that did not acquire never writes to the key" holds on the
/// retry path too, not only on the final error.
#[test]
fn an_interrupted_waiter_leaves_no_lock_behind() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    redis.cli(&["SET", "redlock:k", "someone-else", "PX", "60000"]);
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--wait", "60s"])
        .args(["--ttl", "60s", "--connect-timeout", "2s", "--", "true"])
        .spawn();
    // Its acquire script has run (busy: it queued), so the server has it cached. (Counting
    // commands instead let the harness's own commands through, and then the first EVALSHA's
    // NOSCRIPT was held with every reply: the acquire never reached the server.)
    wait_until(secs(10), "the waiter to poll", || {
        redis.cli_int(&["ZCARD", "{redlock:k}:queue"]) == 1
    });
    // Replies are held from now on (requests still reach the server), and the lock is free:
    // the waiter's next SET lands, and its reply never comes.
    proxy.hold(Dir::Down);
    redis.cli(&["DEL", "redlock:k"]);
    wait_until(secs(10), "the waiter's SET to land", || {
        redis.get("redlock:k").is_some()
    });
    run.signal(Signal::SIGINT);
    let out = run.wait(secs(30));
    proxy.release(Dir::Down);
    assert!(ended_by_sigint(&out), "must end by SIGINT\n{out}");
    let left = redis.get("redlock:k");
    assert_eq!(
        left, None,
        "the interrupted waiter left its lock behind\n{out}"
    );
}

/// A waiter subscribes to release notices on a connection of its own. When that connection
/// hangs (accepted, never answered), the subscription is bounded by the wait left, not by
/// --connect-timeout, and a signal ends it at once.
#[test]
fn a_hanging_subscription_respects_the_wait_and_signals() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "redlock:k", "someone-else", "PX", "60000"]);
    let proxy = proxy_to(&redis);
    proxy.blackhole_after(1);
    let out = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--wait", "1s"])
        .args(["--connect-timeout", "20s", "--", "true"])
        .run();
    out.expect_code(75);
    assert!(
        out.elapsed < secs(10),
        "the wait of 1s took {:?}\n{out}",
        out.elapsed
    );

    let proxy = proxy_to(&redis);
    proxy.blackhole_after(1);
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--wait", "60s"])
        .args(["--connect-timeout", "20s", "--", "true"])
        .spawn();
    wait_until(secs(10), "the subscription to hang", || {
        proxy.accepted() >= 2
    });
    run.signal(Signal::SIGINT);
    let out = run.wait(secs(30));
    assert!(ended_by_sigint(&out), "{out}");
    assert!(
        out.elapsed < secs(10),
        "SIGINT took {:?} to end the wait\n{out}",
        out.elapsed
    );
}

/// The connection going silent in the middle of a run (no FIN, no RST; new connections
/// work): a renewal on it must be given up in time and retried on a new connection, so the
/// command keeps its lease. Once the first renewal waited for the whole lease, the command
/// was stopped (74), and the release then waited on the same dead connection.
#[test]
fn a_connection_that_dies_mid_run_is_replaced_in_time() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    let dir = scratch();
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--ttl", "3s"])
        .sh("echo $$ > pid; sleep 5")
        .current_dir(dir.path())
        .spawn();
    let child = read_pid_file(&dir.path().join("pid"), secs(10));
    let _guard = PidGuard::new(child);
    proxy.freeze_all();
    let out = run.wait(secs(30));
    proxy.thaw_all();
    out.expect_code(0);
    assert!(
        out.elapsed < secs(9),
        "the release waited on the dead connection\n{out}"
    );
    assert!(!redis.exists("redlock:k"), "{out}");
}

/// An acquire whose reply was lost is taken back, and its token cancelled: if the request
/// itself arrives only after the take-back (a retransmission, a middlebox holding it), it
/// must not take the lock. Shown with the scripts themselves, in that order, on a server.
#[test]
fn an_acquire_arriving_after_its_take_back_does_not_land() {
    let redis = RedisServer::start();
    let scripts =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lock/protocol/scripts");
    let read = |name: &str| std::fs::read_to_string(scripts.join(name)).unwrap();
    // As the wrapper sends them: the shared helpers (and the acquire's prelude) first.
    let cancel = read("reach.lua") + &read("wake.lua") + &read("cancel.lua");
    let acquire = read("reach.lua") + &read("prelude.lua") + &read("acquire.lua");
    let token = "late-token";
    let cancelled = redis.cli(&[
        "EVAL",
        &cancel,
        "1",
        "redlock:k",
        "{redlock:k}:holder",
        "{redlock:k}:released",
        "{redlock:k}:cancelled",
        "{redlock:k}:queue",
        "{redlock:k}:queue-expiry",
        token,
        "600000",
        "1",
    ]);
    assert_eq!(cancelled, "0", "nothing to release yet");
    let acquire_with = |token: &str| {
        redis.cli(&[
            "EVAL",
            &acquire,
            "1",
            "redlock:k",
            "{redlock:k}:fence",
            "{redlock:k}:holder",
            "{redlock:k}:cancelled",
            "{redlock:k}:queue",
            "{redlock:k}:queue-expiry",
            token,
            "30000",
            "60000",
            "host",
            "1",
            "cmd",
            "",
            "30000",
            "{redlock:k}:pause",
            "",
            "{redlock:k}:shared",
        ])
    };
    let late = acquire_with(token);
    assert!(
        !redis.exists("redlock:k"),
        "the late acquire took the lock: {late}"
    );
    // Another run's token is not affected.
    acquire_with("another-token");
    assert_eq!(redis.get("redlock:k").as_deref(), Some("another-token"));
}

/// End to end: every request held up in the network until the run gave up. Whatever order
/// the acquire and its take-back then arrive in, no lock is left behind.
#[test]
fn a_held_up_acquire_leaves_no_lock_whatever_the_order() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    proxy.hold(Dir::Up);
    let out = Wrapper::new()
        .args([
            "--redis",
            &proxy.url(),
            "--key",
            "k",
            "--connect-timeout",
            "1s",
        ])
        .args(["--", "true"])
        .run();
    out.expect_code(69);
    wait_until(secs(10), "both connections", || proxy.accepted() >= 2);
    proxy.release(Dir::Up);
    wait_until(secs(10), "the held requests to arrive", || {
        redis.info_field("total_commands_processed") >= 2
    });
    std::thread::sleep(ms(200));
    assert!(!redis.exists("redlock:k"), "a lock was left behind\n{out}");
}

/// A slow link (every reply 1.2 s late, requests on time) under `--ttl 3s --heartbeat 300ms
/// --grace 300ms`: each renewal is answered with lease to spare, so the run must keep its
/// lease. A renewal bounded by a quarter of the ttl (0.75 s) and then abandoned never got an
/// answer at all: every one timed out and the command was stopped (74).
#[test]
fn a_slow_link_keeps_the_lease() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    // A server in use has the scripts cached: a first run loads them, so that the acquire
    // below is one round trip (a NOSCRIPT there would cost 1.2 s of the first lease).
    Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--", "true"])
        .run()
        .expect_code(0);
    proxy.set_latency(Dir::Down, ms(1200));
    let out = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "-v"])
        .args(["--ttl", "3s", "--heartbeat", "300ms", "--grace", "300ms"])
        .args(["--connect-timeout", "10s", "--", "sleep", "6"])
        .run();
    out.expect_code(0);
    let renewed = out.stderr.matches("renewed redlock:k").count();
    assert!(
        renewed >= 3,
        "a 6 s command under a 3 s ttl was renewed {renewed} times\n{out}"
    );
    assert!(!redis.exists("redlock:k"), "{out}");
}

/// The scripts flushed from the server's cache (SCRIPT FLUSH; a restart or a failover does
/// the same) while every reply takes 0.5 s, with the default heartbeat and grace of a 3 s
/// ttl (1 s each): a renewal sent as EVALSHA meets NOSCRIPT and pays a second round trip as
/// EVAL, 1 s in all, past the moment the command must be stopped (1.97 s after the last
/// renewal was sent, 1 s before the next one is due). Renewals go in full: one round trip.
#[test]
fn a_script_flush_on_a_slow_link_keeps_the_lease() {
    let redis = RedisServer::start();
    let proxy = proxy_to(&redis);
    let dir = scratch();
    let run = Wrapper::new()
        .args(["--redis", &proxy.url(), "--key", "k", "--ttl", "3s", "-v"])
        .sh("echo $$ > pid; sleep 5")
        .current_dir(dir.path())
        .spawn();
    let child = read_pid_file(&dir.path().join("pid"), secs(10));
    let _guard = PidGuard::new(child);
    proxy.set_latency(Dir::Down, ms(500));
    redis.cli(&["SCRIPT", "FLUSH"]);
    let out = run.wait(secs(30));
    out.expect_code(0);
    assert!(out.stderr.contains("renewed redlock:k"), "{out}");
    assert!(!redis.exists("redlock:k"), "{out}");
}
