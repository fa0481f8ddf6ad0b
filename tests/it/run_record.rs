//! Issue 22: the run record beside the lock, `status` of the last run and last success,
//! `--once-per`, `forget`; on one server, Sentinel, Cluster and Redlock.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::common::cluster::Cluster;
use crate::common::quorum::Nodes;
use crate::common::sentinel::SentinelSet;
use crate::common::*;

const LAST_RUN: &str = "{redlock:k}:last-run";
const LAST_SUCCESS: &str = "{redlock:k}:last-success";
const DAY_MS: u64 = 24 * 3600 * 1000;

/// `status --json` of `k`, parsed.
fn status(w: Wrapper) -> Value {
    let out = w.args(["status", "--json"]).run();
    out.expect_code(0);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn outcome(record: &Value) -> &str {
    record["outcome"].as_str().unwrap_or("none")
}

/// Lines in `file` (how often a command ran).
fn count(file: &Path) -> usize {
    fs::read_to_string(file).map_or(0, |s| s.lines().count())
}

/// The server's clock in ms.
fn server_ms(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]);
    let mut parts = time.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    parts.next().unwrap() * 1000 + parts.next().unwrap() / 1000
}

/// A success record written by hand in the documented format (docs/reference.md).
fn write_success(redis: &RedisServer, started_ms: u64, host: &str, fence: u64) {
    let started = started_ms.to_string();
    let ended = (started_ms + 1000).to_string();
    let fence = fence.to_string();
    redis.cli(&[
        "HSET",
        LAST_SUCCESS,
        "host",
        host,
        "pid",
        "1",
        "program",
        "job",
        "started_ms",
        &started,
        "ended_ms",
        &ended,
        "exit_code",
        "0",
        "outcome",
        "succeeded",
        "fence",
        &fence,
    ]);
}

#[test]
fn records_success_failure_signal_and_max_runtime_and_status_shows_them() {
    let redis = RedisServer::start();
    let on = || Wrapper::on(&redis, "k");
    on().sh("exit 0").run().expect_code(0);
    let first = status(on());
    let success = first["last_success"].clone();
    assert_eq!(outcome(&first["last_run"]), "succeeded", "{first}");
    assert_eq!(first["last_run"]["exit_code"], 0, "{first}");
    assert_eq!(first["last_run"]["signal"], Value::Null, "{first}");
    assert!(first["last_run"]["pid"].is_u64(), "{first}");
    assert!(
        first["last_run"]["started_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{first}"
    );
    assert_eq!(success, first["last_run"], "{first}");
    // Kept for the documented retention (40 days), well past a month.
    assert!(redis.pttl(LAST_RUN) > 39 * DAY_MS as i64, "{first}");
    assert!(redis.pttl(LAST_SUCCESS) > 39 * DAY_MS as i64, "{first}");

    on().sh("sleep 0.2; exit 3").run().expect_code(3);
    let failed = status(on());
    assert_eq!(outcome(&failed["last_run"]), "failed", "{failed}");
    assert_eq!(failed["last_run"]["exit_code"], 3, "{failed}");
    assert!(
        failed["last_run"]["duration_ms"].as_u64().unwrap() >= 200,
        "{failed}"
    );
    // The failure does not hide the last success.
    assert_eq!(failed["last_success"], success, "{failed}");

    let killed = on().sh("kill -TERM $$").run();
    assert!(
        killed.signal() == Some(15) || killed.code() == Some(143),
        "{killed}"
    );
    let signalled = status(on());
    assert_eq!(outcome(&signalled["last_run"]), "signalled", "{signalled}");
    assert_eq!(signalled["last_run"]["exit_code"], Value::Null);
    assert_eq!(signalled["last_run"]["signal"], 15, "{signalled}");

    on().args(["--max-runtime", "300ms"])
        .sh("sleep 5")
        .run()
        .expect_code(124);
    let timed_out = status(on());
    assert_eq!(outcome(&timed_out["last_run"]), "timed-out", "{timed_out}");
    assert_eq!(timed_out["last_success"], success, "{timed_out}");

    let text = on().arg("status").run();
    text.expect_code(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "redlock:k: free", "{text}");
    assert!(lines[1].starts_with("  last run: timed-out"), "{text}");
    assert!(
        lines[2].starts_with("  last success: succeeded (exit 0), started ")
            && lines[2].contains(" ago, took ")
            && lines[2].contains(&format!("fence {}", success["fence"])),
        "{text}"
    );
}

#[test]
fn a_run_that_lost_its_lock_writes_no_record() {
    let redis = RedisServer::start();
    let dir = scratch();
    Wrapper::on(&redis, "k").sh("true").run().expect_code(0);
    let before = status(Wrapper::on(&redis, "k"));
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s"])
        .sh("echo $$ > started; sleep 30")
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    redis.cli(&["SET", "redlock:k", "intruder"]);
    run.wait(secs(15)).expect_code(74);
    redis.cli(&["DEL", "redlock:k"]);
    let after = status(Wrapper::on(&redis, "k"));
    assert_eq!(after["last_run"], before["last_run"], "{after}");
    assert_eq!(after["last_success"], before["last_success"], "{after}");
}

#[test]
fn once_per_hour_skips_after_a_success_but_not_after_a_failure() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = |code: i32| {
        Wrapper::on(&redis, "k")
            .args(["--once-per", "1h"])
            .sh(&format!("echo x >> ran; exit {code}"))
            .current_dir(dir.path())
    };
    run(1).run().expect_code(1);
    run(0).run().expect_code(0);
    assert_eq!(count(&ran), 2, "a failed run does not count");

    let skipped = run(0).run();
    skipped.expect_code(0);
    assert_eq!(count(&ran), 2, "the command ran again\n{skipped}");
    let line = skipped.expect_one_line();
    assert!(
        line.contains("skipped: redlock:k already succeeded") && line.contains("once per 1h"),
        "{skipped}"
    );
    assert!(!redis.exists("redlock:k"), "the skip released the lock");

    let quiet = run(0).arg("-q").run();
    quiet.expect_code(0);
    assert!(quiet.stderr.is_empty(), "{quiet}");
    run(0).args(["--done-exit-code", "3"]).run().expect_code(3);
    let json = run(0).args(["--log-format", "json"]).run();
    json.expect_code(0);
    assert!(json.stderr.contains("\"event\":\"skipped\""), "{json}");
    assert_eq!(count(&ran), 2);
}

