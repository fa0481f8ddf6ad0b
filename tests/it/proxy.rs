//! The TCP fault proxy of the harness (tests/common/proxy.rs), checked against a real
//! redis-server: every fault does what the network tests rely on.

use crate::common::{self, proxy::*};

/// How long a connection must stay quiet to count as "never answers".
const SILENCE: std::time::Duration = std::time::Duration::from_millis(400);

/// Bound for anything that is expected to happen.
const WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

fn through(redis: &common::RedisServer) -> FaultProxy {
    FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], redis.port())))
}

/// A client connection to the proxy, with bounded reads and writes.
fn connect(p: &FaultProxy) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect_timeout(&p.addr(), WITHIN)
        .unwrap_or_else(|e| panic!("connect to proxy {}: {e}", p.addr()));
    s.set_write_timeout(Some(WITHIN)).unwrap();
    s
}

fn send(s: &mut std::net::TcpStream, bytes: &[u8]) {
    std::io::Write::write_all(s, bytes).expect("write to proxy");
}

/// Reads exactly `n` bytes within `timeout`; Err on timeout, EOF or reset.
fn read_n(
    s: &mut std::net::TcpStream,
    n: usize,
    timeout: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = vec![0u8; n];
    std::io::Read::read_exact(s, &mut buf)?;
    Ok(buf)
}

/// One PING; the time until `+PONG` came back.
fn ping(s: &mut std::net::TcpStream) -> std::time::Duration {
    let start = std::time::Instant::now();
    send(s, b"PING\r\n");
    let reply = read_n(s, 7, WITHIN).expect("PONG through the proxy");
    assert_eq!(reply, b"+PONG\r\n");
    start.elapsed()
}

/// Panics unless nothing at all (no byte, no EOF, no reset) arrives for [`SILENCE`].
fn expect_silence(s: &mut std::net::TcpStream, what: &str) {
    s.set_read_timeout(Some(SILENCE)).unwrap();
    let mut buf = [0u8; 64];
    match std::io::Read::read(s, &mut buf) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        Ok(0) => panic!("{what}: got EOF, expected silence"),
        Ok(n) => panic!(
            "{what}: got {:?}, expected silence",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => panic!("{what}: got {e}, expected silence"),
    }
}

/// Panics unless the connection is reset (RST: what `drop_all` and `Drop` send) within
/// [`WITHIN`].
fn expect_reset(s: &mut std::net::TcpStream, what: &str) {
    s.set_read_timeout(Some(WITHIN)).unwrap();
    match std::io::Read::read(s, &mut [0u8; 64]) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{what}: expected a reset, got {other:?}"),
    }
}

/// Panics unless the peer half-closes (FIN, read gives EOF) within [`WITHIN`].
fn expect_eof(s: &mut std::net::TcpStream, what: &str) {
    s.set_read_timeout(Some(WITHIN)).unwrap();
    match std::io::Read::read(s, &mut [0u8; 64]) {
        Ok(0) => {}
        other => panic!("{what}: expected EOF, got {other:?}"),
    }
}

#[test]
fn proxy_forwards_in_order_and_tracks_connections() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    assert_eq!(p.url(), format!("redis://127.0.0.1:{}", p.port()));
    let mut a = connect(&p);
    ping(&mut a);
    // 2000 pipelined commands: every reply comes back, in order.
    let mut batch = Vec::new();
    for i in 0..2000 {
        batch.extend_from_slice(format!("ECHO {i:05}\r\n").as_bytes());
    }
    send(&mut a, &batch);
    let mut expected = Vec::new();
    for i in 0..2000 {
        expected.extend_from_slice(format!("$5\r\n{i:05}\r\n").as_bytes());
    }
    assert!(read_n(&mut a, expected.len(), WITHIN).unwrap() == expected);
    let b = connect(&p);
    common::wait_until(WITHIN, "2 open connections", || p.connections() == 2);
    assert_eq!(p.accepted(), 2);
    drop(a);
    drop(b);
    common::wait_until(WITHIN, "closed clients to be closed", || {
        p.connections() == 0
    });
    assert_eq!(p.accepted(), 2);
}

#[test]
fn proxy_latency_delays_each_direction_on_open_connections() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    assert!(ping(&mut a) < ms(200));
    p.set_latency(Dir::Up, ms(300));
    let t = ping(&mut a);
    assert!(t >= ms(300) && t < ms(2000), "up latency: {t:?}");
    p.set_latency(Dir::Down, ms(200));
    let mut b = connect(&p);
    let t = ping(&mut b);
    assert!(t >= ms(500) && t < ms(2500), "up+down latency: {t:?}");
    // Pipelined commands under latency still come back in order.
    send(&mut b, b"ECHO 1\r\nECHO 2\r\nECHO 3\r\n");
    assert_eq!(
        read_n(&mut b, 21, WITHIN).unwrap(),
        b"$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
    );
    p.set_latency(Dir::Up, ms(0));
    p.set_latency(Dir::Down, ms(0));
    assert!(ping(&mut a) < ms(200));
}

#[test]
fn proxy_hold_queues_until_release() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    ping(&mut a);
    // Held upstream: the server never sees the command until release.
    p.hold(Dir::Up);
    send(&mut a, b"SET held 1\r\n");
    expect_silence(&mut a, "held request");
    assert!(!redis.exists("held"));
    p.release(Dir::Up);
    assert_eq!(read_n(&mut a, 5, WITHIN).unwrap(), b"+OK\r\n");
    assert!(redis.exists("held"));
    // Held downstream: the server acts, the replies wait, and come in order on release.
    p.hold(Dir::Down);
    send(&mut a, b"SET k2 1\r\nPING\r\n");
    common::wait_until(WITHIN, "server to run SET k2", || redis.exists("k2"));
    expect_silence(&mut a, "held replies");
    p.release(Dir::Down);
    assert_eq!(read_n(&mut a, 12, WITHIN).unwrap(), b"+OK\r\n+PONG\r\n");
}

