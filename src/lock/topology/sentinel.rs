//! The mutex on a master found through Redis Sentinel: `redis+sentinel://` URLs.
//!
//! The lock logic is `single.rs`'s, unchanged ([`Single`] over a [`Node`]); what this file
//! adds is the node, [`Sentinel`]: a [`Server`] for the master that the sentinels name now.
//!
//! - **Asked, then checked.** The sentinels are asked in turn (the one that answered last
//!   first) with `SENTINEL GET-MASTER-ADDR-BY-NAME`, each within its share of the time left;
//!   the address named is used only after `ROLE` on it says `master`. A sentinel that is
//!   down, does not know the name, or names a server that is not a master, is passed over.
//! - **Used until its first failure, never redialled.** A connection error, a timeout, a
//!   reply that may be lost, `READONLY` (the master was demoted), `LOADING` or `MASTERDOWN`
//!   drops the whole server, address included: the next call asks the sentinels again. A
//!   server redialled at a remembered address could be the old master killed and restarted
//!   empty, which says `ROLE master` and takes writes for seconds before the sentinels
//!   demote it; a lock taken there would be a second holder. `READONLY` is reported as a
//!   transient failure, so that a renewal or a waiting acquire tries again (on the new
//!   master) instead of giving up. With `--min-replicas`, too few acknowledgements drop the
//!   server too: after a failover the old master, still up, keeps taking writes for seconds
//!   until the sentinels demote it, but its replicas have already left it.
//! - **Asked again every second.** Before a call on a master named more than a second ago,
//!   the sentinels are asked (within a quarter of the call's bound) whether they still name
//!   it; if they name another, that one is used. An old master that stays up through a
//!   failover (a manual one, a partition) keeps taking writes until the sentinels demote
//!   it, and renewals sent there would let the lock expire on the new master. A check that
//!   gets no answer keeps the master.
//! - **Bounded.** The discovery (every sentinel asked, the ROLE check) is part of the call
//!   and ends within the call's bound, like the connection set-up of a single server.
//! - **Release notices** subscribe on the master of the moment. After a failover the
//!   subscription is gone, and a waiter polls alone (it is not re-subscribed).
//! - Sentinels are reached in plain text; `rediss+sentinel://` is TLS to the data nodes,
//!   with the `--tls-*` certificates. Sentinels hand out IP addresses, so the data nodes'
//!   certificates need IP subject alternative names.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, Value};
use tokio::time::Instant;

use super::server::{deadline_in, ScriptReply, Server};
use super::single::{protocol_for, Node, Single};
use crate::config::{Target, Tls};
use crate::lock::protocol::ScriptCall;
use crate::lock::{FailureKind, RedisFailure, ReleaseNotices, ReplicaAck};
use crate::sentinel_url::SentinelSpec;

/// The mutex on the master that the sentinels of `spec` name, found within `within`:
/// an unreachable set-up is reported before anything else happens.
pub async fn open(
    spec: &SentinelSpec,
    target: &Target,
    ack: Option<ReplicaAck>,
    within: Duration,
) -> Result<Single<Sentinel>, RedisFailure> {
    let protocol = protocol_for(target)?;
    let node = Sentinel {
        spec: spec.clone(),
        tls: target.tls.clone(),
        shown: target.redis_shown.clone(),
        master: RefCell::new(None),
        first: Cell::new(0),
    };
    node.master(deadline_in(within)).await?;
    Ok(Single::on(node, protocol, ack, target))
}

/// The master named by the sentinels, found again after every failure.
pub struct Sentinel {
    spec: SentinelSpec,
    tls: Tls,
    /// The `--redis` URL, redacted.
    shown: String,
    /// The master in use: named by a sentinel, confirmed by ROLE, and not failed since.
    master: RefCell<Option<InUse>>,
    /// The sentinel that answered last, asked first next time.
    first: Cell<usize>,
}

/// How long a master is used without asking the sentinels whether they still name it
/// (Redisson's scan interval).
const RECHECK: Duration = Duration::from_secs(1);

/// The master in use.
#[derive(Clone)]
struct InUse {
    server: Rc<Server>,
    /// Its address as the sentinels named it.
    addr: (String, u16),
    /// When a sentinel last named it.
    named: Instant,
}

impl Sentinel {
    /// The master in use, or a new one from the sentinels, by `deadline`.
    async fn master(&self, deadline: Instant) -> Result<Rc<Server>, RedisFailure> {
        let in_use = self.master.borrow().clone();
        if let Some(in_use) = in_use {
            if in_use.named.elapsed() < RECHECK || self.still_named(&in_use, deadline).await {
                return Ok(in_use.server);
            }
            self.master.borrow_mut().take();
        }
        let (server, addr) = self.discover(deadline).await?;
        let server = Rc::new(server);
        *self.master.borrow_mut() = Some(InUse {
            server: server.clone(),
            addr,
            named: Instant::now(),
        });
        Ok(server)
    }

