//! One connection to one Redis server.
//!
//! - **Bounded, and never reused after a timeout.** Every call carries its own bound, the
//!   connection set-up included. A call that times out, or whose connection broke, drops the
//!   connection, and the next call opens a new one: a connection that went silent without a
//!   FIN or RST (a dead peer, a stateful firewall that forgot it) would otherwise swallow
//!   every later request, and no library-level reconnect would notice.
//! - **Never queued behind a call still waiting.** Replies come back in order, so a call sent
//!   on a connection where an earlier one still waits could not be answered before it: it
//!   opens a connection of its own, which becomes the one in use (a renewal started again
//!   while the first may still answer, see `supervise/keeper.rs`). A connection that just
//!   answered becomes the one in use again when the one in use is busy or gone: it is known
//!   to work. Only the connection a failed or abandoned call was on is dropped, never one
//!   that another call opened meanwhile.
//! - **Scripts by hash, then by source.** A script goes as EVALSHA; on NOSCRIPT (a restart,
//!   SCRIPT FLUSH, a failover) it goes once more as EVAL: one extra round trip instead of
//!   NOSCRIPT, SCRIPT LOAD, EVALSHA inside a lease that may be short. A call marked to go in
//!   full (`ScriptCall::in_full`: renewals) goes as EVAL at once: it never pays that round
//!   trip inside the lease.
//! - **A write and its WAIT travel together.** WAIT counts acknowledgements of *this
//!   connection's* writes; sent apart, it may land on a new connection with no writes and
//!   answer "all replicas" at once. So it is pipelined behind the script it confirms.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Pipeline, Value};
use tokio::time::Instant;

use super::push::{self, Push};
use crate::lock::protocol::ScriptCall;
use crate::lock::target::Tls;
use crate::lock::{RedisFailure, ReleaseNotices, ReplicaAck};

/// One Redis server, reached over one connection at a time.
pub struct Server {
    client: redis::Client,
    /// The same, over RESP3: the connection of a waiter, which carries its release notices
    /// too (push.rs). `None` once the server refused RESP3.
    resp3: RefCell<Option<redis::Client>>,
    /// The subscription every new connection carries, while its notices are read.
    push: RefCell<Option<Push>>,
    /// The URL with any password replaced by `***`, for messages (shared with every reply
    /// that names this server).
    shown: Rc<str>,
    /// The connection in use, if one is open and trusted.
    conn: RefCell<Option<Open>>,
    /// The number the next connection opened gets.
    opened: Cell<u64>,
    /// A TLS server reached without a client certificate: a server that requires one
    /// (`tls-auth-clients yes`, Redis' default) just drops the connection after the
    /// handshake, so a failed connection says that this may be why.
    no_client_cert: bool,
    /// A TLS server checked against the system's CA certificates only.
    no_ca: bool,
    /// Some request got a reply: the connection set-up is not what fails.
    answered: Cell<bool>,
    /// The same server without the password, when one is given for the default user (no
    /// user name): a refused login is then tried without it, to tell a server that has no
    /// password set from a wrong password (see `refused_login`).
    without_password: Option<redis::Client>,
}

/// Added to a refused server certificate when no `--tls-ca-cert` was given.
const CA_HINT: &str = " (give the CA that signed it with --tls-ca-cert)";

/// Added to a failed TLS connection made without a client certificate.
const CLIENT_CERT_HINT: &str =
    " (if the server requires client certificates, give --tls-cert and --tls-key)";

/// A script's reply and, when a WAIT went with it, how many replicas acknowledged.
pub struct ScriptReply {
    pub value: Value,
    pub acked: Option<u32>,
    /// Replicas (`host:port`) that had to acknowledge the write by name and did not: those
    /// that could be promoted in a failover (Sentinel). Empty where only a count is asked.
    pub unconfirmed: Vec<String>,
}

/// A script's reply, with the replicas known to have its write.
pub struct Confirmed {
    pub value: Value,
    /// Replicas whose acknowledged replication offset covers the write, as the master lists
    /// them (`ROLE`: announced IP and listening port).
    pub have_it: Vec<(String, u16)>,
    /// Replicas connected to the master after the wait.
    pub connected: u32,
}

