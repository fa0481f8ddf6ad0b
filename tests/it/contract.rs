//! The contract every topology keeps, run against each fixture: one server, Sentinel (a
//! master, a replica, three sentinels), Cluster (three masters) and Redlock (three masters).
//!
//! One function per behaviour takes a [`Fixture`]; `contract!` makes one `#[test]` per
//! behaviour and topology (`contract::busy::cluster`, ...), each with a fixture of its own.
//! Behaviours: a run takes the lock and releases it (exit = the command's, `--hold-at-least`
//! keeps it); busy (75, the holder named, nothing touched); renewals keep a lock held past its
//! ttl; a lost lock (the key replaced or deleted) stops the command with 74; a release never
//! deletes another holder's value; `status --json` while held and when free; a waiter woken
//! by the release announcement at once; waiters served in arrival order (Redlock keeps no
//! queue: said SKIPPED, and only "after the holder" is checked); fences that grow.
//!
//! What only one topology has (failovers, migrations, redirects, partial quorums, TLS,
//! passwords, URL forms) stays in its own module.

use std::path::Path;
use std::thread;
use std::time::Instant;

use serde_json::Value;

use crate::common::cluster::Cluster;
use crate::common::quorum::Nodes;
use crate::common::sentinel::SentinelSet;
use crate::common::*;

/// A child that says it started (its pid in `started`) and runs until the file `go` exists
/// (at most 60 s).
const UNTIL_GO: &str = "echo $$ > started; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do \
                        sleep 0.05; i=$((i+1)); done";

/// The servers a lock is taken on, and how to reach them.
pub enum Fixture {
    Single(RedisServer),
    Sentinel(SentinelSet),
    Cluster(Cluster),
    Quorum(Nodes),
}

impl Fixture {
    pub fn single() -> Self {
        Fixture::Single(RedisServer::start())
    }

    /// A master, one replica and three sentinels.
    pub fn sentinel() -> Self {
        Fixture::Sentinel(SentinelSet::start(1))
    }

    /// Three masters, no replicas.
    pub fn cluster() -> Self {
        Fixture::Cluster(Cluster::start(3, 0))
    }

    /// Three Redlock masters.
    pub fn quorum() -> Self {
        Fixture::Quorum(Nodes::start(3))
    }

    /// The `--redis` arguments that name this fixture.
    pub fn redis_args(&self) -> Vec<String> {
        let one = |url: String| vec!["--redis".to_owned(), url];
        match self {
            Fixture::Single(s) => one(s.url()),
            Fixture::Sentinel(s) => one(s.url()),
            Fixture::Cluster(c) => one(c.url()),
            Fixture::Quorum(n) => n.redis_args(),
        }
    }

    /// A run of lock `name` (the key is `redlock:NAME`).
    pub fn wrapper(&self, name: &str) -> Wrapper {
        Wrapper::new().args(self.redis_args()).args(["--key", name])
    }