#[test]
fn five_waiters_once_per_day_run_the_command_once_and_twice_when_the_first_fails() {
    let redis = RedisServer::start();
    for (key, script, runs, failures) in [
        ("once", "echo $$ >> runs-once; sleep 0.3", 1, 0),
        (
            "retry",
            "echo $$ >> runs-retry; sleep 0.3; if [ -e failed ]; then exit 0; fi; \
             touch failed; exit 1",
            2,
            1,
        ),
    ] {
        let dir = scratch();
        let runs_file = dir.path().join(format!("runs-{key}"));
        let waiters: Vec<Running> = (0..5)
            .map(|_| {
                Wrapper::on(&redis, key)
                    .args(["--once-per", "day", "--wait", "30s"])
                    .sh(script)
                    .current_dir(dir.path())
                    .spawn()
            })
            .collect();
        let codes: Vec<Option<i32>> = waiters
            .into_iter()
            .map(|w| w.wait(secs(40)).code())
            .collect();
        assert_eq!(count(&runs_file), runs, "{key}: {codes:?}");
        assert_eq!(
            codes.iter().filter(|c| **c == Some(1)).count(),
            failures,
            "{key}: {codes:?}"
        );
        assert_eq!(
            codes.iter().filter(|c| **c == Some(0)).count(),
            5 - failures,
            "{key}: {codes:?}"
        );
    }
}

#[test]
fn a_success_from_the_previous_calendar_day_does_not_count() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = |zone: &str| {
        Wrapper::on(&redis, "k")
            .args(["--once-per", "day", "--timezone", zone])
            .sh("echo x >> ran")
            .current_dir(dir.path())
            .run()
    };
    // UTC: a success one second before today's midnight is yesterday's.
    let now = server_ms(&redis);
    let midnight = now - now % DAY_MS;
    write_success(&redis, midnight - 1000, "yesterday", 1);
    run("UTC").expect_code(0);
    assert_eq!(count(&ran), 1, "yesterday's success counted");
    write_success(&redis, midnight, "today", 2);
    run("UTC").expect_code(0);
    assert_eq!(count(&ran), 1, "today's success did not count");

    // UTC+14 all year (no DST): its day starts 14 hours before a UTC day does.
    let offset = 14 * 3600 * 1000;
    let now = server_ms(&redis);
    let local_midnight = (now + offset) - (now + offset) % DAY_MS - offset;
    write_success(&redis, local_midnight - 1000, "yesterday", 3);
    run("Pacific/Kiritimati").expect_code(0);
    assert_eq!(count(&ran), 2);
    write_success(&redis, local_midnight, "today", 4);
    let out = run("Pacific/Kiritimati");
    out.expect_code(0);
    assert_eq!(count(&ran), 2, "{out}");
    assert!(out.stderr.contains("(Pacific/Kiritimati)"), "{out}");
}

#[test]
fn forget_clears_the_record_and_the_next_run_runs() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = || {
        Wrapper::on(&redis, "k")
            .args(["--once-per", "week"])
            .sh("echo x >> ran")
            .current_dir(dir.path())
            .run()
    };
    run().expect_code(0);
    run().expect_code(0);
    assert_eq!(count(&ran), 1);
    let forgot = Wrapper::on(&redis, "k").arg("forget").run();
    forgot.expect_code(0);
    assert!(!redis.exists(LAST_RUN) && !redis.exists(LAST_SUCCESS));
    let s = status(Wrapper::on(&redis, "k"));
    assert_eq!(s["last_run"], Value::Null, "{s}");
    assert_eq!(s["last_success"], Value::Null, "{s}");
    run().expect_code(0);
    assert_eq!(count(&ran), 2);
    // Nothing to forget is no error either.
    Wrapper::on(&redis, "other")
        .arg("forget")
        .run()
        .expect_code(0);
}

