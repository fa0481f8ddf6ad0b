//! `redlock-run status`: who holds a lock, and how its last run and last success ended.
//! Read-only: never writes to Redis. Also `redlock-run forget`, which clears that record.

use crate::timestamp;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::exit::{ChildEnd, Ending};
use crate::lock::target::Target;
use crate::lock::{self, Lock, Records, RunRecord, Status};
use crate::report::Reporter;

pub async fn status(target: &Target, json: bool, report: &Reporter) -> Ending {
    let lock = match lock::open(target, None, target.timeout).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    match lock.status(None).await {
        Ok(status) => {
            let out = if json {
                to_json(&target.key, &status)
            } else {
                // The holder info was written by another host: no control character of it
                // (or of the key) reaches the terminal as such. One line each: the lock, then
                // (Redlock) each node.
                std::iter::once(to_text(&target.key, &status))
                    .chain(nodes_text(&status))
                    .chain(records_text(&status.records))
                    .map(|line| crate::report::one_line(&line).into_owned())
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            print_out(&out, report)
        }
        Err(e) if e.kind == lock::FailureKind::WrongType => {
            report.error(
                "unavailable",
                format_args!(
                    "Redis at {}: {} is not a redlock-run lock: it, or one of its companion keys \
                     ({{KEY}}:holder, {{KEY}}:fence, ...), holds another type of value; check \
                     --key and --prefix (nothing was changed)",
                    e.server, target.key
                ),
            );
            Ending::Unavailable
        }
        Err(e) => {
            report.error("unavailable", &e);
            Ending::Unavailable
        }
    }
}

/// `redlock-run forget`: clear the run record. The lock is left alone.
pub async fn forget(target: &Target, report: &Reporter) -> Ending {
    let lock = match lock::open(target, None, target.timeout).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    match lock.forget(target.timeout).await {
        Ok(existed) => {
            let what = if existed > 0 {
                "forgot the run record of"
            } else {
                "no run record was kept for"
            };
            report.info("forgot", format_args!("{what} {}", target.key));
            Ending::Ran(ChildEnd::Exited(0))
        }
        Err(e) => {
            report.error("unavailable", &e);
            Ending::Unavailable
        }
    }
}

/// `out` and a newline on stdout, and how the subcommand ends: 0 once written.
pub fn print_out(out: &str, report: &Reporter) -> Ending {
    match print_line(out) {
        Ok(()) => Ending::Ran(ChildEnd::Exited(0)),
        // The reader went away (`status --key k | true`). Rust ignores SIGPIPE, so the
        // write fails with EPIPE instead of killing us. End quietly with 141
        // (128 + SIGPIPE), the code `cat` or `ls | head` get when SIGPIPE kills them:
        // 0 would claim the output was delivered, and a message would be noise.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ending::Ran(ChildEnd::Signalled(
            nix::sys::signal::Signal::SIGPIPE as i32,
        )),
        Err(e) => {
            report.error("internal", format_args!("cannot write to stdout: {e}"));
            Ending::Software
        }
    }
}

