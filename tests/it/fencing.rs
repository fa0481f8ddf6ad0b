//! `REDLOCK_FENCE` (strictly increasing across runs: `contract`): growing across a Redis
//! restart that lost every key, a stale writer rejected by the fence, a corrupt fence counter refused.

use std::fs;

use nix::sys::signal::Signal;

use crate::common::*;

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
