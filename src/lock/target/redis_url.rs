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
    let normalized = format!("{scheme}://{rest}");
    redis::IntoConnectionInfo::into_connection_info(normalized.as_str()).map_err(|e| {
        let detail = e
            .detail()
            .map(|d| format!("{}: {d}", e.category()))
            .unwrap_or_else(|| e.category().to_owned());
        // A password with `/`, `#`, `?` or `@` in it splits the URL in the wrong place.
        let hint = if url.contains('@') {
            "; a password holding / # ? or @ must be percent-encoded (%2F %23 %3F %40), \
             or given with --password-file"
        } else {
            ""
        };
        format!(
            "--redis {shown}: cannot parse URL: {}{hint}",
            scrub(&detail, url)
        )
    })
}

/// Whether `info` is a TLS connection.
pub fn is_tls(info: &redis::ConnectionInfo) -> bool {
    matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
}

/// `url` with every password replaced by `***`.
///
/// An `@` may end the user part or stand in a query value (`?sentinel_password=a@b`), and a
/// password may hold `?`: what either reading takes for a secret is hidden.
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
            if let Some(colon) = rest[..at].find(':') {
                hide(colon + 1, at);
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
    match rest[..at].split_once(':') {
        Some((_, password)) if !password.is_empty() && text.contains(password) => {
            text.replace(password, "***")
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_whatever_they_hold() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:p@h"), "redis://u:***@h");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
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

    #[test]
    fn scrubs_passwords_from_foreign_text() {
        assert_eq!(
            scrub("bad p@ss/w here", "redis://:p@ss/w@h"),
            "bad *** here"
        );
        assert_eq!(scrub("nothing", "redis://h"), "nothing");
    }
}
