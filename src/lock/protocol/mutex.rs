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

use super::keys::{BadName, FENCE_KEEP, Keys};
use super::operator::{parse_mark, paused_from};
use super::record::{self, Finished};
use super::script::{Lua, ScriptCall};
use super::script::{millis, text};
use crate::lock::{Broken, Holder, HolderInfo, Kept, Released, Waiter};

static ACQUIRE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/acquire.lua")
));
static KEEP_PLACE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/keep_place.lua")
));
static RENEW: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/lost.lua"),
    include_str!("scripts/renew.lua")
));
static RELEASE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/record.lua"),
    include_str!("scripts/release.lua")
));
static CANCEL: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/cancel.lua")
));
static LEAVE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/leave.lua")
));
static RAISE_FENCE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/raise_fence.lua")
));

/// How long a cancelled acquire attempt is remembered: far longer than a request can linger
/// in TCP retransmissions or a middlebox after its connection was given up.
pub(super) const CANCEL_KEEP: Duration = Duration::from_secs(10 * 60);

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

    /// With `holder.waiter`, in arrival order: see acquire.lua.
    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        let k = &self.keys;
        let names = [
            k.fence.as_str(),
            &k.holder,
            &k.cancelled,
            &k.queue,
            &k.queue_expiry,
        ];
        ScriptCall::new(&ACQUIRE, &k.lock, &names, acquire_args(token, ttl, holder))
            // The pause key and the note; then --shared's set of shared holders, the limit key
            // and the holders hash (acquire.lua).
            .then(vec![
                k.pause.clone(),
                holder.note.clone(),
                k.shared.clone(),
                k.limit.clone(),
                k.holders.clone(),
            ])
            .needing_moved(&[
                &k.fence,
                &k.holder,
                &k.cancelled,
                &k.queue,
                &k.queue_expiry,
                &k.pause,
                &k.shared,
            ])
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RENEW,
            &k.lock,
            &[&k.holder],
            vec![token.to_owned(), millis(ttl).to_string()],
        )
        // The broken marks, read when the token is gone (lost.lua).
        .then(vec![k.broken.clone()])
        // Inside the lease: never EVALSHA, NOSCRIPT, EVAL in series.
        .in_full()
    }

    /// With `keep` > 0 the lock is left to expire after `keep` instead of being deleted;
    /// `record`: the run record written with the release while the token holds (record.rs).
    pub fn release(&self, token: &str, keep: Duration, record: Option<&Finished>) -> ScriptCall {
        let call = self.release_call(token, keep, true);
        match record {
            // 'creating' for record.lua, then the record (see ScriptCall::creating).
            Some(_) => call
                .creating()
                .then(record::args(&self.keys, token, record)),
            None => call,
        }
    }

    /// Give back a grant without announcing it: a grant on a minority of Redlock nodes, where
    /// the lock was never free.
    pub fn release_quietly(&self, token: &str) -> ScriptCall {
        self.release_call(token, Duration::ZERO, false)
    }

    fn release_call(&self, token: &str, keep: Duration, announce: bool) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RELEASE,
            &k.lock,
            &[&k.holder, &k.released, &k.queue, &k.queue_expiry],
            vec![
                token.to_owned(),
                millis(keep).to_string(),
                u8::from(announce).to_string(),
            ],
        )
    }

    /// Take back an acquire attempt whose reply was lost, and refuse it if it lands later.
    pub fn cancel(&self, token: &str) -> ScriptCall {
        self.cancel_call(token, true)
    }

    /// `cancel`, without announcing a release (see `release_quietly`).
    pub fn cancel_quietly(&self, token: &str) -> ScriptCall {
        self.cancel_call(token, false)
    }

    fn cancel_call(&self, token: &str, announce: bool) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &CANCEL,
            &k.lock,
            &[
                &k.holder,
                &k.released,
                &k.cancelled,
                &k.queue,
                &k.queue_expiry,
            ],
            vec![
                token.to_owned(),
                millis(CANCEL_KEEP).to_string(),
                u8::from(announce).to_string(),
            ],
        )
        .needing_moved(&[&k.cancelled])
    }

    /// Redlock's fence write-back: raise the counter to `fence` where the lock still holds
    /// `token` (counter := max(counter, fence)).
    pub fn raise_fence(&self, token: &str, fence: u64) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RAISE_FENCE,
            &k.lock,
            &[&k.fence, &k.holder],
            vec![
                token.to_owned(),
                fence.to_string(),
                millis(FENCE_KEEP).to_string(),
            ],
        )
        .needing_moved(&[&k.fence])
    }
}

/// The arguments both acquire scripts take first: token, ttl ms, fence counter ttl ms, host,
/// pid, command, waiter id ('' for a run that does not wait), how long its place is kept (ms).
pub(super) fn acquire_args(token: &str, ttl: Duration, holder: &HolderInfo) -> Vec<String> {
    vec![
        token.to_owned(),
        millis(ttl).to_string(),
        millis(FENCE_KEEP).to_string(),
        holder.host.clone(),
        holder.pid.to_string(),
        holder.command.clone(),
        holder
            .waiter
            .as_ref()
            .map_or(String::new(), |w| w.id.clone()),
        holder
            .waiter
            .as_ref()
            .map_or(0, |w| millis(w.place_kept))
            .to_string(),
    ]
}

