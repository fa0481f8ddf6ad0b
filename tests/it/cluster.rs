//! `redis+cluster://` (runs, busy, status, renewals, a lost lock, waiters and fences on one
//! slot are in `contract`): locks on every master, each on its slot's owner, with `status` and
//! fences there; `--min-replicas` on the key's master; the slot
//! migrated mid-run (ASK, then MOVED); the key's master killed and its replica promoted
//! mid-run; an unrelated master frozen with an empty script cache; usage errors; secrets;
//! `--limit 2`; `rediss+cluster://`; runs that start, hold, release and wait while the
//! lock's own slot is stopped mid-migration (no key moved, every key moved, only the lock key
//! moved; waiters queued before it or arriving during it), with and without `--limit`.

use std::fs;
use std::thread;

use crate::common::cluster::Cluster;
use crate::common::*;

/// A child that says it started (its pid in `started`) and runs until the file `go` exists.
const UNTIL_GO: &str = "echo $$ > started; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do \
                        sleep 0.05; i=$((i+1)); done";

/// Lock names (without the `redlock:` prefix) whose keys the cluster spreads over every
/// master, one per master.
fn one_name_per_master(cluster: &Cluster, masters: usize) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0..1000 {
        let name = format!("job{i}");
        let owner = cluster.owner_of(&format!("redlock:{name}"));
        if !found.iter().any(|(_, o)| *o == owner) {
            found.push((name, owner));
        }
        if found.len() == masters {
            return found;
        }
    }
    panic!("no names spread over {masters} masters: {found:?}");
}

/// Several locks, each held with `--hold-at-least` so that its keys stay behind: every key
/// of a lock lands on the master of its slot, `status` reads it there, and its fence grows.
#[test]
fn locks_on_every_master_land_on_their_slot_owner() {
    let cluster = Cluster::start(3, 0);
    for (name, owner) in one_name_per_master(&cluster, 3) {
        let key = format!("redlock:{name}");
        let first = cluster.wrapper(&name).sh("echo $REDLOCK_FENCE").run();
        first.expect_code(0);
        let out = cluster
            .wrapper(&name)
            .args(["--hold-at-least", "30s"])
            .sh("echo $REDLOCK_FENCE")
            .run();
        out.expect_code(0);
        let fences: Vec<u64> = [&first, &out]
            .iter()
            .map(|o| o.stdout.trim().parse().expect("REDLOCK_FENCE"))
            .collect();
        assert!(fences[0] < fences[1], "fences must grow: {fences:?}");
        let node = &cluster.nodes[owner];
        assert!(
            node.exists(&key),
            "{key} not on its slot's master {owner}\n{out}"
        );
        assert!(
            node.pttl(&key) > 20_000,
            "--hold-at-least keeps {key}\n{out}"
        );
        assert_eq!(node.cli_int(&["EXISTS", &format!("{{{key}}}:fence")]), 1);
        let status = Wrapper::new()
            .args([
                "status",
                "--redis",
                &cluster.url(),
                "--key",
                &name,
                "--json",
            ])
            .run();
        status.expect_code(0);
        let json = parse_json(&status.stdout);
        assert_eq!(json["held"], true, "{status}");
        assert_eq!(json["fence"], fences[1], "{status}");
        // Another run meets the held lock.
        cluster.wrapper(&name).sh("true").run().expect_code(75);
    }
}

/// `--min-replicas` counts the replicas of the key's master: one is there, two are not.
#[test]
fn min_replicas_counts_the_replicas_of_the_keys_master() {
    let cluster = Cluster::start(3, 1);
    cluster
        .wrapper("r")
        .args([
            "--min-replicas",
            "1",
            "--replica-timeout",
            "1s",
            "--",
            "true",
        ])
        .run()
        .expect_code(0);
    let out = cluster
        .wrapper("r")
        .args(["--min-replicas", "2", "--replica-timeout", "300ms"])
        .args(["--", "true"])
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("only 1 of 2 replicas acknowledged");
    let owner = &cluster.nodes[cluster.owner_of("redlock:r")];
    assert!(!owner.exists("redlock:r"), "taken back\n{out}");
}

