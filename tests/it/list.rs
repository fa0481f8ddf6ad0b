//! `redlock-run list` (issue 24): every lock under the prefix with its holder, queue, permits
//! and last run, found with SCAN (never KEYS) over many pages among unrelated keys; the cap
//! on locks shown and on the scan time; every master of a Cluster; a Redlock quorum view with
//! a node down; the master under Sentinel.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::cluster::Cluster;
use crate::common::quorum::Nodes;
use crate::common::sentinel::SentinelSet;
use crate::common::*;

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `list` against `redis_args` (`--redis URL`, once or more) with `args`.
fn list(redis_args: &[String], args: &[&str]) -> Outcome {
    Wrapper::new().arg("list").args(redis_args).args(args).run()
}

fn on(redis: &RedisServer) -> Vec<String> {
    vec!["--redis".to_owned(), redis.url()]
}

/// The `list --json` array, by key.
fn by_key(out: &Outcome) -> std::collections::BTreeMap<String, Value> {
    let json = parse_json(&out.stdout);
    let rows = json
        .as_array()
        .unwrap_or_else(|| panic!("a JSON array: {out}"));
    rows.iter()
        .map(|r| (r["key"].as_str().expect("key").to_owned(), r.clone()))
        .collect()
}

/// Send `commands` (one a line) to `redis` through one redis-cli, quickly.
fn feed(redis: &RedisServer, commands: &str) {
    let mut child = Command::new(redis_cli_bin())
        .args(["-p", &redis.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-cli");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(commands.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "redis-cli failed");
}

/// A run record as the release scripts write it (the format docs/reference.md documents),
/// of a run that ended a minute ago.
fn record_commands(lock: &str, outcome: &str, exit_code: i32) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let (started, ended) = (now - 70_000, now - 60_000);
    format!(
        "HSET {{{lock}}}:last-run host recorder pid 42 program job started_ms {started} \
         ended_ms {ended} exit_code {exit_code} signal \"\" outcome {outcome} fence 1\n\
         PEXPIRE {{{lock}}}:last-run 600000\n"
    )
}

/// Fifty locks among 400 unrelated keys (under the prefix and outside it), listed with
/// SCAN pages of 10 keys: every lock once, held, recorded and queued ones shown as they are,
/// no unrelated key. One SCAN call would see a few dozen keys at most.
#[test]
fn list_shows_held_recorded_and_queued_locks_among_many_keys() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut commands = String::new();
    for i in 0..200 {
        commands.push_str(&format!("SET cache:{i} x\nSET redlock:cache:{i} x\n"));
    }
    // A fence counter alone: a lock unused for longer than its record is kept.
    commands.push_str("SET {redlock:old}:fence 7\n");
    for i in 0..47 {
        commands.push_str(&record_commands(
            &format!("redlock:rec-{i:02}"),
            "failed",
            3,
        ));
    }
    feed(&redis, &commands);

    let mut holder = Wrapper::on(&redis, "held")
        .sh("echo $$ > held; sleep 60")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("held"), secs(20));
    let mut first = Wrapper::on(&redis, "queued")
        .sh("echo $$ > first; sleep 60")
        .current_dir(dir.path())
        .spawn();
    first.child_pid(&dir.path().join("first"), secs(20));
    let waiter = Wrapper::on(&redis, "queued")
        .args(["--wait", "2m"])
        .sh("sleep 1")
        .spawn();
    let mut permit = Wrapper::on(&redis, "pool")
        .args(["--limit", "3"])
        .sh("echo $$ > permit; sleep 60")
        .current_dir(dir.path())
        .spawn();
    permit.child_pid(&dir.path().join("permit"), secs(20));
    wait_until(secs(30), "the waiter in the queue", || {
        redis.cli_int(&["ZCARD", "{redlock:queued}:queue"]) == 1
    });

    let out = list(&on(&redis), &["--json", "--scan-count", "10"]);
    out.expect_code(0);
    let rows = by_key(&out);
    let mut expected: Vec<String> = (0..47).map(|i| format!("redlock:rec-{i:02}")).collect();
    expected.extend(["redlock:held", "redlock:queued", "redlock:pool"].map(String::from));
    expected.sort();
    assert_eq!(rows.keys().cloned().collect::<Vec<_>>(), expected, "{out}");

    let held = &rows["redlock:held"];
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["host"], hostname().as_str());
    assert_eq!(held["pid"], holder.pid);
    assert!(held["ttl_ms"].as_u64().is_some_and(|t| t > 0), "{held}");
    let queued = &rows["redlock:queued"];
    assert_eq!(queued["held"], true, "{queued}");
    assert_eq!(queued["pid"], first.pid);
    assert_eq!(queued["queued"], 1, "{queued}");
    let pool = &rows["redlock:pool"];
    assert_eq!(pool["limit"], 3, "{pool}");
    assert_eq!(pool["holders"][0]["pid"], permit.pid, "{pool}");
    let recorded = &rows["redlock:rec-07"];
    assert_eq!(recorded["held"], false, "{recorded}");
    assert_eq!(recorded["last_run"]["outcome"], "failed", "{recorded}");
    assert_eq!(recorded["last_run"]["exit_code"], 3, "{recorded}");

    // The table: a header and a row a lock.
    let text = list(&on(&redis), &["--scan-count", "10"]);
    text.expect_code(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 51, "{text}");
    assert!(lines[0].starts_with("LOCK"), "{text}");
    let row = |key: &str| {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no row for {key}: {text}"))
            .to_string()
    };
    assert!(
        row("redlock:held").contains(&format!("{} pid {}", hostname(), holder.pid)),
        "{text}"
    );
    assert!(row("redlock:pool").contains("1/3"), "{text}");
    assert!(row("redlock:rec-00").contains("free"), "{text}");
    assert!(row("redlock:rec-00").contains("failed (exit 3)"), "{text}");
    let queue_column = row("redlock:queued")
        .split_whitespace()
        .nth(6)
        .map(str::to_owned);
    assert_eq!(queue_column.as_deref(), Some("1"), "{text}");

    // --name-prefix narrows the listing to the names that start with it.
    let narrowed = list(&on(&redis), &["--json", "--name-prefix", "rec-1"]);
    narrowed.expect_code(0);
    assert_eq!(by_key(&narrowed).len(), 10, "{narrowed}");

    for run in [&holder, &first, &permit] {
        run.signal(nix::sys::signal::Signal::SIGTERM);
    }
    waiter.signal(nix::sys::signal::Signal::SIGTERM);
    waiter.wait(secs(30));
    for run in [holder, first, permit] {
        run.wait(secs(30));
    }
}

