//! [`FaultProxy`]: a TCP proxy on a free loopback port in front of one upstream (usually a
//! [`RedisServer`](super::RedisServer)) that injects network faults on demand: latency, held
//! or dropped bytes per direction, new connections that are never answered or refused, and
//! open connections that are reset or go silently dead.
//!
//! Threads: one accept thread, and two pumps per forwarded connection (client -> server and
//! server -> client); a blackholed connection has one pump that reads and drops. Pumps read
//! with a short timeout ([`TICK`]) and look at the shared state after every read, so each
//! setter applies to open connections as well as new ones. `Drop` resets every connection,
//! stops every thread and joins them (bounded).

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a pump or the accept loop blocks before it looks at the shared state again.
const TICK: Duration = Duration::from_millis(20);

/// Bound for the proxy's own waits (re-binding, `drop_all`, `Drop`).
const WAIT: Duration = Duration::from_secs(5);

/// Bound for connecting upstream (done on the accept thread; instant on loopback).
const UPSTREAM_CONNECT: Duration = Duration::from_secs(1);

/// A direction of the byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client -> server (requests).
    Up,
    /// Server -> client (replies).
    Down,
}

/// What happens to connections accepted from now on (open ones keep what they had).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NewConns {
    /// Connect upstream and forward, subject to the per-direction faults.
    #[default]
    Forward,
    /// Accept, never connect upstream, never answer: the connect succeeds, no reply ever
    /// comes (the server never sees the connection).
    Blackhole,
    /// The listening socket is closed, so a connect fails at once with ECONNREFUSED.
    Refuse,
}

/// Faults of one direction.
#[derive(Clone, Copy, Default)]
struct DirFaults {
    latency: Duration,
    held: bool,
    discard: bool,
}

#[derive(Default)]
struct ConnFlags {
    frozen: bool,
    killed: bool,
    /// Pumps still running; the connection is open (in `conns`) until this reaches 0.
    pumps: u8,
}

#[derive(Default)]
struct State {
    dirs: [DirFaults; 2],
    new: NewConns,
    /// Whether the accept thread holds a bound listening socket right now.
    listening: bool,
    conns: HashMap<u64, ConnFlags>,
    next_id: u64,
    accepted: usize,
    /// Connections after this many accepted ones are blackholed (`blackhole_after`).
    forward_only: Option<usize>,
    shutdown: bool,
    /// Pump threads, joined in `Drop`.
    pumps: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Notified on every change: setters, listener closed or bound, connection gone.
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking pump must not take the whole harness down with a poisoned lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.cv.notify_all();
    }

    /// Waits up to `timeout` for `cond`; returns the guard and whether `cond` held.
    fn wait_for(
        &self,
        timeout: Duration,
        cond: impl Fn(&State) -> bool,
    ) -> (MutexGuard<'_, State>, bool) {
        let (g, res) = self
            .cv
            .wait_timeout_while(self.lock(), timeout, |s| !cond(s))
            .unwrap_or_else(|e| e.into_inner());
        (g, !res.timed_out())
    }
}

/// The sockets of one connection, shared by its pumps: closed when the last one lets go.
struct Conn {
    client: TcpStream,
    upstream: Option<TcpStream>,
}

/// One pump's share of a connection. Its drop closes the sockets (if last) before it reports,
/// so a connection missing from `connections()` is really closed.
struct ConnRef {
    shared: Arc<Shared>,
    id: u64,
    conn: Option<Arc<Conn>>,
}

impl Drop for ConnRef {
    fn drop(&mut self) {
        drop(self.conn.take());
        let mut st = self.shared.lock();
        if let Some(c) = st.conns.get_mut(&self.id) {
            c.pumps -= 1;
            if c.pumps == 0 {
                st.conns.remove(&self.id);
            }
        }
        self.shared.cv.notify_all();
    }
}

