//! Fitting in: `status`, environment configuration, silence on success, JSON logs.

mod common;

use std::fs;
use std::time::Duration;

use common::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The value of `"field":` in a flat JSON object, as raw text (strings keep their quotes).
fn json_field<'a>(json: &'a str, field: &str) -> &'a str {
    let needle = format!("\"{field}\":");
    let start = json
        .find(&needle)
        .unwrap_or_else(|| panic!("no {field:?} in {json}"))
        + needle.len();
    let rest = &json[start..];
    let end = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.find('"').expect("closing quote") + 2
    } else {
        rest.find([',', '}']).expect("end of value")
    };
    &rest[..end]
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
    let json = free.stdout.trim();
    assert_eq!(json_field(json, "held"), "false", "{free}");
    assert_eq!(json_field(json, "key"), "\"redlock:job\"");
    for field in ["host", "pid", "ttl_ms", "fence"] {
        assert_eq!(json_field(json, field), "null", "{field} when free: {json}");
    }

    let mut holder = Wrapper::on(&redis, "job")
        .sh("echo $REDLOCK_FENCE > fence; echo $$ > started; sleep 30")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));
    let fence = fs::read_to_string(dir.path().join("fence")).unwrap();

    let held = status(&redis, &["--key", "job", "--json"]);
    held.expect_code(0);
    let json = held.stdout.trim();
    assert_eq!(json.lines().count(), 1, "one JSON object: {json}");
    assert_eq!(json_field(json, "held"), "true", "{held}");
    assert_eq!(json_field(json, "foreign"), "false");
    assert_eq!(json_field(json, "host"), format!("\"{}\"", hostname()));
    assert_eq!(json_field(json, "pid"), holder.pid.to_string());
    assert_eq!(json_field(json, "fence"), fence.trim());
    let ttl: u64 = json_field(json, "ttl_ms").parse().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "ttl_ms {ttl}");
    assert!(json_field(json, "command").contains("sleep 30"), "{json}");

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
    assert_eq!(json_field(after.stdout.trim(), "held"), "false", "{after}");
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
    let json = out.stdout.trim();
    assert_eq!(json_field(json, "held"), "true", "{out}");
    assert_eq!(json_field(json, "foreign"), "true", "{out}");
    assert_eq!(json_field(json, "host"), "null", "{out}");
    assert_eq!(json_field(json, "pid"), "null", "{out}");
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

#[test]
fn every_setting_can_come_from_the_environment() {
    let redis = RedisServer::start();
    let dir = scratch();
    let out = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_TTL", "2s")
        .env("REDLOCK_HEARTBEAT", "500ms")
        .env("REDLOCK_GRACE", "200ms")
        .args(["-c", "echo \"$REDLOCK_KEY $REDLOCK_TTL_MS\" > seen"])
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert_eq!(
        fs::read_to_string(dir.path().join("seen")).unwrap().trim(),
        "p:from-env 2000"
    );

    redis.cli(&["set", "p:from-env", "other", "px", "60000"]);
    let busy = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_CONFLICT_EXIT_CODE", "9")
        .env("REDLOCK_WAIT", "200ms")
        .env("REDLOCK_QUIET", "true")
        .args(["--", "true"])
        .run();
    busy.expect_code(9);
    assert_eq!(busy.stderr, "", "REDLOCK_QUIET silences the busy line");

    // A flag wins over its variable.
    let flag = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_CONFLICT_EXIT_CODE", "9")
        .args(["-E", "11", "--", "true"])
        .run();
    flag.expect_code(11);

    // Bad values from the environment are usage errors too.
    let bad = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "x")
        .env("REDLOCK_TTL", "soon")
        .args(["--", "true"])
        .run();
    bad.expect_code(2);
    bad.expect_one_line();
}

#[test]
fn a_successful_run_prints_nothing_and_quiet_silences_busy() {
    let redis = RedisServer::start();
    let ok = Wrapper::on(&redis, "cron").args(["--", "true"]).run();
    ok.expect_code(0);
    assert_eq!(ok.stderr, "", "nothing on stderr on success: {ok}");
    assert_eq!(ok.stdout, "");

    let quiet_ok = Wrapper::on(&redis, "cron").args(["-q", "--", "true"]).run();
    quiet_ok.expect_code(0);
    assert_eq!(quiet_ok.stderr, "");

    redis.cli(&["set", "redlock:cron", "other", "px", "60000"]);
    let busy = Wrapper::on(&redis, "cron").args(["-q", "--", "true"]).run();
    busy.expect_code(75);
    assert_eq!(busy.stderr, "", "-q: nothing for a busy lock: {busy}");
    // Without -q the busy lock is one line; real problems are printed even with -q.
    let loud = Wrapper::on(&redis, "cron").args(["--", "true"]).run();
    loud.expect_code(75);
    loud.expect_one_line();
    let port = free_port();
    let down = Wrapper::new()
        .args([
            "-q",
            "--key",
            "k",
            "--redis",
            &format!("redis://127.0.0.1:{port}"),
        ])
        .args(["--", "true"])
        .run();
    down.expect_code(69);
    down.expect_one_line();
}

#[test]
fn json_log_format_is_one_object_per_line() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "j")
        .args(["-v", "--log-format", "json", "--", "true"])
        .run();
    out.expect_code(0);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.len() >= 3, "acquired, spawned, released: {out}");
    for line in &lines {
        assert!(
            line.starts_with("{\"time\":\"") && line.ends_with('}'),
            "{line}"
        );
        assert_eq!(json_field(line, "key"), "\"redlock:j\"", "{line}");
    }
    assert!(out.stderr.contains("\"event\":\"acquired\""), "{out}");
    assert!(out.stderr.contains("\"event\":\"released\""), "{out}");
}
