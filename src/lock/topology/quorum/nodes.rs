//! The N masters of a Redlock lock: [`Quorum`], connected by [`Quorum::open`], and how a
//! quorum not reached (or barely reached) is told.

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::lock::protocol::ScriptCall;
use crate::lock::protocol::mutex::Mutex;
use crate::lock::target::{QuorumNodes, Target};
use crate::lock::topology::server::{ScriptReply, Server};
use crate::lock::topology::shared::named;
use crate::lock::{FailureKind, RedisFailure};

/// The least bound on one node's acquire or write-back: a round trip on a real network with
/// room to spare, even for short ttls.
pub(super) const NODE_BOUND_FLOOR: Duration = Duration::from_millis(100);

/// How long a step (the start, a busy attempt, a release, the subscription to release
/// notices) still waits for the nodes that have not answered once the others' answers are
/// enough: a round trip with room to spare, as `NODE_BOUND_FLOOR`.
pub(super) const STRAGGLERS: Duration = NODE_BOUND_FLOOR;

pub struct Quorum {
    pub(super) nodes: Vec<Server>,
    /// How many nodes must agree.
    pub(super) quorum: usize,
    pub(super) mutex: Mutex,
    /// Bound on connecting and on each status reply (`--connect-timeout`).
    pub(super) timeout: Duration,
}

