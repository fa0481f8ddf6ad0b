//! The command as its whole process tree, including processes that left its process group or
//! session (`setsid`, `timeout(1)`, which calls `setpgid`, double forks).
//!
//! A [`Tree`] is made *before* the command is spawned and picks one of two modes:
//!
//! # cgroup mode ([`Mode::Cgroup`])
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
//! # /proc mode ([`Mode::Proc`])
//! The wrapper is a child subreaper ([`Tree::with_proc`] makes it one, the supervisor already
//! is), so every orphaned descendant is re-parented to the wrapper, never to init. The tree is
//! found by following the parent links in `/proc/*/stat` down from the wrapper's pid. The
//! wrapper starts no other process than the command, so its descendants are the command's
//! tree; children it already had when the `Tree` was made (inherited across an `exec`, as in
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
//!   re-parented to the wrapper stay zombies until reaped: [`Tree::reap`] reaps them and skips
//!   the pid it is given (the leader, which tokio waits for itself) and the guard.
//! - [`Tree::kill_all`], [`Tree::freeze`] and [`Tree::wait_empty`] block: in the cgroup mode
//!   for a few microseconds (`kill_all`) or until the kernel reports the state (`freeze`,
//!   `wait_empty`, bounded by their arguments or [`STOP_WITHIN`]); in the /proc mode until
//!   every process has stopped, normally a few milliseconds, at most [`STOP_WITHIN`].
//! - A process that joins a frozen cgroup is frozen at once: do not spawn into a frozen tree.
//! - Dropping a `Tree` kills what is left of the command and removes its cgroup.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, Pid};

/// Set to anything but empty or `0`, [`Tree::new`] does not try the cgroup mode.
pub const NO_CGROUP_ENV: &str = "REDLOCK_NO_CGROUP";

/// The longest [`Tree::kill_all`] and [`Tree::freeze`] wait for processes to stop (the /proc
/// mode) or for the kernel to report the cgroup frozen (the cgroup mode).
pub const STOP_WITHIN: Duration = Duration::from_secs(2);

/// How long [`Tree::remove`] (and `Drop`) wait for the processes to be gone after killing them.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// Walks of the /proc mode's freeze before it gives up on a tree that keeps growing.
const MAX_ROUNDS: usize = 100;

