//! `--redis` URLs that name a master through Redis Sentinel:
//!
//! ```text
//! redis+sentinel://[user:password@]host1[:port],host2[:port]/MASTER_NAME[/db][?params]
//! ```
//!
//! - `rediss+sentinel://` uses TLS to the data nodes (the master); the sentinels themselves
//!   are always reached in plain text. `redis-sentinel://` and `rediss-sentinel://` are
//!   accepted as aliases (Lettuce's spelling); schemes in any case.
//! - The default sentinel port is 26379.
//! - The user part and `--password-file` are for the data nodes. Sentinels that need
//!   credentials of their own get them from `sentinel_username`, `sentinel_password` or
//!   `sentinel_password_file` (a file, read here, before anything is contacted).
//! - Parts may be percent-encoded (`%40` for `@`). A password may hold `/`, `?` or `#`
//!   unencoded in the user part; an `@` inside a query value must be encoded as `%40`.
//!
//! Every error is one line that shows the URL only as `redis_url::redact` does.

use super::redis_url::redact;

/// The default port of a sentinel.
pub const DEFAULT_PORT: u16 = 26379;

/// A master found through sentinels.
#[derive(Clone)]
pub struct SentinelSpec {
    /// The sentinels to ask, in the order given.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under.
    pub master: String,
    /// TLS to the data nodes (`rediss+sentinel://`).
    pub tls: bool,
    /// Login and database for the data nodes.
    pub data: redis::RedisConnectionInfo,
    /// Login for the sentinels (no database: sentinels have none).
    pub sentinel_auth: redis::RedisConnectionInfo,
}

impl std::fmt::Debug for SentinelSpec {
    // Never print a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("tls", &self.tls)
            .field("db", &self.data.db())
            .finish()
    }
}

impl SentinelSpec {
    /// The data nodes' password replaced by `password` (`--password-file`).
    pub fn with_password(mut self, password: &str) -> Self {
        self.data = self.data.set_password(password);
        self
    }
}

/// Whether `scheme` (any case) names a master through sentinels, and if so whether the data
/// nodes use TLS.
fn sentinel_scheme(scheme: &str) -> Option<bool> {
    match scheme.to_ascii_lowercase().as_str() {
        "redis+sentinel" | "redis-sentinel" => Some(false),
        "rediss+sentinel" | "rediss-sentinel" => Some(true),
        _ => None,
    }
}

/// `Ok(None)` when `url` is not a Sentinel URL; its parts when it is one.
pub fn parse(url: &str) -> Result<Option<SentinelSpec>, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let Some(tls) = sentinel_scheme(scheme) else {
        return Ok(None);
    };
    let shown = redact(url);
    let bad = |why: &str| {
        format!(
            "--redis {shown}: {why}; expected \
             redis+sentinel://[user:password@]host1:26379,host2:26379/MASTER_NAME[/db]"
        )
    };
    if tls && !cfg!(feature = "tls") {
        return Err(format!(
            "--redis {shown}: this build has no TLS support (build with --features tls)"
        ));
    }
    let (userinfo, rest) = split_userinfo(rest);
    let (location, query) = match rest.split_once('?') {
        Some((location, query)) => (location, Some(query)),
        None => (rest, None),
    };
    if location.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(bad("a fragment (#...) is not supported"));
    }
    let (hosts, path) = location.split_once('/').unwrap_or((location, ""));
    let sentinels = parse_hosts(hosts).map_err(|why| bad(&why))?;
    let (master, db) = match path.split_once('/') {
        Some((master, db)) => (master, Some(db)),
        None => (path, None),
    };
    let master = decode(master).ok_or_else(|| bad("the master name is not valid UTF-8"))?;
    if master.is_empty() {
        return Err(bad("no master name"));
    }
    let mut data = redis::RedisConnectionInfo::default();
    if let Some(db) = db {
        match db.parse::<u32>() {
            Ok(n) => data = data.set_db(i64::from(n)),
            Err(_) => return Err(bad("the database must be a number after the master name")),
        }
    }
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        let user = decode(user).ok_or_else(|| bad("the user name is not valid UTF-8"))?;
        if !user.is_empty() {
            data = data.set_username(user);
        }
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            // Never quoted in a message, decoded or not.
            let password =
                decode(password).ok_or_else(|| bad("the password is not valid UTF-8"))?;
            data = data.set_password(password);
        }
    }
    let sentinel_auth = parse_query(query.unwrap_or(""), &bad)?;
    Ok(Some(SentinelSpec {
        sentinels,
        master,
        tls,
        data,
        sentinel_auth,
    }))
}

