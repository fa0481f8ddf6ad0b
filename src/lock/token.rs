//! The value that marks a lock as this run's.

use std::fmt;

/// A version 4 UUID: 122 random bits from the operating system, unique and unguessable, so
/// no other run can produce (or forge) the value renewals and releases compare against. The
/// hyphenated form is what operators recognise in `redis-cli GET`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(uuid::Uuid);

impl Token {
    pub fn new() -> Token {
        Token(uuid::Uuid::new_v4())
    }

    /// A token as `as_str` wrote it (`release --token`); `None` for anything else.
    pub fn parse(s: &str) -> Option<Token> {
        uuid::Uuid::try_parse(s.trim()).ok().map(Token)
    }

    /// As stored in Redis: hyphenated lower-case hex.
    pub fn as_str(&self) -> String {
        self.0.hyphenated().to_string()
    }

    /// 64 of the random bits, to seed the jitter of retries; not for secrets.
    pub fn seed(&self) -> u64 {
        let bits = self.0.as_u128();
        (bits as u64) ^ ((bits >> 64) as u64)
    }
}

impl Default for Token {
    fn default() -> Self {
        Token::new()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for Token {
    /// Never in a debug dump: the token is what proves ownership of the lock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_v4_uuids_and_differ() {
        let a = Token::new();
        let b = Token::new();
        let text = a.as_str();
        let parsed = uuid::Uuid::parse_str(&text).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(text.len(), 36);
        assert_ne!(a, b);
        // Seeds come from the random bits, not from the text (whose hyphens would make
        // every wrapper's seed alike).
        assert_ne!(a.seed(), b.seed());
    }
}