/// Pause between two looks at processes that have not stopped yet.
const POLL: Duration = Duration::from_millis(1);

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
        let Inner::Cgroup(cg) = &self.inner else {
            return None;
        };
        let mut buf = [0u8; 4];
        // SAFETY: reads into a local buffer from a descriptor this tree owns.
        let n = unsafe { libc::read(cg.join_errors.as_raw_fd(), buf.as_mut_ptr().cast(), 4) };
        (n == 4).then(|| io::Error::from_raw_os_error(i32::from_ne_bytes(buf)))
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

    /// The cgroup mode, or why it is not available here.
    pub fn with_cgroup() -> io::Result<Tree> {
        Ok(Tree {
            inner: Inner::Cgroup(Cgroup::create(true)?),
            fallback: None,
        })
    }

    /// The /proc mode. Makes the calling process a child subreaper, which the mode relies on
    /// (re-parented orphans stay in view), and leaves out the children it has already.
    pub fn with_proc() -> Tree {
        Tree::proc_mode("the /proc mode was asked for".to_owned())
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
            Inner::Cgroup(cg) => Some(&cg.dir),
            Inner::Proc(_) => None,
        }
    }

    /// The command's cgroup directory, open, for starting the command inside it.
    pub fn cgroup_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.inner {
            Inner::Cgroup(cg) => Some(cg.dir_fd.as_fd()),
            Inner::Proc(_) => None,
        }
    }

    /// The guard's pid, in the cgroup mode: a child of this process that is not the command's.
    pub fn guard_pid(&self) -> Option<Pid> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.guard.as_ref().map(|g| g.pid),
            Inner::Proc(_) => None,
        }
    }

    /// A closure for `CommandExt::pre_exec` that puts the forked child into the tree: in the
    /// cgroup mode it writes `"0\n"` to a duplicate of the cgroup's `cgroup.procs` descriptor
    /// (async-signal-safe: one `write`, no allocation); in the /proc mode it does nothing.
    /// The closure owns its descriptor (close-on-exec, closed when the `Command` is dropped),
    /// so it stays valid however long the `Command` lives. Register it first.
    pub fn pre_exec_join(&self) -> io::Result<impl Fn() -> io::Result<()> + Send + Sync + 'static> {
        let fds: Option<(OwnedFd, OwnedFd)> = match &self.inner {
            Inner::Cgroup(cg) => Some((
                OwnedFd::from(cg.procs.try_clone()?),
                cg.join_errors_in.try_clone()?,
            )),
            Inner::Proc(_) => None,
        };
        Ok(move || match &fds {
            Some((procs, errors)) => join_raw(procs.as_raw_fd()).inspect_err(|e| {
                // Tell the parent that the join, not the exec, failed (see `join_error`).
                let code = e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes();
                // SAFETY: a write of a local buffer; async-signal-safe.
                unsafe {
                    libc::write(errors.as_raw_fd(), code.as_ptr().cast(), code.len());
                }
            }),
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
            Inner::Proc(p) => p.kill_all(),
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

    /// Block until [`Tree::is_empty`] or `within` has passed; returns whether it is empty.
    /// The cgroup mode sleeps on `cgroup.events` notifications, the /proc mode polls.
    pub fn wait_empty(&self, within: Duration) -> bool {
        match &self.inner {
            Inner::Cgroup(cg) => cg.wait_empty(within),
            Inner::Proc(p) => wait_until(within, || p.live().is_empty()),
        }
    }

    /// Reap the zombie children of this process (orphans of the tree re-parented to it),
    /// except `skip` and the guard; returns how many. Pass the leader's pid while something
    /// else (tokio) may still wait for it: a `waitpid(-1)` would steal its status.
    pub fn reap(&self, skip: Option<Pid>) -> usize {
        let me = getpid().as_raw();
        let guard = self.guard_pid();
        let mut reaped = 0;
        for s in scan() {
            let pid = Pid::from_raw(s.pid);
            if s.ppid != me || !is_dead_state(s.state) || Some(pid) == skip || Some(pid) == guard {
                continue;
            }
            if let Ok(status) = waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                if status != WaitStatus::StillAlive {
                    reaped += 1;
                }
            }
        }
        reaped
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
                    let _ = p.kill_all();
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

/// Put the calling process into the cgroup whose `cgroup.procs` is open on `fd`.
/// Async-signal-safe: one `write` of a constant buffer, no allocation.
fn join_raw(fd: RawFd) -> io::Result<()> {
    const ME: &[u8] = b"0\n";
    for _ in 0..100 {
        // SAFETY: writes a constant buffer to a descriptor; no memory is handed over.
        let n = unsafe { libc::write(fd, ME.as_ptr().cast(), ME.len()) };
        if n == ME.len() as isize {
            return Ok(());
        }
        if n >= 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINTR))
}

// ---------------------------------------------------------------------------------------------
// cgroup mode

struct Cgroup {
    dir: PathBuf,
    /// The directory itself, for `clone3(CLONE_INTO_CGROUP)`.
    dir_fd: OwnedFd,
    /// `cgroup.procs`, for writing: duplicated into each join closure.
    procs: File,
    kill: File,
    /// `cgroup.events`, read with `pread` and polled for changes.
    events: File,
    /// A failed join in a forked child writes its errno here (read end, non-blocking).
    join_errors: OwnedFd,
    /// The write end, duplicated into each join closure.
    join_errors_in: OwnedFd,
    guard: Option<Guard>,
    closed: bool,
}

/// The process that kills the cgroup when the wrapper is gone (see the module docs).
struct Guard {
    pid: Pid,
    /// The only write end of the guard's pipe: closing it (or dying) releases the guard.
    arm: OwnedFd,
}

impl Cgroup {
    /// `probe`: fork a process that joins first, to refuse a cgroup that cannot be joined
    /// before anything depends on it. Without it (the spawner's choice: it saves a fork and a
    /// migration on every run) a failed join shows in [`Tree::join_error`] after the spawn.
    fn create(probe: bool) -> io::Result<Cgroup> {
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| context("cannot read /proc/self/cgroup", e))?;
        let own = parse_own_cgroup(&own).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v2 membership (0::) in /proc/self/cgroup",
            )
        })?;
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| context("cannot read /proc/self/mountinfo", e))?;
        let mounts = parse_cgroup2_mounts(&mountinfo);
        if mounts.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup2 file system is mounted",
            ));
        }
        let parent = own_cgroup_dir(&mounts, &own).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("the wrapper's cgroup {own} is not reachable under a cgroup2 mount"),
            )
        })?;
        let dir = make_cgroup_dir(&parent)?;
        Cgroup::open(dir.clone(), probe).inspect_err(|_| {
            let _ = fs::remove_dir(&dir);
        })
    }

    fn open(dir: PathBuf, probe: bool) -> io::Result<Cgroup> {
        let write = |name: &str| {
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(dir.join(name))
                .map_err(|e| context(&format!("cannot open {}", dir.join(name).display()), e))
        };
        let dir_fd = OwnedFd::from(
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(&dir)
                .map_err(|e| context(&format!("cannot open {}", dir.display()), e))?,
        );
        let procs = write("cgroup.procs")?;
        let kill = write("cgroup.kill").map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (cgroup.kill needs Linux 5.14 or later)"),
            )
        })?;
        let events = File::open(dir.join("cgroup.events"))
            .map_err(|e| context("cannot open cgroup.events", e))?;
        if probe {
            probe_join(&procs).map_err(|e| {
                context(
                    &format!("a process cannot be moved into {}", dir.display()),
                    e,
                )
            })?;
        }
        let (join_errors, join_errors_in) = pipe_cloexec()?;
        // SAFETY: fcntl on a descriptor this function owns; only its status flags change.
        unsafe {
            libc::fcntl(join_errors.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK);
        }
        let guard = Guard::spawn(&kill, &dir).map_err(|e| context("cannot start the guard", e))?;
        Ok(Cgroup {
            dir,
            dir_fd,
            procs,
            kill,
            events,
            join_errors,
            join_errors_in,
            guard: Some(guard),
            closed: false,
        })
    }

    fn pids(&self) -> Vec<Pid> {
        let mut pids = Vec::new();
        for dir in cgroup_dirs(&self.dir) {
            let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) else {
                continue;
            };
            pids.extend(
                text.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    // 0: a process of another pid namespace, invisible from ours.
                    .filter(|&p| p > 0)
                    .map(Pid::from_raw),
            );
        }
        pids
    }

    fn kill_all(&self) -> io::Result<()> {
        (&self.kill).write_all(b"1")
    }

    /// `(populated, frozen)` from `cgroup.events`.
    fn events(&self) -> io::Result<(bool, bool)> {
        let mut buf = [0u8; 256];
        let n = self.events.read_at(&mut buf, 0)?;
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        let flag = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .is_some_and(|v| v.trim() == "1")
        };
        Ok((flag("populated "), flag("frozen ")))
    }

    fn is_empty(&self) -> bool {
        match self.events() {
            Ok((populated, _)) => !populated,
            // Removed (rmdir needs an empty cgroup); any other error: assume not empty.
            Err(e) => matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOENT)),
        }
    }

    /// Sleep on `cgroup.events` changes until `done` holds or `within` has passed.
    fn wait_events(&self, within: Duration, done: impl Fn((bool, bool)) -> bool) -> bool {
        let start = Instant::now();
        loop {
            // Reading re-arms the notification, so a change after this read wakes the poll.
            match self.events() {
                Ok(ev) if done(ev) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
            let left = within.saturating_sub(start.elapsed());
            if left.is_zero() {
                return false;
            }
            // A cap, in case a notification is missed: the loop re-reads anyway.
            poll_fd(
                &self.events,
                libc::POLLPRI,
                left.min(Duration::from_millis(50)),
            );
        }
    }

    fn wait_empty(&self, within: Duration) -> bool {
        self.is_empty() || self.wait_events(within, |(populated, _)| !populated)
    }

    fn write_freeze(&self, on: bool) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.freeze"))?
            .write_all(if on { b"1" } else { b"0" })
    }

    fn freeze(&self, within: Duration) -> io::Result<()> {
        self.write_freeze(true)?;
        if self.wait_events(within, |(_, frozen)| frozen) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the cgroup did not report frozen in time (the freeze stays requested)",
            ))
        }
    }

    fn close(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if !self.is_empty() {
            let _ = self.kill_all();
        }
        let result = if self.wait_empty(GONE_WITHIN) {
            remove_cgroup_dirs(&self.dir)
        } else {
            Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "{} still has running processes after cgroup.kill",
                    self.dir.display()
                ),
            ))
        };
        if let Some(guard) = self.guard.take() {
            guard.release();
        }
        result
    }
}

/// The cgroup directory and every cgroup below it (made by nested runs or by the command),
/// parents before children. Bounded: at most 4096 directories.
fn cgroup_dirs(top: &Path) -> Vec<PathBuf> {
    let mut out = vec![top.to_path_buf()];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        if let Ok(entries) = fs::read_dir(&out[i]) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(entry.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// rmdir the cgroup and those below it, children first. A directory already gone is fine.
fn remove_cgroup_dirs(top: &Path) -> io::Result<()> {
    let mut result = Ok(());
    for dir in cgroup_dirs(top).iter().rev() {
        match fs::remove_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => result = Err(context(&format!("cannot remove {}", dir.display()), e)),
        }
    }
    result
}

/// Make `<parent>/redlock-run.<pid>`, or `redlock-run.<pid>.<n>` for the n-th tree of this
/// process or when the name is taken (by a wrapper of the same pid in another pid namespace).
/// A name is never used twice by one process: the tree and its guard remove their directory
/// by path, which must not reach a later tree's.
fn make_cgroup_dir(parent: &Path) -> io::Result<PathBuf> {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let pid = std::process::id();
    for _ in 0..16 {
        let name = match SEQUENCE.fetch_add(1, Ordering::Relaxed) {
            0 => format!("redlock-run.{pid}"),
            n => format!("redlock-run.{pid}.{n}"),
        };
        let dir = parent.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(context(&format!("cannot create {}", dir.display()), e)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "cannot create a cgroup under {}: names taken",
            parent.display()
        ),
    ))
}

