//! `--redis redis+cluster://[user:password@]host1[:port],host2[:port][/0][?params]` and
//! `rediss+cluster://` (TLS): the seed nodes of a Redis Cluster.
//!
//! Each seed is turned into the URL of one server (`redis://user:password@host1:port/0?params`)
//! and parsed by [`redis_url::parse_server`], so credentials, percent-encoding, `?protocol=`,
//! `#insecure` and the TLS build checks are exactly those of a single server. What is
//! particular to a cluster is checked here: at least one node, no empty node, no unix
//! socket, and database 0 only (Cluster has no other). Errors show the URL only redacted.

use super::redis_url;

/// The schemes of a cluster URL (any case), and the scheme of one node's URL for each.
const SCHEMES: &[(&str, &str)] = &[("redis+cluster", "redis"), ("rediss+cluster", "rediss")];

/// The seeds of a cluster URL; `None` if `url` is not one (another scheme, or no scheme).
pub fn parse(url: &str) -> Option<Result<Vec<redis::ConnectionInfo>, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let node_scheme = SCHEMES.iter().find(|(s, _)| *s == scheme)?.1;
    Some(parse_seeds(node_scheme, rest, &redis_url::redact(url)))
}

fn parse_seeds(
    node_scheme: &str,
    rest: &str,
    shown: &str,
) -> Result<Vec<redis::ConnectionInfo>, String> {
    let example = "example: redis+cluster://10.0.0.1:6379,10.0.0.2:6379";
    // The user part runs up to the last '@' (a password may hold any character; a host never
    // holds an '@'), as in `redis_url::redact`.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (hosts, tail) = after.split_at(end);
    if hosts.is_empty() {
        let why = if tail.starts_with('/') {
            "Cluster nodes are reached over TCP, not unix sockets; give host:port nodes"
        } else {
            "no nodes; give one or more host:port nodes, separated by commas"
        };
        return Err(format!("--redis {shown}: {why}; {example}"));
    }
    let mut seeds = Vec::new();
    for host in hosts.split(',') {
        if host.trim().is_empty() {
            return Err(format!(
                "--redis {shown}: an empty node in the list (two commas, or one at an end); \
                 {example}"
            ));
        }
        let node_url = format!("{node_scheme}://{userinfo}{host}{tail}");
        let info = redis_url::parse_server(&node_url).map_err(|e| {
            // parse_server names the node's URL (redacted); name the whole --redis instead.
            let detail = e.split_once(": ").map_or(e.as_str(), |(_, d)| d);
            format!("--redis {shown}: node {host}: {detail}")
        })?;
        if info.redis_settings().db() != 0 {
            return Err(format!(
                "--redis {shown}: Cluster has only database 0; remove /{} from the URL",
                info.redis_settings().db()
            ));
        }
        seeds.push(info);
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(info: &redis::ConnectionInfo) -> String {
        match info.addr() {
            redis::ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
            redis::ConnectionAddr::TcpTls { host, port, .. } => format!("tls {host}:{port}"),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn parses_seeds_with_shared_credentials() {
        let seeds = parse("REDIS+Cluster://u:p@ss@h1:7000,h2,[::1]:7002/0?protocol=resp3")
            .unwrap()
            .unwrap();
        let addrs: Vec<String> = seeds.iter().map(addr).collect();
        assert_eq!(addrs, ["h1:7000", "h2:6379", "::1:7002"]);
        for s in &seeds {
            assert_eq!(s.redis_settings().username(), Some("u"));
            assert_eq!(s.redis_settings().password(), Some("p@ss"));
            assert_eq!(s.redis_settings().db(), 0);
        }
        assert!(parse("redis://h").is_none());
        assert!(parse("h1:6379").is_none());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rediss_cluster_uses_tls_on_every_node() {
        let seeds = parse("rediss+cluster://h1:1,h2:2").unwrap().unwrap();
        assert!(seeds.iter().all(redis_url::is_tls));
    }

    #[test]
    fn refuses_bad_forms_without_showing_the_password() {
        for (url, says) in [
            ("redis+cluster://", "no nodes"),
            ("redis+cluster://:s3cret@", "no nodes"),
            ("redis+cluster:///tmp/redis.sock", "not unix sockets"),
            ("redis+cluster://:s3cret@h1,,h2", "empty node"),
            ("redis+cluster://h1,", "empty node"),
            ("redis+cluster://:s3cret@h1:99999", "node h1:99999"),
            ("redis+cluster://:s3cret@h1:x", "node h1:x"),
            ("redis+cluster://:s3cret@h1/3", "only database 0"),
            ("rediss+cluster://:s3cret@h1#insecure", "#insecure"),
        ] {
            let err = parse(url).unwrap().unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
            assert!(!err.contains("s3cret"), "{url}: {err}");
            assert!(!err.contains('\n'), "{url}: {err}");
        }
    }
}
