//! A Lua script, and one call of it as a topology sends it: EVALSHA, or EVAL when the server
//! does not have the script cached.

use std::time::Duration;

use super::sha1::sha1_hex;

/// A Lua script, known by its source and its SHA1.
pub struct Lua {
    source: &'static str,
    /// Computed by the compiler (the scripts are `static`s): a run hashes nothing.
    hash: [u8; 40],
}

impl Lua {
    pub const fn new(source: &'static str) -> Lua {
        Lua {
            source,
            hash: sha1_hex(source.as_bytes()),
        }
    }

    fn hash(&self) -> &str {
        std::str::from_utf8(&self.hash).expect("hex is ASCII")
    }
}

/// One script invocation with its declared key and its arguments (the other keys of the
/// lock first, then the values), ready to be sent by a topology as EVALSHA, or as EVAL when
/// the server does not have the script cached.
#[derive(Clone)]
pub struct ScriptCall {
    lua: &'static Lua,
    key: String,
    args: Vec<String>,
    needs_moved: Vec<String>,
    /// Where among `args` the script is told whether it may create a companion key that is
    /// missing (see [`ScriptCall::creating`]).
    creating_at: Option<usize>,
    /// Sent as EVAL at once (see [`ScriptCall::in_full`]).
    in_full: bool,
}

impl ScriptCall {
    /// `lua` with `key` declared and `names` (the lock's other keys it reaches, or a channel)
    /// as its first arguments, then `args`.
    pub fn new(lua: &'static Lua, key: &str, names: &[&str], args: Vec<String>) -> ScriptCall {
        ScriptCall {
            lua,
            key: key.to_owned(),
            args: names.iter().map(|n| (*n).to_owned()).chain(args).collect(),
            needs_moved: Vec::new(),
            creating_at: None,
            in_full: false,
        }
    }

    /// Always sent in full, as EVAL, never first as EVALSHA: for a call inside the lease (a
    /// renewal), where EVALSHA, NOSCRIPT (after a restart, `SCRIPT FLUSH`, a failover), then
    /// EVAL would be two round trips in series. The server caches the script either way; the
    /// cost is the source's bytes on each call (about 2.5 KB for a renewal) and hashing them.
    pub fn in_full(mut self) -> ScriptCall {
        self.in_full = true;
        self
    }

    /// A last argument, '1': the script may write a missing companion key again (the
    /// `--limit` key, lost to an eviction or expired while a migration stalled). Sent to the
    /// node a migrating slot goes to (behind ASKING), the call says '0' instead
    /// ([`ScriptCall::on_importing_node`]): the node the slot leaves may still have that key,
    /// and a key on both would stop the migration (see `protocol/mod.rs`).
    pub fn creating(mut self) -> ScriptCall {
        self.args.push("1".to_owned());
        self.creating_at = Some(self.args.len() - 1);
        self
    }

    /// `more` arguments after all others (the run record's, `record.rs`).
    pub fn then(mut self, more: Vec<String>) -> ScriptCall {
        self.args.extend(more);
        self
    }

    /// This call as sent to the node a migrating slot goes to: see [`ScriptCall::creating`].
    pub fn on_importing_node(&self) -> ScriptCall {
        let mut call = self.clone();
        if let Some(i) = call.creating_at {
            call.args[i] = "0".to_owned();
        }
        call
    }

    /// The keys (among `names`) that this script reads to decide, or may create. On a
    /// cluster whose slot is being migrated, the script runs on the node the slot goes to
    /// only once the node it leaves has none of them left: that node could then not see
    /// what they hold, and a key created on both would stop the migration.
    pub fn needing_moved(mut self, keys: &[&str]) -> ScriptCall {
        self.needs_moved = keys.iter().map(|k| (*k).to_owned()).collect();
        self
    }

    /// The declared key.
    #[cfg(test)]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// See [`ScriptCall::needing_moved`].
    pub fn needs_moved(&self) -> &[String] {
        &self.needs_moved
    }

    /// The command sent first: EVAL for a call [`ScriptCall::in_full`], otherwise EVALSHA
    /// (and EVAL only on NOSCRIPT).
    pub fn first(&self) -> redis::Cmd {
        if self.in_full {
            self.eval()
        } else {
            self.evalsha()
        }
    }

    /// `EVALSHA hash 1 key args...`
    pub fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.lua.hash())
    }

    /// `EVAL source 1 key args...`: one call instead of EVALSHA, NOSCRIPT, SCRIPT LOAD,
    /// EVALSHA after a restart or SCRIPT FLUSH (and no SCRIPT LOAD broadcast on a cluster).
    /// The server caches the script as a side effect.
    pub fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.lua.source)
    }

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(1).arg(&self.key).arg(&self.args);
        cmd
    }
}

/// A duration as the whole milliseconds a script's ARGV carries.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A script reply's value as text (a bulk or simple string, or a number).
pub(super) fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::Lua;

    /// The hash the compiler computed is the one Redis gives the script (a wrong one would
    /// still work, through NOSCRIPT and EVAL, at the cost of a round trip on every call).
    #[test]
    fn compile_time_hash_is_redis_hash() {
        static LONGEST: Lua = Lua::new(concat!(
            include_str!("scripts/reach.lua"),
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/acquire.lua")
        ));
        assert_eq!(
            LONGEST.hash(),
            redis::Script::new(LONGEST.source).get_hash()
        );
    }
}