/// Fork a process that joins the cgroup exactly as the command will, and report its errno.
/// Checks what no permission bit tells: delegation, the common-ancestor rule, cgroup
/// namespaces, a threaded cgroup.
fn probe_join(procs: &File) -> io::Result<()> {
    let (read, write) = pipe_cloexec()?;
    let procs_fd = procs.as_raw_fd();
    let write_fd = write.as_raw_fd();
    // SAFETY: the child runs async-signal-safe calls only (write, _exit) on memory that was
    // prepared before the fork, and never returns into Rust code of the parent.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code: i32 = match join_raw(procs_fd) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        };
        let bytes = code.to_ne_bytes();
        // SAFETY: see above.
        unsafe {
            libc::write(write_fd, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0);
        }
    }
    drop(write);
    let mut read = File::from(read);
    let mut buf = [0u8; 4];
    let got = if poll_fd(&read, libc::POLLIN, Duration::from_secs(5)) {
        read.read_exact(&mut buf)
    } else {
        Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"))
    };
    let child = Pid::from_raw(pid);
    if got.is_err() {
        let _ = kill(child, Signal::SIGKILL);
    }
    // Bounded: the probe has answered (or was killed) and exits at once.
    let _ = waitpid(child, None);
    got.map_err(|e| context("the probe process did not answer", e))?;
    match i32::from_ne_bytes(buf) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl Guard {
    fn spawn(kill: &File, dir: &Path) -> io::Result<Guard> {
        let dir_c = CString::new(dir.as_os_str().as_bytes())?;
        let (read, write) = pipe_cloexec()?;
        let kill_fd = kill.as_raw_fd();
        let read_fd = read.as_raw_fd();
        // SAFETY: the child runs `guard_main`, which makes async-signal-safe calls only on
        // memory prepared before the fork (`dir_c`) and ends in `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above.
            unsafe { guard_main(read_fd, kill_fd, dir_c.as_ptr()) }
        }
        drop(read);
        Ok(Guard {
            pid: Pid::from_raw(pid),
            arm: write,
        })
    }

    /// Let the guard go after the wrapper removed the cgroup itself: one byte tells it to
    /// exit without touching anything (a later cgroup could have the name by then). Not
    /// waited for: it exits at once, and is reaped by a later `waitpid` or, once the wrapper
    /// has exited, by init.
    fn release(self) {
        // SAFETY: a one-byte write to a pipe this process owns.
        unsafe {
            libc::write(self.arm.as_raw_fd(), b"d".as_ptr().cast(), 1);
        }
        drop(self.arm);
        let _ = waitpid(self.pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// The guard process (see the module docs). It is a fork of a possibly multi-threaded
/// process, so it may only make async-signal-safe calls and must not allocate.
///
/// # Safety
/// Only to be called in a freshly forked child, with `arm` the read end of the guard pipe,
/// `kill` open on `cgroup.kill` and `dir` a valid C string.
unsafe fn guard_main(arm: RawFd, kill: RawFd, dir: *const libc::c_char) -> ! {
    libc::prctl(
        libc::PR_SET_NAME,
        c"redlock-guard".as_ptr() as libc::c_ulong,
        0,
        0,
        0,
    );
    // Out of the wrapper's process group: Ctrl-C, Ctrl-Z and `kill -- -PGID` are for the
    // wrapper; the guard must outlive it. Handlers inherited from the wrapper would write to
    // descriptors closed below: every catchable asynchronous signal is ignored.
    libc::setpgid(0, 0);
    for sig in 1..=64 {
        match sig {
            libc::SIGKILL | libc::SIGSTOP => {}
            libc::SIGSEGV
            | libc::SIGBUS
            | libc::SIGFPE
            | libc::SIGILL
            | libc::SIGABRT
            | libc::SIGTRAP
            | libc::SIGSYS
            | libc::SIGCHLD
            | libc::SIGCONT
            | libc::SIGURG
            | libc::SIGWINCH => {
                libc::signal(sig, libc::SIG_DFL);
            }
            _ => {
                libc::signal(sig, libc::SIG_IGN);
            }
        }
    }
    // Hold nothing of the wrapper's: no pipe of a shell waiting for end-of-file, no other
    // guard's arming pipe (tests make several trees in one process), no directory.
    close_fds_except(arm, kill);
    libc::chdir(c"/".as_ptr());
    let mut buf = [0u8; 64];
    // End-of-file: the wrapper is gone (or dropped its end without a word): kill the cgroup.
    // Signals are ignored, so EINTR is rare.
    loop {
        let n = libc::read(arm, buf.as_mut_ptr().cast(), buf.len());
        // A byte: the wrapper removed the cgroup itself and lets the guard go.
        if n > 0 {
            libc::_exit(0);
        }
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break;
    }
    libc::write(kill, b"1".as_ptr().cast(), 1);
    // The kill completes asynchronously: retry the removal for up to 2 s. Cgroups made
    // inside ours (nested runs) keep it busy and are left: removing them here would need a
    // directory walk without allocation.
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 5_000_000,
    };
    for _ in 0..400 {
        if libc::rmdir(dir) == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EBUSY) {
            break;
        }
        libc::nanosleep(&pause, std::ptr::null_mut());
    }
    libc::_exit(0)
}

/// Close every descriptor but `a` and `b`. Async-signal-safe.
unsafe fn close_fds_except(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b) as i64, a.max(b) as i64);
    let last = libc::c_uint::MAX as i64;
    for (first, end) in [(0, lo - 1), (lo + 1, hi - 1), (hi + 1, last)] {
        if first > end {
            continue;
        }
        let done = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            end as libc::c_uint,
            0 as libc::c_uint,
        ) == 0;
        if !done {
            // Kernels before 5.9: one close per possible descriptor, bounded.
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                (limit.rlim_cur as i64).min(65_536)
            } else {
                1024
            };
            for fd in first..=end.min(max - 1) {
                libc::close(fd as RawFd);
            }
        }
    }
}

/// The cgroup v2 path of this process from the text of `/proc/self/cgroup`.
fn parse_own_cgroup(text: &str) -> Option<String> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    if !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    Some(path.to_owned())
}