impl Server {
    /// A server to connect to; nothing is sent yet.
    pub fn new(
        info: &redis::ConnectionInfo,
        tls: &Tls,
        shown: &str,
    ) -> Result<Server, RedisFailure> {
        // No CLIENT SETINFO on connect: one round trip less per run, and Redis < 7.2 rejects it.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.clone().set_redis_settings(settings);
        let no_client_cert = crate::lock::target::is_tls(&info) && tls.client.is_none();
        let no_ca = crate::lock::target::is_tls(&info) && tls.ca.is_none();
        let resp3 = client(push::resp3(&info), tls).ok();
        let without_password = login_without_password(&info).and_then(|i| client(i, tls).ok());
        let client = client(info, tls).map_err(|e| RedisFailure::from_redis(&e, shown))?;
        Ok(Server {
            client,
            resp3: RefCell::new(resp3),
            push: RefCell::new(None),
            shown: Rc::from(shown),
            conn: RefCell::new(None),
            opened: Cell::new(0),
            no_client_cert,
            no_ca,
            answered: Cell::new(false),
            without_password,
        })
    }

    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// `shown`, shared: a reply's name for its server without a copy.
    pub fn shown_rc(&self) -> Rc<str> {
        Rc::clone(&self.shown)
    }

    /// Open the connection now, so that an unreachable server is reported before anything
    /// else happens.
    pub async fn connect(&self, within: Duration) -> Result<(), RedisFailure> {
        let deadline = deadline_in(within);
        match tokio::time::timeout_at(deadline, self.conn(deadline)).await {
            Ok(result) => result.map(drop),
            Err(_) => Err(RedisFailure::timeout(&self.shown, "the connection attempt").not_sent()),
        }
    }

