//! Issue 18: what holds across a failover with `--min-replicas 1` (harness:
//! `tests/common/sentinel.rs`, `tests/common/cluster.rs`; the commands record their own runs,
//! `tests/common/history.rs`).
//!
//! - `reproduction`: a run that starts in the window of a `SENTINEL FAILOVER` where the new
//!   master already says `ROLE master` but the sentinels still name the old one locks there
//!   (a replica that is about to be repointed acknowledges it); a run started once the
//!   sentinels name the new master must still not run beside it. Repeated
//!   `REDLOCK_TEST_FAILOVER_ATTEMPTS` times (default 3; the issue asks for 30 by hand).
//! - kill -9 and SIGSTOP of the master while a run holds: a run started after the failover
//!   never runs beside it; a frozen old master is demoted once it thaws.
//! - waiters (`--wait 30s`) started before and during a failover lock on the new master and
//!   exit 0, not 69.
//! - queue places left on the old master hold the new one back at most one place lifetime.
//! - `chaos_sentinel_and_cluster_history` (ignored, slow): wrapper loops on one key while
//!   Sentinel and Cluster fail over again and again; no two commands overlap, fences grow.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::common::cluster::Cluster;
use crate::common::history::{self, job};
use crate::common::sentinel::{MASTER_NAME, SentinelSet, cli_at};
use crate::common::*;

/// The lease of every run here: short, so a lost lock shows within seconds.
const TTL: &str = "2s";
const TTL_MS: u128 = 2000;

/// The lock's Redis key for `--key job`.
const KEY: &str = "redlock:job";

/// A line on the test run's own stderr, shown also without `--nocapture`.
fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// A count from the environment, or `default`.
fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A duration in seconds from the environment, or `default`.
fn env_secs(name: &str, default: u64) -> Duration {
    secs(env_count(name, default))
}

/// The first line of `ROLE` (`master` or `slave`; empty if the node did not answer: one that
/// is restarting). Never ask a frozen server.
fn role(node: &RedisServer) -> String {
    cli_at(node.port(), None, &["ROLE"])
        .and_then(|r| r.lines().next().map(str::to_owned))
        .unwrap_or_default()
}

/// redis-cli, for the commands' own checks.
fn cli() -> String {
    format!("'{}'", redis_cli_bin().to_string_lossy())
}

/// `--ttl 2s --min-replicas 1 --replica-timeout 300ms` (a 2 s ttl leaves no time for the
/// default 1 s) on the set's `--key job`.
fn locked(set: &SentinelSet) -> Wrapper {
    set.wrapper("job").args(LOCKED)
}

const LOCKED: [&str; 6] = [
    "--ttl",
    TTL,
    "--min-replicas",
    "1",
    "--replica-timeout",
    "300ms",
];

/// Waits until `run` says it waits for the lock.
fn wait_for_waiting(run: &Running) {
    if !poll_until(secs(15), || run.stderr_so_far().contains("waiting")) {
        panic!("not waiting after 15s\n{}", run.describe());
    }
}

/// The runs recorded in `dir`, checked: no overlap, fences growing. Panics with `context`.
fn check_history(dir: &Path, context: &str) -> Vec<history::Run> {
    let runs = history::read(dir);
    if let Err(e) = history::check(&runs) {
        panic!("{e}\n{context}");
    }
    runs
}

/// The index of the first replica (`nodes[1..]`) that says `ROLE master`, waited for.
fn wait_promoted(set: &SentinelSet) -> usize {
    let mut y = 0;
    set.wait(secs(30), "a replica to say ROLE master", || {
        match (1..set.nodes.len()).find(|&i| role(&set.nodes[i]) == "master") {
            Some(i) => {
                y = i;
                true
            }
            None => false,
        }
    });
    y
}

// ---------------------------------------------------------------------------------------------
// The reproduction
// ---------------------------------------------------------------------------------------------

/// What one attempt of the reproduction saw.
struct Attempt {
    /// A asked for the lock on the old master X after the replica Y said ROLE master, and
    /// locked there (a failure) or was refused because Y lacked the grant.
    hit: bool,
    refused: bool,
    /// Every sentinel still named X just after A was started.
    named_x: bool,
    a: Option<i32>,
    b: Option<i32>,
    /// The longest time both commands ran at once.
    overlap_ms: Option<f64>,
    /// From the end of the first command to the start of the second (negative: overlap).
    gap_ms: Option<f64>,
    /// Why the attempt failed (two holders, a fence not growing, B not exiting 0).
    failure: Option<String>,
}