/// A server without KEYS (renamed away, as hardened deployments do) still lists: `list`
/// uses SCAN.
#[test]
fn list_works_on_a_server_without_keys() {
    let redis = RedisServer::start_with(&["--rename-command", "KEYS", ""]);
    assert!(
        redis.cli(&["KEYS", "*"]).contains("unknown command"),
        "KEYS is still there"
    );
    Wrapper::on(&redis, "nightly")
        .sh("exit 0")
        .run()
        .expect_code(0);
    let out = list(&on(&redis), &["--json"]);
    out.expect_code(0);
    let rows = by_key(&out);
    assert_eq!(
        rows["redlock:nightly"]["last_run"]["outcome"], "succeeded",
        "{out}"
    );
}

/// `--max-locks N`: the first N by name, and a warning that says the listing was cut; the
/// same for a scan stopped by `--scan-time`.
#[test]
fn list_shows_at_most_max_locks_and_says_it_cut() {
    let redis = RedisServer::start();
    let mut commands = String::new();
    for name in ["e", "c", "a", "d", "b"] {
        commands.push_str(&record_commands(&format!("redlock:{name}"), "succeeded", 0));
    }
    feed(&redis, &commands);
    let out = list(&on(&redis), &["--json", "--max-locks", "3"]);
    out.expect_code(0);
    assert_eq!(
        by_key(&out).keys().cloned().collect::<Vec<_>>(),
        ["redlock:a", "redlock:b", "redlock:c"],
        "{out}"
    );
    assert!(
        out.stderr.contains("more than 3 locks") && out.stderr.contains("--max-locks"),
        "{out}"
    );
    let all = list(&on(&redis), &["--json"]);
    all.expect_code(0);
    assert_eq!(by_key(&all).len(), 5, "{all}");
    assert!(!all.stderr.contains("more than"), "{all}");
    list(&on(&redis), &["--max-locks", "0"]).expect_code(2);

    // --scan-time: a scan of hundreds of SCAN calls (one key each) takes more than 1 ms, and
    // stops with a warning instead of going on.
    let mut commands = String::new();
    for i in 0..300 {
        commands.push_str(&format!("SET other:{i} x\n"));
    }
    feed(&redis, &commands);
    let cut = list(
        &on(&redis),
        &["--json", "--scan-count", "1", "--scan-time", "1ms"],
    );
    cut.expect_code(0);
    assert!(
        cut.stderr.contains("took longer than --scan-time 1ms"),
        "{cut}"
    );
    list(&on(&redis), &["--scan-time", "0"]).expect_code(2);
}