    /// Whether the sentinels still name `in_use` (also when none answers in a quarter of the
    /// time left: no news is no reason to leave a master that works). A master that stays
    /// up through a failover (a manual one, a partition) keeps taking writes until the
    /// sentinels demote it, seconds later; meanwhile the lock on the new master would
    /// expire under a holder that renews on the old one.
    async fn still_named(&self, in_use: &InUse, deadline: Instant) -> bool {
        let until = deadline_in(deadline.saturating_duration_since(Instant::now()) / 4);
        let count = self.spec.sentinels.len();
        for i in 0..count {
            let (host, port) = &self.spec.sentinels[(self.first.get() + i) % count];
            let share = until.saturating_duration_since(Instant::now()) / (count - i) as u32;
            let share_end = deadline_in(share).min(until);
            let asked = self.ask_sentinel(host, *port, share_end);
            if let Ok(Ok(Some(named))) = tokio::time::timeout_at(share_end, asked).await {
                if named != in_use.addr {
                    return false;
                }
                if let Some(in_use) = self.master.borrow_mut().as_mut() {
                    in_use.named = Instant::now();
                }
                return true;
            }
        }
        true
    }

    /// Ask the sentinels in turn until one names a server that says it is the master.
    async fn discover(&self, deadline: Instant) -> Result<(Server, (String, u16)), RedisFailure> {
        let count = self.spec.sentinels.len();
        let mut failures = Vec::new();
        // Addresses already found wanting in this round: not tried again.
        let mut tried: Vec<(String, u16)> = Vec::new();
        for i in 0..count {
            let index = (self.first.get() + i) % count;
            let (host, port) = &self.spec.sentinels[index];
            // An equal share of the time left for each sentinel not yet asked: a sentinel
            // that never answers (a dead host, a black hole) cannot use up the others' time.
            let share = deadline.saturating_duration_since(Instant::now()) / (count - i) as u32;
            let share_end = deadline_in(share).min(deadline);
            let answer =
                tokio::time::timeout_at(share_end, self.ask(host, *port, &mut tried, share_end))
                    .await
                    .unwrap_or_else(|_| {
                        Err(unreachable(
                            &format!("sentinel {}", addr(host, *port)),
                            "no answer in time",
                        ))
                    });
            match answer {
                Ok(server) => {
                    self.first.set(index);
                    return Ok(server);
                }
                Err(failure) => failures.push(failure),
            }
        }
        Err(self.no_master(failures))
    }

