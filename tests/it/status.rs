//! `redlock-run status`: text and JSON while held and when free, a foreign value on the key,
//! and exit 69 when Redis is unreachable.

use std::fs;

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
