//! The mutex on a Redis Cluster.
//!
//! Every key of one lock lives in one hash slot (`protocol/keys.rs`), so one node, the master
//! serving that slot, holds the whole lock: this backend talks to that node alone, through a
//! [`Server`] (so the per-call bounds, the never-reused timed-out connection, EVALSHA then
//! EVAL, and the WAIT in the script's pipeline are those of one server). What a cluster adds
//! is finding that node, and following it when it changes:
//!
//! - **Finding the slot's master.** `CLUSTER SLOTS`, asked of the seeds (and, once learned,
//!   of every node) all at once; the first answer wins, so a frozen or dead node delays
//!   nothing. Asked at the start, and again after the master failed (a failover promotes a
//!   replica at another address).
//! - **MOVED**: the slot has another master now (a finished migration, a failover): remember
//!   it and resend there.
//! - **ASK**: the slot is being migrated and the script's declared key has left: resend to
//!   the named node behind `ASKING`, once, without remembering it; but first ask the node
//!   that said ASK whether it still has any of the keys the script needs moved
//!   (`ScriptCall::needs_moved`, one `EXISTS` each). If it has, the lock's keys are on both
//!   nodes: neither can run the script (see below), so pause and resend, until they have
//!   moved or the call's bound runs out.
//! - **TRYAGAIN** (Redis, or a script that cannot do its work with the keys in reach on the
//!   node the slot leaves), **CLUSTERDOWN** (a slot without a master, during a failover),
//!   **LOADING**: pause 10 ms, doubling up to 200 ms, and resend.
//!
//! All of it within the call's own bound, which a redirect never extends, and with at most
//! [`MAX_HOPS`] redirects in a row without a pause (two nodes that disagree end as an error,
//! not a loop).
//!
//! **While the lock's own slot is being migrated.** Every script declares one key and
//! reaches the others by name (`protocol/mod.rs`), so Redis runs it where its declared key is.
//! The node the slot leaves can read and write only the keys it still has, and create none;
//! the node it goes to cannot see what the first one still has. Hence:
//! - renewal and release decide on the lock key alone, wherever it is, and create nothing:
//!   they work throughout;
//! - an acquire runs where the lock is. On the node the slot leaves, that is a held lock
//!   (busy, or our own token taken anew); on the node it goes to, only once the first has
//!   none of the lock's other keys (ASK above), so that the fence counter, the queue and the
//!   cancelled tokens it reads are the real ones, and no key it creates exists twice (which
//!   would make the migration's `MIGRATE` fail). A free lock whose fence counter or queue is
//!   still on the old node therefore waits until they move: Redis gives no way to take it
//!   earlier without losing the fence's order or the queue's. A waiter meanwhile keeps its
//!   place where the queue is (keep_place.lua, routed by the queue);
//! - `status` reads each key where it is: the replies the slot's master answers with ASK are
//!   read again on the node named, each behind its own `ASKING`.
//!
//! Why not the redis crate's cluster client: its defaults retry 16 times with waits of
//! 1.28 s and more (a lease is often shorter); on NOSCRIPT it broadcasts SCRIPT LOAD to every
//! node and waits for all (one frozen unrelated master stalls the renewal); a plain WAIT goes
//! to every master (redis 1.8.1, as read and measured in the project's scale-out notes).
//! Here NOSCRIPT is answered with EVAL to the same node, and WAIT travels with the script to
//! the key's master, whose replicas are the ones that matter.
//!
//! Release notices: a plain SUBSCRIBE on the slot's master. A cluster forwards every PUBLISH
//! to every node, so any node would do; a missed notice costs one poll interval.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{ConnectionAddr, ConnectionInfo, Pipeline, Value};
use tokio::time::Instant;

use super::server::{
    deadline_in, first_error, is_noscript, script_reply, with_wait, ScriptReply, Server,
};
use crate::lease::Stamp;
use crate::lock::protocol::mutex::{self, AcquireReply};
use crate::lock::protocol::{status, Protocol, ScriptCall};
use crate::lock::target::{Target, Tls};
use crate::lock::{
    Attempt, Grant, Holder, HolderInfo, Lock, RedisFailure, ReleaseNotices, Released, Renewal,
    ReplicaAck, Status, Token,
};

/// Redirects (MOVED, ASK, a pause after TRYAGAIN) followed within one call at most.
const MAX_HOPS: u32 = 8;

