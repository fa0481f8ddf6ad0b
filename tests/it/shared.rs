//! Issue 26: `--shared`, as `flock -s`. Shared runs hold the lock together, an exclusive run
//! (the default) holds it alone; one queue in arrival order for both kinds, so an exclusive
//! waiter keeps later shared runs out and is not starved; a SIGKILLed shared holder frees its
//! share within one ttl; fences grow across both kinds; `status` shows the shared holders;
//! Sentinel and Cluster; refused with `--limit` and with Redlock. The tests wait on files the
//! commands leave and on `status`, never on timing.

use std::fs;
use std::path::Path;

use nix::sys::signal::Signal;

use crate::common::cluster::Cluster;
use crate::common::history::{self, Run};
use crate::common::quorum::Nodes;
use crate::common::sentinel::SentinelSet;
use crate::common::*;

/// A small xorshift generator seeded from the clock: the chaos differs from run to run, and
/// the seed is printed so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = (now_ns() as u64) | 1;
        eprintln!("chaos seed {seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A command that leaves `NAME` (its fence inside) at once, then waits for the file `go-NAME`
/// (or at most 60 s, then fails: a test that forgot it must not hang).
fn holds(name: &str) -> String {
    format!(
        "echo $REDLOCK_FENCE > {name}; i=0; while [ ! -e go-{name} ]; do \
         i=$((i+1)); [ $i -gt 1200 ] && exit 9; sleep 0.05; done"
    )
}

fn fence(dir: &Path, name: &str) -> u64 {
    read_trimmed(&dir.join(name)).parse().unwrap()
}

fn go(dir: &Path, name: &str) {
    fs::write(dir.join(format!("go-{name}")), "").unwrap();
}

/// `status --json` of the lock `w` names.
fn status(w: Wrapper) -> serde_json::Value {
    let out = w.args(["status", "--json"]).run();
    out.expect_code(0);
    parse_json(&out.stdout)
}

fn shared_holders(s: &serde_json::Value) -> usize {
    s["shared_holders"].as_array().map_or(0, Vec::len)
}

/// Three shared runs at once: each waits until all three have started, which only ends if
/// they hold the lock together (one at a time, the first would wait for ever and fail).
fn three_at_once(w: impl Fn() -> Wrapper, dir: &Path) {
    let runs: Vec<Running> = (1..=3)
        .map(|i| {
            w().arg("--shared")
                .sh(&format!(
                    "touch in{i}; n=0; while [ ! -e in1 ] || [ ! -e in2 ] || [ ! -e in3 ]; do \
                     n=$((n+1)); [ $n -gt 1200 ] && exit 9; sleep 0.05; done; \
                     echo $REDLOCK_FENCE > saw{i}"
                ))
                .current_dir(dir)
                .spawn()
        })
        .collect();
    for r in runs {
        r.wait(secs(90)).expect_code(0);
    }
    let mut fences: Vec<u64> = (1..=3).map(|i| fence(dir, &format!("saw{i}"))).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 3, "each shared holder has a fence of its own");
}

#[test]
fn three_shared_runs_hold_at_once() {
    let redis = RedisServer::start();
    let dir = scratch();
    three_at_once(|| Wrapper::on(&redis, "k"), dir.path());
    // Nothing is left but the fence counter and the run record.
    assert!(!redis.exists("{redlock:k}:shared"));
    assert!(!redis.exists("{redlock:k}:holders"));
}

