//! A lock on one Redis server: the first implementation of the [`Lock`] contract.
//!
//! How it keeps the contract:
//! - only its own token: the scripts (mutex or `--limit` semaphore) compare before they
//!   write;
//! - no write left behind: an acquire that failed after its script may have run (a timeout,
//!   a broken connection, an unreadable reply, too few replica acknowledgements) is taken
//!   back with the compare-and-delete release, on a new connection if the old one timed out;
//! - lease start: the clock is read before the script is sent;
//! - replicas: the script and its WAIT go in one pipeline (`Server::script`);
//! - bounded: acquire attempts within the bound the supervisor gives (a quarter of it kept
//!   for the take-back), release and status within the connect timeout, renewals within the
//!   lease; plus the replica timeout with `--min-replicas`.
//!
//! The server underneath is a [`Node`]: one fixed [`Server`] here, a master found through
//! sentinels in `sentinel.rs`, which keeps this same mutex logic.

use std::time::Duration;

use super::server::{first_error, ScriptReply, Server};
use crate::lease::Stamp;
use crate::lock::protocol::mutex::{self, AcquireReply};
use crate::lock::protocol::{status, Protocol, ScriptCall};
use crate::lock::target::Target;
use crate::lock::{
    Attempt, Grant, HolderInfo, Lock, RedisFailure, ReleaseNotices, Released, Renewal, ReplicaAck,
    Status, Token,
};

/// The least time given to taking back a write, even when the attempt used up its bound: a
/// few round trips on a healthy network, a pause not worth the risk of a stuck key.
const UNDO_AT_LEAST: Duration = Duration::from_millis(50);

/// What the mutex needs of the server that holds it: the calls of [`Server`], each within its
/// bound. A node may change which server it talks to between calls (a failover), never
/// within one.
#[allow(async_fn_in_trait)] // used on one thread only, never as `dyn`
pub trait Node {
    /// The server, or the way it is found, with any password redacted: for messages.
    fn shown(&self) -> &str;

    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<ScriptReply, RedisFailure>;

    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<redis::Value, RedisFailure>;

    async fn query(
        &self,
        pipe: &redis::Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Vec<redis::Value>, RedisFailure>;

    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices>;
}

impl Node for Server {
    fn shown(&self) -> &str {
        Server::shown(self)
    }

    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<ScriptReply, RedisFailure> {
        Server::script(self, call, ack, what, within).await
    }

    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<redis::Value, RedisFailure> {
        Server::eval(self, call, what, within).await
    }

    async fn query(
        &self,
        pipe: &redis::Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Vec<redis::Value>, RedisFailure> {
        Server::query(self, pipe, what, within).await
    }

    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        Server::subscribe(self, channel, within).await
    }
}

pub struct Single<N: Node = Server> {
    server: N,
    protocol: Protocol,
    ack: Option<ReplicaAck>,
    /// Bound on connecting and on each reply (`--connect-timeout`).
    timeout: Duration,
}

impl Single {
    /// Connect to `info`, the one server of `target`.
    pub async fn open(
        info: &redis::ConnectionInfo,
        target: &Target,
        ack: Option<ReplicaAck>,
        within: Duration,
    ) -> Result<Single, RedisFailure> {
        let protocol = protocol_for(target)?;
        let server = Server::new(info, &target.tls, &target.redis_shown)?;
        server.connect(within).await?;
        Ok(Single::on(server, protocol, ack, target))
    }
}

/// The protocol (mutex or `--limit` semaphore) of `target`'s lock.
pub fn protocol_for(target: &Target) -> Result<Protocol, RedisFailure> {
    Protocol::new(&target.key, target.limit).map_err(|e| {
        // config.rs refuses such names before Redis is contacted; this is a backstop.
        RedisFailure::unexpected(&target.redis_shown, format!("lock name {e}"))
    })
}

impl<N: Node> Single<N> {
    /// The lock of `target` on `server`, which is ready to use.
    pub fn on(
        server: N,
        protocol: Protocol,
        ack: Option<ReplicaAck>,
        target: &Target,
    ) -> Single<N> {
        Single {
            server,
            protocol,
            ack,
            timeout: target.timeout,
        }
    }

