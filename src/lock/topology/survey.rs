//! `list` on one server: SCAN for the companions of the locks under a name
//! (`protocol/listing.rs`), and the `status` reads of the locks found, in batches. Each
//! topology's `list`, in its own file, says which servers are scanned and how their answers
//! add up (one server; every master of a cluster; every Redlock node, as a quorum view).

use std::collections::BTreeSet;

use redis::Value;
use tokio::time::Instant;

use super::server::{Server, deadline_in};
use super::shared::read_status;
use crate::lock::protocol::listing;
use crate::lock::{Cut, ListQuery, Listed, Listing, RedisFailure, Status};

/// Locks read in one pipeline: a round trip each, and replies of a bounded size.
const READ_BATCH: usize = 100;

/// The lock names one server's SCAN found: at most `max_locks` + 1 (the first by name), so
/// that merging the servers' names keeps the first `max_locks` of them all.
#[derive(Debug, Default)]
pub struct Scanned {
    pub names: BTreeSet<String>,
    /// More names than kept were found.
    pub too_many: bool,
    /// The scan stopped at `scan_time` before its end.
    pub took_too_long: bool,
}

impl Scanned {
    /// The first `max` names of all `scans`, and why the list may be incomplete.
    pub fn merge<'a>(
        scans: impl IntoIterator<Item = &'a Scanned>,
        max: usize,
    ) -> (Vec<String>, Option<Cut>) {
        let mut names = BTreeSet::new();
        let (mut too_many, mut took_too_long) = (false, false);
        for scan in scans {
            names.extend(scan.names.iter().cloned());
            too_many |= scan.too_many;
            took_too_long |= scan.took_too_long;
        }
        too_many |= names.len() > max;
        let cut = if took_too_long {
            Some(Cut::TookTooLong)
        } else if too_many {
            Some(Cut::TooMany)
        } else {
            None
        };
        (names.into_iter().take(max).collect(), cut)
    }
}

/// When the scan must stop, for a listing that starts now.
pub fn scan_deadline(query: &ListQuery) -> Instant {
    deadline_in(query.scan_time)
}

/// SCAN `server` with each pattern of the query, every reply within `reply_within`, no call
/// started after `until`. The loop ends when SCAN says it went round (cursor 0) or at `until`.
pub async fn scan(
    server: &Server,
    query: &ListQuery,
    until: Instant,
) -> Result<Scanned, RedisFailure> {
    let mut found = Scanned::default();
    for pattern in listing::patterns(&query.starts_with) {
        let mut cursor = "0".to_owned();
        loop {
            if Instant::now() >= until {
                found.took_too_long = true;
                return Ok(found);
            }
            let mut pipe = redis::pipe();
            pipe.cmd("SCAN")
                .arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(query.scan_count);
            let replies = server.query(&pipe, "SCAN", query.reply_within).await?;
            let Some((next, keys)) = replies.first().and_then(scan_reply) else {
                let reply = replies.into_iter().next().unwrap_or(Value::Nil);
                return Err(RedisFailure::unexpected_reply(
                    server.shown(),
                    "SCAN",
                    &reply,
                ));
            };
            for key in keys {
                if let Some(name) = listing::lock_of(&key, &query.starts_with) {
                    found.names.insert(name);
                    if found.names.len() > query.max_locks + 1 {
                        found.names.pop_last();
                        found.too_many = true;
                    }
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// The status of each lock of `names` on `server`, in order: an error reply about one lock
/// (a key of another type) is that lock's; a failure of the server is the whole read's.
pub async fn read(
    server: &Server,
    names: &[String],
    query: &ListQuery,
) -> Result<Vec<Result<Status, String>>, RedisFailure> {
    let mut out = Vec::with_capacity(names.len());
    for batch in names.chunks(READ_BATCH) {
        let (pipe, read) = listing::reads(batch);
        let replies = server.query(&pipe, "list", query.reply_within).await?;
        let mut per_lock = listing::split(&replies);
        for was_read in read {
            out.push(match (was_read, per_lock.next()) {
                (true, Some(replies)) => {
                    read_status(replies.to_vec(), server.shown()).map_err(|e| e.to_string())
                }
                (true, None) => Err("no reply".to_owned()),
                (false, _) => Err("not a valid lock name".to_owned()),
            });
        }
    }
    Ok(out)
}

/// `list` on one server: scan it, then read the locks found.
pub async fn one_server(server: &Server, query: &ListQuery) -> Result<Listing, RedisFailure> {
    let scanned = scan(server, query, scan_deadline(query)).await?;
    let (names, cut) = Scanned::merge([&scanned], query.max_locks);
    let statuses = read(server, &names, query).await?;
    Ok(Listing {
        locks: listed(names, statuses),
        cut,
    })
}

/// Names and their statuses as rows.
pub fn listed(names: Vec<String>, statuses: Vec<Result<Status, String>>) -> Vec<Listed> {
    names
        .into_iter()
        .zip(statuses)
        .map(|(name, status)| Listed { name, status })
        .collect()
}

/// A SCAN reply: the next cursor and the keys of this page.
fn scan_reply(reply: &Value) -> Option<(String, Vec<String>)> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let cursor = text(parts.first()?)?;
    let Value::Array(keys) = parts.get(1)? else {
        return None;
    };
    Some((cursor, keys.iter().filter_map(text).collect()))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_names_keep_the_first_by_name() {
        let a = Scanned {
            names: ["b", "d"].map(String::from).into(),
            ..Scanned::default()
        };
        let b = Scanned {
            names: ["a", "c"].map(String::from).into(),
            ..Scanned::default()
        };
        assert_eq!(
            Scanned::merge([&a, &b], 3),
            (vec!["a".into(), "b".into(), "c".into()], Some(Cut::TooMany))
        );
        assert_eq!(Scanned::merge([&a, &b], 4).1, None);
    }
}
