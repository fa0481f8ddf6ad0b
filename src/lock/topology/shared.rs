//! What both lock implementations (`one_master.rs` and `quorum/`) share, so that it is
//! written once: the least time for a take-back, the lock-name backstop, and how a status
//! pipeline's replies become a [`Status`] or a failure.

use std::time::Duration;

use redis::Value;

use super::server::first_error;
use crate::lock::protocol::keys::BadName;
use crate::lock::protocol::{Protocol, status};
use crate::lock::target::Target;
use crate::lock::{RedisFailure, Status};

/// The least time given to taking back a write, even when the attempt used up its bound: a
/// few round trips on a healthy network, a pause not worth the risk of a stuck key.
pub const UNDO_AT_LEAST: Duration = Duration::from_millis(50);

/// The protocol (mutex, `--limit` semaphore or `--shared` hold) of `target`'s lock.
pub fn protocol_for(target: &Target) -> Result<Protocol, RedisFailure> {
    named(
        target,
        Protocol::new(&target.key, target.limit, target.shared),
    )
}

/// A protocol built for `target`'s lock name. config.rs refuses bad names before Redis is
/// contacted; this is a backstop.
pub fn named<T>(target: &Target, built: Result<T, BadName>) -> Result<T, RedisFailure> {
    built.map_err(|e| RedisFailure::unexpected(&target.redis_shown, format!("lock name {e}")))
}

/// The replies to the status pipeline from the server shown as `by`: the status, or a
/// failure (an error reply among them as that server's failure).
pub fn read_status(replies: Vec<Value>, by: &str) -> Result<Status, RedisFailure> {
    match status::parse(&replies) {
        Ok(Some(status)) => Ok(status),
        Ok(None) => Err(RedisFailure::unexpected_reply(
            by,
            "status",
            &Value::Array(replies),
        )),
        Err(error) => Err(first_error(std::slice::from_ref(error), by)
            .unwrap_or_else(|| RedisFailure::unexpected_reply(by, "status", error))),
    }
}
