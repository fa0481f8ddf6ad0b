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
//! - **ASK**: the slot is being migrated and our keys have left: resend to the named node
//!   behind `ASKING`, once, without remembering it.
//! - **TRYAGAIN** (a migration caught between a script's keys), **CLUSTERDOWN** (a slot
//!   without a master, during a failover), **LOADING**: pause 10 ms, doubling up to 200 ms,
//!   and resend.
//!
//! All of it within the call's own bound, which a redirect never extends, and with at most
//! [`MAX_HOPS`] redirects (two nodes that disagree end as an error, not a loop).
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
use crate::config::{Target, Tls};
use crate::lease::Stamp;
use crate::lock::protocol::mutex::{self, AcquireReply};
use crate::lock::protocol::{status, Protocol, ScriptCall};
use crate::lock::{
    Attempt, Grant, HolderInfo, Lock, RedisFailure, ReleaseNotices, Released, Renewal, ReplicaAck,
    Status, Token,
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

/// The replies to a pipeline, and the node that gave them (for messages).
struct Answer {
    replies: Vec<Value>,
    node: Rc<Server>,
}

/// What an error reply asks the client to do.
enum Redirect {
    Moved(Addr),
    Ask(Addr),
    Pause,
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
        if seeds.iter().any(crate::config::is_tls) {
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
        let tls = crate::config::is_tls(template);
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

    /// Send `pipe` to the slot's master by `deadline`, following redirects; the replies may
    /// still hold error replies other than redirects.
    async fn send(
        &self,
        pipe: &Pipeline,
        what: &str,
        deadline: Instant,
    ) -> Result<Answer, RedisFailure> {
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
                behind_asking(pipe)
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
            let Some((redirect, err)) = redirect(&replies, &addr.0) else {
                return Ok(Answer { replies, node });
            };
            hops += 1;
            let give_up = || RedisFailure::from_redis(&err.clone().into(), node.shown());
            if hops > MAX_HOPS {
                return Err(give_up());
            }
            match redirect {
                Redirect::Moved(to) => {
                    *self.owner.borrow_mut() = Some(to.clone());
                    self.learn(to);
                }
                Redirect::Ask(to) => asking = Some(to),
                Redirect::Pause => {
                    if Instant::now() + pause >= deadline {
                        return Err(give_up());
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MOST);
                }
            }
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
        within: Duration,
    ) -> Result<(ScriptReply, Rc<Server>), RedisFailure> {
        let deadline = deadline_in(within);
        let mut answer = self
            .send(&with_wait(call.evalsha(), ack), what, deadline)
            .await?;
        if is_noscript(answer.replies.first()) {
            answer = self
                .send(&with_wait(call.eval(), ack), what, deadline)
                .await?;
        }
        let reply = script_reply(answer.replies, ack, answer.node.shown())?;
        Ok((reply, answer.node))
    }

    /// Take back a write that may have landed, as single.rs does: EVAL of cancel.lua, at
    /// once, so that it takes effect even if its own reply is lost. Best effort.
    async fn undo(&self, token: &Token, within: Duration) {
        let call = self.protocol.cancel(&token.as_str());
        let mut pipe = redis::pipe();
        pipe.add_command(call.eval()).ignore_errors();
        let _ = self.send(&pipe, "release", deadline_in(within)).await;
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
            let (reply, node) = self.script(&call, self.ack, "acquire", for_script).await?;
            match mutex::parse_acquire(&reply.value) {
                Some(AcquireReply::Granted { fence }) => {
                    self.check_acks(reply.acked, &node)?;
                    Ok(Attempt::Granted(Grant {
                        fence,
                        counted_from,
                    }))
                }
                Some(AcquireReply::Busy(holder)) => Ok(Attempt::Busy(holder)),
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
        let (reply, node) = self.script(&call, self.ack, "the renewal", within).await?;
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
        let (reply, node) = self.script(&call, None, "release", within).await?;
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
            let _ = self.script(&call, None, "leaving the queue", within).await;
        }
    }

    async fn status(&self) -> Result<Status, RedisFailure> {
        let answer = self
            .send(&self.protocol.status(), "status", deadline_in(self.timeout))
            .await?;
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

/// The first redirect among `replies`, with the error reply that said it. A node named
/// without a host (`MOVED 12 :7001`, a node that does not know its address) is on `from`.
fn redirect(replies: &[Value], from: &str) -> Option<(Redirect, redis::ServerError)> {
    replies.iter().find_map(|reply| {
        let Value::ServerError(err) = reply else {
            return None;
        };
        let target = || {
            let to = err.details()?.split_whitespace().nth(1)?;
            let (host, port) = to.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let host = if host.is_empty() { from } else { host };
            Some((host.to_owned(), port.parse().ok()?))
        };
        let redirect = match err.code() {
            "MOVED" => Redirect::Moved(target()?),
            "ASK" => Redirect::Ask(target()?),
            "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" => Redirect::Pause,
            _ => return None,
        };
        Some((redirect, err.clone()))
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
        let Some((Redirect::Moved(to), _)) = redirect(&moved, "h") else {
            panic!("no MOVED");
        };
        assert_eq!(to, ("10.0.0.2".to_owned(), 7001));
        let Some((Redirect::Ask(to), _)) = redirect(&[error_reply("ASK 1 :7002")], "h") else {
            panic!("no ASK");
        };
        assert_eq!(to, ("h".to_owned(), 7002));
        assert!(matches!(
            redirect(
                &[error_reply(
                    "TRYAGAIN Multiple keys request during rehashing of slot"
                )],
                "h"
            ),
            Some((Redirect::Pause, _))
        ));
        assert!(redirect(&[error_reply("NOSCRIPT No matching script")], "h").is_none());
        assert!(redirect(&[Value::Int(1)], "h").is_none());
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
