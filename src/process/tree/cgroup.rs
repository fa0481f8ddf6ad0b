//! The cgroup mode: a cgroup v2 of the command's own, its guard process, and the parsing of
//! `/proc/self/cgroup` and `/proc/self/mountinfo` that finds where to make it.

use std::ffi::{CString, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::process::fds::{RangeOp, on_range};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{ForkResult, Pid, fork, pipe2, setpgid};

/// How long [`Cgroup::close`] waits for the processes to be gone after killing them.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// Put the calling process into the cgroup whose `cgroup.procs` is `procs`; a failure is
/// also told through `errors` (see [`Cgroup::join_error`]). For a forked child before exec:
/// async-signal-safe system calls only, no allocation.
pub(super) fn join(procs: &OwnedFd, errors: &OwnedFd) -> io::Result<()> {
    join_raw(procs.as_fd()).inspect_err(|e| {
        // Tell the parent that the join, not the exec, failed.
        let code = e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes();
        let _ = nix::unistd::write(errors, &code);
    })
}

/// Put the calling process into the cgroup whose `cgroup.procs` is open on `procs`.
/// Async-signal-safe: one `write` of a constant buffer, no allocation.
fn join_raw(procs: BorrowedFd<'_>) -> io::Result<()> {
    const ME: &[u8] = b"0\n";
    for _ in 0..100 {
        match nix::unistd::write(procs, ME) {
            Ok(n) if n == ME.len() => return Ok(()),
            Ok(_) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Err(io::Error::from(Errno::EINTR))
}

pub(super) struct Cgroup {
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
    pub(super) fn create(probe: bool) -> io::Result<Cgroup> {
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
        let (join_errors, join_errors_in) = pipe2(OFlag::O_CLOEXEC)?;
        let _ = fcntl(&join_errors, FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
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

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory itself, open, for `clone3(CLONE_INTO_CGROUP)`.
    pub(super) fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir_fd.as_fd()
    }

    /// The guard's pid: a child of this process that is not the command's.
    #[cfg(test)]
    pub(super) fn guard_pid(&self) -> Option<Pid> {
        self.guard.as_ref().map(|g| g.pid)
    }

    /// After a spawn failed: the errno of a join that failed in the child, if one did.
    pub(super) fn join_error(&self) -> Option<io::Error> {
        let mut buf = [0u8; 4];
        let n = nix::unistd::read(&self.join_errors, &mut buf);
        (n == Ok(4)).then(|| io::Error::from_raw_os_error(i32::from_ne_bytes(buf)))
    }

    /// Duplicates of `cgroup.procs` and of the join-error pipe's write end, for [`join`] in a
    /// forked child.
    pub(super) fn join_fds(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        Ok((
            OwnedFd::from(self.procs.try_clone()?),
            self.join_errors_in.try_clone()?,
        ))
    }

    pub(super) fn pids(&self) -> Vec<Pid> {
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

    pub(super) fn kill_all(&self) -> io::Result<()> {
        (&self.kill).write_all(b"1")
    }

    /// `(populated, frozen)` from `cgroup.events`.
    pub(super) fn events(&self) -> io::Result<(bool, bool)> {
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

    pub(super) fn is_empty(&self) -> bool {
        match self.events() {
            Ok((populated, _)) => !populated,
            // Removed (rmdir needs an empty cgroup); any other error: assume not empty.
            Err(e) => matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOENT)),
        }
    }

    /// Sleep on `cgroup.events` changes until `done` holds or `within` has passed.
    pub(super) fn wait_events(
        &self,
        within: Duration,
        done: impl Fn((bool, bool)) -> bool,
    ) -> bool {
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
                self.events.as_fd(),
                PollFlags::POLLPRI,
                left.min(Duration::from_millis(50)),
            );
        }
    }

    pub(super) fn wait_empty(&self, within: Duration) -> bool {
        self.is_empty() || self.wait_events(within, |(populated, _)| !populated)
    }

    pub(super) fn write_freeze(&self, on: bool) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.freeze"))?
            .write_all(if on { b"1" } else { b"0" })
    }

    pub(super) fn freeze(&self, within: Duration) -> io::Result<()> {
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

    pub(super) fn close(&mut self) -> io::Result<()> {
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
    let (read, write) = pipe2(OFlag::O_CLOEXEC)?;
    // SAFETY: the child makes async-signal-safe calls only (write, _exit) on memory prepared
    // before the fork, allocates nothing and never returns into the parent's Rust code.
    let child = match unsafe { fork() }? {
        ForkResult::Parent { child } => child,
        ForkResult::Child => {
            let code: i32 = match join_raw(procs.as_fd()) {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            };
            let _ = nix::unistd::write(&write, &code.to_ne_bytes());
            // SAFETY: ends the forked child at once, as it must (no exit handlers of the
            // parent's run in it).
            unsafe { libc::_exit(0) }
        }
    };
    drop(write);
    let mut read = File::from(read);
    let mut buf = [0u8; 4];
    let got = if poll_fd(read.as_fd(), PollFlags::POLLIN, Duration::from_secs(5)) {
        read.read_exact(&mut buf)
    } else {
        Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"))
    };
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
        let (read, write) = pipe2(OFlag::O_CLOEXEC)?;
        // SAFETY: the child runs `guard_main`, which makes async-signal-safe calls only on
        // memory prepared before the fork (`dir_c`), allocates nothing and ends in `_exit`.
        let pid = match unsafe { fork() }? {
            ForkResult::Parent { child } => child,
            // SAFETY: a freshly forked child; `read` is the guard pipe's read end, `kill` is
            // open on `cgroup.kill`, `dir_c` is a C string; all outlive the call (it never
            // returns).
            ForkResult::Child => unsafe {
                guard_main(read.as_raw_fd(), kill.as_raw_fd(), dir_c.as_ptr())
            },
        };
        drop(read);
        Ok(Guard { pid, arm: write })
    }

    /// Let the guard go after the wrapper removed the cgroup itself: one byte tells it to
    /// exit without touching anything (a later cgroup could have the name by then). Not
    /// waited for: it exits at once, and is reaped by a later `waitpid` or, once the wrapper
    /// has exited, by init.
    fn release(self) {
        let _ = nix::unistd::write(&self.arm, b"d");
        drop(self.arm);
        let _ = waitpid(self.pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// The guard process (see the module docs). It is a fork of a possibly multi-threaded
/// process, so it may only make async-signal-safe calls and must not allocate.
///
/// # Safety
/// Only to be called in a freshly forked child that has made no other call since the fork,
/// with `arm` the read end of the guard pipe, `kill` open on `cgroup.kill` and `dir` a valid
/// NUL-terminated string that stays in place (the function never returns). It closes every
/// other descriptor of the process.
unsafe fn guard_main(arm: RawFd, kill: RawFd, dir: *const libc::c_char) -> ! {
    let _ = nix::sys::prctl::set_name(c"redlock-guard");
    // Out of the wrapper's process group: Ctrl-C, Ctrl-Z and `kill -- -PGID` are for the
    // wrapper; the guard must outlive it. Handlers inherited from the wrapper would write to
    // descriptors closed below: every catchable asynchronous signal is ignored.
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    for sig in 1..=64 {
        let action = match sig {
            libc::SIGKILL | libc::SIGSTOP => continue,
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
            | libc::SIGWINCH => libc::SIG_DFL,
            _ => libc::SIG_IGN,
        };
        // SAFETY: SIG_DFL and SIG_IGN install no handler. Raw libc: nix's `Signal` has no
        // real-time signals.
        unsafe { libc::signal(sig, action) };
    }
    // Hold nothing of the wrapper's: no pipe of a shell waiting for end-of-file, no other
    // guard's arming pipe (tests make several trees in one process), no directory.
    // SAFETY: this process is the guard alone (the caller's contract): nothing else will use
    // the descriptors closed here.
    unsafe { close_fds_except(arm, kill) };
    // SAFETY: `arm` and `kill` are open (the caller's contract) and kept open by the call above
    // until `_exit`.
    let (arm, kill) = unsafe { (BorrowedFd::borrow_raw(arm), BorrowedFd::borrow_raw(kill)) };
    let _ = nix::unistd::chdir(c"/");
    let mut buf = [0u8; 64];
    // End-of-file: the wrapper is gone (or dropped its end without a word): kill the cgroup.
    // Signals are ignored, so EINTR is rare.
    loop {
        match nix::unistd::read(arm, &mut buf) {
            // A byte: the wrapper removed the cgroup itself and lets the guard go.
            // SAFETY: ends the guard; nothing of the parent's may run in it.
            Ok(n) if n > 0 => unsafe { libc::_exit(0) },
            Err(Errno::EINTR) => continue,
            _ => break,
        }
    }
    let _ = nix::unistd::write(kill, b"1");
    // The kill completes asynchronously: retry the removal for up to 2 s. Cgroups made
    // inside ours (nested runs) keep it busy and are left: removing them here would need a
    // directory walk without allocation.
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 5_000_000,
    };
    for _ in 0..400 {
        // SAFETY: `dir` is a valid C string (the caller's contract). Raw libc: nix's rmdir
        // takes a path it may copy, and nothing here may allocate.
        if unsafe { libc::rmdir(dir) } == 0 || Errno::last() != Errno::EBUSY {
            break;
        }
        // SAFETY: reads `pause`, a local; no remaining time is asked for.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    // SAFETY: ends the guard; nothing of the parent's may run in it.
    unsafe { libc::_exit(0) }
}

/// Close every descriptor but `a` and `b`. Async-signal-safe.
///
/// # Safety
/// Every other descriptor of the process is closed, whoever owns it (an `OwnedFd`, a `File`,
/// the runtime): only for a process that will use none of them again, such as a forked child
/// that ends in `exec` or `_exit` without returning into code that holds them.
unsafe fn close_fds_except(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b), a.max(b));
    for (first, end) in [(0, lo - 1), (lo + 1, hi - 1), (hi + 1, RawFd::MAX)] {
        on_range(first, end, RangeOp::Close);
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

/// `poll(2)` one descriptor for `events`; true if any event came in time.
fn poll_fd(fd: BorrowedFd<'_>, events: PollFlags, within: Duration) -> bool {
    let ms = within.as_millis().min(i32::MAX as u128) as i32;
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    poll(&mut [PollFd::new(fd, events)], timeout).is_ok_and(|n| n > 0)
}

fn context(what: &str, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
