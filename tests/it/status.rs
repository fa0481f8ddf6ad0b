//! `redlock-run status`: text and JSON while held and when free, a foreign value on the key,
//! exit 69 when Redis is unreachable, and stdout a pipe nobody reads (`status --key k |
//! true`): the write fails with EPIPE and the wrapper ends quietly with 141 (128 + SIGPIPE),
//! as `cat` or `ls | head` do, instead of panicking (SIGABRT, 134, under panic=abort).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::common::*;

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn status(redis: &RedisServer, args: &[&str]) -> Outcome {
    Wrapper::new()
        .args(["status", "--redis", &redis.url()])
        .args(args)
        .run()
}

#[test]
fn status_json_while_held_and_when_free() {
    let redis = RedisServer::start();
    let dir = scratch();

    let free = status(&redis, &["--key", "job", "--json"]);
    free.expect_code(0);
    let json = parse_json(&free.stdout);
    assert_eq!(json["held"], false, "{free}");
    assert_eq!(json["key"], "redlock:job");
    for field in ["host", "pid", "ttl_ms", "fence"] {
        assert!(json[field].is_null(), "{field} when free: {json}");
    }

    let mut holder = Wrapper::on(&redis, "job")
        .arg("--record-args")
        .sh("echo $REDLOCK_FENCE > fence; echo $$ > started; sleep 30")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));
    let fence: u64 = read_trimmed(&dir.path().join("fence")).parse().unwrap();

    let held = status(&redis, &["--key", "job", "--json"]);
    held.expect_code(0);
    assert_eq!(
        held.stdout.trim().lines().count(),
        1,
        "one JSON object: {held}"
    );
    let json = parse_json(&held.stdout);
    assert_eq!(json["held"], true, "{held}");
    assert_eq!(json["foreign"], false);
    assert_eq!(json["host"], hostname().as_str());
    assert_eq!(json["pid"], holder.pid);
    assert_eq!(json["fence"], fence);
    let ttl = json["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl > 0 && ttl <= 30_000, "ttl_ms {ttl}");
    assert!(
        json["command"]
            .as_str()
            .is_some_and(|c| c.contains("sleep 30")),
        "{json}"
    );

    let text = status(&redis, &["--key", "job"]);
    text.expect_code(0);
    assert!(
        text.stdout
            .contains(&format!("held by {} pid {}", hostname(), holder.pid)),
        "{text}"
    );

    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait(secs(10));
    let after = status(&redis, &["--key", "job", "--json"]);
    assert_eq!(parse_json(&after.stdout)["held"], false, "{after}");
}

#[test]
fn status_does_not_mistake_a_foreign_value_for_ours() {
    let redis = RedisServer::start();
    // Another client's lock on the raw key, next to stale holder info of an earlier run.
    redis.cli(&["set", "batch", "someone-elses-token", "px", "60000"]);
    redis.cli(&[
        "hset",
        "{batch}:holder",
        "token",
        "old",
        "host",
        "ghost",
        "pid",
        "1",
    ]);
    let out = status(&redis, &["--key", "batch", "--prefix", "", "--json"]);
    out.expect_code(0);
    let json = parse_json(&out.stdout);
    assert_eq!(json["held"], true, "{out}");
    assert_eq!(json["foreign"], true, "{out}");
    assert!(json["host"].is_null(), "{out}");
    assert!(json["pid"].is_null(), "{out}");
    assert_eq!(redis.get("batch").as_deref(), Some("someone-elses-token"));
}

#[test]
fn status_exits_69_when_redis_is_unreachable() {
    let port = free_port();
    let out = Wrapper::new()
        .args([
            "status",
            "--key",
            "k",
            "--redis",
            &format!("redis://127.0.0.1:{port}"),
        ])
        .run();
    out.expect_code(69);
    out.expect_one_line();
}