    /// `status --json` of lock `name`, parsed.
    pub fn status(&self, name: &str) -> Value {
        let out = self.status_run(name, true);
        out.expect_code(0);
        serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("status --json is not JSON ({e})\n{out}"))
    }

    /// `status` (text, or `--json`) of lock `name`.
    pub fn status_run(&self, name: &str, json: bool) -> Outcome {
        let mut w = Wrapper::new()
            .arg("status")
            .args(self.redis_args())
            .args(["--key", name]);
        if json {
            w = w.arg("--json");
        }
        w.run()
    }

    /// The servers `key` lives on: the server, the master the sentinels name, the master of
    /// the key's slot, every Redlock node.
    pub fn holders(&self, key: &str) -> Vec<&RedisServer> {
        match self {
            Fixture::Single(s) => vec![s],
            Fixture::Sentinel(s) => vec![s.node(s.master_port())],
            Fixture::Cluster(c) => vec![&c.nodes[c.owner_of(key)]],
            Fixture::Quorum(n) => n.servers.iter().collect(),
        }
    }

    /// The value of `key` on each of its servers.
    pub fn values(&self, key: &str) -> Vec<Option<String>> {
        self.holders(key).iter().map(|s| s.get(key)).collect()
    }

    /// `SET key value [PX ms]` on each of its servers.
    pub fn set(&self, key: &str, value: &str, px: Option<u64>) {
        for s in self.holders(key) {
            let px = px.map(|ms| ms.to_string());
            let mut cmd = vec!["SET", key, value];
            if let Some(px) = &px {
                cmd.extend(["PX", px.as_str()]);
            }
            assert_eq!(s.cli(&cmd), "OK");
        }
    }

    /// `DEL key` on each of its servers.
    pub fn del(&self, key: &str) {
        for s in self.holders(key) {
            s.cli(&["DEL", key]);
        }
    }

    /// Whether waiters queue (and so are served in arrival order): not with Redlock.
    pub fn keeps_a_queue(&self) -> bool {
        !matches!(self, Fixture::Quorum(_))
    }

    /// One server of the fixture, for `skip` messages.
    pub fn any_server(&self) -> &RedisServer {
        match self {
            Fixture::Single(s) => s,
            Fixture::Sentinel(s) => &s.nodes[0],
            Fixture::Cluster(c) => &c.nodes[0],
            Fixture::Quorum(n) => &n.servers[0],
        }
    }

    /// A holder of lock `name` whose command runs `before` and then [`UNTIL_GO`] in `dir`,
    /// once its command has started.
    fn hold(&self, dir: &Path, name: &str, args: &[&str], before: &str) -> Running {
        let mut run = self
            .wrapper(name)
            .args(args)
            .sh(&format!("{before} {UNTIL_GO}"))
            .current_dir(dir)
            .spawn();
        run.child_pid(&dir.join("started"), secs(15));
        run
    }
}