/// Two shared holders; an exclusive waiter queues behind them and keeps a later shared run
/// out (one that waits queues behind it, one that does not is busy); the exclusive run goes
/// in once both shared holders are done, the later shared one after it. Fences grow in that
/// order across both kinds.
fn exclusive_waits_and_keeps_later_shared_out(w: impl Fn() -> Wrapper, dir: &Path) {
    let mut s1 = w()
        .arg("--shared")
        .sh(&holds("s1"))
        .current_dir(dir)
        .spawn();
    let mut s2 = w()
        .arg("--shared")
        .sh(&holds("s2"))
        .current_dir(dir)
        .spawn();
    s1.wait_for_file(&dir.join("s1"), secs(30));
    s2.wait_for_file(&dir.join("s2"), secs(30));

    // An exclusive run that does not wait is busy, and says why.
    let busy = w().sh("true").run();
    busy.expect_code(75);
    busy.expect_stderr_contains("is busy: held shared by 2 runs");

    let e = w()
        .args(["--wait", "90s"])
        .sh(&holds("e"))
        .current_dir(dir)
        .spawn();
    wait_until(secs(30), "the exclusive run queues", || {
        status(w())["queued"] == 1
    });
    let s = status(w());
    assert_eq!(s["held"], true, "{s}");
    assert_eq!(shared_holders(&s), 2, "{s}");
    assert_eq!(s["next_exclusive"], true, "{s}");

    // A shared run that arrives now queues behind the exclusive waiter...
    let s3 = w()
        .args(["--shared", "--wait", "90s"])
        .sh(&holds("s3"))
        .current_dir(dir)
        .spawn();
    wait_until(secs(30), "the later shared run queues", || {
        status(w())["queued"] == 2
    });
    // ... and one that does not wait is busy, although only shared runs hold the lock.
    let busy = w().arg("--shared").sh("touch s4").current_dir(dir).run();
    busy.expect_code(75);
    assert!(!dir.join("s4").exists());
    assert!(!dir.join("e").exists() && !dir.join("s3").exists());

    // The first shared holder leaves: the other still keeps the exclusive run out.
    go(dir, "s1");
    s1.wait(secs(30)).expect_code(0);
    wait_until(secs(30), "one shared holder left", || {
        shared_holders(&status(w())) == 1
    });
    assert!(!dir.join("e").exists(), "exclusive beside a shared holder");
    go(dir, "s2");
    s2.wait(secs(30)).expect_code(0);

    let mut e = e;
    e.wait_for_file(&dir.join("e"), secs(60));
    let s = status(w());
    assert_eq!(shared_holders(&s), 0, "{s}");
    assert_eq!(s["queued"], 1, "{s}");
    assert_eq!(s["next_exclusive"], false, "{s}");
    assert!(
        !dir.join("s3").exists(),
        "shared beside the exclusive holder"
    );
    go(dir, "e");
    e.wait(secs(30)).expect_code(0);
    let mut s3 = s3;
    s3.wait_for_file(&dir.join("s3"), secs(60));
    go(dir, "s3");
    s3.wait(secs(30)).expect_code(0);

    let (f1, f2, fe, f3) = (
        fence(dir, "s1"),
        fence(dir, "s2"),
        fence(dir, "e"),
        fence(dir, "s3"),
    );
    assert!(
        f1.max(f2) < fe && fe < f3 && f1 != f2,
        "fences s1 {f1} s2 {f2} e {fe} s3 {f3}"
    );
}

#[test]
fn an_exclusive_run_waits_for_shared_holders_and_keeps_later_shared_runs_out() {
    let redis = RedisServer::start();
    let dir = scratch();
    exclusive_waits_and_keeps_later_shared_out(|| Wrapper::on(&redis, "k"), dir.path());
}

/// A stream of shared runs, each arriving while others hold the lock, does not starve an
/// exclusive one: it goes in as soon as the shared holders that ran when it queued are done,
/// before every shared run that arrived after it.
#[test]
fn a_stream_of_shared_runs_does_not_starve_an_exclusive_one() {
    let redis = RedisServer::start();
    let dir = scratch();
    let d = dir.path();
    let w = || Wrapper::on(&redis, "k");
    let mut first = w()
        .arg("--shared")
        .sh(&holds("first"))
        .current_dir(d)
        .spawn();
    first.wait_for_file(&d.join("first"), secs(30));
    let mut e = w()
        .args(["--wait", "90s"])
        .sh("echo $REDLOCK_FENCE > e")
        .current_dir(d)
        .spawn();
    wait_until(secs(30), "the exclusive run queues", || {
        status(w())["queued"] == 1
    });
    // The stream: each run holds until the next one has asked for the lock, so that a shared
    // run would always hold it if shared runs could pass the exclusive waiter.
    let stream: Vec<Running> = (1..=5)
        .map(|i| {
            let r = w()
                .args(["--shared", "--wait", "90s"])
                .sh(&format!("echo $REDLOCK_FENCE > r{i}"))
                .current_dir(d)
                .spawn();
            wait_until(secs(30), "the shared run queues", || {
                status(w())["queued"] == 1 + i
            });
            r
        })
        .collect();
    assert!(!d.join("e").exists());
    go(d, "first");
    first.wait(secs(30)).expect_code(0);
    e.wait_for_file(&d.join("e"), secs(60));
    let fe = fence(d, "e");
    for r in stream {
        r.wait(secs(60)).expect_code(0);
    }
    e.wait(secs(30)).expect_code(0);
    for i in 1..=5 {
        let fr = fence(d, &format!("r{i}"));
        assert!(
            fe < fr,
            "shared run {i} (fence {fr}) went before the exclusive one ({fe})"
        );
    }
}

