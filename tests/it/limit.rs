//! `--limit N`: at most N holders at once, each with its own lease. A killed holder frees its
//! permit within one TTL; a mismatched limit (or a mutex client on a semaphore) is refused;
//! `status` lists every holder; `--hold-at-least` keeps a permit; waiters keep their order.

use std::fs;
use std::path::Path;

use nix::sys::signal::Signal;

use crate::common::*;

/// Intervals (name, start ns, end ns) from `start NAME T` / `end NAME T` lines; a run that
/// never wrote its end (killed) ends at `u128::MAX`.
fn intervals(log: &str) -> Vec<(String, u128, u128)> {
    let mut out: Vec<(String, u128, u128)> = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["start", name, t, ..] => out.push((name.to_string(), t.parse().unwrap(), u128::MAX)),
            ["end", name, t] => {
                let iv = out
                    .iter_mut()
                    .find(|iv| iv.0 == *name)
                    .expect("end after start");
                iv.2 = t.parse().unwrap();
            }
            _ => panic!("unexpected log line {line:?}"),
        }
    }
    out
}

/// The most intervals open at one moment.
fn most_at_once(ivs: &[(String, u128, u128)]) -> usize {
    ivs.iter()
        .map(|a| ivs.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).count())
        .max()
        .unwrap_or(0)
}

const LOGGED: &str = "echo \"start $RUN $(date +%s%N) $REDLOCK_FENCE\" >> log; sleep 0.3; \
                      echo \"end $RUN $(date +%s%N)\" >> log";

#[test]
fn at_most_n_hold_at_once_and_all_run_with_wait() {
    let redis = RedisServer::start();
    let dir = scratch();
    let runs: Vec<Running> = (0..8)
        .map(|i| {
            Wrapper::on(&redis, "backups")
                .args(["--limit", "3", "--wait", "60s"])
                .sh(LOGGED)
                .env("RUN", format!("r{i}"))
                .current_dir(dir.path())
                .spawn()
        })
        .collect();
    for r in runs {
        r.wait(secs(60)).expect_code(0);
    }
    let log = fs::read_to_string(dir.path().join("log")).unwrap();
    let ivs = intervals(&log);
    assert_eq!(ivs.len(), 8, "every run ran once\n{log}");
    let most = most_at_once(&ivs);
    assert!(most <= 3, "{most} held at once\n{log}");
    // A semaphore, not a mutex: several ran together.
    assert!(most >= 2, "never more than one at once\n{log}");
    let mut fences: Vec<u64> = log
        .lines()
        .filter(|l| l.starts_with("start"))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse().unwrap())
        .collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 8, "fences not unique\n{log}");
    // {..}:fence, and the run record ({..}:last-run, {..}:last-success; run_record.rs).
    assert_eq!(
        redis.dbsize(),
        3,
        "only the fence counter and the run record are left"
    );
}

#[test]
fn a_killed_holder_frees_its_permit_within_one_ttl() {
    let redis = RedisServer::start();
    let dir = scratch();
    let hold = |name: &str| {
        Wrapper::on(&redis, "k")
            .args(["--limit", "2", "--ttl", "2s"])
            .sh(&format!(
                "touch {name}; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; \
                 i=$((i+1)); done"
            ))
            .current_dir(dir.path())
            .spawn()
    };
    let mut a = hold("a");
    a.wait_for_file(&dir.path().join("a"), secs(20));
    let mut b = hold("b");
    b.wait_for_file(&dir.path().join("b"), secs(20));
    let busy = Wrapper::on(&redis, "k")
        .args(["--limit", "2"])
        .sh("true")
        .run();
    busy.expect_code(75);
    busy.expect_stderr_contains("(all 2 permits) is busy");

    a.signal(Signal::SIGKILL);
    a.wait(secs(10));
    // The permit frees when A's lease ends on the server; B still holds its own.
    let c = Wrapper::on(&redis, "k")
        .args(["--limit", "2", "--wait", "30s"])
        .sh("touch c")
        .current_dir(dir.path())
        .run();
    c.expect_code(0);
    assert!(b.is_running(), "B lost its permit\n{}", b.describe());
    fs::write(dir.path().join("go"), "").unwrap();
    b.wait(secs(30)).expect_code(0);
}