/// The user part and the rest. The user part runs up to the last `@` that is followed by the
/// host list (a `/` before any query character): a password may hold anything, and a host
/// never holds `@`. Failing that, an `@` stands in the query and the user part, if any, ends
/// at the last `@` before the query.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    if let Some(at) = rest.rfind('@') {
        let after = &rest[at + 1..];
        let hosts_end = after.find(['/', '?', '&', '=']);
        let followed_by_hosts = match hosts_end {
            Some(i) => after.as_bytes()[i] == b'/',
            // No master name after it either: a user part, unless what precedes looks
            // like a query.
            None => !rest[..at].contains('='),
        };
        if followed_by_hosts {
            return (Some(&rest[..at]), after);
        }
        let before_query = &rest[..rest.find('?').unwrap_or(rest.len())];
        if let Some(at) = before_query.rfind('@') {
            return (Some(&rest[..at]), &rest[at + 1..]);
        }
    }
    (None, rest)
}

/// `host1[:port],host2[:port]`; IPv6 addresses in brackets.
fn parse_hosts(hosts: &str) -> Result<Vec<(String, u16)>, String> {
    if hosts.is_empty() {
        return Err("no sentinel hosts".to_owned());
    }
    // Entries are named by their place, never quoted: a password typed without encoding can
    // end up here when the user part was not where it was expected.
    hosts
        .split(',')
        .enumerate()
        .map(|(i, entry)| {
            let nth = i + 1;
            let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("sentinel host #{nth} lacks its ']'"))?;
                match after {
                    "" => (host, None),
                    _ => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return Err(format!("sentinel host #{nth} is not host:port")),
                    },
                }
            } else {
                match entry.split_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (entry, None),
                }
            };
            if host.is_empty() {
                return Err("an empty sentinel host in the list".to_owned());
            }
            let port = match port {
                None => DEFAULT_PORT,
                Some(p) => p
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| format!("sentinel host #{nth} has a bad port"))?,
            };
            Ok((host.to_owned(), port))
        })
        .collect()
}

/// The sentinels' own login, from the query parameters.
fn parse_query(
    query: &str,
    bad: &dyn Fn(&str) -> String,
) -> Result<redis::RedisConnectionInfo, String> {
    let mut auth = redis::RedisConnectionInfo::default();
    let mut password_given = false;
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let value = decode(value).ok_or_else(|| bad("a query value is not valid UTF-8"))?;
        match name {
            "sentinel_username" => auth = auth.set_username(value),
            "sentinel_password" | "sentinel_password_file" if password_given => {
                return Err(bad(
                    "give sentinel_password or sentinel_password_file, not both",
                ));
            }
            "sentinel_password" => {
                password_given = true;
                auth = auth.set_password(value);
            }
            "sentinel_password_file" => {
                password_given = true;
                auth = auth.set_password(read_password_file(&value, bad)?);
            }
            // Not quoted: it may be the tail of a password that held a `&`.
            _ => {
                return Err(bad(
                    "an unknown query parameter (known: sentinel_username, sentinel_password, \
                     sentinel_password_file; a password holding '&' must encode it as %26)",
                ));
            }
        }
    }
    Ok(auth)
}

/// The password in `path`, without its trailing newline.
fn read_password_file(path: &str, bad: &dyn Fn(&str) -> String) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(&format!("cannot read sentinel_password_file {path}: {e}")))?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(bad(&format!("sentinel_password_file {path} is empty")));
    }
    Ok(password.to_owned())
}

