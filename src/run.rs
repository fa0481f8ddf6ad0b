//! The supervisor: acquire -> spawn -> keep the lease while the command runs -> release.
//!
//! Every change of the lock's state happens in this file, in this order, through the
//! [`Lock`] contract (the supervisor never knows which backend is behind it):
//!
//! 1. `acquire`: try until granted, the wait runs out, or a signal ends the wait. A failed
//!    attempt leaves nothing behind (the backend's promise).
//! 2. `hold`: with the lock held, start the command unless the lease is already too short or
//!    a signal came first, then `supervise` it: a [`LeaseKeeper`] renews and says when the
//!    lease can no longer be trusted, a [`Stopper`] stops the command (SIGTERM, then SIGKILL).
//! 3. `release`, exactly once for every run that held the lock, on every path; it keeps the
//!    lock for `--hold-at-least` only if the command actually ran.
//! 4. The run's [`Outcome`] is reported, and [`exit_for`] (a pure function) turns it into
//!    the exit code.
//!
//! Only the token this run generated can extend or release the lock.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::backoff::Backoff;
use crate::cli::Wait;
use crate::config::RunConfig;
use crate::exit::{ChildEnd, Ending};
use crate::lease::{Lease, Stamp, Standing};
use crate::lock::{
    self, Attempt, Holder, HolderInfo, Lock, RedisFailure, Released, Renewal, ReplicaAck, Token,
    Waiter,
};
use crate::process::{self, Event, Job, Signals, SpawnError, Tree};
use crate::report::Reporter;

/// Longest nap between lease checks. tokio's timers run on CLOCK_MONOTONIC, which stops during
/// a system suspend; waking at least this often bounds how late a suspend is noticed.
const MAX_NAP: Duration = Duration::from_millis(200);

/// With -v, how often a wait that goes on is logged (stderr not a terminal).
const WAIT_LOG_EVERY: Duration = Duration::from_secs(30);

/// A waiter's place is kept this long beyond the longest attempt (`--connect-timeout`); waiters
/// pause at most `backoff::BACKOFF_CAP` (250 ms) between attempts.
const PLACE_KEPT_BEYOND_AN_ATTEMPT: Duration = Duration::from_secs(1);

/// The least time a waiter's place is kept.
const PLACE_KEPT_AT_LEAST: Duration = Duration::from_secs(2);

/// Bound on leaving the waiters' queue when giving up: short, as the run is ending anyway
/// and the place expires by itself.
const LEAVE_QUEUE_WITHIN: Duration = Duration::from_secs(1);

/// See [`beside`].
const YIELDS_BEFORE_WORK: usize = 2;

/// Pause between renewal attempts after a failed one.
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// How a run went, before an exit code is chosen. Built once, reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The lock was never held: busy, Redis unavailable, a signal ended the wait, or an
    /// internal failure before anything was sent. Carries the ending already decided.
    NotHeld(Ending),
    /// The lock was held; what happened under it, and what the one release found.
    Held {
        under: Under,
        release: ReleaseResult,
    },
}

/// What happened while the lock was held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Under {
    /// The lease was already in its last `--grace` when the command was about to start.
    LateStart,
    /// Signal N arrived between the acquire and the spawn.
    Interrupted(i32),
    /// The command could not be started (126 / 127).
    SpawnFailed(Ending),
    /// The command ran and ended (`None`: its status could not be read).
    Ran {
        end: Option<ChildEnd>,
        lease: Option<LeaseEnd>,
        max_runtime: bool,
    },
}

impl Under {
    /// The lease is known to be gone (ran out before the start, or lost while running): the
    /// release can then only tidy up, and its "not ours" is no news.
    fn lease_lost(&self) -> bool {
        matches!(self, Under::LateStart | Under::Ran { lease: Some(_), .. })
    }
}

/// Why the lease could not be kept while the command ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEnd {
    /// A renewal found the token gone: someone else may hold the lock now.
    Lost,
    /// No renewal was confirmed in time; carries the last error.
    Unconfirmed(String),
}

/// What the release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseResult {
    /// Ours, and released (or left to expire under `--hold-at-least`).
    Released,
    HeldByOther,
    Gone,
    /// No answer: the key expires by itself within the ttl.
    Unreachable,
}