#[test]
fn a_mismatched_limit_is_refused() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut a = Wrapper::on(&redis, "k")
        .args(["--limit", "3"])
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    a.wait_for_file(&dir.path().join("held"), secs(20));
    for (args, needle) in [
        (
            vec!["--limit", "2"],
            "is used with --limit 3 elsewhere and this run has --limit 2",
        ),
        (
            vec![],
            "is used with --limit elsewhere and this run has none",
        ),
    ] {
        let out = Wrapper::on(&redis, "k")
            .args(&args)
            .sh("touch ran")
            .current_dir(dir.path())
            .run();
        // A configuration error of its own (78), not Redis unavailable (69).
        out.expect_code(78);
        let line = out.expect_one_line();
        assert!(line.contains(needle), "{args:?}: {line}");
        assert!(!line.contains("WRONGTYPE"), "{args:?}: {line}");
        assert!(!dir.path().join("ran").exists());
    }
    fs::write(dir.path().join("go"), "").unwrap();
    a.wait(secs(30)).expect_code(0);

    // The other way round: a mutex holder, then a --limit client.
    fs::remove_file(dir.path().join("go")).unwrap();
    fs::remove_file(dir.path().join("held")).unwrap();
    let mut m = Wrapper::on(&redis, "k")
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    m.wait_for_file(&dir.path().join("held"), secs(20));
    let out = Wrapper::on(&redis, "k")
        .args(["--limit", "3"])
        .sh("true")
        .run();
    out.expect_code(78);
    let line = out.expect_one_line();
    assert!(
        line.contains("is held without --limit elsewhere and this run has --limit 3"),
        "{out}"
    );
    assert!(!line.contains("WRONGTYPE"), "{out}");
    fs::write(dir.path().join("go"), "").unwrap();
    m.wait(secs(30)).expect_code(0);
}