/// One attempt: a fresh set (X, Y, Z, three sentinels), `SENTINEL FAILOVER`, A started the
/// moment Y says ROLE master, B once every sentinel names Y and Y has Z online.
fn reproduction_attempt() -> Attempt {
    let set = SentinelSet::start(2);
    let dir = scratch();
    let x = set.nodes[0].port();
    set.manual_failover();
    let y = wait_promoted(&set);
    let (y_port, z_port) = (set.nodes[y].port(), set.nodes[3 - y].port());
    // A, in the window: the command says at once which server has its token.
    let a_first = format!(
        "{} -p {x} GET $REDLOCK_KEY > a.on-x.tmp; mv a.on-x.tmp a.on-x",
        cli()
    );
    let mut a = locked(&set)
        .sh(&job("a", 100, &a_first))
        .current_dir(dir.path())
        .spawn();
    let named_x = set.named_masters().iter().all(|m| *m == Some(x));
    let on_x = dir.path().join("a.on-x");
    let started = poll_until(secs(30), || on_x.exists() || a.try_status().is_some());
    assert!(started, "A neither ran nor exited\n{}", a.describe());
    if dir.path().join("a.pid").exists() {
        a.child_pid(&dir.path().join("a.pid"), secs(5));
    }
    let on_old_master = on_x.exists()
        && fs::read_to_string(&on_x).unwrap_or_default().trim()
            == read_trimmed(&dir.path().join("a.token"));

    let new = set.wait_for_failover(x);
    assert_eq!(
        new, y_port,
        "the sentinels name the replica that said ROLE master"
    );
    set.wait_replica_online(y_port, z_port);
    let b = locked(&set)
        .args(["--wait", "30s"])
        .sh(&job("b", 10, ""))
        .current_dir(dir.path())
        .spawn();
    let a_out = a.wait(secs(30));
    let b_out = b.wait(secs(60));
    // Refused because the promoted replica lacked A's grant: the window was hit and closed.
    let refused =
        a_out.code() == Some(69) && a_out.stderr.contains("which the sentinels could promote");
    let hit = on_old_master || refused;
    let runs = history::read(dir.path());
    let gap_ms = match &runs[..] {
        [first, second] => Some((second.start as f64 - first.end as f64) / 1e6),
        _ => None,
    };
    let overlap_ms = history::overlaps(&runs)
        .iter()
        .map(|(_, _, ns)| *ns as f64 / 1e6)
        .reduce(f64::max);
    let mut failure = history::check(&runs).err();
    if on_old_master && failure.is_none() {
        // Y, the new master, never saw that grant: any run on Y could take the lock while
        // A's command runs (here B waited only because Y also needs the demoted X).
        failure = Some("A locked on the old master after the promotion".into());
    }
    if b_out.code() != Some(0) && failure.is_none() {
        failure = Some("B did not exit 0 (a waiter rides out a failover)".into());
    }
    let failure = failure.map(|f| format!("{f}\nA: {a_out}\nB: {b_out}"));
    Attempt {
        hit,
        refused,
        named_x,
        a: a_out.code(),
        b: b_out.code(),
        overlap_ms,
        gap_ms,
        failure,
    }
}

