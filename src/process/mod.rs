//! The command as processes: spawned in its own group (and its own cgroup where the system
//! allows), its whole tree tracked, signals forwarded, job control at a terminal.

mod clone_into;
mod fds;
mod job;
mod signals;
mod spawn;
mod terminal;
mod tree;

pub use fds::cloexec_from_3_but;
pub use job::{Event, Job, become_subreaper, group_is_orphaned};
pub use signals::Signals;
pub use spawn::SpawnError;
pub use tree::{Mode, Tree};

/// This host's name, as holder info, run records, pauses and breaks name it.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}
