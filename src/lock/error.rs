//! Redis failures, sorted into the cases a user must tell apart. Each becomes one stderr line
//! and exit code 69; `is_transient` decides whether a renewal or a wait may try again.

use std::fmt;

/// Why Redis could not do what was asked.
#[derive(Debug, Clone)]
pub struct RedisFailure {
    pub kind: FailureKind,
    /// The server, with any password redacted.
    pub server: String,
    detail: String,
    maybe_sent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Not reachable, connection dropped, no reply in time, or busy loading.
    Unreachable,
    /// The password given was refused.
    Auth,
    /// The server requires a password and none was given (NOAUTH).
    NoPassword,
    /// The ACL user may not run scripts or touch the key.
    NoPermission,
    /// The server is a read-only replica.
    ReadOnly,
    /// The key holds something other than a lock.
    WrongType,
    /// The lock is used with another `--limit` (or with one where this run has none, or the
    /// other way round): a configuration error, not a Redis failure.
    LimitMismatch,
    /// Fewer replicas than `--min-replicas` acknowledged a write in time.
    Replicas,
    /// Any other error reply.
    Other,
}

impl RedisFailure {
    pub fn from_redis(err: &redis::RedisError, server: &str) -> Self {
        let code = script_error_code(err).unwrap_or_else(|| err.code().unwrap_or_default());
        // Redis refuses large commands from an unauthenticated client with a protocol error
        // before it gets to say NOAUTH. A client that was given a password logs in on
        // connecting, or fails there (AuthenticationFailed): NOAUTH means none was given.
        let unauthenticated = err.detail().is_some_and(|d| d.contains("unauthenticated"));
        let kind = if code == "NOAUTH" || unauthenticated {
            FailureKind::NoPassword
        } else if err.kind() == redis::ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
            FailureKind::Auth
        } else if code == LIMIT_MISMATCH {
            FailureKind::LimitMismatch
        } else if code == "NOPERM" || script_acl_refusal(err) {
            FailureKind::NoPermission
        } else if code == "READONLY" {
            FailureKind::ReadOnly
        } else if code == "WRONGTYPE" {
            FailureKind::WrongType
        } else if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || matches!(
                code,
                "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN"
            )
        {
            FailureKind::Unreachable
        } else {
            FailureKind::Other
        };
        let detail = match kind {
            // The server's words for it ("Protocol error: unauthenticated multibulk length")
            // would only mislead.
            FailureKind::NoPassword => "NOAUTH".to_owned(),
            // The script's message without its code: it says what differs.
            FailureKind::LimitMismatch => err.detail().unwrap_or_default().to_owned(),
            // The scripts' own refusal names the key and what it holds (reach.lua,
            // not_a_lock); a type error of the server itself says neither.
            FailureKind::WrongType => match err.detail() {
                Some(d) if d.contains(NOT_A_LOCK) => {
                    format!(
                        "{}; {WRONG_TYPE_HINT} (nothing was changed)",
                        describe_detail(d)
                    )
                }
                _ => format!("{WRONG_TYPE_UNNAMED}; {WRONG_TYPE_HINT}"),
            },
            _ => describe(err),
        };
        RedisFailure {
            kind,
            server: server.to_owned(),
            detail,
            maybe_sent: kind == FailureKind::Unreachable && !err.is_connection_refusal(),
        }
    }

    /// A login problem: a password refused or missing.
    pub fn is_auth(&self) -> bool {
        matches!(self.kind, FailureKind::Auth | FailureKind::NoPassword)
    }

    pub fn timeout(server: &str, what: &str) -> Self {
        RedisFailure {
            kind: FailureKind::Unreachable,
            server: server.to_owned(),
            detail: format!("no reply to {what} in time"),
            maybe_sent: true,
        }
    }

    /// Unreachable for a reason the servers reported in a reply (a cluster with no master for
    /// a slot); transient, and nothing was written.
    pub fn unreachable(server: &str, detail: impl Into<String>) -> Self {
        RedisFailure {
            kind: FailureKind::Unreachable,
            server: server.to_owned(),
            detail: detail.into(),
            maybe_sent: false,
        }
    }

    /// Fewer than `wanted` replicas acknowledged the write on `key` within `timeout`.
    pub fn replicas(server: &str, key: &str, acked: u32, wanted: u32, timeout: &str) -> Self {
        RedisFailure {
            kind: FailureKind::Replicas,
            server: server.to_owned(),
            detail: format!(
                "only {acked} of {wanted} replicas acknowledged the lock {key} within {timeout}"
            ),
            maybe_sent: true,
        }
    }

    /// `detail` followed by `hint` (what the user may have to do about it).
    pub fn with_hint(mut self, hint: &str) -> Self {
        self.detail.push_str(hint);
        self
    }

    /// A failure of several servers at once (a Redlock quorum not reached): `server` names
    /// them, `detail` says what they answered.
    pub fn of_many(
        kind: FailureKind,
        server: impl Into<String>,
        detail: impl Into<String>,
        maybe_sent: bool,
    ) -> Self {
        RedisFailure {
            kind,
            server: server.into(),
            detail: detail.into(),
            maybe_sent,
        }
    }

    /// Nothing was sent (the failure happened while connecting): nothing can have been written.
    pub fn not_sent(mut self) -> Self {
        self.maybe_sent = false;
        self
    }

    /// Whatever failed, a write sent before it may have landed (a script whose companion
    /// commands in the same pipeline failed): the caller must take it back.
    pub fn after_a_write(mut self) -> Self {
        self.maybe_sent = true;
        self
    }

    /// Replicas that Sentinel could promote (`missing`, as `host:port`) did not acknowledge
    /// the write on `key` within `timeout`.
    pub fn unconfirmed(server: &str, key: &str, missing: &[String], timeout: &str) -> Self {
        let which = match missing {
            [one] => format!("replica {one}"),
            many => format!("replicas {}", many.join(", ")),
        };
        RedisFailure {
            kind: FailureKind::Replicas,
            server: server.to_owned(),
            detail: format!(
                "{which}, which the sentinels could promote, did not acknowledge the lock {key} within {timeout} (a grant a promoted replica lacks could be taken twice)"
            ),
            maybe_sent: true,
        }
    }

    /// A reply of a shape the scripts never give, to `what`.
    pub fn unexpected_reply(server: &str, what: &str, reply: &redis::Value) -> Self {
        Self::unexpected(server, format!("unexpected reply to {what}: {reply:?}"))
    }

    pub fn unexpected(server: &str, detail: impl Into<String>) -> Self {
        RedisFailure {
            kind: FailureKind::Other,
            server: server.to_owned(),
            detail: detail.into(),
            maybe_sent: true,
        }
    }

    /// The request may have reached the server and been carried out although no usable reply
    /// came back (a timeout, a dropped connection, a reply we could not read). Not after a
    /// refused connection or a refused login.
    pub fn may_have_written(&self) -> bool {
        self.maybe_sent
    }

    /// Worth another try after a pause: the server may answer, and replicas acknowledge,
    /// again (a failover under way).
    pub fn is_transient(&self) -> bool {
        matches!(self.kind, FailureKind::Unreachable | FailureKind::Replicas)
    }
}

