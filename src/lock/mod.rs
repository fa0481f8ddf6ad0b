//! The lock protocol on one Redis server: acquire, renew, release, replica acknowledgement and
//! status. Each operation is one Lua script (EVALSHA, falling back to EVAL after NOSCRIPT), so
//! no step is ever split between a check and a write. Nothing here decides *when* to call
//! these: that is the supervisor's job (`run.rs`).

mod error;
mod keys;
mod token;

use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use redis::{Script, Value};

pub use error::{FailureKind, RedisFailure};
pub use keys::Keys;
pub use token::new_token;

use crate::config::Target;

/// How long the fence counter outlives the last acquisition. Losing it is harmless (the
/// server clock carries the fence on, see acquire.lua); keeping it forever would leave one key
/// behind for every lock name ever used.
const FENCE_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// What `acquire` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is ours; the fence of this acquisition.
    Yes { fence: u64 },
    /// Someone else holds it.
    Busy(Holder),
}

/// What is known about the current holder of a busy lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// Remaining TTL in ms; `None` when the key has no TTL (a foreign lock that never expires).
    pub ttl_ms: Option<u64>,
    /// Host and pid of a redlock-run holder; `None` for a foreign value.
    pub host: Option<String>,
    pub pid: Option<u32>,
}

/// What `release` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Released,
    /// The key holds another value: someone else has the lock now. Left untouched.
    HeldByOther,
    /// The key had already expired or been deleted.
    Gone,
}

/// Who holds a lock, for `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    pub held: bool,
    /// The lock is held by a value that is not a redlock-run token with holder info.
    pub foreign: bool,
    pub ttl_ms: Option<u64>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub command: Option<String>,
    pub acquired_ms: Option<u64>,
    pub fence: Option<u64>,
}

/// The information stored beside the lock for `status`.
#[derive(Debug, Clone)]
pub struct HolderInfo {
    pub host: String,
    pub pid: u32,
    pub command: String,
}

/// One lock on one Redis server.
#[derive(Clone)]
pub struct Lock {
    client: redis::Client,
    conn: ConnectionManager,
    keys: Keys,
    server: String,
    timeout: Duration,
}

fn acquire_script() -> Script {
    Script::new(include_str!("scripts/acquire.lua"))
}
fn renew_script() -> Script {
    Script::new(include_str!("scripts/renew.lua"))
}
fn release_script() -> Script {
    Script::new(include_str!("scripts/release.lua"))
}

