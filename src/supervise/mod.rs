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
//!    keeps the lock for `--hold-at-least` only if the command actually ran, and writes the
//!    run record ([`once`]) for a command that started. With `--once-per`, a run whose
//!    command already succeeded in this period releases right after the acquire instead.
//! 4. The run's [`Outcome`] is reported ([`messages`]), and [`exit_for`] (a pure function,
//!    in [`outcome`]) turns it into the exit code.
//!
//! Only the token that won the lock (the grant's) can extend or release it.

mod acquire;
mod backoff;
mod hold;
mod keeper;
mod messages;
mod observe;
mod once;
mod outcome;
mod shared;
mod steps;
mod stopper;

pub use steps::{Handshake, arguments, keep, release, start};

use std::time::Duration;

use crate::config::RunConfig;
use crate::exit::Ending;
use crate::lease::Stamp;
use crate::lock::{self, Finished, Lock, Released, Token};
use crate::process::{Signals, Tree};
use crate::report::Reporter;

use acquire::Acquirer;
use messages::{show, show_ms, tell};
use observe::Observer;
use outcome::{Outcome, ReleaseResult, Under, exit_for};
use shared::{Run, beside};

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
    let observer = Observer::new(cfg);
    let (outcome, at_terminal) = run_outcome(cfg, report, &observer).await;
    let ending = exit_for(&outcome);
    // After the release: --metrics-file, the final --ping, the `finished` event.
    observer.finish(&outcome, ending, report);
    RunEnd {
        ending,
        at_terminal,
    }
}

async fn run_outcome(cfg: &RunConfig, report: &Reporter, obs: &Observer<'_>) -> (Outcome, bool) {
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
        Err(ending) => {
            obs.read_record(&lock).await;
            return (Outcome::NotHeld(ending), false);
        }
    };
    obs.acquired(held.fence, held.waited);
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
    // --once-per: with the lock held, the last success decides (once.rs).
    if let Some(once) = &cfg.once_per {
        let done = run.done_already(once).await;
        if !matches!(done, Ok(None)) {
            let _ = run.release(&held.token, Duration::ZERO, false, None).await;
        }
        match done {
            Ok(None) => {}
            Ok(Some((last, now_ms))) => {
                obs.last_success(last.ended_ms);
                report.skipped(once::skipped_text(lock.name(), once, &last, now_ms));
                return (Outcome::NotHeld(Ending::Done(cfg.done_exit_code)), false);
            }
            Err(e) => {
                report.error(
                    "unavailable",
                    format_args!(
                        "could not read the run record of {} for --once-per ({e}); not running \
                         the command",
                        lock.name()
                    ),
                );
                return (Outcome::NotHeld(Ending::Unavailable), false);
            }
        }
    }
    let tree = tree.unwrap_or_else(Tree::new);
    obs.starting(report);
    let spawned = Stamp::now();
    let held_end = run.hold(&held.token, &held, tree, &mut signals).await;
    let under = held_end.under;
    let record = once::finished(cfg, &under, held.fence, Stamp::now().since(spawned));

    // The one release. --hold-at-least keeps the lock only after a command that ran: a
    // command that never started must not make the other hosts skip the job.
    let keep = match under {
        // `-c` whose shell could not find or execute the program: it never ran either.
        Under::Ran { end, .. } if once::never_ran(cfg, end.as_ref()) => Duration::ZERO,
        Under::Ran { .. } => cfg
            .hold_at_least
            .and_then(|hold| hold.checked_sub(Stamp::now().since(held.acquired)))
            .unwrap_or_default(),
        _ => Duration::ZERO,
    };
    // Nothing of the command runs any more; its cgroup is removed while the release is on its
    // way.
    let releasing = run.release(&held.token, keep, under.lease_lost(), record.as_ref());
    let release = beside(releasing, || drop(held_end.emptied)).await;
    let outcome = Outcome::Held { under, release };
    tell(cfg, lock.name(), &outcome, keep, report);
    obs.read_record(&lock).await;
    (outcome, held_end.at_terminal)
}

impl<L: Lock> Run<'_, L> {
    /// The one release; `lost`: the lease is known to be gone, so the release can only tidy
    /// up. `record`: the run record, written with the release while the token holds.
    async fn release(
        self,
        token: &Token,
        keep: Duration,
        lost: bool,
        record: Option<&Finished>,
    ) -> ReleaseResult {
        let Run { cfg, lock, report } = self;
        let within = if lost {
            cfg.target.timeout.min(RELEASE_AFTER_LOSS)
        } else {
            cfg.target.timeout
        };
        match lock.release(token, keep, record, within).await {
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
            // The command ran under a valid lease: its exit code stands, as for a release
            // without --hold-at-least, and the warning says what the bound became.
            Err(e) if !keep.is_zero() => {
                report.warn(
                    "release-failed",
                    format_args!(
                        "could not release {} ({e}), so the --hold-at-least bound ({} more) \
                         may not have been written: the lock then expires by its --ttl \
                         instead, within {}",
                        lock.name(),
                        show_ms(keep),
                        show(cfg.ttl)
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
