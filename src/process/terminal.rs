//! The wrapper's controlling terminal, and handing its foreground to a process group.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// The wrapper's controlling terminal: one of stdin, stdout or stderr if any is a terminal,
/// else `/dev/tty` (a job started with all three redirected is still a job of the terminal).
pub enum Terminal {
    Std(i32),
    Opened(OwnedFd),
}

impl Terminal {
    pub fn find() -> Option<Terminal> {
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            // SAFETY: fds 0-2 stay open for the process lifetime; borrowed for this call.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            if std::io::IsTerminal::is_terminal(&borrowed) {
                return Some(Terminal::Std(fd));
            }
        }
        // No ctty (cron, CI, a daemon): ENXIO at once.
        let tty = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open("/dev/tty")
            .ok()?;
        Some(Terminal::Opened(tty.into()))
    }

    pub fn raw(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Terminal::Std(fd) => *fd,
            Terminal::Opened(fd) => fd.as_raw_fd(),
        }
    }

    /// The wrapper's group is the terminal's foreground group.
    pub fn foreground_is_ours(&self) -> bool {
        tcgetpgrp(self.as_fd()).is_ok_and(|fg| fg == getpgrp())
    }
}

impl AsFd for Terminal {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            // SAFETY: fds 0-2 stay open for the process lifetime.
            Terminal::Std(fd) => unsafe { BorrowedFd::borrow_raw(*fd) },
            Terminal::Opened(fd) => fd.as_fd(),
        }
    }
}

/// Make `group` the terminal's foreground group. Called from a background group (the child
/// before exec, the wrapper afterwards), which would get SIGTTOU unless it is blocked.
///
/// Async-signal-safe syscalls only and no allocation, so it may run in the forked child
/// before exec. Best effort: errors are ignored.
pub fn give_terminal(tty: BorrowedFd<'_>, group: Pid) {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old));
    let _ = tcsetpgrp(tty, group);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}