/// The lock's slot moves to another master while the command runs. While its keys are
/// on the new master but the slot is still migrating, the old one answers ASK; once the
/// migration is done, MOVED. Renewals follow both (with a 1 s ttl, a renewal that did not
/// would end the run within a second), and the release reaches the new master.
#[test]
fn the_locks_slot_migrates_while_the_command_runs() {
    let cluster = Cluster::start(3, 0);
    let dir = scratch();
    let key = "redlock:moving";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let mut run = cluster
        .wrapper("moving")
        .args(["--ttl", "1s", "-v"])
        .sh(UNTIL_GO)
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));

    cluster.begin_migration(slot, from, to);
    thread::sleep(ms(1200));
    assert!(
        run.is_running(),
        "renewals while migrating\n{}",
        run.describe()
    );
    cluster.move_keys(slot, from, to);
    assert!(cluster.nodes[to].cli_int(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]) >= 2);
    // Renewals now get ASK from the old master and go to the new one.
    thread::sleep(ms(2000));
    assert!(run.is_running(), "renewals after ASK\n{}", run.describe());
    cluster.finish_migration(slot, to);
    assert_eq!(cluster.owner_of(key), to);
    // And now MOVED.
    thread::sleep(ms(2000));
    assert!(run.is_running(), "renewals after MOVED\n{}", run.describe());
    let ttl = cluster.nodes[to].pttl(key);
    assert!(ttl > 0, "the lock lives on the new master (pttl {ttl})");

    fs::write(dir.path().join("go"), "").unwrap();
    let out = run.wait(secs(20));
    out.expect_code(0);
    assert!(!out.stderr.contains("renewal failed"), "{out}");
    assert!(
        !cluster.nodes[to].exists(key),
        "released on the new master\n{out}"
    );
}

/// The key's master dies mid-run and its replica takes over (about 2 s with a 1 s node
/// timeout). The lock was on the replica, so renewals find the new master and the command
/// carries on; a second wrapper waiting for the lock runs only after the first has ended.
#[test]
fn the_keys_master_fails_over_while_the_command_runs() {
    let mut cluster = Cluster::start(3, 1);
    let dir = scratch();
    let key = "redlock:failover";
    let master = cluster.owner_of(key);
    let mut a = cluster
        .wrapper("failover")
        .args(["--ttl", "6s", "-v"])
        .sh(&format!("{UNTIL_GO}; touch a-ended"))
        .current_dir(dir.path())
        .spawn();
    let a_child = a.child_pid(&dir.path().join("started"), secs(10));
    // The lock, its fence and holder keys are on the replica before the master dies: a
    // failover with asynchronous replication can lose a write made just before it.
    let replica = cluster
        .nodes
        .iter()
        .enumerate()
        .skip(3)
        .find(|(i, _)| i % 3 == master)
        .map(|(i, _)| i)
        .unwrap();
    wait_until(secs(10), "the lock on the replica", || {
        cluster.nodes[replica].dbsize() == cluster.nodes[master].dbsize()
    });
    let promoted = cluster.kill_and_fail_over(master);
    assert_eq!(cluster.owner_of(key), promoted);

    let b = cluster
        .wrapper("failover")
        .args(["--wait", "60s"])
        .sh(&format!(
            "if kill -0 {a_child} 2>/dev/null; then touch overlap; fi; touch b-ran"
        ))
        .current_dir(dir.path())
        .spawn();
    thread::sleep(secs(3));
    assert!(
        a.is_running(),
        "A carries on after the failover\n{}",
        a.describe()
    );
    assert!(!dir.path().join("b-ran").exists(), "B must wait for A");
    fs::write(dir.path().join("go"), "").unwrap();
    let a_out = a.wait(secs(30));
    a_out.expect_code(0);
    let b_out = b.wait(secs(30));
    b_out.expect_code(0);
    assert!(
        !dir.path().join("overlap").exists(),
        "B ran while A's command ran\n{a_out}\n{b_out}"
    );
}

