//! The cluster route: the master of the lock's slot in a Redis Cluster, found, followed, and
//! sorted out from a migration of that slot.
//!
//! Every key of one lock lives in one hash slot (`protocol/keys.rs`), so one node, the master
//! serving that slot, holds the whole lock: this route talks to that node alone, through a
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
//! `MAX_HOPS` redirects in a row without a pause (two nodes that disagree end as an error,
//! not a loop).
//!
//! **While the lock's own slot is being migrated.** How Redis serves a migrating slot, and
//! why every script declares one key, is told in `protocol/mod.rs`; what it means for the
//! routing:
//! - renewal and release decide on the lock key alone, wherever it is, and create nothing:
//!   they work throughout;
//! - an acquire runs where the lock is. On the node the slot leaves, that is a held lock
//!   (busy, or our own token taken anew); on the node it goes to, only once the first has
//!   none of the lock's other keys (ASK above), so that the fence counter, the queue and the
//!   cancelled tokens it reads are the real ones, and no key it creates exists on both. A
//!   free lock whose fence counter or queue is still on the old node therefore waits until
//!   they move: Redis gives no way to take it earlier without losing the fence's order or
//!   the queue's. A waiter meanwhile keeps its place where the queue is (keep_place.lua,
//!   routed by the queue: [`Route::acquire`]);
//! - `status` reads each key where it is: the replies the slot's master answers with ASK are
//!   read again on the node named, each behind its own `ASKING`.
//!
//! **Why not the redis crate's cluster client.** Its retries and their waits are settings,
//! `Script` is the only call that broadcasts SCRIPT LOAD (EVALSHA and EVAL sent as commands
//! go to the key's node), and a pipeline goes to its first key's slot, WAIT included (redis
//! 1.8). What it cannot do is the ASK above: it follows an ASK at once, with the same
//! command, while here an ASK is followed only after the node that said it confirmed that
//! the keys the script needs have left (`EXISTS`), and with the call rewritten for the
//! importing node (`ScriptCall::on_importing_node`). The client has no hook between the ASK
//! and the resend; without that check, an acquire on the importing node could take a lock
//! whose fence counter and queue are still on the old node, and create keys that stop the
//! migration.
//!
//! Release notices: a plain SUBSCRIBE on the slot's master (see `subscribe`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{ConnectionAddr, ConnectionInfo, Pipeline, Value};
use tokio::time::Instant;

use super::one_master::{Acquired, Answered, OneMaster, Route};
use super::server::{ScriptReply, Server, deadline_in, is_noscript, script_reply, with_wait};
use super::shared::protocol_for;
use super::survey::{self, Scanned};
use crate::lock::protocol::ScriptCall;
use crate::lock::protocol::keys::Keys;
use crate::lock::protocol::mutex::{self, AcquireReply};
use crate::lock::target::{Target, Tls};
use crate::lock::{
    Holder, HolderInfo, ListQuery, Listed, Listing, RedisFailure, ReleaseNotices, ReplicaAck,
    Status,
};

mod replies;

use replies::{Addr, Redirect, addr_of, masters, redirect, redirect_of, slot, slot_owner};

/// Redirects (MOVED, ASK, a pause after TRYAGAIN) followed within one call at most.
const MAX_HOPS: u32 = 8;

/// The first pause after TRYAGAIN or CLUSTERDOWN, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MOST: Duration = Duration::from_millis(200);

