//! Holds that span several CI steps (`acquire`, a keeper, `release`): the hold record beside
//! the lock (companion `holds`, `keys.rs`), one per token, written by `scripts/hold.lua`.
//!
//! - **Begun only by the holder.** `begin` writes the record in the same script that checks
//!   that the lock holds the token (mutex or `--limit` holder), after the acquire and before
//!   `acquire` hands the token to the user: a record always names a hold that had the lock.
//! - **Ended once.** `end` moves a record out of the states it names (`held`, `releasing`)
//!   into `released`, `lost` or `max-hold`, with the server's time and a reason; whoever comes
//!   second (the keeper after a `release`, or the reverse) changes nothing and reads how it
//!   ended. So a `release` can tell "this hold was released" from "it was lost while held,
//!   when and why". `released` is written by the script that releases the lock
//!   (`scripts/record.lua`, `end_hold`), in the same step: a `release` that finds the lock
//!   gone and the record `released` lost a race with another `release` of the hold. `break`
//!   (`scripts/break.lua`) ends a `held` or `releasing` record `lost` in the step that takes
//!   the lock, naming the host it ran on (`broken_by`).
//! - **Retention.** The hash expires no sooner than --max-hold plus [`RETENTION`] after a hold
//!   began, and [`RETENTION`] after one ended (its TTL is only ever raised).

use std::time::Duration;

use serde::Deserialize;

use super::keys::Keys;
use super::script::millis;
use super::script::{Lua, ScriptCall};

/// How long a hold's record is kept after the hold ended (or after its --max-hold deadline):
/// a day, time for the pipeline's last step to run `release` and learn how the hold ended.
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);

static HOLD: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/hold.lua")
));

/// Where a hold stands, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldState {
    /// The keeper holds it.
    Held,
    /// A `release` is under way: the keeper, finding the lock gone, ends quietly.
    Releasing,
    /// Released by `release`.
    Released,
    /// Lost while held (the lease could not be kept, the keeper was stopped, the lock was
    /// deleted or taken): see the reason.
    Lost,
    /// The keeper released it at --max-hold.
    MaxHold,
}

impl HoldState {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldState::Held => "held",
            HoldState::Releasing => "releasing",
            HoldState::Released => "released",
            HoldState::Lost => "lost",
            HoldState::MaxHold => "max-hold",
        }
    }

    fn parse(s: &str) -> Option<HoldState> {
        [
            HoldState::Held,
            HoldState::Releasing,
            HoldState::Released,
            HoldState::Lost,
            HoldState::MaxHold,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// The hold has ended (for good).
    pub fn ended(self) -> bool {
        matches!(
            self,
            HoldState::Released | HoldState::Lost | HoldState::MaxHold
        )
    }
}

/// One hold record as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRecord {
    pub state: HoldState,
    pub host: String,
    pub pid: u32,
    /// The keeper's id (random, not secret): a `release` on the keeper's host signals the
    /// pid only if its environment carries this id.
    pub id: String,
    pub fence: u64,
    /// The hold's `--limit` (1: the mutex): `release` releases with the same protocol.
    pub limit: u32,
    pub since_ms: u64,
    /// The --max-hold deadline.
    pub until_ms: u64,
    /// When it ended (0 while held).
    pub ended_ms: u64,
    pub reason: String,
    /// Ended by `break` (break.lua): the host it ran on; it ended at `ended_ms`.
    pub broken_by: Option<String>,
}

/// What a call does to the record.
#[derive(Debug, Clone)]
pub enum HoldChange {
    /// Write it, if the lock holds the token.
    Begin {
        max_hold: Duration,
        host: String,
        pid: u32,
        id: String,
        fence: u64,
        limit: u32,
    },
    /// Move it to `to` with `reason`, if it is in one of the states `from`.
    End {
        to: HoldState,
        reason: String,
        from: &'static [HoldState],
    },
}

/// The call that applies `change` to the record of `token`.
pub fn call(k: &Keys, token: &str, change: &HoldChange) -> ScriptCall {
    let mut args = vec![
        match change {
            HoldChange::Begin { .. } => "begin",
            HoldChange::End { .. } => "end",
        }
        .to_owned(),
        token.to_owned(),
        millis(RETENTION).to_string(),
    ];
    match change {
        HoldChange::Begin {
            max_hold,
            host,
            pid,
            id,
            fence,
            limit,
        } => args.extend([
            millis(*max_hold).to_string(),
            host.clone(),
            pid.to_string(),
            id.clone(),
            fence.to_string(),
            limit.to_string(),
        ]),
        HoldChange::End { to, reason, from } => args.extend([
            to.as_str().to_owned(),
            reason.clone(),
            from.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ]),
    }
    ScriptCall::new(&HOLD, &k.holds, &[&k.lock], args)
}

/// The JSON the script stores.
#[derive(Deserialize)]
struct Stored {
    state: String,
    host: String,
    pid: u32,
    id: String,
    fence: String,
    #[serde(default)]
    limit: Option<u32>,
    since_ms: String,
    until_ms: String,
    ended_ms: String,
    reason: String,
    #[serde(default)]
    broken_by: Option<String>,
}

/// The script's reply: `Ok(None)` for nil (no record, or `begin` without the lock), `Err` for
/// a reply of another shape.
pub fn parse(value: &redis::Value) -> Result<Option<HoldRecord>, ()> {
    let text = match value {
        redis::Value::Nil => return Ok(None),
        redis::Value::BulkString(b) => std::str::from_utf8(b).map_err(|_| ())?,
        redis::Value::SimpleString(s) => s.as_str(),
        _ => return Err(()),
    };
    let s: Stored = serde_json::from_str(text).map_err(|_| ())?;
    let number = |v: &str| v.parse::<u64>().map_err(|_| ());
    Ok(Some(HoldRecord {
        state: HoldState::parse(&s.state).ok_or(())?,
        host: s.host,
        pid: s.pid,
        id: s.id,
        fence: number(&s.fence)?,
        limit: s.limit.unwrap_or(1).max(1),
        since_ms: number(&s.since_ms)?,
        until_ms: number(&s.until_ms)?,
        ended_ms: number(&s.ended_ms)?,
        reason: s.reason,
        broken_by: s.broken_by.filter(|b| !b.is_empty()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_record_reads_back() {
        let json = r#"{"state":"lost","host":"h","pid":7,"id":"x","fence":"12","since_ms":"1700000000000","until_ms":"1700003600000","ended_ms":"1700000001000","reason":"why"}"#;
        let r = parse(&redis::Value::BulkString(json.as_bytes().to_vec()))
            .unwrap()
            .unwrap();
        assert_eq!(r.state, HoldState::Lost);
        assert_eq!(r.until_ms, 1_700_003_600_000);
        assert_eq!(r.broken_by, None);
        let broken = json.replace(r#""reason":"why""#, r#""reason":"why","broken_by":"ops1""#);
        let r = parse(&redis::Value::BulkString(broken.into_bytes()))
            .unwrap()
            .unwrap();
        assert_eq!(r.broken_by.as_deref(), Some("ops1"));
        assert_eq!(parse(&redis::Value::Nil), Ok(None));
        assert!(parse(&redis::Value::Int(1)).is_err());
    }
}
