//! `--min-replicas` on Sentinel: every replica the sentinels could promote must have each
//! grant and renewal, and the ways that check could be dodged or could block healthy runs
//! (found by a review that tried to break it).

use std::fs;
use std::time::Instant;

use crate::common::sentinel::{MASTER_NAME, SentinelSet, cli_at, sentinel_url};
use crate::common::*;

const KEY: &str = "redlock:job";

/// Beats every 50 ms until `go` exists (at most 60 s).
fn beating(beats: &str) -> String {
    format!(
        "echo $$ > started; echo $REDLOCK_FENCE > fence; i=0; \
         while [ ! -e go ] && [ $i -lt 1200 ]; do date +%s%N >> {beats}; sleep 0.05; \
         i=$((i+1)); done; date +%s%N >> {beats}; touch ended"
    )
}

fn sentinel_replicas(port: u16) -> String {
    cli_at(port, None, &["SENTINEL", "REPLICAS", MASTER_NAME]).unwrap_or_default()
}

/// Replica Y (`nodes[1]`) gets `replica-priority 1` (the one Sentinel promotes first) and,
/// if `hidden`, `replica-announced no`; waits until every sentinel has read that from Y's
/// INFO (hidden: Y gone from `SENTINEL REPLICAS`; otherwise its priority shown as 1).
fn prefer_y(set: &SentinelSet, hidden: bool) -> u16 {
    let y = set.nodes[1].port();
    set.nodes[1].cli(&["CONFIG", "SET", "replica-priority", "1"]);
    if hidden {
        set.nodes[1].cli(&["CONFIG", "SET", "replica-announced", "no"]);
    }
    for s in &set.sentinels {
        set.wait(secs(30), "the sentinels see Y's new INFO", || {
            let r = sentinel_replicas(s.port());
            let listed = r.contains(&format!("127.0.0.1:{y}"));
            if hidden {
                !listed && !r.is_empty()
            } else {
                let lines: Vec<&str> = r.lines().map(str::trim).collect();
                // name, 127.0.0.1:Y ... slave-priority, 1 inside Y's entry
                let at = lines.iter().position(|l| *l == format!("127.0.0.1:{y}"));
                at.is_some_and(|i| {
                    lines[i..]
                        .windows(2)
                        .take_while(|w| w[0] != "name" || w[1] == format!("127.0.0.1:{y}"))
                        .any(|w| w[0] == "slave-priority" && w[1] == "1")
                })
            }
        });
    }
    y
}

