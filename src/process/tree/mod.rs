//! The command as its whole process tree, including processes that left its process group or
//! session (`setsid`, `timeout(1)`, which calls `setpgid`, double forks).
//!
//! A [`Tree`] is made *before* the command is spawned and picks one of two modes:
//!
//! # cgroup mode ([`Mode::Cgroup`], `cgroup.rs`)
//! Linux cgroup v2 with a writable hierarchy. The cgroup2 mount is found in
//! `/proc/self/mountinfo` (file system type `cgroup2`: `/sys/fs/cgroup/unified` on a hybrid
//! layout, `/sys/fs/cgroup` on a unified one) and the wrapper's own cgroup in the `0::` line of
//! `/proc/self/cgroup`; no path is fixed. The command gets a child cgroup of the wrapper's own,
//! `redlock-run.<wrapper pid>`, and the forked child joins it before exec by writing `0` (the
//! writing process) to a `cgroup.procs` descriptor opened beforehand ([`Tree::pre_exec_join`]).
//! No controller is enabled, so the "no internal processes" rule never applies: the wrapper
//! may sit in a cgroup with processes of its own (or in the root), `cgroup.procs`,
//! `cgroup.kill`, `cgroup.freeze` and `cgroup.events` work without controllers.
//! - Covered: every process the command starts, whatever its group or session, double forks,
//!   daemons that re-parent to init, nested `redlock-run`s (their cgroups sit inside ours and
//!   are counted, frozen, killed and removed with it), processes of another user (`sudo`: the
//!   kernel kills and freezes them without the permission check of kill(2)).
//!   [`Tree::kill_all`] writes `cgroup.kill`: atomic, nothing can fork away.
//! - The wrapper killed by SIGKILL is covered too: a small *guard* process (a fork of the
//!   wrapper, named `redlock-guard`, in the wrapper's cgroup and a process group of its own,
//!   ignoring the usual signals) waits on a pipe whose only write end the wrapper holds. When
//!   the wrapper is gone for any reason the read returns end-of-file and the guard writes
//!   `cgroup.kill`, removes the cgroup and exits.
//! - Not covered: a process with write access to `cgroup.procs` of an enclosing cgroup (root,
//!   or the same user in a delegated subtree) may move itself out on purpose; a process that
//!   kills the guard and then the wrapper (same user) is not followed after the wrapper's
//!   death; work handed to a daemon (`systemd-run`, `at`, `docker run`, `ssh host cmd`) is
//!   not the command's descendant in any mode.
//! - Needs Linux 5.14 or later (`cgroup.kill`); otherwise, or when the cgroup cannot be made
//!   or joined (an unprivileged user outside a delegated subtree on a systemd host, a
//!   read-only `/sys/fs/cgroup` in a container, a threaded cgroup), the /proc mode is used and
//!   [`Tree::fallback_reason`] says why.
//!
//! # /proc mode ([`Mode::Proc`], `proc.rs`)
//! The wrapper is a child subreaper (this mode makes it one, the supervisor already is), so
//! every orphaned descendant is re-parented to the wrapper, never to init. The tree is found
//! by following the parent links in `/proc/*/stat` down from the wrapper's pid. The wrapper
//! starts no other process than the command, so its descendants are the command's tree;
//! children it already had when the `Tree` was made (inherited across an `exec`, as in
//! `sh -c 'job & exec redlock-run ...'`) and their subtrees are left out.
//! [`Tree::kill_all`] freezes before it kills: SIGSTOP to every descendant, wait until every
//! thread of each is really stopped, walk again, until a walk finds nothing new (a stopped
//! process cannot fork), then SIGKILL.
//! - Covered while the wrapper runs: every descendant, whatever its group or session, that
//!   this process may signal.
//! - Not covered: the wrapper killed by SIGKILL. Only the command itself dies then
//!   (`PR_SET_PDEATHSIG`, set by the spawner; a setuid program may drop it); the processes it
//!   started are re-parented to the next subreaper above the wrapper or init, and nothing
//!   stops them. Descendants of another user (`sudo cmd` from an unprivileged wrapper): kill(2)
//!   is refused; [`Tree::kill_all`] reports them (`PermissionDenied`) rather than wait.
//! - SIGSTOP is visible (a process shows as stopped, a SIGCONT from outside resumes it); pid
//!   reuse is checked by start time, not excluded with pidfds.
//!
//! `REDLOCK_NO_CGROUP=1` (any value but empty or `0`) makes [`Tree::new`] use the /proc mode
//! even where a cgroup could be made: for tests that cover both modes on one machine, and for
//! hosts where making cgroups is not wanted.
//!
//! # For the spawner
//! - Call [`Tree::new`] before the spawn, then register [`Tree::pre_exec_join`] as the *first*
//!   `pre_exec` closure: the child must be in the cgroup before exec and before anything else
//!   can fork. A failed join makes the spawn fail with that errno (`ENODEV`, `EACCES`,
//!   `EBUSY`), which is not a "command not found".
//! - Zombies do not count as members ([`Tree::is_empty`] is about running processes). Orphans
//!   re-parented to the wrapper stay zombies until the spawner reaps them (the guard, a child
//!   of the wrapper too, is reaped by the tree).
//! - [`Tree::kill_all`], [`Tree::freeze`] and [`Tree::remove`] block: in the cgroup mode for a
//!   few microseconds (`kill_all`) or until the kernel reports the state (`freeze`: at most
//!   [`STOP_WITHIN`]; `remove`: at most 2 s); in the /proc mode until every process has
//!   stopped, normally a few milliseconds, at most [`STOP_WITHIN`].
//! - A process that joins a frozen cgroup is frozen at once: do not spawn into a frozen tree.
//! - Dropping a `Tree` kills what is left of the command and removes its cgroup.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