/// A shared holder whose wrapper is SIGKILLed keeps its share only until its lease ends on
/// the server (one ttl), while the other shared holder keeps its own.
#[test]
fn a_killed_shared_holder_frees_its_share_within_one_ttl() {
    let redis = RedisServer::start();
    let dir = scratch();
    let d = dir.path();
    let w = || Wrapper::on(&redis, "k");
    let mut a = w()
        .args(["--shared", "--ttl", "2s"])
        .sh(&holds("a"))
        .current_dir(d)
        .spawn();
    a.wait_for_file(&d.join("a"), secs(30));
    let mut b = w().arg("--shared").sh(&holds("b")).current_dir(d).spawn();
    b.wait_for_file(&d.join("b"), secs(30));
    let a_fence = fence(d, "a");

    a.signal(Signal::SIGKILL);
    a.wait(secs(10));
    // Its lease ends at most one ttl after the kill, by the server's clock.
    let s = status(w());
    let a_left = s["shared_holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["fence"] == a_fence)
        .map(|h| h["ttl_ms"].as_u64().unwrap());
    if let Some(left) = a_left {
        assert!(
            left <= 2000,
            "the killed holder's share lasts {left} ms more: {s}"
        );
    }
    wait_until(secs(30), "the killed holder's share expires", || {
        shared_holders(&status(w())) == 1
    });
    // B still holds its share: an exclusive run is busy.
    w().sh("true").run().expect_code(75);
    assert!(b.is_running(), "B lost its share\n{}", b.describe());
    go(d, "b");
    b.wait(secs(30)).expect_code(0);
    w().sh("true").run().expect_code(0);
}

/// `--hold-at-least` keeps a share after its command ended, as it keeps an exclusive lock;
/// another shared run goes in beside it, an exclusive one waits until it ends.
#[test]
fn hold_at_least_keeps_a_share() {
    let redis = RedisServer::start();
    let w = || Wrapper::on(&redis, "k");
    w().args(["--shared", "--hold-at-least", "3s"])
        .sh("true")
        .run()
        .expect_code(0);
    let s = status(w());
    assert_eq!(shared_holders(&s), 1, "{s}");
    w().args(["--shared"]).sh("true").run().expect_code(0);
    let busy = w().sh("true").run();
    busy.expect_code(75);
    // Its command finished: said so, not as a run that renews its lease.
    busy.expect_stderr_contains("held shared by 1 run (");
    busy.expect_stderr_contains("kept until");
    w().args(["--wait", "60s"]).sh("true").run().expect_code(0);
    assert_eq!(shared_holders(&status(w())), 0);
}

/// Shared and --limit on one key: a configuration error either way, and nothing changed.
#[test]
fn a_key_used_shared_and_with_limit_is_refused_both_ways() {
    let redis = RedisServer::start();
    let dir = scratch();
    let d = dir.path();
    let mut s = Wrapper::on(&redis, "k")
        .arg("--shared")
        .sh(&holds("s"))
        .current_dir(d)
        .spawn();
    s.wait_for_file(&d.join("s"), secs(30));
    let limited = Wrapper::on(&redis, "k")
        .args(["--limit", "2"])
        .sh("touch ran")
        .current_dir(d)
        .run();
    // A configuration error, as a limit mismatch: 78, not a Redis failure (69).
    limited.expect_code(78);
    limited.expect_stderr_contains("is used with --shared");
    limited.expect_one_line();
    go(d, "s");
    s.wait(secs(30)).expect_code(0);

    let mut l = Wrapper::on(&redis, "j")
        .args(["--limit", "2"])
        .sh(&holds("l"))
        .current_dir(d)
        .spawn();
    l.wait_for_file(&d.join("l"), secs(30));
    let shared = Wrapper::on(&redis, "j")
        .arg("--shared")
        .sh("touch ran")
        .current_dir(d)
        .run();
    shared.expect_code(78);
    shared.expect_stderr_contains("is used with --limit");
    shared.expect_one_line();
    go(d, "l");
    l.wait(secs(30)).expect_code(0);
    assert!(!d.join("ran").exists());
}

#[test]
fn shared_with_limit_and_shared_with_redlock_are_usage_errors() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .args(["--shared", "--limit", "3"])
        .sh("touch ran")
        .run();
    out.expect_code(2);
    out.expect_stderr_contains("--shared cannot be combined with --limit");
    let nodes = Nodes::start(3);
    let out = nodes.wrapper("k").arg("--shared").sh("touch ran").run();
    out.expect_code(2);
    out.expect_stderr_contains("--shared is not supported with Redlock");
    assert_eq!(redis.dbsize(), 0);
}

