//! The lock on every topology where one master holds the lock's slot: the one [`Lock`]
//! implementation of a single server, Sentinel and Cluster. What differs between them is only
//! how a call reaches that master, a [`Route`]: a fixed server (`single.rs`), the master the
//! sentinels name now (`sentinel.rs`), the cluster's owner of the slot (`cluster.rs`).
//!
//! How it keeps the contract:
//! - only its own token: the scripts (mutex or `--limit` semaphore) compare before they
//!   write;
//! - no write left behind: an acquire that failed after its script may have run (a timeout,
//!   a broken connection, an unreadable reply, too few replica acknowledgements) is taken
//!   back with cancel.lua, sent as EVAL (on a new connection if the old one timed out), so
//!   that it takes effect even if its own reply is lost too; each attempt has a token of its
//!   own, so a cancelled one is never sent again;
//! - lease start: the clock is read before the script is sent;
//! - replicas: the script and its WAIT go in one pipeline (the route's `script`); a reply
//!   counts only with enough acknowledgements, and with every replica that had to have it by
//!   name (Sentinel's promotable ones);
//! - bounded: an acquire attempt within the bound the supervisor gives (a quarter of it kept
//!   for the take-back), release and status within the connect timeout, renewals within the
//!   lease; plus the replica wait with `--min-replicas`.

use std::rc::Rc;
use std::time::Duration;

use redis::{Pipeline, Value};

use super::server::ScriptReply;
use super::shared::{UNDO_AT_LEAST, read_status};
use crate::lease::Stamp;
use crate::lock::protocol::mutex::{self, AcquireReply, RenewReply};
use crate::lock::protocol::operator;
use crate::lock::protocol::{Protocol, ScriptCall, hold};
use crate::lock::target::Target;
use crate::lock::{
    Attempt, BreakOutcome, Finished, Grant, HoldChange, HoldRecord, Holder, HolderInfo, ListQuery,
    Listing, Lock, RedisFailure, ReleaseNotices, Released, Renewal, ReplicaAck, Status, Token,
};

/// How calls reach the master that holds the lock's slot now, each within its bound. A route
/// may change which server it talks to between calls (a failover, a migration), never within
/// one, and sorts out its own redirects and retries.
#[allow(async_fn_in_trait)] // used on one thread only, never as `dyn`
pub trait Route {
    /// Run `call` (EVALSHA, then EVAL on NOSCRIPT) with, for `ack`, its WAIT in the same
    /// pipeline.
    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<Answered<ScriptReply>, RedisFailure>;

    /// The acquire `call` for `holder`: by default as `script` does. A route may answer
    /// busy itself (a waiter's place kept elsewhere: the cluster during a migration).
    async fn acquire(
        &self,
        call: &ScriptCall,
        holder: &HolderInfo,
        ack: Option<ReplicaAck>,
        within: Duration,
    ) -> Result<Acquired, RedisFailure> {
        let _ = holder;
        Ok(Acquired::Reply(
            self.script(call, ack, "acquire", within).await?,
        ))
    }

    /// Run `call` as EVAL at once, without a WAIT: for a write that must take effect even if
    /// no reply comes back (the take-back of an acquire), where an EVALSHA could meet
    /// NOSCRIPT and never get to the EVAL.
    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<(), RedisFailure>;

    /// Send the read-only `pipe`, each reply read where its key is.
    async fn read(
        &self,
        pipe: &Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Answered<Vec<Value>>, RedisFailure>;

    /// Subscribe to `channel` where the lock is, within `within`.
    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices>;

    /// `list`: the locks under `query.starts_with` on every master this route reaches
    /// (`topology/survey.rs` does the work on each).
    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure>;
}

/// A reply, and the server a message about it names (shared with the route's own name, not
/// copied for every call).
pub struct Answered<T> {
    pub reply: T,
    pub by: Rc<str>,
}

/// What a route got for an acquire.
pub enum Acquired {
    /// The acquire script's reply.
    Reply(Answered<ScriptReply>),
    /// Busy, as the route found it (see [`Route::acquire`]).
    Busy(Holder),
}

/// The lock of one master, reached along `R`.
pub struct OneMaster<R: Route> {
    route: R,
    protocol: Protocol,
    ack: Option<ReplicaAck>,
    /// Bound on connecting and on each status reply (`--connect-timeout`).
    timeout: Duration,
}

impl<R: Route> OneMaster<R> {
    /// The lock of `target` along `route`, which is ready to use.
    pub fn new(
        route: R,
        protocol: Protocol,
        ack: Option<ReplicaAck>,
        target: &Target,
    ) -> OneMaster<R> {
        OneMaster {
            route,
            protocol,
            ack,
            timeout: target.timeout,
        }
    }

    /// Take back a write that may have landed, and cancel the token so that the write cannot
    /// land later (cancel.lua); the compare in the script leaves any other value alone. Best
    /// effort: if it fails too, the key expires within its TTL.
    async fn undo(&self, token: &Token, within: Duration) {
        let call = self.protocol.cancel(&token.as_str());
        let _ = self.route.eval(&call, "release", within).await;
    }

