//! The run record: how the last run of a lock ended, and the last run that succeeded, kept
//! beside the lock (companions `last-run` and `last-success`, `keys.rs`) so that a lock can
//! answer "did it run, and how did it end", not only "is it running now".
//!
//! - **Written by the holder, with its release.** The release scripts (mutex and `--limit`)
//!   call `write_record` (`scripts/record.lua`) after they checked that the lock still holds
//!   the caller's token, in the same script: a run that lost its lock writes nothing.
//! - **Format.** Each key is a hash: `host`, `pid`, `program`, `started_ms`, `ended_ms` (ms
//!   since 1970 on the server's clock, `TIME`), `exit_code` (empty or absent when killed by
//!   a signal), `signal` (empty or absent when it exited), `outcome` (see [`Outcome`]), `fence`.
//!   `docs/reference.md` documents it; a tool (or a test) may write one by hand.
//! - **Retention.** Both keys expire [`RETENTION`] after they were written: longer than the
//!   longest `--once-per` period, so a record is never gone while it still decides a skip.
//! - **Redlock.** Each node writes the record where it releases; a reader takes the newest
//!   record by fence among the nodes that answer (a quorum), see [`newest`].

use std::time::Duration;

use super::hold;
use super::keys::Keys;
use super::script::millis;
use super::script::{Lua, ScriptCall};

/// How long a record is kept after it was written: 40 days, longer than the longest
/// `--once-per` period (a calendar month of 31 days plus a DST hour, or a rolling duration of
/// at most 31 days, `cli::LONGEST_ROLLING_PERIOD`; `period.rs` checks both).
pub const RETENTION: Duration = Duration::from_secs(40 * 24 * 3600);

static FORGET: Lua = Lua::new(concat!(
    include_str!("scripts/reach.lua"),
    include_str!("scripts/forget.lua")
));

/// How a run that started its command ended, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exited 0 under a lease it kept: the only outcome that counts for `--once-per`.
    Succeeded,
    /// Exited with another code (or its status could not be read).
    Failed,
    /// Killed by a signal (its own, or one forwarded by the wrapper).
    Signalled,
    /// Stopped by `--max-runtime`.
    TimedOut,
    /// Its lease could not be confirmed in time (the command was stopped), yet the lock still
    /// held its token at release. A run whose token was gone writes nothing.
    Lost,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Signalled => "signalled",
            Outcome::TimedOut => "timed-out",
            Outcome::Lost => "lost",
        }
    }
}

/// What a run tells its release to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub host: String,
    pub pid: u32,
    pub program: String,
    pub fence: u64,
    /// From the spawn to the release, on the local monotonic clock.
    pub ran: Duration,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// `release` of a hold across CI steps (`hold.rs`): the reason the token's hold record is
    /// ended `released` with, by the release script itself, in the same step as the release
    /// (so that a second `release` of the hold at the same time, finding the lock gone, reads
    /// the record released rather than ending it as lost). `None` for a run.
    pub hold: Option<String>,
}

/// One record as read back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunRecord {
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub program: Option<String>,
    pub started_ms: u64,
    pub ended_ms: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub outcome: String,
    pub fence: Option<u64>,
    /// Outcome `broken`: the host that broke the lock (`break`, operator.rs).
    pub broken_by: Option<String>,
}

impl RunRecord {
    pub fn duration_ms(&self) -> u64 {
        self.ended_ms.saturating_sub(self.started_ms)
    }
}

/// The records of one lock, and the server's clock when they were read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Records {
    /// The server's `TIME` in ms (the quorum's median on Redlock).
    pub now_ms: Option<u64>,
    pub last_run: Option<RunRecord>,
    pub last_success: Option<RunRecord>,
}

/// The arguments a release script takes after its own to write `finished` (none: nothing is
/// recorded), and with `finished.hold` to end the hold record of `token`. See
/// `scripts/record.lua`.
pub fn args(k: &Keys, token: &str, finished: Option<&Finished>) -> Vec<String> {
    let Some(f) = finished else {
        return Vec::new();
    };
    let mut args = vec![
        k.last_run.clone(),
        k.last_success.clone(),
        millis(RETENTION).to_string(),
        f.host.clone(),
        f.pid.to_string(),
        f.program.clone(),
        f.fence.to_string(),
        millis(f.ran).to_string(),
        f.outcome.as_str().to_owned(),
        f.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        f.signal.map(|s| s.to_string()).unwrap_or_default(),
    ];
    if let Some(reason) = &f.hold {
        args.extend([
            k.holds.clone(),
            token.to_owned(),
            reason.clone(),
            millis(hold::RETENTION).to_string(),
        ]);
    }
    args
}

/// `forget`: delete both records (the lock is left alone). The reply is how many existed.
pub fn forget(k: &Keys) -> ScriptCall {
    ScriptCall::new(&FORGET, &k.last_run, &[&k.last_success], Vec::new())
}