/// Leave the queue (a waiter that gives up); wakes the others if it was at the head.
pub fn leave(k: &Keys, waiter: &str) -> ScriptCall {
    ScriptCall::new(
        &LEAVE,
        &k.queue,
        &[&k.queue_expiry, &k.released],
        vec![waiter.to_owned()],
    )
}

/// Keep a waiter's place where an acquire could not (see keep_place.lua); the reply has the
/// acquire's busy shape.
pub fn keep_place(k: &Keys, waiter: &Waiter) -> ScriptCall {
    ScriptCall::new(
        &KEEP_PLACE,
        &k.queue,
        &[&k.queue_expiry, &k.lock],
        vec![waiter.id.clone(), millis(waiter.place_kept).to_string()],
    )
    .needing_moved(&[&k.queue_expiry])
}

/// `{1, fence}` when acquired, `{0, pttl, host, pid, acquired_ms, queued, place,
/// finished_ms, kept_until_ms, pause reason, pause host, pause until_ms, shared holders}` when
/// busy (the fields after `place` may be missing or empty); `{2}` (an
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
            let count = |i: usize| match items.get(i) {
                Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
                _ => 0,
            };
            let kept = Kept::parse(
                items.get(7).and_then(text).as_deref(),
                items.get(8).and_then(text).as_deref(),
            );
            let pause_field = |name: &str| {
                let i = ["reason", "host", "until_ms"]
                    .iter()
                    .position(|n| *n == name)?;
                items.get(9 + i).and_then(text)
            };
            Some(AcquireReply::Busy(Holder {
                ttl_ms: u64::try_from(pttl).ok(),
                free: pttl == -2,
                host,
                pid,
                acquired_ms,
                queued: count(5),
                place: count(6),
                kept,
                paused: paused_from(pause_field),
                shared: count(12),
            }))
        }
        _ => None,
    }
}

/// What a renewal script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewReply {
    Renewed,
    /// The token is gone; `Some` when a `break` took it (lost.lua).
    Lost(Option<Broken>),
}

/// 1 renewed; 0, or `{0, mark}` after a `break`, the token is gone.
pub fn parse_renew(reply: &Value) -> Option<RenewReply> {
    match reply {
        Value::Int(1) => Some(RenewReply::Renewed),
        Value::Int(0) => Some(RenewReply::Lost(None)),
        Value::Array(items) if items.first() == Some(&Value::Int(0)) => Some(RenewReply::Lost(
            items.get(1).and_then(text).as_deref().and_then(parse_mark),
        )),
        _ => None,
    }
}

/// `{2}`: the acquire script refused a token that its run had cancelled on this server.
pub fn is_cancelled(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if items.as_slice() == [Value::Int(2)])
}

/// 1 the counter was raised (the token was there), 0 the token is gone.
pub fn parse_raise_fence(reply: &Value) -> Option<bool> {
    match reply {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
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
                ..Holder::default()
            }))
        );
        let queued = Value::Array(vec![
            Value::Int(0),
            Value::Int(-2),
            bulk(""),
            bulk(""),
            bulk(""),
            Value::Int(3),
            Value::Int(2),
        ]);
        assert_eq!(
            parse_acquire(&queued),
            Some(AcquireReply::Busy(Holder {
                free: true,
                queued: 3,
                place: 2,
                ..Holder::default()
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
        assert_eq!(parse_renew(&Value::Int(1)), Some(RenewReply::Renewed));
        assert_eq!(parse_renew(&Value::Int(0)), Some(RenewReply::Lost(None)));
        let broken = Value::Array(vec![Value::Int(0), bulk("ops1\t1796235611000")]);
        assert_eq!(
            parse_renew(&broken),
            Some(RenewReply::Lost(Some(Broken {
                by: "ops1".into(),
                at_ms: 1796235611000
            })))
        );
        assert_eq!(parse_renew(&Value::Nil), None);
    }

    #[test]
    fn calls_name_their_keys_and_arguments() {
        let m = Mutex::new("redlock:k").unwrap();
        let call = m.release("tok", Duration::from_millis(1500), None);
        assert_eq!(call.key(), "redlock:k");
        let packed = String::from_utf8(call.eval().get_packed_command()).unwrap();
        for part in ["EVAL", "redlock:k", "{redlock:k}:holder", "tok", "1500"] {
            assert!(packed.contains(part), "{part} missing from {packed}");
        }
        let sha = String::from_utf8(call.evalsha().get_packed_command()).unwrap();
        assert!(sha.starts_with("*11\r\n$7\r\nEVALSHA\r\n$40\r\n"), "{sha}");
    }

    /// A renewal is sent in full at once: inside the lease, EVALSHA, NOSCRIPT (after a
    /// restart or SCRIPT FLUSH) and EVAL in series would be two round trips. Other calls go
    /// by hash first.
    #[test]
    fn renewals_go_in_full_and_other_calls_by_hash() {
        let m = Mutex::new("redlock:k").unwrap();
        let first =
            |call: ScriptCall| String::from_utf8(call.first().get_packed_command()).unwrap();
        let renew = first(m.renew("tok", Duration::from_secs(3)));
        assert!(renew.contains("$4\r\nEVAL\r\n"), "{renew}");
        assert!(renew.contains("PEXPIRE"), "not the source: {renew}");
        let release = first(m.release("tok", Duration::ZERO, None));
        assert!(release.contains("$7\r\nEVALSHA\r\n"), "{release}");
    }
}
