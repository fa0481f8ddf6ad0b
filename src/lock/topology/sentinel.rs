//! The mutex on a master found through Redis Sentinel: `redis+sentinel://` URLs.
//!
//! The lock logic is `one_master.rs`'s; what this file adds is the route, [`Sentinel`]: a
//! [`Server`] for the master that the sentinels name now.
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
//! - **Acknowledged by every replica that could be promoted.** With `--min-replicas`, a
//!   grant or renewal counts only if each replica the sentinels could promote (the one being
//!   promoted; any other not flagged down, answering pings, priority not 0) has its write (`ROLE` offsets around a `WAIT`, `Server::script_confirmed`),
//!   besides the count asked for. A count alone lets an old master that still takes writes
//!   during a failover grant a lock acknowledged by a replica that is about to be resynced
//!   from the promoted one, which never saw it.
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
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, Pipeline, Value};
use tokio::time::Instant;

use super::one_master::{Answered, OneMaster, Route};
use super::server::{ScriptReply, Server, deadline_in, parse_master_role, text};
use super::shared::protocol_for;
use super::survey;
use crate::lock::protocol::ScriptCall;
use crate::lock::target::{SentinelSpec, Target, Tls};
use crate::lock::{FailureKind, ListQuery, Listing, RedisFailure, ReleaseNotices, ReplicaAck};

/// The mutex on the master that the sentinels of `spec` name, found within `within`:
/// an unreachable set-up is reported before anything else happens.
pub async fn open(
    spec: &SentinelSpec,
    target: &Target,
    ack: Option<ReplicaAck>,
    within: Duration,
) -> Result<OneMaster<Sentinel>, RedisFailure> {
    let protocol = protocol_for(target)?;
    let node = Sentinel {
        spec: spec.clone(),
        tls: target.tls.clone(),
        shown: Rc::from(target.redis_shown.as_str()),
        master: RefCell::new(None),
        first: Cell::new(0),
        heard: Cell::new(false),
        needs_replicas: ack.is_some(),
        resolved: RefCell::new(HashMap::new()),
    };
    match node.master(deadline_in(within)).await {
        Ok(_) => {}
        // The sentinels answer, but the master they name cannot be used yet (a failover
        // under way): a run that waits tries again within --wait; one that does not gets the
        // same failure from its first attempt.
        Err(e) if e.is_transient() && node.heard.get() => {}
        Err(e) => return Err(e),
    }
    Ok(OneMaster::new(node, protocol, ack, target))
}

/// The master named by the sentinels, found again after every failure.
pub struct Sentinel {
    spec: SentinelSpec,
    tls: Tls,
    /// The `--redis` URL, redacted (shared with every reply that names it).
    shown: Rc<str>,
    /// The master in use: named by a sentinel, confirmed by ROLE, and not failed since.
    master: RefCell<Option<InUse>>,
    /// The sentinel that answered last, asked first next time.
    first: Cell<usize>,
    /// Some sentinel answered since the lock was opened: the sentinels are there, whatever
    /// the master they name is doing (a failover under way).
    heard: Cell<bool>,
    /// `--min-replicas`: a sentinel that cannot list the replicas, or a master that does not
    /// let the user run ROLE, cannot be used.
    needs_replicas: bool,
    /// Host names of replicas, resolved once (see `unconfirmed`).
    resolved: RefCell<HashMap<String, Vec<IpAddr>>>,
}

/// How long a master is used without asking the sentinels whether they still name it
/// (Redisson's scan interval).
const RECHECK: Duration = Duration::from_secs(1);

/// The master in use.
#[derive(Clone)]
struct InUse {
    server: Rc<Server>,
    /// Its address and replicas as the sentinels named them.
    named: Named,
    /// When a sentinel last named it.
    at: Instant,
    /// Replicas connected to it at the last look (ROLE): a WAIT waits for all of them, so
    /// that it does not return before the ones that must have the write do.
    connected: u32,
}