/// The error code the acquire scripts give when the lock is used with another `--limit`
/// (semaphore/acquire.lua, acquire.lua).
const LIMIT_MISMATCH: &str = "LIMITMISMATCH";

/// Before Redis 7.0 an error raised by a command inside a script reaches the client wrapped:
/// `ERR Error running script (call to f_...): @user_script:50: -READONLY You can't write...`.
/// The code of the command that failed is the one that tells what happened.
fn script_error_code(err: &redis::RedisError) -> Option<&str> {
    if err.code() != Some("ERR") {
        return None;
    }
    let detail = err.detail()?;
    if !detail.contains("Error running script") {
        return None;
    }
    let code = detail.split(" -").nth(1)?.split_whitespace().next()?;
    (!code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase())).then_some(code)
}

/// A command inside a script refused by the ACL (a key the user may not touch). The scripts
/// declare only the lock key (protocol/mod.rs), so a refused companion key is found by the
/// script itself, and the server words it as it likes: `ERR The user executing the script
/// can't access ...` (Redis 7.0, and wrapped in `Error running script` by 6.2), `ERR ACL
/// failure in script: ...` (Valkey).
fn script_acl_refusal(err: &redis::RedisError) -> bool {
    err.code() == Some("ERR")
        && err.detail().is_some_and(|d| {
            d.contains("The user executing the script can't") || d.contains("ACL failure in script")
        })
}