#[test]
fn status_text_shows_shared_holders_and_an_exclusive_waiter() {
    let redis = RedisServer::start();
    let dir = scratch();
    let d = dir.path();
    let w = || Wrapper::on(&redis, "k");
    let mut a = w().arg("--shared").sh(&holds("a")).current_dir(d).spawn();
    let mut b = w().arg("--shared").sh(&holds("b")).current_dir(d).spawn();
    a.wait_for_file(&d.join("a"), secs(30));
    b.wait_for_file(&d.join("b"), secs(30));
    let e = w()
        .args(["--wait", "90s"])
        .sh("true")
        .current_dir(d)
        .spawn();
    wait_until(secs(30), "the exclusive run queues", || {
        status(w())["queued"] == 1
    });
    let out = w().arg("status").run();
    out.expect_code(0);
    let text = out.stdout.trim();
    assert!(text.starts_with("redlock:k: held shared by 2: "), "{text}");
    for f in [fence(d, "a"), fence(d, "b")] {
        assert!(text.contains(&format!("fence {f}")), "{text}");
    }
    assert!(
        text.contains("1 waiting, next: ")
            && text.contains("(exclusive: keeps new shared runs out)"),
        "{text}"
    );
    go(d, "a");
    go(d, "b");
    a.wait(secs(30)).expect_code(0);
    b.wait(secs(30)).expect_code(0);
    e.wait(secs(60)).expect_code(0);
}

/// Random shared and exclusive runs with random SIGKILLs: an exclusive command never runs
/// beside any other command, and every fence stays in order across an exclusive run.
#[test]
fn chaos_shared_and_exclusive_with_kills() {
    let redis = RedisServer::start();
    let dir = scratch();
    let (xd, sd) = (dir.path().join("x"), dir.path().join("s"));
    fs::create_dir_all(&xd).unwrap();
    fs::create_dir_all(&sd).unwrap();
    let mut rng = Rng::new();
    let mut runs: Vec<(Running, String)> = Vec::new();
    let mut killed = 0;
    const RUNS: usize = 24;
    for i in 0..RUNS {
        // Every third run is exclusive, so that both kinds always run (a draw of kinds left
        // one seed with two exclusive runs, both busy).
        let shared = i % 3 != 0;
        let beats = 2 + rng.next() % 12;
        // A third does not wait: it tries once, whatever holds the lock at that moment; every
        // other exclusive run waits, so at least four exclusive commands run.
        let wait = if i % 6 != 0 && rng.next().is_multiple_of(3) {
            "0"
        } else {
            "120s"
        };
        let mut w = Wrapper::on(&redis, "k").args(["--ttl", "1s", "--wait", wait]);
        if shared {
            w = w.arg("--shared");
        }
        let name = format!("r{i}");
        let r = w
            .sh(&history::job(&name, beats as u32, ""))
            .current_dir(if shared { &sd } else { &xd })
            .spawn();
        runs.push((r, if shared { "s" } else { "x" }.to_owned()));
        // Arrivals spread out, so that runs arrive while others hold the lock; now and then
        // a wrapper whose command has started (its pid file is there) is SIGKILLed.
        std::thread::sleep(ms(rng.next() % 150));
        if killed < 5 && rng.next().is_multiple_of(2) {
            let from = rng.next() as usize;
            let n = runs.len();
            for j in (0..n).map(|k| (from + k) % n) {
                let (r, kind) = &mut runs[j];
                let pid_file = dir.path().join(kind.as_str()).join(format!("r{j}.pid"));
                if pid_file.exists() && r.is_running() {
                    r.signal(Signal::SIGKILL);
                    killed += 1;
                    break;
                }
            }
        }
    }
    assert!(killed > 0, "no wrapper was killed");
    for (r, _) in runs {
        r.wait(secs(180));
    }
    eprintln!("{killed} wrappers killed");
    let x: Vec<Run> = history::read(&xd);
    let s: Vec<Run> = history::read(&sd);
    assert!(
        !x.is_empty() && !s.is_empty(),
        "both kinds ran: {} {}",
        x.len(),
        s.len()
    );
    let mut problems = Vec::new();
    for e in &x {
        for other in x.iter().chain(&s) {
            if std::ptr::eq(e, other) {
                continue;
            }
            if other.start <= e.end && e.start <= other.end {
                problems.push(format!("exclusive {e:?} beside {other:?}"));
            }
            if (other.start < e.start) != (other.fence < e.fence) {
                problems.push(format!(
                    "fences out of order: exclusive {e:?}, other {other:?}"
                ));
            }
        }
    }
    let mut fences: Vec<u64> = x.iter().chain(&s).map(|r| r.fence).collect();
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    if fences.len() != n {
        problems.push("a fence given twice".to_owned());
    }
    assert!(
        problems.is_empty(),
        "{} kills:\n{}",
        killed,
        problems.join("\n")
    );
}

