//! `status`: one read-only pipeline that reads either layout (the mutex's string key or the
//! semaphore's sorted set), so that `status` needs no `--limit` to tell who holds a lock.

use redis::Value;

use super::keys::Keys;
use super::operator::paused_from;
use super::record::{self, Records};
use super::script::text;
use super::shared::SHARED_WAITER;
use crate::lock::{Kept, Permit, Status};

// Where each reply sits in the pipeline.
const TYPE: usize = 0;
const VALUE: usize = 1;
const PTTL: usize = 2;
const HOLDER: usize = 3;
const FENCE: usize = 4;
const QUEUE_HEAD: usize = 5;
const QUEUED: usize = 6;
const PERMITS: usize = 7;
const HOLDERS: usize = 8;
const LIMIT: usize = 9;
const TIME: usize = 10;
const LAST_RUN: usize = 11;
const LAST_SUCCESS: usize = 12;
const PAUSE: usize = 13;
const SHARED: usize = 14;

/// How many replies the reads of one lock take (`add_reads`).
pub const REPLIES: usize = SHARED + 1;

/// The read-only pipeline. Replies that do not fit the key's type (GET on a sorted set) come
/// back as error values and are ignored; see [`parse`].
pub fn pipeline(k: &Keys) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    add_reads(&mut pipe, k);
    pipe.ignore_errors();
    pipe
}

/// The reads of lock `k` ([`REPLIES`] commands) added to `pipe`, which must ignore errors:
/// `list` reads many locks in one pipeline, and [`parse`] takes each lock's replies.
pub fn add_reads(pipe: &mut redis::Pipeline, k: &Keys) {
    pipe.cmd("TYPE").arg(&k.lock);
    pipe.cmd("GET").arg(&k.lock);
    pipe.cmd("PTTL").arg(&k.lock);
    pipe.cmd("HGETALL").arg(&k.holder);
    pipe.cmd("GET").arg(&k.fence);
    pipe.cmd("ZRANGE").arg(&k.queue).arg(0).arg(0);
    pipe.cmd("ZCARD").arg(&k.queue);
    pipe.cmd("ZRANGE")
        .arg(&k.lock)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("HGETALL").arg(&k.holders);
    pipe.cmd("GET").arg(&k.limit);
    pipe.cmd("TIME");
    pipe.cmd("HGETALL").arg(&k.last_run);
    pipe.cmd("HGETALL").arg(&k.last_success);
    pipe.cmd("HGETALL").arg(&k.pause);
    pipe.cmd("ZRANGE")
        .arg(&k.shared)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
}

/// The status in `replies`; `Err` with the error reply that matters (NOAUTH, WRONGTYPE of a
/// queue key, ...), or `Ok(None)` for replies of an unexpected shape.
pub fn parse(replies: &[Value]) -> Result<Option<Status>, &Value> {
    let kind = match replies.get(TYPE) {
        Some(e @ Value::ServerError(_)) => return Err(e),
        Some(v) => text(v).unwrap_or_default(),
        None => return Ok(None),
    };
    let relevant: &[usize] = match kind.as_str() {
        "zset" => &[
            PERMITS, HOLDERS, LIMIT, TIME, FENCE, QUEUE_HEAD, QUEUED, PTTL,
        ],
        _ => &[VALUE, PTTL, HOLDER, FENCE, QUEUE_HEAD, QUEUED, SHARED],
    };
    if let Some(e) = relevant
        .iter()
        .filter_map(|&i| replies.get(i))
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(e);
    }
    let status = match kind.as_str() {
        "zset" => semaphore(replies),
        _ => mutex(replies),
    };
    Ok(status.map(|mut s| {
        s.queued = int(replies.get(QUEUED)).unwrap_or(0).max(0) as u64;
        let head = strings(replies.get(QUEUE_HEAD)).into_iter().next();
        s.next_exclusive = head.as_ref().is_some_and(|w| !w.starts_with(SHARED_WAITER));
        s.queue_head = head.map(|w| waiter_shown(&w));
        s.records = records(replies);
        let pause = pairs(replies.get(PAUSE));
        s.paused = paused_from(|name| {
            pause
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        });
        s
    }))
}

