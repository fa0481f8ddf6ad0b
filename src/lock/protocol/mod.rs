//! Protocols: what a lock *is* in Redis. Each protocol owns its scripts, its key layout and
//! the shapes of its replies, and knows nothing about how a command reaches a server (that is
//! a topology's job, `super::topology`).
//!
//! - `mutex`: one string key holding the holder's token (`SET NX PX`), with a fence counter,
//!   holder info and a release channel beside it.
//! - `semaphore`: `--limit N`, a sorted set of holders' tokens scored by when their leases
//!   end; same companions, same reply shapes.
//! - `shared`: `--shared`, shared holders in a sorted set beside the mutex's key (which stays
//!   the exclusive holder's), scored by lease end as permits are; same reply shapes.
//! - `status`: one read-only pipeline that reads any of them.
//! - `keys`: the naming rule for a lock key and its companions.
//! - `hold`: the record of a hold across CI steps (`acquire` ... `release`), one per token,
//!   written only while the lock holds that token, ended once.
//! - `record`: the run record beside the lock (last run, last success), written by the
//!   release scripts, read with `status`, cleared by `forget`.
//! - `listing`: `list`, the locks under a prefix found by their companions (SCAN
//!   patterns) and read in one pipeline.
//!
//! [`Protocol`] is what a topology holds: the mutex, the semaphore (`--limit`) or the shared
//! hold (`--shared`).
//!
//! **One declared key per script.** Each script declares one key (`KEYS[1]`: the lock, or
//! the queue for the scripts that only touch the queue) and is given the other keys of the
//! lock by name, as arguments; all of them share one hash slot (`keys.rs`). The reason is
//! Redis Cluster while that slot is being migrated (from `CLUSTER SETSLOT .. MIGRATING` /
//! `IMPORTING` until `SETSLOT .. NODE`): a command, and each command inside a script, is run
//! by the node the slot leaves only if every key it names is still there (else `ASK` if none
//! is, `TRYAGAIN` if some are: Redis 7.0 and Valkey; `ASK` in both cases on Redis 6.2), and by
//! the node it goes to, behind `ASKING`, only if it names one key or has them all (else
//! `TRYAGAIN`); and a key that exists on both nodes stops the migration (`MIGRATE` refuses to
//! overwrite it). Companions that often exist nowhere (the queue, the cancelled tokens) would
//! make every script with several declared keys fail until the migration ends. With one
//! declared key Redis runs the script where that key is (or, if it left, on the importing
//! node), and the script reaches the others one command at a time (`scripts/reach.lua`); a
//! script that touches keys it did not declare is allowed in a cluster as long as they are
//! in the declared key's slot (Redis 6.2, 7.0 and Valkey 9: checked per command, as above).
//! The scripts never send a command naming two keys, and a pub/sub channel is an argument
//! (it is no key: any node publishes to the whole cluster).
//!
//! What each script does with a key it cannot reach (on the node the slot leaves, a key that
//! is not there), and which keys must have left that node before a script may run on the
//! other one ([`ScriptCall::needs_moved`]), is written in the scripts; `topology/cluster.rs`
//! does the routing. This is the one place that tells how Redis serves a migrating slot.

pub mod hold;
pub mod keys;
pub mod listing;
pub mod mutex;
pub mod operator;
pub mod record;
mod script;
pub mod semaphore;
mod sha1;
pub mod shared;
pub mod status;

use std::time::Duration;

pub use script::ScriptCall;

use keys::{BadName, Keys};
use mutex::Mutex;
use record::Finished;
use semaphore::Semaphore;
use shared::Shared;

use crate::lock::HolderInfo;

/// The lock's protocol: a mutex (`--limit 1`, the default: one string key, shared with any
/// `SET NX` client), a semaphore (`--limit N`) or a shared hold (`--shared`). Builds every
/// call a topology sends; the replies of all three have the same shapes (`mutex::parse_*`,
/// `status::parse`).
#[derive(Debug, Clone)]
pub enum Protocol {
    Mutex(Mutex),
    Semaphore(Semaphore),
    /// `--shared`: a shared hold beside the mutex's exclusive one (shared.rs).
    Shared(Shared),
}

impl Protocol {
    pub fn new(name: &str, limit: u32, shared: bool) -> Result<Protocol, BadName> {
        let mutex = Mutex::new(name)?;
        Ok(if shared {
            Protocol::Shared(Shared::new(mutex.keys().clone()))
        } else if limit > 1 {
            Protocol::Semaphore(Semaphore::new(mutex.keys().clone(), limit))
        } else {
            Protocol::Mutex(mutex)
        })
    }

    pub fn keys(&self) -> &Keys {
        match self {
            Protocol::Mutex(m) => m.keys(),
            Protocol::Semaphore(s) => s.keys(),
            Protocol::Shared(s) => s.keys(),
        }
    }

    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.acquire(token, ttl, holder),
            Protocol::Semaphore(s) => s.acquire(token, ttl, holder),
            Protocol::Shared(s) => s.acquire(token, ttl, holder),
        }
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.renew(token, ttl),
            Protocol::Semaphore(s) => s.renew(token, ttl),
            Protocol::Shared(s) => s.renew(token, ttl),
        }
    }

    pub fn release(&self, token: &str, keep: Duration, record: Option<&Finished>) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.release(token, keep, record),
            Protocol::Semaphore(s) => s.release(token, keep, record),
            Protocol::Shared(s) => s.release(token, keep, record),
        }
    }

    /// `forget`: clear the run record (record.rs).
    pub fn forget(&self) -> ScriptCall {
        record::forget(self.keys())
    }

    pub fn cancel(&self, token: &str) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.cancel(token),
            Protocol::Semaphore(s) => s.cancel(token),
            Protocol::Shared(s) => s.cancel(token),
        }
    }

    /// `break` of the holder (or permit) with `token` (operator.rs; either layout).
    pub fn break_holder(&self, token: &str, by: &str) -> ScriptCall {
        operator::break_holder(self.keys(), token, by)
    }

    /// `pause` for `length`.
    pub fn pause(&self, reason: &str, by: &str, length: Duration) -> ScriptCall {
        operator::pause(self.keys(), reason, by, length)
    }

    /// `resume`.
    pub fn resume(&self) -> ScriptCall {
        operator::resume(self.keys())
    }

    /// Leave the waiters' queue (the same queue for both).
    pub fn leave(&self, waiter: &str) -> ScriptCall {
        mutex::leave(self.keys(), waiter)
    }

    /// The read-only `status` pipeline (reads either layout).
    pub fn status(&self) -> redis::Pipeline {
        status::pipeline(self.keys())
    }
}
