//! Black-box tests of `redlock-run` against throwaway Redis servers.
//!
//! Each test owns its redis-server and scratch directory, so they run in parallel. The child
//! commands are small `sh` scripts that leave marker files in the scratch directory (their
//! cwd); the tests wait on those events with generous bounds instead of sleeping.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Child script: trap `sig`, write `caught` and exit 7 when it arrives; meanwhile wait on a
/// background sleep (so the trap runs at once) after writing its pid to `started`.
fn trap_script(sig: &str) -> String {
    format!(
        "trap 'echo {sig} > caught; kill $! 2>/dev/null; exit 7' {sig}; \
         echo $$ > started; sleep 30 & wait"
    )
}

// ---------------------------------------------------------------------------------------------
// 1. Mutual exclusion
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// 2. Busy
// ---------------------------------------------------------------------------------------------

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
    out.expect_one_line();
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

// ---------------------------------------------------------------------------------------------
// 3. Heartbeat
// ---------------------------------------------------------------------------------------------

#[test]
fn heartbeat_keeps_the_key_alive_past_its_ttl() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "hb")
        .args(["--ttl", "1s"])
        .sh("echo $$ > started; sleep 3; echo > done")
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    let t0 = Instant::now();
    let done = dir.path().join("done");
    let mut last_sample = Duration::ZERO;
    let mut samples = 0;
    // Sample PTTL until the child says it is done; any sample taken while it was still
    // running (no `done` after the sample) must show a live key with a TTL.
    while t0.elapsed() < secs(20) {
        let pttl = redis.pttl("redlock:hb");
        if done.exists() {
            break;
        }
        samples += 1;
        last_sample = t0.elapsed();
        assert!(
            pttl > 0,
            "PTTL {pttl} after {last_sample:?} of a 3 s job with --ttl 1s\n{}",
            run.describe()
        );
        thread::sleep(ms(50));
    }
    assert!(
        last_sample >= ms(2500),
        "sampled only up to {last_sample:?} ({samples} samples): the job ended early?\n{}",
        run.describe()
    );
    let out = run.wait(secs(20));
    out.expect_code(0);
    assert!(!redis.exists("redlock:hb"), "released after the run\n{out}");
}

// ---------------------------------------------------------------------------------------------
// 4. Lock lost: key overwritten
// ---------------------------------------------------------------------------------------------

#[test]
fn key_overwritten_mid_run_stops_the_child_and_exits_74() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s"])
        .sh(
            "trap 'echo TERM > caught; kill $! 2>/dev/null; exit 0' TERM; \
             echo $$ > started; sleep 30 & wait",
        )
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    redis.cli(&["SET", "redlock:k", "intruder"]);

    let out = run.wait(secs(15));
    out.expect_code(74);
    out.expect_all_lines_prefixed();
    assert!(
        !out.stderr_lines().is_empty(),
        "lost lock must be reported\n{out}"
    );
    assert!(
        dir.path().join("caught").exists(),
        "child must have got SIGTERM\n{out}"
    );
    assert!(!pid_alive(pid), "child must be gone\n{out}");
    assert_eq!(
        redis.get("redlock:k").as_deref(),
        Some("intruder"),
        "the intruder's value must be left alone"
    );
    assert_eq!(redis.pttl("redlock:k"), -1, "the intruder's key got a TTL");
}

// ---------------------------------------------------------------------------------------------
// 5. Redis gone mid-run: the child must not outlive the lease
// ---------------------------------------------------------------------------------------------

/// Starts a long job with `--ttl 2s`, breaks Redis with `break_it`, and checks the child is
/// gone before the lease (renewed at the latest just before the break) could have expired.
fn child_stopped_before_lease_expiry(break_it: impl FnOnce(&mut RedisServer)) {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let ttl = secs(2);
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "2s"])
        .sh("sleep 60 & echo $! > grandchild; echo $$ > started; wait")
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    let gc = run.child_pid(&dir.path().join("grandchild"), secs(10));
    // Let a few renewals happen first.
    thread::sleep(ms(800));
    assert!(pid_alive(pid), "child died early\n{}", run.describe());
    assert!(
        redis.exists("redlock:k"),
        "lock not held\n{}",
        run.describe()
    );

    let broken_at = Instant::now();
    break_it(&mut redis);
    run.wait_until(secs(10), "child and grandchild to be stopped", || {
        !pid_alive(pid) && !pid_alive(gc)
    });
    let died_after = broken_at.elapsed();
    eprintln!("child stopped {died_after:?} after Redis broke (--ttl {ttl:?})");
    // The last successful renewal was sent before `broken_at`, so the lease ends before
    // broken_at + ttl. Allow a little for our own polling.
    assert!(
        died_after < ttl + ms(100),
        "child still alive {died_after:?} after Redis broke, with --ttl {ttl:?}\n{}",
        run.describe()
    );
    let out = run.wait(secs(30));
    out.expect_code(74);
    out.expect_all_lines_prefixed();
    assert!(!out.stderr_lines().is_empty(), "lost lock reported\n{out}");
}

