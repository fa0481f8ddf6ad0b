//! Taking the lock: mutual exclusion between concurrent runs, a busy lock (exit 75 or
//! `--conflict-exit-code`), `--wait` with a limit and `forever`, and waiters woken by the
//! release announcement instead of their next poll.

use std::fs;
use std::thread;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

#[test]
fn concurrent_runs_on_one_key_never_overlap() {
    let redis = RedisServer::start();
    let dir = scratch();
    const N: usize = 6;
    let script = "echo \"start $RUN $(date +%s%N) $REDLOCK_FENCE\" >> log; sleep 0.2; \
                  echo \"end $RUN $(date +%s%N)\" >> log";
    let runs: Vec<Running> = (0..N)
        .map(|i| {
            Wrapper::on(&redis, "mutex")
                .args(["--wait", "20s"])
                .sh(script)
                .env("RUN", i.to_string())
                .current_dir(dir.path())
                .spawn()
        })
        .collect();
    for r in runs {
        r.wait(secs(60)).expect_code(0);
    }

    let log = fs::read_to_string(dir.path().join("log")).expect("log written");
    // (run, start, end, fence)
    let mut intervals: Vec<(String, u128, u128, Option<i64>)> = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["start", run, t, fence @ ..] => intervals.push((
                run.to_string(),
                t.parse().unwrap(),
                u128::MAX,
                fence.first().and_then(|f| f.parse().ok()),
            )),
            ["end", run, t] => {
                let iv = intervals
                    .iter_mut()
                    .find(|iv| iv.0 == *run)
                    .unwrap_or_else(|| panic!("end without start: {line:?}\nlog:\n{log}"));
                iv.2 = t.parse().unwrap();
            }
            _ => panic!("unexpected log line {line:?}\nlog:\n{log}"),
        }
    }
    assert_eq!(
        intervals.len(),
        N,
        "every run must have run once\nlog:\n{log}"
    );
    intervals.sort_by_key(|iv| iv.1);
    for pair in intervals.windows(2) {
        assert!(
            pair[0].2 < pair[1].1,
            "runs {} and {} overlapped\nlog:\n{log}",
            pair[0].0,
            pair[1].0
        );
    }
    // Checked after the overlap, so a missing fence does not hide a broken lock.
    for pair in intervals.windows(2) {
        let (Some(a), Some(b)) = (pair[0].3, pair[1].3) else {
            panic!("REDLOCK_FENCE missing or not an integer\nlog:\n{log}");
        };
        assert!(
            a < b,
            "REDLOCK_FENCE did not increase from run {} to run {}\nlog:\n{log}",
            pair[0].0,
            pair[1].0
        );
    }
    assert!(!redis.exists("redlock:mutex"), "lock released at the end");
}

#[test]
fn busy_lock_exits_75_and_leaves_the_key_alone() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:busy-job", "othertoken", "PX", "60000"]);
    let before = redis.pttl("redlock:busy-job");

    let out = Wrapper::on(&redis, "busy-job")
        .args(["--wait", "0"])
        .sh("touch marker")
        .current_dir(dir.path())
        .run();
    out.expect_code(75);
    let line = out.expect_one_line();
    assert!(line.contains("busy-job"), "message names the key\n{out}");
    assert!(line.contains("busy"), "message says busy\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );

    assert_eq!(redis.get("redlock:busy-job").as_deref(), Some("othertoken"));
    let after = redis.pttl("redlock:busy-job");
    assert!(
        after > 0 && after <= before && after > before - 10_000,
        "TTL must be left alone: before {before} ms, after {after} ms"
    );
}

#[test]
fn busy_exit_code_is_configurable() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "othertoken", "PX", "60000"]);
    for flag in ["-E", "--conflict-exit-code"] {
        let out = Wrapper::on(&redis, "k")
            .args([flag, "9"])
            .sh("touch marker")
            .current_dir(dir.path())
            .run();
        out.expect_code(9);
        out.expect_one_line();
        assert!(
            !dir.path().join("marker").exists(),
            "command must not run\n{out}"
        );
    }
    assert_eq!(redis.get("redlock:k").as_deref(), Some("othertoken"));
}

#[test]
fn busy_with_wait_gives_up_after_the_wait() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "othertoken", "PX", "60000"]);
    let out = Wrapper::on(&redis, "k")
        .args(["--wait", "300ms"])
        .sh("touch marker")
        .current_dir(dir.path())
        .run();
    out.expect_code(75);
    out.expect_all_lines_prefixed();
    // In a log: one line when the wait begins, one when it gives up.
    let lines = out.stderr_lines();
    assert!(
        lines.len() == 2 && lines[0].contains("waiting up to") && lines[1].contains("is busy"),
        "{out}"
    );
    assert!(out.elapsed >= ms(300), "gave up before --wait 300ms\n{out}");
    assert!(
        out.elapsed < secs(10),
        "took far longer than --wait 300ms\n{out}"
    );
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.get("redlock:k").as_deref(), Some("othertoken"));
}

