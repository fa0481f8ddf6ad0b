//! Fair waiting: runs with `--wait` take a busy lock in the order they arrived. A waiter that
//! gives up leaves the queue at once; one that is killed leaves it when its place expires
//! (about one `--ttl`); a run without `--wait` never queues and never jumps the queue;
//! `status` shows the queue.

use std::fs;

use nix::sys::signal::Signal;

use crate::common::*;

const QUEUE: &str = "{redlock:q}:queue";

fn queued(redis: &RedisServer) -> i64 {
    redis.cli_int(&["ZCARD", QUEUE])
}

/// A holder whose command runs until the file `go` appears in `dir`.
fn holder(redis: &RedisServer, dir: &std::path::Path) -> Running {
    let mut h = Wrapper::on(redis, "q")
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir)
        .spawn();
    h.wait_for_file(&dir.join("held"), secs(20));
    h
}

/// A waiter whose command appends NAME to the file `order`.
fn waiter(redis: &RedisServer, dir: &std::path::Path, name: &str, extra: &[&str]) -> Running {
    Wrapper::on(redis, "q")
        .args(["--wait", "60s"])
        .args(extra)
        .sh(&format!("echo {name} >> order"))
        .current_dir(dir)
        .spawn()
}

#[test]
fn waiters_take_the_lock_in_arrival_order() {
    let redis = RedisServer::start();
    for round in 0..3 {
        let dir = scratch();
        let h = holder(&redis, dir.path());
        let mut waiters = Vec::new();
        let names: Vec<String> = (1..=6).map(|i| format!("w{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            waiters.push(waiter(&redis, dir.path(), name, &[]));
            // The next one arrives only once this one is in the queue.
            let n = i as i64 + 1;
            waiters[i].wait_until(secs(20), &format!("{name} queued"), || queued(&redis) == n);
        }
        fs::write(dir.path().join("go"), "").unwrap();
        h.wait(secs(30)).expect_code(0);
        for w in waiters {
            w.wait(secs(60)).expect_code(0);
        }
        let order = read_trimmed(&dir.path().join("order"));
        let order: Vec<&str> = order.lines().collect();
        assert_eq!(order, names, "round {round}: not served in arrival order");
        assert_eq!(queued(&redis), 0, "round {round}: the queue is not empty");
    }
}

#[test]
fn a_killed_waiters_place_expires_and_the_next_one_runs() {
    let redis = RedisServer::start();
    let dir = scratch();
    let h = holder(&redis, dir.path());
    let mut first = waiter(&redis, dir.path(), "first", &["--ttl", "3s"]);
    first.wait_until(secs(20), "first queued", || queued(&redis) == 1);
    let mut second = waiter(&redis, dir.path(), "second", &["--ttl", "3s"]);
    second.wait_until(secs(20), "second queued", || queued(&redis) == 2);
    // The head of the queue dies without a word.
    first.signal(Signal::SIGKILL);
    first.wait(secs(10));
    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    let out = second.wait(secs(30));
    out.expect_code(0);
    assert_eq!(read_trimmed(&dir.path().join("order")), "second");
    assert_eq!(queued(&redis), 0, "the dead waiter's place is still there");
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let dir = scratch();
    let h = holder(&redis, dir.path());
    // Places are kept for a whole --ttl (30 s by default): only leaving makes room sooner.
    let mut quitter = Wrapper::on(&redis, "q")
        .args(["--wait", "1s"])
        .sh("echo quitter >> order")
        .current_dir(dir.path())
        .spawn();
    quitter.wait_until(secs(20), "quitter queued", || queued(&redis) == 1);
    let mut patient = waiter(&redis, dir.path(), "patient", &[]);
    patient.wait_until(secs(20), "patient queued", || queued(&redis) == 2);
    quitter.wait(secs(30)).expect_code(75);
    assert_eq!(queued(&redis), 1, "the waiter that gave up is still queued");
    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    patient.wait(secs(10)).expect_code(0);
    assert_eq!(read_trimmed(&dir.path().join("order")), "patient");
}

#[test]
fn a_run_without_wait_never_queues_nor_jumps_the_queue() {
    let redis = RedisServer::start();
    let dir = scratch();
    let h = holder(&redis, dir.path());
    let mut w = waiter(&redis, dir.path(), "waiter", &[]);
    w.wait_until(secs(20), "waiter queued", || queued(&redis) == 1);

    // Busy while held: exit 75, and it does not join the queue.
    let busy = Wrapper::on(&redis, "q").sh("echo nowait >> order").run();
    busy.expect_code(75);
    assert_eq!(queued(&redis), 1);

    // Free, but the waiter (frozen here, so it cannot take it yet) came first.
    w.signal(Signal::SIGSTOP);
    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    let busy = Wrapper::on(&redis, "q").sh("echo nowait >> order").run();
    busy.expect_code(75);
    busy.expect_stderr_contains("free, but 1 waiter queued");
    w.signal(Signal::SIGCONT);
    w.wait(secs(30)).expect_code(0);
    assert_eq!(read_trimmed(&dir.path().join("order")), "waiter");
}

#[test]
fn status_shows_the_queue() {
    let redis = RedisServer::start();
    let dir = scratch();
    let h = holder(&redis, dir.path());
    let mut w = waiter(&redis, dir.path(), "w", &[]);
    w.wait_until(secs(20), "waiter queued", || queued(&redis) == 1);
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let text = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "q"])
        .run();
    text.expect_code(0);
    let expected = format!("; 1 waiting, next: {host} pid {}", w.pid);
    assert!(text.stdout.trim_end().ends_with(&expected), "{text}");
    let json = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "q", "--json"])
        .run();
    json.expect_code(0);
    let status = parse_json(&json.stdout);
    assert_eq!(status["queued"], 1, "{json}");
    assert_eq!(
        status["queue_head"],
        format!("{host} {}", w.pid).as_str(),
        "{json}"
    );
    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    w.wait(secs(30)).expect_code(0);
}

