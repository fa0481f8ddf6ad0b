//! Protocols: what a lock *is* in Redis. Each protocol owns its scripts, its key layout and
//! the shapes of its replies, and knows nothing about how a command reaches a server (that is
//! a topology's job, `super::topology`).
//!
//! - `mutex`: one string key holding the holder's token (`SET NX PX`), with a fence counter,
//!   holder info and a release channel beside it.
//! - `semaphore`: `--limit N`, a sorted set of holders' tokens scored by when their leases
//!   end; same companions, same reply shapes.
//! - `status`: one read-only pipeline that reads either of them.
//! - `keys`: the naming rule for a lock key and its companions.
//!
//! [`Protocol`] is what a topology holds: the mutex or the semaphore, chosen by `--limit`.

pub mod keys;
pub mod mutex;
pub mod semaphore;
pub mod status;

use std::sync::OnceLock;
use std::time::Duration;

use keys::{BadName, Keys};
use mutex::Mutex;
use semaphore::Semaphore;

use crate::lock::HolderInfo;

/// The lock's protocol: a mutex (`--limit 1`, the default: one string key, shared with any
/// `SET NX` client) or a semaphore (`--limit N`). Builds every call a topology sends; the
/// replies of both have the same shapes (`mutex::parse_*`, `status::parse`).
#[derive(Debug, Clone)]
pub enum Protocol {
    Mutex(Mutex),
    Semaphore(Semaphore),
}

impl Protocol {
    pub fn new(name: &str, limit: u32) -> Result<Protocol, BadName> {
        let mutex = Mutex::new(name)?;
        Ok(if limit > 1 {
            Protocol::Semaphore(Semaphore::new(mutex.keys().clone(), limit))
        } else {
            Protocol::Mutex(mutex)
        })
    }

    pub fn keys(&self) -> &Keys {
        match self {
            Protocol::Mutex(m) => m.keys(),
            Protocol::Semaphore(s) => s.keys(),
        }
    }

    pub fn acquire(&self, token: &str, ttl: Duration, holder: &HolderInfo) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.acquire(token, ttl, holder),
            Protocol::Semaphore(s) => s.acquire(token, ttl, holder),
        }
    }

    pub fn renew(&self, token: &str, ttl: Duration) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.renew(token, ttl),
            Protocol::Semaphore(s) => s.renew(token, ttl),
        }
    }

    pub fn release(&self, token: &str, keep: Duration) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.release(token, keep),
            Protocol::Semaphore(s) => s.release(token, keep),
        }
    }

    pub fn cancel(&self, token: &str) -> ScriptCall {
        match self {
            Protocol::Mutex(m) => m.cancel(token),
            Protocol::Semaphore(s) => s.cancel(token),
        }
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

/// A Lua script, known by its source and its SHA1.
pub struct Lua {
    source: &'static str,
    hash: OnceLock<String>,
}

impl Lua {
    pub const fn new(source: &'static str) -> Lua {
        Lua {
            source,
            hash: OnceLock::new(),
        }
    }

    fn hash(&self) -> &str {
        // Hashed once, on first use: a run only pays for the scripts it sends.
        self.hash
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }
}

/// One script invocation with its keys and arguments, ready to be sent by a topology as
/// EVALSHA, or as EVAL when the server does not have the script cached.
pub struct ScriptCall {
    lua: &'static Lua,
    keys: Vec<String>,
    args: Vec<String>,
}

impl ScriptCall {
    pub fn new(lua: &'static Lua, keys: &[&str], args: Vec<String>) -> ScriptCall {
        ScriptCall {
            lua,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            args,
        }
    }

    /// The first key: where a cluster routes the call.
    pub fn first_key(&self) -> &str {
        &self.keys[0]
    }

    /// `EVALSHA hash nkeys keys... args...`
    pub fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.lua.hash())
    }

    /// `EVAL source nkeys keys... args...`: one call instead of EVALSHA, NOSCRIPT, SCRIPT
    /// LOAD, EVALSHA after a restart or SCRIPT FLUSH (and no SCRIPT LOAD broadcast on a
    /// cluster). The server caches the script as a side effect.
    pub fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.lua.source)
    }

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}
