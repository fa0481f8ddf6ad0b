//! The test harness itself (tests/common).

use crate::common::*;

#[test]
fn harness_sanity_server_restart_keeps_the_port() {
    let mut redis = RedisServer::start();
    let port = redis.port();
    redis.cli(&["SET", "x", "1"]);
    redis.restart();
    assert_eq!(redis.port(), port);
    assert_eq!(
        redis.dbsize(),
        0,
        "restart without persistence starts empty"
    );
}

/// `version()` and `is_valkey()` (asked with INFO server) agree with the binary's `--version`
/// (`Redis server v=7.0.15 ...`, `Valkey server v=9.1.2 ...`).
#[test]
fn harness_sanity_server_version_matches_the_binary() {
    let redis = RedisServer::start();
    let out = std::process::Command::new(redis_server_bin())
        .arg("--version")
        .output()
        .expect("redis-server --version");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let (a, b, c) = redis.version();
    assert!(
        said.contains(&format!(" v={a}.{b}.{c} ")),
        "INFO server says {a}.{b}.{c}, --version says {said}"
    );
    assert_eq!(redis.is_valkey(), said.starts_with("Valkey"), "{said}");
    assert!(redis.redis_compat_version() >= (6, 2, 0), "{said}");
}