fn go(dir: &Path) {
    std::fs::write(dir.join("go"), "").unwrap();
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

// ---------------------------------------------------------------------------------------------
// Behaviours
// ---------------------------------------------------------------------------------------------

/// The lock is taken with the run's token on every server it lives on, the wrapper exits
/// with the command's code and the key is gone afterwards; `--hold-at-least` keeps it.
fn runs_and_releases(fx: &Fixture) {
    let dir = scratch();
    let key = "redlock:run";
    let mut a = fx
        .wrapper("run")
        .sh(&format!(
            "echo $REDLOCK_TOKEN > token; touch ran; {UNTIL_GO}; exit 3"
        ))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let token = read_trimmed(&dir.path().join("token"));
    for (i, value) in fx.values(key).into_iter().enumerate() {
        assert_eq!(
            value.as_deref(),
            Some(token.as_str()),
            "the run's token on server {i}\n{}",
            a.describe()
        );
    }
    go(dir.path());
    let out = a.wait(secs(20));
    out.expect_code(3);
    assert!(
        fx.values(key).iter().all(Option::is_none),
        "released\n{out}"
    );

    let out = fx
        .wrapper("run")
        .args(["--hold-at-least", "30s", "--", "true"])
        .run();
    out.expect_code(0);
    for s in fx.holders(key) {
        let pttl = s.pttl(key);
        assert!(
            pttl > 20_000,
            "--hold-at-least keeps {key} (pttl {pttl})\n{out}"
        );
    }
    // The command has finished: `status` and a busy run say so, and until when the lock is
    // kept, instead of naming the exited pid as if it still ran.
    let json = fx.status("run");
    assert_eq!(json["held"], true, "{json}");
    let finished = json["finished_ms"].as_u64().expect("finished_ms");
    let until = json["kept_until_ms"].as_u64().expect("kept_until_ms");
    assert!(
        until > finished && until - finished <= 30_000,
        "kept until {until}, finished {finished}: {json}"
    );
    let text = fx.status_run("run", false);
    let busy = fx.wrapper("run").args(["--", "true"]).run();
    busy.expect_code(75);
    for (what, line) in [
        ("status", text.stdout.as_str()),
        ("busy", busy.stderr.as_str()),
    ] {
        for needle in [" finished at ", ", kept until ", " by --hold-at-least"] {
            assert!(line.contains(needle), "{what} misses {needle:?}: {line}");
        }
    }
}

/// A run without `--wait` meets the held lock: exit 75 with one line naming the lock and the
/// holder, its command never runs, and the holder's value and ttl stay as they were.
fn busy(fx: &Fixture) {
    let dir = scratch();
    let key = "redlock:busy";
    let a = fx.hold(dir.path(), "busy", &[], "");
    let before = fx.values(key);
    let out = fx
        .wrapper("busy")
        .sh("touch b-ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(75);
    let line = out.expect_one_line();
    assert!(
        line.contains("busy") && line.contains(key) && line.contains(&format!("pid {}", a.pid)),
        "names the lock and the holder\n{out}"
    );
    assert!(!dir.path().join("b-ran").exists(), "the command ran\n{out}");
    assert_eq!(fx.values(key), before, "the holder's value changed\n{out}");
    for s in fx.holders(key) {
        assert!(s.pttl(key) > 20_000, "the holder's ttl left alone\n{out}");
    }
    go(dir.path());
    a.wait(secs(20)).expect_code(0);
}

/// With `--ttl 1s`, a 3 s command keeps the lock the whole time (sampled every 50 ms on every
/// server it lives on), and it is released after.
fn renewals_keep_the_lock(fx: &Fixture) {
    let dir = scratch();
    let key = "redlock:renew";
    let mut a = fx.hold(dir.path(), "renew", &["--ttl", "1s"], "");
    let t0 = Instant::now();
    while t0.elapsed() < ms(3000) {
        for (i, s) in fx.holders(key).iter().enumerate() {
            let pttl = s.pttl(key);
            assert!(
                pttl > 0,
                "PTTL {pttl} on server {i} after {:?} with --ttl 1s\n{}",
                t0.elapsed(),
                a.describe()
            );
        }
        assert!(a.is_running(), "{}", a.describe());
        thread::sleep(ms(50));
    }
    go(dir.path());
    let out = a.wait(secs(20));
    out.expect_code(0);
    assert!(!out.stderr.contains("renewal failed"), "{out}");
    assert!(
        fx.values(key).iter().all(Option::is_none),
        "released\n{out}"
    );
}

/// The key replaced (with no ttl) or deleted under the holder: the next renewal finds it
/// gone, the command gets SIGTERM and the wrapper exits 74, reporting it; a replacing value
/// is left alone, ttl and all.
fn a_lost_lock_stops_the_command(fx: &Fixture) {
    let key = "redlock:lost";
    for replaced in [true, false] {
        let dir = scratch();
        let mut a = fx
            .wrapper("lost")
            .args(["--ttl", "1s"])
            .sh(
                "trap 'echo TERM > caught; kill $! 2>/dev/null; exit 0' TERM; \
                 echo $$ > started; sleep 30 & wait",
            )
            .current_dir(dir.path())
            .spawn();
        let pid = a.child_pid(&dir.path().join("started"), secs(15));
        if replaced {
            fx.set(key, "intruder", None);
        } else {
            fx.del(key);
        }
        let out = a.wait(secs(15));
        out.expect_code(74);
        out.expect_all_lines_prefixed();
        assert!(!out.stderr_lines().is_empty(), "lost lock reported\n{out}");
        assert!(
            dir.path().join("caught").exists(),
            "the command got SIGTERM\n{out}"
        );
        assert!(!pid_alive(pid), "the command is gone\n{out}");
        if replaced {
            for s in fx.holders(key) {
                assert_eq!(s.get(key).as_deref(), Some("intruder"), "left alone\n{out}");
                assert_eq!(s.pttl(key), -1, "the intruder's key got a ttl\n{out}");
            }
            fx.del(key);
        } else {
            assert!(
                fx.values(key).iter().all(Option::is_none),
                "written again\n{out}"
            );
        }
    }
}

/// The lock expired and a successor took it while the command ran (between two renewals of a
/// 30 s ttl): the release leaves the successor's value alone and says so (exit 74).
fn release_spares_another_holder(fx: &Fixture) {
    let dir = scratch();
    let key = "redlock:rel";
    let a = fx.hold(dir.path(), "rel", &["--ttl", "30s"], "");
    fx.set(key, "successor", Some(60_000));
    go(dir.path());
    let out = a.wait(secs(20));
    out.expect_code(74);
    out.expect_stderr_contains("held by someone else at release");
    for s in fx.holders(key) {
        assert_eq!(s.get(key).as_deref(), Some("successor"), "{out}");
        assert!(
            s.pttl(key) > 30_000,
            "the successor's ttl left alone\n{out}"
        );
    }
}

/// `status --json` (parsed): nothing but the key when free; while held, who holds it, its
/// ttl and fence (and, with Redlock, every node holding it); free again after the release.
/// The text form names the holder.
fn status_while_held_and_free(fx: &Fixture) {
    let dir = scratch();
    let free = fx.status("st");
    assert_eq!(free["held"], false, "{free}");
    assert_eq!(free["key"], "redlock:st", "{free}");
    for field in ["host", "pid", "ttl_ms", "fence"] {
        assert!(free[field].is_null(), "{field} when free: {free}");
    }

    let a = fx.hold(
        dir.path(),
        "st",
        &["--ttl", "20s"],
        "echo $REDLOCK_FENCE > fence;",
    );
    let fence: u64 = read_trimmed(&dir.path().join("fence")).parse().unwrap();
    let held = fx.status("st");
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["foreign"], false, "{held}");
    assert_eq!(held["host"], hostname().as_str(), "{held}");
    assert_eq!(held["pid"], a.pid, "{held}");
    assert_eq!(held["fence"], fence, "{held}");
    let ttl = held["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl > 0 && ttl <= 20_000, "ttl_ms {ttl}: {held}");
    if let Fixture::Quorum(n) = fx {
        let nodes = held["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), n.servers.len(), "{held}");
        for (node, server) in nodes.iter().zip(&n.servers) {
            assert_eq!(node["redis"], server.url().as_str(), "{held}");
            assert_eq!(node["held"], true, "{held}");
        }
    }
    let text = fx.status_run("st", false);
    text.expect_code(0);
    assert!(
        text.stdout
            .contains(&format!("held by {} pid {}", hostname(), a.pid)),
        "{text}"
    );

    go(dir.path());
    a.wait(secs(20)).expect_code(0);
    let after = fx.status("st");
    assert_eq!(after["held"], false, "{after}");
}

/// A waiter subscribed to the release channel acts on the announcement at once rather than
/// at its next poll (by then 125 to 250 ms apart). Both moments are read on the server's
/// clock (the release's TIME, the new holder's `acquired_ms`), so the command's start does
/// not count. With Redlock the announcement comes from each node in turn: from the last.
fn a_waiter_is_woken_by_the_release(fx: &Fixture) {
    let dir = scratch();
    let key = "redlock:wake";
    let channel = "{redlock:wake}:released";
    fx.set(key, "someone", Some(60_000));
    let mut w = fx
        .wrapper("wake")
        .args(["--wait", "30s"])
        .sh(&format!(
            "echo $REDLOCK_FENCE > fence.tmp; mv fence.tmp fence; {UNTIL_GO}"
        ))
        .current_dir(dir.path())
        .spawn();
    w.wait_until(secs(15), "the waiter subscribed everywhere", || {
        fx.holders(key)
            .iter()
            .all(|s| s.cli(&["PUBSUB", "NUMSUB", channel]).ends_with('1'))
    });
    thread::sleep(secs(2));
    let mut released_ms = 0;
    for s in fx.holders(key) {
        let time = s.cli(&[
            "EVAL",
            "redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], '1') \
             local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)",
            "2",
            key,
            channel,
        ]);
        released_ms = time.trim().parse().expect("TIME in ms");
    }
    w.wait_for_file(&dir.path().join("fence"), secs(10));
    let acquired_ms: u64 = fx.holders(key)[0]
        .cli(&["HGET", "{redlock:wake}:holder", "acquired_ms"])
        .parse()
        .expect("acquired_ms of the waiter");
    go(dir.path());
    w.wait(secs(10)).expect_code(0);
    let delay = ms(acquired_ms.saturating_sub(released_ms));
    assert!(
        delay < ms(100),
        "waiter acquired {delay:?} after the release"
    );
}

/// Waiters that queued one after the other are served in that order, each only after the
/// holder's command ended, and the queue is empty after. Redlock keeps no queue (README,
/// docs/reference.md): there one waiter is served after the holder.
fn waiters_served_in_arrival_order(fx: &Fixture) {
    let dir = scratch();
    // The holder's command writes its line last thing before it ends.
    let mut a = fx
        .wrapper("q")
        .sh(&format!("{UNTIL_GO}; echo holder >> order"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let waiter = |name: &str| {
        fx.wrapper("q")
            .args(["--wait", "60s"])
            .sh(&format!("echo {name} >> order"))
            .current_dir(dir.path())
            .spawn()
    };
    let names: Vec<&str> = if fx.keeps_a_queue() {
        vec!["w1", "w2", "w3"]
    } else {
        skip(
            fx.any_server(),
            "Redlock keeps no queue: waiters are not served in arrival order \
             (docs/reference.md); checked: one waiter served after the holder",
        );
        vec!["w1"]
    };
    let mut waiters = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut w = waiter(name);
        if fx.keeps_a_queue() {
            // The next one arrives only once this one is in the queue.
            w.wait_until(secs(20), &format!("{name} queued"), || {
                fx.status("q")["queued"] == i + 1
            });
        } else if !poll_until(secs(20), || w.stderr_so_far().contains("waiting")) {
            panic!("{name} not waiting after 20s\n{}", w.describe());
        }
        waiters.push(w);
    }
    go(dir.path());
    a.wait(secs(20)).expect_code(0);
    for w in waiters {
        w.wait(secs(60)).expect_code(0);
    }
    let order = read_trimmed(&dir.path().join("order"));
    let mut expected = vec!["holder"];
    expected.extend(&names);
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        expected,
        "not served in arrival order, after the holder"
    );
    if fx.keeps_a_queue() {
        assert_eq!(fx.status("q")["queued"], 0, "the queue is not empty");
    }
}

/// Runs one after the other get strictly growing fences (`REDLOCK_FENCE`).
fn fences_grow(fx: &Fixture) {
    let fences: Vec<u64> = (0..3)
        .map(|_| {
            let out = fx.wrapper("f").args(["-c", "echo $REDLOCK_FENCE"]).run();
            out.expect_code(0);
            out.stdout
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("REDLOCK_FENCE not an integer\n{out}"))
        })
        .collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing: {fences:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// One test per behaviour and topology
// ---------------------------------------------------------------------------------------------

/// `contract!(behaviour, ...)`: a module per behaviour with a test per topology, each with a
/// fixture of its own.
macro_rules! contract {
    ($($behaviour:ident),* $(,)?) => {$(
        mod $behaviour {
            use super::Fixture;

            #[test]
            fn single() {
                super::$behaviour(&Fixture::single());
            }

            #[test]
            fn sentinel() {
                super::$behaviour(&Fixture::sentinel());
            }

            #[test]
            fn cluster() {
                super::$behaviour(&Fixture::cluster());
            }

            #[test]
            fn quorum() {
                super::$behaviour(&Fixture::quorum());
            }
        }
    )*};
}

contract!(
    runs_and_releases,
    busy,
    renewals_keep_the_lock,
    a_lost_lock_stops_the_command,
    release_spares_another_holder,
    status_while_held_and_free,
    a_waiter_is_woken_by_the_release,
    waiters_served_in_arrival_order,
    fences_grow,
);
