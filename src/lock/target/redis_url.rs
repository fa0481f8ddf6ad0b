//! `--redis` URLs: which schemes are accepted, how they are parsed, and how they are shown.
//!
//! Shown means redacted: a URL reaches messages only through [`redact`], which hides every
//! byte of a password, whatever characters it holds. A password may contain `/`, `?`, `#`,
//! `:` and `@` (typed unencoded, as users do), so the user part is taken to run up to the
//! *last* `@`: a host never contains one. Query parameters that carry a password are hidden
//! too.

/// Parse the URL of one server (`redis://`, `rediss://`, `valkey://`, `valkeys://`,
/// `unix://`) into connection settings.
pub fn parse_server(url: &str) -> Result<redis::ConnectionInfo, String> {
    let shown = redact(url);
    let Some((scheme, rest)) = split_scheme(url) else {
        let hint = if url.contains(':') || url.contains('.') || url == "localhost" {
            format!(
                " (did you mean redis://{}?)",
                redact(&format!("redis://{url}"))["redis://".len()..].to_owned()
            )
        } else {
            String::new()
        };
        return Err(format!(
            "--redis {shown}: not a URL{hint}; example: redis://127.0.0.1:6379"
        ));
    };
    // Schemes are case-insensitive (RFC 3986); the redis crate wants them in lower case.
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "rediss" | "valkeys" if !cfg!(feature = "tls") => {
            return Err(format!(
                "--redis {shown}: this build has no TLS support (build with --features tls)"
            ));
        }
        "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" | "valkey+unix" => {}
        other => {
            return Err(format!(
                "--redis {shown}: unknown scheme '{other}' (use redis://, rediss:// (TLS), \
                 valkey://, valkeys://, unix://, redis+sentinel:// or redis+cluster://)"
            ));
        }
    }
    let fragment = rest.rsplit_once('#').map(|(_, f)| f.trim());
    if fragment.is_some_and(|f| f.to_ascii_lowercase().starts_with("insecure")) {
        // Certificate checks off would let anyone on the path answer as the lock server.
        return Err(format!(
            "--redis {shown}: #insecure (no certificate check) is not supported; give the \
             server's CA with --tls-ca-cert FILE instead"
        ));
    }
    if scheme == "unix" || scheme.ends_with("+unix") {
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        if authority.contains('@') {
            // The redis crate reads a socket's login from the query only: a user part
            // would be dropped unsaid (or, with no host, refused as unparsable).
            return Err(format!(
                "--redis {shown}: {}",
                unix_login(&scheme, &rest[authority.len()..], &shown)
            ));
        }
    }
    let after_user = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let host = after_user.split(['/', '?', '#']).next().unwrap_or_default();
    if !scheme.ends_with("unix") && host.contains(',') {
        // The redis crate takes `h1,h2` for one host name, which then does not resolve.
        let cluster = if matches!(scheme.as_str(), "rediss" | "valkeys") {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        return Err(format!(
            "--redis {shown}: several hosts in one {scheme}:// URL; for a Redis Cluster write \
             {cluster}://HOST1:PORT,HOST2:PORT; otherwise {SEVERAL}"
        ));
    }
    let normalized = format!("{scheme}://{rest}");
    redis::IntoConnectionInfo::into_connection_info(normalized.as_str()).map_err(|e| {
        let why = if rest.split_whitespace().skip(1).any(has_scheme) {
            // Several URLs in one value: the space and the second `scheme://` break it, not
            // a password.
            format!("the URL has a space in it, and another URL after it; {SEVERAL}")
        } else if password_may_split(rest) {
            // A password with `/`, `#` or `?` in it splits the URL in the wrong place: what
            // the parser then says is about pieces of it, so it is not quoted.
            "cannot parse URL; a password holding / # ? or @ must be percent-encoded \
             (%2F %23 %3F %40), or given with --password-file"
                .to_owned()
        } else {
            what_is_wrong(&scheme, rest, &shown)
                .unwrap_or_else(|| format!("cannot parse URL: {}", crate_says(&e, url)))
        };
        format!("--redis {shown}: {why}")
    })
}

/// How several servers are given (Redlock), where one `--redis` value names more than one.
const SEVERAL: &str = "give each Redlock master as a --redis option of its own (--redis URL1 \
     --redis URL2 --redis URL3, or an array in the config file); only REDLOCK_REDIS takes \
     several URLs, separated by spaces";

/// What a socket URL with a user part (`unix://:PW@/path`) must be written as: the login in
/// its query. `after` is the URL after its authority (the path and query); only what
/// `shown` shows of the path is quoted.
fn unix_login(scheme: &str, after: &str, shown: &str) -> String {
    let path = after.split(['?', '#']).next().unwrap_or_default();
    let path = if path.trim_matches('/').is_empty() || !shown.contains(path) {
        "/run/redis.sock"
    } else {
        path
    };
    format!(
        "a socket URL takes no USER:PASSWORD@ (it would be ignored); give the login in its \
         query, as {scheme}://{path}?pass=PASSWORD or ?user=USER&pass=PASSWORD (percent-encode \
         & # + % in it), or the password with --password-file"
    )
}