#[test]
fn once_per_composes_with_limit_and_hold_at_least() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let limited = || {
        Wrapper::on(&redis, "lim")
            .args(["--limit", "2", "--once-per", "1h"])
            .sh("echo x >> ran")
            .current_dir(dir.path())
            .run()
    };
    limited().expect_code(0);
    let skipped = limited();
    skipped.expect_code(0);
    assert!(skipped.stderr.contains("skipped"), "{skipped}");
    assert_eq!(count(&ran), 1);
    let s = status(Wrapper::on(&redis, "lim"));
    assert_eq!(outcome(&s["last_success"]), "succeeded", "{s}");

    // --hold-at-least keeps the lock after a success, and the record is written at once.
    let held = || {
        Wrapper::on(&redis, "held")
            .args(["--hold-at-least", "2s", "--once-per", "1h", "--wait", "10s"])
            .sh("echo x >> ran")
            .current_dir(dir.path())
            .run()
    };
    held().expect_code(0);
    let s = status(Wrapper::on(&redis, "held"));
    assert_eq!(s["held"], true, "{s}");
    assert_eq!(outcome(&s["last_success"]), "succeeded", "{s}");
    let out = held();
    out.expect_code(0);
    assert!(out.stderr.contains("skipped"), "{out}");
    assert_eq!(count(&ran), 2);
}

/// What every topology must show: a success recorded, a skip, `forget`, a run again.
fn once_per_and_forget(w: impl Fn() -> Wrapper, dir: &Path) {
    let ran = dir.join("ran");
    let run = || {
        w().args(["--once-per", "day"])
            .sh("echo x >> ran")
            .current_dir(dir)
            .run()
    };
    run().expect_code(0);
    let s = status(w());
    assert_eq!(outcome(&s["last_success"]), "succeeded", "{s}");
    let skipped = run();
    skipped.expect_code(0);
    assert!(skipped.stderr.contains("skipped"), "{skipped}");
    assert_eq!(count(&ran), 1);
    w().arg("forget").run().expect_code(0);
    run().expect_code(0);
    assert_eq!(count(&ran), 2);
}

#[test]
fn sentinel_records_and_once_per() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    once_per_and_forget(|| set.wrapper("k"), dir.path());
}

#[test]
fn cluster_records_and_once_per_in_the_lock_slot() {
    let cluster = Cluster::start(3, 0);
    let dir = scratch();
    once_per_and_forget(|| cluster.wrapper("k"), dir.path());
    let owner = cluster.owner_of("redlock:k");
    assert!(
        cluster.nodes[owner].exists(LAST_RUN),
        "the record is not on the lock's master"
    );
}

#[test]
fn redlock_records_where_released_and_reads_the_newest_by_fence() {
    let mut nodes = Nodes::start(3);
    let dir = scratch();
    once_per_and_forget(|| nodes.wrapper("k"), dir.path());

    // A node down: the record goes to the nodes that released, and a quorum still reads it.
    for s in &nodes.servers {
        s.cli(&["DEL", LAST_RUN, LAST_SUCCESS]);
    }
    nodes.servers[1].kill();
    nodes.wrapper("k").sh("true").run().expect_code(0);
    assert!(nodes.servers[0].exists(LAST_RUN) && nodes.servers[2].exists(LAST_RUN));
    let s = status(nodes.wrapper("k"));
    assert_eq!(outcome(&s["last_success"]), "succeeded", "{s}");
    let fence = s["last_success"]["fence"].as_u64().unwrap();

    // Disagreement: the record with the highest fence wins, whichever node has it.
    write_success(
        &nodes.servers[0],
        server_ms(&nodes.servers[0]),
        "older",
        fence - 1,
    );
    let s = status(nodes.wrapper("k"));
    assert_eq!(s["last_success"]["fence"], fence, "{s}");
    write_success(
        &nodes.servers[2],
        server_ms(&nodes.servers[2]),
        "newer",
        fence + 1,
    );
    let s = status(nodes.wrapper("k"));
    assert_eq!(s["last_success"]["host"], "newer", "{s}");

    // forget needs every node: one down leaves a copy that would come back.
    let out = nodes.wrapper("k").arg("forget").run();
    out.expect_code(69);
    out.expect_one_line();
}

/// A record key that holds something else (a string here) is left as it is: the release and
/// the other record key are not held up by it, and the last run is still written.
#[test]
fn a_record_key_of_another_type_does_not_stop_the_release() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "{redlock:odd}:last-success", "not a record"]);
    let out = Wrapper::on(&redis, "odd").arg("true").run();
    out.expect_code(0);
    assert!(!redis.exists("redlock:odd"), "released\n{out}");
    assert_eq!(
        redis.get("{redlock:odd}:last-success").as_deref(),
        Some("not a record")
    );
    assert_eq!(
        redis
            .cli(&["HGET", "{redlock:odd}:last-run", "outcome"])
            .trim(),
        "succeeded"
    );
}