/// `line` and a newline on stdout, flushed, with the error returned rather than a panic
/// (`println!` panics, and the release profile aborts on panic).
fn print_line(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

fn to_text(key: &str, s: &Status) -> String {
    format!("{}{}{}", holder_text(key, s), queue_text(s), pause_text(s))
}

/// `; paused by ops1 until 2026-12-05T03:00:00Z: deploy` while paused (`pause`).
fn pause_text(s: &Status) -> String {
    match &s.paused {
        Some(p) => format!("; {}", p.describe()),
        None => String::new(),
    }
}

/// `; 2 waiting, next: web2 pid 8` when runs queue for the lock (`--wait`).
fn queue_text(s: &Status) -> String {
    if s.queued == 0 {
        return String::new();
    }
    let mut out = format!("; {} waiting", s.queued);
    if let Some(head) = &s.queue_head {
        let who = match head.split_once(' ') {
            Some((host, pid)) => format!("{host} pid {pid}"),
            None => head.clone(),
        };
        let _ = write!(out, ", next: {who}");
        // Beside shared holders, the one thing a reader of `status` asks: does a writer wait?
        if s.next_exclusive && !s.shared.is_empty() {
            out.push_str(" (exclusive: keeps new shared runs out)");
        }
    }
    out
}

fn holder_text(key: &str, s: &Status) -> String {
    if let Some(limit) = s.limit {
        return permits_text(key, limit, s);
    }
    if !s.shared.is_empty() {
        return format!(
            "{key}: held shared by {}{}",
            s.shared.len(),
            holders_text(&s.shared)
        );
    }
    if !s.held {
        let held_on = s
            .nodes
            .iter()
            .filter(|n| n.status.as_ref().is_ok_and(|s| s.held))
            .count();
        if held_on > 0 {
            return format!(
                "{key}: free (not held by a quorum; held on {held_on} of {} nodes)",
                s.nodes.len()
            );
        }
        return format!("{key}: free");
    }
    let ttl = match s.ttl_ms {
        Some(ms) => humantime::format_duration(Duration::from_millis(ms)).to_string(),
        None => "none (never expires)".to_owned(),
    };
    if s.foreign {
        return format!("{key}: held by another client (not redlock-run); ttl left {ttl}");
    }
    let mut out = format!("{key}: held");
    match (&s.host, s.pid, &s.kept) {
        (Some(host), pid, Some(kept)) => {
            let _ = write!(out, " by {host} ({})", kept.describe(pid));
        }
        (Some(host), Some(pid), None) => {
            let _ = write!(out, " by {host} pid {pid}");
        }
        _ => {}
    }
    if let Some(ms) = s.acquired_ms {
        let _ = write!(out, ", acquired {}", age(ms));
    }
    let _ = write!(out, ", ttl left {ttl}");
    if let Some(fence) = s.fence {
        let _ = write!(out, ", fence {fence}");
    }
    if let Some(cmd) = &s.command {
        let _ = write!(out, ", command: {cmd}");
    }
    if let Some(until) = keeper_deadline(s) {
        let _ = write!(out, ", max-hold deadline {}", timestamp::seconds(until));
    }
    if let Some(note) = &s.note {
        let _ = write!(out, ", note: {note}");
    }
    out
}

/// A keeper's hold (`acquire`): when its --max-hold ends (ms since 1970, server clock), from
/// its holder info.
fn keeper_deadline(s: &Status) -> Option<u64> {
    let max_hold = s
        .command
        .as_deref()?
        .strip_prefix(crate::config::KEEPER_COMMAND)?
        .strip_suffix(')')?;
    let max_hold = humantime::parse_duration(max_hold).ok()?;
    s.acquired_ms?
        .checked_add(u64::try_from(max_hold.as_millis()).ok()?)
}

/// `k: 2 of 3 held: web1 pid 7 (acquired ..., ttl left 20s, fence 9, command: x); ...`
fn permits_text(key: &str, limit: u32, s: &Status) -> String {
    format!(
        "{key}: {} of {limit} held (--limit {limit}){}",
        s.permits.len(),
        holders_text(&s.permits)
    )
}

/// `: web1 pid 7 (acquired ..., ttl left 20s, fence 9, command: x); ...`
fn holders_text(permits: &[lock::Permit]) -> String {
    let mut out = String::new();
    for (i, p) in permits.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        match (&p.host, p.pid, &p.kept) {
            (Some(host), pid, Some(kept)) => {
                let _ = write!(out, "{host} ({})", kept.describe(pid));
            }
            (Some(host), Some(pid), None) => {
                let _ = write!(out, "{host} pid {pid}");
            }
            _ => out.push_str("unknown holder"),
        }
        let mut details = Vec::new();
        if let Some(ms) = p.acquired_ms {
            details.push(format!("acquired {}", age(ms)));
        }
        details.push(format!(
            "ttl left {}",
            humantime::format_duration(Duration::from_millis(p.ttl_ms))
        ));
        if let Some(fence) = p.fence {
            details.push(format!("fence {fence}"));
        }
        if let Some(cmd) = &p.command {
            details.push(format!("command: {cmd}"));
        }
        if let Some(note) = &p.note {
            details.push(format!("note: {note}"));
        }
        let _ = write!(out, " ({})", details.join(", "));
    }
    out
}

/// The run record, one line each (none when there is no record).
fn records_text(r: &Records) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(run) = &r.last_run {
        out.push(format!("  last run: {}", record_text(run, r.now_ms)));
    }
    match &r.last_success {
        Some(ok) => out.push(format!("  last success: {}", record_text(ok, r.now_ms))),
        None if r.last_run.is_some() => out.push("  last success: none recorded".to_owned()),
        None => {}
    }
    out
}

