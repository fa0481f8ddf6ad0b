//! `redis+sentinel://`: the lock on the master that Redis Sentinel names (harness:
//! `tests/common/sentinel.rs`, a master, replicas and three sentinels).
//!
//! (Runs, busy, status, renewals, a lost lock, waiters and fences through the sentinels are in
//! `contract`.) Sentinels partly down; a kill -9 of the master while a command runs
//! (it goes on or stops with 74, and a second wrapper never runs beside it); a killed and
//! restarted old master never used; fences growing across a failover; bad URLs; secrets.

use std::fs;

use crate::common::sentinel::{self, MASTER_NAME, SentinelSet, cli_at, sentinel_url};
use crate::common::*;

const KEY: &str = "redlock:job";

/// The last line of a file of `date +%s%N` lines, as a number (0 if none yet).
fn last_stamp(path: &std::path::Path) -> u128 {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// A command that writes a timestamp every 50 ms into `beats` until the file `go` exists
/// (at most 60 s), then `end`.
fn beating(beats: &str) -> String {
    format!(
        "echo $$ > started; echo $REDLOCK_FENCE > fence; i=0; \
         while [ ! -e go ] && [ $i -lt 1200 ]; do date +%s%N >> {beats}; sleep 0.05; \
         i=$((i+1)); done; date +%s%N >> {beats}; touch ended"
    )
}

/// Waits until `run` says it waits for the lock.
fn wait_for_waiting(run: &Running) {
    if !poll_until(secs(15), || run.stderr_so_far().contains("waiting")) {
        panic!("not waiting after 15s\n{}", run.describe());
    }
}

#[test]
fn works_with_the_first_listed_sentinels_down() {
    let mut set = SentinelSet::start(1);
    let dir = scratch();
    set.sentinels[0].kill();
    let nobody = free_port();
    let ports = [
        nobody,
        set.sentinels[0].port(),
        set.sentinels[1].port(),
        set.sentinels[2].port(),
    ];
    let out = Wrapper::new()
        .args(["--redis", &sentinel_url(&ports), "--key", "job"])
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("ran").exists());

    // Every sentinel down: 69, naming each.
    set.sentinels[1].kill();
    set.sentinels[2].kill();
    let out = Wrapper::new()
        .args(["--redis", &sentinel_url(&ports), "--key", "job"])
        .args(["--connect-timeout", "2s"])
        .sh("touch ran-2")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("no sentinel named a usable master");
    out.expect_stderr_contains(&format!("127.0.0.1:{nobody}"));
    assert!(!dir.path().join("ran-2").exists());
}

#[test]
fn an_unknown_master_name_is_exit_69() {
    let set = SentinelSet::start(1);
    let url = set.url().replace(MASTER_NAME, "nosuchmaster");
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "job"])
        .sh("true")
        .run();
    out.expect_code(69);
    out.expect_stderr_contains("does not know a master named 'nosuchmaster'");
}