/// Whether the user part of `rest` (the URL after `scheme://`, up to its last `@`) holds a
/// character that ends a URL's authority (`/`, `?`, `#`): a password typed unencoded, the one
/// way a user part breaks a URL.
fn password_may_split(rest: &str) -> bool {
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['/', '?', '#']))
}

/// The redis crate's reason, without anything of `url`'s password.
fn crate_says(e: &redis::RedisError, url: &str) -> String {
    // Its Display is "description - Kind[: detail]"; the description says what it disliked.
    let text = e.to_string();
    let description = text.split(" - ").next().unwrap_or(&text);
    let said = match e.detail() {
        Some(detail) => format!("{description}: {detail}"),
        None => description.to_owned(),
    };
    let mut chars = said.chars();
    let said = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => said,
    };
    scrub(&said, url)
}

/// What is wrong with a server URL the redis crate refused, when its user part is not the
/// cause: the socket path, host, port, database or protocol, named; `None` when none of them
/// is found at fault. Only what `shown` (the redacted URL) shows is quoted.
fn what_is_wrong(scheme: &str, rest: &str, shown: &str) -> Option<String> {
    let quote = |piece: &str| {
        if !piece.is_empty() && shown.contains(piece) {
            format!(" '{piece}'")
        } else {
            String::new()
        }
    };
    let after_user = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let (before_query, query) = match after_user.split_once('?') {
        Some((before, query)) => (before, query.split('#').next().unwrap_or_default()),
        None => (after_user.split('#').next().unwrap_or_default(), ""),
    };
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    };
    if let Some(protocol) = param("protocol")
        && !matches!(protocol, "2" | "3" | "resp2" | "resp3")
    {
        return Some(format!(
            "unknown protocol{}; use ?protocol=2 or ?protocol=3 (resp2, resp3)",
            quote(protocol)
        ));
    }
    if scheme == "unix" || scheme.ends_with("+unix") {
        let (host, path) =
            before_query.split_at(before_query.find('/').unwrap_or(before_query.len()));
        if path.trim_matches('/').is_empty() {
            return Some(format!(
                "no socket path; example: {scheme}:///run/redis/redis.sock"
            ));
        }
        if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
            let meant = format!("{host}{path}");
            let example = if shown.contains(&meant) {
                meant.as_str()
            } else {
                "run/redis.sock"
            };
            return Some(format!(
                "the socket path must be absolute: three slashes, as in {scheme}:///{example}"
            ));
        }
        if let Some(db) = param("db")
            && db.parse::<i64>().is_err()
        {
            return Some(format!(
                "bad database number{}; give a number, as in ?db=0",
                quote(db)
            ));
        }
        return None;
    }
    if let Some((_, fragment)) = after_user.split_once('#') {
        return Some(format!(
            "a URL fragment{} is not supported; remove it",
            quote(&format!("#{fragment}"))
        ));
    }
    let (authority, path) =
        before_query.split_at(before_query.find('/').unwrap_or(before_query.len()));
    let example = format!("example: {scheme}://127.0.0.1:6379");
    if authority.is_empty() {
        return Some(format!("no host; {example}"));
    }
    let (host, port) = if let Some(inside) = authority.strip_prefix('[') {
        let Some((address, after)) = inside.split_once(']') else {
            return Some(format!(
                "the '[' of an IPv6 address is not closed; write it as {scheme}://[::1]:6379"
            ));
        };
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Some(format!(
                "not an IPv6 address{}; example: {scheme}://[::1]:6379",
                quote(&format!("[{address}]"))
            ));
        }
        match after {
            "" => (address, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (address, Some(port)),
                None => {
                    return Some(format!(
                        "unexpected{} after the IPv6 address; write it as {scheme}://[::1]:6379",
                        quote(after)
                    ));
                }
            },
        }
    } else {
        match authority.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Some(format!(
                    "an IPv6 address must be in brackets, as in {scheme}://[::1]:6379"
                ));
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Some(format!("no host; {example}"));
    }
    if let Some(port) = port
        && !port.is_empty()
        && port.parse::<u16>().is_err()
    {
        return Some(format!(
            "bad port{}: give a number from 1 to 65535",
            quote(port)
        ));
    }
    if matches!(host, "0.0.0.0" | "::") {
        return Some(format!(
            "{host} is an address to listen on, not to connect to; use 127.0.0.1 (or ::1) for \
             this host"
        ));
    }
    if host.contains(|c: char| c.is_ascii() && !(c.is_ascii_alphanumeric() || "-._~".contains(c))) {
        return Some(format!("not a host name{}; {example}", quote(host)));
    }
    let db = path.trim_matches('/');
    if !db.is_empty() && db.parse::<i64>().is_err() {
        return Some(format!(
            "bad database number{}: the path is the database, a number, as in \
             {scheme}://127.0.0.1:6379/0",
            quote(db)
        ));
    }
    None
}

