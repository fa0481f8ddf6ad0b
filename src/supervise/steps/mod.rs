//! Holds that span several CI steps: `acquire` ([`start`]) leaves a keeper ([`keep`]) that
//! renews the lease until `release` ([`release`]), at most `--max-hold`.
//!
//! - `acquire` starts the keeper and exits once the keeper confirmed, over a pipe, that it
//!   holds the lock and recorded the hold; it prints the hold ([`output`]).
//! - The keeper takes the lock as a run does (the same acquire and wait: topologies,
//!   `--limit`, the queue, `--min-replicas`), records the hold beside the lock
//!   (`lock/protocol/hold.rs`), then renews with the run's lease keeper.
//! - `release` releases by token and reads from the hold record whether the hold was kept to
//!   the end, and if not, when and why it was lost.

mod keep;
mod output;
mod release;
mod start;

use std::time::Duration;

pub use keep::{Handshake, keep};
pub use release::release;
pub use start::start;

/// The keeper's environment: the handshake pipe's descriptor.
const KEEPER_FD: &str = "REDLOCK_KEEPER_FD";

/// The keeper's environment: its id, recorded with the hold.
const KEEPER_ID: &str = "REDLOCK_KEEPER_ID";

/// A server time (ms since 1970) as RFC 3339, UTC.
fn when(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || ms.to_string(),
            |t| {
                t.round(jiff::Unit::Second)
                    .map_or_else(|_| t.to_string(), |t| t.to_string())
            },
        )
}

/// A duration as the user wrote it (`1h`, `90s`).
fn describe(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