/// The first pause after TRYAGAIN or CLUSTERDOWN, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MOST: Duration = Duration::from_millis(200);

/// As in single.rs: the least time given to taking back a write.
const UNDO_AT_LEAST: Duration = Duration::from_millis(50);

/// A node's address as the cluster names it.
type Addr = (String, u16);

pub struct Cluster {
    protocol: Protocol,
    /// The hash slot of every key of the lock.
    slot: u16,
    ack: Option<ReplicaAck>,
    /// Bound on connecting and on each reply (`--connect-timeout`).
    timeout: Duration,
    /// The seeds from `--redis`; a node learned later is reached with the first seed's
    /// settings (credentials, protocol, TLS): a cluster's nodes share them.
    seeds: Vec<ConnectionInfo>,
    tls: Tls,
    /// Every node spoken to so far, by address, so that connections last between calls.
    nodes: RefCell<HashMap<Addr, Rc<Server>>>,
    /// The master serving the slot, as last learned; `None` after it failed, to ask again.
    owner: RefCell<Option<Addr>>,
    /// Nodes named by `CLUSTER SLOTS`, asked with the seeds when the master must be found
    /// again (the seeds may be the nodes that failed).
    known: RefCell<Vec<Addr>>,
}

/// The replies to a pipeline, and the node that gave them (for messages), at its address.
struct Answer {
    replies: Vec<Value>,
    node: Rc<Server>,
    addr: Addr,
}

/// What an error reply asks the client to do.
enum Redirect {
    Moved(Addr),
    Ask(Addr),
    Pause,
}

/// How `send` treats a call and its redirects.
#[derive(Clone, Copy)]
struct Route<'a> {
    /// The keys that must have left the node a migrating slot leaves before the call goes to
    /// the node it goes to (`ScriptCall::needs_moved`).
    needs_moved: &'a [String],
    on_split: OnSplit,
    /// Give ASK replies back instead of following them: `status` reads each key where it is.
    keep_asks: bool,
    /// What to send behind ASKING instead of the call itself: the call telling the script
    /// it runs on the node the slot goes to (`ScriptCall::on_importing_node`).
    when_asking: Option<&'a Pipeline>,
}

impl Route<'_> {
    /// A call that needs none of the lock's keys moved before it may follow an ASK.
    const PLAIN: Route<'static> = Route {
        needs_moved: &[],
        on_split: OnSplit::Wait,
        keep_asks: false,
        when_asking: None,
    };

    /// `call`, with `when_asking` its pipeline as sent to the node a migrating slot goes to.
    fn of<'a>(call: &'a ScriptCall, on_split: OnSplit, when_asking: &'a Pipeline) -> Route<'a> {
        Route {
            needs_moved: call.needs_moved(),
            on_split,
            keep_asks: false,
            when_asking: Some(when_asking),
        }
    }
}

/// What `send` does when the lock's keys are on both nodes of a migration (ASK, and the
/// node that said it still has some of the keys the call needs moved).
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnSplit {
    /// Pause and send again, until the keys have moved or the call's bound runs out.
    Wait,
    /// Say so at once ([`Sent::Split`]): an acquire by a waiter keeps its place instead.
    Report,
}

/// What `send` got.
enum Sent {
    Answer(Answer),
    /// See [`OnSplit::Report`].
    Split,
}

/// Whether the node that said ASK still has some of the keys a call needs moved.
enum LeftBehind {
    Nothing,
    Some,
    /// It answered MOVED (the migration ended) or TRYAGAIN and the like.
    Redirect(Redirect),
}

