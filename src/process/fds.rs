//! Ranges of descriptors: closed, or marked close-on-exec, in one system call where the
//! kernel has `close_range` (Linux 5.9; its CLOEXEC flag 5.11), else one call per possible
//! descriptor, bounded. Both are async-signal-safe: for a forked child before its exec.

use std::os::fd::RawFd;

use nix::sys::resource::{Resource, getrlimit};

/// What to do with each descriptor of a range.
#[derive(Clone, Copy)]
pub enum RangeOp {
    Close,
    CloseOnExec,
}

/// Every descriptor from `keep` excluded, from 3 on, marked close-on-exec (the standard ones
/// and `keep` are left as they are).
pub fn cloexec_from_3_but(keep: RawFd) {
    for (first, last) in [(3, keep - 1), (keep + 1, RawFd::MAX)] {
        on_range(first, last, RangeOp::CloseOnExec);
    }
}

/// Apply `op` to every descriptor from `first` to `last` (an empty range does nothing).
///
/// Closing descriptors others own (an `OwnedFd`, the runtime's) is the caller's contract:
/// only for a process that will use none of them again.
pub fn on_range(first: RawFd, last: RawFd, op: RangeOp) {
    if first > last || last < 0 {
        return;
    }
    let first = first.max(0);
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let flags = match op {
        RangeOp::Close => 0,
        RangeOp::CloseOnExec => CLOSE_RANGE_CLOEXEC,
    };
    // SAFETY: plain integers. Raw syscall: neither libc's wrapper (glibc 2.34+) nor nix is
    // available everywhere this builds.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            flags,
        )
    } == 0;
    if done {
        return;
    }
    let max = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => soft.min(65_536) as RawFd,
        Err(_) => 1024,
    };
    for fd in first..=last.min(max - 1) {
        // SAFETY: on a descriptor that may not exist (EBADF, ignored). Raw libc: nix's
        // `close` takes an owned descriptor, and these are owned by nobody here.
        unsafe {
            match op {
                RangeOp::Close => libc::close(fd),
                RangeOp::CloseOnExec => libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC),
            };
        }
    }
}
