//! The mutex: one string key whose value is the holder's token.
//!
//! Each operation is one Lua script, so no step is ever split between a check and a write:
//! - acquire: `SET lock token NX PX ttl`, a new fence and the holder info, or who holds it;
//! - renew: compare the token, then `PEXPIRE` the lock and the holder info;
//! - release: compare the token, then delete (or expire later, `--hold-at-least`), telling
//!   released, held by another, and already gone apart; announce the release.
//!
//! This file builds the calls and reads the replies; a topology sends them.

use std::time::Duration;

use redis::Value;

use super::keys::{BadName, Keys};
use super::{Lua, ScriptCall};
use crate::lock::{Holder, HolderInfo, Released, Status};

static ACQUIRE: Lua = Lua::new(include_str!("scripts/acquire.lua"));
static RENEW: Lua = Lua::new(include_str!("scripts/renew.lua"));
static RELEASE: Lua = Lua::new(include_str!("scripts/release.lua"));
static CANCEL: Lua = Lua::new(include_str!("scripts/cancel.lua"));
static RAISE_FENCE: Lua = Lua::new(include_str!("scripts/raise_fence.lua"));

/// How long a cancelled acquire attempt is remembered: far longer than a request can linger
/// in TCP retransmissions or a middlebox after its connection was given up.
const CANCEL_KEEP: Duration = Duration::from_secs(10 * 60);

/// How long the fence counter outlives the last acquisition. Losing it is harmless (the
/// server clock carries the fence on, see acquire.lua); keeping it forever would leave one key
/// behind for every lock name ever used.
const FENCE_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// What one acquire script found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireReply {
    Granted { fence: u64 },
    Busy(Holder),
}

/// The mutex protocol for one lock name.
#[derive(Debug, Clone)]
pub struct Mutex {
    keys: Keys,
}

impl Mutex {
    pub fn new(name: &str) -> Result<Mutex, BadName> {
        Ok(Mutex {
            keys: Keys::new(name)?,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &ACQUIRE,
            &[&k.lock, &k.fence, &k.holder, &k.cancelled],
            vec![
                token.to_owned(),
                millis(ttl).to_string(),
                millis(FENCE_KEEP).to_string(),
                holder.host.clone(),
                holder.pid.to_string(),
                holder.command.clone(),
            ],
        )
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RENEW,
            &[&k.lock, &k.holder],
            vec![token.to_owned(), millis(ttl).to_string()],
        )
    }

