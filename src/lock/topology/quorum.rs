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

use std::time::Duration;

use futures_util::future::{self, join_all};
use futures_util::stream::{self, FuturesUnordered, StreamExt};

use super::server::{ScriptReply, Server};
use super::shared::{UNDO_AT_LEAST, named, read_status};
use super::survey::{self, Scanned};
use crate::lease::{self, Stamp};
use crate::lock::protocol::mutex::{self, AcquireReply, Mutex, RenewReply};
use crate::lock::protocol::operator;
use crate::lock::protocol::{ScriptCall, hold, record, status};
use crate::lock::target::{QuorumNodes, Target};
use crate::lock::{
    Attempt, BreakOutcome, Confirmed, FailureKind, Finished, Grant, HoldChange, HoldRecord, Holder,
    HolderInfo, ListQuery, Listed, Listing, Lock, NodeStatus, RedisFailure, ReleaseNotices,
    Released, Renewal, Status, Token,
};

/// The least bound on one node's acquire or write-back: a round trip on a real network with
/// room to spare, even for short ttls.
const NODE_BOUND_FLOOR: Duration = Duration::from_millis(100);

/// How long a step (the start, a busy attempt, a release, the subscription to release
/// notices) still waits for the nodes that have not answered once the others' answers are
/// enough: a round trip with room to spare, as `NODE_BOUND_FLOOR`.
const STRAGGLERS: Duration = NODE_BOUND_FLOOR;

pub struct Quorum {
    nodes: Vec<Server>,
    /// How many nodes must agree.
    quorum: usize,
    mutex: Mutex,
    /// Bound on connecting and on each status reply (`--connect-timeout`).
    timeout: Duration,
}

/// What one node answered to an acquire.
enum Vote {
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
    fn may_hold_write(&self) -> bool {
        match self {
            Vote::Granted(_) => true,
            Vote::Failed(e) => e.may_have_written(),
            Vote::Unanswered => true,
            Vote::Busy(_) | Vote::Cancelled => false,
        }
    }
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

    fn n(&self) -> usize {
        self.nodes.len()
    }

    /// A quorum not reached: `got` nodes did `what`. The kind is the nodes' own when they
    /// agree on one that retrying cannot fix (a wrong password), else unreachable (worth
    /// another try).
    fn too_few(
        &self,
        what: &str,
        got: usize,
        failures: &[RedisFailure],
        maybe_sent: bool,
    ) -> RedisFailure {
        self.too_few_for(self.quorum, what, got, failures, maybe_sent)
    }

    /// Like `too_few`, for an operator's command that needed `needed` nodes.
    fn too_few_of(
        &self,
        needed: usize,
        what: &str,
        got: usize,
        failures: &[RedisFailure],
    ) -> RedisFailure {
        self.too_few_for(needed, what, got, failures, true)
    }

