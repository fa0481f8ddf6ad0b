//! The smallest HTTP/1.1 client a ping needs: one POST, `Connection: close`, the reply's
//! status line read and the rest ignored. Blocking, on the ping thread, with every step
//! bounded by the request's deadline (the name lookup excepted: it runs on that thread,
//! which the exit does not wait for beyond its bound).
//!
//! Written by hand instead of taking an HTTP library: a ping needs no connection reuse,
//! redirects, chunked bodies or HTTP/2, and the crates that do all that (hyper and
//! hyper-util, ureq, reqwest) would add far more code to every run's binary than the ~150
//! lines here. HTTPS uses the rustls (ring) the binary already links for `rediss://`, with
//! the system's CA certificates, or those of `SSL_CERT_FILE`/`SSL_CERT_DIR` instead (the
//! convention of curl and OpenSSL; `--tls-ca-cert` is the Redis servers' CA, not the
//! monitor's). A proxy is taken from `https_proxy`/`HTTPS_PROXY` (HTTPS, through CONNECT) or
//! `http_proxy`/`HTTP_PROXY` (plain HTTP, absolute-form), unless `no_proxy`/`NO_PROXY` names
//! the host; the proxy itself is reached over plain HTTP, without credentials. A CONNECT
//! tunnel costs ~30 lines here, where the HTTP libraries would bring their own stack.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::url::{PingUrl, Scheme};

/// The longest status line (and CONNECT reply header) read.
const MOST_HEAD: usize = 8192;

/// POST `body` to `target` (path and query) of `url`; the reply's status code.
pub fn post(url: &PingUrl, target: &str, body: &[u8], deadline: Instant) -> Result<u16, String> {
    let proxy = proxy_for(url)?;
    let (host, port) = match &proxy {
        Some((h, p)) => (h.as_str(), *p),
        None => (url.host.as_str(), url.port),
    };
    let mut tcp = connect(host, port, deadline)?;
    let host_header = url.host_port();
    let request_target = match (&proxy, url.scheme) {
        // A plain-HTTP proxy takes the whole URL.
        (Some(_), Scheme::Http) => format!("http://{host_header}{target}"),
        _ => target.to_owned(),
    };
    let mut request = format!(
        "POST {request_target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: redlock-run/{}\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    match url.scheme {
        Scheme::Http => exchange(&mut tcp, &request, deadline),
        Scheme::Https => {
            if proxy.is_some() {
                tunnel(&mut tcp, &host_header, url, deadline)?;
            }
            tls::exchange(tcp, &url.host, &request, deadline)
        }
    }
}

fn left(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("timed out".to_owned())
    } else {
        Ok(left)
    }
}

fn connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, String> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    let mut last = format!("{host} has no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left(deadline)?) {
            Ok(tcp) => {
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

/// Send `request` and read the status code of the reply.
fn exchange(stream: &mut impl Stream, request: &[u8], deadline: Instant) -> Result<u16, String> {
    stream.bound(left(deadline)?);
    stream
        .write_all(request)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("sending: {}", timed(e)))?;
    let head = read_head(stream, deadline, b"\r\n")?;
    status(&head)
}

/// `HTTP/1.1 200 OK` -> 200.
fn status(head: &[u8]) -> Result<u16, String> {
    let line = String::from_utf8_lossy(head);
    let mut words = line.split_whitespace();
    match (
        words.next(),
        words.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
        _ => Err(format!(
            "not an HTTP reply: {:?}",
            line.chars().take(40).collect::<String>()
        )),
    }
}

/// Read until `end` (or the connection closes).
fn read_head(stream: &mut impl Stream, deadline: Instant, end: &[u8]) -> Result<Vec<u8>, String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(end) && head.len() < MOST_HEAD {
        stream.bound(left(deadline)?);
        match stream.read(&mut byte) {
            Ok(0) if head.is_empty() => return Err("the connection closed without a reply".into()),
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("waiting for the reply: {}", timed(e))),
        }
    }
    Ok(head)
}

