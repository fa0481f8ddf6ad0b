//! A lock's keys split between the two nodes of a slot migration for longer than a lease (an
//! interrupted `redis-cli --cluster reshard`, or a slow one: keys move in batches, and one
//! lock's keys can fall into different batches), and a lock's slot moved key by key there and
//! back under contention. Renewals and releases run where the lock key is and extend only the
//! keys that node has; the companions left on the other node expire there. A `--limit` key
//! lost that way (or to an eviction) is written again by the next renewal where no migration
//! is under way, so the lock is usable again (it used to be refused as "not a redlock-run
//! --limit lock" for as long as any holder renewed). Holder info left behind is not written
//! again (a renewal does not carry it): `status` then shows the holder as another client
//! until the next acquire (README, Cluster).

use std::fs;

use crate::common::cluster::Cluster;
use crate::common::*;

/// A `--limit 2` holder with a 1 s lease on `cluster`, until the file `go` exists.
fn limit_holder(cluster: &Cluster, name: &str, dir: &std::path::Path) -> Running {
    let mut run = cluster
        .wrapper(name)
        .args(["--limit", "2", "--ttl", "1s"])
        .sh(
            "echo $$ > started; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; \
             i=$((i+1)); done",
        )
        .current_dir(dir)
        .spawn();
    run.child_pid(&dir.join("started"), secs(10));
    run
}

/// The holders' set moves to the new master ahead of the limit key, and the migration stalls
/// for longer than a lease: the holder keeps renewing where its set is, the limit left behind
/// expires. Once the rest has moved and the slot is handed over, a second `--limit 2` run must
/// get the free permit.
#[test]
fn a_limit_whose_set_moved_ahead_of_its_limit_key_still_grants_a_free_permit() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:lim1";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let mut holder = limit_holder(&cluster, "lim1", dir.path());

    cluster.begin_migration(slot, from, to);
    cluster.move_these_keys(&[key], from, to);
    // Longer than the 1 s lease: the limit key left behind is renewed by nobody.
    std::thread::sleep(ms(2500));
    assert!(holder.is_running(), "renewals\n{}", holder.describe());
    cluster.move_keys(slot, from, to);
    cluster.finish_migration(slot, to);
    assert!(holder.is_running(), "renewals\n{}", holder.describe());
    // Where no migration is under way, the holder's next renewal writes the lost limit again
    // (on the node the slot went to, it could not: the node it left might still have had it).
    wait_until(secs(10), "the limit written again", || {
        cluster.anywhere("{redlock:lim1}:limit")
    });

    let second = cluster
        .wrapper("lim1")
        .args(["--limit", "2", "--", "true"])
        .run();
    fs::write(dir.path().join("go"), "").unwrap();
    let first = holder.wait(secs(20));
    second.expect_code(0);
    first.expect_code(0);
}

/// The other order: the limit key moves first, the set stays on the old master, where the
/// holder renews it; the limit, now on the new master, is not renewed and expires. After the
/// migration a second `--limit 2` run must get the free permit.
#[test]
fn a_limit_whose_limit_key_moved_ahead_of_its_set_still_grants_a_free_permit() {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = "redlock:lim2";
    let slot = cluster.slot(key);
    let from = cluster.owner_of(key);
    let to = cluster.other_master(from);
    let mut holder = limit_holder(&cluster, "lim2", dir.path());

    cluster.begin_migration(slot, from, to);
    cluster.move_these_keys(&["{redlock:lim2}:limit"], from, to);
    std::thread::sleep(ms(2500));
    assert!(holder.is_running(), "renewals\n{}", holder.describe());
    cluster.move_keys(slot, from, to);
    cluster.finish_migration(slot, to);
    assert!(holder.is_running(), "renewals\n{}", holder.describe());
    // Where no migration is under way, the holder's next renewal writes the lost limit again
    // (on the node the slot went to, it could not: the node it left might still have had it).
    wait_until(secs(10), "the limit written again", || {
        cluster.anywhere("{redlock:lim2}:limit")
    });

    let second = cluster
        .wrapper("lim2")
        .args(["--limit", "2", "--", "true"])
        .run();
    fs::write(dir.path().join("go"), "").unwrap();
    let first = holder.wait(secs(20));
    second.expect_code(0);
    first.expect_code(0);
}

/// Move `key` from node `from` to `to` (the slot migrating between them); `false` if it was
/// gone already. Any other answer (BUSYKEY: the key exists on both nodes) fails the test.
fn migrate_one(cluster: &Cluster, key: &str, from: usize, to: usize) -> bool {
    let port = cluster.nodes[to].port().to_string();
    let reply =
        cluster.nodes[from].cli(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key]);
    match reply.as_str() {
        "OK" => true,
        "NOKEY" => false,
        other => panic!("MIGRATE {key} from {from} to {to}: {other}"),
    }
}