/// Whether `info` is a TLS connection.
pub fn is_tls(info: &redis::ConnectionInfo) -> bool {
    matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
}

/// `url` with every password replaced by `***`.
///
/// An `@` may end the user part or stand in a query value (`?sentinel_password=a@b`), and a
/// password may hold `?`: what either reading takes for a secret is hidden. A user part
/// without `:` is hidden whole: it is a user name here, but redis-cli and other clients read
/// `redis://SECRET@host` as a password, so users coming from them write one there.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match split_scheme(url) {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let mut hidden = vec![false; rest.len()];
    let mut hide = |from: usize, to: usize| hidden[from..to].iter_mut().for_each(|h| *h = true);
    // Reading 1: the user part runs up to the last `@`, the query follows the host.
    let after_user = match rest.rfind('@') {
        Some(at) => {
            match rest[..at].find(':') {
                Some(colon) => hide(colon + 1, at),
                // A lone name; with '/', '?' or '#' it is no user part (the '@' is in a
                // query value, hidden below).
                None if !rest[..at].contains(['/', '?', '#']) => hide(0, at),
                None => {}
            }
            at + 1
        }
        None => 0,
    };
    if let Some(q) = rest[after_user..].find('?') {
        query_secrets(rest, after_user + q + 1, &mut hide);
    }
    // Reading 2: the query starts at the first `?`.
    if let Some(q) = rest.find('?') {
        query_secrets(rest, q + 1, &mut hide);
    }
    let mut shown = scheme;
    let mut in_secret = false;
    for (i, c) in rest.char_indices() {
        match (hidden[i], in_secret) {
            (true, false) => shown.push_str("***"),
            (true, true) => {}
            (false, _) => shown.push(c),
        }
        in_secret = hidden[i];
    }
    shown
}

/// Query parameters whose values may be shown.
const SHOWN_PARAMS: &[&str] = &["sentinel_username", "protocol", "db"];
/// Query parameters whose names may be shown (their values are hidden unless listed above).
const KNOWN_PARAMS: &[&str] = &["sentinel_password", "sentinel_password_file"];

/// Hide, from byte `start` of `rest`, the value of every query parameter but the harmless
/// ones, and the whole of a parameter whose name is not known: it may be the tail of a
/// password that held a `&`, or a misspelt password parameter.
fn query_secrets(rest: &str, start: usize, hide: &mut impl FnMut(usize, usize)) {
    let mut at = start;
    for param in rest[start..].split('&') {
        match param.split_once('=') {
            Some((name, _)) if SHOWN_PARAMS.contains(&name) => {}
            Some((name, value)) if KNOWN_PARAMS.contains(&name) => {
                if !value.is_empty() {
                    let from = at + name.len() + 1;
                    hide(from, from + value.len());
                }
            }
            _ if param.is_empty() => {}
            _ => hide(at, at + param.len()),
        }
        at += param.len() + 1;
    }
}

/// Whether `url` starts with `scheme://`.
pub fn has_scheme(url: &str) -> bool {
    split_scheme(url).is_some()
}

/// `scheme://rest`, when what comes before `://` is a scheme (RFC 3986: a letter, then
/// letters, digits, `+`, `-`, `.`). `u:p://x@h` has none: its `://` is inside a password.
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some((scheme, rest))
}