/// A waiter that is SIGKILLed keeps its place for its whole --ttl: a free lock is refused to
/// everybody else meanwhile.
#[test]
fn a_killed_waiter_with_a_long_ttl_does_not_block_a_free_lock() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut h = Wrapper::on(&redis, "q")
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    h.wait_for_file(&dir.path().join("held"), secs(20));
    let w = Wrapper::on(&redis, "q")
        .args(["--wait", "forever", "--ttl", "10m"])
        .sh("true")
        .spawn();
    wait_until(secs(20), "the waiter queued", || {
        redis.cli_int(&["ZCARD", "{redlock:q}:queue"]) == 1
    });
    w.signal(Signal::SIGKILL);
    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    // The lock is free; the dead waiter should stop counting within a few seconds, not 10 min.
    Wrapper::on(&redis, "q")
        .args(["--wait", "20s"])
        .sh("true")
        .run()
        .expect_code(0);
}

/// A release wakes the head of the queue alone: the announcement on the lock's channel names
/// the waiter that may take the lock (the others would only find it busy), and names every
/// waiter ("1") once nobody is queued. Here three waiters are served one after the other, and
/// each release names the next one in the queue.
#[test]
fn each_release_names_the_next_waiter() {
    let redis = RedisServer::start();
    let dir = scratch();
    let h = holder(&redis, dir.path());
    let mut waiters = Vec::new();
    for (i, name) in ["w1", "w2", "w3"].iter().enumerate() {
        waiters.push(waiter(&redis, dir.path(), name, &[]));
        let n = i as i64 + 1;
        waiters[i].wait_until(secs(20), &format!("{name} queued"), || queued(&redis) == n);
    }
    let ids: Vec<String> = redis
        .cli(&["ZRANGE", QUEUE, "0", "-1"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");

    let heard = dir.path().join("heard");
    let mut listener = std::process::Command::new(redis_cli_bin())
        .args([
            "-p",
            &redis.port().to_string(),
            "SUBSCRIBE",
            "{redlock:q}:released",
        ])
        .stdout(fs::File::create(&heard).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-cli");
    let _listener = PidGuard::new(listener.id() as i32);
    wait_until(secs(10), "the test's subscription", || {
        fs::read_to_string(&heard).is_ok_and(|s| s.contains("subscribe"))
    });

    fs::write(dir.path().join("go"), "").unwrap();
    h.wait(secs(30)).expect_code(0);
    for w in waiters {
        w.wait(secs(60)).expect_code(0);
    }
    // Each message is three lines: "message", the channel, the payload.
    let payloads = || -> Vec<String> {
        let text = fs::read_to_string(&heard).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines
            .windows(3)
            .filter(|w| w[0] == "message")
            .map(|w| w[2].to_owned())
            .collect()
    };
    wait_until(secs(10), "four announcements", || payloads().len() >= 4);
    let _ = listener.kill();
    let _ = listener.wait();
    let mut expected = ids.clone();
    expected.push("1".to_owned());
    assert_eq!(payloads(), expected, "queue at the start: {ids:?}");
    assert_eq!(
        read_trimmed(&dir.path().join("order")),
        "w1\nw2\nw3",
        "not served in arrival order"
    );
}
