//! Start the command straight inside its cgroup: `clone3(CLONE_INTO_CGROUP)` and `execve`.
//!
//! Why not fork, then write to `cgroup.procs`: moving a process between cgroups takes the
//! kernel's cgroup thread-group lock for writing, and after a quiet spell that waits for an
//! RCU grace period: measured here at 12 to 20 ms for a waiter taking over a released lock
//! (about 1 ms when runs follow each other closely). A process born in the cgroup is never
//! moved, so that wait is gone from every run and from every handoff.
//!
//! What `std::process::Command` does for a child is done here too, in the same order: the
//! environment built alike (one of each variable, sorted, the command's own added), the
//! signal mask inherited and SIGPIPE back to its default, the caller's `pre_exec` steps, then
//! `execve` along the command's `PATH` as glibc's `execvp` would (an empty entry is the bare
//! name, an entry too long for a path is skipped, a file without a `#!` line is run by
//! `/bin/sh`, EACCES is reported if no candidate ran and one was refused). An exec that fails is reported
//! through a close-on-exec pipe, as std does. Everything the child needs is built before the
//! clone: between clone and exec it only makes system calls, allocates nothing and takes no
//! lock (the wrapper has other threads).
//!
//! [`Unsupported`](CloneError::Unsupported) means that no process was created (a kernel
//! before 5.7, a seccomp filter, a cgroup that refuses it): the caller falls back to std.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::ptr;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{SigHandler, Signal, signal};
use nix::unistd::{Pid, pipe2};

/// `struct clone_args` of `clone3(2)`, up to `cgroup` (Linux 5.7).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Why the command was not started this way.
#[derive(Debug)]
pub enum CloneError {
    /// No process was created: use another way.
    Unsupported,
    /// The process was created, and its set-up or exec failed (NotFound, PermissionDenied,
    /// ...); it is reaped.
    Exec(io::Error),
}

/// The command's argv, environment and the files `execvp` would try, as C strings.
struct Prepared {
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    /// For each candidate, `/bin/sh FILE ARGS...`: what runs a file without a `#!` line.
    sh_argvs: Vec<Vec<*const libc::c_char>>,
    sh: CString,
}

/// Start `program` with `args` and the wrapper's environment plus `env`, in the cgroup whose
/// directory is `cgroup`, running `pre_exec` in the child first (it must only make system
/// calls: see the module docs).
pub fn spawn(
    cgroup: BorrowedFd<'_>,
    program: &OsStr,
    args: &[OsString],
    env: &[(&str, String)],
    pre_exec: impl Fn() -> io::Result<()>,
) -> Result<Pid, CloneError> {
    let prep = prepare(program, args, env).map_err(|_| CloneError::Unsupported)?;
    let (report_out, report_in) = pipe2(OFlag::O_CLOEXEC).map_err(|_| CloneError::Unsupported)?;
    let mut clone_args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // Raw syscall: neither libc nor nix wraps clone3.
    // SAFETY: clone3 with no CLONE_VM is a fork: the child gets a copy of this address space
    // and runs `child` only, which makes system calls on memory prepared above and never
    // returns (exec or _exit). `clone_args` is a valid `struct clone_args` of the size given.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut clone_args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(CloneError::Unsupported);
    }
    if pid == 0 {
        child(&prep, &report_in, &pre_exec);
    }
    drop(report_in);
    let pid = Pid::from_raw(pid as i32);
    match read_report(&report_out) {
        None => Ok(pid),
        Some(errno) => {
            // The child exits at once; reap it so that no zombie is left to the supervisor.
            let _ = nix::sys::wait::waitpid(pid, None);
            Err(CloneError::Exec(io::Error::from_raw_os_error(errno)))
        }
    }
}