/// The slot migrated there and back, one key at a time with pauses between, while four
/// clients take the lock over and over (waiters, and runs that do not wait): never two
/// holders at once, fences strictly growing in the order the holders ran, no key ever on
/// both nodes (MIGRATE would answer BUSYKEY), and every waiter gets the lock.
#[test]
fn contended_lock_while_its_slot_moves_key_by_key_there_and_back() {
    // Inside the lock: a directory only one holder may have, and the fence appended to a log.
    churn(
        "churn",
        &[],
        "mkdir cs 2>/dev/null || touch breach; echo $REDLOCK_FENCE >> fences; sleep 0.05; \
         rmdir cs",
        true,
    );
}

/// As above with `--limit 2`: never three holders at once.
#[test]
fn contended_limit_while_its_slot_moves_key_by_key_there_and_back() {
    churn(
        "churn2",
        &["--limit", "2"],
        "if mkdir cs1 2>/dev/null; then d=cs1; elif mkdir cs2 2>/dev/null; then d=cs2; \
         else touch breach; fi; sleep 0.1; rmdir $d",
        false,
    );
}

/// Four clients (two waiting with `--wait`, two not) run `inside` under lock `name` with
/// `args`, while the lock's slot is migrated there and back three times, one key at a time.
fn churn(name: &str, args: &[&str], inside: &str, fences_in_order: bool) {
    let cluster = Cluster::start(2, 0);
    let dir = scratch();
    let key = format!("redlock:{name}");
    let slot = cluster.slot(&key);
    let a = cluster.owner_of(&key);
    let b = cluster.other_master(a);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let wrapper = cluster
                .wrapper(name)
                .args(["--connect-timeout", "1s", "--ttl", "2s"])
                .args(args)
                .args(if c % 2 == 0 {
                    vec!["--wait", "60s"]
                } else {
                    vec![]
                })
                .sh(inside)
                .current_dir(dir.path());
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                for _ in 0..200 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let out = wrapper.run();
                    codes.push((out.code(), out.stderr.clone()));
                }
                (c, codes)
            })
        })
        .collect();
    let pause: u64 = std::env::var("REVIEW_SLOT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    for (from, to) in [(a, b), (b, a), (a, b)] {
        std::thread::sleep(ms(300));
        cluster.begin_migration(slot, from, to);
        for _ in 0..3 {
            for k in cluster.keys_in_slot(from, slot) {
                migrate_one(&cluster, &k, from, to);
                std::thread::sleep(ms(pause));
            }
        }
        // Nothing can appear on the node the slot leaves: this is the last batch.
        for k in cluster.keys_in_slot(from, slot) {
            migrate_one(&cluster, &k, from, to);
        }
        cluster.finish_migration(slot, to);
    }
    std::thread::sleep(ms(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        let (c, codes) = client.join().unwrap();
        for (code, stderr) in &codes {
            let ok = match code {
                Some(0) => true,
                // A run that does not wait may find the lock busy, or its keys not moved yet.
                Some(75) | Some(69) if c % 2 == 1 => true,
                _ => false,
            };
            assert!(ok, "client {c}: exit {code:?}\n{stderr}");
        }
        eprintln!(
            "client {c}: {} runs, exits {:?}",
            codes.len(),
            codes
                .iter()
                .map(|(code, _)| code.unwrap_or(-1))
                .collect::<Vec<_>>()
        );
        // Runs that do not wait may starve behind the waiters' queue; waiters may not.
        assert!(
            c % 2 == 1 || codes.iter().any(|(code, _)| *code == Some(0)),
            "client {c} never got the lock: {codes:?}"
        );
    }
    assert!(
        !dir.path().join("breach").exists(),
        "too many holders at once"
    );
    if !fences_in_order {
        return;
    }
    let fences: Vec<u64> = read_trimmed(&dir.path().join("fences"))
        .lines()
        .map(|l| l.parse().expect("a fence"))
        .collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must grow in the order the holders ran: {fences:?}"
    );
}

/// One server, no cluster: the limit key of a held `--limit` lock is lost while the set lives
/// on (`DEL` here stands for an eviction: under `maxmemory-policy allkeys-lru` the limit,
/// read only by acquires, is older than the set every renewal touches). Before 621ffb8 the
/// next renewal wrote the limit again; now renewals only extend it (`SET .. XX`), and every
/// later `--limit` run is refused with exit 69 until the last holder leaves.
#[test]
fn a_limit_key_lost_while_held_is_written_again_by_the_next_renewal() {
    let server = RedisServer::start();
    let dir = scratch();
    let mut holder = Wrapper::on(&server, "lost")
        .args(["--limit", "2", "--ttl", "1s"])
        .sh(
            "echo $$ > started; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; \
             i=$((i+1)); done",
        )
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));
    assert_eq!(server.cli_int(&["DEL", "{redlock:lost}:limit"]), 1);
    // Two heartbeats (ttl/3 each).
    std::thread::sleep(ms(800));
    assert!(holder.is_running(), "renewals\n{}", holder.describe());
    let second = Wrapper::on(&server, "lost")
        .args(["--limit", "2", "--", "true"])
        .run();
    fs::write(dir.path().join("go"), "").unwrap();
    holder.wait(secs(20)).expect_code(0);
    second.expect_code(0);
}