/// A master that has nothing to do with the lock is frozen (SIGSTOP), and the script cache
/// of the key's master is empty: NOSCRIPT is answered with EVAL to the key's master alone,
/// so the run neither waits for the frozen node nor fails. A SCRIPT LOAD sent to every
/// master would wait for the frozen one until the bound.
#[test]
fn a_frozen_unrelated_master_does_not_stall_a_run() {
    // Without full coverage the other masters keep serving when the frozen one is
    // declared failed (after 2 node timeouts), as a real cluster would for its other slots
    // while a replica takes over.
    let cluster = Cluster::start_with(3, 0, &["--cluster-require-full-coverage", "no"]);
    let dir = scratch();
    let key = "redlock:frozen";
    let owner = cluster.owner_of(key);
    let frozen = cluster.other_master(owner);
    for m in 0..3 {
        cluster.nodes[m].cli(&["SCRIPT", "FLUSH"]);
    }
    cluster.nodes[frozen].pause();
    let out = cluster
        .wrapper("frozen")
        .args(["--connect-timeout", "3s", "--ttl", "1s"])
        .sh(&format!(
            "redis-cli -p {} SCRIPT FLUSH > /dev/null; sleep 2; echo ran > ran",
            cluster.nodes[owner].port()
        ))
        .current_dir(dir.path())
        .run();
    cluster.nodes[frozen].resume();
    out.expect_code(0);
    assert!(dir.path().join("ran").exists(), "{out}");
    assert!(!cluster.nodes[owner].exists(key), "released\n{out}");
}

/// Bad cluster URLs are one-line usage errors (exit 2) that never show the password; a
/// server that is not in cluster mode is exit 69, saying so.
#[test]
fn cluster_usage_errors_and_secrets() {
    for (url, says) in [
        ("redis+cluster://", "no nodes"),
        ("REDIS+CLUSTER://:Zq9Xw7Jm@", "no nodes"),
        ("redis+cluster:///tmp/redis.sock", "unix sockets"),
        (
            "redis+cluster://:Zq9Xw7Jm@127.0.0.1:1,,127.0.0.1:2",
            "empty node",
        ),
        (
            "redis+cluster://:Zq9Xw7Jm@127.0.0.1:99999",
            "node 127.0.0.1:99999",
        ),
        (
            "redis+cluster://u:Zq9Xw7Jm@127.0.0.1:7000/2",
            "only database 0",
        ),
        (
            "rediss+cluster://:Zq9Xw7Jm@127.0.0.1:7000#insecure",
            "#insecure",
        ),
    ] {
        let out = Wrapper::new()
            .args(["--redis", url, "--key", "k", "--", "true"])
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(says), "{url}: {line}");
        assert!(!out.stderr.contains("Xw7"), "password shown\n{out}");
    }
    // --tls-* with a cluster URL that does not use TLS is refused as for one server.
    let pki = crate::common::tls::Pki::new();
    let out = Wrapper::new()
        .args(["--redis", "redis+cluster://127.0.0.1:7000", "--key", "k"])
        .arg("--tls-ca-cert")
        .arg(pki.ca())
        .args(["--", "true"])
        .run();
    out.expect_code(2);
    out.expect_stderr_contains("does not use TLS");

    // Nothing listens: exit 69, without the password.
    let closed = free_port();
    let out = Wrapper::new()
        .args([
            "--redis",
            &format!("redis+cluster://:Zq9Xw7Jm@127.0.0.1:{closed}"),
        ])
        .args(["--key", "k", "-v", "--connect-timeout", "2s", "--", "true"])
        .run();
    out.expect_code(69);
    assert!(!out.stderr.contains("Xw7"), "password shown\n{out}");

    // A plain server is not a cluster.
    let plain = RedisServer::start();
    let out = Wrapper::new()
        .args([
            "--redis",
            &format!("redis+cluster://127.0.0.1:{}", plain.port()),
        ])
        .args(["--key", "k", "--", "true"])
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("not a cluster node");
}