/// `%XX` sequences decoded; `None` if the result is not UTF-8. A `%` not followed by two hex
/// digits stays as it is (a password typed unencoded).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str) -> SentinelSpec {
        parse(url)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .unwrap_or_else(|| panic!("{url}: not taken as a Sentinel URL"))
    }

    fn err(url: &str) -> String {
        parse(url)
            .err()
            .unwrap_or_else(|| panic!("{url}: accepted"))
    }

    #[test]
    fn parses_hosts_master_db_and_logins() {
        let s = ok("redis+sentinel://u:p@ss@h1,h2:26380,[::1]:5/mymaster/3");
        assert_eq!(
            s.sentinels,
            vec![
                ("h1".to_owned(), 26379),
                ("h2".to_owned(), 26380),
                ("::1".to_owned(), 5)
            ]
        );
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.data.db(), 3);
        assert_eq!(s.data.username(), Some("u"));
        assert_eq!(s.data.password(), Some("p@ss"));
        assert!(!s.tls);
        assert_eq!(s.sentinel_auth.password(), None);

        let s = ok("REDISS-SENTINEL://h/m%2Fx?sentinel_username=su&sentinel_password=a%40b");
        assert!(s.tls);
        assert_eq!(s.master, "m/x");
        assert_eq!(s.data.db(), 0);
        assert_eq!(s.sentinel_auth.username(), Some("su"));
        assert_eq!(s.sentinel_auth.password(), Some("a@b"));

        // An unencoded @ in a query value is not taken for the end of a user part.
        let s = ok("redis-sentinel://h/m?sentinel_password=a@b");
        assert_eq!(s.sentinels, vec![("h".to_owned(), 26379)]);
        assert_eq!(s.sentinel_auth.password(), Some("a@b"));
        let s = ok("redis+sentinel://:pw@h/m?sentinel_password=a@b");
        assert_eq!(s.data.password(), Some("pw"));
        assert_eq!(s.sentinel_auth.password(), Some("a@b"));

        assert!(parse("redis://h").unwrap().is_none());
        assert!(parse("h1,h2/m").unwrap().is_none());
    }

    #[test]
    fn refuses_bad_forms_without_showing_passwords() {
        for (url, why) in [
            ("redis+sentinel://:s3cret@/m", "no sentinel hosts"),
            ("redis+sentinel://:s3cret@h1", "no master name"),
            ("redis+sentinel://:s3cret@h1/", "no master name"),
            ("redis+sentinel://:s3cret@h1:99999/m", "bad port"),
            ("redis+sentinel://:s3cret@h1:0/m", "bad port"),
            ("redis+sentinel://:s3cret@h1,,h2/m", "empty sentinel host"),
            (
                "redis+sentinel://:s3cret@h1/m/x",
                "database must be a number",
            ),
            (
                "redis+sentinel://:s3cret@h1/m/-1",
                "database must be a number",
            ),
            (
                "redis+sentinel://:s3cret@h1/m?db=2",
                "an unknown query parameter",
            ),
            (
                "redis+sentinel://h1/m?sentinel_password=s3cret&sentinel_password_file=/x",
                "not both",
            ),
            (
                "redis+sentinel://h1/m?sentinel_password_file=/nonexistent/s3cret",
                "cannot read sentinel_password_file",
            ),
        ] {
            let e = err(url);
            assert!(e.contains(why), "{url}: {e}");
            assert!(e.starts_with("--redis redis+sentinel://"), "{e}");
            if !why.contains("sentinel_password_file") {
                assert!(!e.contains("s3cret"), "{url}: {e}");
            }
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn reads_the_sentinel_password_file() {
        let dir = std::env::temp_dir().join(format!("sentinel-url-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let s = ok(&format!(
            "redis+sentinel://h/m?sentinel_password_file={}",
            file.display()
        ));
        assert_eq!(s.sentinel_auth.password(), Some("from-file"));
        std::fs::write(&file, "\n").unwrap();
        let e = err(&format!(
            "redis+sentinel://h/m?sentinel_password_file={}",
            file.display()
        ));
        assert!(e.contains("is empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
