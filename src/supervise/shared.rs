//! What every part of the supervisor shares: the run's context ([`Run`]), the lock as held
//! ([`Held`]), and two helpers. The parts use this file, never `mod.rs`, which only drives
//! them.

use std::future::Future;
use std::time::Duration;

use crate::config::RunConfig;
use crate::lease::{Lease, Stamp};
use crate::lock::Token;
use crate::report::Reporter;

/// See [`beside`].
const YIELDS_BEFORE_WORK: usize = 2;

/// Pause between renewal attempts after a failed one (and, at the least, between acquire
/// attempts that failed in a way worth retrying).
pub(super) const RENEW_RETRY: Duration = Duration::from_millis(100);

/// What every step of one run works with: its settings, its lock, and where its messages go.
pub(super) struct Run<'a, L> {
    pub(super) cfg: &'a RunConfig,
    pub(super) lock: &'a L,
    pub(super) report: &'a Reporter,
}

impl<L> Clone for Run<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for Run<'_, L> {}

/// The lock as held by this run.
pub(super) struct Held {
    /// The token that won the lock (the backend's, from the grant).
    pub(super) token: Token,
    pub(super) lease: Lease,
    /// Heartbeats count from here, like the lease.
    pub(super) counted_from: Stamp,
    pub(super) fence: u64,
    /// When the acquire's reply arrived: `--hold-at-least` counts from here, which is no
    /// earlier than the server's SET.
    pub(super) acquired: Stamp,
    pub(super) waited: Duration,
    /// The servers that did not grant (Redlock), by name: told already, or never held it.
    pub(super) absent: Vec<String>,
}

/// Await `request` (a call to Redis) while `work` runs: the request goes out first, so
/// `work` (blocking for a few hundred microseconds: making or removing the command's cgroup
/// and guard) overlaps the round trip instead of adding to it. Only the timing depends on
/// the yields: a request is handed to the connection's task by its first or second poll
/// (the first poll of a new connection waits for it to be writable), and that task writes it
/// before the next yield ends (seen with strace).
pub(super) async fn beside<T>(request: impl Future<Output = T>, work: impl FnOnce()) -> T {
    let (reply, ()) = tokio::join!(request, async {
        for _ in 0..YIELDS_BEFORE_WORK {
            tokio::task::yield_now().await;
        }
        work();
    });
    reply
}

pub(super) fn earliest(a: Option<Stamp>, b: Option<Stamp>) -> Option<Stamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn earliest_ignores_missing() {
        let a = Stamp::now();
        let b = a.checked_add(Duration::from_secs(1));
        assert_eq!(earliest(Some(a), b), Some(a));
        assert_eq!(earliest(None, b), b);
        assert_eq!(earliest(None, None), None);
    }
}
