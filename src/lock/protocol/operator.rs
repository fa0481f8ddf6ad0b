//! The operator's calls: `break` (take the lock from the holder named by its token), `pause`
//! and `resume`, with their replies. One script each, for every layout (mutex, `--limit`
//! semaphore, `--shared` holders beside the mutex), so that none needs `--limit` or
//! `--shared`.

use std::time::Duration;

use redis::Value;

use super::hold;
use super::keys::FENCE_KEEP;
use super::keys::Keys;
use super::record::RETENTION;
use super::script::{Lua, ScriptCall};
use super::script::{millis, text};
use crate::lock::{BreakOutcome, Broken, Paused};

static BREAK: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/shared/lease.lua"),
    include_str!("scripts/break.lua")
));
static PAUSE: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/pause.lua")
));
static RESUME: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/wake.lua"),
    include_str!("scripts/resume.lua")
));

/// How long a broken mark is kept after the latest `break` of the lock: long enough for the
/// old holder's next renewal (a heartbeat, or a process stopped for a while) to read who
/// broke it; a holder that renews later is told only that its lock was lost.
pub const BROKEN_KEEP: Duration = Duration::from_secs(24 * 3600);

/// `break` of the holder with `token`, by the host `by` (see break.lua).
pub fn break_holder(k: &Keys, token: &str, by: &str) -> ScriptCall {
    let names = [
        k.holder.as_str(),
        &k.holders,
        &k.fence,
        &k.released,
        &k.queue,
        &k.queue_expiry,
        &k.broken,
        &k.last_run,
        &k.last_success,
    ];
    ScriptCall::new(
        &BREAK,
        &k.lock,
        &names,
        vec![
            token.to_owned(),
            by.to_owned(),
            millis(BROKEN_KEEP).to_string(),
            millis(FENCE_KEEP).to_string(),
            millis(RETENTION).to_string(),
        ],
    )
    // The hold record of the token, ended as broken (hold.rs); the --shared holders, where
    // the token may be one of them (break.lua).
    .then(vec![
        k.holds.clone(),
        millis(hold::RETENTION).to_string(),
        k.shared.clone(),
    ])
    // The shared set too: on the node a migrating slot goes to, a set still on the node it
    // leaves would look absent, and a lock held shared free.
    .needing_moved(&[&k.fence, &k.broken, &k.last_run, &k.holds, &k.shared])
}

/// `pause` for `length`, with `reason`, by the host `by` (see pause.lua).
pub fn pause(k: &Keys, reason: &str, by: &str, length: Duration) -> ScriptCall {
    ScriptCall::new(
        &PAUSE,
        &k.lock,
        &[&k.pause],
        vec![
            reason.to_owned(),
            by.to_owned(),
            millis(length).max(1).to_string(),
        ],
    )
    .needing_moved(&[&k.pause])
}

/// `resume` (see resume.lua).
pub fn resume(k: &Keys) -> ScriptCall {
    ScriptCall::new(
        &RESUME,
        &k.lock,
        &[&k.pause, &k.queue, &k.queue_expiry, &k.released],
        Vec::new(),
    )
    .needing_moved(&[&k.pause])
}

/// `{1, fence}` broken, `{0}` held by another, `{-1}` free.
pub fn parse_break(reply: &Value) -> Option<BreakOutcome> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.first()? {
        Value::Int(1) => Some(BreakOutcome::Broken {
            fence: text(items.get(1)?)?.parse().ok()?,
        }),
        Value::Int(0) => Some(BreakOutcome::HeldByOther),
        Value::Int(-1) => Some(BreakOutcome::Free),
        _ => None,
    }
}

/// The server time at which the pause ends.
pub fn parse_pause(reply: &Value) -> Option<u64> {
    text(reply)?.parse().ok()
}

/// 1 a pause was ended, 0 there was none.
pub fn parse_resume(reply: &Value) -> Option<bool> {
    match reply {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

/// A broken mark, `host TAB ms` (break.lua).
pub fn parse_mark(mark: &str) -> Option<Broken> {
    let (by, at) = mark.split_once('\t')?;
    Some(Broken {
        by: by.to_owned(),
        at_ms: at.parse().ok()?,
    })
}

/// A pause from the pause hash's fields (`HGETALL`), or the acquire's busy reply.
pub fn paused_from(field: impl Fn(&str) -> Option<String>) -> Option<Paused> {
    Some(Paused {
        reason: field("reason").unwrap_or_default(),
        by: field("host").unwrap_or_default(),
        since_ms: field("since_ms").and_then(|s| s.parse().ok()).unwrap_or(0),
        until_ms: field("until_ms")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_operator_replies() {
        let broke = Value::Array(vec![Value::Int(1), bulk("1733160000123457")]);
        assert_eq!(
            parse_break(&broke),
            Some(BreakOutcome::Broken {
                fence: 1733160000123457
            })
        );
        assert_eq!(
            parse_break(&Value::Array(vec![Value::Int(0)])),
            Some(BreakOutcome::HeldByOther)
        );
        assert_eq!(
            parse_break(&Value::Array(vec![Value::Int(-1)])),
            Some(BreakOutcome::Free)
        );
        assert_eq!(parse_break(&Value::Int(1)), None);
        assert_eq!(
            parse_mark("ops1\t1796235611000"),
            Some(Broken {
                by: "ops1".into(),
                at_ms: 1796235611000
            })
        );
        assert_eq!(parse_mark("ops1"), None);
    }
}