    fn too_few_for(
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
    fn degraded(&self, granted: usize, failures: &[RedisFailure]) -> Option<String> {
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
    fn node_bound(ttl: Duration, within: Duration) -> Duration {
        (ttl / 20).max(NODE_BOUND_FLOOR).min(within * 3 / 8)
    }

    async fn vote(&self, node: &Server, call: &ScriptCall, bound: Duration) -> Vote {
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
    async fn votes<'a>(
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
    async fn write_back(
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

    /// Take back every write this attempt may have left. Where a node granted and the
    /// attempt ends busy, a compare-and-delete release does (the reply is in hand, nothing is
    /// under way); everywhere else, and always when `cancel`, the cancel script, so that a
    /// request still on its way cannot land later. Each node's take-back is sent, and awaited
    /// at most `each` (a frozen node must not hold up the answer): what does not land expires
    /// within the ttl, and a late acquire behind a cancel that did land is refused.
    async fn undo(&self, token: &Token, votes: &[Vote], cancel: bool, each: Duration) {
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
                match vote {
                    Vote::Granted(_) if !cancel => {
                        let _ = node.script(release, None, "release", each).await;
                    }
                    // Its acquire is still on the connection in use (a busy attempt did not
                    // wait for it): the cancel goes apart, so that it can arrive first and
                    // the acquire, should it still land, finds its token cancelled.
                    Vote::Unanswered => {
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
    fn majority_holder(votes: &[Vote]) -> Holder {
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

fn unexpected(node: &Server, what: &str, reply: &redis::Value) -> RedisFailure {
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

/// The votes in hand (`None`: not in yet) settle the attempt as busy, whatever the rest say:
/// fewer than `quorum` nodes can still grant, and at least `quorum` answered (so it is not a
/// failure to reach the nodes either).
fn busy_settled(votes: &[Option<Vote>], quorum: usize) -> bool {
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
fn status_settled(answered: usize, failed: usize, n: usize, quorum: usize) -> bool {
    answered >= quorum || n.saturating_sub(failed) < quorum
}

/// How the nodes answered a release so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ReleaseTally {
    released: usize,
    /// The lock held another token.
    other: usize,
    /// The lock was gone.
    gone: usize,
    /// No answer (a failure, or not awaited).
    unanswered: usize,
}

impl ReleaseTally {
    /// Count `node`'s reply; a failure is kept in `failures` too.
    fn count(
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
    fn outcome(&self, quorum: usize) -> Option<Released> {
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
    fn settled(&self, quorum: usize, pending: usize) -> bool {
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
            future::join(self.undo(token, &votes, false, take_back()), under_way).await;
            return Ok(Attempt::Busy(Self::majority_holder(&votes)));
        } else {
            let wrote = votes.iter().any(Vote::may_hold_write);
            self.too_few("answered", answered, &failures, wrote)
        };
        // Every vote was awaited (only a busy attempt leaves some).
        drop(under_way);
        self.undo(token, &votes, true, take_back()).await;
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
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "the renewal", within)),
        )
        .await;
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

    async fn status(&self, held: Option<Duration>) -> Result<Status, RedisFailure> {
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
    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
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

    async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure> {
        // Every node, as the lock itself: a record is where the lock was, and a majority of
        // answers decides (two majorities share a node).
        let call = hold::call(self.mutex.keys(), &token.as_str(), change);
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "the hold record", within)),
        )
        .await;
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
    async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure> {
        let call = operator::break_holder(self.mutex.keys(), token, by);
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "break", within)),
        )
        .await;
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
    async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure> {
        let call = operator::pause(self.mutex.keys(), reason, by, length);
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "pause", within)),
        )
        .await;
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
    async fn resume(&self, within: Duration) -> Result<bool, RedisFailure> {
        let call = operator::resume(self.mutex.keys());
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "resume", within)),
        )
        .await;
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

    async fn forget(&self, within: Duration) -> Result<u64, RedisFailure> {
        // Every node: a record left on one would come back as the newest (record::newest).
        let call = record::forget(self.mutex.keys());
        let replies = join_all(
            self.nodes
                .iter()
                .map(|node| node.script(&call, None, "forget", within)),
        )
        .await;
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

/// The quorum's view of `nodes` with each node's status and the newest run record among
/// them: what `status` and `list` show of a lock on Redlock.
fn view_with_nodes(nodes: Vec<NodeStatus>, quorum: usize) -> Status {
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
pub fn quorum_view(nodes: &[NodeStatus], quorum: usize) -> Status {
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

    #[test]
    fn node_bounds_are_short_but_not_too_short() {
        let s = Duration::from_secs;
        assert_eq!(Quorum::node_bound(s(30), s(5)), Duration::from_millis(1500));
        assert_eq!(Quorum::node_bound(s(1), s(5)), NODE_BOUND_FLOOR);
        assert_eq!(Quorum::node_bound(s(30), s(1)), Duration::from_millis(375));
    }
}
