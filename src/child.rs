//! The command as a supervised process group.
//!
//! - The command leads its own process group, so one `killpg` reaches everything it started
//!   that stayed in the group (a shell's children, a pipeline).
//! - It dies with the wrapper: `PR_SET_PDEATHSIG` delivers SIGKILL when the thread that forked
//!   it exits. The fork happens on the main thread (the runtime is current-thread), which lives
//!   as long as the process. Processes the command starts are not covered by that (the
//!   setting is not inherited); they are covered on every path where the wrapper still runs,
//!   because the wrapper is a child subreaper and stops whatever is left in the group.
//! - When stdin is the terminal and the wrapper is in its foreground, the command's group
//!   gets the foreground (or it would be stopped by SIGTTIN when it reads), and the wrapper
//!   takes it back afterwards.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{kill, killpg, pthread_sigmask, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{getpgrp, getpid, getppid, setpgid, tcsetpgrp, Pid};

use crate::config;
use crate::lease::Stamp;

/// Why the command could not be started.
#[derive(Debug)]
pub enum SpawnError {
    NotFound(io::Error),
    NotExecutable(io::Error),
}

/// A running command and its process group.
pub struct Job {
    child: tokio::process::Child,
    group: Pid,
    took_terminal: bool,
}

/// Make this process the reaper of orphans it leaves behind, so processes the command started
/// and abandoned can be found, stopped and reaped after the command exits.
pub fn become_subreaper() {
    // Failure only weakens the cleanup of leftovers, so it is ignored.
    let _ = prctl::set_child_subreaper(true);
}

impl Job {
    /// Start `command` with the extra environment `env`. Must be called from the main thread.
    pub fn spawn(command: &config::Command, env: &[(&str, String)]) -> Result<Job, SpawnError> {
        let mut cmd = std::process::Command::new(&command.program);
        cmd.args(&command.args);
        cmd.envs(
            env.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        cmd.process_group(0);
        let take_terminal = owns_terminal_foreground();
        let wrapper = getpid();
        // SAFETY: the closure runs in the forked child before exec. It only makes
        // async-signal-safe syscalls (setpgid, prctl, getppid, getpid, kill, pthread_sigmask,
        // tcsetpgrp) through nix's thin wrappers, and allocates nothing (an error is a raw errno).
        unsafe {
            cmd.pre_exec(move || {
                // Be the group leader already, whatever order std applies its own setup in;
                // tcsetpgrp below needs the group to exist.
                let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
                prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The wrapper may have died between fork and prctl; then nobody would kill us.
                if getppid() != wrapper {
                    let _ = kill(getpid(), Signal::SIGKILL);
                }
                if take_terminal {
                    give_terminal_to(getpid());
                }
                Ok(())
            });
        }
        let child = tokio::process::Command::from(cmd)
            .spawn()
            .map_err(classify_spawn_error)?;
        if take_terminal {
            // The wrapper is now a background group on the terminal; with `stty tostop` its
            // next message would stop it with SIGTTOU while the command runs on without a
            // supervisor. Ignoring it here does not reach the command: it was already spawned.
            // SAFETY: nix marks `signal` unsafe for the code a handler would run; SIG_IGN
            // installs no handler, so there is none.
            unsafe {
                let _ = nix::sys::signal::signal(Signal::SIGTTOU, SigHandler::SigIgn);
            }
        }
        let pid = child.id().map(|id| id as libc::pid_t).unwrap_or(0);
        Ok(Job {
            child,
            group: Pid::from_raw(pid),
            took_terminal: take_terminal,
        })
    }

    pub fn pid(&self) -> u32 {
        self.group.as_raw() as u32
    }

    /// Send `sig` to the whole process group. A group that is already gone is not an error.
    pub fn signal(&self, sig: Signal) {
        let _ = killpg(self.group, sig);
    }

    /// Wait for the group leader to exit. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// After the leader exited: stop whatever is left in its group (SIGTERM, SIGKILL at
    /// `kill_at` or as soon as `hurry` completes), reap it, and give the terminal back.
    /// Nothing the command started in its group may keep running once the lock is released.
    pub async fn finish(self, kill_at: Stamp, hurry: impl std::future::Future) {
        if group_alive(self.group) {
            let _ = killpg(self.group, Signal::SIGTERM);
            let _ = killpg(self.group, Signal::SIGCONT);
            let gone = tokio::select! {
                gone = wait_group_gone(self.group, Stamp::now().until(kill_at)) => gone,
                _ = hurry => false,
            };
            if !gone {
                let _ = killpg(self.group, Signal::SIGKILL);
                wait_group_gone(self.group, Duration::from_secs(5)).await;
            }
        }
        reap_orphans();
        if self.took_terminal {
            take_terminal_back();
        }
    }
}

fn classify_spawn_error(err: io::Error) -> SpawnError {
    match err.kind() {
        io::ErrorKind::NotFound => SpawnError::NotFound(err),
        _ => SpawnError::NotExecutable(err),
    }
}

/// True when stdin is a terminal whose foreground group is ours.
fn owns_terminal_foreground() -> bool {
    // SAFETY: fd 0 stays open for the process lifetime; we only borrow it for this call.
    let stdin = unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) };
    std::io::IsTerminal::is_terminal(&std::io::stdin())
        && nix::unistd::tcgetpgrp(stdin).is_ok_and(|fg| fg == getpgrp())
}

fn take_terminal_back() {
    give_terminal_to(getpgrp());
}

/// Make `group` the terminal's foreground group. Called from a background group (the child
/// before exec, the wrapper afterwards), which would get SIGTTOU unless it is blocked.
///
/// Async-signal-safe syscalls only and no allocation, so it may run in the forked child
/// before exec. Best effort: errors are ignored.
fn give_terminal_to(group: Pid) {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old));
    // Not `std::io::stdin()`: its first use allocates a buffer, which must not happen here.
    // SAFETY: fd 0 stays open for the process lifetime; it is borrowed only for this call.
    let stdin = unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) };
    let _ = tcsetpgrp(stdin, group);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}

/// Any process (zombies included) still in the group?
fn group_alive(group: Pid) -> bool {
    reap_orphans();
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}

/// Poll until the group is empty or `within` has passed. Returns whether it is empty.
async fn wait_group_gone(group: Pid, within: Duration) -> bool {
    // Read the clock each time rather than add up naps: naps run long under load, and a
    // paused wrapper must act on the real time when it wakes.
    let until = Stamp::now().checked_add(within);
    while group_alive(group) {
        let now = Stamp::now();
        if until.is_none_or(|at| now >= at) {
            return false;
        }
        let left = until.map_or(Duration::ZERO, |at| now.until(at));
        tokio::time::sleep(left.min(Duration::from_millis(10))).await;
    }
    true
}

/// Reap every exited process reparented to us. Only called once the leader has been waited
/// for, so it cannot steal the leader's status from tokio.
fn reap_orphans() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == nix::sys::wait::WaitStatus::StillAlive {
            break;
        }
    }
}
