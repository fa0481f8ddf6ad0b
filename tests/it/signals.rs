//! Signals sent to the wrapper: TERM, INT, HUP, QUIT, USR1 and USR2 forwarded to the
//! command and its status returned; a second TERM cutting the grace period and the wait for
//! leftovers short; TERM or INT while still waiting for the lock.

use std::fs;
use std::time::Instant;

use nix::sys::signal::Signal;

use crate::common::*;

/// Child script: trap `sig`, write `caught` and exit 7 when it arrives; meanwhile wait on a
/// background sleep (so the trap runs at once) after writing its pid to `started`.
fn trap_script(sig: &str) -> String {
    format!(
        "trap 'echo {sig} > caught; kill $! 2>/dev/null; exit 7' {sig}; \
         echo $$ > started; sleep 30 & wait"
    )
}

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
        // The leftover also notes each SIGCONT: the wrapper sends one right after its SIGTERM
        // when it starts on the leftovers, and nothing else sends one.
        .sh(
            "(trap '' TERM; exec sh -c 'trap \"echo > continued\" CONT; echo $$ > leftover; \
             sleep 30 & while wait; [ $? -gt 128 ]; do :; done') & \
             trap 'exit 0' TERM; echo $$ > started; sleep 30 & wait",
        )
        .current_dir(dir.path())
        .spawn();
    let leader = run.child_pid(&dir.path().join("started"), secs(10));
    let leftover = read_pid_file(&dir.path().join("leftover"), secs(10));
    let _guard = PidGuard::new(leftover);
    run.signal(Signal::SIGTERM);
    run.wait_until(secs(5), "leader to exit", || !pid_alive(leader));
    run.wait_until(secs(5), "the wrapper to start on the leftover", || {
        dir.path().join("continued").exists()
    });
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

fn signal_while_waiting(sig: Signal, code: i32) {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "othertoken", "PX", "60000"]);
    let mut run = Wrapper::on(&redis, "k")
        .args(["--wait", "30s", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn();
    // The wrapper is inside its wait loop once it listens for the holder's release (it
    // subscribes on its first busy reply).
    run.wait_until(secs(10), "the wrapper to wait for a release", || {
        let reply = redis.cli(&["PUBSUB", "NUMSUB", "{redlock:k}:released"]);
        reply
            .lines()
            .last()
            .and_then(|n| n.trim().parse::<i64>().ok())
            >= Some(1)
    });
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

/// A signal ignored when the wrapper started stays ignored for the command, as if it ran
/// directly: SIGPIPE too (std's spawn resets it to the default, and Rust ignores it in the
/// wrapper before `main`).
#[test]
fn an_ignored_sigpipe_stays_ignored_for_the_command() {
    let redis = RedisServer::start();
    let dir = scratch();
    const SIGPIPE_BIT: u64 = 1 << (13 - 1);
    let mut seen = Vec::new();
    for trap in ["trap '' PIPE; ", ""] {
        let script = format!(
            "{trap}exec {} --redis {} --key k -- sh -c 'grep SigIgn /proc/self/status > ignored'",
            wrapper_bin(),
            redis.url()
        );
        let out = Wrapper::new()
            .current_dir(dir.path())
            .run_via_shell(&script);
        out.expect_code(0);
        let line = std::fs::read_to_string(dir.path().join("ignored")).unwrap();
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        seen.push(mask & SIGPIPE_BIT != 0);
    }
    assert_eq!(
        seen,
        [true, false],
        "SIGPIPE ignored for the command: with trap, without"
    );
}