/// A cluster with a password: `--password-file` reaches every node (the seeds and the
/// master the slot lives on), and a wrong one is refused without being shown.
#[test]
fn password_file_applies_to_every_node() {
    let cluster = Cluster::start_with(
        3,
        0,
        &["--requirepass", "Zq9Xw7Jm", "--masterauth", "Zq9Xw7Jm"],
    );
    let dir = scratch();
    let file = dir.path().join("pw");
    fs::write(&file, "Zq9Xw7Jm\n").unwrap();
    for (name, _) in one_name_per_master(&cluster, 3) {
        cluster
            .wrapper(&name)
            .arg("--password-file")
            .arg(&file)
            .args(["--", "true"])
            .run()
            .expect_code(0);
    }
    let wrong = Wrapper::new()
        .args(["--redis", &cluster.url().replace("://", "://:Wq8Yv6Kn@")])
        .args(["--key", "k", "--", "true"])
        .run();
    wrong.expect_code(69);
    wrong.expect_stderr_contains("refused authentication");
    assert!(!wrong.stderr.contains("Yv6"), "password shown\n{wrong}");
    // A lone name before '@' (redis-cli would read it as a password) is never shown: not in
    // the seeds' messages, not in the nodes'.
    for args in [
        &["status", "--key", "k"][..],
        &["--key", "k", "--", "true"][..],
    ] {
        let lone = Wrapper::new()
            .args(["--redis", &cluster.url().replace("://", "://Lp4Kd9Zr@")])
            .args(args)
            .run();
        lone.expect_code(69);
        lone.expect_stderr_contains("a user name and no password");
        assert!(!lone.stderr.contains("Lp4Kd9Zr"), "name shown\n{lone}");
    }
}

/// `rediss+cluster://` with `--tls-ca-cert`: the seeds and the master of the slot are all
/// reached over TLS and checked against the CA (the harness's server certificate has an IP
/// SAN for 127.0.0.1, as cluster nodes are announced by address); without the CA the
/// certificate is refused (exit 69). Redis 7.0 only: the other servers have no TLS.
#[test]
fn cluster_over_tls() {
    let pki = crate::common::tls::Pki::new();
    let Some(cluster) = Cluster::start_tls(3, &pki) else {
        return;
    };
    for (name, owner) in one_name_per_master(&cluster, 3) {
        let out = Wrapper::new()
            .args(["--redis", &cluster.tls_url(), "--key", &name])
            .arg("--tls-ca-cert")
            .arg(pki.ca())
            .args(["--hold-at-least", "30s", "--", "true"])
            .run();
        out.expect_code(0);
        assert!(
            cluster.nodes[owner].exists(&format!("redlock:{name}")),
            "the lock on its slot's master\n{out}"
        );
    }
    let out = Wrapper::new()
        .args(["--redis", &cluster.tls_url(), "--key", "no-ca"])
        .args(["--connect-timeout", "3s", "--", "true"])
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("--tls-ca-cert");
}

