//! Redlock: the mutex on N independent masters, held while a quorum Q (> N/2) of them hold it.
//!
//! Every operation sends the same mutex script to all nodes at once, each call bounded on its
//! own, and counts the answers:
//! - acquire: granted on >= Q nodes with lease time left, then the fence write-back (below),
//!   then granted. Anything less is taken back on every node that may hold a write (the
//!   cancel script, sent as EVAL, so that a late arrival cannot land), then busy or a failure.
//!   Busy is answered once the votes in hand settle it (a quorum answered and fewer than Q
//!   can still grant) and the rest had a short moment more ([`STRAGGLERS`]): a node not
//!   heard from by then gets the cancel behind its vote;
//! - renew: compare-then-PEXPIRE everywhere; renewed when >= Q confirmed in time, lost when
//!   so many said "gone" that Q can no longer confirm, else a (transient) failure;
//! - release: everywhere; released when >= Q released. Returns once the answers in hand
//!   decide the outcome, after a short moment more for the rest ([`STRAGGLERS`]); a node not
//!   heard from by then gets the release once more as EVAL (which lands even if no reply is
//!   read). A late release is a compare-and-delete: it cannot touch a later holder's lock,
//!   and one that never lands expires with the lease;
//! - release notices: subscribed on every node, ready once a quorum is (a release that
//!   counted reached a quorum, and two quorums share a node);
//! - status: each node's view, and the quorum's.
//!
//! # The fence
//! Each node's acquire script returns `f_i = max(F_i + 1, TIME_i)`. The maximum of the f_i
//! over the nodes that granted is *not* enough: the largest counter may live on a node that
//! the next holder never asks (two majorities meet in one node, not in the node that had the
//! largest counter), and its fence would then go backwards. So the maximum `f` is written
//! back (`counter := max(counter, f)`, only where the lock still holds our token) and the
//! grant counts only once >= Q nodes took it. Any later grant meets one of those nodes, where
//! it was either given before our key was set (an earlier holder) or after our write-back,
//! and reads a counter >= f there, so its own fence is > f. Skipped when >= Q nodes returned
//! `f` already (their counters are at `f`). The lease counts from before the first send, and
//! the time left is checked after the write-back.
//!
//! # Bounds
//! Each node's acquire, write-back and take-back get a short bound: a twentieth of the ttl
//! (at least 100 ms), within the supervisor's bound, so that one frozen node (it accepts
//! connections and never answers) costs only that. Bounded is not skipped: a take-back is
//! sent to every node that may hold a write, and the cancelled token keeps a late acquire
//! from landing. The start waits for a quorum of nodes to answer (connect and say their run
//! id), not for every node. Renewals and status calls get the bound the supervisor gives,
//! each node in parallel.
//!
//! # Files
//! Each entry imports only entries below it:
//! - here: the contract ([`Lock`]) on Redlock: the run's lock path (acquire, renew, release,
//!   release notices), and one-line forwards for the rest;
//! - `admin.rs`: `status`, `list`, the hold record, `forget`, `break`, `pause`, `resume`;
//! - `votes.rs`: an acquire's votes, the fence write-back, the take-back;
//! - `tally.rs`: how the answers add up (busy settled, a release, a status read, the
//!   quorum's view);
//! - `nodes.rs`: [`Quorum`] and its start, and how a quorum not reached is told.

mod admin;
mod nodes;
mod tally;
mod votes;

pub use nodes::Quorum;

use std::time::Duration;

use futures_util::future::{self, join_all};
use futures_util::stream::{self, FuturesUnordered, StreamExt};

use crate::lease::{self, Stamp};
use crate::lock::protocol::mutex::{self, RenewReply};
use crate::lock::topology::shared::UNDO_AT_LEAST;
use crate::lock::{
    Attempt, BreakOutcome, Confirmed, FailureKind, Finished, Grant, HoldChange, HoldRecord,
    HolderInfo, ListQuery, Listing, Lock, RedisFailure, ReleaseNotices, Released, Renewal, Status,
    Token,
};
use nodes::{STRAGGLERS, unexpected};
use tally::{ReleaseTally, Vote};
use votes::OnGranted;

impl Lock for Quorum {
    fn name(&self) -> &str {
        &self.mutex.keys().lock
    }