    /// The open connection, or a new one when there is none or a call still waits on it.
    async fn conn(&self, deadline: Instant) -> Result<Open, RedisFailure> {
        if let Some(open) = self.conn.borrow().as_ref()
            && open.waiting.get() == 0
        {
            return Ok(open.clone());
        }
        // Replies are bounded per call here, not by the connection.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(deadline.saturating_duration_since(Instant::now())))
            .set_response_timeout(None);
        let conn = match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => conn,
            Err(e) => {
                let failure = match self.refused_login(&e, &config).await {
                    Some(failure) => failure,
                    None => self.failure(&e),
                };
                return Err(failure.not_sent());
            }
        };
        let open = Open::new(conn, self.opened.replace(self.opened.get() + 1));
        *self.conn.borrow_mut() = Some(open.clone());
        Ok(open)
    }

    /// A refused login (`e`) with a password for the default user, from a server that answers
    /// without one: it has no password set (Redis refuses `AUTH <password>` then), which is
    /// not a wrong password. `None` for any other failure, or when the server needs a password.
    async fn refused_login(
        &self,
        e: &redis::RedisError,
        config: &AsyncConnectionConfig,
    ) -> Option<RedisFailure> {
        if e.kind() != redis::ErrorKind::AuthenticationFailed {
            return None;
        }
        let mut conn = self
            .without_password
            .as_ref()?
            .get_multiplexed_async_connection_with_config(config)
            .await
            .ok()?;
        // Bounded by the caller's deadline, as the connection attempt is.
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
        (pong == "PONG").then(|| RedisFailure::password_not_set(&self.shown))
    }

    /// A RESP3 connection subscribed to the release notices (`push`); `None` if it could
    /// not be made: the server refused RESP3 (never asked again; `resp3` is then `None`),
    /// refused the subscription, or the network failed.
    async fn pushed(&self, config: &AsyncConnectionConfig) -> Option<MultiplexedConnection> {
        let (channel, sender) = match self.push.borrow().as_ref() {
            Some(push) if push.wanted() => (push.channel.clone(), push.sender.clone()),
            _ => return None,
        };
        let client = self.resp3.borrow().clone()?;
        let config = config.clone().set_push_sender(sender);
        let mut conn = match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => conn,
            Err(e) if push::refused(&e) => {
                self.resp3.borrow_mut().take();
                self.push.borrow_mut().take();
                return None;
            }
            // The plain connection would meet the same network: let it say so.
            Err(_) => return None,
        };
        if conn.subscribe(&channel).await.is_err() {
            self.push.borrow_mut().take();
        }
        Some(conn)
    }

    /// `e` as a failure of this server; before any reply, a dropped TLS connection without a
    /// client certificate says that one may be required.
    fn failure(&self, e: &redis::RedisError) -> RedisFailure {
        let failure = RedisFailure::from_redis(e, &self.shown);
        if self.answered.get() {
            return failure;
        }
        // A connection the server closed after the handshake, not one it never accepted
        // (refused) or never answered (a timeout: wrong port, a server without TLS).
        let dropped = (e.is_io_error() || e.is_connection_dropped())
            && !e.is_connection_refusal()
            && !e.is_timeout();
        if e.to_string().contains("invalid peer certificate") {
            if self.no_ca {
                return failure.with_hint(CA_HINT);
            }
        } else if self.no_client_cert && dropped {
            return failure.with_hint(CLIENT_CERT_HINT);
        }
        failure
    }

    /// Drop connection `id` if it is the one in use: the next call opens a new one. The
    /// release notices it carried (push.rs) end with it, and the wait polls: a new connection
    /// is not subscribed again, as a pub/sub connection that broke was not renewed either,
    /// and on a server that is slow to answer a handshake (HELLO, SUBSCRIBE) would only delay
    /// the next attempt.
    fn forget(&self, id: u64) {
        let mut conn = self.conn.borrow_mut();
        if conn.as_ref().is_some_and(|open| open.id == id) {
            conn.take();
            self.push.borrow_mut().take();
        }
    }

    /// `open` just answered: it becomes the one in use if that is busy or gone.
    fn answered_on(&self, open: &Open) {
        let mut conn = self.conn.borrow_mut();
        if conn.as_ref().is_none_or(|now| now.waiting.get() > 0) {
            *conn = Some(open.clone());
        }
    }

    /// Send `pipe` and return one reply per command (error replies included, as
    /// `Value::ServerError`), within `within` from now, connecting first if needed.
    pub async fn query(
        &self,
        pipe: &Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Vec<Value>, RedisFailure> {
        self.query_until(pipe, what, deadline_in(within)).await
    }

    async fn query_until(
        &self,
        pipe: &Pipeline,
        what: &str,
        deadline: Instant,
    ) -> Result<Vec<Value>, RedisFailure> {
        // The connection the call was sent on, once it was.
        let used: Cell<Option<u64>> = Cell::new(None);
        // A call abandoned half-way (its caller gave up on it: a renewal overtaken by the
        // lease's end, or by another attempt that answered first) leaves its connection in an
        // unknown state too.
        let abandoned = ForgetOnDrop(Some((self, &used)));
        let call = async {
            let open = self.conn(deadline).await?;
            let waiting = open.wait();
            used.set(Some(open.id));
            let mut conn = open.conn.clone();
            let replies = pipe
                .query_async::<Vec<Value>>(&mut conn)
                .await
                .map_err(|e| self.failure(&e))?;
            drop(waiting);
            self.answered.set(true);
            self.answered_on(&open);
            Ok(replies)
        };
        let result = match tokio::time::timeout_at(deadline, call).await {
            Ok(result) => result,
            Err(_) if used.get().is_some() => Err(RedisFailure::timeout(&self.shown, what)),
            Err(_) => Err(RedisFailure::timeout(&self.shown, "the connection attempt").not_sent()),
        };
        abandoned.disarm();
        if let Err(e) = &result
            && let Some(id) = used.get()
        {
            // A timeout, a broken connection, a reply that could not be read: the
            // connection can no longer be trusted to carry the next request.
            if e.is_transient() || e.may_have_written() {
                self.forget(id);
            }
        }
        result
    }

    /// Run `call` (EVALSHA, then EVAL on NOSCRIPT; EVAL at once for a call `in_full`) with,
    /// for `ack`, a WAIT behind it in the same pipeline; everything within `within`.
    pub async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<ScriptReply, RedisFailure> {
        let deadline = deadline_in(within);
        let mut replies = self
            .query_until(&with_wait(call.first(), ack), what, deadline)
            .await?;
        if is_noscript(replies.first()) {
            replies = self
                .query_until(&with_wait(call.eval(), ack), what, deadline)
                .await?;
        }
        script_reply(replies, ack, &self.shown)
    }

    /// Run `call` with a WAIT for `ack.replicas` behind it, and say which replicas have its
    /// write: `ROLE` right after the script gives the master's replication offset, which
    /// covers the script's write (anything written in between only raises it: a replica is
    /// then asked for more than the write, never less), and `ROLE` after the WAIT gives each
    /// connected replica's acknowledged offset. WAIT alone only counts, and a replica that can no
    /// longer be promoted (or one the sentinels do not know) counts as much as the one that
    /// will be.
    pub async fn script_confirmed(
        &self,
        call: &ScriptCall,
        ack: ReplicaAck,
        what: &str,
        within: Duration,
    ) -> Result<Confirmed, RedisFailure> {
        let deadline = deadline_in(within);
        let mut replies = self
            .query_until(&confirmed(call.first(), ack), what, deadline)
            .await?;
        if is_noscript(replies.first()) {
            replies = self
                .query_until(&confirmed(call.eval(), ack), what, deadline)
                .await?;
        }
        let mut replies = replies.into_iter();
        let value = replies.next().unwrap_or(Value::Nil);
        if let Value::ServerError(err) = value {
            return Err(RedisFailure::from_redis(&err.into(), &self.shown));
        }
        // The script ran: whatever ROLE says, its write may have landed.
        let before = role(replies.next(), &self.shown).map_err(RedisFailure::after_a_write)?;
        let _wait = replies.next();
        let after = role(replies.next(), &self.shown).map_err(RedisFailure::after_a_write)?;
        let have_it = after
            .replicas
            .iter()
            .filter(|(_, offset)| *offset >= before.offset)
            .map(|(addr, _)| addr.clone())
            .collect();
        Ok(Confirmed {
            value,
            have_it,
            connected: u32::try_from(after.replicas.len()).unwrap_or(u32::MAX),
        })
    }

    /// Run `call` as EVAL at once, without a WAIT: for a write that must take effect even
    /// if no reply ever comes back (taking back an acquire whose reply was lost), where an
    /// EVALSHA could meet NOSCRIPT and never get to the EVAL.
    pub async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<Value, RedisFailure> {
        let mut pipe = redis::pipe();
        pipe.add_command(call.eval()).ignore_errors();
        let replies = self.query(&pipe, what, within).await?;
        match replies.into_iter().next().unwrap_or(Value::Nil) {
            Value::ServerError(err) => Err(RedisFailure::from_redis(&err.into(), &self.shown)),
            value => Ok(value),
        }
    }

    /// `eval` on a connection of its own, opened for this call and closed after it: for a
    /// take-back that must not queue behind a request stuck on the connection in use (a
    /// silently dead link that may yet deliver). On its own connection the cancel can arrive
    /// first, and the stuck request then finds its token cancelled; behind it, it could only
    /// land after it, or not at all if that connection is given up.
    pub async fn eval_apart(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<Value, RedisFailure> {
        let deadline = deadline_in(within);
        let sent = Cell::new(false);
        let attempt = async {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(within))
                .set_response_timeout(None);
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| self.failure(&e).not_sent())?;
            sent.set(true);
            let mut pipe = redis::pipe();
            pipe.add_command(call.eval()).ignore_errors();
            pipe.query_async::<Vec<Value>>(&mut conn)
                .await
                .map_err(|e| self.failure(&e))
        };
        let replies = match tokio::time::timeout_at(deadline, attempt).await {
            Ok(result) => result?,
            Err(_) if sent.get() => return Err(RedisFailure::timeout(&self.shown, what)),
            Err(_) => {
                return Err(RedisFailure::timeout(&self.shown, "the connection attempt").not_sent());
            }
        };
        match replies.into_iter().next().unwrap_or(Value::Nil) {
            Value::ServerError(err) => Err(RedisFailure::from_redis(&err.into(), &self.shown)),
            value => Ok(value),
        }
    }

    /// Subscribe to `channel` within `within`: on the command connection where the server
    /// speaks RESP3 (push.rs), else on a connection of its own.
    pub async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        if self.resp3.borrow().is_some() {
            let (push, receiver) = Push::new(channel);
            *self.push.borrow_mut() = Some(push);
            // The connection that carries the notices replaces the command connection once
            // it is made, not before: a server that cannot be reached again keeps the one
            // that works.
            let deadline = deadline_in(within);
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(within))
                .set_response_timeout(None);
            let pushed = tokio::time::timeout_at(deadline, self.pushed(&config)).await;
            if let Ok(Some(conn)) = pushed
                && self.push.borrow().is_some()
            {
                let id = self.opened.replace(self.opened.get() + 1);
                *self.conn.borrow_mut() = Some(Open::new(conn, id));
                return Some(push::notices(channel.to_owned(), receiver));
            }
            self.push.borrow_mut().take();
            if self.resp3.borrow().is_some() {
                // Not refused: the server did not answer in time, or refused the subscription
                // itself, which a pub/sub connection would meet too. The wait polls.
                return None;
            }
        }
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await.ok()?;
            pubsub.subscribe(channel).await.ok()?;
            let (sink, stream) = pubsub.split();
            let payloads = stream.map(|msg| msg.get_payload::<String>().unwrap_or_default());
            Some(ReleaseNotices::new(sink, payloads))
        };
        tokio::time::timeout(within, subscribe).await.ok().flatten()
    }
}