mod cgroup;
mod proc;
#[cfg(test)]
mod tests;

use cgroup::Cgroup;
use proc::{ProcTree, signal_if_same};
pub use proc::{Stat, read_stat};

/// Set to anything but empty or `0`, [`Tree::new`] does not try the cgroup mode.
pub const NO_CGROUP_ENV: &str = "REDLOCK_NO_CGROUP";

/// The longest [`Tree::kill_all`] and [`Tree::freeze`] wait for processes to stop (the /proc
/// mode) or for the kernel to report the cgroup frozen (the cgroup mode).
pub const STOP_WITHIN: Duration = Duration::from_secs(2);

/// How the tree is tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A cgroup v2 of its own: complete and atomic, survives the wrapper's SIGKILL (guard).
    Cgroup,
    /// The subreaper's view of its descendants in /proc, while the wrapper runs.
    Proc,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Cgroup => "cgroup",
            Mode::Proc => "proc",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The command's process tree. See the module documentation.
pub struct Tree {
    inner: Inner,
    /// Why the cgroup mode is not used, in the /proc mode.
    fallback: Option<String>,
}

enum Inner {
    Cgroup(Cgroup),
    Proc(ProcTree),
}

impl Tree {
    /// The cgroup mode where it works, else the /proc mode (also when [`NO_CGROUP_ENV`] is
    /// set). Call it before the spawn. In the /proc mode the calling process becomes a child
    /// subreaper.
    // No `Default`: making a cgroup and forking a guard is not a default value.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Tree {
        if no_cgroup_requested(std::env::var_os(NO_CGROUP_ENV)) {
            return Tree::proc_mode(format!("{NO_CGROUP_ENV} is set"));
        }
        match Cgroup::create(false) {
            Ok(cgroup) => Tree {
                inner: Inner::Cgroup(cgroup),
                fallback: None,
            },
            Err(e) => Tree::proc_mode(e.to_string()),
        }
    }

    /// The cgroup mode's tree, made ahead of the spawn (while a request to Redis is on its
    /// way), or `None` where [`Tree::new`] would choose the /proc mode. That mode is made only
    /// right before the spawn: it makes this process a child subreaper and leaves out the
    /// children it has at that moment, so made earlier it would adopt, and later stop as the
    /// command's, processes orphaned meanwhile by a child inherited across `exec`.
    pub fn ahead() -> Option<Tree> {
        if no_cgroup_requested(std::env::var_os(NO_CGROUP_ENV)) {
            return None;
        }
        let cgroup = Cgroup::create(false).ok()?;
        Some(Tree {
            inner: Inner::Cgroup(cgroup),
            fallback: None,
        })
    }

    /// After a spawn failed: whether the child could not join the cgroup (and why). Then
    /// [`Tree::fall_back`] and spawn again.
    pub fn join_error(&self) -> Option<io::Error> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.join_error(),
            Inner::Proc(_) => None,
        }
    }

    /// Give up the cgroup (removed, its guard let go) for the /proc mode, saying why.
    pub fn fall_back(self, why: &io::Error) -> Tree {
        let dir = self.cgroup_dir().map(|d| d.display().to_string());
        drop(self);
        Tree::proc_mode(format!(
            "a process cannot be moved into {}: {why}",
            dir.unwrap_or_default()
        ))
    }

    fn proc_mode(reason: String) -> Tree {
        let (proc_tree, subreaper) = ProcTree::create();
        let fallback = match subreaper {
            Ok(()) => reason,
            Err(e) => format!("{reason}; cannot become a child subreaper ({e}): orphans escape"),
        };
        Tree {
            inner: Inner::Proc(proc_tree),
            fallback: Some(fallback),
        }
    }

    pub fn mode(&self) -> Mode {
        match self.inner {
            Inner::Cgroup(_) => Mode::Cgroup,
            Inner::Proc(_) => Mode::Proc,
        }
    }

    /// In the /proc mode, why the cgroup mode is not used (one line, for `-v` or a warning).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The command's cgroup directory, in the cgroup mode.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Cgroup(cg) => Some(cg.dir()),
            Inner::Proc(_) => None,
        }
    }

    /// The command's cgroup directory, open, for starting the command inside it.
    pub fn cgroup_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.inner {
            Inner::Cgroup(cg) => Some(cg.dir_fd()),
            Inner::Proc(_) => None,
        }
    }

    /// A closure for `CommandExt::pre_exec` that puts the forked child into the tree: in the
    /// cgroup mode it writes `"0\n"` to a duplicate of the cgroup's `cgroup.procs` descriptor
    /// (async-signal-safe: one `write`, no allocation); in the /proc mode it does nothing.
    /// The closure owns its descriptor (close-on-exec, closed when the `Command` is dropped),
    /// so it stays valid however long the `Command` lives. Register it first.
    pub fn pre_exec_join(
        &self,
    ) -> io::Result<impl Fn() -> io::Result<()> + Send + Sync + 'static + use<>> {
        let fds: Option<(OwnedFd, OwnedFd)> = match &self.inner {
            Inner::Cgroup(cg) => Some(cg.join_fds()?),
            Inner::Proc(_) => None,
        };
        Ok(move || match &fds {
            Some((procs, errors)) => cgroup::join(procs, errors),
            None => Ok(()),
        })
    }

    /// The processes of the tree that are still running (zombies left out).
    pub fn pids(&self) -> Vec<Pid> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.pids(),
            Inner::Proc(p) => p.live().iter().map(|s| Pid::from_raw(s.pid)).collect(),
        }
    }

    /// Send `sig` to every process of the tree; returns how many were found. One pass: a
    /// process forked meanwhile may miss it, which is fine for SIGTERM or SIGCONT. SIGKILL
    /// goes through [`Tree::kill_all`], which misses none.
    pub fn signal_all(&self, sig: Signal) -> usize {
        if sig == Signal::SIGKILL {
            let found = self.pids().len();
            let _ = self.kill_all();
            return found;
        }
        match &self.inner {
            Inner::Cgroup(cg) => {
                let pids = cg.pids();
                for pid in &pids {
                    let _ = kill(*pid, sig);
                }
                pids.len()
            }
            Inner::Proc(p) => {
                let live = p.live();
                for s in &live {
                    let _ = signal_if_same(s.pid, s.start, sig);
                }
                live.len()
            }
        }
    }

    /// SIGKILL to the whole tree, with no way to fork away in between: `cgroup.kill`, or the
    /// /proc mode's freeze-then-kill. Does not wait for the processes to be gone (see
    /// [`Tree::is_empty`], [`Tree::wait_empty`]). An error in the /proc mode means some
    /// process did not stop within [`STOP_WITHIN`] (uninterruptible sleep) or the tree kept
    /// growing; everything found was sent SIGKILL anyway, call it again.
    pub fn kill_all(&self) -> io::Result<()> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.kill_all(),
            Inner::Proc(p) => p.kill_all(STOP_WITHIN),
        }
    }

    /// Stop every process of the tree: `cgroup.freeze` (waits until the kernel reports the
    /// cgroup frozen, at most [`STOP_WITHIN`]), or SIGSTOP until every process has stopped
    /// (the /proc mode: visible to the processes and their parents, undone by any SIGCONT).
    pub fn freeze(&self) -> io::Result<()> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.freeze(STOP_WITHIN),
            Inner::Proc(p) => p.stop_all(STOP_WITHIN).1,
        }
    }

    /// Undo [`Tree::freeze`]: `cgroup.freeze` 0, or SIGCONT to every process.
    pub fn thaw(&self) -> io::Result<()> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.write_freeze(false),
            Inner::Proc(p) => {
                for s in p.live() {
                    let _ = signal_if_same(s.pid, s.start, Signal::SIGCONT);
                }
                Ok(())
            }
        }
    }

    /// True when no process of the tree is running. Zombies do not count: they run nothing
    /// and hold nothing but their exit status (see [`Tree::reap`]).
    pub fn is_empty(&self) -> bool {
        match &self.inner {
            Inner::Cgroup(cg) => cg.is_empty(),
            Inner::Proc(p) => p.live().is_empty(),
        }
    }

    /// End the tree: kill what is left, wait (bounded) for it to be gone, remove the cgroup
    /// (and any cgroup made inside it) and stop the guard. `Drop` does the same, ignoring
    /// errors. An error means the cgroup could not be removed (a process did not exit in
    /// time); the guard then kills it again and retries the removal for a while.
    pub fn remove(mut self) -> io::Result<()> {
        self.close()
    }

    fn close(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Cgroup(cg) => cg.close(),
            Inner::Proc(p) => {
                if !p.live().is_empty() {
                    let _ = p.kill_all(STOP_WITHIN);
                }
                Ok(())
            }
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree")
            .field("mode", &self.mode())
            .field("cgroup_dir", &self.cgroup_dir())
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// Whether the value of [`NO_CGROUP_ENV`] asks for the /proc mode.
fn no_cgroup_requested(value: Option<OsString>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}
