//! Holding the lease (the heartbeat, and a key overwritten or deleted, are in `contract`): a
//! lost lock (Redis killed, frozen or restarted empty) stops the command before the lease could
//! have expired, escalating to SIGKILL after `--grace`; a wrapper woken past its lease, a
//! lease gone before the command starts, leftovers in the group; a SIGKILLed wrapper's key
//! expiring within the ttl; `--hold-at-least`, which must not hold a lock whose command never
//! ran.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::common::*;

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

/// A wrapper woken past its lease sends SIGTERM at once instead of first trying a renewal,
/// and the holder that took over meanwhile has a higher fence and keeps its lock.
#[test]
fn wrapper_woken_past_its_lease_sends_sigterm_at_once() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut a = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s", "--grace", "300ms"])
        .sh(
            "trap 'date +%s%N > term; kill $! 2>/dev/null; exit 0' TERM; \
             echo $REDLOCK_FENCE > a-fence; echo $$ > a-started; sleep 30 & wait",
        )
        .current_dir(dir.path())
        .spawn();
    let child = a.child_pid(&dir.path().join("a-started"), secs(10));
    let _guard = PidGuard::new(child);
    a.signal(Signal::SIGSTOP);
    let expired = poll_until(secs(5), || !redis.exists("redlock:k"));
    if !expired {
        a.signal(Signal::SIGCONT);
        panic!("lease did not expire while A was frozen\n{}", a.describe());
    }
    let mut b = Wrapper::on(&redis, "k")
        .sh("echo $REDLOCK_FENCE > b-fence; echo $$ > b-started; sleep 3")
        .current_dir(dir.path())
        .spawn();
    b.child_pid(&dir.path().join("b-started"), secs(10));
    let b_token = redis.get("redlock:k").expect("B holds the lock");

    let woke_ns = now_ns();
    a.signal(Signal::SIGCONT);
    let term_file = dir.path().join("term");
    wait_until(secs(5), "A's child to get SIGTERM", || {
        fs::read_to_string(&term_file).is_ok_and(|s| !s.trim().is_empty())
    });
    let term_ns: u128 = read_trimmed(&term_file).parse().unwrap();
    let delay = Duration::from_nanos(term_ns.saturating_sub(woke_ns) as u64);
    assert!(
        delay < ms(200),
        "SIGTERM reached A's child {delay:?} after SIGCONT; it must be sent at once"
    );
    let out_a = a.wait(secs(10));
    out_a.expect_code(74);
    assert_eq!(
        redis.get("redlock:k").as_deref(),
        Some(b_token.as_str()),
        "A must leave B's lock alone\n{out_a}"
    );
    b.wait(secs(15)).expect_code(0);
    let fence_a: u64 = read_trimmed(&dir.path().join("a-fence")).parse().unwrap();
    let fence_b: u64 = read_trimmed(&dir.path().join("b-fence")).parse().unwrap();
    assert!(
        fence_b > fence_a,
        "fence B {fence_b} must exceed fence A {fence_a}"
    );
}