    /// With `keep` > 0 the lock is left to expire after `keep` instead of being deleted.
    pub fn release(&self, token: &str, keep: Duration) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RELEASE,
            &[&k.lock, &k.holder, &k.released],
            vec![token.to_owned(), millis(keep).to_string()],
        )
    }

    /// Take back an acquire attempt whose reply was lost, and refuse it if it lands later.
    pub fn cancel(&self, token: &str) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &CANCEL,
            &[&k.lock, &k.holder, &k.released, &k.cancelled],
            vec![token.to_owned(), millis(CANCEL_KEEP).to_string()],
        )
    }

    /// Redlock's fence write-back: raise the counter to `fence` where the lock still holds
    /// `token` (counter := max(counter, fence)).
    pub fn raise_fence(&self, token: &str, fence: u64) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RAISE_FENCE,
            &[&k.lock, &k.fence, &k.holder],
            vec![
                token.to_owned(),
                fence.to_string(),
                millis(FENCE_KEEP).to_string(),
            ],
        )
    }

    /// A read-only pipeline: the value, its TTL, the holder info and the fence counter.
    pub fn status(&self) -> redis::Pipeline {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(&k.lock)
            .cmd("PTTL")
            .arg(&k.lock)
            .cmd("HGETALL")
            .arg(&k.holder)
            .cmd("GET")
            .arg(&k.fence);
        // Error replies (WRONGTYPE, NOAUTH) come back as values, to be classified.
        pipe.ignore_errors();
        pipe
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `{1, fence}` when acquired, `{0, pttl, host, pid, acquired_ms}` when busy; `{2}` (an
/// attempt with a token its run cancelled) is `None`, like any reply of another shape.
pub fn parse_acquire(reply: &Value) -> Option<AcquireReply> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.first()? {
        Value::Int(1) => Some(AcquireReply::Granted {
            fence: text(items.get(1)?)?.parse().ok()?,
        }),
        Value::Int(0) => {
            let pttl = match items.get(1)? {
                Value::Int(n) => *n,
                _ => return None,
            };
            let host = items.get(2).and_then(text).filter(|s| !s.is_empty());
            let pid = items.get(3).and_then(text).and_then(|s| s.parse().ok());
            let acquired_ms = items.get(4).and_then(text).and_then(|s| s.parse().ok());
            Some(AcquireReply::Busy(Holder {
                ttl_ms: u64::try_from(pttl).ok(),
                host,
                pid,
                acquired_ms,
            }))
        }
        _ => None,
    }
}

/// 1 renewed, 0 the token is gone. `Some(true)` when renewed.
pub fn parse_renew(reply: &Value) -> Option<bool> {
    match reply {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

/// `{2}`: the acquire script refused a token that its run had cancelled on this server.
pub fn is_cancelled(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if items.as_slice() == [Value::Int(2)])
}

/// 1 the counter was raised (the token was there), 0 the token is gone.
pub fn parse_raise_fence(reply: &Value) -> Option<bool> {
    parse_renew(reply)
}

/// 1 released, 0 held by another value, -1 already gone.
pub fn parse_release(reply: &Value) -> Option<Released> {
    match reply {
        Value::Int(1) => Some(Released::Released),
        Value::Int(0) => Some(Released::HeldByOther),
        Value::Int(-1) => Some(Released::Gone),
        _ => None,
    }
}

pub fn parse_status(reply: Value) -> Option<Status> {
    type Reply = (Option<String>, i64, Vec<(String, String)>, Option<String>);
    let (value, pttl, info, fence): Reply = redis::from_redis_value(reply).ok()?;
    Some(status_from(value, pttl, info, fence))
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
        ..Status::default()
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
            Some(AcquireReply::Granted {
                fence: 1733160000123457
            })
        );
        let busy = Value::Array(vec![
            Value::Int(0),
            Value::Int(1500),
            bulk("web1"),
            bulk("42"),
            bulk("1796235611000"),
        ]);
        assert_eq!(
            parse_acquire(&busy),
            Some(AcquireReply::Busy(Holder {
                ttl_ms: Some(1500),
                host: Some("web1".into()),
                pid: Some(42),
                acquired_ms: Some(1796235611000),
            }))
        );
        let foreign = Value::Array(vec![Value::Int(0), Value::Int(-1), bulk(""), bulk("")]);
        assert_eq!(
            parse_acquire(&foreign),
            Some(AcquireReply::Busy(Holder::default()))
        );
        assert_eq!(parse_acquire(&Value::Int(1)), None);
    }

    #[test]
    fn parses_release_and_renew_replies() {
        assert_eq!(parse_release(&Value::Int(1)), Some(Released::Released));
        assert_eq!(parse_release(&Value::Int(0)), Some(Released::HeldByOther));
        assert_eq!(parse_release(&Value::Int(-1)), Some(Released::Gone));
        assert_eq!(parse_release(&Value::Int(7)), None);
        assert_eq!(parse_renew(&Value::Int(1)), Some(true));
        assert_eq!(parse_renew(&Value::Int(0)), Some(false));
        assert_eq!(parse_renew(&Value::Nil), None);
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

    #[test]
    fn calls_name_their_keys_and_arguments() {
        let m = Mutex::new("redlock:k").unwrap();
        let call = m.release("tok", Duration::from_millis(1500));
        assert_eq!(call.first_key(), "redlock:k");
        let packed = String::from_utf8(call.eval().get_packed_command()).unwrap();
        for part in ["EVAL", "redlock:k", "{redlock:k}:holder", "tok", "1500"] {
            assert!(packed.contains(part), "{part} missing from {packed}");
        }
        let sha = String::from_utf8(call.evalsha().get_packed_command()).unwrap();
        assert!(sha.starts_with("*8\r\n$7\r\nEVALSHA\r\n$40\r\n"), "{sha}");
    }
}