impl Cluster {
    /// Find the master of `target`'s slot through the seeds, and connect to it.
    pub async fn open(
        seeds: &[ConnectionInfo],
        target: &Target,
        ack: Option<ReplicaAck>,
        within: Duration,
    ) -> Result<Cluster, RedisFailure> {
        let protocol = Protocol::new(&target.key, target.limit).map_err(|e| {
            // config.rs refuses such names before Redis is contacted; this is a backstop.
            RedisFailure::unexpected(&target.redis_shown, format!("lock name {e}"))
        })?;
        if seeds.is_empty() {
            // cluster_url.rs refuses a URL without nodes; a backstop.
            return Err(RedisFailure::unexpected(&target.redis_shown, "no nodes"));
        }
        #[cfg(feature = "tls")]
        if seeds.iter().any(crate::lock::target::is_tls) {
            // Before any node is reached, whichever it is.
            super::server::install_tls_provider();
        }
        let cluster = Cluster {
            slot: slot(&protocol.keys().lock),
            protocol,
            ack,
            timeout: target.timeout,
            seeds: seeds.to_vec(),
            tls: target.tls.clone(),
            nodes: RefCell::new(HashMap::new()),
            owner: RefCell::new(None),
            known: RefCell::new(Vec::new()),
        };
        let deadline = deadline_in(within);
        let owner = cluster.owner(deadline).await?;
        let node = cluster.node(&owner)?;
        node.connect(remaining(deadline)).await?;
        Ok(cluster)
    }

    /// The slot's master: the one last learned, or the one the nodes name now.
    async fn owner(&self, deadline: Instant) -> Result<Addr, RedisFailure> {
        if let Some(addr) = self.owner.borrow().clone() {
            return Ok(addr);
        }
        let addr = self.discover(deadline).await?;
        *self.owner.borrow_mut() = Some(addr.clone());
        Ok(addr)
    }

