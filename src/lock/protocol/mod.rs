//! Protocols: what a lock *is* in Redis. Each protocol owns its scripts, its key layout and
//! the shapes of its replies, and knows nothing about how a command reaches a server (that is
//! a topology's job, `super::topology`).
//!
//! - `mutex`: one string key holding the holder's token (`SET NX PX`), with a fence counter,
//!   holder info and a release channel beside it.
//! - `keys`: the naming rule for a lock key and its companions.

pub mod keys;
pub mod mutex;

use std::sync::OnceLock;

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