fn prepare(program: &OsStr, args: &[OsString], env: &[(&str, String)]) -> io::Result<Prepared> {
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let argv0 = c(program.as_bytes())?;
    let mut argv_owned = vec![argv0];
    for a in args {
        argv_owned.push(c(a.as_bytes())?);
    }
    // As std builds it: the wrapper's variables, one of each (the last one wins), in sorted
    // order, then the command's own.
    let mut vars: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in env {
        vars.insert(OsString::from(k), OsString::from(v));
    }
    let mut envp_owned = Vec::with_capacity(vars.len());
    for (k, v) in &vars {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        // A variable with a NUL cannot be passed on (std drops it too).
        if let Ok(kv) = CString::new(kv) {
            envp_owned.push(kv);
        }
    }
    let candidates = if program.as_bytes().contains(&b'/') {
        vec![c(program.as_bytes())?]
    } else {
        // glibc execvp's search along the PATH the command gets: each entry in order, an
        // empty one meaning the bare name (the current directory); entries too long for a
        // path skipped; "/bin:/usr/bin" when PATH is unset.
        let default_path = OsString::from("/bin:/usr/bin");
        let path = vars.get(OsStr::new("PATH")).unwrap_or(&default_path);
        path.as_bytes()
            .split(|&b| b == b':')
            .filter(|dir| dir.len() + 1 + program.len() < libc::PATH_MAX as usize)
            .map(|dir| {
                let mut file = dir.to_vec();
                if !dir.is_empty() {
                    file.push(b'/');
                }
                file.extend_from_slice(program.as_bytes());
                c(&file)
            })
            .collect::<io::Result<Vec<_>>>()?
    };
    let argv: Vec<*const libc::c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = envp_owned
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect();
    let sh = c(b"/bin/sh")?;
    let sh_argvs = candidates
        .iter()
        .map(|file| {
            [sh.as_ptr(), file.as_ptr()]
                .into_iter()
                .chain(argv_owned[1..].iter().map(|a| a.as_ptr()))
                .chain(std::iter::once(ptr::null()))
                .collect()
        })
        .collect();
    Ok(Prepared {
        candidates,
        _argv: argv_owned,
        argv,
        _envp: envp_owned,
        envp,
        sh_argvs,
        sh,
    })
}

/// The child, between clone and exec. Never returns. Only system calls on memory prepared
/// before the clone; see the module docs.
fn child(prep: &Prepared, report: &OwnedFd, pre_exec: &impl Fn() -> io::Result<()>) -> ! {
    // The signal mask is inherited, as std leaves it.
    // SAFETY: SIG_DFL installs no handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    if let Err(e) = pre_exec() {
        fail(report, e.raw_os_error().unwrap_or(libc::EIO));
    }
    let mut refused = false;
    let mut last = libc::ENOENT;
    for (file, sh_argv) in prep.candidates.iter().zip(&prep.sh_argvs) {
        // Raw libc: nix's execve builds its argument arrays, which allocates.
        // SAFETY: `file` and the NULL-terminated `argv` and `envp` point into `prep`, which
        // outlives the call; on success nothing of this process remains.
        unsafe { libc::execve(file.as_ptr(), prep.argv.as_ptr(), prep.envp.as_ptr()) };
        let errno = Errno::last_raw();
        match errno {
            libc::ENOEXEC => {
                // As execvp: a file the kernel cannot run is a shell script.
                // SAFETY: as above; `sh_argv` is NULL-terminated and points into `prep`.
                unsafe { libc::execve(prep.sh.as_ptr(), sh_argv.as_ptr(), prep.envp.as_ptr()) };
                fail(report, Errno::last_raw());
            }
            libc::EACCES => refused = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            // Anything else ends the search, as in execvp.
            _ => fail(report, errno),
        }
        last = errno;
    }
    fail(report, if refused { libc::EACCES } else { last });
}

/// Tell the parent `errno` and exit.
fn fail(report: &OwnedFd, errno: i32) -> ! {
    let _ = nix::unistd::write(report, &errno.to_ne_bytes());
    // SAFETY: ends the child at once, as it must: nothing of the parent's (exit handlers,
    // buffered output) may run in it.
    unsafe { libc::_exit(127) }
}

/// The child's errno, or `None` once the pipe closed without one (the exec succeeded).
fn read_report(report: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(report, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::EINTR) => {}
            Err(_) => break,
        }
    }
    (got == buf.len()).then(|| i32::from_ne_bytes(buf))
}