    /// Ask every seed and known node at once which master serves the slot. The first answer
    /// wins (a stale one is corrected by MOVED); the others are dropped unanswered.
    async fn discover(&self, deadline: Instant) -> Result<Addr, RedisFailure> {
        let mut candidates: Vec<Addr> = self.seeds.iter().filter_map(addr_of).collect();
        for addr in self.known.borrow().iter() {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        let mut asks: FuturesUnordered<_> = candidates
            .into_iter()
            .map(|addr| self.ask_slots(addr, deadline))
            .collect();
        let mut failure: Option<RedisFailure> = None;
        while let Some(result) = asks.next().await {
            match result {
                Ok((owner, nodes)) => {
                    *self.known.borrow_mut() = nodes;
                    return Ok(owner);
                }
                // A refused password or a node outside any cluster says more than a node
                // that did not answer: keep that one for the message.
                Err(e) if failure.as_ref().is_none_or(|f| f.is_transient()) => failure = Some(e),
                Err(_) => {}
            }
        }
        Err(failure.unwrap_or_else(|| RedisFailure::unreachable(&self.shown(), "no nodes")))
    }

    /// `CLUSTER SLOTS` from the node at `addr`: the slot's master, and every node named.
    async fn ask_slots(
        &self,
        addr: Addr,
        deadline: Instant,
    ) -> Result<(Addr, Vec<Addr>), RedisFailure> {
        let node = self.node(&addr)?;
        let mut pipe = redis::pipe();
        pipe.cmd("CLUSTER").arg("SLOTS").ignore_errors();
        let replies = node
            .query(&pipe, "CLUSTER SLOTS", remaining(deadline))
            .await?;
        match replies.into_iter().next() {
            Some(Value::ServerError(e)) if e.details().is_some_and(|d| d.contains("disabled")) => {
                Err(RedisFailure::unexpected(
                    node.shown(),
                    "not a cluster node (cluster support disabled); use redis:// for a \
                     single server",
                ))
            }
            Some(Value::ServerError(e)) => Err(RedisFailure::from_redis(&e.into(), node.shown())),
            Some(slots) => slot_owner(&slots, self.slot, &addr.0).ok_or_else(|| {
                RedisFailure::unreachable(
                    node.shown(),
                    format!("the cluster has no master for slot {}", self.slot),
                )
            }),
            None => Err(RedisFailure::unexpected(
                node.shown(),
                "no reply to CLUSTER SLOTS",
            )),
        }
    }

    /// The node at `addr`, made on first use; nothing is sent yet.
    fn node(&self, addr: &Addr) -> Result<Rc<Server>, RedisFailure> {
        if let Some(node) = self.nodes.borrow().get(addr) {
            return Ok(node.clone());
        }
        let template = &self.seeds[0];
        let (host, port) = addr.clone();
        let tls = crate::lock::target::is_tls(template);
        let info = template.clone().set_addr(if tls {
            ConnectionAddr::TcpTls {
                host: host.clone(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.clone(), port)
        });
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let shown = format!("{}://{host}:{port}", if tls { "rediss" } else { "redis" });
        let node = Rc::new(Server::new(&info, &self.tls, &shown)?);
        self.nodes.borrow_mut().insert(addr.clone(), node.clone());
        Ok(node)
    }

    /// The cluster as a whole, for messages: the first seed.
    fn shown(&self) -> String {
        self.seeds
            .first()
            .and_then(addr_of)
            .map_or_else(String::new, |(h, p)| format!("cluster node {h}:{p}"))
    }

    /// Send `pipe` to the slot's master by `deadline`, following redirects as `route` says;
    /// the replies may still hold error replies other than redirects.
    async fn send(
        &self,
        pipe: &Pipeline,
        what: &str,
        deadline: Instant,
        route: Route<'_>,
    ) -> Result<Sent, RedisFailure> {
        let mut asking: Option<Addr> = None;
        let mut pause = RETRY_FIRST;
        let mut hops = 0;
        // The owner was remembered from an earlier call: if it refuses the connection, it
        // may just have failed over, so it is asked for again once.
        let mut stale = self.owner.borrow().is_some();
        loop {
            let (addr, ask) = match asking.take() {
                Some(addr) => (addr, true),
                None => (self.owner(deadline).await?, false),
            };
            let node = self.node(&addr)?;
            let sent = if ask {
                behind_asking(route.when_asking.unwrap_or(pipe))
            } else {
                pipe.clone()
            };
            let mut replies = match node.query(&sent, what, remaining(deadline)).await {
                Ok(replies) => replies,
                Err(e) => {
                    if !ask && e.is_transient() {
                        self.forget_owner(&addr);
                        if stale && !e.may_have_written() {
                            stale = false;
                            continue;
                        }
                    }
                    return Err(e);
                }
            };
            stale = false;
            if ask && !replies.is_empty() {
                replies.remove(0);
            }
            let Some((mut redirect, err)) = redirect(&replies, &addr.0, route.keep_asks) else {
                return Ok(Sent::Answer(Answer {
                    replies,
                    node,
                    addr,
                }));
            };
            // Every redirect is an error reply in place of the call's: nothing was written.
            let mut give_up = RedisFailure::from_redis(&err.into(), node.shown()).not_sent();
            if let Redirect::Ask(to) = redirect {
                redirect = match self
                    .left_behind(&node, &addr, route.needs_moved, what, deadline)
                    .await?
                {
                    LeftBehind::Nothing => Redirect::Ask(to),
                    LeftBehind::Redirect(other) => other,
                    LeftBehind::Some if route.on_split == OnSplit::Report => {
                        return Ok(Sent::Split)
                    }
                    LeftBehind::Some => {
                        give_up = self.split_failure(node.shown());
                        Redirect::Pause
                    }
                };
            }
            hops += 1;
            if hops > MAX_HOPS {
                return Err(give_up);
            }
            match redirect {
                Redirect::Moved(to) => {
                    *self.owner.borrow_mut() = Some(to.clone());
                    self.learn(to);
                }
                Redirect::Ask(to) => asking = Some(to),
                Redirect::Pause => {
                    if Instant::now() + pause >= deadline {
                        return Err(give_up);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MOST);
                    // A pause bounds the loop by the deadline; the hops bound only redirects
                    // that follow one another at once.
                    hops = 0;
                }
            }
        }
    }

    /// After `node` (at `addr`, the master of the migrating slot) answered ASK for a call:
    /// whether it still has any of `keys` (one `EXISTS` each: 1 if it has the key, ASK if
    /// not). It only loses keys while the slot migrates, never gains one (a key it does not
    /// have is created on the other node), so what it no longer has stays gone.
    async fn left_behind(
        &self,
        node: &Server,
        addr: &Addr,
        keys: &[String],
        what: &str,
        deadline: Instant,
    ) -> Result<LeftBehind, RedisFailure> {
        if keys.is_empty() {
            return Ok(LeftBehind::Nothing);
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("EXISTS").arg(key);
        }
        pipe.ignore_errors();
        let replies = match node.query(&pipe, what, remaining(deadline)).await {
            Ok(replies) => replies,
            Err(e) => {
                if e.is_transient() {
                    self.forget_owner(addr);
                }
                return Err(e);
            }
        };
        let mut found = LeftBehind::Nothing;
        for reply in &replies {
            match reply {
                Value::Int(0) => {}
                Value::Int(_) => found = LeftBehind::Some,
                Value::ServerError(err) => match redirect_of(err, &addr.0) {
                    Some(Redirect::Ask(_)) => {}
                    Some(other) => return Ok(LeftBehind::Redirect(other)),
                    None => {
                        return Err(RedisFailure::from_redis(&err.clone().into(), node.shown()))
                    }
                },
                other => return Err(Self::unexpected(node, what, other)),
            }
        }
        Ok(found)
    }

    /// Why a call gave up while the lock's keys were on both nodes of a migration.
    fn split_failure(&self, shown: &str) -> RedisFailure {
        RedisFailure::unreachable(
            shown,
            format!(
                "slot {} is being migrated and the keys of the lock {} have not all moved yet",
                self.slot,
                self.protocol.keys().lock
            ),
        )
    }

    /// The status pipeline, each reply read where its key is: on the slot's master, and the
    /// keys it answers ASK for (they left it: a migration) on the node named, each command
    /// behind its own `ASKING` (which lasts one command). Reading a key on the node the slot
    /// goes to after its old node said it is not there reads it where it is: the old node
    /// never gets a key back while the slot migrates.
    async fn read_status(&self, deadline: Instant) -> Result<Answer, RedisFailure> {
        let pipe = self.protocol.status();
        let route = Route {
            keep_asks: true,
            ..Route::PLAIN
        };
        let mut pause = RETRY_FIRST;
        loop {
            let Sent::Answer(mut answer) = self.send(&pipe, "status", deadline, route).await?
            else {
                // OnSplit::Wait never gives back a split.
                return Err(self.split_failure(&self.shown()));
            };
            let asked: Vec<(usize, Addr)> = answer
                .replies
                .iter()
                .enumerate()
                .filter_map(|(i, reply)| match reply {
                    Value::ServerError(err) => match redirect_of(err, &answer.addr.0) {
                        Some(Redirect::Ask(to)) => Some((i, to)),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            let Some((_, to)) = asked.first().cloned() else {
                return Ok(answer);
            };
            let commands: Vec<&redis::Cmd> = pipe.cmd_iter().collect();
            let mut there = redis::pipe();
            for (i, _) in &asked {
                there.cmd("ASKING").add_command(commands[*i].clone());
            }
            there.ignore_errors();
            let target = self.node(&to)?;
            let replies = target.query(&there, "status", remaining(deadline)).await?;
            // Every other reply is ASKING's OK.
            let replies: Vec<Value> = replies.into_iter().skip(1).step_by(2).collect();
            if replies.len() == asked.len() && redirect(&replies, &to.0, false).is_none() {
                for ((i, _), reply) in asked.iter().zip(replies) {
                    answer.replies[*i] = reply;
                }
                return Ok(answer);
            }
            // The migration ended (or was undone) between the two reads: read again.
            if Instant::now() + pause >= deadline {
                return Err(RedisFailure::timeout(target.shown(), "status"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MOST);
        }
    }

    /// Forget `addr` as the slot's master, if it still is the one remembered.
    fn forget_owner(&self, addr: &Addr) {
        let mut owner = self.owner.borrow_mut();
        if owner.as_ref() == Some(addr) {
            *owner = None;
        }
    }

    fn learn(&self, addr: Addr) {
        let mut known = self.known.borrow_mut();
        if !known.contains(&addr) {
            known.push(addr);
        }
    }

    /// Run `call` on the slot's master (EVALSHA, then EVAL on NOSCRIPT, to that same node:
    /// never a SCRIPT LOAD to all), with its WAIT for `ack` in the same pipeline.
    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        deadline: Instant,
    ) -> Result<(ScriptReply, Rc<Server>), RedisFailure> {
        let replied = self
            .script_or_split(call, ack, what, deadline, OnSplit::Wait)
            .await?;
        // OnSplit::Wait never gives back a split.
        replied.ok_or_else(|| self.split_failure(&self.shown()))
    }

    /// `script`, or `None` when the lock's keys are on both nodes of a migration and
    /// `on_split` says to tell.
    async fn script_or_split(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        deadline: Instant,
        on_split: OnSplit,
    ) -> Result<Option<(ScriptReply, Rc<Server>)>, RedisFailure> {
        let importing = call.on_importing_node();
        let asking = with_wait(importing.evalsha(), ack);
        let mut sent = self
            .send(
                &with_wait(call.evalsha(), ack),
                what,
                deadline,
                Route::of(call, on_split, &asking),
            )
            .await?;
        if matches!(&sent, Sent::Answer(answer) if is_noscript(answer.replies.first())) {
            let asking = with_wait(importing.eval(), ack);
            sent = self
                .send(
                    &with_wait(call.eval(), ack),
                    what,
                    deadline,
                    Route::of(call, on_split, &asking),
                )
                .await?;
        }
        let Sent::Answer(answer) = sent else {
            return Ok(None);
        };
        let reply = script_reply(answer.replies, ack, answer.node.shown())?;
        Ok(Some((reply, answer.node)))
    }

    /// A waiter that an acquire could not queue (a migration of the lock's slot, see the
    /// module's notes) keeps its place where the queue is. `busy`: what the acquire said of
    /// the holder, if it got that far.
    async fn keep_place(
        &self,
        holder: &HolderInfo,
        busy: Option<Holder>,
        deadline: Instant,
    ) -> Result<Attempt, RedisFailure> {
        let Some(waiter) = &holder.waiter else {
            // Only waiters are sent here.
            return Ok(Attempt::Busy(busy.unwrap_or_default()));
        };
        let call = self.protocol.keep_place(waiter);
        let (reply, node) = self.script(&call, None, "acquire", deadline).await?;
        let Some(AcquireReply::Busy(kept)) = mutex::parse_acquire(&reply.value) else {
            return Err(Self::unexpected(&node, "acquire", &reply.value));
        };
        Ok(Attempt::Busy(match busy {
            Some(busy) => Holder {
                queued: kept.queued,
                place: kept.place,
                ..busy
            },
            None => kept,
        }))
    }

    /// Take back a write that may have landed, as single.rs does: EVAL of cancel.lua, at
    /// once, so that it takes effect even if its own reply is lost. Best effort.
    async fn undo(&self, token: &Token, within: Duration) {
        let call = self.protocol.cancel(&token.as_str());
        let mut pipe = redis::pipe();
        pipe.add_command(call.eval()).ignore_errors();
        // cancel.lua creates nothing: the same call goes behind ASKING.
        let route = Route::of(&call, OnSplit::Wait, &pipe);
        let _ = self
            .send(&pipe, "release", deadline_in(within), route)
            .await;
    }

    fn check_acks(&self, acked: Option<u32>, node: &Server) -> Result<(), RedisFailure> {
        RedisFailure::check_acks(node.shown(), self.name(), self.ack, acked)
    }

    fn unexpected(node: &Server, what: &str, reply: &Value) -> RedisFailure {
        RedisFailure::unexpected_reply(node.shown(), what, reply)
    }
}

impl Lock for Cluster {
    fn name(&self) -> &str {
        &self.protocol.keys().lock
    }

    async fn try_acquire(
        &self,
        token: &Token,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure> {
        let counted_from = Stamp::now();
        let deadline = counted_from.checked_add(within);
        let call = self.protocol.acquire(&token.as_str(), ttl, holder);
        // As in single.rs: a quarter of the bound is kept for taking the write back.
        let for_script = within - within / 4 + Server::wait_time(self.ack);
        let result = async {
            let for_script = deadline_in(for_script);
            let waits = holder.waiter.is_some();
            let on_split = if waits {
                OnSplit::Report
            } else {
                OnSplit::Wait
            };
            let Some((reply, node)) = self
                .script_or_split(&call, self.ack, "acquire", for_script, on_split)
                .await?
            else {
                return self.keep_place(holder, None, for_script).await;
            };
            match mutex::parse_acquire(&reply.value) {
                Some(AcquireReply::Granted { fence }) => {
                    self.check_acks(reply.acked, &node)?;
                    Ok(Attempt::Granted(Grant {
                        fence,
                        counted_from,
                    }))
                }
                // Not queued: a waiter always is, unless the queue is out of the script's
                // reach (a migration).
                Some(AcquireReply::Busy(busy)) if waits && busy.place == 0 => {
                    self.keep_place(holder, Some(busy), for_script).await
                }
                Some(AcquireReply::Busy(busy)) => Ok(Attempt::Busy(busy)),
                None => Err(Self::unexpected(&node, "acquire", &reply.value)),
            }
        }
        .await;
        if let Err(e) = &result {
            if e.may_have_written() {
                let left = deadline.map_or(Duration::ZERO, |d| Stamp::now().until(d));
                self.undo(token, left.max(UNDO_AT_LEAST)).await;
            }
        }
        result
    }

    async fn renew(
        &self,
        token: &Token,
        ttl: Duration,
        within: Duration,
    ) -> Result<Renewal, RedisFailure> {
        let counted_from = Stamp::now();
        let call = self.protocol.renew(&token.as_str(), ttl);
        let (reply, node) = self
            .script(&call, self.ack, "the renewal", deadline_in(within))
            .await?;
        match mutex::parse_renew(&reply.value) {
            Some(true) => {
                self.check_acks(reply.acked, &node)?;
                Ok(Renewal::Renewed { counted_from })
            }
            Some(false) => Ok(Renewal::Lost),
            None => Err(Self::unexpected(&node, "the renewal", &reply.value)),
        }
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        let call = self.protocol.release(&token.as_str(), keep);
        let (reply, node) = self
            .script(&call, None, "release", deadline_in(within))
            .await?;
        mutex::parse_release(&reply.value)
            .ok_or_else(|| Self::unexpected(&node, "release", &reply.value))
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        let deadline = deadline_in(within);
        let owner = self.owner(deadline).await.ok()?;
        let node = self.node(&owner).ok()?;
        node.subscribe(&self.protocol.keys().released, remaining(deadline))
            .await
    }

    async fn leave_queue(&self, holder: &HolderInfo, within: Duration) {
        if let Some(waiter) = &holder.waiter {
            let call = self.protocol.leave(&waiter.id);
            let _ = self
                .script(&call, None, "leaving the queue", deadline_in(within))
                .await;
        }
    }

    async fn status(&self) -> Result<Status, RedisFailure> {
        let answer = self.read_status(deadline_in(self.timeout)).await?;
        let node = &answer.node;
        match status::parse(&answer.replies) {
            Ok(Some(status)) => Ok(status),
            Ok(None) => Err(Self::unexpected(
                node,
                "status",
                &Value::Array(answer.replies.clone()),
            )),
            Err(error) => Err(first_error(std::slice::from_ref(error), node.shown())
                .unwrap_or_else(|| Self::unexpected(node, "status", error))),
        }
    }
}

/// Time left until `deadline`.
fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `pipe` with `ASKING` in front: the node importing the slot then serves the next command.
fn behind_asking(pipe: &Pipeline) -> Pipeline {
    let mut asking = redis::pipe();
    asking.cmd("ASKING");
    for cmd in pipe.cmd_iter() {
        asking.add_command(cmd.clone());
    }
    asking.ignore_errors();
    asking
}

/// The first redirect among `replies`, with the error reply that said it; ASK replies are
/// skipped with `keep_asks`.
fn redirect(
    replies: &[Value],
    from: &str,
    keep_asks: bool,
) -> Option<(Redirect, redis::ServerError)> {
    replies.iter().find_map(|reply| {
        let Value::ServerError(err) = reply else {
            return None;
        };
        match redirect_of(err, from)? {
            Redirect::Ask(_) if keep_asks => None,
            redirect => Some((redirect, err.clone())),
        }
    })
}

/// What the error reply `err` of a node on `from` asks for, if it is a redirect. A node named
/// without a host (`MOVED 12 :7001`, a node that does not know its address) is on `from`.
fn redirect_of(err: &redis::ServerError, from: &str) -> Option<Redirect> {
    let target = || {
        let to = err.details()?.split_whitespace().nth(1)?;
        let (host, port) = to.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { from } else { host };
        Some((host.to_owned(), port.parse().ok()?))
    };
    Some(match err.code() {
        "MOVED" => Redirect::Moved(target()?),
        "ASK" => Redirect::Ask(target()?),
        "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" => Redirect::Pause,
        _ => return None,
    })
}

/// From a `CLUSTER SLOTS` reply asked of a node on `from`: the master of `slot`, and every
/// node named (masters and replicas).
fn slot_owner(reply: &Value, slot: u16, from: &str) -> Option<(Addr, Vec<Addr>)> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let node = |v: &Value| -> Option<Addr> {
        let Value::Array(fields) = v else { return None };
        let host = match fields.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        // "" is the node asked; "?" (Redis 7) an endpoint the node does not know.
        let host = match host.as_str() {
            "" => from.to_owned(),
            "?" => return None,
            _ => host,
        };
        match fields.get(1)? {
            Value::Int(port) => Some((host, u16::try_from(*port).ok()?)),
            _ => None,
        }
    };
    let mut owner = None;
    let mut nodes = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last))) = (fields.first(), fields.get(1))
        else {
            continue;
        };
        let served = (*first..=*last).contains(&i64::from(slot));
        // The first node of a range is its master. Counted before unusable entries are
        // dropped: a master listed as `?` (no address for this client) must not make its
        // replica look like the master.
        for (i, field) in fields.iter().skip(2).enumerate() {
            let Some(addr) = node(field) else {
                continue;
            };
            if served && i == 0 {
                owner = Some(addr.clone());
            }
            if !nodes.contains(&addr) {
                nodes.push(addr);
            }
        }
    }
    Some((owner?, nodes))
}

fn addr_of(info: &ConnectionInfo) -> Option<Addr> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between
/// the first `{` and the next `}`, if not empty) or of the whole key, modulo 16384.
pub fn slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let hashed = key
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&c| c == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16(hashed) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::protocol::keys::Keys;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // The check value of CRC16/XMODEM, and slots as CLUSTER KEYSLOT gives them.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("{}x"), slot("{}x"));
        assert_ne!(slot("{}x"), slot("x"));
        assert_eq!(slot("a{}{b}"), crc16(b"a{}{b}") % 16384);
    }