/// The exit code of a run, from its outcome alone.
pub fn exit_for(outcome: &Outcome) -> Ending {
    match outcome {
        Outcome::NotHeld(ending) => *ending,
        Outcome::Held { under, release } => match under {
            Under::LateStart => Ending::Lost,
            Under::Interrupted(sig) => Ending::Interrupted(*sig),
            Under::SpawnFailed(ending) => *ending,
            Under::Ran { lease: Some(_), .. } => Ending::Lost,
            // The lock was not ours at release: that outranks how the command ended.
            Under::Ran { .. }
                if matches!(release, ReleaseResult::HeldByOther | ReleaseResult::Gone) =>
            {
                Ending::Lost
            }
            Under::Ran { end: None, .. } => Ending::Software,
            Under::Ran {
                max_runtime: true, ..
            } => Ending::MaxRuntime,
            Under::Ran { end: Some(end), .. } => Ending::Ran(*end),
        },
    }
}

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
    let (host, pid) = (hostname(), std::process::id());
    let waits = cfg.wait != Wait::For(Duration::ZERO);
    let holder = HolderInfo {
        waiter: waits.then(|| Waiter {
            id: format!("{} {host} {pid}", Token::new().as_str()),
            place_kept: (cfg.target.timeout + PLACE_KEPT_BEYOND_AN_ATTEMPT)
                .max(PLACE_KEPT_AT_LEAST),
        }),
        host,
        pid,
        command: cfg.command.display.clone(),
    };

    // A run that waits has the command's process tree (its cgroup and guard) made while its
    // first attempt is on its way to Redis, so that it is ready when the lock is handed over.
    // A run that does not wait makes it once the lock is granted: on a busy lock (the other
    // hosts of a cron job) it would be made and removed for nothing. The /proc mode's is
    // always made once the lock is held (see `Tree::ahead`).
    let mut tree = None;
    let prepare = || {
        if waits {
            tree = Tree::ahead();
        }
    };
    let acquired = acquire(cfg, &lock, &holder, start, prepare, &mut signals, report);
    let held = match acquired.await {
        Ok(held) => held,
        Err(ending) => {
            // A waiter that gives up (its --wait ran out, a signal, Redis gone) leaves the
            // queue at once; if even that fails, its place expires by itself.
            if holder.waiter.is_some() {
                let within = cfg.target.timeout.min(LEAVE_QUEUE_WITHIN);
                lock.leave_queue(&holder, within).await;
            }
            return (Outcome::NotHeld(ending), false);
        }
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
    let (under, at_terminal, emptied) =
        hold(cfg, &lock, &held.token, &held, tree, &mut signals, report).await;

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
    let releasing = release(cfg, &lock, &held.token, keep, under.lease_lost(), report);
    let release = beside(releasing, || drop(emptied)).await;
    let outcome = Outcome::Held { under, release };
    tell(cfg, lock.name(), &outcome, keep, report);
    (outcome, at_terminal)
}

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

