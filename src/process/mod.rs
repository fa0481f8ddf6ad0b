//! The command as processes: spawned in its own group (and its own cgroup where the system
//! allows), its whole tree tracked, signals forwarded, job control at a terminal.

mod clone_into;
mod job;
mod signals;
mod tree;

pub use job::{become_subreaper, group_is_orphaned, Event, Job, SpawnError};
pub use signals::Signals;
pub use tree::{Mode, Tree};