/// `--limit 2` on a cluster: the semaphore's keys share the lock's slot too, so two hold it
/// at once on the slot's master, and a third is busy.
#[test]
fn limit_two_on_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let dir = scratch();
    let key = "redlock:pair";
    let owner = &cluster.nodes[cluster.owner_of(key)];
    let holders: Vec<(Running, i32)> = ["a", "b"]
        .iter()
        .map(|name| {
            let mut run = cluster
                .wrapper("pair")
                .args(["--limit", "2"])
                .sh(&format!(
                    "echo $$ > {name}.tmp; mv {name}.tmp {name}; i=0; \
                     while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
                ))
                .current_dir(dir.path())
                .spawn();
            let pid = run.child_pid(&dir.path().join(name), secs(10));
            (run, pid)
        })
        .collect();
    assert_eq!(
        owner.cli_int(&["ZCARD", key]),
        2,
        "both permits on the slot's master"
    );
    cluster
        .wrapper("pair")
        .args(["--limit", "2", "--", "true"])
        .run()
        .expect_code(75);
    fs::write(dir.path().join("go"), "").unwrap();
    for (run, _) in holders {
        run.wait(secs(20)).expect_code(0);
    }
    assert!(!owner.exists(key), "both released");
}

/// With `cluster-preferred-endpoint-type hostname`, a node without a hostname is
/// named `?` in CLUSTER SLOTS (Redis 7+). When the key's master has none but its replica
/// has one, `slot_owner` skips the master's `?` entry and then takes the replica as the
/// first (master) entry of the range: the script goes to the replica, whose MOVED names
/// `?:port`, and the run ends with exit 69 ("failed to lookup address information") on a
/// healthy cluster. Expected: the master (or a clear message that it has no usable
/// address), never the replica.
#[test]
fn a_master_named_question_mark_is_not_replaced_by_its_replica() {
    let cluster = Cluster::start(3, 1);
    if cluster.nodes[0].version().0 < 7 {
        return skip(
            &cluster.nodes[0],
            "no cluster-preferred-endpoint-type before 7.0",
        );
    }
    let key = "redlock:qmark";
    let master = cluster.owner_of(key);
    let replica = 3 + master;
    for node in &cluster.nodes {
        node.cli(&[
            "CONFIG",
            "SET",
            "cluster-preferred-endpoint-type",
            "hostname",
        ]);
    }
    cluster.nodes[replica].cli(&["CONFIG", "SET", "cluster-announce-hostname", "localhost"]);
    let port = cluster.nodes[replica].port().to_string();
    wait_until(secs(10), "the replica's hostname to spread", || {
        let slots = cluster.nodes[0].cli(&["CLUSTER", "SLOTS"]);
        slots.contains("localhost") && slots.contains(&port)
    });
    let out = cluster.wrapper("qmark").sh("true").run();
    assert!(
        !out.stderr.contains("?:"),
        "followed the replica's MOVED to an unknown endpoint\n{out}"
    );
}

// While the lock's own slot is being migrated (MIGRATING on its master, IMPORTING on the other
// one, until CLUSTER SETSLOT NODE), stopped at each step a migration passes through: no key
// moved yet, every key moved, the lock key alone moved. Redis refuses a script whose declared
// keys are not all on the node it reaches, and the lock's companion keys (queue, cancelled
// tokens, release channel) often exist nowhere; see protocol/mod.rs and topology/cluster.rs.

/// `status --json` of lock `name` on `cluster`, parsed.
fn status_json(cluster: &Cluster, name: &str) -> serde_json::Value {
    let out = Wrapper::new()
        .args(["status", "--redis", &cluster.url(), "--key", name, "--json"])
        .run();
    out.expect_code(0);
    parse_json(&out.stdout)
}

/// A run's fence, from the file its command wrote it to.
fn fence_in(path: &std::path::Path) -> u64 {
    read_trimmed(path).parse().expect("a fence")
}

/// A finished run that held the lock and let it go: exit 0, and no line but a waiter's
/// notices that it waits and that the wait ended (no failed release, no retry).
fn released_cleanly(out: &Outcome) {
    out.expect_code(0);
    assert!(
        out.stderr_lines()
            .iter()
            .all(|l| l.contains("; waiting up to") || l.contains(" after waiting ")),
        "{out}"
    );
}