/// A record from the `HGETALL` pairs of one key; `None` for an empty or unreadable hash.
pub fn parse(pairs: &[(String, String)]) -> Option<RunRecord> {
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let number = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
    Some(RunRecord {
        host: field("host").filter(|h| !h.is_empty()).map(str::to_owned),
        pid: field("pid").and_then(|p| p.parse().ok()),
        program: field("program")
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        started_ms: number("started_ms")?,
        ended_ms: number("ended_ms")?,
        exit_code: field("exit_code").and_then(|c| c.parse().ok()),
        signal: field("signal").and_then(|s| s.parse().ok()),
        outcome: field("outcome").unwrap_or("unknown").to_owned(),
        fence: number("fence"),
        broken_by: field("broken_by")
            .filter(|b| !b.is_empty())
            .map(str::to_owned),
    })
}

/// Redlock: the records of the nodes that answered, as one. A record is written on every
/// node where its run released, which for a release that counted is a quorum of them; while
/// none of them loses it (a restart with an empty data set), any quorum of readers includes
/// one of those nodes. Nothing copies it to the others (docs/reference.md says what faults
/// spread over a period can hide). Disagreement is settled by the
/// fence (it grows with every acquisition, so the highest is the latest holder's); equal
/// fences (the same run, its copies stamped by clocks that disagree) by the later start,
/// then the later end: the copy of the node furthest ahead, which `period::done_in` counts
/// as done even when it starts after the median time (at most once beats twice). The
/// server time is the median of the nodes'.
pub fn newest<'a>(nodes: impl IntoIterator<Item = &'a Records>) -> Records {
    let nodes: Vec<&Records> = nodes.into_iter().collect();
    let pick = |get: fn(&Records) -> Option<&RunRecord>| {
        nodes
            .iter()
            .filter_map(|r| get(r))
            .max_by_key(|r| (r.fence.unwrap_or(0), r.started_ms, r.ended_ms))
            .cloned()
    };
    let mut times: Vec<u64> = nodes.iter().filter_map(|r| r.now_ms).collect();
    times.sort_unstable();
    Records {
        now_ms: times.get(times.len() / 2).copied(),
        last_run: pick(|r| r.last_run.as_ref()),
        last_success: pick(|r| r.last_success.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_the_documented_format() {
        let r = parse(&pairs(&[
            ("host", "web1"),
            ("pid", "42"),
            ("program", "backup"),
            ("started_ms", "1000"),
            ("ended_ms", "4500"),
            ("signal", "15"),
            ("outcome", "signalled"),
            ("fence", "77"),
        ]))
        .unwrap();
        assert_eq!(r.host.as_deref(), Some("web1"));
        assert_eq!(r.duration_ms(), 3500);
        assert_eq!(r.exit_code, None);
        assert_eq!(r.signal, Some(15));
        assert_eq!(r.fence, Some(77));
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&pairs(&[("host", "x")])), None);
    }

    #[test]
    fn the_newest_record_by_fence_wins_and_time_is_the_median() {
        let rec = |fence, ended_ms| RunRecord {
            fence: Some(fence),
            ended_ms,
            ..RunRecord::default()
        };
        let a = Records {
            now_ms: Some(10),
            last_run: Some(rec(5, 100)),
            last_success: Some(rec(3, 50)),
        };
        let b = Records {
            now_ms: Some(30),
            last_run: Some(rec(7, 90)),
            last_success: None,
        };
        let c = Records {
            now_ms: Some(20),
            last_run: None,
            last_success: Some(rec(3, 60)),
        };
        let view = newest([&a, &b, &c]);
        assert_eq!(view.now_ms, Some(20));
        assert_eq!(view.last_run, Some(rec(7, 90)));
        assert_eq!(view.last_success, Some(rec(3, 60)));
        assert_eq!(newest([]), Records::default());
    }

    #[test]
    fn a_release_without_a_record_sends_no_record_arguments() {
        let k = Keys::new("redlock:k").unwrap();
        assert!(args(&k, "t", None).is_empty());
        let mut f = Finished {
            host: "h".into(),
            pid: 1,
            program: "p".into(),
            fence: 9,
            ran: Duration::from_millis(1500),
            outcome: Outcome::Signalled,
            exit_code: None,
            signal: Some(9),
            hold: None,
        };
        let a = args(&k, "t", Some(&f));
        assert_eq!(a.len(), 11);
        assert_eq!(a[0], "{redlock:k}:last-run");
        assert_eq!(a[7], "1500");
        assert_eq!(a[8], "signalled");
        assert_eq!(a[9], "");
        assert_eq!(a[10], "9");
        // A hold's release: then the hold record's key, the token, the reason, its retention.
        f.hold = Some("released from h".into());
        let a = args(&k, "t", Some(&f));
        assert_eq!(a.len(), 15);
        assert_eq!(a[11], "{redlock:k}:holds");
        assert_eq!(a[12], "t");
        assert_eq!(a[13], "released from h");
        assert_eq!(a[14], millis(hold::RETENTION).to_string());
    }
}
