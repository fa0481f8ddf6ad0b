//! The key layout: a lock key and its companions, and the rule that keeps them apart.
//!
//! Two things must hold for every lock name `L` (the prefix included):
//!
//! 1. **Same slot.** The companions (fence counter, holder info, release channel, run record)
//!    sit in `L`'s Redis Cluster slot, or one script could not touch them together.
//!    - `L` with a hash tag (`{...}` with something inside) is hashed by that tag, so any
//!      suffix keeps the slot: the companions are `L::NAME`.
//!    - `L` without one is hashed whole, so the companions wrap it in braces: `{L}:NAME`
//!      hashes exactly like `L`, provided `L` has no `}` (which would end the tag early).
//!      A name with a `}` but no tag is therefore refused (`check`).
//! 2. **No collisions.** No lock's key is ever equal to a companion of any lock, and two
//!    different locks never share a companion. Otherwise a run of one lock would delete or
//!    overwrite another lock's key (`{x}:a` deleting the lock `{x}:a:holder`), or see a fence
//!    counter as a busy lock. Companions end in `:NAME` with `NAME` from [`COMPANIONS`] (no
//!    colon in any), and:
//!    - an untagged base `{L}` ends in `}` while a tagged base `L:` ends in `:`, so a
//!      companion tells which form made it, and from it the one `L` that did;
//!    - a lock name that has exactly the shape of a companion is refused (`check`), which is
//!      only ever a name ending in `::NAME` after a tag, or one that is `{X}:NAME` whole.
//!
//! `tests::no_lock_key_equals_a_companion_of_another_lock` checks both over every short name
//! built from the characters that matter.

use std::time::Duration;

/// How long the fence counter outlives the last acquisition. Losing it is harmless (the
/// server clock carries the fence on, see acquire.lua); keeping it forever would leave one key
/// behind for every lock name ever used.
pub(super) const FENCE_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// The suffixes of companion keys. A new companion is added here, so the collision rule and
/// its test cover it at once.
pub const COMPANIONS: &[&str] = &[
    "fence",
    "holder",
    "released",
    "cancelled",
    "queue",
    "queue-expiry",
    "holders",
    "limit",
    "last-run",
    "last-success",
    "holds",
    "pause",
    "broken",
    "shared",
];

/// The Redis keys of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The lock itself: its value is the holder's token.
    pub lock: String,
    /// The fence counter (a string holding an integer).
    pub fence: String,
    /// Holder info for `status` (a hash), expiring with the lock.
    pub holder: String,
    /// Pub/sub channel on which a release is announced, so waiters need not poll.
    pub released: String,
    /// Tokens of acquire attempts taken back after a lost reply (a set), so that such an
    /// attempt arriving late cannot take the lock.
    pub cancelled: String,
    /// Waiters in arrival order (a sorted set scored by server time), for fair waiting.
    pub queue: String,
    /// The same waiters scored by when their place expires (server time, ms), so that a
    /// waiter that stopped asking leaves the queue.
    pub queue_expiry: String,
    /// `--limit`: each holder's info, by token (a hash).
    pub holders: String,
    /// `--limit`: the limit all holders of this lock use, kept as long as the holders.
    pub limit: String,
    /// The run record: how the last run that released the lock ended (a hash, see
    /// `record.rs`), kept for the record retention.
    pub last_run: String,
    /// The same record of the last run that succeeded, kept apart so that a failure does
    /// not hide when the job last worked.
    pub last_success: String,
    /// Holds that span several CI steps (`acquire` ... `release`): one record per token (a
    /// hash, field = token), see `hold.rs`; kept for the hold's --max-hold plus its retention.
    pub holds: String,
    /// `pause`: why, by whom and until when new runs are held off (a hash), expiring when
    /// the pause ends.
    pub pause: String,
    /// `break`: which tokens were taken away, by whom and when (a hash: token -> `host TAB
    /// ms`), so that the holder's next renewal can say so; kept for `BROKEN_KEEP`.
    pub broken: String,
    /// `--shared`: the shared holders' tokens, scored by when their lease ends (a sorted
    /// set, server ms); their info is in `holders`. Kept as long as the longest lease.
    pub shared: String,
}