/// Runs waiting in the queue of lock `name`, as `status` sees them.
fn queued(cluster: &Cluster, name: &str) -> u64 {
    status_json(cluster, name)["queued"]
        .as_u64()
        .expect("queued")
}

/// Migration begun, no key moved: the holder took the lock before, two waiters queued before.
/// `status` answers, a run without `--wait` finds the lock busy, the holder's release deletes
/// it on the old master. The lock is then free, but its fence counter and queue are still
/// there, where Redis creates no new key of a migrating slot, and the new master cannot see
/// them: the waiters wait, keeping their places (well past how long a place is kept without a
/// new attempt), and once the keys move, take the lock in their order, with growing fences.
#[test]
fn a_slot_migration_that_has_moved_no_key_yet() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:mig";
    let queue = "{redlock:mig}:queue";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let first = cluster.wrapper("mig").sh("echo $REDLOCK_FENCE").run();
    first.expect_code(0);
    let first_fence: u64 = first.stdout.trim().parse().expect("REDLOCK_FENCE");
    let mut holder = cluster
        .wrapper("mig")
        .sh(&format!("echo $REDLOCK_FENCE > holder-fence; {UNTIL_GO}"))
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));
    // A place is kept 2 s without a new attempt with --connect-timeout 1s.
    let waiter = |name: &str| {
        cluster
            .wrapper("mig")
            .args(["--wait", "60s", "--connect-timeout", "1s"])
            .sh(&format!("echo {name} $REDLOCK_FENCE >> order"))
            .current_dir(dir.path())
            .spawn()
    };
    let mut w1 = waiter("w1");
    w1.wait_until(secs(20), "w1 queued", || queued(&cluster, "mig") == 1);
    let mut w2 = waiter("w2");
    w2.wait_until(secs(20), "w2 queued", || queued(&cluster, "mig") == 2);

    cluster.begin_migration(slot, from, to);
    let json = status_json(&cluster, "mig");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["queued"], 2, "{json}");
    let busy = cluster
        .wrapper("mig")
        .sh("touch nowait-ran")
        .current_dir(dir.path())
        .run();
    busy.expect_code(75);
    assert!(!dir.path().join("nowait-ran").exists());

    fs::write(dir.path().join("go"), "").unwrap();
    released_cleanly(&holder.wait(secs(20)));
    assert!(!cluster.anywhere(key), "the lock is left behind");
    assert!(
        !cluster.anywhere("{redlock:mig}:holder"),
        "its holder info too"
    );

    thread::sleep(secs(4));
    assert!(
        !dir.path().join("order").exists(),
        "a waiter took the lock while its fence counter and queue were out of reach"
    );
    assert!(w1.is_running() && w2.is_running(), "{}", w1.describe());
    assert_eq!(queued(&cluster, "mig"), 2, "the waiters lost their places");
    assert!(cluster.keys_in_slot(from, slot).iter().any(|k| k == queue));

    cluster.move_keys(slot, from, to);
    let (o1, o2) = (w1.wait(secs(30)), w2.wait(secs(30)));
    released_cleanly(&o1);
    released_cleanly(&o2);
    let order = read_trimmed(&dir.path().join("order"));
    let order: Vec<(&str, u64)> = order
        .lines()
        .map(|l| {
            let (name, fence) = l.split_once(' ').expect("name fence");
            (name, fence.parse().expect("a fence"))
        })
        .collect();
    assert_eq!(
        order.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["w1", "w2"],
        "not in the order they queued"
    );
    let holder_fence = fence_in(&dir.path().join("holder-fence"));
    let fences = [first_fence, holder_fence, order[0].1, order[1].1];
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must grow: {fences:?}"
    );
    cluster.finish_migration(slot, to);
    assert!(!cluster.anywhere(key));
    assert_eq!(queued(&cluster, "mig"), 0);
}

