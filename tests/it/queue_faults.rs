//! The lock's keys in states a run must survive: a queue place whose expiry record was lost,
//! a fence counter at the end of its range, a `--limit` set with a member added by something
//! else, and arrival scores after the server's clock stepped back. In each, a run either goes
//! on or fails before it writes anything.

use std::time::Instant;

use crate::common::*;

/// The server's clock in microseconds.
fn server_us(redis: &RedisServer) -> u64 {
    let t = redis.cli(&["TIME"]);
    let mut parts = t.lines().map(|l| l.trim().parse::<u64>().unwrap());
    let (s, us) = (parts.next().unwrap(), parts.next().unwrap());
    s * 1_000_000 + us
}

/// A place at the head of the queue whose expiry record is gone (an eviction under
/// maxmemory, a DEL) would never be reaped: every live waiter would run out its --wait on a
/// free lock. It is treated as gone.
#[test]
fn a_queue_place_without_an_expiry_record_is_passed_over() {
    let redis = RedisServer::start();
    redis.cli(&["ZADD", "{redlock:g}:queue", "1", "ghost host 1"]);
    let started = Instant::now();
    let out = Wrapper::on(&redis, "g")
        .args(["--wait", "20s"])
        .sh("echo ran")
        .run();
    out.expect_code(0);
    assert!(
        started.elapsed() < secs(15),
        "waited {:?} behind a place nobody keeps\n{out}",
        started.elapsed()
    );
    assert_eq!(redis.cli_int(&["ZCARD", "{redlock:g}:queue"]), 0);
}

/// The same with `--limit 2` and two such places: both are passed over.
#[test]
fn lost_places_among_the_first_permits_are_passed_over() {
    let redis = RedisServer::start();
    redis.cli(&[
        "ZADD",
        "{redlock:g2}:queue",
        "1",
        "ghost1 h 1",
        "2",
        "ghost2 h 2",
    ]);
    let started = Instant::now();
    let out = Wrapper::on(&redis, "g2")
        .args(["--limit", "2", "--wait", "20s"])
        .sh("echo ran")
        .run();
    out.expect_code(0);
    assert!(started.elapsed() < secs(15), "{out}");
}

/// A fence counter at 2^53 - 2: the next run gets 2^53 - 1, the last fence; the one after it
/// is refused before it writes anything, with a message that says why (it was refused as a
/// counter "that does not hold a fence", written by the acquire itself).
#[test]
fn the_end_of_the_fence_range_is_refused_before_any_write() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "{redlock:f}:fence", "9007199254740990"]);
    let out = Wrapper::on(&redis, "f").sh("echo $REDLOCK_FENCE").run();
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "9007199254740991", "{out}");

    let out = Wrapper::on(&redis, "f").sh("echo ran").run();
    out.expect_code(69);
    out.expect_stderr_contains("end of its range");
    assert!(!out.stdout.contains("ran"), "{out}");
    assert!(!redis.exists("redlock:f"), "no lock left\n{out}");
    assert!(
        !redis.exists("{redlock:f}:holder"),
        "no holder info left\n{out}"
    );
    assert_eq!(
        redis.get("{redlock:f}:fence").as_deref(),
        Some("9007199254740991")
    );
}

/// `--limit`: a member added by something else with a score that is no lease end (inf) makes
/// the acquire fail before it writes: no permit taken, no fence used. One whose score is not
/// a whole number of ms is a lease end like any other.
#[test]
fn a_foreign_member_of_a_limit_set_fails_the_acquire_before_any_write() {
    let redis = RedisServer::start();
    redis.cli(&["ZADD", "redlock:s", "inf", "foreign"]);
    redis.cli(&["SET", "{redlock:s}:limit", "2", "PX", "60000"]);
    let out = Wrapper::on(&redis, "s")
        .args(["--limit", "2"])
        .sh("echo ran")
        .run();
    out.expect_code(69);
    assert!(!out.stdout.contains("ran"), "{out}");
    assert_eq!(
        redis.cli_int(&["ZCARD", "redlock:s"]),
        1,
        "no permit taken\n{out}"
    );
    assert!(!redis.exists("{redlock:s}:fence"), "no fence used\n{out}");

    let later_ms = server_us(&redis) / 1000 + 60_000;
    redis.cli(&["DEL", "redlock:s"]);
    redis.cli(&["ZADD", "redlock:s", &format!("{later_ms}.5"), "foreign"]);
    redis.cli(&["SET", "{redlock:s}:limit", "2", "PX", "60000"]);
    let out = Wrapper::on(&redis, "s")
        .args(["--limit", "2"])
        .sh("echo ran")
        .run();
    out.expect_code(0);
    assert!(out.stdout.contains("ran"), "{out}");
}

/// After the server's clock stepped back, a waiter that arrives later still queues behind
/// the ones that arrived before (their arrival scores are from the clock before the step).
#[test]
fn arrival_order_survives_a_backward_clock_step() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut holder = Wrapper::on(&redis, "c")
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    holder.wait_for_file(&dir.path().join("held"), secs(20));
    // A waiter queued 10 s "later" than now by the server's clock, as one queued before the
    // clock was stepped back by 10 s; its place is kept for a minute.
    let now_us = server_us(&redis);
    redis.cli(&[
        "ZADD",
        "{redlock:c}:queue",
        &(now_us + 10_000_000).to_string(),
        "earlier h 1",
    ]);
    redis.cli(&[
        "ZADD",
        "{redlock:c}:queue-expiry",
        &(now_us / 1000 + 60_000).to_string(),
        "earlier h 1",
    ]);
    let late = Wrapper::on(&redis, "c")
        .args(["--wait", "30s"])
        .sh("true")
        .current_dir(dir.path())
        .spawn();
    let queued = poll_until(secs(20), || {
        redis.cli_int(&["ZCARD", "{redlock:c}:queue"]) == 2
    });
    assert!(queued, "{}", late.describe());
    let head = redis.cli(&["ZRANGE", "{redlock:c}:queue", "0", "0"]);
    late.signal(nix::sys::signal::Signal::SIGTERM);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let _ = late.wait(secs(20));
    holder.wait(secs(20)).expect_code(0);
    assert_eq!(
        head.trim(),
        "earlier h 1",
        "the later arrival jumped the queue"
    );
}
