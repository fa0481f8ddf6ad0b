//! The command as a supervised process group, and job control around it.
//!
//! - The command leads its own process group: forwarded signals go to the group, as a
//!   terminal's would.
//! - "The command" is its whole process tree ([`super::tree`]): a cgroup of its own where
//!   the system allows, else the descendants the wrapper finds as their subreaper. Stopping
//!   the command (a lost lease, --max-runtime, leftovers after it exits, a suspended job)
//!   reaches processes that left its group or session (`setsid`, `timeout(1)`, double forks).
//! - It dies with the wrapper: `PR_SET_PDEATHSIG` delivers SIGKILL when the thread that forked
//!   it exits. The fork happens on the main thread (the runtime is current-thread), which lives
//!   as long as the process. Processes the command starts are not covered by that (the
//!   setting is not inherited); they are covered on every path where the wrapper still runs,
//!   because the wrapper is a child subreaper and stops whatever is left in the group.
//! - The wrapper reaps the command itself (`waitpid` with `WUNTRACED`), so it sees the
//!   command *stop* as well as exit.
//!
//! # Job control
//!
//! At a terminal the wrapper must behave like the bare command, and the command must never
//! run without a lease, whatever job control does. The design, after sudo's and script(1)'s:
//!
//! - **The command owns the terminal.** When the wrapper's group is the foreground group of
//!   its controlling terminal (whichever of stdin, stdout, stderr or `/dev/tty` reaches it;
//!   stdin may be `/dev/null`), the command's group is made the foreground group. So the
//!   terminal's Ctrl-C, Ctrl-\ and Ctrl-Z reach the command and only the command: nothing is
//!   delivered twice, and the wrapper forwards only signals sent to it directly.
//! - **The wrapper stops when the command stops.** When the command is stopped by a
//!   job-control signal (Ctrl-Z's SIGTSTP, SIGTTIN or SIGTTOU when a background job touches
//!   the terminal) and there is a terminal, the wrapper makes sure its whole group is stopped,
//!   takes the terminal back and stops itself with the same signal. The shell sees the job
//!   stopped, prints its prompt, and `fg`, `bg` and `kill %1` work on the wrapper. While the
//!   wrapper is stopped it renews nothing, but the command is stopped too.
//! - **A stop that cannot happen counts.** A command inside a vfork (dash runs every command
//!   through one) whose child Ctrl-Z stopped before it exec'd cannot stop: it waits in the
//!   kernel for that exec with the SIGTSTP pending, and waitpid never reports a stop. The
//!   wrapper reads the pending stop from /proc on its next pass (within 200 ms) and follows
//!   it as above, where the bare command would leave the shell without a prompt.
//! - **It continues the command only under a valid lease.** When the shell continues the
//!   wrapper (`fg` or `bg`), the wrapper first checks its lease (the supervisor's first step
//!   after any wake-up); only if the lease still holds does it hand the terminal back (if it
//!   is in the foreground now) and continue the command's group. A lease that ran out while
//!   the job was suspended ends the command (SIGTERM, SIGCONT, SIGKILL after --grace) and the
//!   run (exit 74).
//! - A stop by plain SIGSTOP, or without a terminal (cron, CI), is not job control: the
//!   wrapper keeps running and keeps the lease for the stopped command.
//! - A SIGTSTP sent to the wrapper itself is forwarded to the command's group; the wrapper
//!   stops only if the command does (a command that ignores SIGTSTP is not suspended).
//! - The wrapper ignores SIGTTOU once the command runs: its own messages to a terminal it
//!   no longer owns (`stty tostop`) must not stop it while the command runs on.
//!
//! After the release, a command killed by signal N makes the wrapper end by signal N as
//! well (see `lib.rs`), so a shell loop interrupted by Ctrl-C ends as it would with the bare
//! command.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{SigHandler, Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getppid};
use tokio::signal::unix::{SignalKind, signal};

use super::signals::stop_group;
use super::spawn::{SpawnError, spawn_in};
use super::terminal::{Terminal, give_terminal};
use super::tree::{Mode, Stat, Tree, read_stat};
use crate::config;
use crate::exit::ChildEnd;
use crate::lease::Stamp;

