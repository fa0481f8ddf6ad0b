//! Timestamps as messages and JSON write them: milliseconds since 1970 (the server's clock, as
//! the Lua scripts return them) in RFC 3339, UTC.

use std::time::{Duration, UNIX_EPOCH};

/// `2026-12-05T22:31:56Z`: to the second, for messages.
pub fn seconds(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `2026-12-05T22:31:56.123Z`: to the millisecond, for JSON.
pub fn millis(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_forms() {
        assert_eq!(super::seconds(1_764_974_316_123), "2025-12-05T22:38:36Z");
        assert_eq!(super::millis(1_764_974_316_123), "2025-12-05T22:38:36.123Z");
    }
}