/// Runs `redlock-run status --key k --redis URL [extra]` with stdout the write end of a pipe
/// whose read end is already closed. Returns the exit status and stderr.
fn status_into_closed_pipe(server: &RedisServer, extra: &[&str]) -> (ExitStatus, String) {
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    // No reader from the start: the wrapper's first write to stdout fails with EPIPE.
    drop(read_end);
    let mut cmd = Command::new(wrapper_bin());
    cmd.args(["status", "--key", "k", "--redis", &server.url()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("REDLOCK_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("REDLOCK_CONFIG", "");
    // `cmd` owns the write end; dropping it with `cmd` leaves the child the only writer.
    let mut child = cmd.spawn().expect("spawn redlock-run");
    drop(cmd);
    let mut status = None;
    let finished = poll_until(Duration::from_secs(30), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redlock-run status did not exit within 30 s");
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.unwrap(), stderr)
}

fn assert_quiet_141(status: ExitStatus, stderr: &str) {
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert_eq!(
        (status.code(), status.signal()),
        (Some(141), None),
        "status {status:?}, stderr: {stderr}"
    );
    assert_eq!(stderr, "", "stderr must stay empty");
}

#[test]
fn status_into_a_closed_pipe_exits_141_quietly() {
    let server = RedisServer::start();
    let (status, stderr) = status_into_closed_pipe(&server, &[]);
    assert_quiet_141(status, &stderr);
    let (status, stderr) = status_into_closed_pipe(&server, &["--json"]);
    assert_quiet_141(status, &stderr);
}

/// The holder info is written by another host: a command or key with control characters
/// (a newline, an escape sequence) is shown escaped, on one line, never sent raw to the
/// terminal.
#[test]
fn status_text_escapes_what_other_hosts_wrote() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut holder = Wrapper::on(&redis, "k")
        .arg("--record-args")
        .sh("touch held; sleep 30\n# \x1b[31mred")
        .current_dir(dir.path())
        .spawn();
    holder.wait_for_file(&dir.path().join("held"), secs(10));
    let out = Wrapper::new()
        .args(["status", "--redis", &redis.url(), "--key", "k"])
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout.lines().count(), 1, "{out}");
    assert!(!out.stdout.contains('\x1b'), "{out}");
    assert!(out.stdout.contains("\\n"), "{out}");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
}

/// The options of a run may come before `status` too (`alias rl='redlock-run --redis R'`,
/// then `rl status --key k`), as git's and kubectl's global options do; a program named
/// `status` still runs after `--`.
#[test]
fn options_before_status_belong_to_status() {
    let redis = RedisServer::start();
    let dir = scratch();
    let url = redis.url();
    let mut holder = Wrapper::on(&redis, "k")
        .sh("touch held; sleep 30")
        .current_dir(dir.path())
        .spawn();
    holder.wait_for_file(&dir.path().join("held"), secs(10));
    let held_by = format!("held by {} pid {}", hostname(), holder.pid);
    let forms: &[&[&str]] = &[
        &["--redis", &url, "status", "--key", "k"],
        &["--redis", &url, "--key", "k", "status"],
        &["--key", "k", "status", "--redis", &url],
        &[
            "--log-format",
            "json",
            "status",
            "--redis",
            &url,
            "--key",
            "k",
        ],
        &["-v", "--redis", &url, "status", "--key", "k"],
        &[
            "-q", "--ttl", "1m", "--wait", "10s", "-r", &url, "status", "-k", "k",
        ],
        &[
            "--redis", &url, "--prefix", "redlock:", "status", "--key", "k",
        ],
    ];
    for args in forms {
        let out = Wrapper::new().args(*args).current_dir(dir.path()).run();
        out.expect_code(0);
        assert!(out.stdout.contains(&held_by), "{args:?}:\n{out}");
    }
    let json = Wrapper::new()
        .args(["-r", &url, "-k", "k", "status", "--json"])
        .run();
    json.expect_code(0);
    assert_eq!(parse_json(&json.stdout)["held"], true, "{json}");

    // The same option before and after `status`: the one after it wins, as in git.
    let out = Wrapper::new()
        .args(["--key", "other", "--redis", &url, "status", "--key", "k"])
        .run();
    out.expect_code(0);
    assert!(out.stdout.contains(&held_by), "{out}");

    // A run's command named `status` still runs after `--` (here: not found, 127).
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "free", "--", "status"])
        .current_dir(dir.path())
        .run();
    out.expect_code(127);
    // -c with `status` is no run and no status: a usage error, not a run of `status`.
    let out = Wrapper::new()
        .args(["--redis", &url, "-c", "true", "status", "--key", "k"])
        .run();
    out.expect_code(2);
    out.expect_one_line();
    holder.signal(nix::sys::signal::Signal::SIGTERM);
}

/// `status` on a key that holds something else (a hash where the lock goes, a set where its
/// holder record goes) says so in words, not with Redis's raw WRONGTYPE: exit 69, one line.
#[test]
fn status_of_a_key_of_another_type_says_what_is_wrong() {
    let redis = RedisServer::start();
    redis.cli(&["hset", "redlock:k", "a", "b"]);
    redis.cli(&["set", "redlock:j", "x"]);
    redis.cli(&["sadd", "{redlock:j}:holder", "x"]);
    for key in ["k", "j"] {
        let out = status(&redis, &["--key", key]);
        out.expect_code(69);
        out.expect_one_line();
        assert!(!out.stderr.contains("WRONGTYPE"), "{out}");
        out.expect_stderr_contains("not a redlock-run lock");
        out.expect_stderr_contains("--prefix");
    }
}