/// `text` with anything that could be a piece of `url`'s password removed: a last line of
/// defence for error texts that come from elsewhere.
fn scrub(text: &str, url: &str) -> String {
    let rest = split_scheme(url).map_or(url, |(_, r)| r);
    let Some(at) = rest.rfind('@') else {
        return text.to_owned();
    };
    // As `redact`: a lone name before '@' is hidden as a password would be.
    let secret = match rest[..at].split_once(':') {
        Some((_, password)) => password,
        None if !rest[..at].contains(['/', '?', '#']) => &rest[..at],
        None => "",
    };
    if !secret.is_empty() && text.contains(secret) {
        text.replace(secret, "***")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_whatever_they_hold() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:p@h"), "redis://u:***@h");
        // A lone name: a user name here, a password to redis-cli.
        assert_eq!(redact("redis://u@h"), "redis://***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("rediss://u:p@ss@h/"), "rediss://u:***@h/");
        assert_eq!(redact("redis://:se/cret@h"), "redis://:***@h");
        assert_eq!(redact("redis://:se#cret@h"), "redis://:***@h");
        // An unencoded `?` in a password: the rest may be a query, so it is hidden whole.
        assert_eq!(redact("redis://u:se?cret@h"), "redis://u:***");
        assert_eq!(redact("redis://:p@ss/w#rd?x@h"), "redis://:***");
        assert_eq!(
            redact("user:s3cret@localhost:6379"),
            "user:***@localhost:6379"
        );
        assert_eq!(
            redact("redis+sentinel://s1/m?sentinel_password=x&db=1"),
            "redis+sentinel://s1/m?sentinel_password=***&db=1"
        );
        // An `@` in a query value, or a password with `?` in it: nothing of either shows.
        assert_eq!(
            redact("redis+sentinel://h/m?sentinel_password=p@ss&x=1"),
            "redis+sentinel://h/m?sentinel_password=***&***"
        );
        assert_eq!(
            redact("redis+sentinel://h/m?sentinel_username=x&sentinel_password=a:b@c"),
            "redis+sentinel://h/m?sentinel_username=x&sentinel_password=***"
        );
        assert_eq!(redact("redis://us?er:pw@h"), "redis://us?***");
        assert_eq!(
            redact("redis+sentinel://u:p@h/m?sentinel_password=a@b"),
            "redis+sentinel://u:***"
        );
    }

    /// A URL refused for something else than its password says what; the percent-encoding
    /// hint only for a user part that holds `/`, `#` or `?`.
    #[test]
    fn names_what_is_wrong_with_a_url() {
        let why = |url: &str| parse_server(url).unwrap_err();
        for (url, says) in [
            ("redis://127.0.0.1:99999", "bad port '99999'"),
            ("redis://h:abc", "bad port 'abc'"),
            ("redis://127.0.0.1/notadb", "bad database number 'notadb'"),
            ("redis://[::1", "'[' of an IPv6 address is not closed"),
            ("redis://[zz]:1", "not an IPv6 address '[zz]'"),
            ("redis://[::1]x", "unexpected 'x' after the IPv6 address"),
            ("redis://::1", "must be in brackets"),
            ("redis://", "no host"),
            ("redis://:6379", "no host"),
            ("redis://0.0.0.0", "not to connect to"),
            ("redis://h st", "not a host name 'h st'"),
            ("redis://h/0?protocol=9", "unknown protocol '9'"),
            ("unix://", "no socket path"),
            ("unix://tmp/x.sock", "must be absolute"),
            ("unix:///tmp/x.sock?db=x", "bad database number 'x'"),
            ("redis://u:s3cret@h:99999", "bad port '99999'"),
            ("redis://u@[::1", "not closed"),
        ] {
            let e = why(url);
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("percent"), "{url}: {e}");
            assert!(!e.contains("s3cret"), "{url}: {e}");
        }
        for url in [
            "redis://:se/cret@h:1",
            "redis://u:se#cret@h",
            "redis://u:se?cret@h",
        ] {
            let e = why(url);
            assert!(e.contains("percent-encoded"), "{url}: {e}");
            assert!(!e.contains("cret"), "{url}: {e}");
        }
    }

    /// Several URLs or hosts in one value, and a socket URL with a user part, say how to
    /// write them, never a password.
    #[test]
    fn several_urls_and_socket_logins_are_named() {
        let why = |url: &str| parse_server(url).unwrap_err();
        for (url, says) in [
            (
                "redis://:s3cret@h:1 redis://:s3cret@h:2",
                "has a space in it, and another URL",
            ),
            ("redis://h:1\tvalkey://h:2", "another URL"),
            ("redis://h1,h2:6379", "redis+cluster://HOST1:PORT"),
            ("rediss://u:s3cret@h1:1,h2:2", "rediss+cluster://"),
            (
                "unix://:s3cret@/tmp/x.sock",
                "unix:///tmp/x.sock?pass=PASSWORD",
            ),
            (
                "redis+unix://u:s3cret@localhost/tmp/x.sock?db=1",
                "redis+unix:///tmp/x.sock?pass=PASSWORD",
            ),
            ("unix://s3cret@/", "unix:///run/redis.sock?pass=PASSWORD"),
        ] {
            let e = why(url);
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("percent-encoded"), "{url}: {e}");
            assert!(!e.contains("s3cret"), "{url}: {e}");
        }
        // An '@' in a socket's path is no user part; a space in a password is no second URL.
        assert!(parse_server("unix:///run/user@1000/redis.sock").is_ok());
        assert!(parse_server("redis://:se cret@h:1").is_ok());
    }

    #[test]
    fn scrubs_passwords_from_foreign_text() {
        assert_eq!(
            scrub("bad p@ss/w here", "redis://:p@ss/w@h"),
            "bad *** here"
        );
        assert_eq!(scrub("nothing", "redis://h"), "nothing");
    }
}