/// Issue 18's reproduction (see the module notes). A run that asks the old master for the
/// lock after a replica was promoted must be refused (the promoted replica lacks the grant);
/// one locked there is a failure even when the next run happens not to overlap it. Prints
/// how many attempts hit the window: an attempt that missed it proves nothing, and at least
/// one must hit it.
#[test]
fn reproduction() {
    let attempts = env_count("REDLOCK_TEST_FAILOVER_ATTEMPTS", 3).max(1);
    let mut hits = 0;
    let mut failures = Vec::new();
    for n in 1..=attempts {
        let t = Instant::now();
        let at = reproduction_attempt();
        hits += u64::from(at.hit);
        say(&format!(
            "failover::reproduction attempt {n}/{attempts}: A on the old master after the \
             promotion: {}, sentinels still named it: {}, A exit {:?}, B exit {:?}, {} ({:.1} s)",
            match (at.hit, at.refused) {
                (true, true) => "refused (the promoted replica lacked the grant)",
                (true, false) => "LOCKED THERE",
                _ => "no",
            },
            if at.named_x { "yes" } else { "no" },
            at.a,
            at.b,
            match at.overlap_ms {
                Some(ms) => format!("TWO HOLDERS for {ms:.1} ms"),
                None => match at.gap_ms {
                    Some(ms) => format!("no overlap (B started {ms:.0} ms after A ended)"),
                    None => "no overlap".into(),
                },
            },
            t.elapsed().as_secs_f64()
        ));
        if let Some(f) = at.failure {
            failures.push(format!("attempt {n}: {f}"));
        }
    }
    say(&format!(
        "failover::reproduction: {hits} of {attempts} attempts hit the window, {} failed",
        failures.len()
    ));
    assert!(
        failures.is_empty(),
        "{} of {attempts} attempts failed ({hits} hit the window):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        hits > 0,
        "no attempt hit the window: the test proved nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// A holder while the master is killed or frozen
// ---------------------------------------------------------------------------------------------

/// How the master goes away while A holds.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Freeze,
}

/// A holds on X (`--min-replicas 1`, two replicas, `--ttl 4s`); X is killed or frozen past down-after;
/// B (`--wait`) starts once the sentinels name the new master. A goes on (with its lock on
/// the new master) or is stopped (74); B never runs beside it. A frozen X is thawed while
/// both still run, and must be demoted.
fn holder_through_an_automatic_failover(fault: Fault) {
    let mut set = SentinelSet::start(2);
    let dir = scratch();
    let x = set.nodes[0].port();
    // A 4 s lease outlasts the failover (about 2 s), so A can keep its lock.
    let locked = |set: &SentinelSet| {
        set.wrapper("job").args([
            "--ttl",
            "4s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
    };
    let mut a = locked(&set)
        .sh(&job("a", 600, ""))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("a.pid"), secs(15));
    match fault {
        Fault::Kill => set.nodes[0].kill(),
        Fault::Freeze => set.nodes[0].pause(),
    }
    let new = set.wait_for_failover(x);
    // B starts once the new master has its replicas back (a waiter in the gap before is
    // `waiters_through_a_failover`'s subject).
    for i in 1..set.nodes.len() {
        if set.nodes[i].port() != new {
            set.wait_replica_online(new, set.nodes[i].port());
        }
    }
    let b = locked(&set)
        .args(["--wait", "60s"])
        .sh(&job("b", 10, ""))
        .current_dir(dir.path())
        .spawn();
    // A runs on beside the waiting B for a while, or is stopped.
    poll_until(secs(4), || a.try_status().is_some());
    if fault == Fault::Freeze {
        set.nodes[0].resume();
        set.wait(secs(40), "the thawed old master to be demoted", || {
            role(&set.nodes[0]) == "slave"
        });
        poll_until(secs(2), || a.try_status().is_some());
    }
    // Where A's lock is just before it is told to end.
    let on_new = set.node(new).get(KEY);
    fs::write(dir.path().join("go-a"), "").unwrap();
    let a_out = a.wait(secs(30));
    let b_out = b.wait(secs(60));
    let context = format!("A: {a_out}\nB: {b_out}");
    assert!(
        matches!(a_out.code(), Some(0 | 74)),
        "A: 0 or 74\n{context}"
    );
    if a_out.code() == Some(0) {
        assert_eq!(
            on_new.as_deref(),
            Some(read_trimmed(&dir.path().join("a.token")).as_str()),
            "A went on, so its lock was on the new master\n{context}"
        );
    }
    say(&format!(
        "failover::holder_through_an_automatic_failover ({}): A exit {:?} {}",
        if fault == Fault::Kill {
            "kill -9"
        } else {
            "SIGSTOP"
        },
        a_out.code(),
        a_out.stderr.lines().last().unwrap_or("")
    ));
    b_out.expect_code(0);
    let runs = check_history(dir.path(), &context);
    assert_eq!(runs.len(), 2, "A and B ran\n{context}");
}

#[test]
fn kill_9_of_the_master_while_a_holds_makes_no_second_holder() {
    holder_through_an_automatic_failover(Fault::Kill);
}

#[test]
fn sigstop_of_the_master_while_a_holds_makes_no_second_holder() {
    holder_through_an_automatic_failover(Fault::Freeze);
}

// ---------------------------------------------------------------------------------------------
// Waiting through a failover
// ---------------------------------------------------------------------------------------------

/// A holds on X; waiters with `--wait 30s --min-replicas 1` start before the failover, right
/// after X was killed (or, in a manual failover, once the other replica follows the new
/// master) and once the sentinels name the new master; A lets go then. Every waiter
/// runs (exit 0, not 69), its lock on the master the sentinels name, one after the other.
fn waiters_through_a_failover(manual: bool) {
    let mut set = SentinelSet::start(2);
    let dir = scratch();
    let x = set.nodes[0].port();
    let mut a = locked(&set)
        .sh(&job("a", 600, ""))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("a.pid"), secs(15));
    let s0 = set.sentinels[0].port();
    let waiter = locked(&set).args(["--wait", "30s"]).current_dir(dir.path());
    let spawn = |name: &str| {
        let holder = format!(
            "{cli} -p $({cli} -p {s0} SENTINEL GET-MASTER-ADDR-BY-NAME {MASTER_NAME} | tail -1) \
             GET $REDLOCK_KEY > {name}.holder",
            cli = cli()
        );
        waiter.clone().sh(&job(name, 4, &holder)).spawn()
    };
    let mut waiters = vec![("w1", spawn("w1")), ("w2", spawn("w2"))];
    for (_, w) in &waiters {
        wait_for_waiting(w);
    }
    if manual {
        // W3 starts once Z follows Y, while the sentinels may still name X: X has no replica
        // left to acknowledge anything.
        set.manual_failover();
        let y = wait_promoted(&set);
        let (y_port, z) = (set.nodes[y].port().to_string(), &set.nodes[3 - y]);
        set.wait(secs(30), "Z to follow Y", || {
            // Not `z.cli`: the sentinels drop the promoted node's clients (CLIENT KILL), and
            // a reply lost that way is only a reason to ask again.
            cli_at(z.port(), None, &["ROLE"])
                .is_some_and(|r| r.lines().nth(2) == Some(y_port.as_str()))
        });
    } else {
        set.nodes[0].kill();
    }
    waiters.push(("w3", spawn("w3")));
    let new = set.wait_for_failover(x);
    waiters.push(("w4", spawn("w4")));
    fs::write(dir.path().join("go-a"), "").unwrap();
    let a_out = a.wait(secs(30));
    let mut report = format!("new master {new}\nA: {a_out}\n");
    let mut bad = Vec::new();
    for (name, w) in waiters {
        let out = w.wait(secs(60));
        let holder = fs::read_to_string(dir.path().join(format!("{name}.holder")));
        let token = fs::read_to_string(dir.path().join(format!("{name}.token")));
        let on_named = matches!((&holder, &token), (Ok(h), Ok(t)) if h.trim() == t.trim());
        if out.code() != Some(0) || !on_named {
            bad.push(format!(
                "{name}: exit {:?}, lock on the named master: {on_named}",
                out.code()
            ));
        }
        report.push_str(&format!("{name}: {out}\n"));
    }
    assert!(
        bad.is_empty(),
        "every waiter runs on the new master:\n{}\n{report}",
        bad.join("\n")
    );
    assert!(matches!(a_out.code(), Some(0 | 74)), "{report}");
    check_history(dir.path(), &report);
}

#[test]
fn waiters_ride_out_a_manual_failover() {
    waiters_through_a_failover(true);
}

#[test]
fn waiters_ride_out_a_killed_master() {
    waiters_through_a_failover(false);
}

/// Places in the queue that were left on the old master (a waiter killed there, a waiter
/// served there after the promotion) hold the new master back at most one place lifetime
/// (`--connect-timeout` + 1 s = 2 s here, against 6 s by default).
#[test]
fn stale_queue_places_hold_the_new_master_back_at_most_one_place_lifetime() {
    const PLACE_NS: u128 = 2_000_000_000;
    let set = SentinelSet::start(2);
    let dir = scratch();
    let x = set.nodes[0].port();
    let short = |w: Wrapper| w.args(["--connect-timeout", "1s"]).current_dir(dir.path());
    let mut a = short(locked(&set)).sh(&job("a", 600, "")).spawn();
    a.child_pid(&dir.path().join("a.pid"), secs(15));
    let waiter = short(locked(&set)).args(["--wait", "60s"]);
    let w1 = waiter.clone().sh(&job("w1", 2, "")).spawn();
    wait_for_waiting(&w1);
    let w2 = waiter.clone().sh(&job("w2", 2, "")).spawn();
    wait_for_waiting(&w2);
    // Both places reached the replicas.
    let queue = "{redlock:job}:queue";
    set.wait(secs(15), "both places on every replica", || {
        set.nodes[1..]
            .iter()
            .all(|n| n.cli_int(&["ZCARD", queue]) == 2)
    });

    set.manual_failover();
    let y = wait_promoted(&set);
    // In the window: W2 is killed (its place stays on Y), A lets go (on X, if it is still
    // there: W1 is then served on X, and its leaving the queue never reaches Y).
    w2.signal(Signal::SIGKILL);
    let left = now_ns();
    fs::write(dir.path().join("go-a"), "").unwrap();
    let new = set.wait_for_failover(x);
    assert_eq!(new, set.nodes[y].port());
    set.wait_replica_online(new, set.nodes[3 - y].port());
    let a_out = a.wait(secs(30));
    let w1_out = w1.wait(secs(60));
    let w2_out = w2.wait(secs(5));
    set.wait(secs(30), "the lock free on the new master", || {
        !set.node(new).exists(KEY)
    });
    let free = now_ns();
    let stale = set.node(new).cli(&["ZRANGE", queue, "0", "-1"]);
    let n = waiter.clone().sh(&job("n", 2, "")).spawn();
    let n_out = n.wait(secs(60));
    let report = format!(
        "queue on the new master when the lock was free: {stale:?}\nA: {a_out}\nW1: {w1_out}\n\
         W2 (killed): {w2_out}\nN: {n_out}"
    );
    n_out.expect_code(0);
    let n_token = read_trimmed(&dir.path().join("n.token"));
    let n_start: u128 = read_trimmed(&dir.path().join("runs").join(&n_token))
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("N's start");
    // The places left behind end by `left + PLACE`; a lock that is free later than that
    // should be taken at once. Margin: a lock-delay after the failover (one ttl, counted
    // from when the new master first sees it) and 1 s for polling and starting.
    let bound = free.max(left + PLACE_NS) + (TTL_MS + 1000) * 1_000_000;
    let waited_ms = (n_start.saturating_sub(free)) as f64 / 1e6;
    say(&format!(
        "failover::stale_queue_places: N ran {waited_ms:.0} ms after the lock was free on the \
         new master ({:.0} ms after the places were left; bound {:.0} ms after that)",
        (n_start.saturating_sub(left)) as f64 / 1e6,
        (bound - left) as f64 / 1e6
    ));
    assert!(
        n_start <= bound,
        "N waited {waited_ms:.0} ms for a free lock (started {:.0} ms after the places were \
         left, bound {:.0} ms)\n{report}",
        (n_start.saturating_sub(left)) as f64 / 1e6,
        (bound - left) as f64 / 1e6
    );
    check_history(dir.path(), &report);
}

// ---------------------------------------------------------------------------------------------
// Chaos
// ---------------------------------------------------------------------------------------------

/// Exit codes of the chaos loops' runs, by code.
type Tally = Mutex<BTreeMap<i32, u64>>;

/// `loops` wrapper loops on `--key chaos` of `url` until `stop`, each run a short recorded
/// job in `dir` (`--wait 10s` and [`LOCKED`]).
fn contend(url: &str, dir: &Path, loops: usize, stop: &AtomicBool, tally: &Tally) {
    thread::scope(|s| {
        for l in 0..loops {
            s.spawn(move || {
                let mut i: u32 = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let beats = 2 + (i * 7 + l as u32 * 3) % 7;
                    let out = Wrapper::new()
                        .args(["--redis", url, "--key", "chaos"])
                        .args(LOCKED)
                        .args(["--wait", "10s"])
                        .args(["--connect-timeout", "2s"])
                        .sh(&job("", beats, ""))
                        .current_dir(dir)
                        .spawn()
                        .wait(secs(60));
                    let code = out.code().unwrap_or(-1);
                    *tally.lock().unwrap().entry(code).or_default() += 1;
                    if code == 70 {
                        panic!("internal error\n{out}");
                    }
                    if !matches!(code, 0 | 74) {
                        // Do not spin on a refusing server.
                        thread::sleep(ms(100));
                    }
                }
            });
        }
    });
}

