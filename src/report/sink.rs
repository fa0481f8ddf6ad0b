//! stderr without ever blocking the supervisor.
//!
//! stderr may be a pipe nobody drains (a stalled log shipper, `2>&1 | slow-consumer`) or a
//! terminal stopped with Ctrl-S. A write(2) there blocks, and a supervisor blocked in write
//! renews nothing and stops nothing: the lease runs out while the command runs on. So the
//! supervisor only ever hands a finished line to a bounded queue; a thread of its own does
//! the writing. When the queue is full the line is dropped and counted, and the count is said
//! once the queue takes lines again.
//!
//! The thread starts with the first line, so a run that prints nothing (the usual cron run)
//! never starts it.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines waiting to be written at most. Far more than a run prints in a burst.
const QUEUE: usize = 64;

struct Sink {
    tx: SyncSender<Vec<u8>>,
    /// Lines queued and not yet written, with a signal for `drain`.
    pending: Arc<(Mutex<usize>, Condvar)>,
}

static SINK: OnceLock<Option<Sink>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

fn sink() -> Option<&'static Sink> {
    SINK.get_or_init(|| {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let pending = Arc::new((Mutex::new(0usize), Condvar::new()));
        let done = Arc::clone(&pending);
        let started = std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                for line in rx {
                    // One write per line, so lines of concurrent wrappers on one stderr do not
                    // interleave. Errors (a closed stderr) cannot be reported anywhere.
                    let _ = std::io::stderr().lock().write_all(&line);
                    let (count, written) = &*done;
                    let mut count = count.lock().unwrap_or_else(|e| e.into_inner());
                    *count = count.saturating_sub(1);
                    written.notify_all();
                }
            });
        started.ok().map(|_| Sink { tx, pending })
    })
    .as_ref()
}

/// Hand `line` to the writer. Never blocks: a line that does not fit is dropped and counted.
pub fn send(line: Vec<u8>) {
    let Some(sink) = sink() else {
        // No thread could be started: dropping is the only non-blocking choice left.
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let (count, _) = &*sink.pending;
    *count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    match sink.tx.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How many lines were dropped since the last call.
pub fn take_dropped() -> u64 {
    DROPPED.swap(0, Ordering::Relaxed)
}

/// Whether the queue can take a line now (so a notice about dropped lines is worth sending).
pub fn has_room() -> bool {
    match SINK.get() {
        Some(Some(sink)) => {
            let (count, _) = &*sink.pending;
            *count.lock().unwrap_or_else(|e| e.into_inner()) < QUEUE
        }
        _ => true,
    }
}

/// Before the process exits: wait until every queued line is written, or `within` passed
/// (stderr still blocked: those lines are lost, the exit code still tells).
pub fn drain(within: Duration) {
    let Some(Some(sink)) = SINK.get() else {
        return;
    };
    let until = Instant::now() + within;
    let (count, written) = &*sink.pending;
    let mut count = count.lock().unwrap_or_else(|e| e.into_inner());
    while *count > 0 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        count = match written.wait_timeout(count, left) {
            Ok((guard, _)) => guard,
            Err(e) => e.into_inner().0,
        };
    }
}
