//! The supervisor: acquire -> spawn -> keep the lease while the command runs -> release.
//!
//! Every change of the lock's state happens in this module, in this order, through the
//! [`Lock`] contract (the supervisor never knows which backend is behind it):
//!
//! 1. `acquire` ([`acquire`]): try until granted, the wait runs out, or a signal ends the
//!    wait. A failed attempt leaves nothing behind (the backend's promise).
//! 2. `hold` ([`hold`]): with the lock held, start the command unless the lease is already
//!    too short or a signal came first, then supervise it: a [`keeper::LeaseKeeper`] renews
//!    and says when the lease can no longer be trusted, a [`stopper::Stopper`] stops the
//!    command (SIGTERM, then SIGKILL).
//! 3. `release` (here), exactly once for every run that held the lock, on every path; it
//!    keeps the lock for `--hold-at-least` only if the command actually ran.
//! 4. The run's [`Outcome`] is reported ([`messages`]), and [`exit_for`] (a pure function,
//!    in [`outcome`]) turns it into the exit code.
//!
//! Only the token this run generated can extend or release the lock.

mod acquire;
mod backoff;
mod hold;
mod keeper;
mod messages;
mod outcome;
mod stopper;

use std::future::Future;
use std::time::Duration;

use crate::config::RunConfig;
use crate::exit::{ChildEnd, Ending};
use crate::lease::{Lease, Stamp};
use crate::lock::{self, Lock, Released, Token};
use crate::process::{Signals, Tree};
use crate::report::Reporter;

use acquire::Acquirer;
use messages::{show, show_ms, tell};
use outcome::{exit_for, Outcome, ReleaseResult, Under};

/// See [`beside`].
const YIELDS_BEFORE_WORK: usize = 2;

/// Pause between renewal attempts after a failed one (and, at the least, between acquire
/// attempts that failed in a way worth retrying).
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// How long a release is given once the lease is known lost: the compare-and-delete can then
/// only tidy up, and must not hold up the exit for a whole --connect-timeout.
const RELEASE_AFTER_LOSS: Duration = Duration::from_secs(1);

/// How a run ends, for `main`.
pub struct RunEnd {
    pub ending: Ending,
    /// The command had the terminal when it ended: a signal it died by came from the
    /// terminal in place of the wrapper's own process group, and is owed to that group.
    pub at_terminal: bool,
}

pub async fn run(cfg: &RunConfig, report: &Reporter) -> RunEnd {
    let (outcome, at_terminal) = run_outcome(cfg, report).await;
    RunEnd {
        ending: exit_for(&outcome),
        at_terminal,
    }
}

/// What every step of one run works with: its settings, its lock, and where its messages go.
struct Run<'a, L> {
    cfg: &'a RunConfig,
    lock: &'a L,
    report: &'a Reporter,
}

impl<L> Clone for Run<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for Run<'_, L> {}

/// The lock as held by this run.
struct Held {
    /// The token that won the lock (the backend's, from the grant).
    token: Token,
    lease: Lease,
    /// Heartbeats count from here, like the lease.
    counted_from: Stamp,
    fence: u64,
    /// When the acquire's reply arrived: `--hold-at-least` counts from here, which is no
    /// earlier than the server's SET.
    acquired: Stamp,
    waited: Duration,
}