/// `(root, mount point)` of each cgroup2 mount in the text of `/proc/self/mountinfo`.
fn parse_cgroup2_mounts(text: &str) -> Vec<(String, PathBuf)> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        if let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) {
            let root = String::from_utf8_lossy(&unescape_mountinfo(root)).into_owned();
            let point = PathBuf::from(OsString::from_vec(unescape_mountinfo(point)));
            mounts.push((root, point));
        }
    }
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if v <= 255 {
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The directory of cgroup `own` under the first mount whose root contains it.
fn own_cgroup_dir(mounts: &[(String, PathBuf)], own: &str) -> Option<PathBuf> {
    mounts.iter().find_map(|(root, point)| {
        let rel = if root == "/" {
            own
        } else if own == root {
            ""
        } else {
            own.strip_prefix(root.as_str())
                .filter(|rest| rest.starts_with('/'))?
        };
        let dir = point.join(rel.trim_start_matches('/'));
        dir.is_dir().then_some(dir)
    })
}

// ---------------------------------------------------------------------------------------------
// /proc mode

struct ProcTree {
    root: i32,
    /// Children the process had already when the tree was made, and their subtrees.
    excluded: HashSet<(i32, u64)>,
}

impl ProcTree {
    fn create() -> (ProcTree, nix::Result<()>) {
        let subreaper = nix::sys::prctl::set_child_subreaper(true);
        let mut tree = ProcTree {
            root: getpid().as_raw(),
            excluded: HashSet::new(),
        };
        tree.excluded = tree.members().iter().map(|s| (s.pid, s.start)).collect();
        (tree, subreaper)
    }

    /// Every descendant, zombies included.
    fn members(&self) -> Vec<Stat> {
        self.members_by_children()
            .unwrap_or_else(|| self.members_by_scan())
    }

    /// Down the `children` lists of each thread (`/proc/PID/task/TID/children`), reading only
    /// the tree's own processes: a walk costs the size of the tree, not of the whole system.
    /// `None` where the kernel has no such lists (CONFIG_PROC_CHILDREN off).
    fn members_by_children(&self) -> Option<Vec<Stat>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut queue = vec![self.root];
        while let Some(parent) = queue.pop() {
            let tasks = match fs::read_dir(format!("/proc/{parent}/task")) {
                Ok(tasks) => tasks,
                Err(_) if parent == self.root => return None,
                Err(_) => continue, // gone meanwhile
            };
            for task in tasks.flatten() {
                let Ok(list) = fs::read_to_string(task.path().join("children")) else {
                    if parent == self.root {
                        return None;
                    }
                    continue;
                };
                for pid in list
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    let Some(stat) = read_stat(pid) else { continue };
                    if self.excluded.contains(&(stat.pid, stat.start)) || !seen.insert(stat.pid) {
                        continue;
                    }
                    out.push(stat);
                    queue.push(stat.pid);
                }
            }
        }
        Some(out)
    }

    /// The same by reading every process in /proc, for kernels without `children` lists.
    fn members_by_scan(&self) -> Vec<Stat> {
        let all = scan();
        let mut children: HashMap<i32, Vec<&Stat>> = HashMap::new();
        for s in &all {
            children.entry(s.ppid).or_default().push(s);
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut queue = vec![self.root];
        while let Some(parent) = queue.pop() {
            for s in children.get(&parent).into_iter().flatten() {
                if self.excluded.contains(&(s.pid, s.start)) || !seen.insert(s.pid) {
                    continue;
                }
                out.push(**s);
                queue.push(s.pid);
            }
        }
        out
    }

    /// Descendants still running.
    fn live(&self) -> Vec<Stat> {
        self.members().into_iter().filter(is_live).collect()
    }

    /// SIGSTOP until a walk, made after every process found so far was seen stopped, finds
    /// no new one: from then on nothing in the tree can fork or send a signal. Returns the
    /// processes found, `(pid, start time)`, and whether that point was reached in `within`.
    fn stop_all(&self, within: Duration) -> (HashMap<i32, u64>, io::Result<()>) {
        let start = Instant::now();
        let mut known: HashMap<i32, u64> = HashMap::new();
        // Processes this one may not signal (another user's: a setuid program, sudo): they
        // cannot be stopped from here, so they are not waited for, and reported.
        let mut denied: HashSet<i32> = HashSet::new();
        let mut verified = false;
        for _ in 0..MAX_ROUNDS {
            let mut fresh = false;
            for s in self.live() {
                if known.get(&s.pid) != Some(&s.start) {
                    if signal_if_same(s.pid, s.start, Signal::SIGSTOP) == Err(Errno::EPERM) {
                        denied.insert(s.pid);
                    }
                    known.insert(s.pid, s.start);
                    fresh = true;
                }
            }
            if verified && !fresh {
                let result = if denied.is_empty() {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} process(es) of the tree belong to another user and cannot be \
                             signalled: {denied:?}",
                            denied.len()
                        ),
                    ))
                };
                return (known, result);
            }
            // A process in fork() when the signal came may show its child only once the
            // fork is done; a stopped process is done forking.
            let all_stopped = wait_until(within.saturating_sub(start.elapsed()), || {
                let mut all = true;
                for (&pid, &st) in &known {
                    if !denied.contains(&pid) && !is_stopped(pid) {
                        all = false;
                        // Again: a process of the tree may have sent a SIGCONT.
                        let _ = signal_if_same(pid, st, Signal::SIGSTOP);
                    }
                }
                all
            });
            if !all_stopped {
                let running = known.keys().filter(|&&p| !is_stopped(p)).count();
                return (
                    known,
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{running} process(es) of the tree did not stop in {within:?}"),
                    )),
                );
            }
            verified = true;
        }
        (
            known,
            Err(io::Error::other(format!(
                "the tree was still growing after {MAX_ROUNDS} walks"
            ))),
        )
    }

    fn kill_all(&self) -> io::Result<()> {
        let (known, result) = self.stop_all(STOP_WITHIN);
        for (pid, start) in known {
            let _ = signal_if_same(pid, start, Signal::SIGKILL);
        }
        // After a timeout something may have appeared since: one more pass.
        if result.is_err() {
            for s in self.live() {
                let _ = signal_if_same(s.pid, s.start, Signal::SIGKILL);
            }
        }
        result
    }
}

/// What the tree needs of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    ppid: i32,
    state: u8,
    /// Start time in clock ticks since boot: with the pid, identifies a process.
    start: u64,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may contain anything, parentheses included.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Stat {
        pid,
        state: *rest.first()?.as_bytes().first()?,
        ppid: rest.get(1)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process in /proc.
fn scan() -> Vec<Stat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

fn is_dead_state(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// Running, or a zombie leader whose other threads still run.
fn is_live(s: &Stat) -> bool {
    !is_dead_state(s.state)
        || fs::read_dir(format!("/proc/{}/task", s.pid)).is_ok_and(|d| d.count() > 1)
}

/// Every thread of `pid` stopped (or dead); a process that is gone counts as stopped.
fn is_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let path = t.path().join("stat");
        fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_stat(&text))
            .is_none_or(|s| matches!(s.state, b'T' | b't') || is_dead_state(s.state))
    })
}