/// A client for `info`, with the `--tls-*` certificates when it uses TLS.
fn client(info: redis::ConnectionInfo, tls: &Tls) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    if crate::lock::target::is_tls(&info) {
        install_tls_provider();
        if let Some(certificates) = tls.certificates() {
            return redis::Client::build_with_tls(info, certificates);
        }
    }
    let _ = tls; // config.rs refuses --tls-* with a URL that does not use TLS
    redis::Client::open(info)
}

/// `info` without its password, if it gives one for the default user (no user name) over
/// RESP2: the login a server with no password set refuses (`AUTH <password>`). Over RESP3 the
/// login is `HELLO 3 AUTH default <password>`, which such a server accepts.
fn login_without_password(info: &redis::ConnectionInfo) -> Option<redis::ConnectionInfo> {
    let settings = info.redis_settings();
    if settings.password().is_none()
        || settings.username().is_some()
        || settings.protocol().supports_resp3()
    {
        return None;
    }
    let bare = redis::RedisConnectionInfo::default()
        .set_db(settings.db())
        .set_protocol(settings.protocol())
        .set_skip_set_lib_name();
    Some(info.clone().set_redis_settings(bare))
}

/// rustls needs a process-wide crypto provider before any TLS connection, whatever the
/// topology; installing it twice is harmless (the second install reports an error, ignored).
#[cfg(feature = "tls")]
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `within` from now; far in the future rather than an overflow for absurd bounds.
pub fn deadline_in(within: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(within)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// What `ROLE` says of a master: its replication offset and each connected replica's
/// acknowledged offset.
pub struct MasterRole {
    pub offset: u64,
    pub replicas: Vec<((String, u16), u64)>,
}

/// `ROLE`'s reply, which must say `master`. A user whose ACL does not allow ROLE cannot have
/// its replicas checked by name.
fn role(reply: Option<Value>, shown: &str) -> Result<MasterRole, RedisFailure> {
    let reply = reply.unwrap_or(Value::Nil);
    if let Value::ServerError(err) = &reply {
        let failure = RedisFailure::from_redis(&err.clone().into(), shown);
        return Err(if err.code() == "NOPERM" {
            failure.with_hint(
                " (with Sentinel, --min-replicas checks with ROLE which replicas have each write: allow the user +role)",
            )
        } else {
            failure
        });
    }
    parse_master_role(&reply).ok_or_else(|| {
        let mut failure = RedisFailure::unexpected_reply(shown, "ROLE", &reply);
        if matches!(&reply, Value::Array(parts) if parts.first().and_then(text).as_deref() != Some("master"))
        {
            // Demoted since it was named: worth asking the sentinels again.
            failure.kind = crate::lock::FailureKind::Unreachable;
        }
        failure
    })
}

/// `["master", offset, [[ip, port, offset], ...]]`, or `None` for any other shape (a replica).
pub fn parse_master_role(reply: &Value) -> Option<MasterRole> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [kind, offset, replicas] = parts.as_slice() else {
        return None;
    };
    if text(kind)? != "master" {
        return None;
    }
    let Value::Array(replicas) = replicas else {
        return None;
    };
    let replicas = replicas
        .iter()
        .map(|replica| match replica {
            Value::Array(fields) => match fields.as_slice() {
                [ip, port, offset] => {
                    Some(((text(ip)?, text(port)?.parse().ok()?), number(offset)?))
                }
                _ => None,
            },
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(MasterRole {
        offset: number(offset)?,
        replicas,
    })
}

/// A bulk or simple string reply as text.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// An integer reply, or a string that holds one (ROLE gives replica offsets as strings).
fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// The script, `ROLE`, a WAIT for `ack` and `ROLE` again, in one pipeline (see
/// `Server::script_confirmed`).
fn confirmed(cmd: redis::Cmd, ack: ReplicaAck) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd);
    pipe.cmd("ROLE");
    pipe.add_command(wait(ack));
    pipe.cmd("ROLE");
    pipe.ignore_errors();
    pipe
}