impl Lock {
    /// Connect to the server of `target`. Fails with an `Unreachable`/`Auth` failure when the
    /// server cannot be reached within the timeout or refuses the credentials.
    pub async fn connect(target: &Target) -> Result<Lock, RedisFailure> {
        let server = target.redis_shown.clone();
        #[cfg(feature = "tls")]
        if matches!(target.redis.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; a second install is a no-op error.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        // No CLIENT SETINFO on connect: one round trip less per run, and Redis < 7.2 rejects it.
        let settings = target
            .redis
            .redis_settings()
            .clone()
            .set_skip_set_lib_name();
        let info = target.redis.clone().set_redis_settings(settings);
        let client =
            redis::Client::open(info).map_err(|e| RedisFailure::from_redis(&e, &server))?;
        // Replies are bounded per call by the callers (a renewal by the lease deadline), so the
        // manager itself sets no response timeout. Reconnects happen in the background.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(target.timeout))
            .set_response_timeout(None)
            // The callers retry on their own schedule (renewals every 100 ms until the lease
            // runs out), so one attempt per reconnect; it also makes an unreachable server at
            // start fail at once instead of after a backoff.
            .set_number_of_retries(0);
        let conn = tokio::time::timeout(
            target.timeout,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| RedisFailure::timeout(&server, "the connection attempt"))?
        .map_err(|e| RedisFailure::from_redis(&e, &server))?;
        Ok(Lock {
            client,
            conn,
            keys: Keys::new(&target.key),
            server,
            timeout: target.timeout,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// One attempt: SET NX PX with a new fence and holder info, or report the holder.
    pub async fn acquire(
        &self,
        token: &str,
        ttl: Duration,
        holder: &HolderInfo,
    ) -> Result<Acquired, RedisFailure> {
        let script = acquire_script();
        let mut invocation = script.key(&self.keys.lock);
        invocation
            .key(&self.keys.fence)
            .key(&self.keys.holder)
            .arg(token)
            .arg(millis(ttl))
            .arg(millis(FENCE_KEEP))
            .arg(&holder.host)
            .arg(holder.pid)
            .arg(&holder.command);
        let reply: Value = self
            .bounded("acquire", invocation.invoke_async(&mut self.conn.clone()))
            .await?;
        parse_acquire(&reply).ok_or_else(|| {
            RedisFailure::unexpected(
                &self.server,
                format!("unexpected reply to acquire: {reply:?}"),
            )
        })
    }

    /// Extend the lease to `ttl` if the token is still ours. `Ok(false)`: the lock is lost.
    pub async fn renew(
        &self,
        token: &str,
        ttl: Duration,
        bound: Duration,
    ) -> Result<bool, RedisFailure> {
        let script = renew_script();
        let mut invocation = script.key(&self.keys.lock);
        invocation
            .key(&self.keys.holder)
            .arg(token)
            .arg(millis(ttl));
        let reply: i64 =
            tokio::time::timeout(bound, invocation.invoke_async(&mut self.conn.clone()))
                .await
                .map_err(|_| RedisFailure::timeout(&self.server, "the renewal"))?
                .map_err(|e| RedisFailure::from_redis(&e, &self.server))?;
        Ok(reply == 1)
    }

    /// Release if ours. With `keep` > 0 the lock is left to expire after `keep` instead.
    pub async fn release(&self, token: &str, keep: Duration) -> Result<Released, RedisFailure> {
        let script = release_script();
        let mut invocation = script.key(&self.keys.lock);
        invocation
            .key(&self.keys.holder)
            .key(&self.keys.released)
            .arg(token)
            .arg(millis(keep));
        let reply: i64 = self
            .bounded("release", invocation.invoke_async(&mut self.conn.clone()))
            .await?;
        Ok(match reply {
            1 => Released::Released,
            0 => Released::HeldByOther,
            _ => Released::Gone,
        })
    }

    /// Wait until `replicas` replicas have acknowledged this connection's writes, or `timeout`.
    /// Returns how many did.
    pub async fn wait_replicas(
        &self,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32, RedisFailure> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(millis(timeout).max(1));
        // WAIT replies after at most `timeout` (plus the server's 100 ms timer tick).
        let bound = timeout + Duration::from_millis(500) + self.timeout;
        let acked: i64 = tokio::time::timeout(bound, cmd.query_async(&mut self.conn.clone()))
            .await
            .map_err(|_| RedisFailure::timeout(&self.server, "WAIT"))?
            .map_err(|e| RedisFailure::from_redis(&e, &self.server))?;
        Ok(u32::try_from(acked).unwrap_or(0))
    }

    /// Subscribe to release announcements of this lock, on a connection of its own. `None` if
    /// that fails: waiting then falls back to polling alone.
    pub async fn release_notices(&self) -> Option<ReleaseNotices> {
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await.ok()?;
            pubsub.subscribe(&self.keys.released).await.ok()?;
            let (sink, stream) = pubsub.split();
            Some(ReleaseNotices {
                _sink: sink,
                stream,
            })
        };
        tokio::time::timeout(self.timeout, subscribe)
            .await
            .ok()
            .flatten()
    }

    /// Who holds the lock now. Read-only.
    pub async fn status(&self) -> Result<Status, RedisFailure> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(&self.keys.lock)
            .cmd("PTTL")
            .arg(&self.keys.lock)
            .cmd("HGETALL")
            .arg(&self.keys.holder)
            .cmd("GET")
            .arg(&self.keys.fence);
        type Reply = (Option<String>, i64, Vec<(String, String)>, Option<String>);
        let (value, pttl, info, fence): Reply = self
            .bounded("status", pipe.query_async(&mut self.conn.clone()))
            .await?;
        Ok(status_from(value, pttl, info, fence))
    }

    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, RedisFailure> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| RedisFailure::timeout(&self.server, what))?
            .map_err(|e| RedisFailure::from_redis(&e, &self.server))
    }
}