/// An acquire whose reply comes back after the lease has run out (here: the server is busy
/// for longer than the ttl after the SET was sent) must not start the command.
#[test]
fn lease_gone_before_the_command_starts_means_no_run() {
    let redis = RedisServer::start();
    let dir = scratch();
    let port = redis.port().to_string();
    let mut sleeper = std::process::Command::new("redis-cli")
        .args(["-p", &port, "debug", "sleep", "2"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let DEBUG SLEEP start before the wrapper sends its SET.
    std::thread::sleep(ms(200));
    let out = Wrapper::on(&redis, "late")
        .args(["--ttl", "1s", "--connect-timeout", "10s"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    let _ = sleeper.wait();
    out.expect_code(74);
    out.expect_stderr_contains("not running it");
    assert!(
        !dir.path().join("ran").exists(),
        "command ran without a lease\n{out}"
    );
}

/// Processes the command left in its group are stopped by the lease deadline even when the
/// leader takes its time to exit after SIGTERM and the rest ignore SIGTERM.
#[test]
fn leftovers_in_the_group_do_not_outlive_the_lease() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "bg")
        .args(["--ttl", "3s", "--grace", "1s"])
        .sh(
            "(trap '' TERM; while :; do date +%s%N >> bg; sleep 0.05; done) & \
             trap 'sleep 0.9; exit 0' TERM; echo $$ > started; sleep 30 & wait",
        )
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    std::thread::sleep(ms(300));
    let killed_ns = now_ns();
    redis.kill();
    let out = run.wait(secs(15));
    out.expect_code(74);
    let last: u128 = read_trimmed(&dir.path().join("bg"))
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap();
    // The last successful renewal was sent before the kill; the lease ends at most
    // ttl - drift (2.97 s) after it. Without the bound the leftover runs on for --grace past
    // the leader's exit, to about 3.7-3.9 s.
    let after_kill = Duration::from_nanos(last.saturating_sub(killed_ns) as u64);
    assert!(
        after_kill < ms(3350),
        "a process of the group still ran {after_kill:?} after Redis died (ttl 3s)\n{out}"
    );
}

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

#[test]
fn hold_at_least_keeps_a_quick_job_locked_then_frees_it() {
    let redis = RedisServer::start();
    let dir = scratch();
    let started = Instant::now();
    Wrapper::on(&redis, "cron")
        .args(["--hold-at-least", "2s"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run()
        .expect_code(0);
    let exited = started.elapsed();
    assert!(
        exited < ms(1500),
        "the wrapper itself must exit right away, took {exited:?}"
    );
    let pttl = redis.pttl("redlock:cron");
    assert!(
        pttl > 0 && pttl <= 2000,
        "lock must stay for the rest of 2s, PTTL {pttl}"
    );
    // A second host's cron run shortly after is refused.
    let second = Wrapper::on(&redis, "cron")
        .sh("touch ran-again")
        .current_dir(dir.path())
        .run();
    second.expect_code(75);
    assert!(!dir.path().join("ran-again").exists());
    wait_until(secs(5), "the held lock to expire", || {
        !redis.exists("redlock:cron")
    });
    assert!(
        started.elapsed() >= ms(1900),
        "lock freed after {:?}, before --hold-at-least 2s",
        started.elapsed()
    );
    Wrapper::on(&redis, "cron")
        .args(["--", "true"])
        .run()
        .expect_code(0);
}

/// `--hold-at-least` whose release cannot reach Redis (the server paused as the command
/// ends): the bound is not written, and the lock expires by its --ttl instead (here before
/// the bound). A warning says so, naming --hold-at-least and the ttl; the command ran under
/// a valid lease, so its exit code stands, as for any release that cannot reach Redis.
#[test]
fn hold_at_least_whose_release_cannot_reach_redis_says_the_bound_was_not_kept() {
    let redis = RedisServer::start();
    let cli = redis_cli_bin();
    let pause = format!(
        "'{}' -p {} CLIENT PAUSE 3000 ALL >/dev/null",
        cli.to_string_lossy(),
        redis.port()
    );
    let out = Wrapper::on(&redis, "cron")
        .args([
            "--hold-at-least",
            "60s",
            "--ttl",
            "10s",
            "--connect-timeout",
            "1s",
        ])
        .sh(&pause)
        .run();
    out.expect_code(0);
    let line = out.expect_one_line();
    for needle in [
        "could not release redlock:cron",
        "--hold-at-least",
        "--ttl",
        "10s",
    ] {
        assert!(line.contains(needle), "{needle:?} missing\n{out}");
    }
    // The bound was indeed not written: the lock expires by its ttl (answered once the
    // pause ends).
    let pttl = redis.pttl("redlock:cron");
    assert!(pttl <= 10_000, "kept past its ttl (PTTL {pttl})\n{out}");
}

/// stderr a pipe nobody reads (a stalled log shipper), `-v` printing on every renewal, and
/// renewals that fail (Redis frozen): the wrapper must still stop the command before the
/// lease deadline. A supervisor that writes its messages itself blocks in write(2) and
/// stops nothing.
#[test]
fn a_blocked_stderr_never_delays_the_lease() {
    use std::os::fd::AsRawFd;
    use std::process::{Command, Stdio};

    let redis = RedisServer::start();
    let dir = scratch();
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    // Fill the pipe so that the next write to it blocks, then make writes blocking again:
    // O_NONBLOCK belongs to the open file, which the wrapper shares.
    let fd = write_end.as_raw_fd();
    // SAFETY: fcntl on a pipe fd this test owns; only the file status flags change.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    let chunk = [b'x'; 4096];
    while nix::unistd::write(&write_end, &chunk).is_ok() {}
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };

    let pidfile = dir.path().join("pid");
    let mut wrapper = Command::new(wrapper_bin())
        .env("REDLOCK_CONFIG", "")
        .args([
            "--redis",
            &redis.url(),
            "--key",
            "k",
            "-v",
            "--ttl",
            "2s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 60", pidfile.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::from(write_end)))
        .spawn()
        .expect("spawn the wrapper");
    let _guard = PidGuard::new(wrapper.id() as i32);
    let child = read_pid_file(&pidfile, secs(10));
    let _child_guard = PidGuard::new(child);
    redis.pause();
    let stopped = poll_until(secs(15), || !pid_alive(child));
    redis.resume();
    let exited = poll_until(secs(15), || matches!(wrapper.try_wait(), Ok(Some(_))));
    let status = wrapper.try_wait().ok().flatten();
    drop(read_end);
    assert!(
        stopped,
        "the command still ran 15 s after Redis froze under a 2 s lease"
    );
    assert!(exited, "the wrapper did not exit");
    assert_eq!(status.and_then(|s| s.code()), Some(74), "{status:?}");
}

/// `--hold-at-least` is for a command that ran: when the command could not even start (not
/// found, 127; not executable, 126) the lock must be released at once, not left to expire
/// after the hold.
///
/// Guards against the release on the spawn-failure path applying the `--hold-at-least` keep
/// like the release after a run: `--hold-at-least 30s -- /nonexistent` then exits 127 and
/// leaves the job locked for 30 s although it never ran, so the next cron run on any host is
/// refused as busy.
#[test]
fn hold_at_least_frees_the_lock_at_once_when_the_command_cannot_start() {
    use std::os::unix::fs::PermissionsExt;

    let redis = RedisServer::start();
    let dir = scratch();
    let script = dir.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\ntouch ran\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["--", "/nonexistent"], 127),
        (&["--", "no-such-command-redlock-test"], 127),
        (&["--", "./not-executable.sh"], 126),
    ];
    // Every case is tried before failing, so one run shows which paths keep the lock.
    let mut kept = Vec::new();
    for (args, code) in cases {
        let out = Wrapper::on(&redis, "cron")
            .args(["--hold-at-least", "30s"])
            .args(*args)
            .current_dir(dir.path())
            .run();
        let held_after = redis.exists("redlock:cron");
        let pttl = redis.pttl("redlock:cron");
        out.expect_code(*code);
        assert!(!dir.path().join("ran").exists(), "script ran?\n{out}");
        if held_after {
            kept.push(format!(
                "{args:?} (exit {code}): key kept, PTTL {pttl}\n{out}"
            ));
            // Whatever this case left behind must not decide the next one.
            redis.cli(&["DEL", "redlock:cron"]);
        }
    }
    assert!(
        kept.is_empty(),
        "the command never ran: the key must be released at once, not held for \
         --hold-at-least 30s; kept by {} of {} cases:\n{}",
        kept.len(),
        cases.len(),
        kept.join("\n")
    );
}

/// Whether /proc/PID/status lists `sig` as caught (a handler installed).
fn catches(pid: i32, sig: Signal) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig as i32 - 1)) != 0)
}