#[test]
fn sentinel_shared_and_exclusive() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    three_at_once(|| set.wrapper("k"), dir.path());
    let dir = scratch();
    exclusive_waits_and_keeps_later_shared_out(|| set.wrapper("k"), dir.path());
}

#[test]
fn cluster_shared_and_exclusive_in_the_lock_slot() {
    let cluster = Cluster::start(3, 0);
    let dir = scratch();
    three_at_once(|| cluster.wrapper("k"), dir.path());
    let dir = scratch();
    exclusive_waits_and_keeps_later_shared_out(|| cluster.wrapper("k"), dir.path());
    let owner = cluster.owner_of("redlock:k");
    assert_eq!(cluster.owner_of("{redlock:k}:shared"), owner);
}

/// Move `key` from node `from` to `to` (the slot migrating between them). Any answer but OK
/// or NOKEY (BUSYKEY: the key exists on both nodes) fails the test.
fn migrate_one(cluster: &Cluster, key: &str, from: usize, to: usize) {
    let port = cluster.nodes[to].port().to_string();
    let reply =
        cluster.nodes[from].cli(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key]);
    assert!(
        reply == "OK" || reply == "NOKEY",
        "MIGRATE {key} from {from} to {to}: {reply}"
    );
}

/// The lock's slot migrated there and back, one key at a time, while shared and exclusive
/// runs (waiting and not) take the lock over and over: an exclusive command never runs beside
/// another command (each checks for the others' marks inside the lock), no key is ever on
/// both nodes, and every waiter gets the lock.
#[test]
fn shared_and_exclusive_while_the_slot_moves_key_by_key() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:mix";
    let slot = cluster.slot(key);
    let a = cluster.owner_of(key);
    let b = cluster.other_master(a);
    // Exclusive: a directory only it may have, and no shared mark beside it. Shared: a mark
    // of its own, and no exclusive directory beside it.
    let exclusive = "mkdir x 2>/dev/null || touch breach; ls s.* >/dev/null 2>&1 && touch breach; \
                     sleep 0.05; rmdir x";
    let shared = "touch s.$$; [ -d x ] && touch breach; sleep 0.1; rm s.$$";
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let waits = c % 2 == 0;
            let is_shared = c >= 2;
            let mut w = cluster
                .wrapper("mix")
                .args(["--connect-timeout", "1s", "--ttl", "2s"]);
            if waits {
                w = w.args(["--wait", "60s"]);
            }
            if is_shared {
                w = w.arg("--shared");
            }
            let w = w
                .sh(if is_shared { shared } else { exclusive })
                .current_dir(dir.path());
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                for _ in 0..200 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let out = w.run();
                    codes.push((out.code(), out.stderr.clone()));
                }
                (c, waits, codes)
            })
        })
        .collect();
    for (from, to) in [(a, b), (b, a), (a, b)] {
        std::thread::sleep(ms(300));
        cluster.begin_migration(slot, from, to);
        for _ in 0..3 {
            for k in cluster.keys_in_slot(from, slot) {
                migrate_one(&cluster, &k, from, to);
                std::thread::sleep(ms(150));
            }
        }
        for k in cluster.keys_in_slot(from, slot) {
            migrate_one(&cluster, &k, from, to);
        }
        cluster.finish_migration(slot, to);
    }
    std::thread::sleep(ms(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        let (c, waits, codes) = client.join().unwrap();
        for (code, stderr) in &codes {
            let ok = match code {
                Some(0) => true,
                // A run that does not wait may find the lock busy, or its keys not moved yet.
                Some(75) | Some(69) => !waits,
                _ => false,
            };
            assert!(ok, "client {c}: exit {code:?}\n{stderr}");
        }
        assert!(
            !waits || codes.iter().any(|(code, _)| *code == Some(0)),
            "client {c} never got the lock: {codes:?}"
        );
    }
    assert!(
        !dir.path().join("breach").exists(),
        "an exclusive holder beside another holder"
    );
}