pub struct Cluster {
    /// The lock's keys, all in one slot.
    keys: Keys,
    /// The hash slot of every key of the lock.
    slot: u16,
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

/// How `send` treats a call and its redirects.
#[derive(Clone, Copy)]
struct Handling<'a> {
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

impl Handling<'_> {
    /// A call that needs none of the lock's keys moved before it may follow an ASK.
    const PLAIN: Handling<'static> = Handling {
        needs_moved: &[],
        on_split: OnSplit::Wait,
        keep_asks: false,
        when_asking: None,
    };

    /// `call`, with `when_asking` its pipeline as sent to the node a migrating slot goes to.
    fn of<'a>(call: &'a ScriptCall, on_split: OnSplit, when_asking: &'a Pipeline) -> Handling<'a> {
        Handling {
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

/// Find the master of `target`'s slot through the seeds, and connect to it.
pub async fn open(
    seeds: &[ConnectionInfo],
    target: &Target,
    ack: Option<ReplicaAck>,
    within: Duration,
) -> Result<OneMaster<Cluster>, RedisFailure> {
    let protocol = protocol_for(target)?;
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
        keys: protocol.keys().clone(),
        slot: slot(&protocol.keys().lock),
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
    Ok(OneMaster::new(cluster, protocol, ack, target))
}

impl Cluster {
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
        // The user part as `redact` shows the URL given: a user with a password as
        // `user:***@`, a lone name hidden whole (other clients read it as a password).
        let settings = template.redis_settings();
        let user = match (settings.username(), settings.password()) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (Some(_), None) => "***@".to_owned(),
            (None, Some(_)) => ":***@".to_owned(),
            (None, None) => String::new(),
        };
        let shown = format!(
            "{}://{user}{host}:{port}",
            if tls { "rediss" } else { "redis" }
        );
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
        route: Handling<'_>,
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
                        return Ok(Sent::Split);
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
                        return Err(RedisFailure::from_redis(&err.clone().into(), node.shown()));
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
                self.slot, self.keys.lock
            ),
        )
    }

    /// The status pipeline, each reply read where its key is: on the slot's master, and the
    /// keys it answers ASK for (they left it: a migration) on the node named, each command
    /// behind its own `ASKING` (which lasts one command). Reading a key on the node the slot
    /// goes to after its old node said it is not there reads it where it is: the old node
    /// never gets a key back while the slot migrates.
    async fn read_status(
        &self,
        pipe: &Pipeline,
        deadline: Instant,
    ) -> Result<Answer, RedisFailure> {
        let route = Handling {
            keep_asks: true,
            ..Handling::PLAIN
        };
        let mut pause = RETRY_FIRST;
        loop {
            let Sent::Answer(mut answer) = self.send(pipe, "status", deadline, route).await? else {
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
    async fn script_until(
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
        let asking = with_wait(importing.first(), ack);
        let mut sent = self
            .send(
                &with_wait(call.first(), ack),
                what,
                deadline,
                Handling::of(call, on_split, &asking),
            )
            .await?;
        if matches!(&sent, Sent::Answer(answer) if is_noscript(answer.replies.first())) {
            let asking = with_wait(importing.eval(), ack);
            sent = self
                .send(
                    &with_wait(call.eval(), ack),
                    what,
                    deadline,
                    Handling::of(call, on_split, &asking),
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
    ) -> Result<Holder, RedisFailure> {
        let Some(waiter) = &holder.waiter else {
            // Only waiters are sent here.
            return Ok(busy.unwrap_or_default());
        };
        let call = mutex::keep_place(&self.keys, waiter);
        let (reply, node) = self.script_until(&call, None, "acquire", deadline).await?;
        let Some(AcquireReply::Busy(kept)) = mutex::parse_acquire(&reply.value) else {
            return Err(Self::unexpected(&node, "acquire", &reply.value));
        };
        Ok(match busy {
            Some(busy) => Holder {
                queued: kept.queued,
                place: kept.place,
                ..busy
            },
            None => kept,
        })
    }

    fn unexpected(node: &Server, what: &str, reply: &Value) -> RedisFailure {
        RedisFailure::unexpected_reply(node.shown(), what, reply)
    }
}

/// A reply of `node`, named in messages by its address.
fn answered<T>(reply: T, node: &Server) -> Answered<T> {
    Answered {
        reply,
        by: node.shown_rc(),
    }
}

impl Route for Cluster {
    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<Answered<ScriptReply>, RedisFailure> {
        let (reply, node) = self
            .script_until(call, ack, what, deadline_in(within))
            .await?;
        Ok(answered(reply, &node))
    }

    /// An acquire runs where the lock is; a waiter's attempt that finds the lock's keys split
    /// across a migration, or could not queue (the queue is out of the script's reach), keeps
    /// its place where the queue is instead (see the module's notes).
    async fn acquire(
        &self,
        call: &ScriptCall,
        holder: &HolderInfo,
        ack: Option<ReplicaAck>,
        within: Duration,
    ) -> Result<Acquired, RedisFailure> {
        let deadline = deadline_in(within);
        let waits = holder.waiter.is_some();
        let on_split = if waits {
            OnSplit::Report
        } else {
            OnSplit::Wait
        };
        let Some((reply, node)) = self
            .script_or_split(call, ack, "acquire", deadline, on_split)
            .await?
        else {
            return Ok(Acquired::Busy(
                self.keep_place(holder, None, deadline).await?,
            ));
        };
        // Not queued: a waiter always is, unless the queue is out of the script's reach.
        if let Some(AcquireReply::Busy(busy)) = mutex::parse_acquire(&reply.value)
            && waits
            && busy.place == 0
        {
            let kept = self.keep_place(holder, Some(busy), deadline).await?;
            return Ok(Acquired::Busy(kept));
        }
        Ok(Acquired::Reply(answered(reply, &node)))
    }

    /// cancel.lua creates nothing: the same EVAL goes behind ASKING.
    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<(), RedisFailure> {
        let mut pipe = redis::pipe();
        pipe.add_command(call.eval()).ignore_errors();
        let route = Handling::of(call, OnSplit::Wait, &pipe);
        self.send(&pipe, what, deadline_in(within), route)
            .await
            .map(drop)
    }

    async fn read(
        &self,
        pipe: &Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Answered<Vec<Value>>, RedisFailure> {
        let _ = what; // always the status pipeline, named so in every message
        let answer = self.read_status(pipe, deadline_in(within)).await?;
        Ok(answered(answer.replies, &answer.node))
    }

    /// A plain SUBSCRIBE on the slot's master. A cluster forwards every PUBLISH to every
    /// node, so any node would do; a missed notice costs one poll interval.
    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        let deadline = deadline_in(within);
        let owner = self.owner(deadline).await.ok()?;
        let node = self.node(&owner).ok()?;
        node.subscribe(channel, remaining(deadline)).await
    }

    /// Every master that serves slots (`CLUSTER SLOTS` of the lock's master; replicas are
    /// skipped), all scanned at once, and each lock read on the master whose scan found it.
    /// A lock found on two masters (its slot being migrated) shows the first readable answer.
    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        let deadline = deadline_in(query.reply_within);
        let owner = self.owner(deadline).await?;
        let node = self.node(&owner)?;
        let mut pipe = redis::pipe();
        pipe.cmd("CLUSTER").arg("SLOTS");
        let replies = node
            .query(&pipe, "CLUSTER SLOTS", remaining(deadline))
            .await?;
        let Some(found) = replies.first().and_then(|r| masters(r, &owner.0)) else {
            let reply = replies.into_iter().next().unwrap_or(Value::Nil);
            return Err(Cluster::unexpected(&node, "CLUSTER SLOTS", &reply));
        };
        if let Some((first, last)) = found.unserved.first() {
            return Err(RedisFailure::unreachable(
                node.shown(),
                format!(
                    "slots {first}-{last} have no master this client can reach: their locks \
                     cannot be listed"
                ),
            ));
        }
        let masters = found
            .addrs
            .iter()
            .map(|a| self.node(a))
            .collect::<Result<Vec<_>, _>>()?;
        let until = survey::scan_deadline(query);
        let scans = join_all(masters.iter().map(|m| survey::scan(m, query, until)))
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let (names, cut) = Scanned::merge(&scans, query.max_locks);
        let reads = join_all(masters.iter().zip(&scans).map(|(master, scan)| {
            let here: Vec<String> = names
                .iter()
                .filter(|n| scan.names.contains(*n))
                .cloned()
                .collect();
            async move {
                let statuses = survey::read(master, &here, query).await;
                (here, statuses)
            }
        }))
        .await;
        let mut by_name: BTreeMap<String, Result<Status, String>> = BTreeMap::new();
        for (here, statuses) in reads {
            for (name, status) in here.into_iter().zip(statuses?) {
                match by_name.get(&name) {
                    Some(Ok(_)) => {}
                    _ => {
                        by_name.insert(name, status);
                    }
                }
            }
        }
        Ok(Listing {
            locks: by_name
                .into_iter()
                .map(|(name, status)| Listed { name, status })
                .collect(),
            cut,
        })
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
