//! `--once-per` and the run record under faults (review 3 of issue 22): a Redlock node whose
//! clock is ahead, a frozen Redlock node, a `-c` command that never ran.

use std::fs;
use std::path::Path;
use std::time::Instant;

use crate::common::quorum::Nodes;
use crate::common::*;

const LAST_RUN: &str = "{redlock:k}:last-run";
const LAST_SUCCESS: &str = "{redlock:k}:last-success";

fn count(file: &Path) -> usize {
    fs::read_to_string(file).map_or(0, |s| s.lines().count())
}

/// Move one node's copy of a record `by_ms` later, in place: exactly what a node whose clock
/// is `by_ms` ahead of the others writes (record.lua takes `ended_ms` from the node's TIME,
/// and `started_ms` as that minus the run time).
fn shift_record(node: &RedisServer, key: &str, by_ms: u64) {
    for field in ["started_ms", "ended_ms"] {
        let v: u64 = node.cli(&["HGET", key, field]).trim().parse().unwrap();
        node.cli(&["HSET", key, field, &(v + by_ms).to_string()]);
    }
}

/// Redlock assumes clocks that run at about the same rate, not clocks that agree on the time
/// of day (docs/guarantees.md, "What it assumes"). One node 5 s ahead of the other two: the
/// success written by the same release on all three nodes carries the same fence, and the
/// copy picked (the later one) starts after the quorum's median `now`. A success that starts
/// after the server time read counts as done in the current period (at most once beats
/// twice): a second host firing a second later skips.
#[test]
fn redlock_once_per_with_a_node_clock_ahead_runs_the_command_once() {
    let nodes = Nodes::start(3);
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = || {
        nodes
            .wrapper("k")
            .args(["--once-per", "day"])
            .sh("echo x >> ran")
            .current_dir(dir.path())
            .run()
    };
    run().expect_code(0);
    assert_eq!(count(&ran), 1);
    // Node 0's clock is 5 s ahead: the copies it wrote say so.
    for key in [LAST_RUN, LAST_SUCCESS] {
        shift_record(&nodes.servers[0], key, 5000);
    }
    let second = run();
    second.expect_code(0);
    assert_eq!(
        count(&ran),
        1,
        "the command ran twice in one day (a node's clock 5 s ahead)\n{second}"
    );
}

/// Redlock with one frozen node (SIGSTOP: it accepts connections, never answers) and a
/// short ttl. The record read with the lock held is bounded per node like every other step
/// (the node bound, not `--connect-timeout`) and returns once a quorum answered, so the
/// lease is not spent before the command starts: it runs, with `--once-per` as without.
#[test]
fn redlock_once_per_with_a_frozen_node_runs_the_command() {
    let nodes = Nodes::start(3);
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = |once: bool| {
        // Two locks: the first run's success must not make the second skip.
        let mut w = nodes
            .wrapper(if once { "k-once" } else { "k" })
            .args(["--ttl", "4s"]);
        if once {
            w = w.args(["--once-per", "day"]);
        }
        w.sh("echo x >> ran").current_dir(dir.path()).run()
    };
    nodes.servers[2].pause();
    let plain = run(false);
    let ran_plain = count(&ran);
    let started = Instant::now();
    let once = run(true);
    let took = started.elapsed();
    nodes.servers[2].resume();
    plain.expect_code(0);
    assert_eq!(ran_plain, 1, "{plain}");
    assert_eq!(
        once.code(),
        Some(0),
        "--once-per with one frozen node of three: took {took:?}\n{once}"
    );
    assert_eq!(count(&ran), 2, "{once}");
}

/// A `-c` command whose shell could not find or execute the program (126/127) never ran:
/// it records nothing (docs/reference.md), as it keeps no `--hold-at-least`, and a later
/// success is the first record.
#[test]
fn a_shell_command_that_never_ran_records_nothing() {
    let redis = RedisServer::start();
    let dir = scratch();
    let run = |script: &str| {
        Wrapper::on(&redis, "k")
            .args(["--once-per", "day"])
            .sh(script)
            .current_dir(dir.path())
            .run()
    };
    run("no-such-program-anywhere-xyz").expect_code(127);
    fs::write(dir.path().join("not-executable"), "#!/bin/sh\n").unwrap();
    run("./not-executable").expect_code(126);
    for key in [LAST_RUN, LAST_SUCCESS] {
        assert_eq!(redis.cli(&["EXISTS", key]).trim(), "0", "{key} was written");
    }
    run("echo x >> ran").expect_code(0);
    assert_eq!(count(&dir.path().join("ran")), 1);
    assert_eq!(
        redis.cli(&["HGET", LAST_RUN, "outcome"]).trim(),
        "succeeded"
    );
}
