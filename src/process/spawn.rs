//! Starting the command: in its own process group, inside its tree (born in its cgroup
//! through `clone3` where the kernel allows it, else forked and joining it first thing),
//! dying with the wrapper (`PR_SET_PDEATHSIG`), with the terminal's foreground if the
//! wrapper has it.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;

use nix::sys::prctl;
use nix::sys::signal::{SigHandler, Signal, kill};
use nix::unistd::{Pid, getpid, getppid, setpgid};

use super::clone_into::{self, CloneError};
use super::signals;
use super::terminal::give_terminal;
use super::tree::Tree;
use crate::config;

/// Why the command could not be started.
#[derive(Debug)]
pub enum SpawnError {
    NotFound(io::Error),
    NotExecutable(io::Error),
    /// The wrapper's own set-up failed (joining the command's cgroup, signal handling).
    Internal(io::Error),
}

/// Set to anything but empty or `0`, the command is forked and then joins its cgroup instead
/// of being born in it (for a kernel or a sandbox where `clone3` misbehaves; also tested).
pub const NO_CLONE_INTO_CGROUP_ENV: &str = "REDLOCK_NO_CLONE3";

/// Spawn `command` in its own process group, inside `tree`: born in its cgroup
/// (`clone_into`) where the kernel allows it, else forked and joining it first thing.
pub fn spawn_in(
    tree: &Tree,
    command: &config::Command,
    env: &[(&str, String)],
    take_terminal: bool,
    tty: Option<i32>,
) -> Result<Pid, SpawnError> {
    let setup = child_setup(take_terminal, tty);
    let born_inside =
        std::env::var_os(NO_CLONE_INTO_CGROUP_ENV).is_none_or(|v| v.is_empty() || v == "0");
    if let (Some(cgroup), true) = (tree.cgroup_fd(), born_inside) {
        match clone_into::spawn(cgroup, &command.program, &command.args, env, &setup) {
            Ok(pid) => return Ok(pid),
            Err(CloneError::Exec(e)) => return Err(classify_spawn_error(e)),
            // No process was made (an old kernel, a seccomp filter): fork and join instead.
            Err(CloneError::Unsupported) => {}
        }
    }
    let join = tree.pre_exec_join().map_err(SpawnError::Internal)?;
    let mut cmd = std::process::Command::new(&command.program);
    cmd.args(&command.args);
    cmd.envs(
        env.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    cmd.process_group(0);
    // SAFETY: both closures run in the forked child before exec and only make system calls
    // (see `child_setup` and `Tree::pre_exec_join`).
    unsafe {
        // First: in the command's cgroup before anything else can happen or fork.
        cmd.pre_exec(join);
        cmd.pre_exec(setup);
    }
    let child = cmd.spawn().map_err(classify_spawn_error)?;
    Ok(Pid::from_raw(child.id() as i32))
}

/// What the child does before exec, whichever way it was started. It only makes
/// async-signal-safe system calls through nix's thin wrappers (setpgid, prctl, getppid,
/// getpid, kill; pthread_sigmask and tcsetpgrp in [`give_terminal`]; signal for SIGPIPE),
/// and allocates nothing (an error is a raw errno): the wrapper has other threads.
fn child_setup(
    take_terminal: bool,
    tty: Option<i32>,
) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
    let keep_sigpipe_ignored = signals::sigpipe_ignored_at_start();
    let wrapper = getpid();
    move || {
        // Be the group leader already, whatever order std applies its own setup in;
        // tcsetpgrp below needs the group to exist.
        let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
        prctl::set_pdeathsig(Signal::SIGKILL)?;
        // The wrapper may have died between fork and prctl; then nobody would kill us.
        if getppid() != wrapper {
            let _ = kill(getpid(), Signal::SIGKILL);
        }
        if let (true, Some(fd)) = (take_terminal, tty) {
            // SAFETY: `fd` is the wrapper's terminal, open for the wrapper's lifetime.
            give_terminal(unsafe { BorrowedFd::borrow_raw(fd) }, getpid());
        }
        // The child starts with SIGPIPE at its default; one that was ignored when the wrapper
        // started stays ignored, as if the command ran directly.
        if keep_sigpipe_ignored {
            // SAFETY: SIG_IGN installs no handler.
            let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) };
        }
        Ok(())
    }
}

fn classify_spawn_error(err: io::Error) -> SpawnError {
    match err.kind() {
        io::ErrorKind::NotFound => SpawnError::NotFound(err),
        _ => SpawnError::NotExecutable(err),
    }
}
