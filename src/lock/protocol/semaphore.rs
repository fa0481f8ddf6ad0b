//! The semaphore (`--limit N`, N >= 2): at most N holders of one lock name at once.
//!
//! The lock key is a sorted set: each holder's token, scored by when its lease ends on the
//! server's clock (never a client's). Every script first drops the holders whose lease ended,
//! so a crashed holder frees its permit within one TTL and there is no second counter to
//! drift from the set. Each holder renews and releases only its own member; the fence counter
//! is the mutex's, so fences grow per acquisition across both. The limit is recorded beside
//! the set, and a client with another limit (or a mutex client) is refused.
//!
//! The replies have the mutex's shapes, so `mutex::parse_*` read them.

use std::time::Duration;

use super::keys::Keys;
use super::mutex::{CANCEL_KEEP, acquire_args};
use super::record::{self, Finished};
use super::script::millis;
use super::script::{Lua, ScriptCall};
use crate::lock::HolderInfo;

static ACQUIRE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/semaphore/acquire.lua")
));
static RENEW: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/lost.lua"),
    include_str!("scripts/semaphore/permits.lua"),
    include_str!("scripts/semaphore/renew.lua")
));
static RELEASE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/semaphore/permits.lua"),
    include_str!("scripts/record.lua"),
    include_str!("scripts/semaphore/release.lua")
));
static CANCEL: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/semaphore/cancel.lua")
));

/// The semaphore protocol for one lock name.
#[derive(Debug, Clone)]
pub struct Semaphore {
    keys: Keys,
    limit: u32,
}

impl Semaphore {
    pub fn new(keys: Keys, limit: u32) -> Semaphore {
        Semaphore { keys, limit }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        let k = &self.keys;
        let names = [
            k.fence.as_str(),
            &k.holders,
            &k.cancelled,
            &k.queue,
            &k.queue_expiry,
            &k.limit,
        ];
        let mut args = acquire_args(token, ttl, holder);
        args.push(self.limit.to_string());
        ScriptCall::new(&ACQUIRE, &k.lock, &names, args)
            // The pause key (after the limit): busy while paused; the note; the shared
            // holders' set: a lock held with --shared is refused (ARGV[18]); the mutex's
            // holder hash: a string at the lock is a lock held without --limit only with it.
            .then(vec![
                k.pause.clone(),
                holder.note.clone(),
                k.shared.clone(),
                k.holder.clone(),
            ])
            // The shared set too: on the node a migrating slot goes to, a set still on the
            // node it leaves would look absent, and a --limit run go in beside shared holders.
            .needing_moved(&[&names[..], &[k.pause.as_str(), k.shared.as_str()]].concat())
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RENEW,
            &k.lock,
            &[&k.holders, &k.limit],
            vec![
                token.to_owned(),
                millis(ttl).to_string(),
                self.limit.to_string(),
            ],
        )
        .creating()
        // The broken marks, read when the token is gone (lost.lua).
        .then(vec![k.broken.clone()])
        // Inside the lease: never EVALSHA, NOSCRIPT, EVAL in series.
        .in_full()
    }

    pub fn release(&self, token: &str, keep: Duration, record: Option<&Finished>) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &RELEASE,
            &k.lock,
            &[&k.holders, &k.limit, &k.released],
            vec![
                token.to_owned(),
                millis(keep).to_string(),
                self.limit.to_string(),
            ],
        )
        .creating()
        .then(record::args(k, token, record))
    }

    pub fn cancel(&self, token: &str) -> ScriptCall {
        let k = &self.keys;
        ScriptCall::new(
            &CANCEL,
            &k.lock,
            &[&k.holders, &k.released, &k.cancelled],
            vec![token.to_owned(), millis(CANCEL_KEEP).to_string()],
        )
        .needing_moved(&[&k.cancelled])
    }
}