    #[test]
    fn every_key_of_a_lock_is_in_its_slot() {
        for name in [
            "redlock:job",
            "redlock:{tag}:job",
            "x{y}z",
            "redlock:{a}{b}",
        ] {
            let k = Keys::new(name).unwrap();
            let s = slot(&k.lock);
            for key in [&k.fence, &k.holder, &k.released, &k.cancelled] {
                assert_eq!(slot(key), s, "{key} of {name}");
            }
        }
    }

    fn error_reply(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn reads_redirects() {
        let moved = [Value::Okay, error_reply("MOVED 3999 10.0.0.2:7001")];
        let Some((Redirect::Moved(to), _)) = redirect(&moved, "h", false) else {
            panic!("no MOVED");
        };
        assert_eq!(to, ("10.0.0.2".to_owned(), 7001));
        let Some((Redirect::Ask(to), _)) = redirect(&[error_reply("ASK 1 :7002")], "h", false)
        else {
            panic!("no ASK");
        };
        assert_eq!(to, ("h".to_owned(), 7002));
        assert!(matches!(
            redirect(
                &[error_reply(
                    "TRYAGAIN Multiple keys request during rehashing of slot"
                )],
                "h",
                false
            ),
            Some((Redirect::Pause, _))
        ));
        assert!(redirect(&[error_reply("NOSCRIPT No matching script")], "h", false).is_none());
        assert!(redirect(&[Value::Int(1)], "h", false).is_none());
        // `status` keeps the ASK replies (to read those keys where they are), not the rest.
        let mixed = [error_reply("ASK 1 :7002"), error_reply("TRYAGAIN x")];
        assert!(matches!(
            redirect(&mixed, "h", true),
            Some((Redirect::Pause, _))
        ));
        assert!(redirect(&mixed[..1], "h", true).is_none());
    }

    #[test]
    fn reads_cluster_slots() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let range = |a, b, nodes: Vec<(&str, i64)>| {
            let mut v = vec![Value::Int(a), Value::Int(b)];
            for (h, p) in nodes {
                v.push(Value::Array(vec![bulk(h), Value::Int(p), bulk("id")]));
            }
            Value::Array(v)
        };
        let reply = Value::Array(vec![
            range(0, 5460, vec![("10.0.0.1", 7000), ("10.0.0.4", 7003)]),
            range(5461, 16383, vec![("", 7001)]),
        ]);
        let (owner, nodes) = slot_owner(&reply, 12182, "10.0.0.9").unwrap();
        assert_eq!(owner, ("10.0.0.9".to_owned(), 7001));
        assert_eq!(nodes.len(), 3);
        assert_eq!(slot_owner(&reply, 5, "h").unwrap().0 .1, 7000);
        assert!(slot_owner(&Value::Array(vec![range(0, 1, vec![])]), 5, "h").is_none());
    }
}