    async fn try_acquire(
        &self,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure> {
        // A token of its own: a take-back below cancels it on some nodes.
        let token = &Token::new();
        // The lease counts from before the first byte goes to any node.
        let counted_from = Stamp::now();
        let deadline = counted_from.checked_add(within);
        let bound = Self::node_bound(ttl, within);
        // No waiters' queue with Redlock: each node would keep its own, and heads that differ
        // between nodes could block each other for good.
        let holder = HolderInfo {
            waiter: None,
            ..holder.clone()
        };
        let call = self.mutex.acquire(&token.as_str(), ttl, &holder);
        // `under_way`: the votes not awaited once the attempt was busy; read while the
        // take-back goes out behind them.
        let (votes, under_way) = self.votes(&call, bound).await;

        let fences: Vec<u64> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Granted(f) => Some(*f),
                _ => None,
            })
            .collect();
        let failures: Vec<RedisFailure> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Failed(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        let answered = votes
            .iter()
            .filter(|v| matches!(v, Vote::Granted(_) | Vote::Busy(_) | Vote::Cancelled))
            .count();
        // Each node's take-back: the node's bound, within what is left of the attempt (but
        // never less than a few round trips).
        let take_back = || {
            let left = deadline.map_or(Duration::ZERO, |d| Stamp::now().until(d));
            bound.min(left).max(UNDO_AT_LEAST)
        };

        let failure = if fences.len() >= self.quorum {
            let fence = fences.iter().copied().max().unwrap_or_default();
            let raised = self.write_back(token, fence, &votes, bound).await;
            let valid = lease::deadline(counted_from, ttl).is_some_and(|d| Stamp::now() < d);
            if raised >= self.quorum && valid {
                if votes
                    .iter()
                    .any(|v| !matches!(v, Vote::Granted(_)) && v.may_hold_write())
                {
                    self.undo(token, &votes, OnGranted::Keep, take_back()).await;
                }
                return Ok(Attempt::Granted(Grant {
                    token: token.clone(),
                    fence,
                    counted_from,
                    degraded: self.degraded(fences.len(), &failures),
                    absent: self
                        .nodes
                        .iter()
                        .zip(&votes)
                        .filter(|(_, v)| !matches!(v, Vote::Granted(_)))
                        .map(|(node, _)| node.shown().to_owned())
                        .collect(),
                }));
            }
            if raised < self.quorum {
                self.too_few("took the fence write-back", raised, &failures, true)
            } else {
                RedisFailure::of_many(
                    FailureKind::Unreachable,
                    format!("{} Redlock masters", self.n()),
                    format!(
                        "the lock was granted by {} but too slowly: no lease time was left",
                        fences.len()
                    ),
                    true,
                )
            }
        } else if answered >= self.quorum {
            // Enough nodes answered, and too many of them hold another value: busy. What this
            // attempt got is given back first, and a vote not awaited is cancelled.
            // The votes not awaited are read meanwhile (each within its bound): one dropped
            // half-way would drop its node's connection.
            future::join(
                self.undo(token, &votes, OnGranted::Release, take_back()),
                under_way,
            )
            .await;
            return Ok(Attempt::Busy(Self::majority_holder(&votes)));
        } else {
            let wrote = votes.iter().any(Vote::may_hold_write);
            self.too_few("answered", answered, &failures, wrote)
        };
        // Every vote was awaited (only a busy attempt leaves some).
        drop(under_way);
        self.undo(token, &votes, OnGranted::Cancel, take_back())
            .await;
        Err(failure)
    }