/// Take the lock, waiting as `--wait` allows. `prepare` runs once, beside the first attempt.
async fn acquire<L: Lock>(
    cfg: &RunConfig,
    lock: &L,
    holder: &HolderInfo,
    start: Stamp,
    prepare: impl FnOnce(),
    signals: &mut Signals,
    report: &Reporter,
) -> Result<Held, Ending> {
    let mut prepare = Some(prepare);
    let started = Stamp::now();
    // With --limit, a busy lock means every permit is taken; the holder named is the one
    // whose lease ends first.
    let shown_name = match cfg.target.limit {
        1 => lock.name().to_owned(),
        n => format!("{} (all {n} permits)", lock.name()),
    };
    // "All permits taken" is true only when the lock is not free-but-queued.
    let named = |holder: &Holder| {
        if holder.free {
            lock.name()
        } else {
            shown_name.as_str()
        }
    };
    let mut first = true;
    let waiter_id = holder.waiter.as_ref().map(|w| w.id.as_str());
    let mut backoff = Backoff::new(Token::new().seed());
    // Subscribed on the first busy reply when there is time to wait; wakes the next attempt
    // as soon as the holder releases, instead of at the next poll.
    let mut notices = None;
    let mut subscribed = false;
    // When the last "waiting" line went to a log (stderr not a terminal).
    let mut last_logged: Option<Stamp> = None;
    // Whether a failure was already retried (and said so).
    let mut retried = false;
    let result = loop {
        // Never cancelled by a signal: the backend must see its attempt through (and take
        // back a write whose reply was lost). A signal is looked at after the reply.
        let within = if first {
            first = false;
            cfg.target
                .timeout
                .saturating_sub(start.until(Stamp::now()))
                .max(Duration::from_millis(10))
        } else {
            cfg.target.timeout
        };
        let attempting = lock.try_acquire(cfg.ttl, holder, within);
        let attempt = match prepare.take() {
            Some(work) => beside(attempting, work).await,
            None => attempting.await,
        };
        let now = Stamp::now();
        let left = match cfg.wait {
            Wait::Forever => Some(Duration::MAX),
            Wait::For(limit) => limit
                .checked_sub(now.since(started))
                .filter(|d| !d.is_zero()),
        };
        match attempt {
            Ok(Attempt::Granted(grant)) => {
                break Ok(Held {
                    token: grant.token,
                    lease: Lease::granted(grant.counted_from, cfg.ttl, cfg.grace)
                        .expect("config guarantees ttl > drift"),
                    counted_from: grant.counted_from,
                    fence: grant.fence,
                    acquired: now,
                    waited: now.since(started),
                });
            }
            Ok(Attempt::Busy(holder)) => {
                let Some(left) = left else {
                    report.busy(busy_message(named(&holder), &holder, cfg.wait));
                    break Err(Ending::Busy(cfg.conflict_exit_code));
                };
                report.waiting(waiting_message(
                    named(&holder),
                    &holder,
                    now.since(started),
                    cfg.wait,
                ));
                // In a log (CI, cron mail) one line says the wait began, and with -v one
                // every WAIT_LOG_EVERY says it goes on.
                match last_logged {
                    None => {
                        report.notice(
                            "waiting",
                            wait_started_message(named(&holder), &holder, cfg.wait),
                        );
                        last_logged = Some(now);
                    }
                    Some(at) if now.since(at) >= WAIT_LOG_EVERY && !report.is_live() => {
                        report.info(
                            "waiting",
                            format!(
                                "still waiting for {} after {}",
                                lock.name(),
                                show_secs(now.since(started))
                            ),
                        );
                        last_logged = Some(now);
                    }
                    Some(_) => {}
                }
                if !subscribed {
                    subscribed = true;
                    // Bounded by the wait left, and ended by a signal like any wait.
                    tokio::select! {
                        n = lock.release_notices(cfg.target.timeout.min(left)) => notices = n,
                        sig = signals.recv_ending() => break Err(Ending::Interrupted(sig as i32)),
                    }
                    // The holder may have released while we subscribed: try again at once.
                    continue;
                }
                let nap = backoff.pause().min(left);
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    () = async {
                        match notices.as_mut() {
                            Some(n) => n.next_for(waiter_id).await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    sig = signals.recv_ending() => break Err(Ending::Interrupted(sig as i32)),
                }
            }
            Err(e) if e.is_transient() && left.is_some() => {
                // A failover under way, a replica not yet back: the first such failure of
                // a wait is said even without -v, so that a log tells why the run waits.
                let line = format!("{e}; retrying until --wait runs out");
                if retried {
                    report.info("retry", &line);
                } else {
                    report.notice("retry", &line);
                    retried = true;
                }
                report.waiting(&line);
                let nap = RENEW_RETRY
                    .max(backoff.pause())
                    .min(left.unwrap_or_default());
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    sig = signals.recv_ending() => break Err(Ending::Interrupted(sig as i32)),
                }
            }
            Err(e) => {
                report.error("unavailable", &e);
                break Err(Ending::Unavailable);
            }
        }
    };
    report.waiting_done();
    result
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

/// With the lock held: start the command in `tree` if it may start, and supervise it to its
/// end. Also returns the tree once nothing of the command runs, for the caller to remove.
async fn hold<L: Lock>(
    cfg: &RunConfig,
    lock: &L,
    token: &Token,
    held: &Held,
    tree: Tree,
    signals: &mut Signals,
    report: &Reporter,
) -> (Under, bool, Option<Tree>) {
    if let Some(sig) = signals.pending().await {
        return (Under::Interrupted(sig as i32), false, Some(tree));
    }
    // Said before the spawn, and given a moment to reach stderr (messages leave through a
    // thread, see sink.rs): said after, it would come behind the command's first output.
    report.info("spawning", format_args!("starting {}", cfg.command.display));
    if report.verbose() {
        let until_stop = Stamp::now().until(held.lease.stop_at());
        crate::report::drain(until_stop.min(Duration::from_millis(100)));
    }
    // The acquire's reply, the replica wait or a pause of this process may have taken so long
    // that the lease is already in its last --grace: starting the command now would be
    // starting it without the lock.
    if held.lease.standing(Stamp::now()) != Standing::Safe {
        return (Under::LateStart, false, Some(tree));
    }
    process::become_subreaper();
    let env = [
        ("REDLOCK_KEY", lock.name().to_owned()),
        ("REDLOCK_TOKEN", token.as_str()),
        ("REDLOCK_TTL_MS", cfg.ttl.as_millis().to_string()),
        ("REDLOCK_FENCE", held.fence.to_string()),
    ];
    let mut job = match Job::spawn(tree, &cfg.command, &env) {
        Ok(job) => job,
        Err(err) => {
            let (ending, err) = match err {
                SpawnError::NotFound(e) => (Ending::NotFound, e),
                SpawnError::NotExecutable(e) => (Ending::NotExecutable, e),
                SpawnError::Internal(e) => (Ending::Software, e),
            };
            // `redlock-run --key k status` runs a program called status.
            let hint = if ending == Ending::NotFound && cfg.command.program == "status" {
                "; to see who holds a lock, put the subcommand first: redlock-run status --key K"
            } else {
                ""
            };
            report.error(
                "spawn",
                format_args!("cannot run {}: {err}{hint}", cfg.command.display),
            );
            return (Under::SpawnFailed(ending), false, None);
        }
    };
    let job_pid = job.pid();
    let (mode, fallback) = job.tracking();
    report.info(
        "tracking",
        format_args!(
            "pid {job_pid}: its processes are tracked by {}{}",
            match mode {
                crate::process::Mode::Cgroup => "a cgroup of their own",
                crate::process::Mode::Proc => "/proc (as their subreaper)",
            },
            fallback.map(|why| format!(" ({why})")).unwrap_or_default()
        ),
    );
    let keeper = LeaseKeeper::new(cfg, lock, token, held);
    let ended = supervise(cfg, keeper, &mut job, signals, report).await;
    // A Ctrl-C or Ctrl-\ at the terminal reached the command's group alone; one the wrapper
    // was sent itself did not come from the terminal.
    let at_terminal = job.has_terminal() && !ended.signalled;
    // Leftovers in the group get --grace, but never past the lease: renewals have stopped.
    let leftovers_until = Stamp::now()
        .checked_add(cfg.grace)
        .map_or(ended.deadline, |at| at.min(ended.deadline));
    // An INT or TERM now (the user pressing Ctrl-C again) skips the wait for leftovers.
    let emptied = job.finish(leftovers_until, signals.recv_quit()).await;
    let end = match ended.status {
        Ok(end) => {
            let how = match end {
                ChildEnd::Exited(code) => format!("exited with {code}"),
                ChildEnd::Signalled(sig) => format!("was killed by signal {sig}"),
            };
            report.info(
                "exited",
                format_args!("the command (pid {}) {how}", job_pid),
            );
            Some(end)
        }
        Err(e) => {
            report.error("wait", format_args!("lost track of the command: {e}"));
            None
        }
    };
    let under = Under::Ran {
        end,
        lease: ended.lease,
        max_runtime: ended.max_runtime,
    };
    (under, at_terminal, emptied)
}

/// How supervision ended.
struct Supervised {
    status: std::io::Result<ChildEnd>,
    /// The wrapper was sent SIGINT or SIGQUIT itself (and forwarded it).
    signalled: bool,
    lease: Option<LeaseEnd>,
    max_runtime: bool,
    /// The lease deadline at the end.
    deadline: Stamp,
}

/// Run the command to its end while the keeper keeps the lease.
///
/// Each pass of the loop first reads the clock and acts on it: the lease standing, the
/// max-runtime, a due SIGKILL. So a process that wakes up late (SIGSTOP, VM pause, suspend,
/// overload) stops the command before it does anything else, never after trying a renewal
/// first. Then it waits for the first of: the command's exit, a signal, a renewal reply, or
/// the next moment something is due.
async fn supervise<L: Lock>(
    cfg: &RunConfig,
    mut keeper: LeaseKeeper<'_, L>,
    job: &mut Job,
    signals: &mut Signals,
    report: &Reporter,
) -> Supervised {
    let max_runtime_at = cfg.max_runtime.and_then(|d| Stamp::now().checked_add(d));
    let mut max_runtime = false;
    let mut stopper = Stopper::default();
    let mut quit_signals = 0u32;
    // The wrapper was just continued after following a suspended command.
    let mut resume = false;
    // Following a suspended command turned out impossible (an orphaned process group).
    let mut cannot_suspend = false;
    // The wrapper itself got SIGINT or SIGQUIT: such a signal that killed the command came
    // from someone's kill, not from the terminal.
    let mut got_terminal_signal = false;

    loop {
        let now = Stamp::now();
        let resumed = std::mem::take(&mut resume);
        if resumed && keeper.ended.is_none() && keeper.lease.standing(now) == Standing::Expired {
            // Continued after the lease ran out while the job was suspended: the command is
            // still stopped, and someone else may hold the lock by now. It must not run
            // again, not even for --grace: SIGKILL while it is stopped.
            keeper.last_error = "the job was suspended longer than its lease".to_owned();
            keeper.check(now);
            stopper.kill(job);
            report.info(
                "stopping",
                format_args!(
                    "lease on {} ran out while the job was suspended; killing the command",
                    keeper.lock.name()
                ),
            );
        }
        match keeper.check(now) {
            Some(Standing::Safe) | None => {}
            Some(standing) => {
                // SIGKILL at the deadline, so the command is gone before the server can
                // expire the key; if the deadline has passed already (a late wake-up), after
                // --grace.
                let kill_at = if standing == Standing::Expired {
                    now.checked_add(cfg.grace)
                } else {
                    Some(keeper.deadline())
                };
                stopper.terminate(job, kill_at);
                report.info(
                    "stopping",
                    format_args!(
                        "lease on {} not renewed in time ({}); sending SIGTERM",
                        keeper.lock.name(),
                        keeper.last_error
                    ),
                );
            }
        }
        if resumed && keeper.ended.is_none() {
            // Continued (`fg`, `bg`) with the lease checked just above and still safe.
            report.info("resumed", "continued; continuing the command");
            job.resume();
        }
        if !max_runtime && max_runtime_at.is_some_and(|at| now >= at) {
            // Applies whatever else has happened (a forwarded TERM the command ignored).
            max_runtime = true;
            stopper.terminate(job, now.checked_add(cfg.grace));
        }
        stopper.kill_if_due(job, now);
        keeper.start_renewal_if_due(now);

        // The next moment something is due, napping at most MAX_NAP.
        let mut wake = earliest(now.checked_add(MAX_NAP), keeper.next_due());
        wake = earliest(wake, stopper.next_due());
        if !max_runtime {
            wake = earliest(wake, max_runtime_at);
        }
        let nap = wake.map_or(MAX_NAP, |w| now.until(w));

        tokio::select! {
            biased;
            event = job.event() => {
                let status = match event {
                    Ok(Event::Suspended(sig)) if cannot_suspend => {
                        // Already found that the wrapper's group cannot be stopped; the
                        // command is being ended. Let it act on that.
                        let _ = sig;
                        job.terminate();
                        continue;
                    }
                    Ok(Event::Suspended(sig)) => {
                        // Stopped at a terminal (Ctrl-Z, a background read): follow the
                        // command, and on waking check the lease before continuing it.
                        if process::group_is_orphaned() {
                            // The kernel does not stop an orphaned process group: the wrapper
                            // cannot follow, and a command continued would only be stopped
                            // again (for ever, at full speed). It ends, as a read from an
                            // orphaned group would end the bare command with EIO.
                            cannot_suspend = true;
                            report.error(
                                "suspend",
                                format_args!(
                                    "the command was stopped by {sig} and the wrapper's process \
                                     group cannot be stopped with it (orphaned); ending the command"
                                ),
                            );
                            stopper.terminate(job, Stamp::now().checked_add(cfg.grace));
                        } else {
                            report.info("suspended", format_args!("the command was stopped by {sig}; stopping too"));
                            job.suspend_with(sig);
                            resume = true;
                        }
                        continue;
                    }
                    Ok(Event::Ended(end)) => Ok(end),
                    Err(e) => Err(e),
                };
                return Supervised {
                    status,
                    signalled: got_terminal_signal,
                    deadline: keeper.deadline(),
                    lease: keeper.ended,
                    max_runtime,
                };
            }
            sig = signals.recv() => {
                let quit = matches!(sig, Signal::SIGINT | Signal::SIGTERM);
                if matches!(sig, Signal::SIGINT | Signal::SIGQUIT) {
                    got_terminal_signal = true;
                }
                if quit {
                    quit_signals += 1;
                }
                if quit && quit_signals > 1 {
                    report.info("signal", format_args!("second {sig}: killing the command"));
                    stopper.kill(job);
                } else {
                    report.info("signal", format_args!("forwarding {sig} to the command"));
                    job.signal(sig);
                }
            }
            reply = keeper.reply(), if keeper.renewing() => {
                if keeper.on_reply(reply, report) == Some(LeaseEnd::Lost) {
                    stopper.terminate(job, Stamp::now().checked_add(cfg.grace));
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}

type RenewalFuture<'a> = Pin<Box<dyn Future<Output = Result<Renewal, RedisFailure>> + 'a>>;

/// Keeps the lease: schedules renewals, reads their replies, and says when the lease can no
/// longer be trusted. It never touches the command; the supervisor acts on what it says.
struct LeaseKeeper<'a, L: Lock> {
    lock: &'a L,
    token: &'a Token,
    ttl: Duration,
    heartbeat: Duration,
    lease: Lease,
    /// The longest one renewal attempt may take.
    attempt: Duration,
    next_renewal: Option<Stamp>,
    renewal: Option<RenewalFuture<'a>>,
    last_error: String,
    /// When a failed renewal was last reported.
    last_said: Option<Stamp>,
    /// Set once, when the lease could not be kept; renewals stop then.
    ended: Option<LeaseEnd>,
}

impl<'a, L: Lock> LeaseKeeper<'a, L> {
    fn new(cfg: &RunConfig, lock: &'a L, token: &'a Token, held: &Held) -> Self {
        LeaseKeeper {
            lock,
            token,
            ttl: cfg.ttl,
            heartbeat: cfg.heartbeat,
            lease: held.lease,
            attempt: (cfg.ttl / 4).max(Duration::from_millis(50))
                + ReplicaAck::wait_time(cfg.replicas),
            // Heartbeats count from the acquire's send time, like the lease they extend.
            next_renewal: held.counted_from.checked_add(cfg.heartbeat),
            renewal: None,
            last_error: String::from("no renewal was answered in time"),
            last_said: None,
            ended: None,
        }
    }

    fn deadline(&self) -> Stamp {
        self.lease.deadline()
    }

    /// Where the lease stands now, reported only the first time it is no longer safe
    /// (`None` once the lease has ended for any reason).
    fn check(&mut self, now: Stamp) -> Option<Standing> {
        if self.ended.is_some() {
            return None;
        }
        let standing = self.lease.standing(now);
        if standing != Standing::Safe {
            self.ended = Some(LeaseEnd::Unconfirmed(self.last_error.clone()));
            self.renewal = None;
            self.next_renewal = None;
        }
        Some(standing)
    }

    fn start_renewal_if_due(&mut self, now: Stamp) {
        if self.renewal.is_none() && self.next_renewal.is_some_and(|at| now >= at) {
            // Bounded so that it never outlives the time the lease still allows, and short
            // enough that an attempt lost on a dead connection is given up and retried on a
            // new one (the connection is dropped with it) well before that.
            let within = now
                .until(self.lease.stop_at())
                .min(self.attempt)
                .max(Duration::from_millis(10));
            let (lock, token, ttl) = (self.lock, self.token, self.ttl);
            self.renewal = Some(Box::pin(lock.renew(token, ttl, within)));
        }
    }

    fn renewing(&self) -> bool {
        self.renewal.is_some()
    }

    /// The reply of the renewal under way. Only polled while `renewing()`.
    async fn reply(&mut self) -> Result<Renewal, RedisFailure> {
        match self.renewal.as_mut() {
            Some(renewal) => renewal.await,
            None => std::future::pending().await,
        }
    }

    /// Take in a renewal's reply. Returns `Some(Lost)` when the lock turned out to be gone.
    fn on_reply(
        &mut self,
        reply: Result<Renewal, RedisFailure>,
        report: &Reporter,
    ) -> Option<LeaseEnd> {
        self.renewal = None;
        match reply {
            Ok(Renewal::Renewed { counted_from }) => {
                self.lease.renewed(counted_from);
                self.next_renewal = counted_from.checked_add(self.heartbeat);
                report.info("renewed", format_args!("renewed {}", self.lock.name()));
                None
            }
            Ok(Renewal::Lost) => {
                self.next_renewal = None;
                if matches!(self.ended, Some(LeaseEnd::Lost)) {
                    return None;
                }
                self.ended = Some(LeaseEnd::Lost);
                Some(LeaseEnd::Lost)
            }
            Err(e) => {
                let why = e.to_string();
                // Retries come every RENEW_RETRY; say so once a second, or when the reason
                // changes, not ten times a second.
                let now = Stamp::now();
                let repeat = why == self.last_error
                    && self
                        .last_said
                        .is_some_and(|at| now.since(at) < Duration::from_secs(1));
                if !repeat {
                    report.info(
                        "renew-failed",
                        format_args!("renewal failed: {why}; retrying"),
                    );
                    self.last_said = Some(now);
                }
                self.last_error = why;
                self.next_renewal = Stamp::now().checked_add(RENEW_RETRY);
                None
            }
        }
    }

    /// The next moment the keeper must act: a renewal, or the start of the last --grace.
    fn next_due(&self) -> Option<Stamp> {
        if self.ended.is_some() {
            return None;
        }
        let renewal = if self.renewal.is_none() {
            self.next_renewal
        } else {
            None
        };
        earliest(renewal, Some(self.lease.stop_at()))
    }
}

/// Stops the command: SIGTERM when asked, SIGKILL at the earliest moment any reason set (or
/// at once). Each reason may ask again; the earliest SIGKILL wins.
#[derive(Default)]
struct Stopper {
    kill_at: Option<Stamp>,
    killed: bool,
}

impl Stopper {
    fn terminate(&mut self, job: &Job, kill_at: Option<Stamp>) {
        // The whole tree; continued too, as a stopped command acts on SIGTERM only then.
        job.terminate();
        self.kill_at = earliest(self.kill_at, kill_at);
    }

    fn kill(&mut self, job: &Job) {
        job.kill();
        self.killed = true;
    }

    fn kill_if_due(&mut self, job: &Job, now: Stamp) {
        if !self.killed && self.kill_at.is_some_and(|at| now >= at) {
            self.kill(job);
        }
    }

    fn next_due(&self) -> Option<Stamp> {
        if self.killed {
            None
        } else {
            self.kill_at
        }
    }
}

/// How long a release is given once the lease is known lost: the compare-and-delete can then
/// only tidy up, and must not hold up the exit for a whole --connect-timeout.
const RELEASE_AFTER_LOSS: Duration = Duration::from_secs(1);

async fn release<L: Lock>(
    cfg: &RunConfig,
    lock: &L,
    token: &Token,
    keep: Duration,
    lost: bool,
    report: &Reporter,
) -> ReleaseResult {
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

/// The messages for a run that held the lock (a run that did not has said why already).
fn tell(cfg: &RunConfig, key: &str, outcome: &Outcome, keep: Duration, report: &Reporter) {
    let Outcome::Held { under, release } = outcome else {
        return;
    };
    let lost_known = under.lease_lost();
    match release {
        ReleaseResult::Released if keep.is_zero() => {
            report.info("released", format_args!("released {key}"))
        }
        ReleaseResult::Released => report.info(
            "released",
            format_args!(
                "{key} stays locked for {} more (--hold-at-least)",
                show_ms(keep)
            ),
        ),
        ReleaseResult::HeldByOther if !lost_known => report.error(
            "lost",
            format_args!("lock {key} was held by someone else at release; left it alone"),
        ),
        ReleaseResult::Gone if !lost_known => report.error(
            "lost",
            format_args!("lock {key} had already expired or been deleted at release"),
        ),
        _ => {}
    }
    match under {
        Under::LateStart => report.error(
            "lost",
            format_args!(
                "lease on {key} ran out before the command could start (slow reply, replica \
                 wait or a paused process); not running it"
            ),
        ),
        Under::Ran {
            lease: Some(LeaseEnd::Lost),
            ..
        } => report.error(
            "lost",
            format_args!(
                "lock {key} was lost while the command ran (the key expired, was deleted or \
                 now holds another value); the command was stopped"
            ),
        ),
        Under::Ran {
            lease: Some(LeaseEnd::Unconfirmed(why)),
            ..
        } => report.error(
            "lost",
            format_args!(
                "lock {key} could not be renewed before its lease ran out ({why}); the command \
                 was stopped"
            ),
        ),
        Under::Ran {
            max_runtime: true, ..
        } if exit_for(outcome) == Ending::MaxRuntime => report.error(
            "max-runtime",
            format_args!(
                "the command ran longer than --max-runtime {} and was stopped",
                show(cfg.max_runtime.unwrap_or_default())
            ),
        ),
        _ => {}
    }
}

fn waiting_message(key: &str, holder: &Holder, elapsed: Duration, wait: Wait) -> String {
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" (held by {host} pid {pid}{})", place(holder)),
        _ if holder.place > 0 => format!(" ({})", &place(holder)[2..]),
        _ => String::new(),
    };
    let left = match wait {
        Wait::Forever => "no limit".to_owned(),
        Wait::For(d) => format!("{} left", show_secs(d.saturating_sub(elapsed))),
    };
    format!(
        "waiting for {key}{who}: {} elapsed, {left}",
        show_secs(elapsed)
    )
}

/// `, 2nd of 3 in line` when queued.
fn place(holder: &Holder) -> String {
    if holder.place == 0 {
        return String::new();
    }
    let nth = match (holder.place % 10, holder.place % 100) {
        (1, n) if n != 11 => "st",
        (2, n) if n != 12 => "nd",
        (3, n) if n != 13 => "rd",
        _ => "th",
    };
    format!(", {}{nth} of {} in line", holder.place, holder.queued)
}

/// Where a wait begins, for a log: who holds the lock, since when, and how long we wait.
fn wait_started_message(key: &str, holder: &Holder, wait: Wait) -> String {
    let limit = match wait {
        Wait::Forever => "with no limit".to_owned(),
        Wait::For(d) => format!("up to {}", show(d)),
    };
    if holder.free {
        return format!(
            "lock {key} is free, but {} queued earlier{}; waiting {limit}",
            waiters(ahead(holder)),
            place(holder)
        );
    }
    let mut who = String::new();
    if let (Some(host), Some(pid)) = (&holder.host, holder.pid) {
        who.push_str(&format!(" by {host} pid {pid}"));
    }
    if let Some(ms) = holder.acquired_ms {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
        who.push_str(&format!(" since {}", humantime::format_rfc3339_seconds(at)));
    }
    let ttl = match holder.ttl_ms {
        Some(ms) => format!("{} left on its lease", show_ms(Duration::from_millis(ms))),
        None => "no TTL".to_owned(),
    };
    format!(
        "lock {key} is held{who} ({ttl}{}); waiting {limit}",
        place(holder)
    )
}

/// Waiters in the queue before this run (all of them when it is not queued).
fn ahead(holder: &Holder) -> u64 {
    match holder.place {
        0 => holder.queued,
        place => place - 1,
    }
}

/// `1 waiter`, `3 waiters`.
fn waiters(n: u64) -> String {
    format!("{n} waiter{}", if n == 1 { "" } else { "s" })
}

fn busy_message(key: &str, holder: &Holder, wait: Wait) -> String {
    if holder.free {
        return format!(
            "lock {key} is busy: free, but {} queued for it (--wait) ahead of this run",
            waiters(ahead(holder))
        );
    }
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" by {host} pid {pid}"),
        _ => String::new(),
    };
    let ttl = match holder.ttl_ms {
        Some(ms) => format!(", {} left", show_ms(Duration::from_millis(ms))),
        None => ", and the key has no TTL (it will never expire by itself)".to_owned(),
    };
    let waited = match wait {
        Wait::For(d) if !d.is_zero() => format!(" after waiting {}", show(d)),
        _ => String::new(),
    };
    format!("lock {key} is busy: held{who}{ttl}{waited}")
}

fn earliest(a: Option<Stamp>, b: Option<Stamp>) -> Option<Stamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn show_secs(d: Duration) -> String {
    show(Duration::from_secs(d.as_secs()))
}

fn show_ms(d: Duration) -> String {
    show(Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(end: ChildEnd) -> Under {
        Under::Ran {
            end: Some(end),
            lease: None,
            max_runtime: false,
        }
    }

    fn held(under: Under, release: ReleaseResult) -> Ending {
        exit_for(&Outcome::Held { under, release })
    }

    #[test]
    fn a_command_that_ran_under_its_lease_gives_its_own_status() {
        use ReleaseResult::*;
        assert_eq!(
            held(ran(ChildEnd::Exited(3)), Released),
            Ending::Ran(ChildEnd::Exited(3))
        );
        assert_eq!(
            held(ran(ChildEnd::Signalled(15)), Released),
            Ending::Ran(ChildEnd::Signalled(15))
        );
        // Redis unreachable at release: the command ran under a valid lease; its code stands.
        assert_eq!(
            held(ran(ChildEnd::Exited(0)), Unreachable),
            Ending::Ran(ChildEnd::Exited(0))
        );
    }

    #[test]
    fn a_lock_not_ours_at_release_outranks_success() {
        for release in [ReleaseResult::HeldByOther, ReleaseResult::Gone] {
            assert_eq!(held(ran(ChildEnd::Exited(0)), release), Ending::Lost);
            let max = Under::Ran {
                end: Some(ChildEnd::Signalled(15)),
                lease: None,
                max_runtime: true,
            };
            assert_eq!(held(max, release), Ending::Lost);
        }
    }

    #[test]
    fn a_lost_lease_is_74_whatever_the_command_did() {
        for lease in [LeaseEnd::Lost, LeaseEnd::Unconfirmed("timeout".into())] {
            let under = Under::Ran {
                end: Some(ChildEnd::Exited(0)),
                lease: Some(lease),
                max_runtime: true,
            };
            assert_eq!(held(under, ReleaseResult::Released), Ending::Lost);
        }
        assert_eq!(
            held(Under::LateStart, ReleaseResult::Released),
            Ending::Lost
        );
    }

    #[test]
    fn max_runtime_is_124_and_an_unreadable_status_is_internal() {
        let max = Under::Ran {
            end: Some(ChildEnd::Exited(0)),
            lease: None,
            max_runtime: true,
        };
        assert_eq!(held(max, ReleaseResult::Released), Ending::MaxRuntime);
        let lost_track = Under::Ran {
            end: None,
            lease: None,
            max_runtime: false,
        };
        assert_eq!(held(lost_track, ReleaseResult::Released), Ending::Software);
    }

    #[test]
    fn a_command_that_never_started_keeps_its_own_code() {
        for release in [ReleaseResult::Released, ReleaseResult::Gone] {
            assert_eq!(
                held(Under::SpawnFailed(Ending::NotFound), release),
                Ending::NotFound
            );
            assert_eq!(held(Under::Interrupted(2), release), Ending::Interrupted(2));
        }
        assert_eq!(
            exit_for(&Outcome::NotHeld(Ending::Busy(75))),
            Ending::Busy(75)
        );
    }

    #[test]
    fn busy_message_names_key_holder_and_ttl() {
        let holder = Holder {
            ttl_ms: Some(1500),
            host: Some("web1".into()),
            pid: Some(42),
            acquired_ms: Some(0),
            ..Holder::default()
        };
        assert_eq!(
            busy_message("redlock:k", &holder, Wait::For(Duration::ZERO)),
            "lock redlock:k is busy: held by web1 pid 42, 1s 500ms left"
        );
        let foreign = Holder::default();
        assert!(busy_message("k", &foreign, Wait::For(Duration::from_secs(2))).contains("no TTL"));
        let queued = Holder {
            free: true,
            queued: 3,
            place: 2,
            ..Holder::default()
        };
        assert_eq!(
            wait_started_message("k", &queued, Wait::Forever),
            "lock k is free, but 1 waiter queued earlier, 2nd of 3 in line; \
             waiting with no limit"
        );
        assert_eq!(
            busy_message("k", &queued, Wait::For(Duration::from_secs(1))),
            "lock k is busy: free, but 1 waiter queued for it (--wait) ahead of this run"
        );
        let next = Holder {
            place: 1,
            queued: 1,
            ..holder.clone()
        };
        assert!(waiting_message("k", &next, Duration::ZERO, Wait::Forever)
            .contains("(held by web1 pid 42, 1st of 1 in line)"));
        assert_eq!(
            wait_started_message("redlock:k", &holder, Wait::For(Duration::from_secs(600))),
            "lock redlock:k is held by web1 pid 42 since 1970-01-01T00:00:00Z (1s 500ms left \
             on its lease); waiting up to 10m"
        );
    }

    #[test]
    fn earliest_ignores_missing() {
        let a = Stamp::now();
        let b = a.checked_add(Duration::from_secs(1));
        assert_eq!(earliest(Some(a), b), Some(a));
        assert_eq!(earliest(None, b), b);
        assert_eq!(earliest(None, None), None);
    }
}
