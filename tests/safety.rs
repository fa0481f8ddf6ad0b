//! Safety beyond the happy path: fencing against a stale writer, frozen wrappers, replica
//! acknowledgement, --hold-at-least and --max-runtime. Black box, real redis-server processes.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The protected store's rule: accept a write only if its fence is higher than the last
/// accepted one. KEYS: last fence, accepted writes. ARGV: fence, writer name.
const FENCED_WRITE: &str = "local last = tonumber(redis.call('GET', KEYS[1]) or '0') \
    if tonumber(ARGV[1]) > last then redis.call('SET', KEYS[1], ARGV[1]) \
    redis.call('RPUSH', KEYS[2], ARGV[2]) return 1 end return 0";

fn fenced_write_cmd(store_port: u16, writer: &str, result_file: &str) -> String {
    format!(
        "redis-cli -p {store_port} eval \"{FENCED_WRITE}\" 2 fence writes \"$REDLOCK_FENCE\" \
         {writer} > {result_file}"
    )
}

/// Holder A's wrapper is frozen past its lease while A's command goes on; B acquires and
/// writes; then A's command writes late. The store rejects A's write because its fence is
/// lower; B's fence is higher than A's.
#[test]
fn stale_writer_after_frozen_wrapper_is_rejected_by_the_fence() {
    let redis = RedisServer::start();
    let store = RedisServer::start();
    let dir = scratch();
    let a_script = format!(
        "echo $REDLOCK_FENCE > a-fence; echo $$ > a-started; \
         i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; {}; \
         sleep 30",
        fenced_write_cmd(store.port(), "A", "a-result")
    );
    let mut a = Wrapper::on(&redis, "acct")
        .args(["--ttl", "1s"])
        .sh(&a_script)
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("a-started"), secs(10));
    a.signal(Signal::SIGSTOP);
    let expired = poll_until(secs(5), || !redis.exists("redlock:acct"));
    if !expired {
        a.signal(Signal::SIGCONT);
        panic!("lease did not expire while A was frozen\n{}", a.describe());
    }

    let b = Wrapper::on(&redis, "acct")
        .sh(&format!(
            "echo $REDLOCK_FENCE > b-fence; {}",
            fenced_write_cmd(store.port(), "B", "b-result")
        ))
        .current_dir(dir.path())
        .run();
    b.expect_code(0);
    assert_eq!(
        read_trimmed(&dir.path().join("b-result")),
        "1",
        "B's write accepted"
    );

    // A's command, still running while its wrapper is frozen, now tries its write.
    fs::write(dir.path().join("go"), "").unwrap();
    let a_result = dir.path().join("a-result");
    wait_until(secs(10), "A's late write attempt", || {
        fs::read_to_string(&a_result).is_ok_and(|s| !s.trim().is_empty())
    });
    assert_eq!(
        read_trimmed(&a_result),
        "0",
        "A's stale write must be rejected"
    );
    assert_eq!(store.cli(&["lrange", "writes", "0", "-1"]), "B");

    let fence_a: u64 = read_trimmed(&dir.path().join("a-fence")).parse().unwrap();
    let fence_b: u64 = read_trimmed(&dir.path().join("b-fence")).parse().unwrap();
    assert!(
        fence_b > fence_a,
        "fence B {fence_b} must exceed fence A {fence_a}"
    );

    a.signal(Signal::SIGCONT);
    a.wait(secs(15)).expect_code(74);
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

/// Fences keep increasing across a Redis restart that lost every key.
#[test]
fn fence_keeps_growing_across_a_restart_without_persistence() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let run = |name: &str, redis: &RedisServer| {
        Wrapper::on(redis, "f")
            .sh(&format!("echo $REDLOCK_FENCE > {name}"))
            .current_dir(dir.path())
            .run()
            .expect_code(0);
        read_trimmed(&dir.path().join(name)).parse::<u64>().unwrap()
    };
    let first = run("f1", &redis);
    let second = run("f2", &redis);
    assert!(second > first, "{second} > {first}");
    redis.restart();
    assert_eq!(redis.dbsize(), 0, "restart must have lost the data");
    let third = run("f3", &redis);
    assert!(
        third > second,
        "fence after restart {third} must exceed {second}"
    );
}

