//! `--ping URL`, checked: the monitor's scheme, host, port, path and query, as the ping
//! client (`http.rs`) reaches it and messages show it (without the path: it holds the
//! check's secret).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// Whether this build speaks TLS (feature `tls`).
pub const HAS_TLS: bool = cfg!(feature = "tls");

/// `--ping URL`, checked: where to connect, and the path the suffixes go after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingUrl {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    /// Without a trailing slash (`""` for the root).
    pub path: String,
    /// Without the `?` (`""` for none).
    pub query: String,
}

impl PingUrl {
    pub fn parse(url: &str) -> Result<PingUrl, String> {
        let url = url.trim();
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err("give an http:// or https:// URL".to_owned());
        };
        if scheme == Scheme::Https && !HAS_TLS {
            return Err(
                "https:// needs TLS, which this build of redlock-run leaves out (feature tls)"
                    .to_owned(),
            );
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err("a user or password in the URL is not supported".to_owned());
        }
        let (host, port) = split_host_port(authority, scheme)?;
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, q),
            None => (tail, ""),
        };
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the URL holds a space or a control character".to_owned());
        }
        Ok(PingUrl {
            scheme,
            host,
            port,
            path: path.trim_end_matches('/').to_owned(),
            query: query.to_owned(),
        })
    }

    /// The request target for `suffix` (`""`, `/start`, `/3`, `/log`) with the run id.
    /// A URL without a path pings `/` (a request target must start with one).
    pub fn target(&self, suffix: &str, rid: &str) -> String {
        let sep = if self.query.is_empty() { "" } else { "&" };
        let path = format!("{}{suffix}", self.path);
        let path = if path.is_empty() { "/" } else { &path };
        format!("{path}?{}{sep}rid={rid}", self.query)
    }

    /// For messages: the monitor's address without the path, which holds the check's secret
    /// (anyone who knows it can ping).
    pub fn shown(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        format!("{scheme}://{}/...", self.host_port())
    }

    pub fn host_port(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.scheme, self.port) {
            (Scheme::Http, 80) | (Scheme::Https, 443) => host,
            (_, port) => format!("{host}:{port}"),
        }
    }
}

fn split_host_port(authority: &str, scheme: Scheme) -> Result<(String, u16), String> {
    let default = match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("an IPv6 address lacks its ']'")?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the URL names no host".to_owned());
    }
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            // Not echoed: a typo there may run into the path, the check's secret.
            .ok_or("bad port (give a number from 1 to 65535)")?,
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_their_path_and_query() {
        let u = PingUrl::parse("https://hc-ping.com/abc-123/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("hc-ping.com", 443, "/abc-123")
        );
        assert_eq!(u.target("/start", "R"), "/abc-123/start?rid=R");
        assert_eq!(u.target("", "R"), "/abc-123?rid=R");
        let q = PingUrl::parse("http://[::1]:8000/ping/key/slug?create=1#x").unwrap();
        assert_eq!((q.host.as_str(), q.port), ("::1", 8000));
        assert_eq!(q.target("/3", "R"), "/ping/key/slug/3?create=1&rid=R");
        assert_eq!(q.shown(), "http://[::1]:8000/...");
        // No path: the target starts with '/', with or without a query.
        let bare = PingUrl::parse("http://h:1").unwrap();
        assert_eq!(bare.target("", "R"), "/?rid=R");
        assert_eq!(bare.target("/start", "R"), "/start?rid=R");
        let bare_q = PingUrl::parse("http://h:1?x").unwrap();
        assert_eq!(bare_q.target("", "R"), "/?x&rid=R");
        // A bad port is not echoed (it may run into the path).
        let err = PingUrl::parse("http://h:25100\\SECRETM").unwrap_err();
        assert!(!err.contains("SECRETM"), "{err}");
        for bad in [
            "ftp://x",
            "http://",
            "http://h:0/",
            "http://h:99999/",
            "http://u:p@h/",
            "x",
            "http://h/a b",
        ] {
            assert!(PingUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