#[test]
fn proxy_discard_drops_bytes_silently() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    p.discard(Dir::Up, true);
    send(&mut a, b"SET lost 1\r\n");
    expect_silence(&mut a, "discarded request");
    assert!(!redis.exists("lost"));
    p.discard(Dir::Up, false);
    ping(&mut a);
    p.discard(Dir::Down, true);
    send(&mut a, b"SET kept 1\r\n");
    common::wait_until(WITHIN, "server to run SET kept", || redis.exists("kept"));
    expect_silence(&mut a, "discarded reply");
    p.discard(Dir::Down, false);
    // The +OK is gone for good; the next reply is the next command's.
    ping(&mut a);
}

#[test]
fn proxy_blackhole_accepts_new_connections_that_never_answer() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut old = connect(&p);
    ping(&mut old);
    let before = redis.info_field("total_connections_received");
    p.set_new(NewConns::Blackhole);
    let mut bh = connect(&p);
    common::wait_until(WITHIN, "blackholed conn accepted", || p.accepted() == 2);
    send(&mut bh, b"PING\r\n");
    expect_silence(&mut bh, "blackholed connection");
    ping(&mut old);
    // The server never saw it (only the INFO call's own connection is new).
    assert_eq!(redis.info_field("total_connections_received"), before + 1);
    assert_eq!(p.connections(), 2);
    p.set_new(NewConns::Forward);
    ping(&mut connect(&p));
    expect_silence(&mut bh, "blackholed connection after Forward");
}

#[test]
fn proxy_refuse_fails_connects_fast_and_forward_rebinds() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut old = connect(&p);
    ping(&mut old);
    let port = p.port();
    p.set_new(NewConns::Refuse);
    let start = std::time::Instant::now();
    let err = std::net::TcpStream::connect_timeout(&p.addr(), WITHIN)
        .expect_err("connect while refusing");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(
        start.elapsed() < ms(500),
        "refused after {:?}",
        start.elapsed()
    );
    ping(&mut old);
    p.set_new(NewConns::Forward);
    assert_eq!(p.port(), port);
    ping(&mut connect(&p));
    ping(&mut old);
}

#[test]
fn proxy_freeze_all_silences_open_connections_only() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    ping(&mut a);
    p.freeze_all();
    send(&mut a, b"SET frozen 1\r\n");
    // Silent: no reply, no EOF, no reset, and the server never got the request.
    expect_silence(&mut a, "frozen connection");
    assert!(!redis.exists("frozen"));
    let mut b = connect(&p);
    ping(&mut b);
    assert_eq!(p.connections(), 2);
    p.thaw_all();
    assert_eq!(read_n(&mut a, 5, WITHIN).unwrap(), b"+OK\r\n");
    ping(&mut a);
}

#[test]
fn proxy_drop_all_resets_open_connections() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    ping(&mut a);
    p.set_new(NewConns::Blackhole);
    let mut bh = connect(&p);
    common::wait_until(WITHIN, "blackholed conn accepted", || p.accepted() == 2);
    p.set_new(NewConns::Forward);
    let mut frozen = connect(&p);
    ping(&mut frozen);
    p.freeze_all();
    p.drop_all();
    assert_eq!(p.connections(), 0);
    expect_reset(&mut a, "forwarded conn after drop_all");
    expect_reset(&mut bh, "blackholed conn after drop_all");
    expect_reset(&mut frozen, "frozen conn after drop_all");
    // The server side was closed too.
    common::wait_until(WITHIN, "server to see its clients go", || {
        redis.info_field("connected_clients") == 1
    });
    ping(&mut connect(&p));
}

#[test]
fn proxy_drop_closes_everything_promptly() {
    let redis = common::RedisServer::start();
    let p = through(&redis);
    let addr = p.addr();
    let mut a = connect(&p);
    ping(&mut a);
    p.hold(Dir::Down);
    send(&mut a, b"PING\r\n");
    let mut b = connect(&p);
    common::wait_until(WITHIN, "second conn open", || p.connections() == 2);
    p.freeze_all();
    let start = std::time::Instant::now();
    drop(p);
    assert!(
        start.elapsed() < ms(1000),
        "drop took {:?}",
        start.elapsed()
    );
    expect_reset(&mut a, "held conn after drop");
    expect_reset(&mut b, "frozen conn after drop");
    let err = std::net::TcpStream::connect_timeout(&addr, WITHIN).expect_err("connect after drop");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
}

#[test]
fn proxy_upstream_down_resets_new_clients() {
    let mut redis = common::RedisServer::start();
    let p = through(&redis);
    let mut a = connect(&p);
    ping(&mut a);
    redis.kill();
    expect_eof(&mut a, "conn whose server died");
    // The reset may come before connect() returns (seen on a loaded machine) or after.
    match std::net::TcpStream::connect_timeout(&p.addr(), WITHIN) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("connect to proxy {}: {e}", p.addr()),
        Ok(mut b) => {
            b.set_write_timeout(Some(WITHIN)).unwrap();
            expect_reset(&mut b, "new conn with no server");
        }
    }
    // The server's FIN was passed on as a half-close: the proxy lets go once the client does.
    drop(a);
    common::wait_until(WITHIN, "no open connections", || p.connections() == 0);
}
