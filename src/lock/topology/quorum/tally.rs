//! How the nodes' answers add up: an acquire's votes (and when they settle it as busy), a
//! release's answers, a status read's, and the quorum's view of the nodes' statuses.

use crate::lock::protocol::mutex;
use crate::lock::protocol::record;
use crate::lock::topology::server::{ScriptReply, Server};
use crate::lock::{Holder, NodeStatus, RedisFailure, Released, Status};

use super::nodes::unexpected;

/// What one node answered to an acquire.
pub(super) enum Vote {
    Granted(u64),
    Busy(Holder),
    /// The node refused this token: the run cancelled it there after a lost reply.
    Cancelled,
    Failed(RedisFailure),
    /// Not awaited: the other nodes' answers settled the attempt (busy) first. The request
    /// is on its way and may still land.
    Unanswered,
}

impl Vote {
    /// A write of this attempt may be on the node (or still on its way to it).
    pub(super) fn may_hold_write(&self) -> bool {
        match self {
            Vote::Granted(_) => true,
            Vote::Failed(e) => e.may_have_written(),
            Vote::Unanswered => true,
            Vote::Busy(_) | Vote::Cancelled => false,
        }
    }
}

/// The votes in hand (`None`: not in yet) settle the attempt as busy, whatever the rest say:
/// fewer than `quorum` nodes can still grant, and at least `quorum` answered (so it is not a
/// failure to reach the nodes either).
pub(super) fn busy_settled(votes: &[Option<Vote>], quorum: usize) -> bool {
    let granted = votes
        .iter()
        .filter(|v| matches!(v, Some(Vote::Granted(_))))
        .count();
    let pending = votes.iter().filter(|v| v.is_none()).count();
    let answered = votes
        .iter()
        .filter(|v| matches!(v, Some(Vote::Busy(_) | Vote::Cancelled)))
        .count();
    granted + pending < quorum && answered >= quorum
}

/// A status read with the lock held is settled: a quorum answered (the record read is a
/// quorum's, see `record::newest`), or so many failed that no quorum can answer.
pub(super) fn status_settled(answered: usize, failed: usize, n: usize, quorum: usize) -> bool {
    answered >= quorum || n.saturating_sub(failed) < quorum
}

/// How the nodes answered a release so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ReleaseTally {
    pub(super) released: usize,
    /// The lock held another token.
    pub(super) other: usize,
    /// The lock was gone.
    pub(super) gone: usize,
    /// No answer (a failure, or not awaited).
    pub(super) unanswered: usize,
}

impl ReleaseTally {
    /// Count `node`'s reply; a failure is kept in `failures` too.
    pub(super) fn count(
        &mut self,
        node: &Server,
        reply: Result<ScriptReply, RedisFailure>,
        failures: &mut Vec<RedisFailure>,
    ) {
        match reply.map(|r| (mutex::parse_release(&r.value), r.value)) {
            Ok((Some(Released::Released), _)) => self.released += 1,
            Ok((Some(Released::HeldByOther), _)) => self.other += 1,
            Ok((Some(Released::Gone), _)) => self.gone += 1,
            Ok((None, value)) => {
                self.unanswered += 1;
                failures.push(unexpected(node, "release", &value));
            }
            Err(e) => {
                self.unanswered += 1;
                failures.push(e);
            }
        }
    }

    /// What these answers add up to with a quorum of `quorum`; `None`: unconfirmed (the nodes
    /// that did not answer may have held it).
    pub(super) fn outcome(&self, quorum: usize) -> Option<Released> {
        if self.released >= quorum {
            Some(Released::Released)
        } else if self.released + self.unanswered >= quorum {
            None
        } else if self.other >= quorum {
            Some(Released::HeldByOther)
        } else {
            Some(Released::Gone)
        }
    }