/// Every master of a Cluster is scanned: locks whose slots are on each of the three masters
/// are all listed, a held one with its holder.
#[test]
fn list_covers_every_master_of_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let dir = scratch();
    let mut names: Vec<String> = Vec::new();
    for master in 0..3 {
        let name = (0..1000)
            .map(|i| format!("job-{i}"))
            .find(|n| cluster.owner_of(&format!("redlock:{n}")) == master)
            .expect("a name on every master");
        names.push(name);
    }
    for name in &names[1..] {
        cluster.wrapper(name).sh("exit 0").run().expect_code(0);
    }
    let mut holder = cluster
        .wrapper(&names[0])
        .sh("echo $$ > started; sleep 60")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(30));

    let out = Wrapper::new()
        .args(["list", "--redis", &cluster.url(), "--json"])
        .run();
    out.expect_code(0);
    let rows = by_key(&out);
    let keys: Vec<String> = names.iter().map(|n| format!("redlock:{n}")).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(rows.keys().cloned().collect::<Vec<_>>(), sorted, "{out}");
    assert_eq!(rows[&keys[0]]["held"], true, "{out}");
    assert_eq!(rows[&keys[0]]["pid"], holder.pid, "{out}");
    for key in &keys[1..] {
        assert_eq!(rows[key]["last_run"]["outcome"], "succeeded", "{out}");
    }
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait(secs(30));
}

/// Redlock with one of three nodes down: every node is scanned, a lock held by a quorum is
/// shown held, one held on a single node is shown free with where it is held, and the run
/// record is the quorum's. With two nodes down there is no quorum: exit 69.
#[test]
fn list_on_redlock_is_a_quorum_view_with_a_node_down() {
    let mut nodes = Nodes::start(3);
    let dir = scratch();
    nodes.wrapper("ran").sh("exit 0").run().expect_code(0);
    let mut holder = nodes
        .wrapper("held")
        .sh("echo $$ > started; sleep 60")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(30));
    // Held on one node only, as a minority grant left behind would be.
    feed(
        &nodes.servers[1],
        "SET redlock:minority tok PX 60000\n\
         HSET {redlock:minority}:holder token tok host other pid 9 acquired_ms 1 fence 1\n\
         PEXPIRE {redlock:minority}:holder 60000\n",
    );
    nodes.servers[0].kill();

    let out = list(&nodes.redis_args(), &["--json"]);
    out.expect_code(0);
    let rows = by_key(&out);
    assert_eq!(
        rows.keys().cloned().collect::<Vec<_>>(),
        ["redlock:held", "redlock:minority", "redlock:ran"],
        "{out}"
    );
    assert_eq!(rows["redlock:held"]["held"], true, "{out}");
    assert_eq!(rows["redlock:held"]["pid"], holder.pid, "{out}");
    assert_eq!(rows["redlock:minority"]["held"], false, "{out}");
    let node_views = rows["redlock:minority"]["nodes"].as_array().expect("nodes");
    assert_eq!(node_views.len(), 3, "{out}");
    assert!(node_views[0]["error"].is_string(), "{out}");
    assert_eq!(node_views[1]["held"], true, "{out}");
    assert_eq!(
        rows["redlock:ran"]["last_run"]["outcome"], "succeeded",
        "{out}"
    );

    let text = list(&nodes.redis_args(), &[]);
    text.expect_code(0);
    assert!(text.stdout.contains("no quorum (held on 1 of 3)"), "{text}");

    nodes.servers[2].kill();
    list(&nodes.redis_args(), &[]).expect_code(69);
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait(secs(30));
}

/// Sentinel: the master the sentinels name is scanned (not a sentinel, which has no keys).
#[test]
fn list_on_sentinel_reads_the_master() {
    let set = SentinelSet::start(1);
    set.wrapper("nightly").sh("exit 0").run().expect_code(0);
    let out = Wrapper::new()
        .args(["list", "--redis", &set.url(), "--json"])
        .run();
    out.expect_code(0);
    let rows = by_key(&out);
    assert_eq!(
        rows.keys().cloned().collect::<Vec<_>>(),
        ["redlock:nightly"],
        "{out}"
    );
    assert_eq!(
        rows["redlock:nightly"]["last_run"]["outcome"], "succeeded",
        "{out}"
    );
}