/// The run records and the server's clock (a record that is no hash reads as none).
fn records(replies: &[Value]) -> Records {
    let time = strings(replies.get(TIME));
    let now_ms = match (
        time.first().and_then(|s| s.parse::<u64>().ok()),
        time.get(1).and_then(|s| s.parse::<u64>().ok()),
    ) {
        (Some(secs), Some(micros)) => Some(secs * 1000 + micros / 1000),
        _ => None,
    };
    Records {
        now_ms,
        last_run: record::parse(&pairs(replies.get(LAST_RUN))),
        last_success: record::parse(&pairs(replies.get(LAST_SUCCESS))),
    }
}

fn mutex(replies: &[Value]) -> Option<Status> {
    let value = match replies.get(VALUE)? {
        Value::Nil => None,
        v => Some(text(v)?),
    };
    let pttl = int(replies.get(PTTL))?;
    let info = pairs(replies.get(HOLDER));
    let fence = replies.get(FENCE).and_then(text);
    let mut status = status_from(value, pttl, info, fence);
    // --shared: the shared holders beside a free lock (never beside an exclusive holder).
    status.shared = match now_ms(replies) {
        Some(now) => live_holders(replies, SHARED, now),
        None => Vec::new(),
    };
    status.held |= !status.shared.is_empty();
    Some(status)
}

/// The server's clock (TIME), in ms.
fn now_ms(replies: &[Value]) -> Option<u64> {
    let time = strings(replies.get(TIME));
    let secs: u64 = time.first()?.parse().ok()?;
    let micros: u64 = time.get(1)?.parse().ok()?;
    Some(secs * 1000 + micros / 1000)
}

/// The members of the sorted set at `at` (tokens scored by lease end) whose lease has not
/// ended by `now_ms`, with their info from the holders hash (`--limit` permits and `--shared`
/// holders alike).
fn live_holders(replies: &[Value], at: usize, now_ms: u64) -> Vec<Permit> {
    let infos = pairs(replies.get(HOLDERS));
    let mut permits = Vec::new();
    for (token, score) in pairs(replies.get(at)) {
        let Some(ends) = score.parse::<f64>().ok().map(|f| f as u64) else {
            continue;
        };
        if ends <= now_ms {
            continue;
        }
        let info = infos
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, i)| i.as_str());
        // `TOKEN:kept`: `finished_ms<TAB>kept_until_ms`, noted by a release that keeps the
        // permit (semaphore/release.lua).
        let kept = infos
            .iter()
            .find(|(t, _)| t.strip_suffix(":kept") == Some(token.as_str()))
            .and_then(|(_, k)| k.split_once('\t'))
            .and_then(|(finished, until)| Kept::parse(Some(finished), Some(until)));
        let mut fields = info.unwrap_or_default().splitn(5, '\t');
        let mut next = || fields.next().filter(|f| !f.is_empty()).map(str::to_owned);
        let (host, pid, acquired_ms, fence) = (next(), next(), next(), next());
        // The command, and the note after it (semaphore/acquire.lua).
        let (command, note) = match next() {
            Some(rest) => match rest.split_once("\t\u{1f}") {
                Some((cmd, note)) => (Some(cmd.to_owned()), Some(note.to_owned())),
                None => (Some(rest), None),
            },
            None => (None, None),
        };
        permits.push(Permit {
            token: token.clone(),
            host,
            pid: pid.and_then(|p| p.parse().ok()),
            acquired_ms: acquired_ms.and_then(|p| p.parse().ok()),
            fence: fence.and_then(|p| p.parse().ok()),
            command: command.filter(|c| !c.is_empty()),
            note: note.filter(|n| !n.is_empty()),
            ttl_ms: ends - now_ms,
            kept,
        });
    }
    permits
}

fn status_from(
    value: Option<String>,
    pttl: i64,
    info: Vec<(String, String)>,
    fence: Option<String>,
) -> Status {
    let Some(value) = value else {
        return Status::default();
    };
    let field = |name: &str| info.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let ttl_ms = u64::try_from(pttl).ok();
    // Holder info counts only if it was written for the value the lock holds now.
    if field("token").as_deref() != Some(value.as_str()) {
        return Status {
            held: true,
            foreign: true,
            ttl_ms,
            // Its value is the only name `break --holder` has for it.
            token: Some(value),
            ..Status::default()
        };
    }
    Status {
        held: true,
        foreign: false,
        note: field("note").filter(|n| !n.is_empty()),
        token: Some(value),
        ttl_ms,
        host: field("host"),
        pid: field("pid").and_then(|p| p.parse().ok()),
        command: field("cmd"),
        acquired_ms: field("acquired_ms").and_then(|p| p.parse().ok()),
        fence: field("fence").or(fence).and_then(|f| f.parse().ok()),
        kept: Kept::parse(
            field("finished_ms").as_deref(),
            field("kept_until_ms").as_deref(),
        ),
        ..Status::default()
    }
}