/// An open connection, the number it was opened under, and how many calls wait on it.
#[derive(Clone)]
struct Open {
    conn: MultiplexedConnection,
    id: u64,
    waiting: Rc<Cell<u32>>,
}

impl Open {
    fn new(conn: MultiplexedConnection, id: u64) -> Open {
        Open {
            conn,
            id,
            waiting: Rc::new(Cell::new(0)),
        }
    }

    /// Counts a call as waiting on this connection until the guard is dropped.
    fn wait(&self) -> Waiting {
        self.waiting.set(self.waiting.get() + 1);
        Waiting(self.waiting.clone())
    }
}

/// A call waiting on a connection (see [`Open::wait`]).
struct Waiting(Rc<Cell<u32>>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// Drops the connection a call was sent on when the call is dropped before it finished.
struct ForgetOnDrop<'a>(Option<(&'a Server, &'a Cell<Option<u64>>)>);

impl ForgetOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((server, used)) = self.0
            && let Some(id) = used.get()
        {
            server.forget(id);
        }
    }
}

pub fn with_wait(cmd: redis::Cmd, ack: Option<ReplicaAck>) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd);
    if let Some(ack) = ack {
        pipe.add_command(wait(ack));
    }
    // Error replies come back as values, so NOSCRIPT can be told from other errors.
    pipe.ignore_errors();
    pipe
}