    /// The outcome is the same whatever the `pending` nodes still answer (or if they never
    /// do): a quorum released it, typically.
    pub(super) fn settled(&self, quorum: usize, pending: usize) -> bool {
        let now = ReleaseTally {
            unanswered: self.unanswered + pending,
            ..*self
        }
        .outcome(quorum);
        (0..=pending).all(|released| {
            (0..=pending - released).all(|other| {
                (0..=pending - released - other).all(|unanswered| {
                    let gone = pending - released - other - unanswered;
                    let then = ReleaseTally {
                        released: self.released + released,
                        other: self.other + other,
                        gone: self.gone + gone,
                        unanswered: self.unanswered + unanswered,
                    };
                    then.outcome(quorum) == now
                })
            })
        })
    }
}

/// The quorum's view of `nodes` with each node's status and the newest run record among
/// them: what `status` and `list` show of a lock on Redlock.
pub(super) fn view_with_nodes(nodes: Vec<NodeStatus>, quorum: usize) -> Status {
    let view = quorum_view(&nodes, quorum);
    let records = record::newest(
        nodes
            .iter()
            .filter_map(|n| n.status.as_ref().ok().map(|s| &s.records)),
    );
    Status {
        nodes,
        records,
        ..view
    }
}

/// What the nodes' statuses add up to: held when >= `quorum` nodes hold the lock for the
/// same holder; its ttl is the time until fewer than `quorum` still hold it, its fence the
/// highest.
pub(super) fn quorum_view(nodes: &[NodeStatus], quorum: usize) -> Status {
    let held: Vec<&Status> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref().ok())
        .filter(|s| s.held)
        .collect();
    // A pause counts once enough nodes have it that no quorum can grant.
    let pauses: Vec<&crate::lock::Paused> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref().ok())
        .filter_map(|s| s.paused.as_ref())
        .collect();
    let paused = (pauses.len() > nodes.len().saturating_sub(quorum))
        .then(|| {
            pauses
                .iter()
                .max_by_key(|p| p.until_ms)
                .map(|p| (*p).clone())
        })
        .flatten();
    let same = |a: &Status, b: &Status| {
        a.foreign == b.foreign
            && a.host == b.host
            && a.pid == b.pid
            && a.command == b.command
            && a.token == b.token
    };
    let Some(first) = held
        .iter()
        .max_by_key(|s| held.iter().filter(|o| same(s, o)).count())
    else {
        return Status {
            paused,
            ..Status::default()
        };
    };
    let group: Vec<&Status> = held.iter().copied().filter(|s| same(first, s)).collect();
    if group.len() < quorum {
        return Status {
            paused,
            ..Status::default()
        };
    }
    // No TTL (a foreign key that never expires) outlasts any TTL.
    let mut ttls: Vec<u64> = group.iter().map(|s| s.ttl_ms.unwrap_or(u64::MAX)).collect();
    ttls.sort_unstable_by(|a, b| b.cmp(a));
    let ttl = ttls[quorum - 1];
    Status {
        held: true,
        foreign: first.foreign,
        ttl_ms: (ttl != u64::MAX).then_some(ttl),
        host: first.host.clone(),
        pid: first.pid,
        command: first.command.clone(),
        acquired_ms: group.iter().filter_map(|s| s.acquired_ms).min(),
        fence: group.iter().filter_map(|s| s.fence).max(),
        token: first.token.clone(),
        note: first.note.clone(),
        paused,
        // The command finished once; nodes' clocks and reply times differ a little.
        kept: group
            .iter()
            .filter_map(|s| s.kept)
            .min_by_key(|k| k.until_ms),
        ..Status::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(status: Result<Status, String>) -> NodeStatus {
        NodeStatus {
            server: "redis://h".into(),
            status,
        }
    }

    fn held_by(pid: u32, ttl: u64, fence: u64) -> Status {
        Status {
            held: true,
            host: Some("h".into()),
            pid: Some(pid),
            ttl_ms: Some(ttl),
            fence: Some(fence),
            ..Status::default()
        }
    }

    /// A pause shows once enough nodes have it that no quorum can grant (more than n -
    /// quorum), with the latest end among them.
    #[test]
    fn the_quorum_view_is_paused_when_no_quorum_can_grant() {
        let paused = |until_ms| Status {
            paused: Some(crate::lock::Paused {
                reason: "r".into(),
                by: "ops".into(),
                since_ms: 1,
                until_ms,
            }),
            ..Status::default()
        };
        let two = [
            node(Ok(paused(10))),
            node(Ok(paused(20))),
            node(Ok(Status::default())),
        ];
        assert_eq!(quorum_view(&two, 2).paused.map(|p| p.until_ms), Some(20));
        let one = [
            node(Ok(paused(10))),
            node(Ok(Status::default())),
            node(Err("down".into())),
        ];
        assert_eq!(quorum_view(&one, 2).paused, None);
        // With quorum 3 of 3, one paused node keeps any quorum from granting.
        assert!(quorum_view(&one, 3).paused.is_some());
    }

    #[test]
    fn the_quorum_view_needs_a_quorum_of_one_holder() {
        let nodes = [
            node(Ok(held_by(1, 900, 5))),
            node(Ok(held_by(1, 1000, 7))),
            node(Ok(held_by(1, 800, 6))),
        ];
        let view = quorum_view(&nodes, 2);
        assert!(view.held);
        assert_eq!(
            (view.pid, view.ttl_ms, view.fence),
            (Some(1), Some(900), Some(7))
        );

        let split = [
            node(Ok(held_by(1, 900, 5))),
            node(Ok(held_by(2, 1000, 7))),
            node(Err("unreachable".into())),
        ];
        assert_eq!(quorum_view(&split, 2), Status::default());
    }

    #[test]
    fn a_release_is_settled_once_the_rest_cannot_change_it() {
        let t = |released, other, gone, unanswered| ReleaseTally {
            released,
            other,
            gone,
            unanswered,
        };
        // 3 nodes, quorum 2: two released, the third frozen.
        assert!(t(2, 0, 0, 0).settled(2, 1));
        assert_eq!(t(2, 0, 0, 1).outcome(2), Some(Released::Released));
        // One released, one gone: the third decides between released and unconfirmed.
        assert!(!t(1, 0, 1, 0).settled(2, 1));
        assert_eq!(t(1, 0, 1, 1).outcome(2), None);
        // Another holder on two: settled; gone on two: settled.
        assert!(t(0, 2, 0, 0).settled(2, 1));
        assert_eq!(t(0, 2, 0, 1).outcome(2), Some(Released::HeldByOther));
        assert!(t(0, 0, 2, 0).settled(2, 1));
        assert_eq!(t(0, 0, 2, 1).outcome(2), Some(Released::Gone));
        // 5 nodes, quorum 3: two released and one gone say nothing yet.
        assert!(!t(2, 0, 1, 0).settled(3, 2));
        assert!(t(3, 0, 0, 0).settled(3, 2));
        // Nothing pending: always settled.
        assert!(t(1, 1, 0, 1).settled(2, 0));
    }

    #[test]
    fn a_status_read_is_settled_once_a_quorum_answered_or_cannot() {
        assert!(status_settled(2, 0, 3, 2));
        assert!(!status_settled(1, 0, 3, 2));
        assert!(!status_settled(1, 1, 3, 2));
        assert!(status_settled(1, 2, 3, 2));
        assert!(!status_settled(2, 0, 5, 3));
        assert!(status_settled(3, 1, 5, 3));
    }

    #[test]
    fn busy_is_settled_when_a_quorum_answered_and_no_quorum_can_grant() {
        let busy = || Some(Vote::Busy(Holder::default()));
        let granted = || Some(Vote::Granted(1));
        assert!(busy_settled(&[busy(), busy(), None], 2));
        assert!(!busy_settled(&[granted(), busy(), None], 2));
        assert!(!busy_settled(&[busy(), None, None], 2));
        let failed = || Some(Vote::Failed(RedisFailure::timeout("redis://h", "acquire")));
        // Two failed: not busy but a failure, decided once every vote is in.
        assert!(!busy_settled(&[busy(), failed(), None], 2));
        assert!(busy_settled(&[busy(), Some(Vote::Cancelled), failed()], 2));
    }
}