/// A TERM that arrives after the lock was taken but before the command was spawned ends the
/// run without running the command (exit 143); the lock must then be released at once, not
/// held for `--hold-at-least`.
///
/// Made deterministic with `CLIENT PAUSE WRITE`: the wrapper's acquire script is held back by
/// the server until the test has sent the TERM (once the wrapper's handler for it is installed)
/// and unpaused; the wrapper then finds the lock taken and the TERM pending.
///
/// Guards against the release on that path applying the `--hold-at-least` keep like the
/// release after a run, leaving the key for 30 s although nothing ran.
#[test]
fn hold_at_least_frees_the_lock_at_once_on_a_signal_before_the_command_starts() {
    let redis = RedisServer::start();
    let dir = scratch();
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]), "OK");
    let mut run = Wrapper::on(&redis, "cron")
        .args(["--hold-at-least", "30s", "--connect-timeout", "20s"])
        .sh("touch ran")
        .current_dir(dir.path())
        .spawn();
    let pid = run.pid;
    run.wait_until(
        secs(10),
        "the wrapper to install its SIGTERM handler",
        || catches(pid, Signal::SIGTERM),
    );
    assert!(
        run.is_running() && !redis.exists("redlock:cron"),
        "the acquire must still be held back by CLIENT PAUSE\n{}",
        run.describe()
    );
    run.signal(Signal::SIGTERM);
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]), "OK");
    let out = run.wait(secs(20));
    let held_after = redis.exists("redlock:cron");
    let pttl = redis.pttl("redlock:cron");
    out.expect_code(143);
    assert!(
        !dir.path().join("ran").exists(),
        "the command must not run after the TERM\n{out}"
    );
    assert!(
        !held_after,
        "the command never ran: the key must be released at once, not held for \
         --hold-at-least 30s (PTTL {pttl})\n{out}"
    );
}