/// Why a lock name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadName {
    /// A `}` without a hash tag: no companion key could share the lock's cluster slot.
    StrayBrace,
    /// The name is a companion key of the lock named here.
    Companion { of: String },
}

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadName::StrayBrace => write!(
                f,
                "has a '}}' but no {{hash tag}}, so its companion keys could not share its \
                 cluster slot; remove the '}}' or use a tag such as {{name}}"
            ),
            BadName::Companion { of } => write!(
                f,
                "is the name of a companion key of the lock {of}; choose another name"
            ),
        }
    }
}

impl Keys {
    /// The keys of lock `lock`, or why that name cannot be a lock.
    pub fn new(lock: &str) -> Result<Keys, BadName> {
        check(lock)?;
        let companion = |name: &str| companion(lock, name);
        Ok(Keys {
            lock: lock.to_owned(),
            fence: companion("fence"),
            holder: companion("holder"),
            released: companion("released"),
            cancelled: companion("cancelled"),
            queue: companion("queue"),
            queue_expiry: companion("queue-expiry"),
            holders: companion("holders"),
            limit: companion("limit"),
            last_run: companion("last-run"),
            last_success: companion("last-success"),
            holds: companion("holds"),
            pause: companion("pause"),
            broken: companion("broken"),
            shared: companion("shared"),
        })
    }
}

/// The companion `name` of lock `lock` (which must pass `check`).
fn companion(lock: &str, name: &str) -> String {
    if has_hash_tag(lock) {
        format!("{lock}::{name}")
    } else {
        format!("{{{lock}}}:{name}")
    }
}

/// Refuse names whose companions could not share their slot, and names that are themselves
/// a companion of another lock.
pub fn check(lock: &str) -> Result<(), BadName> {
    if !has_hash_tag(lock) && lock.contains('}') {
        return Err(BadName::StrayBrace);
    }
    if let Some(of) = companion_of(lock) {
        return Err(BadName::Companion { of });
    }
    Ok(())
}

/// The lock whose companion `key` is, if any: the inverse of `companion`.
fn companion_of(key: &str) -> Option<String> {
    companion_parts(key).map(|(lock, _)| lock)
}

/// The lock whose companion `key` is, and which companion (a name of [`COMPANIONS`]): the
/// inverse of `companion`. `list` finds locks by their companions with it.
pub fn companion_parts(key: &str) -> Option<(String, &'static str)> {
    COMPANIONS.iter().find_map(|name| {
        let base = key.strip_suffix(name)?.strip_suffix(':')?;
        if let Some(tagged) = base.strip_suffix(':') {
            // `L::NAME` comes from a tagged `L`.
            return has_hash_tag(tagged).then(|| (tagged.to_owned(), *name));
        }
        // `{L}:NAME` comes from an untagged `L` without a `}`.
        let inner = base.strip_prefix('{')?.strip_suffix('}')?;
        (!inner.is_empty() && !has_hash_tag(inner) && !inner.contains('}'))
            .then(|| (inner.to_owned(), *name))
    })
}