/// Signal `pid` if it is still the process that started at `start` (not a reused pid). A
/// process that is gone is not an error.
fn signal_if_same(pid: i32, start: u64, sig: Signal) -> nix::Result<()> {
    if read_stat(pid).is_some_and(|s| s.start == start) {
        match kill(Pid::from_raw(pid), sig) {
            Err(Errno::ESRCH) => {}
            other => return other,
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// small helpers

/// Poll `done` until it holds or `within` has passed (at least one look). Returns whether it
/// holds.
fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// `poll(2)` one descriptor for `events`; true if any event came in time.
fn poll_fd(fd: &impl AsRawFd, events: libc::c_short, within: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    let ms = within.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0
}

pub fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn context(what: &str, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

#[cfg(test)]
mod tests {
    //! Real processes under a real `Tree`. The cgroup mode runs in this process (skipped, with
    //! a message, where no cgroup can be made). The /proc mode needs a subreaper with no other
    //! children, which a test binary running tests in parallel is not: those tests run this
    //! binary again as a helper process (`helper_process`, a no-op unless
    //! `REDLOCK_TREE_TEST_HELPER` names a scenario) that reports on stdout in `@@ key value`
    //! lines. Every process a test starts is killed at the end even when it fails: the `Tree`
    //! itself kills on drop, `Cleanup` kills what was reported (checked by start time).

    use super::*;
    use std::cell::RefCell;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
    use std::sync::mpsc::{self, Receiver};
    use std::sync::{Arc, Mutex};

    const HELPER_ENV: &str = "REDLOCK_TREE_TEST_HELPER";
    /// The bound of every wait in these tests.
    const BOUND: Duration = Duration::from_secs(10);

    /// Three ways out of the process group: a new session, `timeout(1)`'s own group, and a
    /// double fork whose middle process exits. Each prints its pid; the leader stays.
    const ESCAPES: &str = r#"
setsid sleep 60 </dev/null >/dev/null 2>&1 &
echo "setsid $!"
sh -c 'sleep 60 </dev/null >/dev/null 2>&1 & echo "double $! $$"'
timeout 60 sleep 60 </dev/null >/dev/null 2>&1 &
echo "timeout $!"
echo ready
exec sleep 60 >/dev/null 2>&1
"#;

    /// Forks while it is being killed: 300 double-forked sleeps.
    const FORKER: &str = r#"
i=0
while [ $i -lt 300 ]; do
  (sleep 60 </dev/null >/dev/null 2>&1 &)
  i=$((i+1))
done
exec sleep 60
"#;

    /// A process, by pid and start time (pids are reused).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct Proc {
        pid: i32,
        start: u64,
    }

    impl Proc {
        fn of(pid: i32) -> Option<Proc> {
            read_stat(pid).map(|s| Proc {
                pid,
                start: s.start,
            })
        }

        fn parse(word: &str) -> Proc {
            let (pid, start) = word.split_once(':').expect("pid:start");
            Proc {
                pid: pid.parse().unwrap(),
                start: start.parse().unwrap(),
            }
        }

        fn running(self) -> bool {
            read_stat(self.pid).is_some_and(|s| s.start == self.start && is_live(&s))
        }

        /// Fields 4 to 6 of /proc/PID/stat: parent, process group, session.
        fn ids(self) -> Option<(i32, i32, i32)> {
            let text = fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
            let rest: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
            Some((
                rest[1].parse().ok()?,
                rest[2].parse().ok()?,
                rest[3].parse().ok()?,
            ))
        }
    }

    impl fmt::Display for Proc {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}:{}", self.pid, self.start)
        }
    }

    /// SIGKILL, at drop, to every listed process still running.
    #[derive(Default)]
    struct Cleanup(RefCell<Vec<Proc>>);

    impl Cleanup {
        fn add(&self, p: Proc) {
            self.0.borrow_mut().push(p);
        }
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for p in self.0.borrow().iter() {
                if p.running() {
                    let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
                }
            }
        }
    }

    /// A child that is killed and reaped at drop unless it was waited for.
    struct Kid(Option<Child>);

    impl Kid {
        fn new(child: Child) -> Kid {
            Kid(Some(child))
        }

        fn pid(&self) -> i32 {
            self.0.as_ref().unwrap().id() as i32
        }

        /// Wait, bounded; panics if it does not end.
        fn wait(&mut self) -> ExitStatus {
            let child = self.0.as_mut().unwrap();
            let mut status = None;
            let ended = wait_until(BOUND, || {
                status = child.try_wait().unwrap();
                status.is_some()
            });
            assert!(ended, "pid {} did not end", child.id());
            self.0 = None;
            status.unwrap()
        }
    }

    impl Drop for Kid {
        fn drop(&mut self) {
            if let Some(child) = &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Lines of `out`, read on a thread so that every read can be bounded.
    fn line_channel(out: impl Read + Send + 'static) -> Receiver<String> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    fn assert_all_gone(procs: &[Proc], what: &str) {
        let gone = wait_until(BOUND, || procs.iter().all(|p| !p.running()));
        let left: Vec<_> = procs.iter().filter(|p| p.running()).collect();
        assert!(gone, "{what}: still running after {BOUND:?}: {left:?}");
    }

    /// The processes of `ESCAPES`, once each has really left the leader's group or parent.
    struct Escapes {
        leader: Kid,
        setsid: Proc,
        double: Proc,
        timeout: Proc,
    }

    impl Escapes {
        fn procs(&self) -> Vec<Proc> {
            vec![
                Proc::of(self.leader.pid()).unwrap(),
                self.setsid,
                self.double,
                self.timeout,
            ]
        }
    }

    fn spawn_joined(tree: &Tree, script: &str, env: &[(&str, &Path)]) -> (Kid, ChildStdout) {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .envs(env.iter().map(|(k, v)| (k, v)));
        let join = tree.pre_exec_join().unwrap();
        // SAFETY: the closure makes one write(2) on a descriptor it owns.
        unsafe {
            cmd.pre_exec(join);
        }
        let mut child = cmd.spawn().expect("spawn sh");
        let out = child.stdout.take().unwrap();
        (Kid(Some(child)), out)
    }

    fn start_escapes(tree: &Tree, cleanup: &Cleanup) -> Escapes {
        let (leader, out) = spawn_joined(tree, ESCAPES, &[]);
        let lead = Proc::of(leader.pid()).expect("leader in /proc");
        cleanup.add(lead);
        let lines = line_channel(out);
        let mut pid_of = HashMap::new();
        let mut inner_sh = 0;
        let start = Instant::now();
        loop {
            let left = BOUND.saturating_sub(start.elapsed());
            let line = lines.recv_timeout(left).expect("the script says ready");
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ready"] => break,
                [name, pid, rest @ ..] => {
                    let p = Proc::of(pid.parse().unwrap()).expect("escape in /proc");
                    cleanup.add(p);
                    pid_of.insert(name.to_string(), p);
                    if let [sh] = rest {
                        inner_sh = sh.parse().unwrap();
                    }
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
        let esc = Escapes {
            leader,
            setsid: pid_of["setsid"],
            double: pid_of["double"],
            timeout: pid_of["timeout"],
        };
        let (_, lead_pgrp, lead_sid) = lead.ids().unwrap();
        // Each has done what makes it an escape (they run concurrently with the script).
        let escaped = wait_until(BOUND, || {
            let ids = |p: Proc| p.ids().unwrap_or_default();
            ids(esc.setsid).2 != lead_sid
                && ids(esc.timeout).1 != lead_pgrp
                && ids(esc.double).0 != inner_sh
        });
        assert!(escaped, "the escapes did not happen");
        // timeout's own child: in the tree too.
        let has_timeout_child = wait_until(BOUND, || {
            scan()
                .iter()
                .any(|s| s.ppid == esc.timeout.pid && !is_dead_state(s.state))
        });
        assert!(has_timeout_child, "timeout started no child");
        for pid in tree.pids() {
            if let Some(p) = Proc::of(pid.as_raw()) {
                cleanup.add(p);
            }
        }
        esc
    }

    /// Every escape is a member, then gone after `kill_all`.
    fn kill_escapes(tree: &Tree, cleanup: &Cleanup) -> (Vec<Proc>, Escapes) {
        let mut esc = start_escapes(tree, cleanup);
        let members: Vec<Proc> = tree
            .pids()
            .iter()
            .filter_map(|p| Proc::of(p.as_raw()))
            .collect();
        for p in esc.procs() {
            assert!(members.contains(&p), "{p} not in the tree: {members:?}");
        }
        assert!(members.len() >= 5, "leader, 3 escapes, timeout's child");
        assert!(!tree.is_empty());
        tree.kill_all().expect("kill_all");
        assert_all_gone(&members, "after kill_all");
        assert!(tree.wait_empty(BOUND), "the tree is empty");
        assert!(tree.pids().is_empty());
        let status = esc.leader.wait();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        (members, esc)
    }

    fn cgroup_tree(test: &str) -> Option<Tree> {
        match Tree::with_cgroup() {
            Ok(tree) => Some(tree),
            Err(e) => {
                eprintln!("{test}: skipped, no cgroup mode here: {e}");
                None
            }
        }
    }

    // -- cgroup mode, in this process -------------------------------------------------------

    #[test]
    fn cgroup_kill_all_stops_every_escape() {
        let Some(tree) = cgroup_tree("cgroup_kill_all_stops_every_escape") else {
            return;
        };
        assert_eq!(tree.mode(), Mode::Cgroup);
        assert_eq!(tree.fallback_reason(), None);
        let dir = tree.cgroup_dir().unwrap().to_path_buf();
        assert!(dir.join("cgroup.kill").exists());
        let cleanup = Cleanup::default();
        kill_escapes(&tree, &cleanup);
        let guard = tree.guard_pid().expect("a guard");
        let guard = Proc::of(guard.as_raw()).expect("the guard runs");
        assert!(guard.running());
        tree.remove().expect("remove");
        assert!(!dir.exists(), "{} removed", dir.display());
        assert_all_gone(&[guard], "the guard after remove");
    }

    #[test]
    fn cgroup_freeze_thaw_and_signal_all() {
        let Some(tree) = cgroup_tree("cgroup_freeze_thaw_and_signal_all") else {
            return;
        };
        let cleanup = Cleanup::default();
        let mut esc = start_escapes(&tree, &cleanup);
        tree.freeze().expect("frozen");
        assert_eq!(tree.cgroup_events(), (true, true));
        tree.thaw().unwrap();
        assert!(tree_cgroup(&tree).wait_events(BOUND, |(_, frozen)| !frozen));
        let members = tree.pids().len();
        assert!(members >= 5, "{members}");
        // SIGTERM reaches the other session and timeout's group (which passes it on).
        assert_eq!(tree.signal_all(Signal::SIGTERM), members);
        assert_all_gone(&esc.procs(), "after SIGTERM");
        assert!(tree.wait_empty(BOUND));
        assert_eq!(esc.leader.wait().signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn cgroup_kill_all_kills_a_frozen_tree() {
        let Some(tree) = cgroup_tree("cgroup_kill_all_kills_a_frozen_tree") else {
            return;
        };
        let cleanup = Cleanup::default();
        let mut esc = start_escapes(&tree, &cleanup);
        tree.freeze().expect("frozen");
        tree.kill_all().unwrap();
        assert_all_gone(&esc.procs(), "frozen, then cgroup.kill");
        assert!(tree.wait_empty(BOUND));
        assert_eq!(esc.leader.wait().signal(), Some(libc::SIGKILL));
        let dir = tree.cgroup_dir().unwrap().to_path_buf();
        tree.remove().expect("a frozen empty cgroup can be removed");
        assert!(!dir.exists());
    }

    /// A join that fails makes the spawn fail with its errno, before exec.
    #[test]
    fn cgroup_failed_join_fails_the_spawn() {
        let Some(tree) = cgroup_tree("cgroup_failed_join_fails_the_spawn") else {
            return;
        };
        fs::remove_dir(tree.cgroup_dir().unwrap()).unwrap();
        let mut cmd = Command::new("true");
        let join = tree.pre_exec_join().unwrap();
        // SAFETY: the closure makes one write(2) on a descriptor it owns.
        unsafe {
            cmd.pre_exec(join);
        }
        let err = cmd.spawn().map(Kid::new).err().expect("the spawn fails");
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV), "{err}");
        assert!(tree.is_empty());
        tree.remove().expect("already gone is fine");
    }

    #[test]
    fn cgroup_nested_cgroups_are_counted_killed_and_removed() {
        let Some(tree) = cgroup_tree("cgroup_nested_cgroups_are_counted_killed_and_removed") else {
            return;
        };
        let cleanup = Cleanup::default();
        let dir = tree.cgroup_dir().unwrap().to_path_buf();
        // What a nested redlock-run does: a cgroup inside ours, and moves into it.
        let script = r#"mkdir "$CG/inner" && echo 0 > "$CG/inner/cgroup.procs" && echo ready &&
            exec sleep 60 >/dev/null"#;
        let (mut leader, out) = spawn_joined(&tree, script, &[("CG", &dir)]);
        cleanup.add(Proc::of(leader.pid()).unwrap());
        let line = line_channel(out).recv_timeout(BOUND).expect("ready");
        assert_eq!(line, "ready");
        assert!(fs::read_to_string(dir.join("inner/cgroup.procs"))
            .unwrap()
            .contains(&leader.pid().to_string()));
        assert_eq!(tree.pids(), vec![Pid::from_raw(leader.pid())]);
        assert!(!tree.is_empty());
        tree.kill_all().unwrap();
        assert!(tree.wait_empty(BOUND));
        assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
        tree.remove().expect("remove, inner cgroup first");
        assert!(!dir.exists());
    }

    #[test]
    fn cgroup_kill_all_catches_a_forking_loop() {
        let Some(tree) = cgroup_tree("cgroup_kill_all_catches_a_forking_loop") else {
            return;
        };
        let (mut leader, _out) = spawn_joined(&tree, FORKER, &[]);
        assert!(wait_until(BOUND, || tree.pids().len() >= 10));
        tree.kill_all().unwrap();
        assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
        assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
    }

    /// The wrapper killed by SIGKILL: the guard kills the cgroup. The cgroup mode only.
    #[test]
    fn cgroup_guard_kills_the_tree_when_the_wrapper_is_killed() {
        let mut helper = Helper::start("cgroup-wrapper", false);
        let first = helper.expect_any(&["skip", "dir"]);
        if first[0] == "skip" {
            eprintln!("cgroup guard test: skipped, no cgroup mode here: {first:?}");
            return;
        }
        let dir = PathBuf::from(&first[1]);
        let procs = helper.procs("procs");
        let guard = helper.procs("guard");
        assert!(procs.len() >= 5, "{procs:?}");
        assert!(dir.is_dir());
        let helper_pid = helper.kid.pid();
        kill(Pid::from_raw(helper_pid), Signal::SIGKILL).unwrap();
        assert_eq!(helper.kid.wait().signal(), Some(libc::SIGKILL));
        assert_all_gone(&procs, "after the wrapper's SIGKILL");
        assert!(
            wait_until(BOUND, || !dir.exists()),
            "{} removed",
            dir.display()
        );
        assert_all_gone(&guard, "the guard, its work done");
    }

    // -- /proc mode, in helper processes ----------------------------------------------------

    #[test]
    fn proc_kill_all_stops_every_escape() {
        let mut helper = Helper::start("proc-escapes", true);
        let procs = helper.procs("procs");
        assert!(procs.len() >= 5, "{procs:?}");
        helper.expect("ok");
        helper.finish();
        assert_all_gone(&procs, "after kill_all");
    }

    #[test]
    fn proc_kill_all_catches_a_forking_loop() {
        let mut helper = Helper::start("proc-forker", true);
        helper.expect("ok");
        helper.finish();
    }

    #[test]
    fn proc_freeze_thaw_and_signal_all() {
        let mut helper = Helper::start("proc-freeze", true);
        let procs = helper.procs("procs");
        helper.expect("ok");
        helper.finish();
        assert_all_gone(&procs, "after SIGTERM");
    }

    /// A descendant of another user (what `sudo` makes) cannot be stopped from the /proc
    /// mode: reported at once, not waited for.
    #[test]
    fn proc_kill_all_reports_processes_it_may_not_signal() {
        let mut helper = Helper::start("proc-denied", true);
        let first = helper.expect_any(&["skip", "procs"]);
        if first[0] == "skip" {
            eprintln!("proc_kill_all_reports_processes_it_may_not_signal: skipped, not root");
            return;
        }
        let procs: Vec<Proc> = first[1..].iter().map(|w| Proc::parse(w)).collect();
        for p in &procs {
            helper.cleanup.add(*p);
        }
        // The helper checked right after kill_all that root's process still ran. Not checked
        // again here: once the helper exits, the process is re-parented, and another test of
        // this binary that made this process a subreaper may legitimately clean it up.
        helper.expect("ok");
        helper.finish();
    }

    /// The walk down the `children` lists and the walk over all of /proc find the same
    /// descendants (the second is the fallback for kernels without the lists).
    #[test]
    fn both_proc_walks_find_a_child_and_its_child() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let tree = ProcTree {
            root: getpid().as_raw(),
            excluded: HashSet::new(),
        };
        let by_children: HashSet<i32> = tree
            .members_by_children()
            .expect("this kernel has children lists")
            .iter()
            .map(|s| s.pid)
            .collect();
        let by_scan: HashSet<i32> = tree.members_by_scan().iter().map(|s| s.pid).collect();
        let _ = kill(Pid::from_raw(grandchild), Signal::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        for pid in [child.id() as i32, grandchild] {
            assert!(by_children.contains(&pid), "children walk missed {pid}");
            assert!(by_scan.contains(&pid), "scan missed {pid}");
        }
    }

    #[test]
    fn new_honours_redlock_no_cgroup() {
        let mut forced = Helper::start("mode", true);
        assert_eq!(forced.expect("mode"), ["proc"]);
        let reason = forced.expect("reason");
        assert_eq!(reason, ["REDLOCK_NO_CGROUP", "is", "set"]);
        forced.finish();
        let mut auto = Helper::start("mode", false);
        let expected = if Tree::with_cgroup().is_ok() {
            "cgroup"
        } else {
            "proc"
        };
        assert_eq!(auto.expect("mode"), [expected]);
        auto.finish();
    }

    // -- helper processes --------------------------------------------------------------------

    /// This test binary again, running `helper_process` for one scenario.
    struct Helper {
        kid: Kid,
        lines: Receiver<String>,
        stderr: Arc<Mutex<String>>,
        cleanup: Cleanup,
    }

    impl Helper {
        fn start(scenario: &str, no_cgroup: bool) -> Helper {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "process::tree::tests::helper_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, scenario)
            .env_remove(NO_CGROUP_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            if no_cgroup {
                cmd.env(NO_CGROUP_ENV, "1");
            }
            let mut child = cmd.spawn().expect("spawn the helper");
            let lines = line_channel(child.stdout.take().unwrap());
            let stderr = Arc::new(Mutex::new(String::new()));
            let errs = line_channel(child.stderr.take().unwrap());
            let sink = stderr.clone();
            std::thread::spawn(move || {
                for line in errs {
                    let mut s = sink.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
            Helper {
                kid: Kid(Some(child)),
                lines,
                stderr,
                cleanup: Cleanup::default(),
            }
        }

        fn stderr(&self) -> String {
            self.stderr.lock().unwrap().clone()
        }

        /// The words after `@@ KEY` on the next `@@` line whose key is one of `keys`.
        fn expect_any(&mut self, keys: &[&str]) -> Vec<String> {
            let start = Instant::now();
            loop {
                let left = BOUND.saturating_sub(start.elapsed());
                let Ok(line) = self.lines.recv_timeout(left) else {
                    // Give the stderr reader a moment to collect the panic message.
                    let _ = wait_until(Duration::from_millis(200), || false);
                    panic!("helper: no `@@ {keys:?}` line\n{}", self.stderr());
                };
                let Some(at) = line.find("@@ ") else { continue };
                let words: Vec<String> = line[at + 3..]
                    .split_whitespace()
                    .map(String::from)
                    .collect();
                if words.first().is_some_and(|k| keys.contains(&k.as_str())) {
                    return words;
                }
            }
        }

        fn expect(&mut self, key: &str) -> Vec<String> {
            self.expect_any(&[key]).split_off(1)
        }

        /// A `@@ KEY pid:start ...` line; the processes are killed at drop if still running.
        fn procs(&mut self, key: &str) -> Vec<Proc> {
            let procs: Vec<Proc> = self.expect(key).iter().map(|w| Proc::parse(w)).collect();
            for p in &procs {
                self.cleanup.add(*p);
            }
            procs
        }

        fn finish(mut self) {
            // Closing stdin ends a helper that waits for it.
            drop(self.kid.0.as_mut().unwrap().stdin.take());
            let status = self.kid.wait();
            assert!(status.success(), "helper {status:?}\n{}", self.stderr());
        }
    }

    fn say(key: &str, value: impl fmt::Display) {
        println!("@@ {key} {value}");
    }

    fn list(procs: &[Proc]) -> String {
        procs
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The helper process's side: nothing unless `REDLOCK_TREE_TEST_HELPER` names a scenario.
    #[test]
    fn helper_process() {
        let Ok(scenario) = std::env::var(HELPER_ENV) else {
            return;
        };
        match scenario.as_str() {
            "mode" => {
                let tree = Tree::new();
                say("mode", tree.mode());
                say("reason", tree.fallback_reason().unwrap_or("-"));
            }
            "proc-escapes" => helper_proc_escapes(),
            "proc-forker" => helper_proc_forker(),
            "proc-freeze" => helper_proc_freeze(),
            "cgroup-wrapper" => helper_cgroup_wrapper(),
            "proc-denied" => helper_proc_denied(),
            other => panic!("unknown scenario {other}"),
        }
        say("ok", "");
    }

    fn proc_tree() -> Tree {
        let tree = Tree::new();
        assert_eq!(tree.mode(), Mode::Proc, "{NO_CGROUP_ENV} is set");
        assert_eq!(tree.cgroup_dir(), None);
        tree
    }

    /// Zombie children of this process, except `skip`.
    fn zombie_children(skip: i32) -> Vec<i32> {
        let me = getpid().as_raw();
        scan()
            .iter()
            .filter(|s| s.ppid == me && is_dead_state(s.state) && s.pid != skip)
            .map(|s| s.pid)
            .collect()
    }

    fn helper_proc_escapes() {
        // A child this process had before the tree: not the command's, left alone.
        let mut bystander = Kid(Some(Command::new("sleep").arg("60").spawn().unwrap()));
        let tree = proc_tree();
        let cleanup = Cleanup::default();
        let (members, esc) = {
            let mut esc = start_escapes(&tree, &cleanup);
            // The double-forked sleep was re-parented to this subreaper, not to init.
            assert_eq!(esc.double.ids().unwrap().0, getpid().as_raw());
            let members: Vec<Proc> = tree
                .pids()
                .iter()
                .filter_map(|p| Proc::of(p.as_raw()))
                .collect();
            assert!(!members.iter().any(|p| p.pid == bystander.pid()));
            say("procs", list(&members));
            let leader = esc.leader.pid();
            tree.kill_all().expect("kill_all");
            assert_all_gone(&members, "after kill_all");
            assert!(tree.wait_empty(BOUND));
            // The orphans' zombies are reaped, the leader's status is left for its waiter.
            assert!(tree.reap(Some(Pid::from_raw(leader))) >= 3);
            assert_eq!(zombie_children(leader), Vec::<i32>::new());
            assert_eq!(esc.leader.wait().signal(), Some(libc::SIGKILL));
            (members, esc)
        };
        drop(esc);
        assert!(members.len() >= 5);
        assert!(
            Proc::of(bystander.pid()).unwrap().running(),
            "bystander alive"
        );
        assert!(tree.is_empty());
        drop(tree);
        assert!(bystander.0.as_mut().unwrap().try_wait().unwrap().is_none());
    }

    fn helper_proc_forker() {
        let tree = proc_tree();
        let (mut leader, _out) = spawn_joined(&tree, FORKER, &[]);
        assert!(wait_until(BOUND, || tree.pids().len() >= 10));
        tree.kill_all()
            .expect("kill_all converges while the loop forks");
        assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
        tree.reap(Some(Pid::from_raw(leader.pid())));
        assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
        assert_eq!(tree.reap(None), 0);
    }

    fn helper_proc_freeze() {
        let tree = proc_tree();
        let cleanup = Cleanup::default();
        let mut esc = start_escapes(&tree, &cleanup);
        let members = tree.pids();
        say("procs", list(&esc.procs()));
        tree.freeze().expect("freeze");
        for pid in &members {
            assert!(is_stopped(pid.as_raw()), "{pid} stopped");
        }
        tree.thaw().unwrap();
        let running = wait_until(BOUND, || members.iter().all(|p| !is_stopped(p.as_raw())));
        assert!(running, "thawed");
        assert_eq!(tree.signal_all(Signal::SIGTERM), members.len());
        assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
        assert_eq!(esc.leader.wait().signal(), Some(libc::SIGTERM));
    }

    fn helper_proc_denied() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            say("skip", "not root");
            return;
        }
        let tree = proc_tree();
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let sleeper = Proc::of(child.id() as i32).unwrap();
        // Left to the test (root) to kill and to init to reap: this process cannot.
        std::mem::forget(child);
        say("procs", sleeper);
        // SAFETY: plain system call; this helper process is all this scenario's.
        assert_eq!(unsafe { libc::setresuid(65534, 65534, 65534) }, 0);
        let start = Instant::now();
        let err = tree.kill_all().expect_err("cannot signal root's process");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(
            start.elapsed() < STOP_WITHIN,
            "not waited for: {:?}",
            start.elapsed()
        );
        assert!(sleeper.running());
        // Nothing left that it could kill: its Drop must not wait either.
        std::mem::forget(tree);
    }

    fn helper_cgroup_wrapper() {
        let tree = match Tree::with_cgroup() {
            Ok(tree) => tree,
            Err(e) => {
                say("skip", e);
                return;
            }
        };
        let cleanup = Cleanup::default();
        let esc = start_escapes(&tree, &cleanup);
        say("dir", tree.cgroup_dir().unwrap().display());
        let members: Vec<Proc> = tree
            .pids()
            .iter()
            .filter_map(|p| Proc::of(p.as_raw()))
            .collect();
        say("procs", list(&members));
        say(
            "guard",
            Proc::of(tree.guard_pid().unwrap().as_raw()).unwrap(),
        );
        // Wait for the SIGKILL; if the test goes away instead, stdin ends and the tree is
        // dropped, which kills it.
        let mut sink = Vec::new();
        let _ = io::stdin().read_to_end(&mut sink);
        drop(esc);
    }

    /// The cgroup side of a tree, for tests that look at its events.
    fn tree_cgroup(tree: &Tree) -> &Cgroup {
        match &tree.inner {
            Inner::Cgroup(cg) => cg,
            Inner::Proc(_) => panic!("not a cgroup tree"),
        }
    }

    impl Tree {
        fn cgroup_events(&self) -> (bool, bool) {
            tree_cgroup(self).events().unwrap()
        }
    }

    // -- parsing -----------------------------------------------------------------------------

    #[test]
    fn own_cgroup_from_proc_self_cgroup() {
        let hybrid = "9:name=systemd:/\n4:memory:/a/b\n1:cpu:/\n0::/\n";
        assert_eq!(parse_own_cgroup(hybrid).as_deref(), Some("/"));
        let v2 = "0::/user.slice/user-1000.slice/session-3.scope\n";
        assert_eq!(
            parse_own_cgroup(v2).as_deref(),
            Some("/user.slice/user-1000.slice/session-3.scope")
        );
        assert_eq!(parse_own_cgroup("0::/gone (deleted)\n"), None);
        assert_eq!(parse_own_cgroup("4:memory:/a\n"), None);
    }

    #[test]
    fn cgroup2_mounts_and_own_directory() {
        let info = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:38 /docker/abc /mnt/with\\040space rw shared:5 - cgroup2 cgroup2 rw,nsdelegate
";
        let mounts = parse_cgroup2_mounts(info);
        assert_eq!(
            mounts,
            vec![
                ("/".to_owned(), PathBuf::from("/sys/fs/cgroup/unified")),
                ("/docker/abc".to_owned(), PathBuf::from("/mnt/with space")),
            ]
        );
        let tmp = tempfile::tempdir().unwrap();
        let point = tmp.path().join("cg");
        fs::create_dir_all(point.join("x/y")).unwrap();
        let at = |root: &str| vec![(root.to_owned(), point.clone())];
        assert_eq!(own_cgroup_dir(&at("/"), "/x/y"), Some(point.join("x/y")));
        assert_eq!(own_cgroup_dir(&at("/"), "/"), Some(point.clone()));
        assert_eq!(
            own_cgroup_dir(&at("/docker/abc"), "/docker/abc/x"),
            Some(point.join("x"))
        );
        assert_eq!(
            own_cgroup_dir(&at("/docker/abc"), "/docker/abc"),
            Some(point.clone())
        );
        assert_eq!(own_cgroup_dir(&at("/docker/abc"), "/docker/abcd/x"), None);
        assert_eq!(own_cgroup_dir(&at("/"), "/not/there"), None);
    }

    #[test]
    fn stat_with_an_awkward_command_name() {
        let text = "42 (a) b) (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 100";
        let s = parse_stat(text).unwrap();
        assert_eq!((s.pid, s.ppid, s.state, s.start), (42, 7, b'S', 12345));
        assert_eq!(parse_stat("42 (x) S 1"), None);
        let me = read_stat(getpid().as_raw()).unwrap();
        assert_eq!(me.pid, getpid().as_raw());
        assert!(is_live(&me));
    }

    #[test]
    fn no_cgroup_values() {
        assert!(!no_cgroup_requested(None));
        assert!(!no_cgroup_requested(Some("".into())));
        assert!(!no_cgroup_requested(Some("0".into())));
        assert!(no_cgroup_requested(Some("1".into())));
        assert!(no_cgroup_requested(Some("yes".into())));
    }
}
