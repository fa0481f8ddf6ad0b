//! The keeper: the process `acquire` leaves behind. It takes the lock as a run does, records
//! the hold, tells `acquire` over the handshake pipe, detaches its stdio, and renews the lease
//! until the hold ends: released by `release` (it then ends quietly), lost (a renewal found
//! the token gone, or could not be confirmed before the lease ended), --max-hold reached, or a
//! signal (INT, TERM, HUP, QUIT: a CI runner ending the job). It never renews past its lease
//! nor past --max-hold, and writes how the hold ended into the hold record, where `release`
//! and `status` can read it (its stderr is /dev/null by then).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::config::AcquireConfig;
use crate::exit::Ending;
use crate::lease::{Stamp, Standing};
use crate::lock::{self, Finished, HoldChange, HoldRecord, HoldState, Lock, RunOutcome, Token};
use crate::process::Signals;
use crate::report::Reporter;

use super::super::acquire::Acquirer;
use super::super::keeper::LeaseKeeper;
use super::super::outcome::LeaseEnd;
use super::super::shared::{Held, Run, earliest};
use super::{KEEPER_FD, KEEPER_ID, describe};
use crate::process::hostname;

/// Longest nap between lease checks (tokio's timers stop during a system suspend; waking this
/// often bounds how late one is noticed), as for a run.
const MAX_NAP: Duration = Duration::from_millis(200);

/// How long the keeper's last writes (the hold record's end, the release) are given once the
/// lease is known lost or unconfirmed: they can only tidy up.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// The keeper's end of the handshake with `acquire`: the pipe it reports the hold on, and the
/// id `acquire` gave it (recorded with the hold, so that a `release` on this host can tell this
/// process from another that has its pid since).
pub struct Handshake {
    pipe: File,
    id: String,
}

impl Handshake {
    /// Set by `acquire` in the keeper's environment; `None` in any other process.
    pub fn from_env() -> Option<Handshake> {
        let fd: i32 = std::env::var(KEEPER_FD).ok()?.parse().ok()?;
        let id = std::env::var(KEEPER_ID).ok()?;
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return None;
        }
        // SAFETY: the descriptor was inherited for this purpose (checked open above) and is
        // owned by nothing else in this process.
        let pipe = unsafe { File::from_raw_fd(fd) };
        Some(Handshake { pipe, id })
    }

    /// Tell `acquire` the hold. An error: `acquire` is gone, and nobody has the token.
    fn confirm(&mut self, fence: u64, token: &Token) -> std::io::Result<()> {
        self.pipe
            .write_all(format!("held {fence} {}\n", token.as_str()).as_bytes())
    }
}

/// How the keeping ended.
enum KeepEnd {
    /// A renewal found the token gone (deleted, expired, or taken; by `break` if it says
    /// so).
    Taken(Option<lock::Broken>),
    /// No renewal could be confirmed before the lease's end (less --grace).
    Unconfirmed(String),
    MaxHold,
    Signal(Signal),
}

pub async fn keep(cfg: &AcquireConfig, mut handshake: Handshake, report: &Reporter) -> Ending {
    let run_cfg = &cfg.run;
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            report.error("internal", format!("cannot install signal handlers: {e}"));
            return Ending::Software;
        }
    };
    let start = Stamp::now();
    let lock = match lock::open(&run_cfg.target, run_cfg.replicas, run_cfg.target.timeout).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    let run = Run {
        cfg: run_cfg,
        lock: &lock,
        report,
    };
    // Waiting, busy and failure messages reach the step's log: stderr is still the one
    // `acquire` was started with.
    let held = match Acquirer::new(run, start).acquire(|| {}, &mut signals).await {
        Ok(held) => held,
        Err(ending) => return ending,
    };
    let within = run_cfg
        .target
        .timeout
        .min(Stamp::now().until(held.lease.stop_at()))
        .max(Duration::from_millis(10));
    let begin = HoldChange::Begin {
        max_hold: cfg.max_hold,
        host: hostname(),
        pid: std::process::id(),
        id: handshake.id.clone(),
        fence: held.fence,
        limit: run_cfg.target.limit,
    };
    let record = match lock.hold(&held.token, &begin, within).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            report.error(
                "lost",
                format_args!(
                    "the lock {} was lost before its hold could be recorded",
                    lock.name()
                ),
            );
            return Ending::Lost;
        }
        Err(e) => {
            report.error(
                "unavailable",
                format_args!(
                    "could not record the hold of {} ({e}); released it",
                    lock.name()
                ),
            );
            let _ = lock
                .release(&held.token, Duration::ZERO, None, within)
                .await;
            return Ending::Unavailable;
        }
    };
    if let Err(e) = handshake.confirm(held.fence, &held.token) {
        // `acquire` is gone: nobody will ever release this hold.
        report.error(
            "internal",
            format_args!("acquire ended before the hold was handed over ({e}); releasing"),
        );
        end_and_release(
            run,
            &held,
            &record,
            HoldState::Lost,
            "acquire ended before it printed the hold".to_owned(),
            None,
        )
        .await;
        return Ending::Software;
    }
    // From here the step may end: no terminal, no pipe of the step's shell held open.
    detach(handshake);
    let max_hold_at = held.acquired.checked_add(cfg.max_hold);
    let end = keep_lease(run, &held, max_hold_at, &mut signals).await;
    let (state, reason, outcome) = match end {
        KeepEnd::Taken(broken) => (HoldState::Lost, taken_reason(broken.as_ref()), None),
        KeepEnd::Unconfirmed(why) => (
            HoldState::Lost,
            format!("no renewal could be confirmed before the lease ended ({why})"),
            None,
        ),
        KeepEnd::MaxHold => (
            HoldState::MaxHold,
            format!("--max-hold {} reached", describe(cfg.max_hold)),
            Some((RunOutcome::TimedOut, None)),
        ),
        KeepEnd::Signal(sig) => (
            HoldState::Lost,
            format!("the keeper was stopped by {sig}"),
            Some((RunOutcome::Signalled, Some(sig as i32))),
        ),
    };
    end_and_release(run, &held, &record, state, reason, outcome).await;
    Ending::Lost
}

