//! With the lock held: start the command, and supervise it to its end while the lease is kept.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::exit::{ChildEnd, Ending};
use crate::lease::{Stamp, Standing};
use crate::lock::{Lock, Token};
use crate::process::{self, Event, Job, Signals, SpawnError, Tree};

use super::keeper::LeaseKeeper;
use super::outcome::{LeaseEnd, Under};
use super::shared::{Held, Run, earliest};
use super::stopper::Stopper;

/// Longest nap between lease checks. tokio's timers run on CLOCK_MONOTONIC, which stops during
/// a system suspend; waking at least this often bounds how late a suspend is noticed.
const MAX_NAP: Duration = Duration::from_millis(200);

/// How a hold ended.
pub(super) struct HoldEnd {
    pub(super) under: Under,
    /// The command had the terminal when it ended (see `RunEnd::at_terminal`).
    pub(super) at_terminal: bool,
    /// The command's tree once nothing of it runs, for the caller to remove.
    pub(super) emptied: Option<Tree>,
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

/// `--max-runtime` as the supervision loop sees it.
#[derive(Clone, Copy)]
enum MaxRuntime {
    /// No limit (or one beyond the clock's range).
    Unlimited,
    /// The command is stopped at this moment.
    Until(Stamp),
    /// Reached: the command was asked to stop.
    Reached,
}

/// Job control: what the wrapper does when a terminal stops the command (Ctrl-Z, a
/// background read).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Suspension {
    /// It stops too, following the command.
    Follows,
    /// It was just continued after following a stopped command: the lease is checked before
    /// the command is continued.
    Continued,
    /// Following turned out impossible (an orphaned process group): a stopped command is
    /// ended.
    Impossible,
}

impl<'a, L: Lock> Run<'a, L> {
    /// With the lock held: start the command in `tree` if it may start, and supervise it to
    /// its end. Also returns the tree once nothing of the command runs, for the caller to
    /// remove.
    pub(super) async fn hold(
        self,
        token: &'a Token,
        held: &Held,
        tree: Tree,
        signals: &mut Signals,
    ) -> HoldEnd {
        let Run { cfg, lock, report } = self;
        let not_started = |under, emptied| HoldEnd {
            under,
            at_terminal: false,
            emptied,
        };
        if let Some(sig) = signals.pending().await {
            return not_started(Under::Interrupted(sig as i32), Some(tree));
        }
        // Said before the spawn, and given a moment to reach stderr (messages leave through a
        // thread, see sink.rs): said after, it would come behind the command's first output.
        report.info("spawning", format_args!("starting {}", cfg.command.display));
        if report.verbose() {
            let until_stop = Stamp::now().until(held.lease.stop_at());
            crate::report::drain(until_stop.min(Duration::from_millis(100)));
        }
        // The acquire's reply, the replica wait or a pause of this process may have taken so
        // long that the lease is already in its last --grace: starting the command now would
        // be starting it without the lock.
        if held.lease.standing(Stamp::now()) != Standing::Safe {
            return not_started(Under::LateStart, Some(tree));
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
                    "; to see who holds a lock, put the subcommand first: \
                     redlock-run status --key K"
                } else {
                    ""
                };
                report.error(
                    "spawn",
                    format_args!("cannot run {}: {err}{hint}", cfg.command.display),
                );
                return not_started(Under::SpawnFailed(ending), None);
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
        let keeper = LeaseKeeper::new(self, token, held);
        let ended = self.supervise(keeper, &mut job, signals).await;
        // A Ctrl-C or Ctrl-\ at the terminal reached the command's group alone; one the
        // wrapper was sent itself did not come from the terminal.
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
        HoldEnd {
            under,
            at_terminal,
            emptied,
        }
    }

