//! How a run ends, and the exit code each ending gets. The table is documented in `--help`,
//! the README and the man page; change all of them together.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Bad usage, as clap reports it.
pub const USAGE: u8 = 2;
/// Redis unreachable or refusing (sysexits EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// Internal failure that is none of the above (sysexits EX_SOFTWARE).
pub const SOFTWARE: u8 = 70;
/// The lock is used with another `--limit` elsewhere: a configuration error, which no retry
/// or other Redis can mend (sysexits EX_CONFIG).
pub const CONFIG: u8 = 78;
/// The lock was lost while the command ran (sysexits EX_IOERR).
pub const LOST: u8 = 74;
/// --max-runtime reached, as timeout(1).
pub const MAX_RUNTIME: u8 = 124;
/// The command exists but cannot be executed (shell convention).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (shell convention).
pub const NOT_FOUND: u8 = 127;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The command ran; carries its wait status.
    Ran(ChildEnd),
    /// The lock stayed busy; carries the configured conflict code.
    Busy(u8),
    /// `--once-per`: the command already succeeded in this period and was not run; carries
    /// `--done-exit-code`.
    Done(u8),
    /// The lock was lost (or could not be confirmed) while the command ran.
    Lost,
    /// Redis could not be reached or refused the request.
    Unavailable,
    /// The lock's users disagree on `--limit`.
    Config,
    /// --max-runtime elapsed.
    MaxRuntime,
    NotExecutable,
    NotFound,
    /// A signal ended the wait for the lock before anything was held.
    Interrupted(i32),
    Usage,
    Software,
}

/// The exit of a child process, as far as the exit code cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    Exited(i32),
    Signalled(i32),
}

impl From<ExitStatus> for ChildEnd {
    fn from(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => ChildEnd::Exited(code),
            (None, Some(sig)) => ChildEnd::Signalled(sig),
            // Neither code nor signal (stopped/continued) is not a final status; never map it to
            // success.
            (None, None) => ChildEnd::Exited(i32::from(SOFTWARE)),
        }
    }
}

impl ChildEnd {
    pub fn code(self) -> u8 {
        match self {
            ChildEnd::Exited(code) => (code & 0xff) as u8,
            ChildEnd::Signalled(sig) => signal_code(sig),
        }
    }
}

fn signal_code(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

impl Ending {
    /// The signal a run that ended so should die by: the command's own, or the one that
    /// ended the wait for the lock.
    pub fn signal(self) -> Option<i32> {
        match self {
            Ending::Ran(ChildEnd::Signalled(sig)) | Ending::Interrupted(sig) => Some(sig),
            _ => None,
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Ending::Ran(end) => end.code(),
            Ending::Busy(code) | Ending::Done(code) => code,
            Ending::Lost => LOST,
            Ending::Unavailable => UNAVAILABLE,
            Ending::Config => CONFIG,
            Ending::MaxRuntime => MAX_RUNTIME,
            Ending::NotExecutable => NOT_EXECUTABLE,
            Ending::NotFound => NOT_FOUND,
            Ending::Interrupted(sig) => signal_code(sig),
            Ending::Usage => USAGE,
            Ending::Software => SOFTWARE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_from_raw(raw: i32) -> ExitStatus {
        ExitStatus::from_raw(raw)
    }

    #[test]
    fn exit_codes_pass_through() {
        assert_eq!(Ending::Ran(status_from_raw(0).into()).code(), 0);
        assert_eq!(Ending::Ran(status_from_raw(3 << 8).into()).code(), 3);
        assert_eq!(Ending::Ran(status_from_raw(255 << 8).into()).code(), 255);
    }

    #[test]
    fn signal_deaths_map_to_128_plus_n_never_zero() {
        // Raw wait status of a process killed by SIGTERM (15) is 15.
        assert_eq!(ChildEnd::from(status_from_raw(15)), ChildEnd::Signalled(15));
        assert_eq!(Ending::Ran(status_from_raw(15).into()).code(), 143);
        assert_eq!(Ending::Ran(status_from_raw(9).into()).code(), 137);
        assert_eq!(Ending::Interrupted(2).code(), 130);
    }

    #[test]
    fn lock_outcomes_have_distinct_codes() {
        let codes = [
            Ending::Busy(75).code(),
            Ending::Lost.code(),
            Ending::Unavailable.code(),
            Ending::Config.code(),
            Ending::MaxRuntime.code(),
            Ending::NotExecutable.code(),
            Ending::NotFound.code(),
            Ending::Usage.code(),
        ];
        let mut sorted = codes.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len(), "{codes:?}");
        assert_eq!(Ending::Busy(9).code(), 9);
    }
}