    /// Ask the sentinel at `host:port` for the master, and check what it names: a server
    /// that said ROLE master, or why this sentinel gave none.
    async fn ask(
        &self,
        host: &str,
        port: u16,
        tried: &mut Vec<(String, u16)>,
        until: Instant,
    ) -> Result<(Server, (String, u16)), RedisFailure> {
        let sentinel = format!("sentinel {}", addr(host, port));
        let Some(named) = self.ask_sentinel(host, port, until).await? else {
            return Err(RedisFailure::unexpected(
                &sentinel,
                format!("does not know a master named '{}'", self.spec.master),
            ));
        };
        if tried.contains(&named) {
            return Err(unreachable(
                &sentinel,
                &format!("names {} again", addr(&named.0, named.1)),
            ));
        }
        tried.push(named.clone());
        let server = self.data_node(&named.0, named.1)?;
        if !is_master(&server, until).await? {
            return Err(unreachable(
                server.shown(),
                &format!("{sentinel} names it, but it is not a master (ROLE)"),
            ));
        }
        Ok((server, named))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` on one sentinel: `None` if it knows no such master.
    async fn ask_sentinel(
        &self,
        host: &str,
        port: u16,
        until: Instant,
    ) -> Result<Option<(String, u16)>, RedisFailure> {
        let shown = format!("sentinel {}", addr(host, port));
        let failure = |e: redis::RedisError| {
            let f = RedisFailure::from_redis(&e, &shown).not_sent();
            if f.kind == FailureKind::Auth {
                f.with_hint(" (a sentinel's own login comes from sentinel_username and sentinel_password or sentinel_password_file in the URL)")
            } else {
                f
            }
        };
        let settings = self.spec.sentinel_auth.clone().set_skip_set_lib_name();
        let info = ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()
            .map_err(failure)?
            .set_redis_settings(settings);
        let client = redis::Client::open(info).map_err(failure)?;
        let left = until.saturating_duration_since(Instant::now());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(left))
            .set_response_timeout(Some(left));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(failure)?;
        let reply: Value = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.spec.master)
            .query_async(&mut conn)
            .await
            .map_err(failure)?;
        match reply {
            Value::Nil => Ok(None),
            Value::Array(parts) => match parts.as_slice() {
                [host, port] => {
                    let host = text(host);
                    let port = text(port).and_then(|p| p.parse::<u16>().ok());
                    match (host, port) {
                        (Some(host), Some(port)) => Ok(Some((host, port))),
                        _ => Err(RedisFailure::unexpected(
                            &shown,
                            format!("unexpected reply to GET-MASTER-ADDR-BY-NAME: {parts:?}"),
                        )),
                    }
                }
                _ => Err(RedisFailure::unexpected(
                    &shown,
                    format!("unexpected reply to GET-MASTER-ADDR-BY-NAME: {parts:?}"),
                )),
            },
            other => Err(RedisFailure::unexpected(
                &shown,
                format!("unexpected reply to GET-MASTER-ADDR-BY-NAME: {other:?}"),
            )),
        }
    }

    /// A server for the data node at `host:port`, with the URL's login, database and TLS.
    fn data_node(&self, host: &str, port: u16) -> Result<Server, RedisFailure> {
        let shown = format!("{} (master {})", self.shown, addr(host, port));
        let address = if self.spec.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        };
        let info = address
            .into_connection_info()
            .map_err(|e| RedisFailure::from_redis(&e, &shown))?
            .set_redis_settings(self.spec.data.clone());
        Server::new(&info, &self.tls, &shown)
    }

    /// Every sentinel failed: one failure that says why, for each of them.
    fn no_master(&self, failures: Vec<RedisFailure>) -> RedisFailure {
        let reasons = failures
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        let detail = format!(
            "no sentinel named a usable master '{}' ({reasons})",
            self.spec.master
        );
        // A refused login or command, or a name no sentinel knows, will not mend by itself:
        // not worth another try.
        let any = |kind| failures.iter().any(|f| f.kind == kind);
        let mut failure = RedisFailure::unexpected(&self.shown, detail).not_sent();
        failure.kind = if any(FailureKind::Auth) {
            FailureKind::Auth
        } else if any(FailureKind::NoPermission) {
            FailureKind::NoPermission
        } else if failures.iter().all(|f| f.kind == FailureKind::Other) {
            FailureKind::Other
        } else {
            FailureKind::Unreachable
        };
        failure
    }

    /// After a call on `server`: a failure that says the master may be gone or demoted
    /// drops it, so that the next call asks the sentinels again.
    fn after<T>(&self, result: Result<T, RedisFailure>) -> Result<T, RedisFailure> {
        let Err(e) = result else { return result };
        if e.kind == FailureKind::ReadOnly {
            self.master.borrow_mut().take();
            // Nothing was written by a command refused with READONLY.
            return Err(unreachable(
                &e.server,
                "it is no longer the master (READONLY); asking the sentinels again",
            ));
        }
        if e.is_transient() || e.may_have_written() {
            self.master.borrow_mut().take();
        }
        Err(e)
    }
}

impl Node for Sentinel {
    fn shown(&self) -> &str {
        &self.shown
    }

    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<ScriptReply, RedisFailure> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let reply = self.after(server.script(call, ack, what, left).await)?;
        if ack.is_some_and(|a| reply.acked.unwrap_or(0) < a.replicas) {
            // Too few replicas: this master may have lost them to a failover (the sentinels
            // moved them to a new master while this one still takes writes). `Single`
            // refuses the write; the next call asks the sentinels again.
            self.master.borrow_mut().take();
        }
        Ok(reply)
    }

    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<Value, RedisFailure> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        self.after(server.eval(call, what, left).await)
    }

    async fn query(
        &self,
        pipe: &redis::Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Vec<Value>, RedisFailure> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        self.after(server.query(pipe, what, left).await)
    }

    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await).ok()?;
        let left = deadline.saturating_duration_since(Instant::now());
        server.subscribe(channel, left).await
    }
}

/// Whether `server` says it is a master. A user whose ACL does not allow ROLE is taken at the
/// sentinel's word: a demoted master still refuses the lock's writes with READONLY.
async fn is_master(server: &Server, until: Instant) -> Result<bool, RedisFailure> {
    let mut pipe = redis::pipe();
    pipe.cmd("ROLE").ignore_errors();
    let left = until.saturating_duration_since(Instant::now());
    let replies = server.query(&pipe, "ROLE", left).await?;
    match replies.first() {
        Some(Value::Array(role)) => Ok(role.first().and_then(text).as_deref() == Some("master")),
        Some(Value::ServerError(e)) if e.code() == "NOPERM" => Ok(true),
        Some(Value::ServerError(e)) => {
            Err(RedisFailure::from_redis(&e.clone().into(), server.shown()))
        }
        other => Err(RedisFailure::unexpected(
            server.shown(),
            format!("unexpected reply to ROLE: {other:?}"),
        )),
    }
}

/// A transient failure of `server`, in words: worth asking the sentinels again.
fn unreachable(server: &str, detail: &str) -> RedisFailure {
    let mut failure = RedisFailure::unexpected(server, detail).not_sent();
    failure.kind = FailureKind::Unreachable;
    failure
}

/// A bulk or simple string reply as text.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `host:port`, with IPv6 addresses in brackets.
fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