/// Faults on a Sentinel set until `until`: a manual failover, kill -9 of the master (then
/// restarted), SIGSTOP of the master past down-after (then SIGCONT), in turn, each waited out
/// until the set is whole again. Returns how many of each.
fn sentinel_faults(set: &mut SentinelSet, until: Instant) -> [u32; 3] {
    let mut done = [0; 3];
    let mut k = 0;
    while Instant::now() + secs(8) < until {
        thread::sleep(ms(1500));
        let old = set.master_port();
        let i = set.index(old);
        match k % 3 {
            0 => {
                set.manual_failover();
                set.wait_for_failover(old);
            }
            1 => {
                set.nodes[i].kill();
                set.wait_for_failover(old);
                set.nodes[i].restart();
            }
            _ => {
                set.nodes[i].pause();
                set.wait_for_failover(old);
                thread::sleep(ms(500));
                set.nodes[i].resume();
            }
        }
        done[k % 3] += 1;
        k += 1;
        // Whole again: the old master a replica of the new one, both replicas online.
        let new = set.master_port();
        set.wait(secs(60), "the old master demoted", || {
            role(&set.nodes[i]) == "slave"
        });
        for r in 0..set.nodes.len() {
            if set.nodes[r].port() != new {
                set.wait_replica_online(new, set.nodes[r].port());
            }
        }
    }
    done
}