/// kill -9 of the master while a command runs with `--min-replicas 1` (two replicas, so one
/// is left to acknowledge after the failover): the run goes on, or stops with 74; a second
/// wrapper started after the failover never runs while the first's command runs.
#[test]
fn a_failover_while_the_command_runs_never_makes_two_holders() {
    let mut set = SentinelSet::start(2);
    let dir = scratch();
    let mut a = set
        .wrapper("job")
        .args([
            "--ttl",
            "4s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh(&beating("a-beats"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let old = set.master_port();
    let old_index = set.index(old);
    set.nodes[old_index].kill();
    let new = set.wait_for_failover(old);

    let b = set
        .wrapper("job")
        .args(["--wait", "40s"])
        .sh("date +%s%N > b-start; echo $REDLOCK_FENCE > b-fence")
        .current_dir(dir.path())
        .spawn();
    // Let A run on beside the waiting B for a while (or end with 74).
    let a_stopped = poll_until(secs(5), || !a.is_running());
    if !a_stopped {
        fs::write(dir.path().join("go"), "").unwrap();
    }
    let a_out = a.wait(secs(30));
    assert!(
        matches!(a_out.code(), Some(0 | 74)),
        "A goes on (0) or stops (74)\n{a_out}"
    );
    let b_out = b.wait(secs(60));
    b_out.expect_code(0);
    let b_start: u128 = read_trimmed(&dir.path().join("b-start")).parse().unwrap();
    let a_last = last_stamp(&dir.path().join("a-beats"));
    assert!(
        b_start > a_last,
        "B's command started while A's ran (B {b_start}, A's last beat {a_last})\nA: {a_out}\nB: {b_out}"
    );
    let a_fence: u64 = read_trimmed(&dir.path().join("fence")).parse().unwrap();
    let b_fence: u64 = read_trimmed(&dir.path().join("b-fence")).parse().unwrap();
    assert!(
        b_fence > a_fence,
        "fence {b_fence} after the failover must exceed {a_fence}"
    );
    assert_ne!(new, old);
}

/// The old master, killed and restarted empty on its port right after the failover, says
/// ROLE master and takes writes until the sentinels demote it. A wrapper that was waiting
/// for the lock (it knew the old master's address) must ask the sentinels again and lock on
/// the new master, never on the old one, and never while the holder's command runs.
#[test]
fn a_restarted_old_master_is_never_used() {
    let mut set = SentinelSet::start(2);
    let dir = scratch();
    let mut a = set
        .wrapper("job")
        .args([
            "--ttl",
            "4s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh(&beating("a-beats"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let old = set.master_port();
    let b_script = format!(
        "date +%s%N > b-start; echo $REDLOCK_TOKEN > b-token; \
         redis-cli -p $(redis-cli -p {} SENTINEL GET-MASTER-ADDR-BY-NAME {MASTER_NAME} | tail -1) \
         GET {KEY} > b-holder",
        set.sentinels[0].port()
    );
    let b = set
        .wrapper("job")
        .args(["--wait", "60s"])
        .sh(&b_script)
        .current_dir(dir.path())
        .spawn();
    wait_for_waiting(&b);

    let old_index = set.index(old);
    set.nodes[old_index].kill();
    set.wait_for_failover(old);
    set.nodes[old_index].restart();
    assert_eq!(
        set.nodes[old_index].cli(&["ROLE"]).lines().next(),
        Some("master"),
        "the restarted old master says it is a master"
    );
    // Give B time to go wrong while the old master is a master again (it ends the wait
    // early if B runs), then let A end.
    poll_until(secs(4), || dir.path().join("b-start").exists());
    fs::write(dir.path().join("go"), "").unwrap();
    let a_out = a.wait(secs(30));
    let b_out = b.wait(secs(60));
    assert!(matches!(a_out.code(), Some(0 | 74)), "{a_out}");
    b_out.expect_code(0);
    let b_start: u128 = read_trimmed(&dir.path().join("b-start")).parse().unwrap();
    assert!(
        b_start > last_stamp(&dir.path().join("a-beats")),
        "B's command started while A's ran\nA: {a_out}\nB: {b_out}"
    );
    assert_eq!(
        read_trimmed(&dir.path().join("b-holder")),
        read_trimmed(&dir.path().join("b-token")),
        "B's lock is on the master the sentinels name\nB: {b_out}"
    );
}

/// The fence keeps growing across a failover, also when the new master lost the counter:
/// the acquire script's floor is the server's clock.
#[test]
fn the_fence_grows_across_a_failover() {
    let mut set = SentinelSet::start(1);
    let dir = scratch();
    let run = |set: &SentinelSet, name: &str| {
        set.wrapper("f")
            .sh(&format!("echo $REDLOCK_FENCE > {name}"))
            .current_dir(dir.path())
            .run()
            .expect_code(0);
        read_trimmed(&dir.path().join(name)).parse::<u64>().unwrap()
    };
    let first = run(&set, "f1");
    let old = set.master_port();
    let old_index = set.index(old);
    set.nodes[old_index].kill();
    let new = set.wait_for_failover(old);
    let second = run(&set, "f2");
    assert!(
        second > first,
        "fence after the failover {second} > {first}"
    );
    // The counter lost (a replica that missed it): the clock floor still wins.
    set.node(new).cli(&["DEL", "{redlock:f}:fence"]);
    let third = run(&set, "f3");
    assert!(
        third > second,
        "fence without its counter {third} > {second}"
    );
}

#[test]
fn bad_sentinel_urls_are_usage_errors_without_secrets() {
    let dir = scratch();
    for (url, why) in [
        ("redis+sentinel://:Zq9Xw7Jm@/mymaster", "no sentinel hosts"),
        ("redis+sentinel://:Zq9Xw7Jm@127.0.0.1:1", "no master name"),
        ("redis-sentinel://:Zq9Xw7Jm@127.0.0.1:70000/m", "bad port"),
        (
            "REDIS+SENTINEL://:Zq9Xw7Jm@127.0.0.1/m/x",
            "database must be a number",
        ),
        (
            "redis+sentinel://127.0.0.1/m?sentinel_password=Zq9Xw7Jm&bogus=1",
            "an unknown query parameter",
        ),
        (
            "redis+sentinel://127.0.0.1/m?sentinel_password=Zq9@Xw7Jm&bogus=1",
            "an unknown query parameter",
        ),
    ] {
        let out = Wrapper::new()
            .args(["--redis", url, "--key", "k"])
            .sh("touch ran")
            .current_dir(dir.path())
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(why), "{url}: {line}");
        assert!(!line.contains("Zq9") && !line.contains("Xw7"), "{line}");
        assert!(!dir.path().join("ran").exists());
    }
}

/// Data nodes and sentinels with passwords of their own: the right ones (from files) work,
/// a wrong one is 69 and no message shows any of them.
#[test]
fn passwords_for_data_nodes_and_sentinels_work_and_never_show() {
    let set = SentinelSet::start_with(sentinel::Options {
        replicas: 1,
        data_password: Some("Dq7Pw3Xk"),
        sentinel_password: Some("Sq5Lm8Rv"),
        tls: None,
    });
    let dir = scratch();
    let ports: Vec<u16> = set.sentinels.iter().map(|s| s.port()).collect();
    let hosts = sentinel_url(&ports);
    fs::write(dir.path().join("data-pw"), "Dq7Pw3Xk\n").unwrap();
    fs::write(dir.path().join("sentinel-pw"), "Sq5Lm8Rv\n").unwrap();
    let with_files = format!(
        "{hosts}?sentinel_password_file={}",
        dir.path().join("sentinel-pw").display()
    );
    let out = Wrapper::new()
        .args(["-v", "--redis", &with_files, "--key", "job"])
        .arg("--password-file")
        .arg(dir.path().join("data-pw"))
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("ran").exists(), "{out}");
    // In the URL itself.
    let inline = hosts.replace("redis+sentinel://", "redis+sentinel://:Dq7Pw3Xk@")
        + "?sentinel_password=Sq5Lm8Rv";
    let out = Wrapper::new()
        .args(["-v", "--redis", &inline, "--key", "job"])
        .sh("true")
        .run();
    out.expect_code(0);
    for secret in ["Dq7", "Pw3", "Sq5", "Lm8"] {
        assert!(!out.stderr.contains(secret), "{out}");
    }

    for (url, what) in [
        // Wrong sentinel password.
        (
            hosts.replace("redis+sentinel://", "redis+sentinel://:Dq7Pw3Xk@")
                + "?sentinel_password=Wz4Qy6Tn",
            "refused authentication",
        ),
        // Wrong data password.
        (
            hosts.replace("redis+sentinel://", "redis+sentinel://:Wz4Qy6Tn@")
                + "?sentinel_password=Sq5Lm8Rv",
            "refused authentication",
        ),
    ] {
        let out = Wrapper::new()
            .args(["-v", "--redis", &url, "--key", "job"])
            .sh("touch wrong")
            .current_dir(dir.path())
            .run();
        out.expect_code(69);
        out.expect_stderr_contains(what);
        for secret in ["Dq7", "Pw3", "Sq5", "Lm8", "Wz4", "Qy6"] {
            assert!(!out.stderr.contains(secret), "{secret} shown\n{out}");
        }
        assert!(!dir.path().join("wrong").exists());
    }
    // No sentinel password: said to be missing (not refused), and where it goes.
    let out = Wrapper::new()
        .args([
            "--redis",
            &inline.replace("?sentinel_password=Sq5Lm8Rv", ""),
        ])
        .args(["--key", "job"])
        .sh("touch wrong")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    for what in [
        "requires a password and none was given (NOAUTH)",
        "sentinel_password=PASSWORD",
        "sentinel_password_file=FILE",
    ] {
        assert!(line.contains(what), "{what}: {line}");
    }
    assert!(!line.contains("refused"), "{line}");
    assert!(!line.contains("Dq7") && !line.contains("Pw3"), "{line}");
    assert!(!dir.path().join("wrong").exists());
    // The sentinels themselves refuse a client without the password.
    assert!(cli_at(ports[0], None, &["SENTINEL", "MASTERS"]).is_none());
}

/// A manual failover leaves the old master up, and still a master for seconds, but its
/// replicas move to the new one: the holder's renewals there get too few acknowledgements
/// (later READONLY, once it is demoted), so it asks the sentinels again and renews on the new
/// master (the key was acknowledged by a replica), and the command goes on.
#[test]
fn a_demoted_master_sends_the_renewal_to_the_new_one() {
    let set = SentinelSet::start(2);
    let dir = scratch();
    let mut a = set
        .wrapper("job")
        .args([
            "--ttl",
            "6s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "300ms",
        ])
        .sh(&beating("a-beats"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let old = set.master_port();
    assert_eq!(
        cli_at(
            set.sentinels[0].port(),
            None,
            &["SENTINEL", "FAILOVER", MASTER_NAME]
        )
        .as_deref(),
        Some("OK")
    );
    let new = set.wait_for_failover(old);
    // A renewal on the new master puts its TTL back up.
    let mut last = set.node(new).pttl(KEY);
    a.wait_until(secs(15), "a renewal on the new master", || {
        let now = set.node(new).pttl(KEY);
        let renewed = now > last;
        last = now;
        renewed
    });
    assert!(a.is_running(), "{}", a.describe());
    fs::write(dir.path().join("go"), "").unwrap();
    a.wait(secs(15)).expect_code(0);
}

/// `rediss+sentinel://`: TLS to the data nodes that the sentinels name (their TLS ports),
/// checked against `--tls-ca-cert`; without it the certificate is refused (69).
#[test]
fn rediss_sentinel_uses_tls_to_the_master() {
    let pki = crate::common::tls::Pki::new();
    // Only the Redis 7.0 build here has TLS; the probe says SKIPPED on the others.
    if crate::common::tls::TlsServer::start(&pki, false).is_none() {
        return;
    }
    let set = SentinelSet::start_with(sentinel::Options {
        replicas: 1,
        tls: Some(&pki),
        ..sentinel::Options::default()
    });
    let dir = scratch();
    let url = set.url().replace("redis+sentinel://", "rediss+sentinel://");
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "job", "--hold-at-least", "30s"])
        .arg("--tls-ca-cert")
        .arg(pki.ca())
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("ran").exists());
    assert!(set.nodes[0].exists(KEY), "the lock is on the master\n{out}");

    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "other"])
        .sh("touch ran-2")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    assert!(!dir.path().join("ran-2").exists());
    // Plain text to a TLS port gets nowhere either.
    let out = Wrapper::new()
        .args([
            "--redis",
            &set.url(),
            "--key",
            "other",
            "--connect-timeout",
            "2s",
        ])
        .sh("touch ran-3")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    assert!(!dir.path().join("ran-3").exists());
}