/// A fault-injecting TCP proxy on 127.0.0.1; see the module docs.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept_thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy: nonblocking listener");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                listening: true,
                ..State::default()
            }),
            cv: Condvar::new(),
        });
        let sh = Arc::clone(&shared);
        let accept_thread = thread::spawn(move || accept_loop(&sh, listener, addr, upstream));
        FaultProxy {
            shared,
            addr,
            accept_thread: Some(accept_thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Delivers every chunk `latency` after it was read (order kept; applies to queued ones).
    pub fn set_latency(&self, dir: Dir, latency: Duration) {
        self.shared
            .update(|s| s.dirs[dir as usize].latency = latency);
    }

    /// Stops delivering in `dir`; what is read meanwhile queues up.
    pub fn hold(&self, dir: Dir) {
        self.shared.update(|s| s.dirs[dir as usize].held = true);
    }

    /// Resumes delivering in `dir`, the queue first, in order (within one [`TICK`]).
    pub fn release(&self, dir: Dir) {
        self.shared.update(|s| s.dirs[dir as usize].held = false);
    }

    /// While on, bytes read in `dir` are dropped (ones queued before are still delivered).
    pub fn discard(&self, dir: Dir, on: bool) {
        self.shared.update(|s| s.dirs[dir as usize].discard = on);
    }

    /// Sets what happens to new connections. Returns once the listening socket is closed
    /// (`Refuse`) or bound again on the same port (otherwise); panics if that takes [`WAIT`].
    pub fn set_new(&self, mode: NewConns) {
        self.shared.update(|s| s.new = mode);
        let want = mode != NewConns::Refuse;
        let (_st, ok) = self.shared.wait_for(WAIT, |s| s.listening == want);
        assert!(
            ok,
            "proxy {}: listener not closed/re-bound for {mode:?}",
            self.addr
        );
    }

    /// Resets (RST to both sides) every open connection; returns once they are all closed.
    pub fn drop_all(&self) {
        let mut ids = Vec::new();
        self.shared.update(|s| {
            for (id, c) in s.conns.iter_mut() {
                c.killed = true;
                ids.push(*id);
            }
        });
        // Connections that came in meanwhile are not waited for.
        let (_st, ok) = self
            .shared
            .wait_for(WAIT, |s| ids.iter().all(|id| !s.conns.contains_key(id)));
        assert!(
            ok,
            "proxy {}: connections still open after drop_all",
            self.addr
        );
    }

    /// Makes every open connection silently dead: nothing is delivered either way, no FIN, no
    /// RST (bytes are still read and queue up). New connections are not affected.
    pub fn freeze_all(&self) {
        self.shared
            .update(|s| s.conns.values_mut().for_each(|c| c.frozen = true));
    }

    /// Undoes `freeze_all`: the connections deliver what queued up and carry on.
    pub fn thaw_all(&self) {
        self.shared
            .update(|s| s.conns.values_mut().for_each(|c| c.frozen = false));
    }

    /// Connections open now (forwarded or blackholed).
    pub fn connections(&self) -> usize {
        self.shared.lock().conns.len()
    }

    /// Forward the first `n` connections (counted since start), blackhole every later one:
    /// a client's second connection (a subscription, a reconnect) hangs while its first one
    /// works, however quickly it follows.
    pub fn blackhole_after(&self, n: usize) {
        self.shared.update(|s| s.forward_only = Some(n));
    }

    /// Connections accepted since start.
    pub fn accepted(&self) -> usize {
        self.shared.lock().accepted
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.update(|s| s.shutdown = true);
        if let Some(h) = self.accept_thread.take() {
            let _ = h.join(); // it looks at `shutdown` at least every TICK
        }
        // Pumps see `shutdown` within a TICK, reset their connection and end.
        let (mut st, ok) = self.shared.wait_for(WAIT, |s| s.conns.is_empty());
        let pumps = std::mem::take(&mut st.pumps);
        drop(st);
        if !ok {
            // No panic in drop (it may run while unwinding): leave the stragglers be.
            eprintln!(
                "proxy {}: connections still open {WAIT:?} after drop",
                self.addr
            );
            return;
        }
        for h in pumps {
            let _ = h.join();
        }
    }
}

/// Makes the coming close send RST instead of FIN (SO_LINGER with a zero timeout).
fn reset_on_close(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
    // SAFETY: a valid socket fd, and a pointer to a `linger` of the given size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            len,
        );
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Accepts until shutdown. Closes the listener while new connections are refused, binds the
/// same port again when they are not.
fn accept_loop(
    shared: &Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    upstream: SocketAddr,
) {
    let mut listener = Some(listener);
    loop {
        let mut st = shared.lock();
        if st.shutdown {
            return;
        }
        if st.new == NewConns::Refuse {
            // A closed port answers a SYN with RST: the client's connect is refused.
            listener = None;
            st.listening = false;
            shared.cv.notify_all();
            drop(shared.cv.wait(st));
            continue;
        }
        let Some(l) = &listener else {
            // std sets SO_REUSEADDR, so connections of the old listener do not block the port.
            if let Ok(l) = TcpListener::bind(addr) {
                l.set_nonblocking(true)
                    .expect("proxy: nonblocking listener");
                listener = Some(l);
                st.listening = true;
                shared.cv.notify_all();
            } else {
                drop(shared.cv.wait_timeout(st, TICK)); // taken meanwhile? try again
            }
            continue;
        };
        drop(st);
        let mut pfd = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut pfd, 1, TICK.as_millis() as libc::c_int) } <= 0 {
            continue;
        }
        match l.accept() {
            Ok((client, _)) => new_conn(shared, client, upstream),
            Err(e) if is_timeout(&e) => {}
            Err(_) => drop(shared.cv.wait_timeout(shared.lock(), TICK)), // out of fds? no spin
        }
    }
}