#[test]
fn status_lists_every_holder_and_hold_at_least_keeps_a_permit() {
    let redis = RedisServer::start();
    let dir = scratch();
    // One holder that finished but keeps its permit for a while (--hold-at-least)...
    Wrapper::on(&redis, "k")
        .args(["--limit", "3", "--hold-at-least", "60s"])
        .sh("true")
        .run()
        .expect_code(0);
    // ...and one that runs.
    let mut b = Wrapper::on(&redis, "k")
        .args(["--limit", "3"])
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    b.wait_for_file(&dir.path().join("held"), secs(20));
    let text = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "k"])
        .run();
    text.expect_code(0);
    assert!(
        text.stdout.contains("redlock:k: 2 of 3 held (--limit 3): "),
        "{text}"
    );
    assert!(text.stdout.contains(&format!("pid {}", b.pid)), "{text}");
    // The first line lists the holders; the run record's lines follow (run_record.rs).
    let holders = text.stdout.lines().next().unwrap_or_default();
    assert_eq!(holders.matches("fence ").count(), 2, "{text}");
    // The kept permit's command has finished: said so, not named by its pid as running.
    assert_eq!(holders.matches(" by --hold-at-least)").count(), 1, "{text}");
    assert!(
        holders.contains(" finished at ") && holders.contains(", kept until "),
        "{text}"
    );
    let json = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "k", "--json"])
        .run();
    json.expect_code(0);
    let status = parse_json(&json.stdout);
    assert_eq!(status["limit"], 3, "{json}");
    assert_eq!(
        status["holders"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    let kept: Vec<&serde_json::Value> = status["holders"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["kept_until_ms"].is_u64() && h["finished_ms"].is_u64())
        .collect();
    assert_eq!(kept.len(), 1, "one permit kept by --hold-at-least: {json}");
    assert_ne!(kept[0]["pid"], b.pid, "{json}");
    // One permit left: one more gets in, the next is busy.
    Wrapper::on(&redis, "k")
        .args(["--limit", "3", "--hold-at-least", "60s"])
        .sh("true")
        .run()
        .expect_code(0);
    Wrapper::on(&redis, "k")
        .args(["--limit", "3"])
        .sh("true")
        .run()
        .expect_code(75);
    fs::write(dir.path().join("go"), "").unwrap();
    b.wait(secs(30)).expect_code(0);
}

/// What a release that keeps a permit notes beside the holder's info (`TOKEN:kept`) goes
/// with the permit when a later acquire reaps it, while another holder keeps the hash alive:
/// only that holder's info is left.
#[test]
fn a_kept_permits_note_is_reaped_with_it() {
    let redis = RedisServer::start();
    let dir = scratch();
    let start = std::time::Instant::now();
    Wrapper::on(&redis, "k")
        .args(["--limit", "2", "--hold-at-least", "1s"])
        .sh("true")
        .run()
        .expect_code(0);
    let fields = redis.cli(&["HKEYS", "{redlock:k}:holders"]);
    assert!(
        fields.contains(":kept"),
        "no note of the kept permit: {fields:?}"
    );
    let mut b = Wrapper::on(&redis, "k")
        .args(["--limit", "2"])
        .sh("echo $REDLOCK_TOKEN > token; touch held; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    b.wait_for_file(&dir.path().join("held"), secs(20));
    wait_until(secs(20), "the kept permit's time is over", || {
        start.elapsed() > ms(1500)
    });
    Wrapper::on(&redis, "k")
        .args(["--limit", "2"])
        .sh("true")
        .run()
        .expect_code(0);
    assert_eq!(
        redis.cli(&["HKEYS", "{redlock:k}:holders"]),
        read_trimmed(&dir.path().join("token")),
        "only the running holder's info is left"
    );
    fs::write(dir.path().join("go"), "").unwrap();
    b.wait(secs(30)).expect_code(0);
}

#[test]
fn waiters_for_permits_keep_their_order() {
    let redis = RedisServer::start();
    let dir = scratch();
    let hold = |name: &str| {
        let mut h = Wrapper::on(&redis, "k")
            .args(["--limit", "2"])
            .sh(&format!(
                "touch {name}; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; \
                 i=$((i+1)); done"
            ))
            .current_dir(dir.path())
            .spawn();
        h.wait_for_file(&dir.path().join(name), secs(20));
        h
    };
    let holders = [hold("h1"), hold("h2")];
    let mut waiters = Vec::new();
    for i in 1..=4 {
        let mut w = Wrapper::on(&redis, "k")
            .args(["--limit", "2", "--wait", "60s"])
            .sh(LOGGED)
            .env("RUN", format!("w{i}"))
            .current_dir(dir.path())
            .spawn();
        w.wait_until(secs(20), "queued", || {
            redis.cli_int(&["ZCARD", "{redlock:k}:queue"]) == i
        });
        waiters.push(w);
    }
    fs::write(dir.path().join("go"), "").unwrap();
    for h in holders {
        h.wait(secs(30)).expect_code(0);
    }
    for w in waiters {
        w.wait(secs(60)).expect_code(0);
    }
    let log = fs::read_to_string(dir.path().join("log")).unwrap();
    let mut ivs = intervals(&log);
    assert!(most_at_once(&ivs) <= 2, "{log}");
    ivs.sort_by_key(|iv| iv.1);
    let mut first_two: Vec<&str> = ivs[..2].iter().map(|iv| iv.0.as_str()).collect();
    first_two.sort_unstable();
    assert_eq!(
        first_two,
        ["w1", "w2"],
        "not served in arrival order\n{log}"
    );
}

/// Random SIGKILLs of wrappers: never more than N commands at once.
#[test]
fn random_kills_never_let_more_than_n_run() {
    let redis = RedisServer::start();
    let dir = scratch();
    let log = dir.path().join("log");
    let mut runs: Vec<Running> = (0..10)
        .map(|i| {
            Wrapper::on(&redis, "k")
                .args(["--limit", "2", "--ttl", "1s", "--wait", "60s"])
                .sh(LOGGED)
                .env("RUN", format!("r{i}"))
                .current_dir(dir.path())
                .spawn()
        })
        .collect();
    // Kill three wrappers, each as soon as its command has started; its command dies with it
    // (the kernel's parent-death signal, the cgroup), so its interval ends at the kill.
    let mut killed_at: Vec<(String, u128)> = Vec::new();
    for round in 0..3 {
        let started = |log: &Path| fs::read_to_string(log).unwrap_or_default();
        let victim = poll_until(secs(30), || {
            started(&log)
                .lines()
                .filter(|l| l.starts_with("start"))
                .count()
                > round * 2
        });
        assert!(victim, "runs did not start\n{}", started(&log));
        let text = started(&log);
        let ivs = intervals(&text);
        if let Some(open) = ivs.iter().find(|iv| iv.2 == u128::MAX) {
            let i: usize = open.0[1..].parse().unwrap();
            if runs[i].is_running() {
                runs[i].signal(Signal::SIGKILL);
                killed_at.push((open.0.clone(), now_ns()));
            }
        }
    }
    let mut exits = Vec::new();
    for r in runs {
        exits.push(r.wait(secs(90)).code());
    }
    let text = fs::read_to_string(&log).unwrap();
    let mut ivs = intervals(&text);
    for iv in ivs.iter_mut().filter(|iv| iv.2 == u128::MAX) {
        iv.2 = killed_at
            .iter()
            .find(|(name, _)| *name == iv.0)
            .unwrap_or_else(|| panic!("{} never ended and was not killed\n{text}", iv.0))
            .1;
    }
    let most = most_at_once(&ivs);
    let killed = killed_at.len();
    assert!(
        most <= 2,
        "{most} at once after {killed} kills\n{text}\nexits {exits:?}"
    );
    assert!(killed >= 1, "no wrapper was killed\n{text}");
    assert_eq!(
        ivs.len(),
        10,
        "every run started once\n{text}\nexits {exits:?}"
    );
}

#[test]
fn a_limit_out_of_range_is_a_usage_error() {
    let redis = RedisServer::start();
    for limit in ["0", "1001", "-1", "x"] {
        let out = Wrapper::on(&redis, "k")
            .args(["--limit", limit])
            .sh("true")
            .run();
        out.expect_code(2);
        out.expect_one_line();
    }
    assert_eq!(redis.dbsize(), 0);
}

/// `--hold-at-least` longer than the lease keeps the permit, but the recorded limit expires
/// with the old lease: a run with another `--limit` is then let in, and `status` says the
/// lock never expires.
#[test]
fn hold_at_least_keeps_the_recorded_limit_too() {
    let redis = RedisServer::start();
    let start = std::time::Instant::now();
    Wrapper::on(&redis, "k")
        .args(["--limit", "2", "--ttl", "2s", "--hold-at-least", "60s"])
        .sh("true")
        .run()
        .expect_code(0);
    // Past the end of the old lease (2 s): the permit is kept for about a minute more, and
    // the recorded limit with it.
    wait_until(secs(20), "the old lease is over", || {
        start.elapsed() > ms(2500)
    });
    assert!(
        redis.exists("{redlock:k}:limit"),
        "the recorded limit expired"
    );
    assert!(redis.pttl("redlock:k") > 0, "the kept permit is gone");
    let status = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "k"])
        .run();
    status.expect_code(0);
    assert!(
        status.stdout.contains("1 of 2 held"),
        "status does not list the kept permit: {status}"
    );
    // A run with another limit must be refused while a --limit 2 permit is taken.
    let other = Wrapper::on(&redis, "k")
        .args(["--limit", "3"])
        .sh("echo ran")
        .run();
    assert_eq!(
        other.code(),
        Some(78),
        "a --limit 3 run joined a --limit 2 lock (or failed otherwise than as a mismatch): \
         {other}"
    );
}

/// A `--limit` run on a key that holds somebody else's sorted set (no limit recorded) must
/// refuse it like the mutex refuses any other type, not delete its members.
#[test]
fn a_limit_run_leaves_a_foreign_sorted_set_alone() {
    let redis = RedisServer::start();
    redis.cli(&["ZADD", "redlock:board", "10", "alice", "20", "bob"]);
    let out = Wrapper::on(&redis, "board")
        .args(["--limit", "2"])
        .sh("echo ran")
        .run();
    assert_eq!(
        redis.cli_int(&["ZCARD", "redlock:board"]),
        2,
        "the sorted set lost members: {out}"
    );
    out.expect_code(69);
}

/// The semaphore's acquire checks its companions before its first write, like the mutex's:
/// otherwise a failing HSET leaves the lock key behind without a TTL.
#[test]
fn a_failed_limit_acquire_leaves_no_key_without_a_ttl() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "{redlock:h}:holders", "junk", "EX", "600"]);
    Wrapper::on(&redis, "h")
        .args(["--limit", "2", "--ttl", "5s"])
        .sh("echo ran")
        .run()
        .expect_code(69);
    let pttl = redis.pttl("redlock:h");
    assert!(pttl != -1, "redlock:h was left without a TTL");
}