/// The semaphore's holders whose lease has not ended by the server's clock (the scripts drop
/// the others on their next call; `status` only reads).
fn semaphore(replies: &[Value]) -> Option<Status> {
    let permits = live_holders(replies, PERMITS, now_ms(replies)?);
    let Some(limit) = replies
        .get(LIMIT)
        .and_then(text)
        .and_then(|l| l.parse().ok())
    else {
        // No limit recorded: a sorted set of somebody else's (the acquire refuses it).
        return Some(Status {
            held: true,
            foreign: true,
            ttl_ms: int(replies.get(PTTL)).and_then(|t| u64::try_from(t).ok()),
            ..Status::default()
        });
    };
    let limit = Some(limit);
    Some(Status {
        held: !permits.is_empty(),
        limit,
        permits,
        ..Status::default()
    })
}

/// A waiter id for people: `host pid` (the id is `RANDOM host pid`, see `HolderInfo`).
fn waiter_shown(id: &str) -> String {
    id.split_once(' ').map_or(id, |(_, who)| who).to_owned()
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// An array reply as strings (RESP2 flat arrays; RESP3 maps and pairs are flattened).
fn strings(v: Option<&Value>) -> Vec<String> {
    fn flatten(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(items) | Value::Set(items) => {
                items.iter().for_each(|i| flatten(i, out));
            }
            Value::Map(entries) => entries.iter().for_each(|(k, v)| {
                flatten(k, out);
                flatten(v, out);
            }),
            Value::Double(d) => out.push(d.to_string()),
            other => out.extend(text(other)),
        }
    }
    let mut out = Vec::new();
    if let Some(v) = v {
        flatten(v, &mut out);
    }
    out
}

/// A flat `k1 v1 k2 v2` reply (HGETALL, ZRANGE WITHSCORES) as pairs.
fn pairs(v: Option<&Value>) -> Vec<(String, String)> {
    let flat = strings(v);
    flat.chunks_exact(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn status_ignores_holder_info_of_another_value() {
        let info = vec![
            ("token".to_owned(), "old".to_owned()),
            ("host".to_owned(), "h".to_owned()),
        ];
        let s = status_from(Some("new".into()), 900, info, Some("7".into()));
        assert!(s.held && s.foreign);
        assert_eq!(s.host, None);
        assert_eq!(s.fence, None);
        assert_eq!(status_from(None, -2, vec![], None), Status::default());
    }

    #[test]
    fn reads_a_semaphore_and_skips_ended_leases() {
        // (On a real server the GET comes back as a WRONGTYPE error value: the
        // integration tests read a live semaphore.)
        let replies = vec![
            Value::SimpleString("zset".into()),
            Value::Nil,
            Value::Int(5000),
            Value::Array(vec![]),
            bulk("12"),
            Value::Array(vec![bulk("x w2 8")]),
            Value::Int(1),
            Value::Array(vec![bulk("t1"), bulk("1500"), bulk("t2"), bulk("9000")]),
            Value::Array(vec![
                bulk("t2"),
                bulk("web1\t7\t1000\t11\tsleep 1"),
                bulk("t2:kept"),
                bulk("1500\t9000"),
            ]),
            bulk("3"),
            Value::Array(vec![bulk("2"), bulk("0")]),
        ];
        let s = parse(&replies).unwrap().unwrap();
        assert!(s.held);
        assert_eq!(s.limit, Some(3));
        assert_eq!(s.queued, 1);
        assert_eq!(s.queue_head.as_deref(), Some("w2 8"));
        assert_eq!(
            s.permits,
            vec![Permit {
                token: "t2".into(),
                host: Some("web1".into()),
                pid: Some(7),
                acquired_ms: Some(1000),
                fence: Some(11),
                command: Some("sleep 1".into()),
                note: None,
                ttl_ms: 7000,
                kept: Some(Kept {
                    finished_ms: 1500,
                    until_ms: 9000,
                }),
            }]
        );
    }
}