/// Without `--min-replicas` nothing fails on the old master after a manual failover: it stays
/// up and takes renewals until the sentinels demote it (seconds later). The holder asks the
/// sentinels again every second, so its renewals move to the new master before the lock
/// expires there, and the command goes on.
#[test]
fn renewals_follow_a_manual_failover_without_min_replicas() {
    let set = SentinelSet::start(1);
    let dir = scratch();
    let mut a = set
        .wrapper("job")
        .args(["--ttl", "2s"])
        .sh(&beating("a-beats"))
        .current_dir(dir.path())
        .spawn();
    a.child_pid(&dir.path().join("started"), secs(15));
    let old = set.master_port();
    assert_eq!(
        cli_at(
            set.sentinels[0].port(),
            None,
            &["SENTINEL", "FAILOVER", MASTER_NAME]
        )
        .as_deref(),
        Some("OK")
    );
    let new = set.wait_for_failover(old);
    let mut last = set.node(new).pttl(KEY);
    a.wait_until(secs(15), "a renewal on the new master", || {
        let now = set.node(new).pttl(KEY);
        let renewed = now > last;
        last = now;
        renewed
    });
    // Renewed there for a while (several ttls).
    std::thread::sleep(ms(3000));
    assert!(a.is_running(), "{}", a.describe());
    fs::write(dir.path().join("go"), "").unwrap();
    a.wait(secs(15)).expect_code(0);
}

/// Data nodes that require a password, none given: the message says so (what a single server
/// says for NOAUTH), names the master, and shows where a sentinel URL takes the password. It
/// does not say a password was refused: none was sent.
#[test]
fn a_missing_data_password_is_named_as_missing() {
    let set = SentinelSet::start_with(sentinel::Options {
        replicas: 1,
        data_password: Some("Dq7Pw3Xk"),
        ..sentinel::Options::default()
    });
    let dir = scratch();
    let out = set
        .wrapper("job")
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    assert!(!dir.path().join("ran").exists());
    assert!(!line.contains("refused"), "{line}");
    assert!(
        line.contains("requires a password and none was given (NOAUTH)"),
        "{line}"
    );
    assert!(line.contains(&format!("master '{MASTER_NAME}'")), "{line}");
    let with_password = set
        .url()
        .replace("redis+sentinel://", "redis+sentinel://:PASSWORD@");
    assert!(line.contains(&with_password), "{line}");
    assert!(line.contains("--password-file"), "{line}");
    assert!(!line.contains("Dq7"), "{line}");
}