#[test]
fn min_replicas_runs_with_the_replica_up_and_refuses_with_it_frozen() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    Wrapper::on(&primary, "r")
        .args(["--min-replicas", "1", "--replica-timeout", "500ms"])
        .sh("touch ran-1")
        .current_dir(dir.path())
        .run()
        .expect_code(0);
    assert!(dir.path().join("ran-1").exists());

    replica.pause();
    let out = Wrapper::on(&primary, "r")
        .args(["--min-replicas", "1", "--replica-timeout", "500ms"])
        .sh("touch ran-2")
        .current_dir(dir.path())
        .run();
    replica.resume();
    out.expect_code(69);
    out.expect_stderr_contains("replicas acknowledged");
    assert!(
        !dir.path().join("ran-2").exists(),
        "command must not run\n{out}"
    );
    assert!(
        !primary.exists("redlock:r"),
        "the lock must be released\n{out}"
    );
}

/// Renewals count towards the lease only when the replicas acknowledge them: a replica that
/// stops acknowledging mid-run stops the command before the lease runs out.
#[test]
fn unacknowledged_renewals_do_not_extend_the_lease() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    let mut run = Wrapper::on(&primary, "r")
        .args([
            "--ttl",
            "1s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "200ms",
        ])
        .sh("echo $$ > started; exec sleep 30")
        .current_dir(dir.path())
        .spawn();
    let child = run.child_pid(&dir.path().join("started"), secs(10));
    let _guard = PidGuard::new(child);
    // Renewals are acknowledged while the replica runs.
    std::thread::sleep(ms(1500));
    assert!(
        run.is_running(),
        "must still run with the replica up\n{}",
        run.describe()
    );
    replica.pause();
    let frozen = Instant::now();
    let out = run.wait(secs(10));
    replica.resume();
    out.expect_code(74);
    assert!(
        frozen.elapsed() < secs(3),
        "command stopped {:?} after the replica froze (ttl 1s)",
        frozen.elapsed()
    );
    assert!(!pid_alive(child), "child must be gone\n{out}");
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

#[test]
fn max_runtime_stops_a_job_that_ignores_sigterm_and_exits_124() {
    let redis = RedisServer::start();
    let dir = scratch();
    let started = Instant::now();
    let mut run = Wrapper::on(&redis, "slow")
        .args(["--max-runtime", "1s", "--grace", "500ms"])
        .sh("trap '' TERM; echo $$ > started; sleep 30; touch finished")
        .current_dir(dir.path())
        .spawn();
    let child = run.child_pid(&dir.path().join("started"), secs(10));
    let _guard = PidGuard::new(child);
    let out = run.wait(secs(15));
    out.expect_code(124);
    let took = started.elapsed();
    assert!(
        took >= ms(1400) && took < secs(6),
        "stopped after {took:?}; expected --max-runtime 1s + --grace 500ms"
    );
    assert!(
        !pid_alive(child),
        "child ignoring SIGTERM must be SIGKILLed\n{out}"
    );
    assert!(!dir.path().join("finished").exists());
    assert!(!redis.exists("redlock:slow"), "lock released\n{out}");
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

/// A corrupt fence counter is refused before anything is written.
#[test]
fn corrupt_fence_counter_is_refused_without_taking_the_lock() {
    let redis = RedisServer::start();
    let dir = scratch();
    for bad in ["inf", "1e300", "9007199254740993", "-5"] {
        redis.cli(&["set", "{redlock:fc}:fence", bad]);
        let out = Wrapper::on(&redis, "fc")
            .sh("touch ran")
            .current_dir(dir.path())
            .run();
        out.expect_code(69);
        out.expect_stderr_contains("fence");
        assert!(
            !redis.exists("redlock:fc"),
            "lock written with fence {bad}\n{out}"
        );
        assert!(!dir.path().join("ran").exists());
        assert_eq!(redis.get("{redlock:fc}:fence").as_deref(), Some(bad));
    }
}