/// A lock that is only paused is listed (what is paused for maintenance?), with how long and
/// why in the PAUSED column; a lock held only by `--shared` runs shows them as its holder.
#[test]
fn list_shows_paused_locks_and_shared_holders() {
    let redis = RedisServer::start();
    let conn = on(&redis);
    Wrapper::new()
        .arg("pause")
        .args(&conn)
        .args([
            "--key",
            "maint:only",
            "--for",
            "30m",
            "--reason",
            "DB migration",
        ])
        .run()
        .expect_code(0);
    let dir = scratch();
    let mut reader = Wrapper::on(&redis, "reports")
        .args(["--shared", "--ttl", "10s"])
        .sh("echo $$ > started; exec sleep 120")
        .current_dir(dir.path())
        .spawn();
    reader.child_pid(&dir.path().join("started"), secs(20));

    let text = list(&conn, &[]);
    text.expect_code(0);
    assert!(text.stdout.contains("PAUSED"), "{text}");
    let paused_row = text
        .stdout
        .lines()
        .find(|l| l.starts_with("redlock:maint:only"))
        .unwrap_or_else(|| panic!("the paused lock is listed: {text}"));
    assert!(paused_row.contains("left: DB migration"), "{text}");
    let shared_row = text
        .stdout
        .lines()
        .find(|l| l.starts_with("redlock:reports"))
        .unwrap_or_else(|| panic!("the shared lock is listed: {text}"));
    assert!(
        shared_row.contains(&format!("shared: {} pid", hostname())),
        "{text}"
    );

    let json = by_key(&list(&conn, &["--json"]));
    assert_eq!(
        json["redlock:maint:only"]["paused"]["reason"], "DB migration",
        "{json:?}"
    );
    reader.signal(nix::sys::signal::Signal::SIGTERM);
    reader.wait(secs(20));
}

/// A holder whose command finished and that `--hold-at-least` keeps is told as finished, as
/// `status` tells it, for a mutex, a `--limit` permit and a `--shared` holder: never its
/// exited pid as if it ran. A running holder beside it is named first (here its lease ends
/// later, so it comes second in the server's order). `list --json` has the fields `status
/// --json` has (`finished_ms`, `kept_until_ms`).
#[test]
fn list_tells_a_holder_kept_by_hold_at_least_as_finished() {
    let redis = RedisServer::start();
    let conn = on(&redis);
    let dir = scratch();
    for (key, args) in [
        ("m", &["--hold-at-least", "60s"][..]),
        ("p", &["--limit", "3", "--hold-at-least", "60s"]),
        ("s", &["--shared", "--hold-at-least", "60s"]),
    ] {
        Wrapper::on(&redis, key)
            .args(args)
            .sh("true")
            .run()
            .expect_code(0);
    }
    let mut running = Vec::new();
    for (key, args) in [
        ("p", &["--limit", "3", "--ttl", "120s"][..]),
        ("s", &["--shared", "--ttl", "120s"]),
    ] {
        let mut run = Wrapper::on(&redis, key)
            .args(args)
            .sh(&format!("echo $$ > {key}; exec sleep 120"))
            .current_dir(dir.path())
            .spawn();
        run.child_pid(&dir.path().join(key), secs(20));
        running.push(run);
    }
    let (permit, share) = (running[0].pid, running[1].pid);

    let json = by_key(&list(&conn, &["--json"]));
    // The kept holder's pid, and the running one's fields null.
    let kept_pid = |holder: &Value| {
        assert!(holder["kept_until_ms"].is_u64(), "{holder}");
        assert!(holder["finished_ms"].is_u64(), "{holder}");
        holder["pid"].as_u64().expect("pid")
    };
    let m = kept_pid(&json["redlock:m"]);
    let split = |key: &str, field: &str, running: i32| {
        let holders = json[key][field].as_array().expect("holders").clone();
        assert_eq!(holders.len(), 2, "{key}: {holders:?}");
        let (kept, live): (Vec<_>, Vec<_>) =
            holders.iter().partition(|h| h["finished_ms"].is_u64());
        assert_eq!(live.len(), 1, "{key}: {holders:?}");
        assert_eq!(live[0]["pid"], running, "{key}: {holders:?}");
        assert!(live[0]["kept_until_ms"].is_null(), "{key}: {holders:?}");
        kept_pid(kept[0])
    };
    let p = split("redlock:p", "holders", permit);
    let s = split("redlock:s", "shared_holders", share);

    let text = list(&conn, &[]);
    text.expect_code(0);
    let row = |key: &str| {
        text.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no row for {key}: {text}"))
            .to_owned()
    };
    let host = hostname();
    assert!(
        row("redlock:m").contains(&format!("{host} pid {m} finished, kept to ")),
        "{text}"
    );
    for (key, running, kept, shared) in [
        ("redlock:p", permit, p, ""),
        ("redlock:s", share, s, "shared: "),
    ] {
        let row = row(key);
        assert!(
            row.contains(&format!("{shared}{host} pid {running} +1 finished")),
            "{key}: {text}"
        );
        assert!(!row.contains(&format!("pid {kept}")), "{key}: {text}");
    }
    for run in &running {
        run.signal(nix::sys::signal::Signal::SIGTERM);
    }
    for run in running {
        run.wait(secs(30));
    }
}