/// A replica with `replica-announced no` is left out of `SENTINEL REPLICAS`, but Sentinel
/// still promotes it: the wrapper cannot check it has a grant, so it grants nothing (a
/// sentinel that knows more replicas than it lists is refused, exit 69, nothing left
/// behind). Without that, a grant acknowledged only by the other replica counted, the
/// hidden one was promoted when the master died, and a second run got the lock while the
/// first one's command still ran.
///
/// Y stops replicating X the way the failover leader's `REPLICAOF NO ONE` does in the
/// issue's window (or as a lagging link would); Z would acknowledge A's grant on X.
#[test]
fn a_hidden_replica_makes_min_replicas_refuse() {
    let set = SentinelSet::start(2);
    let dir = scratch();
    let y = prefer_y(&set, true);
    set.nodes[1].cli(&["REPLICAOF", "NO", "ONE"]);
    set.wait(secs(10), "X no longer lists Y", || {
        !set.nodes[0].cli(&["ROLE"]).contains(&y.to_string())
    });

    let out = set
        .wrapper("job")
        .args([
            "--ttl",
            "30s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("replica-announced no");
    assert!(!dir.path().join("ran").exists(), "A ran\n{out}");
    assert!(!set.nodes[0].exists(KEY), "A left its lock on X\n{out}");
}

/// Control for the test above: the same with Y announced. The fix refuses A's grant (Y is
/// listed and lacks it), so the test's set-up does exercise the new check.
#[test]
fn control_an_announced_replica_must_have_the_grant() {
    let set = SentinelSet::start(2);
    let dir = scratch();
    let y = prefer_y(&set, false);
    set.nodes[1].cli(&["REPLICAOF", "NO", "ONE"]);
    set.wait(secs(10), "X no longer lists Y", || {
        !set.nodes[0].cli(&["ROLE"]).contains(&y.to_string())
    });
    let out = set
        .wrapper("job")
        .args([
            "--ttl",
            "30s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("which the sentinels could promote");
    assert!(!dir.path().join("ran").exists());
}

/// A data-node user without `+role` cannot have its grants checked: exit 69, and no lock
/// left behind (the refusal comes before any write; were it to come after the script, the
/// grant would be taken back).
#[test]
fn a_refused_role_leaves_no_grant_behind() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    let x = set.master_port();
    set.node(x).cli(&[
        "ACL", "SETUSER", "locker", "on", ">Lk4pw9", "~*", "&*", "+@all", "-role",
    ]);
    let ports: Vec<u16> = set.sentinels.iter().map(|s| s.port()).collect();
    let url = sentinel_url(&ports).replace("redis+sentinel://", "redis+sentinel://locker:Lk4pw9@");
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "job", "--ttl", "30s"])
        .args(["--min-replicas", "1", "--replica-timeout", "300ms"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    assert!(!dir.path().join("ran").exists());
    let pttl = set.node(x).pttl(KEY);
    assert!(
        pttl < 0,
        "the refused run left its lock on the master (PTTL {pttl} ms): the next run is busy \
         for the whole ttl\n{out}"
    );
}

/// One sentinel (the first in the URL) refuses `SENTINEL REPLICAS` to the user; the two
/// others allow it: the run uses those (it once kept asking the first and waited out its
/// whole --wait).
#[test]
fn a_sentinel_that_refuses_to_list_replicas_is_passed_over() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    for (i, s) in set.sentinels.iter().enumerate() {
        let rule = if i == 0 {
            "-sentinel|replicas"
        } else {
            "+@all"
        };
        // Asked again for a while: a sentinel busy with its start may drop the connection.
        let mut r = None;
        poll_until(secs(10), || {
            r = cli_at(
                s.port(),
                None,
                &["ACL", "SETUSER", "su", "on", ">Su7pw3", "+@all", rule],
            );
            r.is_some()
        });
        if i == 0 && r.is_none() {
            println!(
                "SKIPPED sentinel_acks::a_sentinel_that_refuses_to_list_replicas_is_passed_over: \
                 this sentinel refuses ACL SETUSER ... {rule}"
            );
            return;
        }
        assert_eq!(r.as_deref(), Some("OK"), "ACL SETUSER on sentinel {i}");
    }
    let ports: Vec<u16> = set.sentinels.iter().map(|s| s.port()).collect();
    let url = sentinel_url(&ports) + "?sentinel_username=su&sentinel_password=Su7pw3";
    // Without --min-replicas: fine.
    Wrapper::new()
        .args(["--redis", &url, "--key", "job"])
        .sh("true")
        .run()
        .expect_code(0);
    let started = Instant::now();
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "job", "--wait", "5s"])
        .args(["--min-replicas", "1", "--replica-timeout", "300ms"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    let took = started.elapsed();
    assert!(
        out.code() == Some(0),
        "two of three sentinels allow SENTINEL REPLICAS, yet the run failed after {took:?} \
         (a permanent ACL refusal retried as transient)\n{out}"
    );
}

/// One of two replicas frozen (SIGSTOP: its links stay up, so neither the master nor the
/// sentinels drop it until down-after-milliseconds, 30 s by default; 10 s here). Sentinel
/// does not promote a replica silent for 5 s, and neither does the wrapper ask it to
/// acknowledge: a holder whose ttl leaves more than that to retry renewals keeps its lease.
#[test]
fn one_frozen_replica_of_two_does_not_stop_a_holder() {
    let set = SentinelSet::start(2);
    let dir = scratch();
    for s in &set.sentinels {
        cli_at(
            s.port(),
            None,
            &[
                "SENTINEL",
                "SET",
                MASTER_NAME,
                "down-after-milliseconds",
                "10000",
            ],
        )
        .expect("SENTINEL SET");
    }
    let mut a = set
        .wrapper("job")
        .args([
            "--ttl",
            "15s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh(&beating("a-beats"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    set.nodes[2].pause();
    // Two ttls: several renewals meet the frozen replica.
    let stopped = poll_until(secs(30), || !a.is_running());
    set.nodes[2].resume();
    fs::write(dir.path().join("go"), "").unwrap();
    let a_out = a.wait(secs(30));
    assert!(
        !stopped && a_out.code() == Some(0),
        "a holder with --min-replicas 1 and one healthy replica lost its lease to one frozen \
         replica\n{a_out}"
    );
}

/// A replica announced by hostname (`replica-announce-ip localhost`): the master's ROLE lists
/// it as `localhost`, the sentinels (announce-hostnames no, the default) list it by IP. The
/// two are matched by address, so its acknowledgement counts.
#[test]
fn a_replica_announced_by_hostname_is_matched_by_address() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    for s in &set.sentinels {
        cli_at(
            s.port(),
            None,
            &["SENTINEL", "CONFIG", "SET", "resolve-hostnames", "yes"],
        )
        .expect("SENTINEL CONFIG SET");
    }
    let x = set.master_port();
    set.nodes[1].cli(&["CONFIG", "SET", "replica-announce-ip", "localhost"]);
    set.node(x).cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    set.wait(secs(20), "ROLE lists the replica as localhost", || {
        set.node(x).cli(&["ROLE"]).contains("localhost")
    });
    // Give the sentinels two INFO periods (10 s each) to learn what the master now says.
    let mut out = None;
    let granted = poll_until(secs(22), || {
        let o = set
            .wrapper("job")
            .args(["--min-replicas", "1", "--replica-timeout", "300ms"])
            .sh("touch ran")
            .current_dir(dir.path())
            .run();
        let ok = o.code() == Some(0);
        out = Some(o);
        std::thread::sleep(secs(1));
        ok
    });
    let out = out.expect("one run");
    assert!(
        granted,
        "ROLE: {}\nSENTINEL REPLICAS: {}\n{out}",
        set.node(x).cli(&["ROLE"]),
        sentinel_replicas(set.sentinels[0].port())
    );
}