/// Migration begun, no key moved, the lock held on the old master and nobody queued: a waiter
/// that arrives now cannot join a queue there (the old master creates no new key of a
/// migrating slot), so it queues on the new one, which has none of the lock's keys to
/// conflict with: the migration's MIGRATE of the others still succeeds. The holder releases
/// on the old master; the waiter takes the lock once the fence counter has moved.
#[test]
fn a_waiter_that_arrives_mid_migration_queues_on_the_new_master() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:late";
    let queue = "{redlock:late}:queue";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let mut holder = cluster
        .wrapper("late")
        .sh(&format!("echo $REDLOCK_FENCE > holder-fence; {UNTIL_GO}"))
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));
    cluster.begin_migration(slot, from, to);
    let mut w = cluster
        .wrapper("late")
        .args(["--wait", "30s"])
        .sh("echo $REDLOCK_FENCE > w-fence")
        .current_dir(dir.path())
        .spawn();
    w.wait_until(secs(20), "w queued", || queued(&cluster, "late") == 1);
    assert!(cluster.keys_in_slot(to, slot).iter().any(|k| k == queue));
    let json = status_json(&cluster, "late");
    assert_eq!(json["held"], true, "{json}");
    assert!(!json["pid"].is_null(), "holder info: {json}");

    fs::write(dir.path().join("go"), "").unwrap();
    released_cleanly(&holder.wait(secs(20)));
    assert!(!cluster.anywhere(key), "the lock is left behind");
    thread::sleep(secs(1));
    assert!(
        !dir.path().join("w-fence").exists(),
        "w took the lock while its fence counter was out of reach"
    );
    cluster.move_keys(slot, from, to);
    released_cleanly(&w.wait(secs(20)));
    let fences = [
        fence_in(&dir.path().join("holder-fence")),
        fence_in(&dir.path().join("w-fence")),
    ];
    assert!(fences[0] < fences[1], "fences must grow: {fences:?}");
    cluster.finish_migration(slot, to);
    assert!(!cluster.anywhere(key));
    assert_eq!(queued(&cluster, "late"), 0);
}

/// Every key of the lock moved to the new master, the slot not handed over yet (the old one
/// answers ASK): a run takes the lock there and renews it (1 s ttl), `status` reads it, a run
/// without `--wait` finds it busy, a waiter queues, the release deletes it, the waiter follows.
#[test]
fn a_slot_migration_that_has_moved_every_key() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:moved";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let first = cluster.wrapper("moved").sh("echo $REDLOCK_FENCE").run();
    first.expect_code(0);
    let first_fence: u64 = first.stdout.trim().parse().expect("REDLOCK_FENCE");
    cluster.begin_migration(slot, from, to);
    cluster.move_keys(slot, from, to);

    let mut a = cluster
        .wrapper("moved")
        .args(["--ttl", "1s"])
        .sh(&format!("echo $REDLOCK_FENCE > a-fence; {UNTIL_GO}"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(10));
    assert_eq!(
        cluster
            .keys_in_slot(to, slot)
            .iter()
            .filter(|k| *k == key)
            .count(),
        1
    );
    thread::sleep(ms(1500));
    assert!(a.is_running(), "renewals\n{}", a.describe());
    let a_fence = fence_in(&dir.path().join("a-fence"));
    let json = status_json(&cluster, "moved");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["fence"], a_fence, "{json}");
    cluster.wrapper("moved").sh("true").run().expect_code(75);
    let mut b = cluster
        .wrapper("moved")
        .args(["--wait", "30s"])
        .sh("echo $REDLOCK_FENCE > b-fence")
        .current_dir(dir.path())
        .spawn();
    b.wait_until(secs(20), "b queued", || queued(&cluster, "moved") == 1);

    fs::write(dir.path().join("go"), "").unwrap();
    released_cleanly(&a.wait(secs(20)));
    released_cleanly(&b.wait(secs(20)));
    let b_fence = fence_in(&dir.path().join("b-fence"));
    assert!(
        first_fence < a_fence && a_fence < b_fence,
        "fences must grow: {first_fence} {a_fence} {b_fence}"
    );
    assert!(!cluster.anywhere(key));
    cluster.finish_migration(slot, to);
}