    /// Take back a write that may have landed, and cancel the token so that the write cannot
    /// land later (cancel.lua); the compare in the script leaves any other value alone. Sent
    /// as EVAL, on a new connection if the last one timed out, so that it takes effect even
    /// if its own reply is lost too. The token is spent: the caller must use a new one. Best effort: if it fails too, the key expires within its TTL.
    async fn undo(&self, token: &Token, within: Duration) {
        let call = self.protocol.cancel(&token.as_str());
        let _ = self.server.eval(&call, "release", within).await;
    }

    /// With `--min-replicas`: enough replicas, and every one that had to by name (those
    /// Sentinel could promote), acknowledged the write.
    fn check_acks(&self, reply: &ScriptReply) -> Result<(), RedisFailure> {
        RedisFailure::check_acks(self.server.shown(), self.name(), self.ack, reply.acked)?;
        match (self.ack, reply.unconfirmed.as_slice()) {
            (Some(ack), missing @ [_, ..]) => Err(RedisFailure::unconfirmed(
                self.server.shown(),
                self.name(),
                missing,
                &humantime::format_duration(ack.timeout).to_string(),
            )),
            _ => Ok(()),
        }
    }

    fn unexpected(&self, what: &str, reply: &redis::Value) -> RedisFailure {
        RedisFailure::unexpected_reply(self.server.shown(), what, reply)
    }
}

impl<N: Node> Lock for Single<N> {
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
        // A quarter of the bound is kept for taking the write back if no reply comes, so
        // that the whole attempt, clean-up included, ends within it.
        let for_script = within - within / 4 + Server::wait_time(self.ack);
        let result = async {
            let reply = self
                .server
                .script(&call, self.ack, "acquire", for_script)
                .await?;
            match mutex::parse_acquire(&reply.value) {
                Some(AcquireReply::Granted { fence }) => {
                    self.check_acks(&reply)?;
                    Ok(Attempt::Granted(Grant {
                        fence,
                        counted_from,
                    }))
                }
                Some(AcquireReply::Busy(holder)) => Ok(Attempt::Busy(holder)),
                None => Err(self.unexpected("acquire", &reply.value)),
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
        let reply = self
            .server
            .script(&call, self.ack, "the renewal", within)
            .await?;
        match mutex::parse_renew(&reply.value) {
            Some(true) => {
                self.check_acks(&reply)?;
                Ok(Renewal::Renewed { counted_from })
            }
            Some(false) => Ok(Renewal::Lost),
            None => Err(self.unexpected("the renewal", &reply.value)),
        }
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        let call = self.protocol.release(&token.as_str(), keep);
        let reply = self.server.script(&call, None, "release", within).await?;
        mutex::parse_release(&reply.value).ok_or_else(|| self.unexpected("release", &reply.value))
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        self.server
            .subscribe(&self.protocol.keys().released, within)
            .await
    }

    async fn leave_queue(&self, holder: &HolderInfo, within: Duration) {
        if let Some(waiter) = &holder.waiter {
            let _ = self
                .server
                .script(
                    &self.protocol.leave(&waiter.id),
                    None,
                    "leaving the queue",
                    within,
                )
                .await;
        }
    }

    async fn status(&self) -> Result<Status, RedisFailure> {
        let replies = self
            .server
            .query(&self.protocol.status(), "status", self.timeout)
            .await?;
        match status::parse(&replies) {
            Ok(Some(status)) => Ok(status),
            Ok(None) => Err(self.unexpected("status", &redis::Value::Array(replies))),
            Err(error) => Err(
                first_error(std::slice::from_ref(error), self.server.shown())
                    .unwrap_or_else(|| self.unexpected("status", error)),
            ),
        }
    }
}
