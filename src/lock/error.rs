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
    /// A login to a sentinel, not to a data node: its password comes from the URL's
    /// `sentinel_*` parameters, not from the user part or `--password-file`.
    sentinel_login: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Not reachable, connection dropped, no reply in time, or busy loading.
    Unreachable,
    /// The password given was refused.
    Auth,
    /// The server requires a password and none was given (NOAUTH).
    NoPassword,
    /// A password was given to a server that has none set for the default user (Redis 6+:
    /// `ERR AUTH <password> called without any password configured`; before 6: `Client sent
    /// AUTH, but no password is set`).
    PasswordNotSet,
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
        // A pipeline whose command failed (a SCAN, refused with NOAUTH) comes back as one
        // error that holds the server's: that one says what happened.
        if err.code().is_none()
            && let Some(errors) = err.clone().into_server_errors()
            && let Some((_, first)) = errors.first()
        {
            return Self::from_redis(&first.clone().into(), server);
        }
        let code = script_error_code(err).unwrap_or_else(|| err.code().unwrap_or_default());
        // Redis refuses large commands from an unauthenticated client with a protocol error
        // before it gets to say NOAUTH. A client that was given a password logs in on
        // connecting, or fails there (AuthenticationFailed): NOAUTH means none was given.
        // The SELECT of a URL's database (`/99`) is refused as `ERR Authentication
        // required.` on some servers.
        let unauthenticated = err.detail().is_some_and(|d| d.contains("unauthenticated"))
            || err.to_string().contains("Authentication required");
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
            sentinel_login: false,
        }
    }

    /// A login problem: a password refused, missing, or given where none is set.
    pub fn is_auth(&self) -> bool {
        matches!(
            self.kind,
            FailureKind::Auth | FailureKind::NoPassword | FailureKind::PasswordNotSet
        )
    }

    /// A login failure of a sentinel (`is_auth`): its hint points at the URL's `sentinel_*`
    /// parameters, not at the user part or `--password-file` (the data nodes' login).
    pub fn of_a_sentinel(mut self) -> Self {
        self.sentinel_login = true;
        self
    }

    /// Whether this is a sentinel's login failure (`of_a_sentinel`).
    pub fn is_sentinel_login(&self) -> bool {
        self.sentinel_login && self.is_auth()
    }

    /// `server` refused the password given because it has none set (found out after the
    /// refusal: it answers without one). Nothing was sent but the login.
    pub fn password_not_set(server: &str) -> Self {
        RedisFailure {
            kind: FailureKind::PasswordNotSet,
            server: server.to_owned(),
            detail: String::new(),
            maybe_sent: false,
            sentinel_login: false,
        }
    }

    pub fn timeout(server: &str, what: &str) -> Self {
        RedisFailure {
            kind: FailureKind::Unreachable,
            server: server.to_owned(),
            detail: format!("no reply to {what} in time"),
            maybe_sent: true,
            sentinel_login: false,
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
            sentinel_login: false,
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
            sentinel_login: false,
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
            sentinel_login: false,
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
            sentinel_login: false,
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
            sentinel_login: false,
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
                if self.sentinel_login {
                    write!(
                        f,
                        "; check sentinel_username and sentinel_password or \
                         sentinel_password_file in the URL {SENTINEL_LOGIN}"
                    )?;
                } else if !detail.contains("--password-file") {
                    f.write_str("; check the password in the URL or --password-file")?;
                }
                Ok(())
            }
            FailureKind::NoPassword => {
                write!(
                    f,
                    "Redis at {server} requires a password and none was given ({detail})"
                )?;
                if self.sentinel_login {
                    write!(
                        f,
                        "; give the sentinels' password in the URL's query as \
                         sentinel_password=PASSWORD {QUERY_ENCODE} or \
                         sentinel_password_file=FILE {SENTINEL_LOGIN}"
                    )?;
                } else if !detail.contains("--password-file") {
                    write!(f, "; {}", how_to_give_a_password(server))?;
                }
                Ok(())
            }
            FailureKind::PasswordNotSet => {
                write!(
                    f,
                    "Redis at {server} has no password set and refused the one given"
                )?;
                if !detail.is_empty() {
                    write!(f, " ({detail})")?;
                }
                if !detail.contains("--password-file") {
                    f.write_str(
                        "; none is needed: remove it from the URL, or drop --password-file",
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

/// Where a sentinel's login does not come from.
const SENTINEL_LOGIN: &str =
    "(the URL's user part and --password-file are the data nodes' login, not the sentinels')";

/// How a password in a URL's query must be written.
const QUERY_ENCODE: &str = "(percent-encode & # + % in it)";

/// What a NOAUTH failure of `server` (a URL as shown, perhaps followed by words) suggests: a
/// `--password-file`, or the URL with a password after its user name, the user kept.
fn how_to_give_a_password(server: &str) -> String {
    let url = server.split(' ').next().unwrap_or_default();
    let encode = "(percent-encode / # ? @ in it)";
    let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && !s.is_empty()
    }) else {
        return format!(
            "give it with --password-file FILE, or in the URL as \
             redis://[USER]:PASSWORD@host:port {encode}"
        );
    };
    if scheme == "unix" || scheme.ends_with("+unix") {
        // A socket's user and password are query parameters (`?user=U&pass=P`).
        return match rest.split_once('?') {
            None => format!(
                "give it with --password-file FILE, or in the URL as \
                 {scheme}://{rest}?pass=PASSWORD {QUERY_ENCODE}"
            ),
            Some(_) => format!(
                "give it with --password-file FILE, or in the URL's query as &pass=PASSWORD \
                 {QUERY_ENCODE}"
            ),
        };
    }
    // The user part ends at the last '@' before the path, query or fragment.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (user, after) = match rest[..end].rfind('@') {
        Some(at) => (
            rest[..at].split(':').next().unwrap_or_default(),
            &rest[at + 1..],
        ),
        None => ("", rest),
    };
    if user == "***" {
        // A lone name before '@' (hidden: other clients take it for a password).
        return format!(
            "the URL has a user name and no password (a name alone before @ is a user name, \
             not a password): give the password with --password-file FILE, or in the URL as \
             {scheme}://USER:PASSWORD@{after} {encode}"
        );
    }
    let keep = if user.is_empty() {
        String::new()
    } else {
        format!(" (keep the user {user}@ in the URL)")
    };
    format!(
        "give it with --password-file FILE{keep}, or in the URL as \
         {scheme}://{user}:PASSWORD@{after} {encode}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The way to give a missing password keeps the URL's user name, and its form.
    #[test]
    fn a_missing_password_is_shown_where_it_goes() {
        let cases = [
            ("redis://h:6379", "redis://:PASSWORD@h:6379"),
            (
                "redis://alice:***@h:6379/2",
                "redis://alice:PASSWORD@h:6379/2",
            ),
            (
                "rediss://alice:***@[::1]:6380",
                "rediss://alice:PASSWORD@[::1]:6380",
            ),
            (
                "redis+sentinel://bob:***@s1,s2/m (master 'm' at 10.0.0.1:6379)",
                "redis+sentinel://bob:PASSWORD@s1,s2/m",
            ),
            (
                "redis+sentinel://s1/m?sentinel_username=a@b (master 'm' at h:1)",
                "redis+sentinel://:PASSWORD@s1/m?sentinel_username=a@b",
            ),
            (
                "unix:///run/redis.sock",
                "unix:///run/redis.sock?pass=PASSWORD",
            ),
            ("unix:///run/redis.sock?***", "query as &pass=PASSWORD"),
            (
                "2 of 3 Redlock masters",
                "redis://[USER]:PASSWORD@host:port",
            ),
        ];
        for (server, form) in cases {
            let how = how_to_give_a_password(server);
            assert!(how.contains(form), "{server}: {how}");
            assert!(how.contains("--password-file"), "{server}: {how}");
        }
        assert!(how_to_give_a_password("redis://alice:***@h:1").contains("keep the user alice@"));
        // A lone name is shown hidden, and the hint never asks to keep it.
        let lone = how_to_give_a_password("redis://***@h:1");
        assert!(lone.contains("a user name and no password"), "{lone}");
        assert!(lone.contains("redis://USER:PASSWORD@h:1"), "{lone}");
        assert!(!how_to_give_a_password("redis://h:1").contains("keep the user"));
    }

    /// A sentinel's login is fixed in the URL's sentinel_* parameters: its hints never send
    /// the user to the user part or --password-file (the data nodes').
    #[test]
    fn a_sentinel_login_points_at_the_sentinel_parameters() {
        let missing =
            RedisFailure::of_many(FailureKind::NoPassword, "sentinel h:1", "NOAUTH", false)
                .of_a_sentinel()
                .to_string();
        assert!(missing.contains("none was given (NOAUTH)"), "{missing}");
        assert!(missing.contains("sentinel_password=PASSWORD"), "{missing}");
        assert!(!missing.contains("redis://"), "{missing}");
        let refused = RedisFailure::of_many(FailureKind::Auth, "sentinel h:1", "WRONGPASS", false)
            .of_a_sentinel()
            .to_string();
        assert!(refused.contains("check sentinel_username"), "{refused}");
        assert!(
            !refused.contains("check the password in the URL or"),
            "{refused}"
        );
    }
}
