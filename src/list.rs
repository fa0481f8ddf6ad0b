//! `redlock-run list`: every lock under a prefix, one row each (holder, age, TTL left, queue,
//! `--limit` permits, last run), as a table or as one JSON array of `status --json` objects.
//! Read-only. The rows are made from each lock's [`Status`] (and its run record), so a field
//! added there is one rendering change away from the listing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::exit::Ending;
use crate::lock::target::Target;
use crate::lock::{self, Cut, Kept, ListQuery, Listed, Lock, Permit, Status};
use crate::report::{Reporter, one_line};
use crate::status::{StatusJson, json_of, print_out};

pub async fn list(target: &Target, query: &ListQuery, json: bool, report: &Reporter) -> Ending {
    let backend = match lock::open(target, None, target.timeout).await {
        Ok(backend) => backend,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    let listing = match backend.list(query).await {
        Ok(listing) => listing,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    match listing.cut {
        Some(Cut::TooMany) => report.warn(
            "list-cut",
            format_args!(
                "more than {} locks start with {}: the first {} by name are shown (raise \
                 --max-locks or narrow with --name-prefix)",
                query.max_locks,
                one_line(&query.starts_with),
                query.max_locks
            ),
        ),
        Some(Cut::TookTooLong) => report.warn(
            "list-cut",
            format_args!(
                "the scan took longer than --scan-time {}: locks may be missing from the \
                 listing (raise --scan-time or narrow with --name-prefix)",
                humantime::format_duration(query.scan_time)
            ),
        ),
        None => {}
    }
    let out = if json {
        to_json(&listing.locks)
    } else {
        table(&listing.locks)
    };
    print_out(&out, report)
}

/// One element of the `list --json` array: the lock as `status --json` shows it, or why it
/// could not be read.
#[derive(Serialize)]
#[serde(untagged)]
enum RowJson<'a> {
    Lock(Box<StatusJson<'a>>),
    Unreadable { key: &'a str, error: &'a str },
}

fn to_json(locks: &[Listed]) -> String {
    let rows: Vec<RowJson> = locks
        .iter()
        .map(|l| match &l.status {
            Ok(status) => RowJson::Lock(Box::new(json_of(&l.name, status))),
            Err(error) => RowJson::Unreadable {
                key: &l.name,
                error,
            },
        })
        .collect();
    // Cannot fail: plain fields, no maps with non-string keys.
    serde_json::to_string(&rows).expect("list JSON serializes")
}

const HEADER: [&str; 8] = [
    "LOCK", "HOLDER", "AGE", "TTL", "QUEUE", "PERMITS", "PAUSED", "LAST RUN",
];

/// The table: a header and a row a lock, columns padded to their widest cell (the last one
/// left as it is). No locks: the header alone.
fn table(locks: &[Listed]) -> String {
    let now = now_ms();
    let rows: Vec<[String; 8]> = std::iter::once(HEADER.map(str::to_owned))
        .chain(locks.iter().map(|l| row(l, now)))
        .collect();
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            line.trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cells of one lock. The holder info and the name were written by other hosts: no
/// control character of them reaches the terminal as such.
fn row(l: &Listed, local_now: u64) -> [String; 8] {
    let clean = |s: &str| one_line(s).into_owned();
    let name = clean(&l.name);
    let s = match &l.status {
        Ok(s) => s,
        Err(e) => {
            return [
                name,
                clean(&format!("unreadable: {e}")),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ];
        }
    };
    // The server's clock when it has one: ages are then not skewed by this host's clock.
    let now = s.records.now_ms.unwrap_or(local_now);
    let (holder, acquired, ttl, permits) = match s.limit {
        Some(limit) => {
            let holder = if s.permits.is_empty() {
                "free".to_owned()
            } else {
                holders_cell(&s.permits)
            };
            (
                holder,
                s.permits.iter().filter_map(|p| p.acquired_ms).min(),
                s.permits.iter().map(|p| p.ttl_ms).min(),
                format!("{}/{limit}", s.permits.len()),
            )
        }
        // --shared holders and no exclusive one: the first of them, and how many more.
        None if !s.shared.is_empty() && s.token.is_none() && !s.foreign => {
            let holder = format!("shared: {}", holders_cell(&s.shared));
            (
                holder,
                s.shared.iter().filter_map(|p| p.acquired_ms).min(),
                s.shared.iter().map(|p| p.ttl_ms).max(),
                "-".to_owned(),
            )
        }
        None => (holder_cell(s), s.acquired_ms, s.ttl_ms, "-".to_owned()),
    };
    let held = s.held || !s.shared.is_empty() || !s.permits.is_empty();
    let age = acquired.map_or("-".to_owned(), |at| short(now.saturating_sub(at)));
    let ttl = match (held, ttl) {
        (false, _) => "-".to_owned(),
        (true, Some(ms)) => short(ms),
        (true, None) => "none".to_owned(),
    };
    let last_run = s.records.last_run.as_ref().map_or("-".to_owned(), |r| {
        let how = match (r.exit_code, r.signal) {
            (Some(code), _) if r.outcome != "succeeded" => format!(" (exit {code})"),
            (None, Some(sig)) => format!(" (signal {sig})"),
            _ => String::new(),
        };
        format!(
            "{}{how} {} ago",
            r.outcome,
            short(now.saturating_sub(r.ended_ms))
        )
    });
    // `28m left: DB migration`: how long new runs stay busy, and why.
    let paused = s.paused.as_ref().map_or("-".to_owned(), |p| {
        format!(
            "{} left: {}",
            short(p.until_ms.saturating_sub(now)),
            p.reason
        )
    });
    [
        name,
        clean(&holder),
        age,
        ttl,
        s.queued.to_string(),
        permits,
        clean(&paused),
        clean(&last_run),
    ]
}

/// The holder of a mutex: `web1 pid 7`, another client's value, free, or (Redlock) held on
/// some nodes without a quorum.
fn holder_cell(s: &Status) -> String {
    if s.held {
        if s.foreign {
            return "another client".to_owned();
        }
        return who_kept(s.host.as_deref(), s.pid, s.kept.as_ref());
    }
    let held_on = s
        .nodes
        .iter()
        .filter(|n| n.status.as_ref().is_ok_and(|s| s.held))
        .count();
    if held_on > 0 {
        return format!("no quorum (held on {held_on} of {})", s.nodes.len());
    }
    "free".to_owned()
}

/// Several holders (`--limit` permits, `--shared` holders): one named, a running one first
/// (a finished one kept by `--hold-at-least` is not what holds the lock busy at work), and
/// how many more, saying how many of them finished: `web1 pid 7 +2 (1 finished)`.
fn holders_cell(holders: &[Permit]) -> String {
    let (kept, running): (Vec<&Permit>, Vec<&Permit>) =
        holders.iter().partition(|p| p.kept.is_some());
    let mut order = running.into_iter().chain(kept);
    let Some(first) = order.next() else {
        return "free".to_owned();
    };
    let named = who_kept(first.host.as_deref(), first.pid, first.kept.as_ref());
    let rest: Vec<&Permit> = order.collect();
    let finished = rest.iter().filter(|p| p.kept.is_some()).count();
    match (rest.len(), finished) {
        (0, _) => named,
        (n, 0) => format!("{named} +{n}"),
        (n, f) if f == n => format!("{named} +{n} finished"),
        (n, f) => format!("{named} +{n} ({f} finished)"),
    }
}

/// A holder, told as finished when its command has ended and `--hold-at-least` keeps the
/// lock (as `status` tells it, shorter): `web1 pid 7 finished, kept to T`.
fn who_kept(host: Option<&str>, pid: Option<u32>, kept: Option<&Kept>) -> String {
    let who = who(host, pid);
    match kept {
        Some(kept) => format!(
            "{who} finished, kept to {}",
            crate::timestamp::seconds(kept.until_ms)
        ),
        None => who,
    }
}

fn who(host: Option<&str>, pid: Option<u32>) -> String {
    match (host, pid) {
        (Some(host), Some(pid)) => format!("{host} pid {pid}"),
        (Some(host), None) => host.to_owned(),
        _ => "unknown holder".to_owned(),
    }
}

/// A duration in whole seconds, its two largest units without a space (`1h2m`, `3days5h`,
/// `20s`), so that a column is one short word.
fn short(ms: u64) -> String {
    let text = humantime::format_duration(Duration::from_secs(ms / 1000)).to_string();
    text.split(' ').take(2).collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Records, RunRecord};

    #[test]
    fn rows_show_holder_age_ttl_queue_permits_and_last_run() {
        let held = Listed {
            name: "redlock:a".into(),
            status: Ok(Status {
                held: true,
                host: Some("web1".into()),
                pid: Some(7),
                acquired_ms: Some(10_000),
                ttl_ms: Some(20_000),
                queued: 2,
                records: Records {
                    now_ms: Some(75_000),
                    last_run: Some(RunRecord {
                        outcome: "failed".into(),
                        exit_code: Some(3),
                        ended_ms: 15_000,
                        ..RunRecord::default()
                    }),
                    last_success: None,
                },
                ..Status::default()
            }),
        };
        assert_eq!(
            row(&held, 0),
            [
                "redlock:a",
                "web1 pid 7",
                "1m5s",
                "20s",
                "2",
                "-",
                "-",
                "failed (exit 3) 1m ago"
            ]
            .map(String::from)
        );
        let permits = Listed {
            name: "redlock:b".into(),
            status: Ok(Status {
                held: true,
                limit: Some(3),
                permits: vec![
                    Permit {
                        host: Some("w".into()),
                        pid: Some(1),
                        ttl_ms: 5000,
                        ..Permit::default()
                    },
                    Permit {
                        ttl_ms: 9000,
                        ..Permit::default()
                    },
                ],
                ..Status::default()
            }),
        };
        let cells = row(&permits, 0);
        assert_eq!(cells[1], "w pid 1 +1");
        assert_eq!(cells[3], "5s");
        assert_eq!(cells[5], "2/3");
        let text = table(&[held, permits]);
        assert!(text.starts_with("LOCK       HOLDER"), "{text}");
        assert_eq!(
            table(&[]),
            "LOCK  HOLDER  AGE  TTL  QUEUE  PERMITS  PAUSED  LAST RUN"
        );
    }

    /// A holder kept by --hold-at-least is told as finished; a running one is named first,
    /// and the others are counted with how many of them finished.
    #[test]
    fn kept_holders_are_told_as_finished() {
        let kept = Some(Kept {
            finished_ms: 1_000,
            until_ms: 61_000,
        });
        let holder = |pid: u32, kept: Option<Kept>| Permit {
            host: Some("w".into()),
            pid: Some(pid),
            kept,
            ..Permit::default()
        };
        let mutex = Status {
            held: true,
            host: Some("w".into()),
            pid: Some(7),
            kept,
            ..Status::default()
        };
        assert_eq!(
            holder_cell(&mutex),
            "w pid 7 finished, kept to 1970-01-01T00:01:01Z"
        );
        assert_eq!(
            holders_cell(&[holder(1, kept), holder(2, None)]),
            "w pid 2 +1 finished"
        );
        assert_eq!(
            holders_cell(&[holder(1, kept), holder(2, None), holder(3, None)]),
            "w pid 2 +2 (1 finished)"
        );
        assert_eq!(
            holders_cell(&[holder(1, kept), holder(3, kept)]),
            "w pid 1 finished, kept to 1970-01-01T00:01:01Z +1 finished"
        );
        assert_eq!(
            holders_cell(&[holder(1, None), holder(2, None)]),
            "w pid 1 +1"
        );
        let shared = Listed {
            name: "redlock:s".into(),
            status: Ok(Status {
                held: true,
                shared: vec![holder(1, kept)],
                ..Status::default()
            }),
        };
        assert_eq!(
            row(&shared, 0)[1],
            "shared: w pid 1 finished, kept to 1970-01-01T00:01:01Z"
        );
    }
}