/// Faults on the lock's master in a cluster until `until`: `CLUSTER FAILOVER` on its
/// replica, kill -9 of it (its replica takes over; it is restarted as a replica), in turn.
fn cluster_faults(cluster: &mut Cluster, until: Instant) -> [u32; 2] {
    let mut done = [0; 2];
    let mut k = 0;
    while Instant::now() + secs(8) < until {
        thread::sleep(ms(1500));
        let m = cluster.owner_of("redlock:chaos");
        let r = cluster
            .replica_of(m)
            .unwrap_or_else(|| panic!("master {m} has no live replica"));
        if k % 2 == 0 {
            assert_eq!(cluster.nodes[r].cli(&["CLUSTER", "FAILOVER"]), "OK");
            wait_until(secs(30), "the replica to take over", || {
                role(&cluster.nodes[r]) == "master"
            });
            cluster.wait_ready("the cluster to agree after CLUSTER FAILOVER");
        } else {
            cluster.kill_and_fail_over(m);
            cluster.restart_node(m);
        }
        done[k % 2] += 1;
        k += 1;
    }
    done
}

/// One topology's chaos run: loops and faults for `length`, then the history check.
fn chaos_run(name: &str, url: &str, length: Duration, faults: impl FnOnce(Instant) -> String) {
    let dir = scratch();
    let stop = AtomicBool::new(false);
    let tally = Tally::default();
    let until = Instant::now() + length;
    let faults_done = thread::scope(|s| {
        let loops = s.spawn(|| contend(url, dir.path(), 4, &stop, &tally));
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| faults(until)));
        while done.is_ok() && Instant::now() < until {
            thread::sleep(ms(200));
        }
        stop.store(true, Ordering::Relaxed);
        let looped = loops.join();
        match (done, looped) {
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
            (Ok(d), Ok(())) => d,
        }
    });
    let runs = history::read(dir.path());
    let tally = tally.into_inner().unwrap();
    say(&format!(
        "failover::chaos {name}: {} commands ran ({faults_done}); wrapper exits {tally:?}",
        runs.len()
    ));
    if let Err(e) = history::check(&runs) {
        panic!("chaos over {name}: {e}\nwrapper exits {tally:?}");
    }
    assert!(
        runs.len() >= 10,
        "too few commands ran over {name}: {tally:?}"
    );
}

