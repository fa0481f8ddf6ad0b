//! How a run went ([`Outcome`]), and the exit code that follows from it alone ([`exit_for`]).

use crate::exit::{ChildEnd, Ending};
use crate::lock::Broken;

/// How a run went, before an exit code is chosen. Built once, reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The lock was never held: busy, Redis unavailable, a signal ended the wait, or an
    /// internal failure before anything was sent. Carries the ending already decided.
    NotHeld(Ending),
    /// The lock was held; what happened under it, and what the one release found.
    Held {
        under: Under,
        release: ReleaseResult,
    },
}

/// What happened while the lock was held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Under {
    /// The lease was already in its last `--grace` when the command was about to start.
    LateStart,
    /// Signal N arrived between the acquire and the spawn.
    Interrupted(i32),
    /// The command could not be started (126 / 127).
    SpawnFailed(Ending),
    /// The command ran and ended (`None`: its status could not be read).
    Ran {
        end: Option<ChildEnd>,
        lease: Option<LeaseEnd>,
        max_runtime: bool,
    },
}

impl Under {
    /// The lease is known to be gone (ran out before the start, or lost while running): the
    /// release can then only tidy up, and its "not ours" is no news.
    pub(super) fn lease_lost(&self) -> bool {
        matches!(self, Under::LateStart | Under::Ran { lease: Some(_), .. })
    }
}

/// Why the lease could not be kept while the command ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEnd {
    /// A renewal found the token gone: someone else may hold the lock now. `Some`: an
    /// operator's `break` took it (who, when).
    Lost(Option<Broken>),
    /// No renewal was confirmed in time; carries the last error.
    Unconfirmed(String),
}

/// What the release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseResult {
    /// Ours, and released (or left to expire under `--hold-at-least`).
    Released,
    HeldByOther,
    Gone,
    /// No answer: the key expires by itself within the ttl.
    Unreachable,
}

/// The exit code of a run, from its outcome alone.
pub fn exit_for(outcome: &Outcome) -> Ending {
    match outcome {
        Outcome::NotHeld(ending) => *ending,
        Outcome::Held { under, release } => match under {
            Under::LateStart => Ending::Lost,
            Under::Interrupted(sig) => Ending::Interrupted(*sig),
            Under::SpawnFailed(ending) => *ending,
            Under::Ran { lease: Some(_), .. } => Ending::Lost,
            // The lock was not ours at release: that outranks how the command ended.
            Under::Ran { .. }
                if matches!(release, ReleaseResult::HeldByOther | ReleaseResult::Gone) =>
            {
                Ending::Lost
            }
            Under::Ran { end: None, .. } => Ending::Software,
            Under::Ran {
                max_runtime: true, ..
            } => Ending::MaxRuntime,
            Under::Ran { end: Some(end), .. } => Ending::Ran(*end),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(end: ChildEnd) -> Under {
        Under::Ran {
            end: Some(end),
            lease: None,
            max_runtime: false,
        }
    }

    fn held(under: Under, release: ReleaseResult) -> Ending {
        exit_for(&Outcome::Held { under, release })
    }

    #[test]
    fn a_command_that_ran_under_its_lease_gives_its_own_status() {
        use ReleaseResult::*;
        assert_eq!(
            held(ran(ChildEnd::Exited(3)), Released),
            Ending::Ran(ChildEnd::Exited(3))
        );
        assert_eq!(
            held(ran(ChildEnd::Signalled(15)), Released),
            Ending::Ran(ChildEnd::Signalled(15))
        );
        // Redis unreachable at release: the command ran under a valid lease; its code stands.
        assert_eq!(
            held(ran(ChildEnd::Exited(0)), Unreachable),
            Ending::Ran(ChildEnd::Exited(0))
        );
    }

    #[test]
    fn a_lock_not_ours_at_release_outranks_success() {
        for release in [ReleaseResult::HeldByOther, ReleaseResult::Gone] {
            assert_eq!(held(ran(ChildEnd::Exited(0)), release), Ending::Lost);
            let max = Under::Ran {
                end: Some(ChildEnd::Signalled(15)),
                lease: None,
                max_runtime: true,
            };
            assert_eq!(held(max, release), Ending::Lost);
        }
    }

    #[test]
    fn a_lost_lease_is_74_whatever_the_command_did() {
        for lease in [
            LeaseEnd::Lost(None),
            LeaseEnd::Unconfirmed("timeout".into()),
        ] {
            let under = Under::Ran {
                end: Some(ChildEnd::Exited(0)),
                lease: Some(lease),
                max_runtime: true,
            };
            assert_eq!(held(under, ReleaseResult::Released), Ending::Lost);
        }
        assert_eq!(
            held(Under::LateStart, ReleaseResult::Released),
            Ending::Lost
        );
    }

    #[test]
    fn max_runtime_is_124_and_an_unreadable_status_is_internal() {
        let max = Under::Ran {
            end: Some(ChildEnd::Exited(0)),
            lease: None,
            max_runtime: true,
        };
        assert_eq!(held(max, ReleaseResult::Released), Ending::MaxRuntime);
        let lost_track = Under::Ran {
            end: None,
            lease: None,
            max_runtime: false,
        };
        assert_eq!(held(lost_track, ReleaseResult::Released), Ending::Software);
    }

    #[test]
    fn a_command_that_never_started_keeps_its_own_code() {
        for release in [ReleaseResult::Released, ReleaseResult::Gone] {
            assert_eq!(
                held(Under::SpawnFailed(Ending::NotFound), release),
                Ending::NotFound
            );
            assert_eq!(held(Under::Interrupted(2), release), Ending::Interrupted(2));
        }
        assert_eq!(
            exit_for(&Outcome::NotHeld(Ending::Busy(75))),
            Ending::Busy(75)
        );
    }
}