/// What happened to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The command (its group leader) ended.
    Ended(ChildEnd),
    /// It was stopped by a job-control signal at a terminal: the wrapper must follow.
    Suspended(Signal),
}

/// A running command and its process group.
pub struct Job {
    group: Pid,
    /// Everything the command started, whatever its group or session.
    tree: Tree,
    /// The controlling terminal, when the wrapper has one.
    terminal: Option<Terminal>,
    /// The command's group is the terminal's foreground group (we made it so).
    gave_terminal: bool,
    /// SIGCHLD: the command exited, stopped or continued.
    sigchld: tokio::signal::unix::Signal,
    /// How the leader ended, once reaped.
    ended: Option<ChildEnd>,
}

/// Make this process the reaper of orphans it leaves behind, so processes the command started
/// and abandoned can be found, stopped and reaped after the command exits.
pub fn become_subreaper() {
    // Failure only weakens the cleanup of leftovers, so it is ignored.
    let _ = prctl::set_child_subreaper(true);
}

impl Job {
    /// Start `command` in `tree` (made beforehand, see [`Tree::new`]) with the extra
    /// environment `env`. Must be called from the main thread, inside the runtime.
    pub fn spawn(
        tree: Tree,
        command: &config::Command,
        env: &[(&str, String)],
    ) -> Result<Job, SpawnError> {
        // Listening before the fork, so no SIGCHLD of the command can be missed.
        let sigchld = signal(SignalKind::child()).map_err(SpawnError::Internal)?;
        let terminal = Terminal::find();
        let take_terminal = terminal.as_ref().is_some_and(|t| t.foreground_is_ours());
        let tty = terminal.as_ref().map(|t| t.raw());
        let mut tree = tree;
        let child = match spawn_in(&tree, command, env, take_terminal, tty) {
            // The child could not join the cgroup (a delegation rule, a cgroup namespace):
            // the /proc mode then, and the command spawned again; it never started.
            Err(e) => match tree.join_error() {
                Some(why) => {
                    tree = tree.fall_back(&why);
                    spawn_in(&tree, command, env, take_terminal, tty)
                }
                None => Err(e),
            },
            ok => ok,
        }
        .map_err(|e| {
            // A join that failed (the cgroup removed under us) is ours, not the command's.
            let cgroup_gone =
                tree.mode() == Mode::Cgroup && tree.cgroup_dir().is_some_and(|dir| !dir.exists());
            match e {
                SpawnError::NotFound(e) | SpawnError::NotExecutable(e)
                    if cgroup_gone || tree.join_error().is_some() =>
                {
                    SpawnError::Internal(e)
                }
                e => e,
            }
        })?;
        // From here on the wrapper's own messages must not stop it (see the module doc).
        // SAFETY: nix marks `signal` unsafe for the code a handler would run; SIG_IGN installs
        // no handler. The command, already spawned, keeps its default.
        unsafe {
            let _ = nix::sys::signal::signal(Signal::SIGTTOU, SigHandler::SigIgn);
            // SIGTTIN too: the wrapper never reads the terminal, but another member of its
            // job (`cat | redlock-run ...`) that does gets the whole background group stopped,
            // the wrapper with it, while the command runs on.
            let _ = nix::sys::signal::signal(Signal::SIGTTIN, SigHandler::SigIgn);
        }
        Ok(Job {
            group: child,
            tree,
            terminal,
            gave_terminal: take_terminal,
            sigchld,
            ended: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.group.as_raw() as u32
    }

    /// The command's group is the terminal's foreground group (so the terminal's signals
    /// reach it instead of the wrapper's group).
    pub fn has_terminal(&self) -> bool {
        self.gave_terminal
    }

    /// How the command's tree is tracked, and why not by a cgroup if it is not.
    pub fn tracking(&self) -> (Mode, Option<&str>) {
        (self.tree.mode(), self.tree.fallback_reason())
    }

    /// Forward `sig` to the command's process group, as a terminal would. A group that is
    /// already gone is not an error.
    pub fn signal(&self, sig: Signal) {
        let _ = killpg(self.group, sig);
    }

    /// Ask the whole command to stop: SIGTERM to its group and every process of its tree,
    /// then SIGCONT (and thaw), so that a stopped or frozen process acts on it.
    pub fn terminate(&self) {
        let _ = killpg(self.group, Signal::SIGTERM);
        self.tree.signal_all(Signal::SIGTERM);
        let _ = self.tree.thaw();
        let _ = killpg(self.group, Signal::SIGCONT);
        self.tree.signal_all(Signal::SIGCONT);
    }

    /// Kill the whole command at once: its group and its tree (`cgroup.kill`, or
    /// freeze-then-kill, so nothing forks away in between).
    pub fn kill(&self) {
        let _ = killpg(self.group, Signal::SIGKILL);
        let _ = self.tree.kill_all();
    }

    /// The next thing that happens to the command: its end, or a job-control stop at a
    /// terminal. Cancel-safe. Reaps any other child (orphans of the command) on the way.
    pub async fn event(&mut self) -> io::Result<Event> {
        loop {
            if let Some(end) = self.ended {
                return Ok(Event::Ended(end));
            }
            if let Some(event) = self.poll()? {
                return Ok(event);
            }
            self.sigchld.recv().await;
        }
    }

    /// Look at every child that changed state, without waiting.
    fn poll(&mut self) -> io::Result<Option<Event>> {
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED;
        loop {
            let status = match waitpid(None, Some(flags)) {
                // Nothing to report, unless a stop is due that can never happen.
                Ok(WaitStatus::StillAlive) => return Ok(self.stuck_stop()),
                Ok(status) => status,
                // No child left at all: the leader was reaped, or someone else reaped it.
                Err(Errno::ECHILD) => {
                    return match self.ended {
                        Some(end) => Ok(Some(Event::Ended(end))),
                        None => Err(io::Error::from(Errno::ECHILD)),
                    };
                }
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(io::Error::from(e)),
            };
            if status.pid() != Some(self.group) {
                continue; // an orphan of the command, now reaped
            }
            match status {
                WaitStatus::Exited(_, code) => {
                    self.ended = Some(ChildEnd::Exited(code));
                    return Ok(Some(Event::Ended(ChildEnd::Exited(code))));
                }
                WaitStatus::Signaled(_, sig, _) => {
                    let end = ChildEnd::Signalled(sig as i32);
                    self.ended = Some(end);
                    return Ok(Some(Event::Ended(end)));
                }
                WaitStatus::Stopped(_, sig) if is_job_control(sig) && self.terminal.is_some() => {
                    return Ok(Some(Event::Suspended(sig)));
                }
                // SIGSTOP from someone, or no terminal: not job control; keep the lease.
                _ => continue,
            }
        }
    }

    /// A job-control stop that reached the command's leader but can never stop it: see
    /// [`stop_it_cannot_act_on`]. Only at a terminal, as for a stop that waitpid reports.
    fn stuck_stop(&self) -> Option<Event> {
        self.terminal.as_ref()?;
        stop_it_cannot_act_on(self.group).map(Event::Suspended)
    }

    /// The command was suspended by `sig` at a terminal: stop its whole group, give the
    /// terminal back, and stop the wrapper with the same signal. Returns once the wrapper is
    /// continued (`fg`, `bg`); the caller checks the lease, then calls [`Job::resume`].
    /// Only for a wrapper whose group is not orphaned ([`group_is_orphaned`]): the kernel
    /// does not stop an orphaned group, and nobody would continue the job.
    pub fn suspend_with(&mut self, sig: Signal) {
        // The "stopping too" line reaches stderr before the writer thread stops with us.
        crate::report::drain(Duration::from_millis(50));
        // Everything stops, not only the leader that the signal reached: the group, and any
        // process of the tree that left it. Nothing runs on while the wrapper renews nothing.
        self.signal(Signal::SIGSTOP);
        let _ = self.tree.freeze();
        if self.gave_terminal {
            if let Some(t) = &self.terminal {
                give_terminal(t.as_fd(), getpgrp());
            }
            self.gave_terminal = false;
        }
        // The terminal sent `sig` to the command's group in place of the wrapper's: the
        // wrapper's group (the wrapper, and a script or pipeline it is part of) stops as it
        // would have with the bare command, and the shell sees its job stopped.
        stop_group(sig);
    }

    /// Continue the command after the wrapper was continued with its lease intact: in the
    /// foreground it gets the terminal again.
    pub fn resume(&mut self) {
        let _ = self.tree.thaw();
        if let Some(t) = &self.terminal
            && t.foreground_is_ours()
        {
            give_terminal(t.as_fd(), self.group);
            self.gave_terminal = true;
        }
        self.signal(Signal::SIGCONT);
    }

    /// After the leader exited: stop whatever is left of the command, in its group or its
    /// tree (SIGTERM, SIGKILL at `kill_at` or as soon as `hurry` completes), reap it, and give
    /// the terminal back. Nothing the command started may keep running once the lock is
    /// released. Returns the tree when nothing is left in it: removing its cgroup (a few
    /// hundred microseconds) can then wait until the release is on its way. A tree that is
    /// not empty even now is killed and removed here (dropping a tree does the same).
    pub async fn finish(self, kill_at: Stamp, hurry: impl std::future::Future) -> Option<Tree> {
        if self.leftovers() {
            self.terminate();
            let gone = tokio::select! {
                gone = self.wait_gone(Stamp::now().until(kill_at)) => gone,
                _ = hurry => false,
            };
            if !gone {
                self.kill();
                self.wait_gone(Duration::from_secs(5)).await;
            }
        }
        reap_orphans();
        if self.gave_terminal
            && let Some(t) = &self.terminal
        {
            give_terminal(t.as_fd(), getpgrp());
        }
        if self.tree.is_empty() {
            return Some(self.tree);
        }
        // Kills anything left and waits (bounded) for it to be gone.
        let _ = self.tree.remove();
        None
    }

    /// Anything of the command still running, in its group or its tree?
    fn leftovers(&self) -> bool {
        reap_orphans();
        !matches!(killpg(self.group, None), Err(Errno::ESRCH)) || !self.tree.is_empty()
    }

    /// Poll until nothing of the command is left, or `within` has passed. Returns whether
    /// it is all gone.
    async fn wait_gone(&self, within: Duration) -> bool {
        // Read the clock each time rather than add up naps: naps run long under load, and a
        // paused wrapper must act on the real time when it wakes.
        let until = Stamp::now().checked_add(within);
        while self.leftovers() {
            let now = Stamp::now();
            if until.is_none_or(|at| now >= at) {
                return false;
            }
            let left = until.map_or(Duration::ZERO, |at| now.until(at));
            tokio::time::sleep(left.min(Duration::from_millis(10))).await;
        }
        true
    }
}

/// Whether the wrapper's process group is orphaned: no process on the wrapper's line of
/// ancestors outside the group is in the same session. The kernel does not stop an
/// orphaned group with SIGTSTP, SIGTTIN or SIGTTOU (no shell would continue it).
pub fn group_is_orphaned() -> bool {
    let group = getpgrp().as_raw();
    let session = nix::unistd::getsid(None).map_or(-1, |s| s.as_raw());
    let mut pid = getppid().as_raw();
    for _ in 0..64 {
        let Some(Stat {
            ppid,
            pgrp,
            session: sid,
            ..
        }) = read_stat(pid)
        else {
            return true;
        };
        if pgrp != group {
            return sid != session;
        }
        if ppid <= 0 {
            return true;
        }
        pid = ppid;
    }
    true
}

/// A job-control stop signal (SIGTSTP, SIGTTIN, SIGTTOU) that `pid` has pending, at its
/// default action, while it sits in an uninterruptible wait: the stop is due, but the process
/// does not stop until the wait is over, and waitpid reports nothing.
///
/// The wait that matters is a vfork (dash runs every external command through one, and
/// posix_spawn, used by make and many others, is one): the parent waits in the kernel until
/// its child has exec'd. A Ctrl-Z between the vfork and the exec stops the child before it
/// execs, so the parent, the command's leader, waits for ever with the SIGTSTP pending. The
/// bare command leaves the shell without a prompt then (until someone sends SIGCONT); the
/// wrapper, which looks every pass of the supervisor, takes it for the stop it is and
/// follows: the job stops, and `fg` continues it as any other (SIGCONT to the group lets
/// the child exec and drops the pending stop).
///
/// Not a stop the command blocks in order to take it later (it would not be waiting in `D`
/// for it), or catches or ignores; not once SIGKILL is on its way.
fn stop_it_cannot_act_on(pid: Pid) -> Option<Signal> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    pending_stop_in_uninterruptible_wait(&status)
}

/// [`stop_it_cannot_act_on`] from the text of /proc/PID/status.
fn pending_stop_in_uninterruptible_wait(status: &str) -> Option<Signal> {
    let mut state = None;
    let mut pending = 0u64;
    let mut not_default = 0u64;
    for line in status.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let mask = || u64::from_str_radix(value, 16).ok();
        match name {
            "State" => state = value.chars().next(),
            // Sent to the thread, or to the process (the terminal's and kill's signals).
            "SigPnd" | "ShdPnd" => pending |= mask()?,
            "SigIgn" | "SigCgt" => not_default |= mask()?,
            _ => {}
        }
    }
    let bit = |sig: Signal| 1u64 << (sig as i32 - 1);
    if state != Some('D') || pending & bit(Signal::SIGKILL) != 0 {
        return None;
    }
    [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU]
        .into_iter()
        .find(|&sig| pending & bit(sig) != 0 && not_default & bit(sig) == 0)
}

