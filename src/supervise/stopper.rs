//! [`Stopper`]: how the command is stopped, SIGTERM first and SIGKILL when due.

use crate::lease::Stamp;
use crate::process::Job;

use super::shared::earliest;

/// Stops the command: SIGTERM when asked, SIGKILL at the earliest moment any reason set (or
/// at once). Each reason may ask again; the earliest SIGKILL wins.
pub(super) enum Stopper {
    /// No SIGKILL sent yet; one is due at `kill_at` if a reason set a moment.
    Asking { kill_at: Option<Stamp> },
    /// SIGKILL sent: nothing is left to do.
    Killed,
}

impl Default for Stopper {
    fn default() -> Self {
        Stopper::Asking { kill_at: None }
    }
}

impl Stopper {
    pub(super) fn terminate(&mut self, job: &Job, kill_at: Option<Stamp>) {
        // The whole tree; continued too, as a stopped command acts on SIGTERM only then.
        job.terminate();
        if let Stopper::Asking { kill_at: due } = self {
            *due = earliest(*due, kill_at);
        }
    }

    pub(super) fn kill(&mut self, job: &Job) {
        job.kill();
        *self = Stopper::Killed;
    }

    pub(super) fn kill_if_due(&mut self, job: &Job, now: Stamp) {
        if self.next_due().is_some_and(|at| now >= at) {
            self.kill(job);
        }
    }

    pub(super) fn next_due(&self) -> Option<Stamp> {
        match self {
            Stopper::Asking { kill_at } => *kill_at,
            Stopper::Killed => None,
        }
    }
}