/// Why a renewal found the token gone. The place for what the contract's lost renewal will
/// tell (a "broken" marker: who broke the lock, and when), once it carries it.
fn taken_reason(broken: Option<&lock::Broken>) -> String {
    match broken {
        Some(b) => format!("the lock was {}", b.describe()),
        None => "a renewal found the lock deleted, expired or taken by another holder".to_owned(),
    }
}

/// End the hold record (only if it is still `held`: a `release` under way or done decides
/// alone), then, if this keeper ended it and the lock may still be ours, release the lock and
/// write the run record.
async fn end_and_release<L: Lock>(
    run: Run<'_, L>,
    held: &Held,
    record: &HoldRecord,
    state: HoldState,
    reason: String,
    outcome: Option<(RunOutcome, Option<i32>)>,
) {
    let Run { cfg, lock, .. } = run;
    let change = HoldChange::End {
        to: state,
        reason,
        from: &[HoldState::Held],
    };
    let within = cfg.target.timeout.min(LAST_WORDS);
    let ended_here = match lock.hold(&held.token, &change, within).await {
        Ok(Some(now)) => now.state == state,
        Ok(None) => true,
        // Out of reach: the lock is still released (compare-and-delete, ours only).
        Err(_) => true,
    };
    if !ended_here {
        // A `release` has it (or had it): it releases the lock and ends the record itself.
        return;
    }
    let finished = outcome.map(|(outcome, signal)| Finished {
        host: record.host.clone(),
        pid: record.pid,
        program: cfg.command.display.clone(),
        fence: held.fence,
        ran: Stamp::now().since(held.acquired),
        outcome,
        exit_code: None,
        signal,
        hold: None,
    });
    let _ = lock
        .release(&held.token, Duration::ZERO, finished.as_ref(), within)
        .await;
}

/// Renew the lease until the hold ends. Each pass reads the clock first (a keeper frozen
/// past its lease stops renewing before it tries anything), then waits for the first of a
/// signal, a renewal's reply, or the next moment something is due.
async fn keep_lease<L: Lock>(
    run: Run<'_, L>,
    held: &Held,
    max_hold_at: Option<Stamp>,
    signals: &mut Signals,
) -> KeepEnd {
    let mut keeper = LeaseKeeper::new(run, &held.token, held);
    loop {
        let now = Stamp::now();
        if let Some(standing) = keeper.check(now)
            && standing != Standing::Safe
        {
            return KeepEnd::Unconfirmed(keeper.last_error().to_owned());
        }
        if max_hold_at.is_some_and(|at| now >= at) {
            return KeepEnd::MaxHold;
        }
        keeper.start_renewal_if_due(now);
        let wake = earliest(
            earliest(now.checked_add(MAX_NAP), keeper.next_due()),
            max_hold_at,
        );
        let nap = wake.map_or(MAX_NAP, |w| now.until(w));
        tokio::select! {
            biased;
            sig = signals.recv() => {
                if matches!(sig, Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT) {
                    return KeepEnd::Signal(sig);
                }
            }
            reply = keeper.reply(), if keeper.renewing() => {
                if let Some(LeaseEnd::Lost(broken)) = keeper.on_reply(reply, run.report) {
                    return KeepEnd::Taken(broken);
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// stdin, stdout and stderr to /dev/null, and the handshake pipe closed: the step's shell (and
/// a CI runner reading its output) waits for none of them.
fn detach(handshake: Handshake) {
    drop(handshake);
    // Nor its working directory: a step's checkout may be removed (or a mount unmounted)
    // while the hold lasts.
    let _ = std::env::set_current_dir("/");
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..=2 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            let _ = unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}