fn is_job_control(sig: Signal) -> bool {
    matches!(sig, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)
}

/// Reap every exited process reparented to us. Only called once the leader has been reaped.
fn reap_orphans() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/PID/status of dash waiting in vfork for a child stopped by Ctrl-Z before it
    /// exec'd (taken from a hung run), less the lines that do not matter here.
    const DASH_IN_VFORK: &str = "Name:\tsh\nState:\tD (disk sleep)\nThreads:\t1\n\
        SigQ:\t3/96362\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000090000\n\
        SigBlk:\tfffffffe7ffbfeff\nSigIgn:\t0000000080000000\nSigCgt:\t0000000000014002\n";

    #[test]
    fn a_stop_pending_in_an_uninterruptible_wait_is_found() {
        assert_eq!(
            pending_stop_in_uninterruptible_wait(DASH_IN_VFORK),
            Some(Signal::SIGTSTP)
        );
        let ttin = DASH_IN_VFORK
            .replace("ShdPnd:\t0000000000090000", "ShdPnd:\t0000000000000000")
            .replace("SigPnd:\t0000000000000000", "SigPnd:\t0000000000100000");
        assert_eq!(
            pending_stop_in_uninterruptible_wait(&ttin),
            Some(Signal::SIGTTIN)
        );
    }

    #[test]
    fn a_stop_the_process_can_still_act_on_or_handles_itself_is_not() {
        // Not in an uninterruptible wait: it stops by itself, or blocks the signal on purpose.
        let sleeping = DASH_IN_VFORK.replace("D (disk sleep)", "S (sleeping)");
        assert_eq!(pending_stop_in_uninterruptible_wait(&sleeping), None);
        // Caught or ignored: the command decides what a stop means.
        let caught =
            DASH_IN_VFORK.replace("SigCgt:\t0000000000014002", "SigCgt:\t0000000000094002");
        assert_eq!(pending_stop_in_uninterruptible_wait(&caught), None);
        let ignored =
            DASH_IN_VFORK.replace("SigIgn:\t0000000080000000", "SigIgn:\t0000000080080000");
        assert_eq!(pending_stop_in_uninterruptible_wait(&ignored), None);
        // Being killed.
        let killed =
            DASH_IN_VFORK.replace("SigPnd:\t0000000000000000", "SigPnd:\t0000000000000100");
        assert_eq!(pending_stop_in_uninterruptible_wait(&killed), None);
        // Only SIGCHLD pending.
        let chld = DASH_IN_VFORK.replace("ShdPnd:\t0000000000090000", "ShdPnd:\t0000000000010000");
        assert_eq!(pending_stop_in_uninterruptible_wait(&chld), None);
        assert_eq!(pending_stop_in_uninterruptible_wait(""), None);
    }
}