/// A master as one sentinel names it.
#[derive(Clone)]
struct Named {
    addr: (String, u16),
    /// The replicas the sentinels could promote in a failover (see `promotable`). With
    /// `--min-replicas` each of them must acknowledge every grant and renewal; `Err` says why
    /// the sentinel could not list them.
    promotable: Result<Vec<(String, u16)>, RedisFailure>,
}

impl Sentinel {
    /// The master in use, or a new one from the sentinels, by `deadline`.
    async fn master(&self, deadline: Instant) -> Result<Rc<Server>, RedisFailure> {
        Ok(self.in_use(deadline).await?.server)
    }

    /// The master in use and what the sentinels said of it, or a new one, by `deadline`.
    async fn in_use(&self, deadline: Instant) -> Result<InUse, RedisFailure> {
        let in_use = self.master.borrow().clone();
        if let Some(in_use) = in_use {
            if in_use.at.elapsed() < RECHECK || self.still_named(&in_use, deadline).await {
                return Ok(self.master.borrow().clone().unwrap_or(in_use));
            }
            self.master.borrow_mut().take();
        }
        let (server, named, connected) = self.discover(deadline).await?;
        let in_use = InUse {
            server: Rc::new(server),
            named,
            at: Instant::now(),
            connected,
        };
        *self.master.borrow_mut() = Some(in_use.clone());
        Ok(in_use)
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
                if self.needs_replicas && named.promotable.is_err() {
                    // No use without the replicas: as if this sentinel had not answered.
                    continue;
                }
                if named.addr != in_use.named.addr {
                    return false;
                }
                if let Some(in_use) = self.master.borrow_mut().as_mut() {
                    in_use.at = Instant::now();
                    // The replicas too: one may have come back, gone down or been promoted.
                    in_use.named = named;
                }
                return true;
            }
        }
        true
    }

    /// Ask the sentinels in turn until one names a server that says it is the master.
    async fn discover(&self, deadline: Instant) -> Result<(Server, Named, u32), RedisFailure> {
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
    /// that said ROLE master (with the number of replicas connected to it), or why this
    /// sentinel gave none.
    async fn ask(
        &self,
        host: &str,
        port: u16,
        tried: &mut Vec<(String, u16)>,
        until: Instant,
    ) -> Result<(Server, Named, u32), RedisFailure> {
        let sentinel = format!("sentinel {}", addr(host, port));
        let Some(named) = self.ask_sentinel(host, port, until).await? else {
            return Err(RedisFailure::unexpected(
                &sentinel,
                format!("does not know a master named '{}'", self.spec.master),
            ));
        };
        if self.needs_replicas
            && let Err(e) = &named.promotable
        {
            return Err(e.clone());
        }
        let (host, port) = named.addr.clone();
        if tried.contains(&named.addr) {
            return Err(unreachable(
                &sentinel,
                &format!("names {} again", addr(&host, port)),
            ));
        }
        tried.push(named.addr.clone());
        let server = self.data_node(&host, port)?;
        let Some(connected) = master_role(&server, until, self.needs_replicas).await? else {
            return Err(unreachable(
                server.shown(),
                &format!("{sentinel} names it, but it is not a master (ROLE)"),
            ));
        };
        Ok((server, named, connected))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` and `SENTINEL REPLICAS` on one sentinel: `None` if
    /// it knows no such master.
    async fn ask_sentinel(
        &self,
        host: &str,
        port: u16,
        until: Instant,
    ) -> Result<Option<Named>, RedisFailure> {
        let shown = format!("sentinel {}", addr(host, port));
        let failure = |e: redis::RedisError| {
            let f = RedisFailure::from_redis(&e, &shown).not_sent();
            if f.is_auth() { f.of_a_sentinel() } else { f }
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
        let mut pipe = redis::pipe();
        pipe.cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.spec.master);
        pipe.cmd("SENTINEL").arg("REPLICAS").arg(&self.spec.master);
        pipe.cmd("SENTINEL").arg("MASTER").arg(&self.spec.master);
        pipe.ignore_errors();
        let replies: Vec<Value> = pipe.query_async(&mut conn).await.map_err(failure)?;
        self.heard.set(true);
        let mut replies = replies.into_iter();
        let unexpected = |what: &str, reply: &dyn std::fmt::Debug| {
            RedisFailure::unexpected(&shown, format!("unexpected reply to {what}: {reply:?}"))
        };
        let addr = match replies.next().unwrap_or(Value::Nil) {
            Value::Nil => return Ok(None),
            Value::ServerError(e) => return Err(failure(e.into())),
            Value::Array(parts) => match parts.as_slice() {
                [host, port] => match (text(host), text(port).and_then(|p| p.parse().ok())) {
                    (Some(host), Some(port)) => (host, port),
                    _ => return Err(unexpected("GET-MASTER-ADDR-BY-NAME", &parts)),
                },
                _ => return Err(unexpected("GET-MASTER-ADDR-BY-NAME", &parts)),
            },
            other => return Err(unexpected("GET-MASTER-ADDR-BY-NAME", &other)),
        };
        let replies_listed = replies.next().unwrap_or(Value::Nil);
        let promotable = match replies_listed.clone() {
            Value::ServerError(e) => Err(failure(e.into()).with_hint(
                " (with --min-replicas the wrapper asks the sentinels for the replicas with SENTINEL REPLICAS)",
            )),
            reply => promotable(&reply).ok_or_else(|| {
                RedisFailure::unexpected(&shown, "unexpected reply to SENTINEL REPLICAS")
            }),
        };
        // A replica with `replica-announced no` is left out of SENTINEL REPLICAS, yet
        // Sentinel may promote it: the lock cannot be checked against a replica it cannot
        // see. `num-slaves` counts every replica the sentinel knows.
        let listed = match &replies_listed {
            Value::Array(all) => all.len(),
            _ => 0,
        };
        let known = replies
            .next()
            .and_then(|master| field_of(&master, "num-slaves")?.parse::<usize>().ok());
        let promotable = promotable.and_then(|p| match known {
            Some(known) if known > listed => Err(RedisFailure::unexpected(
                &shown,
                format!(
                    "knows {known} replicas of '{}' but lists {listed}: a replica with replica-announced no cannot be checked for the lock's writes (--min-replicas)",
                    self.spec.master
                ),
            )
            .not_sent()),
            _ => Ok(p),
        });
        Ok(Some(Named { addr, promotable }))
    }

    /// A server for the data node at `host:port`, with the URL's login, database and TLS.
    fn data_node(&self, host: &str, port: u16) -> Result<Server, RedisFailure> {
        let shown = format!(
            "{} (master '{}' at {})",
            self.shown,
            self.spec.master,
            addr(host, port)
        );
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

    /// Every sentinel failed: one failure that says why, for each of them. A refused or
    /// missing login says it alone, as a single server's would (a master's first: the
    /// sentinel that named it worked): the other sentinels' answers ("names it again") would
    /// only bury it, and nothing is to be fixed but the login.
    fn no_master(&self, mut failures: Vec<RedisFailure>) -> RedisFailure {
        let login = failures
            .iter()
            .position(|f| f.is_auth() && !f.is_sentinel_login())
            .or_else(|| failures.iter().position(RedisFailure::is_auth));
        if let Some(i) = login {
            return failures.swap_remove(i).not_sent();
        }
        let reasons = failures
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        let detail = format!(
            "no sentinel named a usable master '{}' ({reasons})",
            self.spec.master
        );
        // A refused command, or a name no sentinel knows, will not mend by itself:
        // not worth another try.
        let any = |kind| failures.iter().any(|f| f.kind == kind);
        let mut failure = RedisFailure::unexpected(&self.shown, detail).not_sent();
        failure.kind = if any(FailureKind::NoPermission) {
            FailureKind::NoPermission
        } else if failures.iter().all(|f| f.kind == FailureKind::Other) {
            FailureKind::Other
        } else {
            FailureKind::Unreachable
        };
        failure
    }

    /// The replicas of `promotable` (as the sentinels list them) that are not among
    /// `have_it` (as the master lists them), as `host:port`. The two may name one replica
    /// differently: the sentinels list replicas by IP unless `announce-hostnames` is on,
    /// while a replica may announce a host name to its master (`replica-announce-ip`); such
    /// names are resolved (once, within the call's bound) and compared by address.
    async fn unconfirmed(
        &self,
        promotable: &[(String, u16)],
        have_it: &[(String, u16)],
        deadline: Instant,
    ) -> Vec<String> {
        let mut missing = Vec::new();
        'replica: for (host, port) in promotable {
            for (other, _) in have_it.iter().filter(|(_, p)| p == port) {
                if other == host {
                    continue 'replica;
                }
                let ours = self.resolve(host, deadline).await;
                let theirs = self.resolve(other, deadline).await;
                if ours.iter().any(|ip| theirs.contains(ip)) {
                    continue 'replica;
                }
            }
            missing.push(addr(host, *port));
        }
        missing
    }

    /// The addresses of `host` (itself if it is one); none if it cannot be resolved by
    /// `deadline`.
    async fn resolve(&self, host: &str, deadline: Instant) -> Vec<IpAddr> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return vec![ip];
        }
        if let Some(ips) = self.resolved.borrow().get(host) {
            return ips.clone();
        }
        let lookup = tokio::net::lookup_host((host, 0));
        let ips: Vec<IpAddr> = match tokio::time::timeout_at(deadline, lookup).await {
            Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
            _ => Vec::new(),
        };
        if !ips.is_empty() {
            self.resolved
                .borrow_mut()
                .insert(host.to_owned(), ips.clone());
        }
        ips
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

    /// A reply, named in messages by the `--redis` URL.
    fn answered<T>(&self, reply: T) -> Answered<T> {
        Answered {
            reply,
            by: self.shown.clone(),
        }
    }

    /// `Route::script` on the master in use; with `--min-replicas`, confirmed by every
    /// replica the sentinels could promote.
    async fn confirmed_script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<ScriptReply, RedisFailure> {
        let deadline = deadline_in(within);
        let in_use = self.after(self.in_use(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(ack) = ack else {
            return self.after(in_use.server.script(call, None, what, left).await);
        };
        let promotable = match &in_use.named.promotable {
            Ok(promotable) => promotable.clone(),
            Err(e) => {
                self.master.borrow_mut().take();
                return Err(e.clone());
            }
        };
        // Every replica the sentinels could promote must have the write, not just some
        // number of replicas: a grant acknowledged only by a replica that is then resynced
        // from another new master is lost, and a second holder can take the lock there.
        // The WAIT waits for every replica connected now (at least --min-replicas and every
        // promotable one), so that it does not return before those that must have it do.
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let wanted = ReplicaAck {
            replicas: ack
                .replicas
                .max(count(promotable.len()))
                .max(in_use.connected),
            timeout: ack.timeout,
        };
        let confirmed = self.after(
            in_use
                .server
                .script_confirmed(call, wanted, what, left)
                .await,
        )?;
        if let Some(master) = self.master.borrow_mut().as_mut() {
            master.connected = confirmed.connected;
        }
        let unconfirmed = self
            .unconfirmed(&promotable, &confirmed.have_it, deadline)
            .await;
        let acked = count(confirmed.have_it.len());
        if acked < ack.replicas || !unconfirmed.is_empty() {
            // Too few replicas: this master may have lost them to a failover (the sentinels
            // moved them to a new master, or promoted one, while this one still takes
            // writes). `OneMaster` refuses the write; the next call asks the sentinels again.
            self.master.borrow_mut().take();
        }
        Ok(ScriptReply {
            value: confirmed.value,
            acked: Some(acked),
            unconfirmed,
        })
    }
}

impl Route for Sentinel {
    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<Answered<ScriptReply>, RedisFailure> {
        let reply = self.confirmed_script(call, ack, what, within).await?;
        Ok(self.answered(reply))
    }

    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<(), RedisFailure> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        self.after(server.eval(call, what, left).await).map(drop)
    }

    async fn read(
        &self,
        pipe: &Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Answered<Vec<Value>>, RedisFailure> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let replies = self.after(server.query(pipe, what, left).await)?;
        Ok(self.answered(replies))
    }

    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        let deadline = deadline_in(within);
        let server = self.after(self.master(deadline).await).ok()?;
        let left = deadline.saturating_duration_since(Instant::now());
        server.subscribe(channel, left).await
    }

    /// The master the sentinels name now: replicas hold the same keys, or older ones.
    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        let server = self.after(self.master(deadline_in(query.reply_within)).await)?;
        self.after(survey::one_server(&server, query).await)
    }
}

/// Whether `server` says it is a master, and then how many replicas are connected to it:
/// `None` if it is not a master. A user whose ACL does not allow ROLE is taken at the
/// sentinel's word (a demoted master still refuses the lock's writes with READONLY), with no
/// replica counted, unless its replicas must be checked (`--min-replicas`): that needs ROLE,
/// and is refused here, before anything is written.
async fn master_role(
    server: &Server,
    until: Instant,
    needs_replicas: bool,
) -> Result<Option<u32>, RedisFailure> {
    let mut pipe = redis::pipe();
    pipe.cmd("ROLE").ignore_errors();
    let left = until.saturating_duration_since(Instant::now());
    let replies = server.query(&pipe, "ROLE", left).await?;
    match replies.first() {
        Some(Value::Array(role)) if role.first().and_then(text).as_deref() != Some("master") => {
            Ok(None)
        }
        Some(reply @ Value::Array(_)) => match parse_master_role(reply) {
            Some(role) => Ok(Some(u32::try_from(role.replicas.len()).unwrap_or(u32::MAX))),
            None => Err(RedisFailure::unexpected(
                server.shown(),
                format!("unexpected reply to ROLE: {reply:?}"),
            )),
        },
        Some(Value::ServerError(e)) if e.code() == "NOPERM" && !needs_replicas => Ok(Some(0)),
        Some(Value::ServerError(e)) if e.code() == "NOPERM" => {
            Err(RedisFailure::from_redis(&e.clone().into(), server.shown()).with_hint(
                " (with Sentinel, --min-replicas checks with ROLE which replicas have each write: allow the user +role)",
            ))
        }
        Some(Value::ServerError(e)) => {
            Err(RedisFailure::from_redis(&e.clone().into(), server.shown()))
        }
        other => Err(RedisFailure::unexpected(
            server.shown(),
            format!("unexpected reply to ROLE: {other:?}"),
        )),
    }
}

/// The fields of a sentinel's description of an instance (a flat array of names and values,
/// or a map in RESP3); `None` for another shape.
fn fields(instance: &Value) -> Option<Vec<(String, String)>> {
    match instance {
        Value::Array(flat) => Some(
            flat.chunks(2)
                .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
                .collect(),
        ),
        Value::Map(pairs) => Some(
            pairs
                .iter()
                .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
                .collect(),
        ),
        _ => None,
    }
}

/// One field of a sentinel's description of an instance.
fn field_of(instance: &Value, name: &str) -> Option<String> {
    fields(instance)?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// How long a replica may leave Sentinel's pings unanswered and still be promoted: five ping
/// periods of one second (Sentinel's `sentinelSelectSlave`).
const SILENT_FOR_PROMOTION_MS: u64 = 5_000;

/// The replicas in a `SENTINEL REPLICAS` reply that Sentinel could promote: the one being
/// promoted, and any other not flagged down, answering pings and of priority not 0. `None` for a reply of another
/// shape.
fn promotable(reply: &Value) -> Option<Vec<(String, u16)>> {
    let Value::Array(replicas) = reply else {
        return None;
    };
    let mut out = Vec::new();
    for replica in replicas {
        let fields = fields(replica)?;
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let ip = field("ip")?;
        let port = field("port")?.parse().ok()?;
        let flags = field("flags").unwrap_or("");
        // The replica being promoted is the one that must have the lock above all: during a
        // failover the sentinels drop their links to it (flagged `disconnected`). A link
        // that is merely down is not enough to pass over a replica either: it may come back
        // within a second; a replica that stays silent is passed over below.
        let promoted = flags.split(',').any(|f| f == "promoted");
        let down = !promoted && flags.split(',').any(|f| matches!(f, "s_down" | "o_down"));
        let never = field("slave-priority").or(field("replica-priority")) == Some("0");
        // Sentinel does not promote a replica that has not answered its pings for five
        // ping periods (5 s); until the replica is flagged down (`down-after-milliseconds`,
        // 30 s by default) that is what keeps a frozen or cut-off replica from stopping
        // every holder.
        let silent = !promoted
            && field("last-ok-ping-reply")
                .and_then(|ms| ms.parse::<u64>().ok())
                .is_some_and(|ms| ms > SILENT_FOR_PROMOTION_MS);
        if !down && !never && !silent {
            out.push((ip.to_owned(), port));
        }
    }
    Some(out)
}

/// A transient failure of `server`, in words: worth asking the sentinels again.
fn unreachable(server: &str, detail: &str) -> RedisFailure {
    let mut failure = RedisFailure::unexpected(server, detail).not_sent();
    failure.kind = FailureKind::Unreachable;
    failure
}

/// `host:port`, with IPv6 addresses in brackets.
fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(fields: &[(&str, &str)]) -> Value {
        Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| {
                    [
                        Value::BulkString(k.as_bytes().to_vec()),
                        Value::BulkString(v.as_bytes().to_vec()),
                    ]
                })
                .collect(),
        )
    }

    #[test]
    fn promotable_replicas_are_up_answering_and_of_nonzero_priority() {
        let reply = Value::Array(vec![
            replica(&[
                ("name", "127.0.0.1:7001"),
                ("ip", "127.0.0.1"),
                ("port", "7001"),
                ("flags", "slave"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7002"),
                ("flags", "s_down,slave"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7003"),
                ("flags", "slave,disconnected"),
                ("last-ok-ping-reply", "800"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7007"),
                ("flags", "slave,disconnected"),
                ("last-ok-ping-reply", "6000"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7008"),
                ("flags", "slave,disconnected,promoted"),
                ("last-ok-ping-reply", "6000"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7004"),
                ("flags", "slave"),
                ("slave-priority", "0"),
            ]),
            replica(&[
                ("ip", "127.0.0.1"),
                ("port", "7006"),
                ("flags", "slave"),
                ("last-ok-ping-reply", "5001"),
                ("slave-priority", "100"),
            ]),
            replica(&[
                ("ip", "10.0.0.5"),
                ("port", "7005"),
                ("last-ok-ping-reply", "4999"),
                ("flags", "slave,promoted"),
                ("slave-priority", "1"),
            ]),
        ]);
        assert_eq!(
            promotable(&reply),
            Some(vec![
                ("127.0.0.1".to_owned(), 7001),
                ("127.0.0.1".to_owned(), 7003),
                ("127.0.0.1".to_owned(), 7008),
                ("10.0.0.5".to_owned(), 7005)
            ])
        );
        assert_eq!(promotable(&Value::Array(vec![])), Some(vec![]));
        assert_eq!(promotable(&Value::Nil), None);
        assert_eq!(
            promotable(&Value::Array(vec![replica(&[("ip", "127.0.0.1")])])),
            None
        );
    }
}