#[test]
fn redis_killed_mid_run_child_stopped_before_the_lease_expires() {
    child_stopped_before_lease_expiry(|redis| redis.kill());
}

#[test]
fn redis_frozen_mid_run_child_stopped_before_the_lease_expires() {
    child_stopped_before_lease_expiry(|redis| redis.pause());
}

// ---------------------------------------------------------------------------------------------
// 6. Signal forwarding
// ---------------------------------------------------------------------------------------------

/// Sends `sig` to the wrapper; the child traps it and exits 7; the wrapper must exit 7
/// promptly with the key released.
fn check_forwarded(redis: &RedisServer, sig: Signal, name: &str) {
    let dir = scratch();
    let mut run = Wrapper::on(redis, "k")
        .sh(&trap_script(name))
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    assert!(
        redis.exists("redlock:k"),
        "lock not held\n{}",
        run.describe()
    );
    let sent = Instant::now();
    run.signal(sig);
    let out = run.wait(secs(10));
    let held_after = redis.exists("redlock:k");
    out.expect_code(7);
    assert!(
        sent.elapsed() < secs(5),
        "wrapper took {:?} to exit after {name}\n{out}",
        sent.elapsed()
    );
    let caught = fs::read_to_string(dir.path().join("caught")).unwrap_or_default();
    assert_eq!(caught.trim(), name, "child must have caught {name}\n{out}");
    assert!(
        !held_after,
        "key must be released when the wrapper exits\n{out}"
    );
}

#[test]
fn sigterm_is_forwarded_and_the_child_status_returned() {
    let redis = RedisServer::start();
    check_forwarded(&redis, Signal::SIGTERM, "TERM");
}

#[test]
fn sigint_is_forwarded_and_the_child_status_returned() {
    let redis = RedisServer::start();
    check_forwarded(&redis, Signal::SIGINT, "INT");
}

#[test]
fn hup_quit_usr1_usr2_are_forwarded() {
    let redis = RedisServer::start();
    for (sig, name) in [
        (Signal::SIGHUP, "HUP"),
        (Signal::SIGQUIT, "QUIT"),
        (Signal::SIGUSR1, "USR1"),
        (Signal::SIGUSR2, "USR2"),
    ] {
        check_forwarded(&redis, sig, name);
    }
}

#[test]
fn sigterm_to_wrapper_with_untrapping_child_exits_143() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .sh("echo $$ > started; sleep 30")
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    run.signal(Signal::SIGTERM);
    let out = run.wait(secs(10));
    let held_after = redis.exists("redlock:k");
    out.expect_code(143);
    assert!(!pid_alive(pid), "child gone\n{out}");
    assert!(!held_after, "key released\n{out}");
}

#[test]
fn second_sigterm_kills_the_child_group_at_once() {
    let redis = RedisServer::start();
    let dir = scratch();
    // The child ignores SIGTERM (counts it) and would run for 30 s; grace is 10 s by default.
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "60s"])
        .sh("trap 'echo TERM >> caught' TERM; echo $$ > started; \
             i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    run.signal(Signal::SIGTERM);
    let caught = dir.path().join("caught");
    run.wait_for_file(&caught, secs(5));
    assert!(
        pid_alive(pid),
        "child should survive the first TERM\n{}",
        run.describe()
    );
    let second = Instant::now();
    run.signal(Signal::SIGTERM);
    let out = run.wait(secs(20));
    let took = second.elapsed();
    let held_after = redis.exists("redlock:k");
    assert!(
        took < secs(3),
        "second SIGTERM must not wait out the grace period: took {took:?}\n{out}"
    );
    assert!(!pid_alive(pid), "child gone\n{out}");
    out.expect_code(137);
    assert!(!held_after, "key released\n{out}");
}