/// True when Redis Cluster would hash `key` by a `{tag}` inside it: the first `{` is followed
/// by a `}` with at least one character between them.
pub fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of a key Redis Cluster hashes: the tag if there is one, else the whole key.
    /// The lock key and every companion.
    fn all(k: &Keys) -> [&String; 15] {
        [
            &k.lock,
            &k.fence,
            &k.holder,
            &k.released,
            &k.cancelled,
            &k.queue,
            &k.queue_expiry,
            &k.holders,
            &k.limit,
            &k.last_run,
            &k.last_success,
            &k.holds,
            &k.pause,
            &k.broken,
            &k.shared,
        ]
    }

    fn hashed_part(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn plain_keys_are_wrapped_so_companions_share_the_slot() {
        let k = Keys::new("redlock:settle:2024-05").unwrap();
        assert_eq!(k.lock, "redlock:settle:2024-05");
        assert_eq!(k.fence, "{redlock:settle:2024-05}:fence");
        assert_eq!(k.holder, "{redlock:settle:2024-05}:holder");
        assert_eq!(k.released, "{redlock:settle:2024-05}:released");
        assert_eq!(k.last_run, "{redlock:settle:2024-05}:last-run");
        assert_eq!(k.last_success, "{redlock:settle:2024-05}:last-success");
    }

    #[test]
    fn tagged_keys_keep_their_tag() {
        let k = Keys::new("redlock:{batch}:a").unwrap();
        assert_eq!(k.fence, "redlock:{batch}:a::fence");
        // An empty tag does not count: the whole key is hashed, so wrap it.
        assert!(!has_hash_tag("a{}b"));
        assert!(has_hash_tag("a{b}"));
        assert!(!has_hash_tag("a{b"));
        assert_eq!(Keys::new("a{b").unwrap().fence, "{a{b}:fence");
    }

    #[test]
    fn the_collisions_seen_in_review_cannot_happen() {
        // `{x}:a:holder` is a lock of its own, not the holder hash of `{x}:a`.
        let a = Keys::new("{x}:a").unwrap();
        let b = Keys::new("{x}:a:holder").unwrap();
        assert_ne!(a.holder, b.lock);
        // After `{y}:a` ran, `{y}:a:fence` is not its fence counter.
        assert_ne!(Keys::new("{y}:a").unwrap().fence, "{y}:a:fence");
        // `a` and `{a}` hash alike but keep separate companions.
        assert_ne!(
            Keys::new("a").unwrap().fence,
            Keys::new("{a}").unwrap().fence
        );
        // What is refused names the lock it belongs to.
        assert_eq!(
            Keys::new("{a}:fence"),
            Err(BadName::Companion { of: "a".into() })
        );
        assert_eq!(
            Keys::new("{x}:a::holder"),
            Err(BadName::Companion { of: "{x}:a".into() })
        );
        assert_eq!(Keys::new("a}b"), Err(BadName::StrayBrace));
        assert_eq!(Keys::new("a{}b"), Err(BadName::StrayBrace));
    }

    /// Every name over an alphabet of the characters that matter (braces, colon, a letter, and
    /// companion names as single symbols), up to a length that covers every shape the rule
    /// distinguishes: accepted names never produce a key equal to another accepted name's key
    /// or companion, and companions always share the lock's slot.
    #[test]
    fn no_lock_key_equals_a_companion_of_another_lock() {
        // The companion names as symbols: one stands for all those that are no prefix of
        // another ("holder"), and both members of each prefix pair ("holder"/"holders",
        // "queue"/"queue-expiry"), which keeps the search at 9 symbols.
        let mut named: Vec<&str> = vec!["holder", "holders", "queue", "queue-expiry"];
        for name in COMPANIONS {
            let prefix_pair = COMPANIONS
                .iter()
                .any(|other| other != name && (other.starts_with(name) || name.starts_with(other)));
            assert!(
                !prefix_pair || named.contains(name),
                "companion {name} is a prefix of another (or has one): add it to the symbols"
            );
        }
        named.dedup();
        let symbols: Vec<String> = ["{", "}", ":", "a", "b"]
            .iter()
            .chain(named.iter())
            .map(|s| s.to_string())
            .collect();
        let mut names = vec![String::new()];
        let mut frontier = vec![String::new()];
        for _ in 0..6 {
            let mut next = Vec::new();
            for prefix in &frontier {
                for s in &symbols {
                    next.push(format!("{prefix}{s}"));
                }
            }
            names.extend(next.iter().cloned());
            frontier = next;
        }
        let mut owner: std::collections::HashMap<String, String> = Default::default();
        let mut accepted = 0;
        for name in names.iter().filter(|n| !n.is_empty()) {
            let Ok(keys) = Keys::new(name) else { continue };
            accepted += 1;
            for key in all(&keys) {
                assert_eq!(
                    hashed_part(key),
                    hashed_part(&keys.lock),
                    "{key} is not in the slot of lock {name}"
                );
                if let Some(other) = owner.insert(key.clone(), name.clone()) {
                    panic!("{key} belongs to lock {other} and to lock {name}");
                }
            }
        }
        assert!(accepted > 100_000, "only {accepted} names were accepted");
    }
}