/// `--hold-at-least` on a lock whose command has finished: whoever waits for it, and
/// `status`, say that the command finished and until when the lock is kept, never name its
/// exited pid as if it still ran and renewed. A shared holder kept so (exclusive runs wait
/// for it), an exclusive holder kept so (shared runs wait for it), as for the mutex.
#[test]
fn a_hold_kept_by_hold_at_least_is_told_as_finished_to_both_kinds() {
    let redis = RedisServer::start();
    let w = |key: &str| Wrapper::on(&redis, key);
    let kept = |text: &str, what: &str| {
        for needle in [" finished at ", ", kept until ", " by --hold-at-least"] {
            assert!(
                text.contains(needle),
                "{what}: {needle:?} missing in\n{text}"
            );
        }
    };

    // A shared holder kept: status (text and JSON), an exclusive run's busy message and its
    // wait's first line.
    w("s")
        .args(["--shared", "--hold-at-least", "60s"])
        .sh("true")
        .run()
        .expect_code(0);
    let text = w("s").arg("status").run();
    text.expect_code(0);
    kept(&text.stdout, "status of a kept share");
    let s = status(w("s"));
    assert_eq!(shared_holders(&s), 1, "{s}");
    let share = &s["shared_holders"][0];
    assert!(share["finished_ms"].is_u64(), "{s}");
    assert!(share["kept_until_ms"].is_u64(), "{s}");
    let busy = w("s").sh("true").run();
    busy.expect_code(75);
    kept(
        busy.expect_one_line(),
        "exclusive run, busy on a kept share",
    );
    let waited = w("s").args(["--wait", "1s", "-v"]).sh("true").run();
    waited.expect_code(75);
    waited.expect_stderr_contains("free in ");
    assert!(
        !waited.stderr.contains("renews its lease"),
        "a kept share is told as renewed\n{waited}"
    );
    kept(&waited.stderr, "exclusive run, waiting on a kept share");

    // An exclusive holder kept: a shared run's busy message.
    w("x")
        .args(["--hold-at-least", "60s"])
        .sh("true")
        .run()
        .expect_code(0);
    let busy = w("x").arg("--shared").sh("true").run();
    busy.expect_code(75);
    kept(
        busy.expect_one_line(),
        "shared run, busy on a kept exclusive holder",
    );
}

/// A shared holder whose share is gone with a broken mark left for its token (what `break`
/// leaves) is told at its next renewal who broke it and when, as a mutex or a permit holder
/// is, and stops with 74.
#[test]
fn a_shared_renewal_that_finds_its_share_broken_names_the_breaker() {
    let redis = RedisServer::start();
    let dir = scratch();
    let d = dir.path();
    let mut a = Wrapper::on(&redis, "k")
        .args([
            "--shared",
            "--ttl",
            "5s",
            "--heartbeat",
            "300ms",
            "--grace",
            "1s",
        ])
        .sh(&holds("a"))
        .current_dir(d)
        .spawn();
    a.wait_for_file(&d.join("a"), secs(30));
    let token = status(Wrapper::on(&redis, "k"))["shared_holders"][0]["token"]
        .as_str()
        .expect("the share's token")
        .to_owned();
    // 2026-12-01T12:00:00Z
    redis.cli(&["HSET", "{redlock:k}:broken", &token, "ops9\t1796126400000"]);
    redis.cli(&["ZREM", "{redlock:k}:shared", &token]);
    let out = a.wait(secs(30));
    out.expect_code(74);
    out.expect_stderr_contains("was broken by ops9 at 2026-12-01T12:00:00Z (redlock-run break)");
}