fn timed(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out".to_owned(),
        _ => e.to_string(),
    }
}

/// `CONNECT host:port` through a proxy, for HTTPS.
fn tunnel(
    tcp: &mut TcpStream,
    host_port: &str,
    url: &PingUrl,
    deadline: Instant,
) -> Result<(), String> {
    let authority = if host_port.contains(':') && !host_port.ends_with(']') {
        host_port.to_owned()
    } else {
        format!("{host_port}:{}", url.port)
    };
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    tcp.bound(left(deadline)?);
    tcp.write_all(request.as_bytes())
        .map_err(|e| format!("to the proxy: {}", timed(e)))?;
    let head = read_head(tcp, deadline, b"\r\n\r\n")?;
    match status(&head)? {
        200..=299 => Ok(()),
        code => Err(format!("the proxy refused the tunnel (HTTP {code})")),
    }
}

/// The proxy from the environment for `url`, unless `no_proxy` names its host. A proxy this
/// client cannot use (another scheme, credentials) fails the ping rather than going around
/// it: where a proxy is set, the direct way is usually closed. The variable's value is never
/// shown (it may hold a password).
fn proxy_for(url: &PingUrl) -> Result<Option<(String, u16)>, String> {
    let var = |names: [&'static str; 2]| {
        names.into_iter().find_map(|n| {
            std::env::var(n)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| (n, v))
        })
    };
    let Some((name, proxy)) = (match url.scheme {
        Scheme::Https => var(["https_proxy", "HTTPS_PROXY"]),
        Scheme::Http => var(["http_proxy", "HTTP_PROXY"]),
    }) else {
        return Ok(None);
    };
    if let Some((_, no)) = var(["no_proxy", "NO_PROXY"])
        && no.split(',').map(str::trim).any(|n| {
            let n = n.trim_start_matches('.');
            n == "*" || (!n.is_empty() && (url.host == n || url.host.ends_with(&format!(".{n}"))))
        })
    {
        return Ok(None);
    }
    let proxy = proxy.trim();
    let rest = match proxy.split_once("://") {
        None => proxy,
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some(_) => return Err(format!("{name}: only an http:// proxy is supported")),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!(
            "{name}: a proxy with a user or password is not supported"
        ));
    }
    match PingUrl::parse(&format!("http://{authority}/")) {
        Ok(parsed) => Ok(Some((parsed.host, parsed.port))),
        Err(_) => Err(format!(
            "{name}: not a proxy address (give http://HOST:PORT)"
        )),
    }
}

/// A stream whose reads and writes can be bounded.
trait Stream: Read + Write {
    fn bound(&mut self, within: Duration);
}

impl Stream for TcpStream {
    fn bound(&mut self, within: Duration) {
        let _ = self.set_read_timeout(Some(within));
        let _ = self.set_write_timeout(Some(within));
    }
}

#[cfg(feature = "tls")]
mod tls {
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

    use super::Stream;

    impl Stream for StreamOwned<ClientConnection, TcpStream> {
        fn bound(&mut self, within: Duration) {
            self.sock.bound(within);
        }
    }

    pub fn exchange(
        tcp: TcpStream,
        host: &str,
        request: &[u8],
        deadline: Instant,
    ) -> Result<u16, String> {
        let mut roots = RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err("no CA certificates found (set SSL_CERT_FILE)".to_owned());
        }
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
        let name = ServerName::try_from(host.to_owned()).map_err(|e| format!("{host}: {e}"))?;
        let conn = ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let mut stream = StreamOwned::new(conn, tcp);
        super::exchange(&mut stream, request, deadline)
    }
}

#[cfg(not(feature = "tls"))]
mod tls {
    use std::net::TcpStream;
    use std::time::Instant;

    pub fn exchange(_: TcpStream, _: &str, _: &[u8], _: Instant) -> Result<u16, String> {
        Err("https:// needs the tls feature".to_owned())
    }
}