/// Too few replicas acknowledging the acquire (`--min-replicas`, exit 69) is another path on
/// which the command never runs: the lock must be released at once there too.
///
/// Guards against that release applying the `--hold-at-least` keep, leaving the key for 30 s.
#[test]
fn hold_at_least_frees_the_lock_at_once_when_replicas_do_not_acknowledge() {
    let redis = RedisServer::start();
    let dir = scratch();
    let out = Wrapper::on(&redis, "cron")
        .args(["--hold-at-least", "30s"])
        .args(["--min-replicas", "1", "--replica-timeout", "200ms"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    let held_after = redis.exists("redlock:cron");
    let pttl = redis.pttl("redlock:cron");
    out.expect_code(69);
    assert!(
        !dir.path().join("ran").exists(),
        "the command must not run without replicas\n{out}"
    );
    assert!(
        !held_after,
        "the command never ran: the key must be released at once, not held for \
         --hold-at-least 30s (PTTL {pttl})\n{out}"
    );
}

/// The counterpart of the tests above: when the command did run, even a quick one,
/// `--hold-at-least` keeps the key after the wrapper exited.
#[test]
fn hold_at_least_keeps_the_lock_after_a_command_that_ran() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "cron")
        .args(["--hold-at-least", "30s", "--", "true"])
        .run();
    out.expect_code(0);
    let pttl = redis.pttl("redlock:cron");
    assert!(
        pttl > 0 && pttl <= 30_000,
        "the command ran: the key must stay for the rest of --hold-at-least 30s, PTTL {pttl}\n{out}"
    );
}

/// `-c` whose shell cannot find the program exits 127 without having run anything: no
/// `--hold-at-least` either, as for a command given after `--`.
#[test]
fn hold_at_least_is_not_kept_when_the_shell_could_not_run_the_program() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .args([
            "--hold-at-least",
            "30s",
            "-c",
            "/nonexistent/batch.sh --month 5",
        ])
        .run();
    out.expect_code(127);
    assert!(!redis.exists("redlock:k"), "the lock was kept\n{out}");
}

/// Redis frozen mid-run: once the lease is lost, the release can only tidy up; it must not
/// hold up the exit for a whole --connect-timeout (5 s by default).
#[test]
fn the_release_after_a_lost_lease_does_not_hold_up_the_exit() {
    let redis = RedisServer::start();
    let dir = scratch();
    let run = Wrapper::on(&redis, "k")
        .args(["--ttl", "2s", "--grace", "500ms"])
        .sh("echo $$ > pid; exec sleep 60")
        .current_dir(dir.path())
        .spawn();
    let child = read_pid_file(&dir.path().join("pid"), secs(10));
    let _guard = PidGuard::new(child);
    redis.pause();
    let frozen = std::time::Instant::now();
    let out = run.wait(secs(30));
    redis.resume();
    out.expect_code(74);
    // Lease about 2 s, release at most 1 s: well under 2 s + 5 s.
    assert!(
        frozen.elapsed() < secs(5),
        "exit {:?} after Redis froze\n{out}",
        frozen.elapsed()
    );
}