#[test]
fn wait_forever_acquires_once_the_holder_expires() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "redlock:k", "othertoken", "PX", "700"]);
    let out = Wrapper::on(&redis, "k")
        .args(["--wait", "forever", "--", "true"])
        .spawn()
        .wait(secs(20));
    out.expect_code(0);
    assert!(!redis.exists("redlock:k"), "released after the run\n{out}");
}

#[test]
fn release_is_announced_and_wakes_a_waiter() {
    let redis = RedisServer::start();
    let dir = scratch();
    let channel = "{redlock:wake}:released";

    // The release script announces the release on the lock's channel.
    let mut listener = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "subscribe", channel])
        .stdout(fs::File::create(dir.path().join("heard")).unwrap())
        .spawn()
        .unwrap();
    let _listener_guard = PidGuard::new(listener.id() as i32);
    wait_until(secs(5), "test subscriber", || {
        redis.cli(&["pubsub", "numsub", channel]).ends_with('1')
    });
    Wrapper::on(&redis, "wake")
        .args(["--", "true"])
        .run()
        .expect_code(0);
    let heard = dir.path().join("heard");
    wait_until(secs(5), "release announcement", || {
        fs::read_to_string(&heard).is_ok_and(|s| s.matches(channel).count() >= 2)
    });
    let _ = listener.kill();
    let _ = listener.wait();

    // A waiter subscribes while the lock is busy, and acts on an announcement at once
    // rather than at its next poll (by now up to 250 ms apart).
    redis.cli(&["set", "redlock:wake", "someone", "px", "60000"]);
    let mut waiter = Wrapper::on(&redis, "wake")
        .args(["--wait", "30s"])
        .sh("date +%s%N > started")
        .current_dir(dir.path())
        .spawn();
    waiter.wait_until(secs(10), "waiter subscribed", || {
        redis.cli(&["pubsub", "numsub", channel]).ends_with('1')
    });
    thread::sleep(secs(2));
    let released_ns = now_ns();
    redis.cli(&[
        "eval",
        "redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], '1')",
        "2",
        "redlock:wake",
        channel,
    ]);
    waiter.wait(secs(10)).expect_code(0);
    let started: u128 = read_trimmed(&dir.path().join("started")).parse().unwrap();
    let delay = Duration::from_nanos(started.saturating_sub(released_ns) as u64);
    assert!(
        delay < ms(100),
        "waiter started {delay:?} after the release was announced"
    );
}

/// Lock names that look like another lock's companion keys stay locks of their own: running
/// `{x}:a` must not delete the lock `{x}:a:holder` (the holder hash of `{x}:a` once had that
/// name), and after `{y}:a` ran, `{y}:a:fence` must not be "busy" (its fence counter once
/// had that name).
#[test]
fn locks_named_like_companion_keys_do_not_collide() {
    let redis = RedisServer::start();
    let dir = scratch();
    let held = dir.path().join("held");
    let mut first = Wrapper::new()
        .args([
            "--redis",
            &redis.url(),
            "--prefix",
            "",
            "--key",
            "{x}:a:holder",
        ])
        .sh(&format!("touch {}; sleep 30", held.display()))
        .spawn();
    first.wait_for_file(&held, secs(10));

    Wrapper::new()
        .args(["--redis", &redis.url(), "--prefix", "", "--key", "{x}:a"])
        .arg("--")
        .arg("true")
        .run()
        .expect_code(0);
    assert!(
        redis.exists("{x}:a:holder"),
        "the run of {{x}}:a deleted the lock {{x}}:a:holder"
    );
    let second = Wrapper::new()
        .args([
            "--redis",
            &redis.url(),
            "--prefix",
            "",
            "--key",
            "{x}:a:holder",
        ])
        .args(["--", "true"])
        .run();
    second.expect_code(75);
    first.signal(Signal::SIGTERM);
    first.wait(secs(30));

    Wrapper::new()
        .args(["--redis", &redis.url(), "--prefix", "", "--key", "{y}:a"])
        .args(["--", "true"])
        .run()
        .expect_code(0);
    Wrapper::new()
        .args([
            "--redis",
            &redis.url(),
            "--prefix",
            "",
            "--key",
            "{y}:a:fence",
        ])
        .args(["--", "true"])
        .run()
        .expect_code(0);
}