/// Hands an accepted connection to its pump(s), per the mode right now.
fn new_conn(shared: &Arc<Shared>, client: TcpStream, upstream: SocketAddr) {
    let _ = client.set_nonblocking(false);
    let mode = {
        let mut st = shared.lock();
        st.accepted += 1;
        match st.forward_only {
            Some(n) if st.accepted > n && st.new == NewConns::Forward => NewConns::Blackhole,
            _ => st.new,
        }
    };
    let conn = match mode {
        // Accepted in the moment before the listener closed: reset it.
        NewConns::Refuse => return reset_on_close(&client),
        NewConns::Blackhole => Conn {
            client,
            upstream: None,
        },
        NewConns::Forward => match TcpStream::connect_timeout(&upstream, UPSTREAM_CONNECT) {
            Ok(up) => Conn {
                client,
                upstream: Some(up),
            },
            // Upstream down: the client gets a reset, as from a dead server.
            Err(_) => return reset_on_close(&client),
        },
    };
    let conn = Arc::new(conn);
    let dirs: &[Dir] = if conn.upstream.is_some() {
        &[Dir::Up, Dir::Down]
    } else {
        &[Dir::Up]
    };
    let mut st = shared.lock();
    let id = st.next_id;
    st.next_id += 1;
    st.conns.insert(
        id,
        ConnFlags {
            pumps: dirs.len() as u8,
            ..ConnFlags::default()
        },
    );
    st.pumps.retain(|h| !h.is_finished());
    for &dir in dirs {
        let me = ConnRef {
            shared: Arc::clone(shared),
            id,
            conn: Some(Arc::clone(&conn)),
        };
        st.pumps.push(thread::spawn(move || pump(me, dir)));
    }
}

/// Copies one direction of a connection, applying its faults, until EOF (passed on as a
/// half-close), an error or a kill (RST to both sides), or shutdown. Without an upstream
/// (blackhole) it reads and drops.
fn pump(me: ConnRef, dir: Dir) {
    let conn = Arc::clone(me.conn.as_ref().unwrap());
    let (src, dst) = match dir {
        Dir::Up => (&conn.client, conn.upstream.as_ref()),
        Dir::Down => (conn.upstream.as_ref().unwrap(), Some(&conn.client)),
    };
    if let Some(d) = dst {
        let _ = d.set_write_timeout(Some(TICK));
    }
    let kill = |st: &mut State| {
        reset_on_close(&conn.client);
        if let Some(up) = &conn.upstream {
            reset_on_close(up);
        }
        if let Some(c) = st.conns.get_mut(&me.id) {
            c.killed = true; // so the other pump ends too
        }
        me.shared.cv.notify_all();
    };
    // Chunks read and not delivered yet, with when they were read; `sent` bytes of the front
    // one have been written already.
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut sent = 0;
    let mut eof = false;
    let mut buf = vec![0u8; 64 * 1024];
    let mut wait = TICK;
    loop {
        // 1. Wait for bytes (after EOF: for a state change), at most until the next chunk is due.
        let mut chunk = None;
        if eof {
            drop(me.shared.cv.wait_timeout(me.shared.lock(), wait));
        } else {
            let _ = src.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
            match (&*src).read(&mut buf) {
                Ok(0) => eof = true,
                Ok(n) => chunk = Some((Instant::now(), buf[..n].to_vec())),
                Err(e) if is_timeout(&e) => {}
                Err(_) => return kill(&mut me.shared.lock()),
            }
        }
        // 2. The faults as they are now, after the read.
        let mut st = me.shared.lock();
        let faults = st.dirs[dir as usize];
        let flags = &st.conns[&me.id];
        let frozen = flags.frozen;
        if flags.killed || st.shutdown {
            return kill(&mut st);
        }
        drop(st);
        if let Some(c) = chunk.filter(|_| dst.is_some() && !faults.discard) {
            queue.push_back(c);
        }
        // 3. Deliver what is due, unless held or frozen.
        wait = TICK;
        let Some(dst) = dst else {
            if eof {
                return;
            }
            continue;
        };
        if faults.held || frozen {
            continue;
        }
        while let Some((read_at, bytes)) = queue.front() {
            let due = *read_at + faults.latency;
            let now = Instant::now();
            if due > now {
                wait = due - now;
                break;
            }
            match (&*dst).write(&bytes[sent..]) {
                Ok(n) => sent += n,
                Err(e) if is_timeout(&e) => break, // receiver not reading: look again later
                Err(_) => return kill(&mut me.shared.lock()),
            }
            if sent == bytes.len() {
                queue.pop_front();
                sent = 0;
            }
        }
        if eof && queue.is_empty() {
            let _ = dst.shutdown(Shutdown::Write);
            return;
        }
    }
}