/// The leader exits on the first TERM but leaves a process in its group that ignores TERM;
/// the wrapper waits up to --grace (10 s) for it, unless a second TERM says not to.
#[test]
fn second_sigterm_after_the_leader_exited_skips_the_wait_for_leftovers() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "60s"])
        .sh(
            "(trap '' TERM; exec sh -c 'echo $$ > leftover; exec sleep 30') & \
             trap 'exit 0' TERM; echo $$ > started; sleep 30 & wait",
        )
        .current_dir(dir.path())
        .spawn();
    let leader = run.child_pid(&dir.path().join("started"), secs(10));
    let leftover = read_pid_file(&dir.path().join("leftover"), secs(10));
    let _guard = PidGuard::new(leftover);
    run.signal(Signal::SIGTERM);
    run.wait_until(secs(5), "leader to exit", || !pid_alive(leader));
    // Give the wrapper a moment to reach the leftover clean-up.
    thread::sleep(ms(300));
    assert!(
        pid_alive(leftover),
        "the leftover ignores TERM\n{}",
        run.describe()
    );
    let second = Instant::now();
    run.signal(Signal::SIGTERM);
    let out = run.wait(secs(20));
    let took = second.elapsed();
    assert!(
        took < secs(3),
        "second SIGTERM must cut the wait for leftovers short: took {took:?}\n{out}"
    );
    assert!(!pid_alive(leftover), "leftover gone\n{out}");
    out.expect_code(0);
    assert!(!redis.exists("redlock:k"), "key released\n{out}");
}

// ---------------------------------------------------------------------------------------------
// 7. Wrapper SIGKILLed
// ---------------------------------------------------------------------------------------------

#[test]
fn wrapper_sigkilled_child_dies_and_key_expires_within_ttl() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "2s"])
        .sh("echo $$ > started; exec sleep 60")
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    assert!(
        redis.exists("redlock:k"),
        "lock not held\n{}",
        run.describe()
    );
    let killed = Instant::now();
    run.signal(Signal::SIGKILL);
    let ok = poll_until(secs(3), || !pid_alive(pid));
    assert!(
        ok,
        "child {pid} still alive 3 s after the wrapper was SIGKILLed\n{}",
        run.describe()
    );
    let ok = poll_until(secs(5), || !redis.exists("redlock:k"));
    let freed = killed.elapsed();
    assert!(ok, "key still there 5 s after the holder died (--ttl 2s)");
    assert!(
        freed < ms(2500),
        "key took {freed:?} to expire after the holder died (--ttl 2s)"
    );
    let out = Wrapper::on(&redis, "k").args(["--", "true"]).run();
    out.expect_code(0);
}

// ---------------------------------------------------------------------------------------------
// More lease behaviour: escalation after --grace, Redis restarted empty
// (frozen wrappers, fencing, --max-runtime and --hold-at-least: tests/safety.rs)
// ---------------------------------------------------------------------------------------------

#[test]
fn lost_lock_child_ignoring_sigterm_is_killed_after_grace() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "3s", "--grace", "700ms"])
        // exec 2>/dev/null: the shell's own "Terminated" notes are not the wrapper's lines.
        .sh(
            "exec 2>/dev/null; trap 'echo TERM >> caught' TERM; echo $$ > started; \
             i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        )
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    // Someone deletes the key: the next renewal finds the token gone.
    redis.cli(&["DEL", "redlock:k"]);
    run.wait_for_file(&dir.path().join("caught"), secs(5));
    let termed = Instant::now();
    run.wait_until(secs(10), "the child to be SIGKILLed", || !pid_alive(pid));
    let took = termed.elapsed();
    assert!(
        took >= ms(500),
        "child killed {took:?} after SIGTERM: --grace 700ms not given\n{}",
        run.describe()
    );
    assert!(
        took < ms(2500),
        "child survived {took:?} after SIGTERM with --grace 700ms\n{}",
        run.describe()
    );
    let out = run.wait(secs(10));
    out.expect_code(74);
    out.expect_all_lines_prefixed();
    assert!(
        !redis.exists("redlock:k"),
        "nothing re-created the key\n{out}"
    );
}

