//! The calls besides the lock path (acquire, renew, release): `status` and `list` (the
//! quorum's view, with each node's), the hold record, `forget`, and the operator's `break`,
//! `pause` and `resume`. Inherent methods, which `impl Lock` in `mod.rs` forwards to.

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::lock::protocol::operator;
use crate::lock::protocol::{hold, record, status};
use crate::lock::topology::shared::read_status;
use crate::lock::topology::survey::{self, Scanned};
use crate::lock::{
    BreakOutcome, FailureKind, HoldChange, HoldRecord, ListQuery, Listed, Listing, NodeStatus,
    RedisFailure, Status, Token,
};

use super::nodes::{Quorum, STRAGGLERS, unexpected};
use super::tally::{status_settled, view_with_nodes};

impl Quorum {
    pub(super) async fn status(&self, held: Option<Duration>) -> Result<Status, RedisFailure> {
        // With the lock held (`--once-per`, before the first renewal), each node within the
        // node bound of an acquire, and done once the answers in hand settle the read (a
        // quorum answered, or too many failed), then a moment more for the rest, as a
        // release: a frozen node must not spend the lease. Otherwise (`status`, the metrics)
        // every node within `--connect-timeout`, so that each one is shown.
        let bound = held.map_or(self.timeout, |ttl| Self::node_bound(ttl, self.timeout));
        let pipe = status::pipeline(self.mutex.keys());
        let mut under_way: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let pipe = &pipe;
                async move {
                    let reply = match node.query(pipe, "status", bound).await {
                        Ok(replies) => read_status(replies, node.shown()),
                        Err(e) => Err(e),
                    };
                    (i, reply)
                }
            })
            .collect();
        let mut got: Vec<Option<Result<Status, RedisFailure>>> = vec![None; self.n()];
        let (mut ok, mut failed) = (0, 0);
        while let Some((i, reply)) = under_way.next().await {
            if reply.is_ok() {
                ok += 1;
            } else {
                failed += 1;
            }
            got[i] = Some(reply);
            if held.is_some() && status_settled(ok, failed, self.n(), self.quorum) {
                break;
            }
        }
        let _ = tokio::time::timeout(STRAGGLERS.min(bound), async {
            while let Some((i, reply)) = under_way.next().await {
                got[i] = Some(reply);
            }
        })
        .await;
        drop(under_way);
        let replies: Vec<Result<Status, RedisFailure>> = self
            .nodes
            .iter()
            .zip(got)
            .map(|(node, reply)| {
                reply.unwrap_or_else(|| Err(RedisFailure::timeout(node.shown(), "status")))
            })
            .collect();
        let failures: Vec<RedisFailure> = replies.iter().filter_map(|r| r.clone().err()).collect();
        let answered = self.n() - failures.len();
        if answered < self.quorum {
            return Err(self.too_few("answered", answered, &failures, false));
        }
        let nodes: Vec<NodeStatus> = self
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeStatus {
                server: node.shown().to_owned(),
                status: reply.map_err(|e| e.to_string()),
            })
            .collect();
        Ok(view_with_nodes(nodes, self.quorum))
    }

    /// Every node scanned at once (at least a quorum must answer), and every lock found on
    /// any of them read on every node that answered: a node without the lock's keys counts
    /// as free, as in `status`. Each lock is then the quorum's view, with each node's.
    pub(super) async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        let until = survey::scan_deadline(query);
        let scans = join_all(
            self.nodes
                .iter()
                .map(|node| survey::scan(node, query, until)),
        )
        .await;
        let failures: Vec<RedisFailure> = scans
            .iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .collect();
        let answered = self.n() - failures.len();
        if answered < self.quorum {
            return Err(self.too_few("answered", answered, &failures, false));
        }
        let (names, cut) = Scanned::merge(
            scans.iter().filter_map(|r| r.as_ref().ok()),
            query.max_locks,
        );
        let reads = join_all(self.nodes.iter().zip(&scans).map(|(node, scan)| {
            let names = &names;
            async move {
                match scan {
                    Ok(_) => survey::read(node, names, query).await,
                    Err(e) => Err(e.clone()),
                }
            }
        }))
        .await;
        let locks = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let nodes: Vec<NodeStatus> = self
                    .nodes
                    .iter()
                    .zip(&reads)
                    .map(|(node, read)| NodeStatus {
                        server: node.shown().to_owned(),
                        status: match read {
                            Ok(statuses) => statuses[i].clone(),
                            Err(e) => Err(e.to_string()),
                        },
                    })
                    .collect();
                let answered = nodes.iter().filter(|n| n.status.is_ok()).count();
                let status = if answered < self.quorum {
                    Err(format!(
                        "only {answered} of {} Redlock masters answered, {} needed",
                        self.n(),
                        self.quorum
                    ))
                } else {
                    Ok(view_with_nodes(nodes, self.quorum))
                };
                Listed {
                    name: name.clone(),
                    status,
                }
            })
            .collect();
        Ok(Listing { locks, cut })
    }

    pub(super) async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure> {
        // Every node, as the lock itself: a record is where the lock was, and a majority of
        // answers decides (two majorities share a node).
        let call = hold::call(self.mutex.keys(), &token.as_str(), change);
        let replies = self.on_every_node(&call, "the hold record", within).await;
        let (mut records, mut answered, mut failures) = (Vec::new(), 0, Vec::new());
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply.map(|r| r.value) {
                Ok(value) => match hold::parse(&value) {
                    Ok(record) => {
                        answered += 1;
                        records.extend(record);
                    }
                    Err(()) => failures.push(unexpected(node, "the hold record", &value)),
                },
                Err(e) => failures.push(e),
            }
        }
        if answered < self.quorum {
            let first = failures
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            let kind = failures
                .first()
                .map_or(FailureKind::Unreachable, |f| f.kind);
            return Err(RedisFailure::of_many(
                kind,
                format!("{} of {} Redlock masters", failures.len(), self.n()),
                format!(
                    "the hold record: {answered} of {} nodes answered, {} needed; {first}",
                    self.n(),
                    self.quorum
                ),
                true,
            ));
        }
        if matches!(change, HoldChange::Begin { .. }) && records.len() < self.quorum {
            // The lock is ours on fewer than a quorum of nodes: no hold.
            return Ok(None);
        }
        // An ended record wins (the latest end); else one still held.
        records.sort_by_key(|r| (r.state.ended(), r.ended_ms));
        Ok(records.pop())
    }

    /// On every node. Broken once enough nodes broke it that the holder can no longer renew
    /// on a quorum (more than n - quorum); the fence shown is the lowest of theirs, which
    /// the next grant's is above (its quorum shares a node with them).
    pub(super) async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure> {
        let call = operator::break_holder(self.mutex.keys(), token, by);
        let replies = self.on_every_node(&call, "break", within).await;
        let (mut broke, mut other, mut fence, mut failures) = (0, 0, u64::MAX, Vec::new());
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply.map(|r| (operator::parse_break(&r.value), r.value)) {
                Ok((Some(BreakOutcome::Broken { fence: f }), _)) => {
                    broke += 1;
                    fence = fence.min(f);
                }
                Ok((Some(BreakOutcome::HeldByOther), _)) => other += 1,
                Ok((Some(BreakOutcome::Free), _)) => {}
                Ok((None, value)) => failures.push(unexpected(node, "break", &value)),
                Err(e) => failures.push(e),
            }
        }
        let blocking = self.n() - self.quorum + 1;
        if broke >= blocking {
            Ok(BreakOutcome::Broken { fence })
        } else if broke == 0 && failures.is_empty() {
            Ok(if other > 0 {
                BreakOutcome::HeldByOther
            } else {
                BreakOutcome::Free
            })
        } else {
            Err(self.too_few_of(blocking, "broke the lock", broke, &failures))
        }
    }

    /// On every node; done once enough nodes are paused that no quorum can grant (more than
    /// n - quorum). Ends at the latest of their ends.
    pub(super) async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure> {
        let call = operator::pause(self.mutex.keys(), reason, by, length);
        let replies = self.on_every_node(&call, "pause", within).await;
        let (mut paused, mut until, mut failures) = (0, 0, Vec::new());
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply.map(|r| (operator::parse_pause(&r.value), r.value)) {
                Ok((Some(u), _)) => {
                    paused += 1;
                    until = until.max(u);
                }
                Ok((None, value)) => failures.push(unexpected(node, "pause", &value)),
                Err(e) => failures.push(e),
            }
        }
        let blocking = self.n() - self.quorum + 1;
        if paused >= blocking {
            Ok(until)
        } else {
            Err(self.too_few_of(blocking, "paused the lock", paused, &failures))
        }
    }

    /// On every node; done unless so many failed that those may still be paused enough to
    /// keep a quorum from granting.
    pub(super) async fn resume(&self, within: Duration) -> Result<bool, RedisFailure> {
        let call = operator::resume(self.mutex.keys());
        let replies = self.on_every_node(&call, "resume", within).await;
        let (mut ended, mut failures) = (false, Vec::new());
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply.map(|r| (operator::parse_resume(&r.value), r.value)) {
                Ok((Some(e), _)) => ended |= e,
                Ok((None, value)) => failures.push(unexpected(node, "resume", &value)),
                Err(e) => failures.push(e),
            }
        }
        let blocking = self.n() - self.quorum + 1;
        if failures.len() >= blocking {
            let done = self.n() - failures.len();
            return Err(self.too_few_of(self.n(), "answered the resume", done, &failures));
        }
        Ok(ended)
    }

    pub(super) async fn forget(&self, within: Duration) -> Result<u64, RedisFailure> {
        // Every node: a record left on one would come back as the newest (record::newest).
        let call = record::forget(self.mutex.keys());
        let replies = self.on_every_node(&call, "forget", within).await;
        let (mut most, mut failures) = (0, Vec::new());
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply.map(|r| r.value) {
                Ok(redis::Value::Int(n)) => most = most.max(u64::try_from(n).unwrap_or(0)),
                Ok(value) => failures.push(unexpected(node, "forget", &value)),
                Err(e) => failures.push(e),
            }
        }
        match failures.first() {
            None => Ok(most),
            Some(first) => Err(RedisFailure::of_many(
                first.kind,
                format!("{} of {} Redlock masters", failures.len(), self.n()),
                format!(
                    "the record was cleared on {} of {} nodes only (every node must, or the \
                     others' copy comes back); {first}",
                    self.n() - failures.len(),
                    self.n()
                ),
                true,
            )),
        }
    }
}