/// `succeeded at 2026-05-02T03:00:00Z (2h ago), took 4s, on web1 pid 7, fence 9, program: x`
fn record_text(r: &RunRecord, now_ms: Option<u64>) -> String {
    let mut out = r.outcome.clone();
    match (r.exit_code, r.signal) {
        (Some(code), _) => {
            let _ = write!(out, " (exit {code})");
        }
        (None, Some(sig)) => {
            let _ = write!(out, " (signal {sig})");
        }
        _ => {}
    }
    let _ = write!(out, ", started {}", timestamp::seconds(r.started_ms));
    let now = now_ms.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
    });
    let ago = Duration::from_secs(now.saturating_sub(r.ended_ms) / 1000);
    let _ = write!(
        out,
        ", ended {} ago, took {}",
        humantime::format_duration(ago),
        humantime::format_duration(Duration::from_millis(r.duration_ms()))
    );
    if let Some(host) = &r.host {
        let _ = write!(out, ", on {host}");
        if let Some(pid) = r.pid {
            let _ = write!(out, " pid {pid}");
        }
    }
    if let Some(fence) = r.fence {
        let _ = write!(out, ", fence {fence}");
    }
    if let Some(program) = &r.program {
        let _ = write!(out, ", program: {program}");
    }
    if let Some(by) = &r.broken_by {
        let _ = write!(out, ", broken by {by}");
    }
    out
}

/// Redlock: one line a node, after the quorum's view.
fn nodes_text(s: &Status) -> Vec<String> {
    s.nodes
        .iter()
        .map(|n| match &n.status {
            Ok(status) => format!("  {}", to_text(&n.server, status)),
            Err(e) => format!("  {}: no answer: {e}", n.server),
        })
        .collect()
}

fn age(acquired_ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(acquired_ms);
    let ago = SystemTime::now()
        .duration_since(at)
        .map(|d| {
            format!(
                " ({} ago)",
                humantime::format_duration(Duration::from_secs(d.as_secs()))
            )
        })
        .unwrap_or_default();
    format!("{}{ago}", timestamp::seconds(acquired_ms))
}

/// The `status --json` object. Field order is the output order; absent values are `null`.
#[derive(Serialize)]
pub struct StatusJson<'a> {
    held: bool,
    foreign: bool,
    key: &'a str,
    host: Option<&'a str>,
    pid: Option<u32>,
    command: Option<&'a str>,
    acquired_ms: Option<u64>,
    /// A keeper's hold (`acquire`): when its --max-hold ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_hold_until_ms: Option<u64>,
    ttl_ms: Option<u64>,
    fence: Option<u64>,
    /// The holder's token (`break --holder`) and `--note`.
    token: Option<&'a str>,
    note: Option<&'a str>,
    /// A pause in force (`pause`), or `null`.
    paused: Option<PausedJson<'a>>,
    /// The holder's command finished and `--hold-at-least` keeps the lock until
    /// `kept_until_ms` (its pid has exited); both `null` otherwise.
    finished_ms: Option<u64>,
    kept_until_ms: Option<u64>,
    /// Runs waiting in the queue (`--wait`), and the next one as `host pid`.
    queued: u64,
    queue_head: Option<&'a str>,
    /// `--limit` locks only: the limit and every holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<PermitJson<'a>>>,
    /// `--shared`: every shared holder (left out when there is none), and whether the next
    /// waiter wants the lock exclusively, keeping new shared runs out (left out when nobody
    /// waits).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shared_holders: Vec<PermitJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_exclusive: Option<bool>,
    /// The run record (`null` when none is kept); read without taking the lock.
    last_run: Option<RecordJson<'a>>,
    last_success: Option<RecordJson<'a>>,
    /// Redlock: each node's view (left out for one server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nodes: Vec<NodeJson<'a>>,
}

/// A pause in `status --json`.
#[derive(Serialize)]
struct PausedJson<'a> {
    reason: &'a str,
    host: &'a str,
    since: Option<String>,
    until: String,
    until_ms: u64,
}

/// One run record in `status --json`.
#[derive(Serialize)]
struct RecordJson<'a> {
    host: Option<&'a str>,
    pid: Option<u32>,
    program: Option<&'a str>,
    started_at: String,
    ended_at: String,
    duration_ms: u64,
    /// `null` when the command was killed by a signal.
    exit_code: Option<i32>,
    signal: Option<i32>,
    outcome: &'a str,
    fence: Option<u64>,
    /// Outcome `broken`: the host that broke the lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    broken_by: Option<&'a str>,
}

fn record_json(r: &RunRecord) -> RecordJson<'_> {
    let rfc3339 = timestamp::millis;
    RecordJson {
        host: r.host.as_deref(),
        pid: r.pid,
        program: r.program.as_deref(),
        started_at: rfc3339(r.started_ms),
        ended_at: rfc3339(r.ended_ms),
        duration_ms: r.duration_ms(),
        exit_code: r.exit_code,
        signal: r.signal,
        outcome: &r.outcome,
        fence: r.fence,
        broken_by: r.broken_by.as_deref(),
    }
}