#[test]
fn redis_restarted_empty_mid_run_stops_child_with_74() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s"])
        .sh("echo $$ > started; exec sleep 60")
        .current_dir(dir.path())
        .spawn();
    let pid = run.child_pid(&dir.path().join("started"), secs(10));
    redis.restart();
    let ok = poll_until(secs(5), || !pid_alive(pid));
    assert!(
        ok,
        "child still alive after Redis lost the lock\n{}",
        run.describe()
    );
    let out = run.wait(secs(15));
    out.expect_code(74);
    out.expect_all_lines_prefixed();
    assert!(
        !redis.exists("redlock:k"),
        "lost lock must not be re-created\n{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// 8. Exit code passthrough
// ---------------------------------------------------------------------------------------------

#[test]
fn child_exit_status_is_passed_through() {
    let redis = RedisServer::start();
    let cases: &[(&[&str], i32)] = &[
        (&["-c", "exit 0"], 0),
        (&["-c", "exit 3"], 3),
        (&["--", "sh", "-c", "exit 3"], 3),
        (&["-c", "kill -TERM $$"], 143),
        (&["-c", "kill -KILL $$"], 137),
        (&["--", "false"], 1),
    ];
    for (args, code) in cases {
        let out = Wrapper::on(&redis, "k").args(*args).run();
        out.expect_code(*code);
        assert_eq!(out.status.signal(), None);
        assert!(!redis.exists("redlock:k"), "key released\n{out}");
    }
}

// ---------------------------------------------------------------------------------------------
// 9. Command not found / not executable
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_command_127_not_executable_126_lock_released() {
    let redis = RedisServer::start();
    let dir = scratch();
    let script = dir.path().join("script.sh");
    fs::write(&script, "#!/bin/sh\ntouch marker\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["--", "no-such-command-redlock-test"], 127),
        (&["--", "./no-such-file"], 127),
        (&["--", "./script.sh"], 126),
        (&["--", "."], 126),
    ];
    for (args, code) in cases {
        let out = Wrapper::on(&redis, "k")
            .args(*args)
            .current_dir(dir.path())
            .run();
        let held_after = redis.exists("redlock:k");
        out.expect_code(*code);
        out.expect_all_lines_prefixed();
        assert!(!out.stderr_lines().is_empty(), "failure reported\n{out}");
        assert!(!held_after, "key must be released at once\n{out}");
        assert!(!dir.path().join("marker").exists(), "script ran?\n{out}");
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_input_exits_2_with_one_line_without_running_or_touching_redis() {
    let redis = RedisServer::start();
    let dir = scratch();
    let url = redis.url();
    let http = format!("http://127.0.0.1:{}", redis.port());
    let cmd: &[&str] = &["-c", "touch marker"];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "bad duration",
            vec!["--redis", &url, "--key", "k", "--ttl", "abc"],
        ),
        (
            "negative duration",
            vec!["--redis", &url, "--key", "k", "--ttl", "-1s"],
        ),
        (
            "zero ttl",
            vec!["--redis", &url, "--key", "k", "--ttl", "0"],
        ),
        (
            "bad wait",
            vec!["--redis", &url, "--key", "k", "--wait", "soon"],
        ),
        (
            "heartbeat > ttl",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--heartbeat",
                "2s",
                "--ttl",
                "1s",
            ],
        ),
        (
            "heartbeat = ttl",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--heartbeat",
                "1s",
                "--ttl",
                "1s",
            ],
        ),
        (
            "grace = ttl",
            vec![
                "--redis", &url, "--key", "k", "--grace", "1s", "--ttl", "1s",
            ],
        ),
        (
            "heartbeat + grace leave no time to renew",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--ttl",
                "1s",
                "--grace",
                "300ms",
                "--heartbeat",
                "686ms",
            ],
        ),
        (
            "ttl beyond what Redis can hold",
            vec!["--redis", &url, "--key", "k", "--ttl", "500000000000y"],
        ),
        (
            "max-runtime that overflows the clock",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--max-runtime",
                "500000000000y",
            ],
        ),
        ("empty key", vec!["--redis", &url, "--key", ""]),
        ("missing key", vec!["--redis", &url]),
        (
            "conflict code 256",
            vec!["--redis", &url, "--key", "k", "-E", "256"],
        ),
        (
            "unparsable url",
            vec!["--redis", "::not a url::", "--key", "k"],
        ),
        (
            "bad port in url",
            vec!["--redis", "redis://127.0.0.1:99999", "--key", "k"],
        ),
        ("unknown scheme", vec!["--redis", &http, "--key", "k"]),
        (
            "unknown option",
            vec!["--redis", &url, "--key", "k", "--no-such-option"],
        ),
    ];
    let mut all: Vec<(String, Vec<String>)> = cases
        .into_iter()
        .map(|(name, mut args)| {
            args.extend_from_slice(cmd);
            (
                name.to_string(),
                args.iter().map(|s| s.to_string()).collect(),
            )
        })
        .collect();
    all.push((
        "no command".into(),
        ["--redis", &url, "--key", "k"].map(String::from).to_vec(),
    ));
    all.push((
        "both -c and a command".into(),
        [
            "--redis",
            &url,
            "--key",
            "k",
            "-c",
            "touch marker",
            "--",
            "touch",
            "marker",
        ]
        .map(String::from)
        .to_vec(),
    ));
    all.push((
        "nothing after --".into(),
        ["--redis", &url, "--key", "k", "--"]
            .map(String::from)
            .to_vec(),
    ));

    let mut failures = Vec::new();
    for (name, args) in &all {
        let conns_before = redis.info_field("total_connections_received");
        let out = Wrapper::new().args(args).current_dir(dir.path()).run();
        // This INFO is one connection of its own.
        let conns_after = redis.info_field("total_connections_received");
        let lines: Vec<&str> = out.stderr.lines().collect();
        let mut why = Vec::new();
        if out.code() != Some(2) {
            why.push(format!("exit {:?}, not 2", out.code()));
        }
        if lines.len() != 1 || !lines[0].starts_with(MSG_PREFIX) {
            why.push(format!(
                "stderr must be one '{MSG_PREFIX}...' line, got {}",
                lines.len()
            ));
        }
        if dir.path().join("marker").exists() {
            why.push("the command ran".into());
            let _ = fs::remove_file(dir.path().join("marker"));
        }
        if conns_after != conns_before + 1 {
            why.push(format!(
                "connected to Redis ({} connections)",
                conns_after - conns_before - 1
            ));
        }
        if redis.dbsize() != 0 {
            why.push("wrote to Redis".into());
            redis.cli(&["FLUSHALL"]);
        }
        if !why.is_empty() {
            failures.push(format!("[{name}] {}\n{out}", why.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs mishandled:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 11. Redis unreachable / unresponsive at start
// ---------------------------------------------------------------------------------------------

#[test]
fn redis_unreachable_at_start_exits_69() {
    let dir = scratch();
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "k", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn()
        .wait(secs(20));
    out.expect_code(69);
    out.expect_one_line();
    assert!(out.elapsed < secs(15), "took too long\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
}

#[test]
fn redis_frozen_at_start_exits_69_after_connect_timeout() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.pause();
    let out = Wrapper::on(&redis, "k")
        .args(["--connect-timeout", "1s", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn()
        .wait(secs(30));
    redis.resume();
    out.expect_code(69);
    out.expect_one_line();
    assert!(out.elapsed < secs(15), "took too long\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.dbsize(), 0, "nothing written\n{out}");
}

// ---------------------------------------------------------------------------------------------
// 12. Authentication
// ---------------------------------------------------------------------------------------------

#[test]
fn wrong_or_missing_password_exits_69_without_leaking_it() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let dir = scratch();
    let wrong_pw = "n0t-the-pa55word";
    let with_wrong = format!("redis://:{wrong_pw}@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &with_wrong, "--key", "k", "-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    expect_mentions_auth(out.expect_one_line(), &out);
    assert!(!out.stderr.contains(wrong_pw), "password leaked\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );

    // No password at all: the connection works, every command is refused (NOAUTH).
    let out = Wrapper::on(&redis, "k")
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    expect_mentions_auth(out.expect_one_line(), &out);
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.dbsize(), 0);
}

/// The one line must point the user at the password, not at a protocol detail.
fn expect_mentions_auth(line: &str, out: &Outcome) {
    let l = line.to_lowercase();
    assert!(
        l.contains("authentication") || l.contains("password") || l.contains("noauth"),
        "message should say authentication failed / a password is needed\n{out}"
    );
}

#[test]
fn password_file_and_url_password_work() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let dir = scratch();
    let pw_file = dir.path().join("pw");
    fs::write(&pw_file, "secret\n").unwrap();
    let out = Wrapper::on(&redis, "k")
        .arg("--password-file")
        .arg(&pw_file)
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("marker").exists(), "command ran\n{out}");
    assert!(!out.stderr.contains("secret"), "password leaked\n{out}");
    assert!(!redis.exists("redlock:k"), "released\n{out}");

    let url = format!("redis://:secret@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "k", "--", "true"])
        .run();
    out.expect_code(0);
}

// ---------------------------------------------------------------------------------------------
// 13. Wrong type
// ---------------------------------------------------------------------------------------------

#[test]
fn key_holding_a_hash_exits_69_and_leaves_it_alone() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["HSET", "redlock:k", "a", "b"]);
    let out = Wrapper::on(&redis, "k")
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    out.expect_one_line();
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.cli(&["TYPE", "redlock:k"]), "hash");
    assert_eq!(redis.cli(&["HGETALL", "redlock:k"]), "a\nb");
    assert_eq!(redis.pttl("redlock:k"), -1, "hash got a TTL");
}

// ---------------------------------------------------------------------------------------------
// 14. Script cache flushed
// ---------------------------------------------------------------------------------------------

#[test]
fn script_flush_between_and_during_runs_is_survived() {
    let redis = RedisServer::start();
    let dir = scratch();
    Wrapper::on(&redis, "k")
        .args(["--", "true"])
        .run()
        .expect_code(0);
    redis.cli(&["SCRIPT", "FLUSH"]);
    Wrapper::on(&redis, "k")
        .args(["--", "true"])
        .run()
        .expect_code(0);

    // Flush while running: renewals and the release must reload their scripts.
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s"])
        .sh("echo $$ > started; sleep 1.5; echo > almost; sleep 0.3")
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    redis.cli(&["SCRIPT", "FLUSH"]);
    run.wait_for_file(&dir.path().join("almost"), secs(10));
    redis.cli(&["SCRIPT", "FLUSH"]);
    let out = run.wait(secs(15));
    out.expect_code(0);
    assert!(!redis.exists("redlock:k"), "released\n{out}");
}

// ---------------------------------------------------------------------------------------------
// 15. Signal while waiting for the lock
// ---------------------------------------------------------------------------------------------

fn signal_while_waiting(sig: Signal, code: i32) {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "othertoken", "PX", "60000"]);
    let mut run = Wrapper::on(&redis, "k")
        .args(["--wait", "30s", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn();
    // Wait until the wrapper has connected (each INFO call is one connection itself), then
    // give it a moment to be inside its wait loop.
    let base = redis.info_field("total_connections_received");
    run.wait_until(secs(10), "the wrapper to connect", || {
        redis.info_field("total_connections_received") >= base + 2
    });
    thread::sleep(ms(300));
    assert!(run.is_running(), "wrapper ended early\n{}", run.describe());
    let sent = Instant::now();
    run.signal(sig);
    let out = run.wait(secs(10));
    let took = sent.elapsed();
    out.expect_code(code);
    assert!(took < secs(3), "took {took:?} to give up the wait\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.get("redlock:k").as_deref(), Some("othertoken"));
    let pttl = redis.pttl("redlock:k");
    assert!(pttl > 0 && pttl <= 60_000, "TTL changed: {pttl}");
}

#[test]
fn sigterm_while_waiting_for_the_lock_exits_143() {
    signal_while_waiting(Signal::SIGTERM, 143);
}

#[test]
fn sigint_while_waiting_for_the_lock_exits_130() {
    signal_while_waiting(Signal::SIGINT, 130);
}

// ---------------------------------------------------------------------------------------------
// Child environment, stdio, prefix, configuration from the environment
// ---------------------------------------------------------------------------------------------

#[test]
fn child_sees_key_token_ttl_and_fence() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "envjob")
        .args(["--ttl", "5s"])
        .sh(
            "printf '%s\\n' \"$REDLOCK_KEY\" \"$REDLOCK_TOKEN\" \"$REDLOCK_TTL_MS\" \
             \"$REDLOCK_FENCE\" > env.tmp && mv env.tmp env; \
             i=0; while [ ! -e go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done",
        )
        .current_dir(dir.path())
        .spawn();
    let env_file = dir.path().join("env");
    run.wait_for_file(&env_file, secs(10));
    let env = fs::read_to_string(&env_file).unwrap();
    let value = redis.get("redlock:envjob");
    fs::write(dir.path().join("go"), "").unwrap();
    let out = run.wait(secs(20));
    out.expect_code(0);

    let lines: Vec<&str> = env.lines().collect();
    assert_eq!(lines.len(), 4, "child env:\n{env}\n{out}");
    assert_eq!(lines[0], "redlock:envjob", "REDLOCK_KEY\n{out}");
    assert!(!lines[1].is_empty(), "REDLOCK_TOKEN empty\n{out}");
    assert_eq!(
        value.as_deref(),
        Some(lines[1]),
        "REDLOCK_TOKEN must equal the key's value during the run\n{out}"
    );
    assert_eq!(lines[2], "5000", "REDLOCK_TTL_MS\n{out}");
    assert!(
        lines[3].parse::<i64>().is_ok(),
        "REDLOCK_FENCE {:?} not an integer\n{out}",
        lines[3]
    );
    assert!(!redis.exists("redlock:envjob"), "released\n{out}");
}

#[test]
fn fence_strictly_increases_across_runs() {
    let redis = RedisServer::start();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let out = Wrapper::on(&redis, "k")
            .args(["-c", "echo \"$REDLOCK_FENCE\""])
            .run();
        out.expect_code(0);
        let f: i64 = out
            .stdout
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("REDLOCK_FENCE not an integer\n{out}"));
        fences.push(f);
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing: {fences:?}"
    );
}

