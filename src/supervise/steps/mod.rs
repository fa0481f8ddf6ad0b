//! Holds that span several CI steps: `acquire` ([`start`]) leaves a keeper ([`keep`]) that
//! renews the lease until `release` ([`release`]), at most `--max-hold`.
//!
//! - `acquire` starts the keeper and exits once the keeper confirmed, over a pipe, that it
//!   holds the lock and recorded the hold; it prints the hold ([`output`]).
//! - The keeper takes the lock as a run does (the same acquire and wait: topologies,
//!   `--limit`, the queue, `--min-replicas`), records the hold beside the lock
//!   (`lock/protocol/hold.rs`), then renews with the run's lease keeper.
//! - `release` releases by token and reads from the hold record whether the hold was kept to
//!   the end, and if not, when and why it was lost.

mod keep;
mod output;
mod release;
mod start;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::Duration;

pub use keep::{Handshake, keep};
pub use release::release;
pub use start::start;

/// The keeper's environment: the handshake pipe's descriptor.
const KEEPER_FD: &str = "REDLOCK_KEEPER_FD";

/// The keeper's environment: its id, recorded with the hold.
const KEEPER_ID: &str = "REDLOCK_KEEPER_ID";

/// The keeper's environment: `acquire`'s arguments (after the program name), each an `x`
/// then its bytes in hex, separated by spaces. Not its command line: `/proc/PID/cmdline` is readable by every user
/// of the host for as long as the hold lasts, and a `--redis` URL may hold a password;
/// `/proc/PID/environ` is readable only by the keeper's own user.
const KEEPER_ARGS: &str = "REDLOCK_KEEPER_ARGS";

/// The arguments this process parses: in a keeper (started by `acquire`, [`KEEPER_FD`] and
/// [`KEEPER_ARGS`] in its environment) `acquire`'s own, from the environment; in any other
/// process, its command line.
pub fn arguments() -> Vec<OsString> {
    let mut argv = std::env::args_os();
    let arg0 = argv.next();
    let handed = std::env::var_os(KEEPER_FD)
        .and(std::env::var_os(KEEPER_ARGS))
        .and_then(|args| decode_args(&args));
    match handed {
        Some(args) => arg0.into_iter().chain(args).collect(),
        None => arg0.into_iter().chain(argv).collect(),
    }
}

/// [`KEEPER_ARGS`]' value for `args`.
fn encode_args(args: impl IntoIterator<Item = OsString>) -> OsString {
    use std::fmt::Write;
    let mut out = String::new();
    for (i, arg) in args.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push('x');
        for b in arg.as_bytes() {
            let _ = write!(out, "{b:02x}");
        }
    }
    out.into()
}

/// The arguments in a [`KEEPER_ARGS`] value; `None` if it is not one.
fn decode_args(value: &OsStr) -> Option<Vec<OsString>> {
    let text = value.to_str()?;
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(' ')
        .map(|arg| {
            let hex = arg.strip_prefix('x')?;
            if !hex.len().is_multiple_of(2) {
                return None;
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()
                .map(OsString::from_vec)
        })
        .collect()
}

/// A server time (ms since 1970) as RFC 3339, UTC.
fn when(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || ms.to_string(),
            |t| {
                t.round(jiff::Unit::Second)
                    .map_or_else(|_| t.to_string(), |t| t.to_string())
            },
        )
}

/// A duration as the user wrote it (`1h`, `90s`).
fn describe(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_survive_the_environment() {
        let args: Vec<OsString> = vec![
            "acquire".into(),
            "--redis".into(),
            "redis://:s3 cret@h:1".into(),
            "".into(),
            OsString::from_vec(vec![0xff, b'a', b' ']),
        ];
        assert_eq!(decode_args(&encode_args(args.clone())), Some(args));
        assert_eq!(decode_args(OsStr::new("")), Some(Vec::new()));
        assert_eq!(
            decode_args(&encode_args([OsString::new()])),
            Some(vec![OsString::new()])
        );
        assert_eq!(decode_args(OsStr::new("x6")), None);
        assert_eq!(decode_args(OsStr::new("xzz")), None);
        assert_eq!(decode_args(OsStr::new("61")), None);
    }
}
