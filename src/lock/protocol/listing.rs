//! `list`: how the locks whose names start with a text are found among the keys of a server
//! (by the key scheme of `keys.rs`, with SCAN patterns, never KEYS), and read in batches.
//!
//! A lock is found by its companions, not by its own key: the key of a lock is any string
//! (another client's key under the same prefix looks the same), while a companion's name
//! says which lock it belongs to (`keys::companion_parts`). A lock is listed when one of
//! [`LISTED_BY`] exists: it is held (holder info of a mutex; holders and limit of a `--limit`
//! lock), runs wait for it (the queue), or it has a run record. A fence counter alone does
//! not list it (a lock unused for longer than its record is kept), nor does a key that only
//! another client (`SET NX`, no holder info) holds.
//!
//! The companions of a lock `L` are `{L}:NAME` when `L` has no hash tag and `L::NAME` when
//! it has one (`keys.rs`): two SCAN patterns cover both, the second only needed when the
//! text does not itself fix a tag.

use redis::Value;

use super::keys::{self, Keys};
use super::status;

/// Companions whose presence lists a lock (a pause alone lists it too: "what is paused for
/// maintenance?" is asked of `list`).
pub const LISTED_BY: &[&str] = &[
    "holder",
    "holders",
    "limit",
    "queue",
    "last-run",
    "last-success",
    "pause",
    "shared",
];

/// The SCAN MATCH patterns that find the companions of every lock whose name starts with
/// `starts_with` (the prefix included): `L::NAME` of tagged names, `{L}:NAME` of the others.
pub fn patterns(starts_with: &str) -> Vec<String> {
    let text = glob_escape(starts_with);
    let mut out = vec![format!("{text}*::*")];
    // Every name that starts with a complete tag has that tag: no `{L}:NAME` can match.
    if !keys::has_hash_tag(starts_with) {
        out.push(format!("{{{text}*}}:*"));
    }
    out
}

/// The lock that `key`, found by a pattern of [`patterns`], lists, if any: a companion of
/// [`LISTED_BY`] of a lock whose name starts with `starts_with`.
pub fn lock_of(key: &str, starts_with: &str) -> Option<String> {
    let (lock, companion) = keys::companion_parts(key)?;
    (LISTED_BY.contains(&companion) && lock.starts_with(starts_with)).then_some(lock)
}

/// `text` as a Redis glob that matches only itself (`*`, `?`, `[`, `]` and `\` escaped).
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One pipeline of the `status` reads of every lock in `names` (names `lock_of` gave, which
/// are valid lock names; one that is not is left out and comes back as `None`).
pub fn reads(names: &[String]) -> (redis::Pipeline, Vec<bool>) {
    let mut pipe = redis::pipe();
    let read: Vec<bool> = names
        .iter()
        .map(|name| match Keys::new(name) {
            Ok(k) => {
                status::add_reads(&mut pipe, &k);
                true
            }
            Err(_) => false,
        })
        .collect();
    pipe.ignore_errors();
    (pipe, read)
}

/// The replies to `reads`, one slice a lock that was read.
pub fn split(replies: &[Value]) -> impl Iterator<Item = &[Value]> {
    replies.chunks(status::REPLIES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_name_their_lock_and_the_lock_key_does_not() {
        let p = "redlock:";
        assert_eq!(
            lock_of("{redlock:a}:holder", p).as_deref(),
            Some("redlock:a")
        );
        assert_eq!(
            lock_of("{redlock:a}:last-run", p).as_deref(),
            Some("redlock:a")
        );
        assert_eq!(
            lock_of("redlock:{b}:a::queue", p).as_deref(),
            Some("redlock:{b}:a")
        );
        // The lock key itself, a fence counter alone, another prefix: not listed.
        assert_eq!(lock_of("redlock:a", p), None);
        assert_eq!(lock_of("{redlock:a}:fence", p), None);
        assert_eq!(lock_of("{other:a}:holder", p), None);
        assert_eq!(lock_of("{redlock:a}:holder", "redlock:b"), None);
    }

    #[test]
    fn patterns_cover_both_companion_forms_and_escape_globs() {
        assert_eq!(patterns("redlock:"), ["redlock:*::*", "{redlock:*}:*"]);
        assert_eq!(patterns("{app}:"), ["{app}:*::*"]);
        assert_eq!(patterns("a*b?"), ["a\\*b\\?*::*", "{a\\*b\\?*}:*"]);
    }
}