    async fn renew(
        &self,
        token: &Token,
        ttl: Duration,
        within: Duration,
    ) -> Result<Renewal, RedisFailure> {
        // Every node's reply is waited for: one frozen node would hold the quorum's answer
        // back for the whole bound the keeper gives (its attempt's own lease), so each node
        // keeps a quarter of the ttl, and the keeper's next attempt comes after it.
        let within = within.min((ttl / 4).max(Duration::from_millis(50)));
        let counted_from = Stamp::now();
        let call = self.mutex.renew(&token.as_str(), ttl);
        let replies = self.on_every_node(&call, "the renewal", within).await;
        let (mut renewed, mut lost, mut failures) = (0, 0, Vec::new());
        let mut broken = None;
        let mut nodes = Confirmed::default();
        for (node, reply) in self.nodes.iter().zip(replies) {
            let shown = node.shown().to_owned();
            match reply.map(|r| (mutex::parse_renew(&r.value), r.value)) {
                Ok((Some(RenewReply::Renewed), _)) => {
                    renewed += 1;
                    nodes.confirmed.push(shown);
                }
                Ok((Some(RenewReply::Lost(b)), _)) => {
                    lost += 1;
                    broken = broken.or(b);
                    let why = format!("Redis at {shown} no longer holds the lock");
                    nodes.missing.push((shown, why));
                }
                Ok((None, value)) => {
                    let e = unexpected(node, "the renewal", &value);
                    nodes.missing.push((shown, e.to_string()));
                    failures.push(e);
                }
                Err(e) => {
                    nodes.missing.push((shown, e.to_string()));
                    failures.push(e);
                }
            }
        }
        if renewed >= self.quorum {
            nodes.tally = format!("{renewed} of {} masters ({} needed)", self.n(), self.quorum);
            Ok(Renewal::Renewed {
                counted_from,
                nodes: Some(nodes),
            })
        } else if lost > self.n() - self.quorum {
            // So many nodes lost the token that a quorum can never confirm it again.
            Ok(Renewal::Lost(broken))
        } else {
            Err(self.too_few("confirmed the renewal", renewed, &failures, true))
        }
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        record: Option<&Finished>,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        // Sent to every node; awaited until the answers in hand decide the outcome (a quorum
        // released it, typically), then a moment more for the rest. A release that lands
        // late is a compare-and-delete: it deletes nothing of a later holder's, and one that
        // never lands expires with the lease. The run record goes with each node's release,
        // so it is written exactly on the nodes that still hold the token (record.lua).
        let call = self.mutex.release(&token.as_str(), keep, record);
        let mut under_way: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let call = &call;
                async move { (i, node.script(call, None, "release", within).await) }
            })
            .collect();
        let mut answered = vec![false; self.n()];
        let mut tally = ReleaseTally::default();
        let mut failures = Vec::new();
        while let Some((i, reply)) = under_way.next().await {
            answered[i] = true;
            tally.count(&self.nodes[i], reply, &mut failures);
            if tally.settled(self.quorum, under_way.len()) {
                break;
            }
        }
        // The nodes not answered yet (a frozen one) get the release once more as EVAL, which
        // lands once the node answers again even if no reply is read (the EVALSHA under way
        // may meet NOSCRIPT there, and its EVAL would never be sent), and a moment more: for
        // both to be written before the calls are dropped (a request whose caller is gone is
        // never sent), and for a node only a little slower to be counted. No longer.
        let again = join_all(
            (0..self.n())
                .filter(|&i| !answered[i])
                .map(|i| self.nodes[i].eval(&call, "release", within)),
        );
        let rest = async {
            while let Some((i, reply)) = under_way.next().await {
                tally.count(&self.nodes[i], reply, &mut failures);
            }
        };
        let _ = tokio::time::timeout(STRAGGLERS.min(within), future::join(again, rest)).await;
        tally.unanswered += under_way.len();
        match tally.outcome(self.quorum) {
            Some(released) => Ok(released),
            None => {
                // The nodes that did not answer may have held it: nothing can be said.
                let first = failures
                    .first()
                    .map(|f| format!("; {f}"))
                    .unwrap_or_default();
                Err(RedisFailure::of_many(
                    FailureKind::Unreachable,
                    format!("{} of {} Redlock masters", tally.unanswered, self.n()),
                    format!(
                        "the release is unconfirmed: {} released it, {} had it no longer, {} did \
                         not answer{first}",
                        tally.released,
                        tally.other + tally.gone,
                        tally.unanswered
                    ),
                    true,
                ))
            }
        }
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        // Any node's announcement is the hint. Subscribed on every node that answers: ready
        // once a quorum is (a release that counted reached a quorum, and two quorums share a
        // node) and the rest had a moment more, or every node answered. A frozen node must
        // not hold up the next attempt; without its subscription nothing is lost but a hint.
        let channel = &self.mutex.keys().released;
        let mut under_way: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| node.subscribe(channel, within))
            .collect();
        let mut subscribed = Vec::new();
        while let Some(notices) = under_way.next().await {
            subscribed.extend(notices);
            if subscribed.len() >= self.quorum {
                break;
            }
        }
        let _ = tokio::time::timeout(STRAGGLERS.min(within), async {
            while let Some(notices) = under_way.next().await {
                subscribed.extend(notices);
            }
        })
        .await;
        if subscribed.is_empty() {
            return None;
        }
        let streams = subscribed.into_iter().map(|notices| {
            Box::pin(stream::unfold(notices, |mut notices| async move {
                let payload = notices.next().await;
                Some((payload, notices))
            }))
        });
        Some(ReleaseNotices::new((), stream::select_all(streams)))
    }

    async fn leave_queue(&self, _holder: &HolderInfo, _within: Duration) {
        // Never queued (see try_acquire).
    }

    // The calls besides the run's lock path: admin.rs, as inherent methods of the same
    // names, which a method call finds before the trait's.

    async fn status(&self, held: Option<Duration>) -> Result<Status, RedisFailure> {
        self.status(held).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        self.list(query).await
    }

    async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure> {
        self.hold(token, change, within).await
    }

    async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure> {
        self.break_holder(token, by, within).await
    }

    async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure> {
        self.pause(reason, by, length, within).await
    }

    async fn resume(&self, within: Duration) -> Result<bool, RedisFailure> {
        self.resume(within).await
    }

    async fn forget(&self, within: Duration) -> Result<u64, RedisFailure> {
        self.forget(within).await
    }
}