impl Quorum {
    /// Connect to the masters of `nodes`; at least a quorum must answer within `within`.
    pub async fn open(
        nodes: &QuorumNodes,
        target: &Target,
        within: Duration,
    ) -> Result<Quorum, RedisFailure> {
        let mutex = named(target, Mutex::new(&target.key))?;
        let servers = nodes
            .nodes
            .iter()
            .map(|(info, shown)| Server::new(info, &target.tls, shown))
            .collect::<Result<Vec<_>, _>>()?;
        let quorum = Quorum {
            nodes: servers,
            quorum: nodes.quorum,
            mutex,
            timeout: target.timeout,
        };
        // Ready as soon as a quorum has answered (connected and said who it is), and the rest
        // had a moment more: a node that accepts connections and never answers must not take
        // the whole --connect-timeout (and with it the first attempt's time). The others
        // connect on their first call.
        let mut pending: FuturesUnordered<_> = quorum
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| async move { (i, run_id(n, within).await) })
            .collect();
        let mut up = Vec::new();
        let mut failures = Vec::new();
        while let Some((i, result)) = pending.next().await {
            match result {
                Ok(id) => up.push((i, id)),
                Err(e) => failures.push(e),
            }
            if up.len() >= quorum.quorum || failures.len() > quorum.n() - quorum.quorum {
                break;
            }
        }
        let _ = tokio::time::timeout(STRAGGLERS.min(within), async {
            while let Some((i, result)) = pending.next().await {
                match result {
                    Ok(id) => up.push((i, id)),
                    Err(e) => failures.push(e),
                }
            }
        })
        .await;
        drop(pending);
        if up.len() < quorum.quorum {
            return Err(quorum.too_few("answered", up.len(), &failures, false));
        }
        quorum.refuse_one_server_twice(&up)?;
        Ok(quorum)
    }

    /// One server given under two names (`localhost` and `127.0.0.1`, two addresses of one
    /// host) would count twice towards the quorum. Each server has a run id of its own
    /// (`INFO server`); nodes that cannot tell (an ACL without INFO) are not checked, nor
    /// nodes that had not answered when the run started.
    fn refuse_one_server_twice(&self, up: &[(usize, Option<String>)]) -> Result<(), RedisFailure> {
        let ids: Vec<(usize, &String)> = up
            .iter()
            .filter_map(|(i, id)| Some((*i, id.as_ref()?)))
            .collect();
        for (k, (i, id)) in ids.iter().enumerate() {
            if let Some((j, _)) = ids[..k].iter().find(|(_, other)| other == id) {
                return Err(RedisFailure::unexpected(
                    self.nodes[*i].shown(),
                    format!(
                        "the same server as --redis {} (one run id): Redlock needs independent \
                         masters",
                        self.nodes[*j].shown()
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn n(&self) -> usize {
        self.nodes.len()
    }

    /// `call` on every node at once, each within `within`; the replies in the nodes' order.
    pub(super) async fn on_every_node(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Vec<Result<ScriptReply, RedisFailure>> {
        join_all(
            self.nodes
                .iter()
                .map(|node| node.script(call, None, what, within)),
        )
        .await
    }

    /// A quorum not reached: `got` nodes did `what`. The kind is the nodes' own when they
    /// agree on one that retrying cannot fix (a wrong password), else unreachable (worth
    /// another try).
    pub(super) fn too_few(
        &self,
        what: &str,
        got: usize,
        failures: &[RedisFailure],
        maybe_sent: bool,
    ) -> RedisFailure {
        self.too_few_for(self.quorum, what, got, failures, maybe_sent)
    }

    /// Like `too_few`, for an operator's command that needed `needed` nodes.
    pub(super) fn too_few_of(
        &self,
        needed: usize,
        what: &str,
        got: usize,
        failures: &[RedisFailure],
    ) -> RedisFailure {
        self.too_few_for(needed, what, got, failures, true)
    }

    pub(super) fn too_few_for(
        &self,
        needed: usize,
        what: &str,
        got: usize,
        failures: &[RedisFailure],
        maybe_sent: bool,
    ) -> RedisFailure {
        let kind = failures
            .iter()
            .map(|f| f.kind)
            .find(|k| *k != FailureKind::Unreachable)
            .unwrap_or(FailureKind::Unreachable);
        let first = failures
            .first()
            .map(|f| format!("; {f}"))
            .unwrap_or_default();
        RedisFailure::of_many(
            kind,
            format!("{} of {} Redlock masters", self.n() - got, self.n()),
            format!("only {got} of {} {what}, {needed} needed{first}", self.n()),
            maybe_sent,
        )
    }

    /// A grant on `granted` nodes while `failures` did not answer: says which and what they
    /// answered, and how close the quorum came to failing (a node that is busy, holding a
    /// stale key, is not down and not named).
    pub(super) fn degraded(&self, granted: usize, failures: &[RedisFailure]) -> Option<String> {
        let first = failures.first()?;
        let others = match failures.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        Some(format!(
            "a Redlock master did not take part{others}: {first}; the lock was taken on {granted} \
             of {} masters ({} needed)",
            self.n(),
            self.quorum
        ))
    }

    /// Each node's bound for one acquire or write-back: short, so that a frozen node costs
    /// little of the lease, and together they leave a quarter of `within` for the take-back.
    pub(super) fn node_bound(ttl: Duration, within: Duration) -> Duration {
        (ttl / 20).max(NODE_BOUND_FLOOR).min(within * 3 / 8)
    }
}

pub(super) fn unexpected(node: &Server, what: &str, reply: &redis::Value) -> RedisFailure {
    RedisFailure::unexpected_reply(node.shown(), what, reply)
}

/// Connect to `node` and ask for its run id (`INFO server`), all within `within`; `None` when
/// it answered but cannot tell (an ACL without INFO).
async fn run_id(node: &Server, within: Duration) -> Result<Option<String>, RedisFailure> {
    let mut info = redis::pipe();
    info.cmd("INFO").arg("server");
    info.ignore_errors();
    let replies = node.query(&info, "INFO", within).await?;
    let text = match replies.first() {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(redis::Value::VerbatimString { text, .. }) => text.clone(),
        _ => return Ok(None),
    };
    Ok(text
        .lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_bounds_are_short_but_not_too_short() {
        let s = Duration::from_secs;
        assert_eq!(Quorum::node_bound(s(30), s(5)), Duration::from_millis(1500));
        assert_eq!(Quorum::node_bound(s(1), s(5)), NODE_BOUND_FLOOR);
        assert_eq!(Quorum::node_bound(s(30), s(1)), Duration::from_millis(375));
    }
}