/// `WAIT` for `ack`.
fn wait(ack: ReplicaAck) -> redis::Cmd {
    let ms = u64::try_from(ack.timeout.as_millis()).unwrap_or(u64::MAX);
    // WAIT 0 would mean "wait for ever": never send it.
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(ack.replicas).arg(ms.max(1));
    cmd
}

pub fn is_noscript(reply: Option<&Value>) -> bool {
    matches!(reply, Some(Value::ServerError(e)) if e.code() == "NOSCRIPT")
}

/// The replies of a script pipeline (`with_wait`) as the script's reply and, with `ack`, how
/// many replicas acknowledged; an error reply of either as a failure of `shown`.
pub fn script_reply(
    replies: Vec<Value>,
    ack: Option<ReplicaAck>,
    shown: &str,
) -> Result<ScriptReply, RedisFailure> {
    let mut replies = replies.into_iter();
    let value = replies.next().unwrap_or(Value::Nil);
    if let Value::ServerError(err) = value {
        return Err(RedisFailure::from_redis(&err.into(), shown));
    }
    let acked = match (ack, replies.next()) {
        (None, _) => None,
        (Some(_), Some(Value::Int(n))) => Some(u32::try_from(n).unwrap_or(0)),
        (Some(_), Some(Value::ServerError(err))) => {
            return Err(RedisFailure::from_redis(&err.into(), shown));
        }
        (Some(_), other) => {
            return Err(RedisFailure::unexpected(
                shown,
                format!("unexpected reply to WAIT: {other:?}"),
            ));
        }
    };
    Ok(ScriptReply {
        value,
        acked,
        unconfirmed: Vec::new(),
    })
}

/// The first error reply among `replies`, as a failure.
pub fn first_error(replies: &[Value], shown: &str) -> Option<RedisFailure> {
    replies.iter().find_map(|v| match v {
        Value::ServerError(err) => Some(RedisFailure::from_redis(&err.clone().into(), shown)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_a_master_role_with_its_replicas() {
        let reply = Value::Array(vec![
            bulk("master"),
            Value::Int(3129659),
            Value::Array(vec![
                Value::Array(vec![bulk("127.0.0.1"), bulk("9001"), bulk("3129242")]),
                Value::Array(vec![bulk("::1"), bulk("9002"), bulk("3129543")]),
            ]),
        ]);
        let role = parse_master_role(&reply).expect("a master");
        assert_eq!(role.offset, 3129659);
        assert_eq!(
            role.replicas,
            vec![
                (("127.0.0.1".to_owned(), 9001), 3129242),
                (("::1".to_owned(), 9002), 3129543)
            ]
        );
    }

    #[test]
    fn a_replica_or_an_odd_reply_is_no_master_role() {
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(9000),
            bulk("connected"),
            Value::Int(3167038),
        ]);
        assert!(parse_master_role(&replica).is_none());
        let bad_port = Value::Array(vec![
            bulk("master"),
            Value::Int(1),
            Value::Array(vec![Value::Array(vec![
                bulk("127.0.0.1"),
                bulk("x"),
                bulk("1"),
            ])]),
        ]);
        assert!(parse_master_role(&bad_port).is_none());
        assert!(parse_master_role(&Value::Nil).is_none());
    }
}
