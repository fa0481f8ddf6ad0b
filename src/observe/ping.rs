//! `--ping URL`: the healthchecks.io pinging protocol, which self-hosted monitors
//! (Healthchecks, and the tools that copy its API) speak too. Every ping is a POST; all pings
//! of one run carry the same `rid` (run id), so the monitor pairs a start with its end even
//! when runs overlap (`--limit`):
//!
//! | when | ping |
//! | --- | --- |
//! | the command is about to start | `URL/start` |
//! | it exited 0 under its lease | `URL` |
//! | it failed, was killed, timed out, lost its lock, could not start | `URL/<exit code>` (1-255) |
//! | busy, skipped (`--once-per`), Redis unreachable, interrupted before the start | `URL/log` |
//!
//! `/log` changes nothing on the monitor (it only appears in the check's log): the N-1 hosts
//! of a cron job that find the lock busy must not end the run the holder reported started,
//! and must not count as a success that never happened (as runitor, which always reports
//! its command's exit, would have them do). Their body says why nothing ran.
//!
//! **Bounded.** Pings are sent by a thread of their own, one after the other (the start
//! before the end): the supervisor only hands them over. The start is never waited for. After
//! the run (the lock released), the wrapper waits at most [`EXIT_BOUND`] for the pings still
//! on their way; each has [`REQUEST_TIMEOUT`] for connecting, sending and its reply. A monitor
//! that is down, slow or refusing is a warning, never another exit code.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::http;
use super::url::PingUrl;
use super::{Outcome, Run};

/// Each ping's bound: connect (the name resolved), send, and the reply's status line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest the exit waits for pings still on their way once the run is over.
pub const EXIT_BOUND: Duration = Duration::from_secs(5);

/// The longest body sent: healthchecks.io keeps the first 100 kB of a ping's body.
pub const MOST_BODY: usize = 10_000;

/// The suffix of a run's final ping: `""` (success), `/<exit code>`, or `/log`.
pub fn final_suffix(run: &Run) -> String {
    match run.outcome {
        Outcome::Succeeded => String::new(),
        // A failure that exited 0 still reports one.
        o if o.ran() => format!("/{}", run.exit_code.max(1)),
        _ => "/log".to_owned(),
    }
}

/// One ping as sent, and how it went.
struct Sent {
    what: String,
    result: Result<u16, String>,
}

/// What the run and its ping thread share: the pings to send (in order), and how those
/// sent went. A mutex and a condition variable rather than two `mpsc` channels: each channel
/// type costs ~9 KB of code, and the wrapper's log sink already links the locks.
#[derive(Default)]
struct Queue {
    /// (request target, body), first to send first.
    pings: Vec<(String, Vec<u8>)>,
    sent: Vec<Sent>,
    /// No more pings come (the thread ends once it sent those queued).
    closed: bool,
    /// Nobody waits for the results any more: the thread ends after the ping it sends.
    abandoned: bool,
}

type Shared = Arc<(Mutex<Queue>, Condvar)>;

fn lock(shared: &Shared) -> MutexGuard<'_, Queue> {
    shared.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The ping thread: send what is queued, one after the other, until closed or abandoned.
fn send_queued(url: &PingUrl, shared: &Shared) {
    loop {
        let (target, body) = {
            let mut queue = lock(shared);
            loop {
                if queue.abandoned {
                    return;
                }
                if !queue.pings.is_empty() {
                    break queue.pings.remove(0);
                }
                if queue.closed {
                    return;
                }
                queue = shared.1.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let result = http::post(url, &target, &body, deadline);
        let what = target.split('?').next().unwrap_or_default().to_owned();
        let mut queue = lock(shared);
        if queue.abandoned {
            return;
        }
        queue.sent.push(Sent { what, result });
        shared.1.notify_all();
    }
}

/// The pings of one run, sent by a thread of their own (started with the first ping).
pub struct Pinger {
    url: PingUrl,
    rid: String,
    shared: Option<Shared>,
    sent: usize,
}

impl Pinger {
    pub fn new(url: PingUrl) -> Pinger {
        Pinger {
            url,
            rid: uuid::Uuid::new_v4().to_string(),
            shared: None,
            sent: 0,
        }
    }

    /// Hand a ping to the thread; never blocks.
    pub fn send(&mut self, suffix: &str, body: Vec<u8>) {
        if self.shared.is_none() {
            let shared = Shared::default();
            let url = self.url.clone();
            let theirs = Arc::clone(&shared);
            let started = std::thread::Builder::new()
                .name("ping".into())
                .spawn(move || send_queued(&url, &theirs));
            if started.is_err() {
                return;
            }
            self.shared = Some(shared);
        }
        let target = self.url.target(suffix, &self.rid);
        if let Some(shared) = &self.shared {
            lock(shared).pings.push((target, body));
            shared.1.notify_all();
            self.sent += 1;
        }
    }

    /// Wait at most `within` for the pings on their way; the warnings to say.
    pub fn finish(mut self, within: Duration) -> Vec<String> {
        let Some(shared) = self.shared.take() else {
            return Vec::new();
        };
        let url = &self.url;
        let sent = self.sent;
        let until = Instant::now() + within;
        let mut warnings = Vec::new();
        let mut answered = 0;
        let mut queue = lock(&shared);
        queue.closed = true;
        shared.1.notify_all();
        loop {
            for s in std::mem::take(&mut queue.sent) {
                answered += 1;
                let what = match s.what.strip_prefix(&url.path) {
                    Some("") => "the success ping".to_owned(),
                    Some(suffix) => format!("the {suffix} ping"),
                    None => "a ping".to_owned(),
                };
                match s.result {
                    Ok(status) if (200..300).contains(&status) => {}
                    Ok(status) => warnings.push(format!(
                        "the monitor at {} answered {what} with HTTP {status}",
                        url.shown()
                    )),
                    Err(e) => warnings.push(format!(
                        "could not send {what} to the monitor at {}: {e}",
                        url.shown()
                    )),
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if answered >= sent || left.is_zero() {
                break;
            }
            queue = shared
                .1
                .wait_timeout(queue, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        queue.abandoned = true;
        shared.1.notify_all();
        drop(queue);
        if answered < sent {
            warnings.push(format!(
                "the monitor at {} did not answer {} ping{} within {}; not waiting longer",
                url.shown(),
                sent - answered,
                if sent - answered == 1 { "" } else { "s" },
                humantime::format_duration(within)
            ));
        }
        warnings
    }
}

impl Drop for Pinger {
    /// Dropped without [`Pinger::finish`]: the thread sends no more pings.
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let mut queue = lock(&shared);
            queue.closed = true;
            queue.abandoned = true;
            shared.1.notify_all();
        }
    }
}
