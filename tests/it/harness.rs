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
