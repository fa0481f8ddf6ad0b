//! The key layout: the lock key and its companions.
//!
//! The fence counter and holder info must sit in the lock key's cluster slot, or one script
//! could not touch them together. A key with a hash tag (`{...}` with something inside) is
//! hashed by that tag, so a suffix keeps the slot. A key without one is hashed whole, so the
//! companion wraps it in braces: `{L}:fence` hashes exactly like `L` as long as `L` has no `}`.

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
}

impl Keys {
    pub fn new(lock: &str) -> Keys {
        let base = if has_hash_tag(lock) || lock.contains('}') {
            lock.to_owned()
        } else {
            format!("{{{lock}}}")
        };
        Keys {
            lock: lock.to_owned(),
            fence: format!("{base}:fence"),
            holder: format!("{base}:holder"),
            released: format!("{base}:released"),
        }
    }
}

/// True when Redis Cluster would hash `key` by a `{tag}` inside it.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_keys_are_wrapped_so_companions_share_the_slot() {
        let k = Keys::new("redlock:settle:2024-05");
        assert_eq!(k.lock, "redlock:settle:2024-05");
        assert_eq!(k.fence, "{redlock:settle:2024-05}:fence");
        assert_eq!(k.holder, "{redlock:settle:2024-05}:holder");
    }

    #[test]
    fn tagged_keys_keep_their_tag() {
        let k = Keys::new("redlock:{batch}:a");
        assert_eq!(k.fence, "redlock:{batch}:a:fence");
        // An empty tag does not count: the whole key is hashed, so wrap it.
        assert!(!has_hash_tag("a{}b"));
        assert!(has_hash_tag("a{b}"));
        assert!(!has_hash_tag("a{b"));
        assert_eq!(Keys::new("a{b").fence, "{a{b}:fence");
    }
}