/// What the scripts' refusal of a key of another type says (reach.lua, `not_a_lock`), and
/// `status` too: `L is not a redlock-run lock: its key K holds ...`.
const NOT_A_LOCK: &str = " is not a redlock-run lock: ";

/// A type error that names no key (the server's own, from a command it refused).
const WRONG_TYPE_UNNAMED: &str = "this is not a redlock-run lock: it, or one of its companion \
     keys ({KEY}:holder, {KEY}:fence, ...), holds another type of value";

/// What a run tells the user to check when a key holds another type of value (`status` too).
const WRONG_TYPE_HINT: &str = "check --key and --prefix";

/// A script's own detail, cut as `describe` cuts a server's text.
fn describe_detail(detail: &str) -> String {
    let line = detail.lines().next().unwrap_or_default();
    match line.char_indices().nth(MOST_SHOWN) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_owned(),
    }
}

/// The error in words, without anything that could quote a password.
fn describe(err: &redis::RedisError) -> String {
    let text = match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        // Client-side errors (I/O, timeouts) carry the useful part in their Display; it names
        // no URL.
        (None, _) => err.to_string(),
    };
    let line = text.lines().next().unwrap_or_default();
    // A server's text is foreign: a few hundred bytes say what went wrong.
    match line.char_indices().nth(MOST_SHOWN) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_owned(),
    }
}

/// The longest piece of a server's error text shown.
const MOST_SHOWN: usize = 300;

impl fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = &self.server;
        let detail = &self.detail;
        match self.kind {
            FailureKind::Unreachable => write!(f, "Redis at {server} is unreachable: {detail}"),
            // The hint once: a failure of several servers (Redlock) quotes one that has it.
            FailureKind::Auth => {
                write!(f, "Redis at {server} refused authentication ({detail})")?;
                if !detail.contains("--password-file") {
                    f.write_str("; check the password in the URL or --password-file")?;
                }
                Ok(())
            }
            FailureKind::NoPassword => {
                write!(
                    f,
                    "Redis at {server} requires a password and none was given ({detail})"
                )?;
                if !detail.contains("--password-file") {
                    f.write_str(
                        "; give it with --password-file FILE, or in the URL as \
                         redis://:PASSWORD@host:port (percent-encode / # ? @ in it)",
                    )?;
                }
                Ok(())
            }
            FailureKind::NoPermission => write!(
                f,
                "Redis at {server} denied a command to this user ({detail}); the ACL must allow \
                 EVAL/EVALSHA, the lock keys and PUBLISH on their release channel"
            ),
            FailureKind::ReadOnly => write!(
                f,
                "Redis at {server} is a read-only replica; point --redis at the primary"
            ),
            // The detail says what to check (`from_redis`).
            FailureKind::WrongType => write!(f, "Redis at {server}: {detail}"),
            FailureKind::LimitMismatch => write!(f, "Redis at {server}: {detail}"),
            FailureKind::Replicas => write!(f, "Redis at {server}: {detail}"),
            FailureKind::Other => write!(f, "Redis at {server} failed: {detail}"),
        }
    }
}

impl std::error::Error for RedisFailure {}