async fn run_outcome(cfg: &RunConfig, report: &Reporter) -> (Outcome, bool) {
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            report.error("internal", format!("cannot install signal handlers: {e}"));
            return (Outcome::NotHeld(Ending::Software), false);
        }
    };
    // --connect-timeout bounds the whole start: connecting and the first attempt, the
    // take-back of a write whose reply never came included.
    let start = Stamp::now();
    let lock = match lock::open(&cfg.target, cfg.replicas, cfg.target.timeout).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return (Outcome::NotHeld(Ending::Unavailable), false);
        }
    };
    let run = Run {
        cfg,
        lock: &lock,
        report,
    };
    let acquirer = Acquirer::new(run, start);

    // A run that waits has the command's process tree (its cgroup and guard) made while its
    // first attempt is on its way to Redis, so that it is ready when the lock is handed over.
    // A run that does not wait makes it once the lock is granted: on a busy lock (the other
    // hosts of a cron job) it would be made and removed for nothing. The /proc mode's is
    // always made once the lock is held (see `Tree::ahead`).
    let mut tree = None;
    let waits = acquirer.waits();
    let prepare = || {
        if waits {
            tree = Tree::ahead();
        }
    };
    let held = match acquirer.acquire(prepare, &mut signals).await {
        Ok(held) => held,
        Err(ending) => return (Outcome::NotHeld(ending), false),
    };
    report.info(
        "acquired",
        format_args!(
            "acquired {} (fence {}, ttl {}) after {}",
            lock.name(),
            held.fence,
            show(cfg.ttl),
            show_ms(held.waited)
        ),
    );
    let tree = tree.unwrap_or_else(Tree::new);
    let held_end = run.hold(&held.token, &held, tree, &mut signals).await;
    let under = held_end.under;

    // The one release. --hold-at-least keeps the lock only after a command that ran: a
    // command that never started must not make the other hosts skip the job.
    let keep = match under {
        // `-c` whose shell could not find or execute the program: it never ran either.
        Under::Ran {
            end: Some(ChildEnd::Exited(126 | 127)),
            ..
        } if cfg.command.via_shell => Duration::ZERO,
        Under::Ran { .. } => cfg
            .hold_at_least
            .and_then(|hold| hold.checked_sub(Stamp::now().since(held.acquired)))
            .unwrap_or_default(),
        _ => Duration::ZERO,
    };
    // Nothing of the command runs any more; its cgroup is removed while the release is on its
    // way.
    let releasing = run.release(&held.token, keep, under.lease_lost());
    let release = beside(releasing, || drop(held_end.emptied)).await;
    let outcome = Outcome::Held { under, release };
    tell(cfg, lock.name(), &outcome, keep, report);
    (outcome, held_end.at_terminal)
}

/// Await `request` (a call to Redis) while `work` runs: the request goes out first, so
/// `work` (blocking for a few hundred microseconds: making or removing the command's cgroup
/// and guard) overlaps the round trip instead of adding to it. Only the timing depends on
/// the yields: a request is handed to the connection's task by its first or second poll
/// (the first poll of a new connection waits for it to be writable), and that task writes it
/// before the next yield ends (seen with strace).
async fn beside<T>(request: impl Future<Output = T>, work: impl FnOnce()) -> T {
    let (reply, ()) = tokio::join!(request, async {
        for _ in 0..YIELDS_BEFORE_WORK {
            tokio::task::yield_now().await;
        }
        work();
    });
    reply
}

impl<L: Lock> Run<'_, L> {
    /// The one release; `lost`: the lease is known to be gone, so the release can only tidy
    /// up.
    async fn release(self, token: &Token, keep: Duration, lost: bool) -> ReleaseResult {
        let Run { cfg, lock, report } = self;
        let within = if lost {
            cfg.target.timeout.min(RELEASE_AFTER_LOSS)
        } else {
            cfg.target.timeout
        };
        match lock.release(token, keep, within).await {
            Ok(Released::Released) => ReleaseResult::Released,
            Ok(Released::HeldByOther) => ReleaseResult::HeldByOther,
            Ok(Released::Gone) => ReleaseResult::Gone,
            Err(e) if lost => {
                report.info(
                    "release-failed",
                    format_args!(
                        "could not release {} ({e}); its lease had run out already",
                        lock.name()
                    ),
                );
                ReleaseResult::Unreachable
            }
            Err(e) => {
                report.warn(
                    "release-failed",
                    format_args!(
                        "could not release {} ({e}); it expires within {}",
                        lock.name(),
                        show(cfg.ttl)
                    ),
                );
                ReleaseResult::Unreachable
            }
        }
    }
}

fn earliest(a: Option<Stamp>, b: Option<Stamp>) -> Option<Stamp> {
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
    fn earliest_ignores_missing() {
        let a = Stamp::now();
        let b = a.checked_add(Duration::from_secs(1));
        assert_eq!(earliest(Some(a), b), Some(a));
        assert_eq!(earliest(None, b), b);
        assert_eq!(earliest(None, None), None);
    }
}