/// Announcements that the lock was released. A hint only: a missed or late message costs one
/// poll interval, and expiry (a holder that died) is never announced.
pub struct ReleaseNotices {
    /// Kept so the subscription stays open.
    _sink: PubSubSink,
    stream: PubSubStream,
}

impl ReleaseNotices {
    /// The next announcement; pending forever once the connection is gone.
    pub async fn next(&mut self) {
        if self.stream.next().await.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn parse_acquire(reply: &Value) -> Option<Acquired> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.first()? {
        Value::Int(1) => Some(Acquired::Yes {
            fence: text(items.get(1)?)?.parse().ok()?,
        }),
        Value::Int(0) => {
            let pttl = match items.get(1)? {
                Value::Int(n) => *n,
                _ => return None,
            };
            let host = items.get(2).and_then(text).filter(|s| !s.is_empty());
            let pid = items.get(3).and_then(text).and_then(|s| s.parse().ok());
            Some(Acquired::Busy(Holder {
                ttl_ms: u64::try_from(pttl).ok(),
                host,
                pid,
            }))
        }
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn status_from(
    value: Option<String>,
    pttl: i64,
    info: Vec<(String, String)>,
    fence: Option<String>,
) -> Status {
    let Some(value) = value else {
        return Status::default();
    };
    let field = |name: &str| info.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let ttl_ms = u64::try_from(pttl).ok();
    // Holder info counts only if it was written for the value the lock holds now.
    if field("token").as_deref() != Some(value.as_str()) {
        return Status {
            held: true,
            foreign: true,
            ttl_ms,
            ..Status::default()
        };
    }
    Status {
        held: true,
        foreign: false,
        ttl_ms,
        host: field("host"),
        pid: field("pid").and_then(|p| p.parse().ok()),
        command: field("cmd"),
        acquired_ms: field("acquired_ms").and_then(|p| p.parse().ok()),
        fence: field("fence").or(fence).and_then(|f| f.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_acquire_replies() {
        let yes = Value::Array(vec![Value::Int(1), bulk("1733160000123457")]);
        assert_eq!(
            parse_acquire(&yes),
            Some(Acquired::Yes {
                fence: 1733160000123457
            })
        );
        let busy = Value::Array(vec![
            Value::Int(0),
            Value::Int(1500),
            bulk("web1"),
            bulk("42"),
        ]);
        assert_eq!(
            parse_acquire(&busy),
            Some(Acquired::Busy(Holder {
                ttl_ms: Some(1500),
                host: Some("web1".into()),
                pid: Some(42)
            }))
        );
        let foreign = Value::Array(vec![Value::Int(0), Value::Int(-1), bulk(""), bulk("")]);
        assert_eq!(
            parse_acquire(&foreign),
            Some(Acquired::Busy(Holder::default()))
        );
        assert_eq!(parse_acquire(&Value::Int(1)), None);
    }

    #[test]
    fn status_ignores_holder_info_of_another_value() {
        let info = vec![
            ("token".to_owned(), "old".to_owned()),
            ("host".to_owned(), "h".to_owned()),
        ];
        let s = status_from(Some("new".into()), 900, info, Some("7".into()));
        assert!(s.held && s.foreign);
        assert_eq!(s.host, None);
        assert_eq!(s.fence, None);
        assert_eq!(status_from(None, -2, vec![], None), Status::default());
    }
}