#[test]
fn stdin_and_stdout_pass_through() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .args(["--", "cat"])
        .stdin("hi\n")
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout, "hi\n", "{out}");
}

#[test]
fn prefix_sets_the_redis_key() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "job")
        .args([
            "--prefix",
            "app:",
            "-c",
            "echo \"$REDLOCK_KEY\"; redis-cli -p \"$PORT\" EXISTS app:job",
        ])
        .env("PORT", redis.port().to_string())
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout, "app:job\n1\n", "{out}");

    // An empty prefix locks the raw key, interoperating with plain SET NX users.
    redis.cli(&["SET", "rawjob", "someone", "PX", "60000"]);
    let out = Wrapper::on(&redis, "rawjob")
        .args(["--prefix", "", "--", "true"])
        .run();
    out.expect_code(75);
    assert_eq!(redis.get("rawjob").as_deref(), Some("someone"));
}

#[test]
fn harness_sanity_server_restart_keeps_the_port() {
    let mut redis = RedisServer::start();
    let port = redis.port();
    redis.cli(&["SET", "x", "1"]);
    redis.restart();
    assert_eq!(redis.port(), port);
    assert_eq!(
        redis.dbsize(),
        0,
        "restart without persistence starts empty"
    );
}

// ---------------------------------------------------------------------------------------------
// Waiters are woken by the release instead of polling
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Refusals that each get their own message: read-only replica, ACL without scripting
// ---------------------------------------------------------------------------------------------

#[test]
fn read_only_replica_exits_69_and_says_so() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    let out = Wrapper::on(&replica, "ro")
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    assert!(line.contains("read-only replica"), "{out}");
    assert!(!dir.path().join("ran").exists());
    assert!(!primary.exists("redlock:ro"));
}

#[test]
fn acl_user_without_scripting_exits_69_and_says_so() {
    let redis = RedisServer::start();
    redis.cli(&[
        "acl", "setuser", "cron", "on", ">cronpw", "~*", "&*", "+@all", "-eval", "-evalsha",
    ]);
    let dir = scratch();
    let url = format!("redis://cron:cronpw@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "acl"])
        .args(["-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    assert!(line.contains("denied") && line.contains("EVAL"), "{out}");
    assert!(!line.contains("cronpw"), "password leaked: {line}");
    assert!(!dir.path().join("ran").exists());
    assert_eq!(redis.dbsize(), 0, "nothing written\n{out}");
}