    /// With `--min-replicas`: enough replicas, and every one that had to by name (those
    /// Sentinel could promote), acknowledged the write.
    fn check_acks(&self, answered: &Answered<ScriptReply>) -> Result<(), RedisFailure> {
        let Some(ack) = self.ack else { return Ok(()) };
        let reply = &answered.reply;
        let timeout = humantime::format_duration(ack.timeout).to_string();
        match (reply.acked, reply.unconfirmed.as_slice()) {
            (Some(n), _) if n < ack.replicas => Err(RedisFailure::replicas(
                &answered.by,
                self.name(),
                n,
                ack.replicas,
                &timeout,
            )),
            (_, missing @ [_, ..]) => Err(RedisFailure::unconfirmed(
                &answered.by,
                self.name(),
                missing,
                &timeout,
            )),
            _ => Ok(()),
        }
    }

    /// One attempt with `token`; whatever it may have written is taken back by the caller.
    async fn attempt(
        &self,
        token: &Token,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
        counted_from: Stamp,
    ) -> Result<Attempt, RedisFailure> {
        let call = self.protocol.acquire(&token.as_str(), ttl, holder);
        let answered = match self.route.acquire(&call, holder, self.ack, within).await? {
            Acquired::Reply(answered) => answered,
            Acquired::Busy(holder) => return Ok(Attempt::Busy(holder)),
        };
        match mutex::parse_acquire(&answered.reply.value) {
            Some(AcquireReply::Granted { fence }) => {
                self.check_acks(&answered)?;
                Ok(Attempt::Granted(Grant {
                    token: token.clone(),
                    fence,
                    counted_from,
                    degraded: None,
                    absent: Vec::new(),
                }))
            }
            Some(AcquireReply::Busy(holder)) => Ok(Attempt::Busy(holder)),
            None => Err(unexpected(&answered, "acquire")),
        }
    }
}

fn unexpected(answered: &Answered<ScriptReply>, what: &str) -> RedisFailure {
    RedisFailure::unexpected_reply(&answered.by, what, &answered.reply.value)
}

impl<R: Route> Lock for OneMaster<R> {
    fn name(&self) -> &str {
        &self.protocol.keys().lock
    }

    async fn try_acquire(
        &self,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure> {
        let token = Token::new();
        let counted_from = Stamp::now();
        let deadline = counted_from.checked_add(within);
        // A quarter of the bound is kept for taking the write back if no reply comes, so
        // that the whole attempt, clean-up included, ends within it.
        let for_script = within - within / 4 + ReplicaAck::wait_time(self.ack);
        let result = self
            .attempt(&token, ttl, holder, for_script, counted_from)
            .await;
        if let Err(e) = &result
            && e.may_have_written()
        {
            let left = deadline.map_or(Duration::ZERO, |d| Stamp::now().until(d));
            self.undo(&token, left.max(UNDO_AT_LEAST)).await;
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
        let answered = self
            .route
            .script(&call, self.ack, "the renewal", within)
            .await?;
        match mutex::parse_renew(&answered.reply.value) {
            Some(RenewReply::Renewed) => {
                self.check_acks(&answered)?;
                Ok(Renewal::Renewed {
                    counted_from,
                    nodes: None,
                })
            }
            Some(RenewReply::Lost(broken)) => Ok(Renewal::Lost(broken)),
            None => Err(unexpected(&answered, "the renewal")),
        }
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        record: Option<&Finished>,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        let call = self.protocol.release(&token.as_str(), keep, record);
        let answered = self.route.script(&call, None, "release", within).await?;
        mutex::parse_release(&answered.reply.value).ok_or_else(|| unexpected(&answered, "release"))
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        self.route
            .subscribe(&self.protocol.keys().released, within)
            .await
    }

    async fn leave_queue(&self, holder: &HolderInfo, within: Duration) {
        if let Some(waiter) = &holder.waiter {
            let call = self.protocol.leave(&waiter.id);
            let _ = self
                .route
                .script(&call, None, "leaving the queue", within)
                .await;
        }
    }

    async fn status(&self, _held: Option<Duration>) -> Result<Status, RedisFailure> {
        let answered = self
            .route
            .read(&self.protocol.status(), "status", self.timeout)
            .await?;
        read_status(answered.reply, &answered.by)
    }

    async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure> {
        let call = hold::call(self.protocol.keys(), &token.as_str(), change);
        let answered = self
            .route
            .script(&call, None, "the hold record", within)
            .await?;
        hold::parse(&answered.reply.value).map_err(|()| unexpected(&answered, "the hold record"))
    }

    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        self.route.list(query).await
    }

    async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure> {
        let call = self.protocol.break_holder(token, by);
        let answered = self.route.script(&call, None, "break", within).await?;
        operator::parse_break(&answered.reply.value).ok_or_else(|| unexpected(&answered, "break"))
    }

    async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure> {
        let call = self.protocol.pause(reason, by, length);
        let answered = self.route.script(&call, None, "pause", within).await?;
        operator::parse_pause(&answered.reply.value).ok_or_else(|| unexpected(&answered, "pause"))
    }

    async fn resume(&self, within: Duration) -> Result<bool, RedisFailure> {
        let call = self.protocol.resume();
        let answered = self.route.script(&call, None, "resume", within).await?;
        operator::parse_resume(&answered.reply.value).ok_or_else(|| unexpected(&answered, "resume"))
    }

    async fn forget(&self, within: Duration) -> Result<u64, RedisFailure> {
        let call = self.protocol.forget();
        let answered = self.route.script(&call, None, "forget", within).await?;
        match answered.reply.value {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            _ => Err(unexpected(&answered, "forget")),
        }
    }
}
