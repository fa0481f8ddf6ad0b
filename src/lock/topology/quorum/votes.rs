//! An acquire's votes: asked of every node (busy decided without waiting for a frozen one),
//! the fence written back on the nodes that granted, and every write taken back when the
//! attempt does not grant.

use std::time::Duration;

use futures_util::future::{self, join_all};
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::lock::protocol::ScriptCall;
use crate::lock::protocol::mutex::{self, AcquireReply};
use crate::lock::topology::server::Server;
use crate::lock::{Holder, Token};

use super::nodes::{Quorum, STRAGGLERS, unexpected};
use super::tally::{Vote, busy_settled};

/// What [`Quorum::undo`] does where the attempt was granted.
#[derive(Clone, Copy)]
pub(super) enum OnGranted {
    /// The attempt ends busy: released (the reply is in hand).
    Release,
    /// The attempt failed: cancelled.
    Cancel,
    /// The attempt was granted: the quorum keeps it.
    Keep,
}

impl Quorum {
    pub(super) async fn vote(&self, node: &Server, call: &ScriptCall, bound: Duration) -> Vote {
        match node.script(call, None, "acquire", bound).await {
            Ok(reply) => match mutex::parse_acquire(&reply.value) {
                Some(AcquireReply::Granted { fence }) => Vote::Granted(fence),
                Some(AcquireReply::Busy(holder)) => Vote::Busy(holder),
                None if mutex::is_cancelled(&reply.value) => Vote::Cancelled,
                None => Vote::Failed(unexpected(node, "acquire", &reply.value)),
            },
            Err(e) => Vote::Failed(e),
        }
    }

    /// Every node's vote on `call`, each within `bound`. Once the votes in hand settle the
    /// attempt as busy (fewer than a quorum can still grant, and a quorum answered), the
    /// rest are awaited only [`STRAGGLERS`] more: those still out come back as
    /// [`Vote::Unanswered`], with a future that reads them (each within its bound), to be
    /// run while the take-back goes out behind them on the same connection.
    pub(super) async fn votes<'a>(
        &'a self,
        call: &'a ScriptCall,
        bound: Duration,
    ) -> (Vec<Vote>, impl Future<Output = ()> + 'a) {
        let mut votes: Vec<Option<Vote>> = self.nodes.iter().map(|_| None).collect();
        let mut under_way: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| async move { (i, self.vote(node, call, bound).await) })
            .collect();
        while let Some((i, vote)) = under_way.next().await {
            votes[i] = Some(vote);
            if busy_settled(&votes, self.quorum) {
                break;
            }
        }
        // A moment more for the rest, which on a healthy network are right behind: a vote read
        // needs no cancel.
        if !under_way.is_empty() {
            let _ = tokio::time::timeout(STRAGGLERS.min(bound), async {
                while let Some((i, vote)) = under_way.next().await {
                    votes[i] = Some(vote);
                }
            })
            .await;
        }
        let votes = votes
            .into_iter()
            .map(|v| v.unwrap_or(Vote::Unanswered))
            .collect();
        (votes, under_way.for_each(|_| future::ready(())))
    }

    /// Raise the counter to `fence` on the nodes that granted; how many took it.
    pub(super) async fn write_back(
        &self,
        token: &Token,
        fence: u64,
        votes: &[Vote],
        bound: Duration,
    ) -> usize {
        let already = votes
            .iter()
            .filter(|v| matches!(v, Vote::Granted(f) if *f == fence))
            .count();
        if already >= self.quorum {
            return already;
        }
        let call = self.mutex.raise_fence(&token.as_str(), fence);
        let raised = join_all(self.nodes.iter().zip(votes).map(|(node, vote)| {
            let call = &call;
            async move {
                if !matches!(vote, Vote::Granted(_)) {
                    return false;
                }
                match node.script(call, None, "the fence write-back", bound).await {
                    Ok(reply) => mutex::parse_raise_fence(&reply.value) == Some(true),
                    Err(_) => false,
                }
            }
        }))
        .await;
        raised.into_iter().filter(|r| *r).count()
    }

    /// Take back the writes this attempt may have left. Where a node granted, `granted`
    /// says what: a compare-and-delete release when the attempt ends busy (the reply is in
    /// hand, nothing is under way), the cancel script when it failed, nothing after a grant
    /// (the quorum holds the lock). Everywhere else the cancel script, so that a request
    /// still on its way cannot land later: after a grant too, or an unanswered node could
    /// take the lock after the run's release had come and gone there and keep a stale key
    /// for a whole ttl. Each node's take-back is sent, and awaited at most `each` (a frozen
    /// node must not hold up the answer): what does not land expires within the ttl, and a
    /// late acquire behind a cancel that did land is refused.
    pub(super) async fn undo(
        &self,
        token: &Token,
        votes: &[Vote],
        granted: OnGranted,
        each: Duration,
    ) {
        // Quietly: the lock was never free on a quorum, and an announcement would wake this
        // very run (subscribed on every node) into another attempt at once, and again.
        let release = self.mutex.release_quietly(&token.as_str());
        let cancel_call = self.mutex.cancel_quietly(&token.as_str());
        join_all(self.nodes.iter().zip(votes).map(|(node, vote)| {
            let (release, cancel_call) = (&release, &cancel_call);
            async move {
                if !vote.may_hold_write() {
                    return;
                }
                match (vote, granted) {
                    (Vote::Granted(_), OnGranted::Keep) => {}
                    (Vote::Granted(_), OnGranted::Release) => {
                        let _ = node.script(release, None, "release", each).await;
                    }
                    // Its acquire is still on the connection in use (a busy attempt did not
                    // wait for it): the cancel goes apart, so that it can arrive first and
                    // the acquire, should it still land, finds its token cancelled.
                    (Vote::Unanswered, _) => {
                        let _ = node.eval_apart(cancel_call, "release", each).await;
                    }
                    _ => {
                        let _ = node.eval(cancel_call, "release", each).await;
                    }
                }
            }
        }))
        .await;
    }

    /// Who holds the lock on the most nodes that said busy.
    pub(super) fn majority_holder(votes: &[Vote]) -> Holder {
        let busy: Vec<&Holder> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Busy(h) => Some(h),
                _ => None,
            })
            .collect();
        let same = |a: &Holder, b: &Holder| a.host == b.host && a.pid == b.pid;
        let mut holder = busy
            .iter()
            .max_by_key(|h| busy.iter().filter(|o| same(h, o)).count())
            .map(|h| (*h).clone())
            .unwrap_or_default();
        // A pause on any node that answered is why: say so.
        if holder.paused.is_none() {
            holder.paused = busy.iter().find_map(|h| h.paused.clone());
        }
        holder
    }
}