/// slow: run in CI with --ignored
///
/// Continuous contention (four wrapper loops, `--min-replicas 1 --ttl 2s --wait 10s`) on one
/// key over Sentinel (manual failovers, kill -9 and restart, SIGSTOP/SIGCONT of the master)
/// and over Cluster (`CLUSTER FAILOVER`, kill -9 of the lock's master and restart), each for
/// `REDLOCK_TEST_CHAOS_SECS` (default 75). Every command appends `start end fence` to the
/// key's history (and beats, for one killed before it could); no two may overlap, and the
/// fences grow in start order.
#[test]
#[ignore]
fn chaos_sentinel_and_cluster_history() {
    let length = env_secs("REDLOCK_TEST_CHAOS_SECS", 75);

    let mut set = SentinelSet::start(2);
    let url = set.url();
    chaos_run("Sentinel", &url, length, |until| {
        let [manual, killed, frozen] = sentinel_faults(&mut set, until);
        format!("{manual} manual failovers, {killed} kills, {frozen} freezes")
    });
    drop(set);

    let mut cluster = Cluster::start(3, 1);
    let url = cluster.url();
    chaos_run("Cluster", &url, length, |until| {
        let [manual, killed] = cluster_faults(&mut cluster, until);
        format!("{manual} CLUSTER FAILOVERs, {killed} kills")
    });
}