    /// Run the command to its end while the keeper keeps the lease.
    ///
    /// Each pass of the loop first reads the clock and acts on it: the lease standing, the
    /// max-runtime, a due SIGKILL. So a process that wakes up late (SIGSTOP, VM pause,
    /// suspend, overload) stops the command before it does anything else, never after trying
    /// a renewal first. Then it waits for the first of: the command's exit, a signal, a
    /// renewal reply, or the next moment something is due.
    async fn supervise(
        self,
        mut keeper: LeaseKeeper<'a, L>,
        job: &mut Job,
        signals: &mut Signals,
    ) -> Supervised {
        let Run { cfg, lock, report } = self;
        let mut max_runtime = match cfg.max_runtime.and_then(|d| Stamp::now().checked_add(d)) {
            Some(at) => MaxRuntime::Until(at),
            None => MaxRuntime::Unlimited,
        };
        let mut stopper = Stopper::default();
        let mut quit_signals = 0u32;
        let mut suspension = Suspension::Follows;
        // The wrapper itself got SIGINT or SIGQUIT: such a signal that killed the command came
        // from someone's kill, not from the terminal.
        let mut got_terminal_signal = false;

        loop {
            let now = Stamp::now();
            let resumed = suspension == Suspension::Continued;
            if resumed {
                suspension = Suspension::Follows;
            }
            if resumed && keeper.expired_while_suspended(now) {
                // Continued after the lease ran out while the job was suspended: the command
                // is still stopped, and someone else may hold the lock by now. It must not run
                // again, not even for --grace: SIGKILL while it is stopped.
                stopper.kill(job);
                report.info(
                    "stopping",
                    format_args!(
                        "lease on {} ran out while the job was suspended; killing the command",
                        lock.name()
                    ),
                );
            }
            match keeper.check(now) {
                Some(Standing::Safe) | None => {}
                Some(standing) => {
                    // SIGKILL at the deadline, so the command is gone before the server can
                    // expire the key; if the deadline has passed already (a late wake-up),
                    // after --grace.
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
                            lock.name(),
                            keeper.last_error()
                        ),
                    );
                }
            }
            if resumed && keeper.ended().is_none() {
                // Continued (`fg`, `bg`) with the lease checked just above and still safe.
                report.info("resumed", "continued; continuing the command");
                job.resume();
            }
            if let MaxRuntime::Until(at) = max_runtime
                && now >= at
            {
                // Applies whatever else has happened (a forwarded TERM the command
                // ignored).
                max_runtime = MaxRuntime::Reached;
                stopper.terminate(job, now.checked_add(cfg.grace));
            }
            stopper.kill_if_due(job, now);
            keeper.start_renewal_if_due(now);

            // The next moment something is due, napping at most MAX_NAP.
            let mut wake = earliest(now.checked_add(MAX_NAP), keeper.next_due());
            wake = earliest(wake, stopper.next_due());
            if let MaxRuntime::Until(at) = max_runtime {
                wake = earliest(wake, Some(at));
            }
            let nap = wake.map_or(MAX_NAP, |w| now.until(w));

            tokio::select! {
                biased;
                event = job.event() => {
                    let status = match event {
                        Ok(Event::Suspended(sig)) if suspension == Suspension::Impossible => {
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
                                // The kernel does not stop an orphaned process group: the
                                // wrapper cannot follow, and a command continued would only be
                                // stopped again (for ever, at full speed). It ends, as a read
                                // from an orphaned group would end the bare command with EIO.
                                suspension = Suspension::Impossible;
                                report.error(
                                    "suspend",
                                    format_args!(
                                        "the command was stopped by {sig} and the wrapper's \
                                         process group cannot be stopped with it (orphaned); \
                                         ending the command"
                                    ),
                                );
                                stopper.terminate(job, Stamp::now().checked_add(cfg.grace));
                            } else {
                                report.info(
                                    "suspended",
                                    format_args!("the command was stopped by {sig}; stopping too"),
                                );
                                job.suspend_with(sig);
                                suspension = Suspension::Continued;
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
                        lease: keeper.into_ended(),
                        max_runtime: matches!(max_runtime, MaxRuntime::Reached),
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
                    if matches!(keeper.on_reply(reply, report), Some(LeaseEnd::Lost(_))) {
                        stopper.terminate(job, Stamp::now().checked_add(cfg.grace));
                    }
                }
                () = tokio::time::sleep(nap) => {}
            }
        }
    }
}