/// Caught between the keys: the lock key moved, its holder info and fence counter not yet.
/// Renewals (1 s ttl) and the release follow the lock; `status` reads each key where it is;
/// a waiter cannot take the free lock before the fence counter moves, and then does.
#[test]
fn a_slot_migration_caught_between_the_lock_and_its_other_keys() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:split";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let mut a = cluster
        .wrapper("split")
        .args(["--ttl", "1s"])
        .sh(&format!("echo $REDLOCK_FENCE > a-fence; {UNTIL_GO}"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(10));
    cluster.begin_migration(slot, from, to);
    cluster.move_these_keys(&[key], from, to);
    let left: Vec<String> = cluster.keys_in_slot(from, slot);
    assert!(
        left.iter().any(|k| k == "{redlock:split}:fence"),
        "{left:?}"
    );

    thread::sleep(ms(1500));
    assert!(a.is_running(), "renewals\n{}", a.describe());
    let json = status_json(&cluster, "split");
    assert_eq!(json["held"], true, "{json}");
    let mut b = cluster
        .wrapper("split")
        .args(["--wait", "30s"])
        .sh("echo $REDLOCK_FENCE > b-fence")
        .current_dir(dir.path())
        .spawn();
    b.wait_until(secs(20), "b queued", || queued(&cluster, "split") == 1);

    fs::write(dir.path().join("go"), "").unwrap();
    released_cleanly(&a.wait(secs(20)));
    assert!(!cluster.anywhere(key), "the lock is left behind");
    thread::sleep(secs(1));
    assert!(
        !dir.path().join("b-fence").exists(),
        "b took the lock while its fence counter was out of reach"
    );
    cluster.move_keys(slot, from, to);
    released_cleanly(&b.wait(secs(20)));
    let (a_fence, b_fence) = (
        fence_in(&dir.path().join("a-fence")),
        fence_in(&dir.path().join("b-fence")),
    );
    assert!(a_fence < b_fence, "fences must grow: {a_fence} {b_fence}");
    assert!(!cluster.anywhere(key));
    cluster.finish_migration(slot, to);
}

/// `--limit 2` while its slot migrates: a holder from before the migration releases on the
/// old master (no key moved yet); once the keys moved, two runs hold it at once on the new
/// master, a third is busy, and both release.
#[test]
fn limit_two_while_its_slot_migrates() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:pairs";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let holder = |name: &str| {
        let mut run = cluster
            .wrapper("pairs")
            .args(["--limit", "2"])
            .sh(&format!(
                "touch {name}; i=0; while [ ! -e go-{name} ] && [ $i -lt 1200 ]; do \
                 sleep 0.05; i=$((i+1)); done"
            ))
            .current_dir(dir.path())
            .spawn();
        run.wait_for_file(&dir.path().join(name), secs(10));
        run
    };
    let go = |name: &str| fs::write(dir.path().join(format!("go-{name}")), "").unwrap();
    let a = holder("a");
    cluster.begin_migration(slot, from, to);
    go("a");
    released_cleanly(&a.wait(secs(20)));
    assert!(!cluster.anywhere(key), "a's permit is left behind");

    cluster.move_keys(slot, from, to);
    let (b, c) = (holder("b"), holder("c"));
    let json = status_json(&cluster, "pairs");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(
        json["holders"].as_array().map(Vec::len),
        Some(2),
        "two holders: {json}"
    );
    cluster
        .wrapper("pairs")
        .args(["--limit", "2", "--", "true"])
        .run()
        .expect_code(75);
    go("b");
    go("c");
    released_cleanly(&b.wait(secs(20)));
    released_cleanly(&c.wait(secs(20)));
    assert!(!cluster.anywhere(key));
    cluster.finish_migration(slot, to);
}
