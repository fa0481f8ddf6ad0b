//! The shared hold (`--shared`, as `flock -s`): any number of shared holders at once, or one
//! exclusive holder (a run without `--shared`, the mutex) alone.
//!
//! The exclusive holder stays the mutex's string key, so a lock never used shared costs what
//! it always did. The shared holders are a sorted set beside it (`Keys::shared`): each
//! holder's token, scored by when its lease ends on the server's clock, as `--limit`
//! permits are, so a holder that dies frees its share within one TTL; their info is in the
//! `holders` hash. The fence counter is the mutex's: every grant, shared or exclusive, gets a
//! fence above every earlier one. Exclusive and shared runs wait in one queue, in arrival
//! order (see scripts/shared/acquire.lua); a shared waiter's id starts with
//! [`SHARED_WAITER`].
//!
//! The replies have the mutex's shapes, so `mutex::parse_*` read them.

use std::time::Duration;

use super::keys::Keys;
use super::mutex::{CANCEL_KEEP, acquire_args};
use super::record::{self, Finished};
use super::script::millis;
use super::script::{Lua, ScriptCall};
use crate::lock::HolderInfo;

/// How a shared waiter's id begins (the scripts test for it: acquire.lua, wake.lua).
pub const SHARED_WAITER: &str = "shared:";

static ACQUIRE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/shared/acquire.lua")
));
static RENEW: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/lost.lua"),
    include_str!("scripts/shared/lease.lua"),
    include_str!("scripts/shared/renew.lua")
));
static RELEASE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/shared/lease.lua"),
    include_str!("scripts/record.lua"),
    include_str!("scripts/shared/release.lua")
));
static CANCEL: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/shared/cancel.lua")
));

/// The shared side of one lock name (its exclusive side is the mutex).
#[derive(Debug, Clone)]
pub struct Shared {
    keys: Keys,
}

impl Shared {
    pub fn new(keys: Keys) -> Shared {
        Shared { keys }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        let k = &self.keys;
        let names = [
            k.lock.as_str(),
            &k.fence,
            &k.holder,
            &k.holders,
            &k.cancelled,
            &k.queue,
            &k.queue_expiry,
        ];
        ScriptCall::new(
            &ACQUIRE,
            &k.shared,
            &names,
            acquire_args(token, ttl, holder),
        )
        // The pause key and the note (shared/acquire.lua).
        // The limit key: a sorted set at the lock is a --limit lock only with it (acquire.lua).
        .then(vec![k.pause.clone(), holder.note.clone(), k.limit.clone()])
        .needing_moved(&[&names[..], &[k.pause.as_str()]].concat())
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RENEW,
            &k.shared,
            &[&k.holders],
            vec![token.to_owned(), millis(ttl).to_string()],
        )
        // The broken marks, read when the token is gone (lost.lua): a share taken by
        // `break` says who broke it, as a mutex or a permit does.
        .then(vec![k.broken.clone()])
        // Inside the lease: never EVALSHA, NOSCRIPT, EVAL in series.
        .in_full()
    }

    pub fn release(&self, token: &str, keep: Duration, record: Option<&Finished>) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RELEASE,
            &k.shared,
            &[&k.holders, &k.released, &k.queue, &k.queue_expiry, &k.lock],
            vec![token.to_owned(), millis(keep).to_string()],
        )
        .creating()
        .then(record::args(k, token, record))
    }

    pub fn cancel(&self, token: &str) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &CANCEL,
            &k.shared,
            &[
                &k.holders,
                &k.released,
                &k.cancelled,
                &k.queue,
                &k.queue_expiry,
            ],
            vec![token.to_owned(), millis(CANCEL_KEEP).to_string()],
        )
        .needing_moved(&[&k.cancelled])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_calls_declare_the_shared_set_and_name_the_lock() {
        let keys = Keys::new("redlock:k").unwrap();
        let s = Shared::new(keys);
        let holder = HolderInfo {
            host: "h".into(),
            pid: 1,
            command: "c".into(),
            note: String::new(),
            waiter: None,
        };
        let call = s.acquire("tok", Duration::from_secs(3), &holder);
        assert_eq!(call.key(), "{redlock:k}:shared");
        let packed = String::from_utf8(call.eval().get_packed_command()).unwrap();
        for part in [
            "redlock:k",
            "{redlock:k}:holders",
            "{redlock:k}:queue",
            "tok",
        ] {
            assert!(packed.contains(part), "{part} missing from {packed}");
        }
    }
}