#[derive(Serialize)]
struct PermitJson<'a> {
    token: &'a str,
    note: Option<&'a str>,
    host: Option<&'a str>,
    pid: Option<u32>,
    command: Option<&'a str>,
    acquired_ms: Option<u64>,
    ttl_ms: u64,
    fence: Option<u64>,
    /// As the mutex's: the command finished and `--hold-at-least` keeps the permit.
    finished_ms: Option<u64>,
    kept_until_ms: Option<u64>,
}

/// One Redlock node in `status --json`: its URL (password hidden) and what it holds, or the
/// error that kept it from answering.
#[derive(Serialize)]
struct NodeJson<'a> {
    redis: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    status: Option<StatusJson<'a>>,
}

fn permits_json(permits: &[lock::Permit]) -> Vec<PermitJson<'_>> {
    permits
        .iter()
        .map(|p| PermitJson {
            token: &p.token,
            note: p.note.as_deref(),
            host: p.host.as_deref(),
            pid: p.pid,
            command: p.command.as_deref(),
            acquired_ms: p.acquired_ms,
            ttl_ms: p.ttl_ms,
            fence: p.fence,
            finished_ms: p.kept.map(|k| k.finished_ms),
            kept_until_ms: p.kept.map(|k| k.until_ms),
        })
        .collect()
}

fn to_json(key: &str, s: &Status) -> String {
    // Cannot fail: plain fields, no maps with non-string keys.
    serde_json::to_string(&json_of(key, s)).expect("status JSON serializes")
}

pub fn json_of<'a>(key: &'a str, s: &'a Status) -> StatusJson<'a> {
    StatusJson {
        held: s.held,
        foreign: s.foreign,
        key,
        host: s.host.as_deref(),
        pid: s.pid,
        command: s.command.as_deref(),
        acquired_ms: s.acquired_ms,
        max_hold_until_ms: keeper_deadline(s),
        ttl_ms: s.ttl_ms,
        fence: s.fence,
        token: s.token.as_deref(),
        note: s.note.as_deref(),
        paused: s.paused.as_ref().map(|p| PausedJson {
            reason: &p.reason,
            host: &p.by,
            since: (p.since_ms > 0).then(|| timestamp::seconds(p.since_ms)),
            until: timestamp::seconds(p.until_ms),
            until_ms: p.until_ms,
        }),
        finished_ms: s.kept.map(|k| k.finished_ms),
        kept_until_ms: s.kept.map(|k| k.until_ms),
        queued: s.queued,
        queue_head: s.queue_head.as_deref(),
        limit: s.limit,
        holders: s.limit.map(|_| permits_json(&s.permits)),
        shared_holders: permits_json(&s.shared),
        next_exclusive: s.queue_head.as_ref().map(|_| s.next_exclusive),
        last_run: s.records.last_run.as_ref().map(record_json),
        last_success: s.records.last_success.as_ref().map(record_json),
        nodes: s
            .nodes
            .iter()
            .map(|n| NodeJson {
                redis: &n.server,
                error: n.status.as_ref().err().map(String::as_str),
                status: n.status.as_ref().ok().map(|s| json_of(key, s)),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_lock_is_all_nulls_in_json() {
        assert_eq!(
            to_json("redlock:k", &Status::default()),
            "{\"held\":false,\"foreign\":false,\"key\":\"redlock:k\",\"host\":null,\"pid\":null,\
             \"command\":null,\"acquired_ms\":null,\"ttl_ms\":null,\"fence\":null,\
             \"token\":null,\"note\":null,\"paused\":null,\"finished_ms\":null,\
             \"kept_until_ms\":null,\"queued\":0,\"queue_head\":null,\"last_run\":null,\
             \"last_success\":null}"
        );
        assert_eq!(to_text("redlock:k", &Status::default()), "redlock:k: free");
    }

    #[test]
    fn held_lock_shows_holder() {
        let s = Status {
            held: true,
            ttl_ms: Some(2000),
            host: Some("web1".into()),
            pid: Some(7),
            fence: Some(9),
            ..Status::default()
        };
        let text = to_text("k", &s);
        assert!(
            text.starts_with("k: held by web1 pid 7, ttl left 2s, fence 9"),
            "{text}"
        );
        assert!(
            to_json("k", &s).contains(
                "\"held\":true,\"foreign\":false,\"key\":\"k\",\"host\":\"web1\",\"pid\":7"
            )
        );
        let queued = Status {
            queued: 2,
            queue_head: Some("web2 8".into()),
            ..s
        };
        assert!(
            to_text("k", &queued).ends_with("; 2 waiting, next: web2 pid 8"),
            "{}",
            to_text("k", &queued)
        );
        assert!(to_json("k", &queued).contains(",\"queued\":2,\"queue_head\":\"web2 8\","));
    }
}
