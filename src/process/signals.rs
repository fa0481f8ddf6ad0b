//! Which signals the wrapper catches, and how they reach the supervisor.
//!
//! Policy: INT, TERM, HUP, QUIT, USR1 and USR2 are caught and forwarded to the command's
//! process group (the supervisor decides what else they mean). A signal that was already
//! ignored when the wrapper started (a shell starts background jobs with INT and QUIT ignored)
//! is left ignored: the command inherits the ignored disposition through exec, exactly as if
//! it had been run without the wrapper.

use std::future::poll_fn;
use std::task::Poll;

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, killpg, sigaction};
use nix::unistd::getpgrp;
use tokio::signal::unix::{SignalKind, signal};

/// The signals that are forwarded to the command. SIGTSTP sent to the wrapper suspends the
/// command, and the wrapper follows it (job.rs); while waiting for the lock it suspends the
/// wrapper itself.
pub const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTSTP,
];

/// The caught signals, as one stream.
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Install handlers for every forwarded signal that was not ignored at start.
    /// Must run inside the tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        let mut streams = Vec::with_capacity(FORWARDED.len());
        for sig in FORWARDED {
            if !ignored_at_start(sig) {
                streams.push((sig, signal(SignalKind::from_raw(sig as i32))?));
            }
        }
        Ok(Signals { streams })
    }

    /// The next caught signal. Pending forever when no signal is caught.
    pub async fn recv(&mut self) -> Signal {
        poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// The next INT or TERM; other caught signals are dropped meanwhile.
    pub async fn recv_quit(&mut self) -> Signal {
        loop {
            let sig = self.recv().await;
            if matches!(sig, Signal::SIGINT | Signal::SIGTERM) {
                return sig;
            }
        }
    }

    /// The next signal that ends a wait for the lock. SIGTSTP (Ctrl-Z while the wrapper
    /// still has the terminal) suspends the wrapper instead, as it would the bare command;
    /// nothing runs under a lease yet.
    pub async fn recv_ending(&mut self) -> Signal {
        loop {
            let sig = self.recv().await;
            if sig != Signal::SIGTSTP {
                return sig;
            }
            stop_self(sig);
        }
    }

    /// A signal that has already arrived and ends the wait, without waiting.
    pub async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            sig = self.recv_ending() => Some(sig),
            () = std::future::ready(()) => None,
        }
    }
}

/// Stop this process with `sig` as the kernel would by default, until it is continued.
pub fn stop_self(sig: Signal) {
    with_default_action(sig, || {
        let _ = nix::sys::signal::raise(sig);
    });
}

/// Send `sig` to the wrapper's own process group, the wrapper acting on it by default.
pub fn stop_group(sig: Signal) {
    with_default_action(sig, || {
        let _ = killpg(getpgrp(), sig);
    });
}

/// Run `f` with the default action for `sig` installed, then put the previous one back.
fn with_default_action(sig: Signal, f: impl FnOnce()) {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_DFL runs no code of ours; the previous action (a tokio handler,
    // or SIG_IGN for SIGTTOU) is put back right after.
    let old = unsafe { sigaction(sig, &default) };
    f();
    if let Ok(old) = old {
        // SAFETY: restores the action that was installed before.
        let _ = unsafe { sigaction(sig, &old) };
    }
}

fn ignored_at_start(sig: Signal) -> bool {
    // On libc: nix's `sigaction` always installs a new action; it has no read-only form.
    // SAFETY: sigaction with a null new action only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Whether SIGPIPE was ignored when the wrapper was executed. Rust's runtime ignores SIGPIPE
/// before `main`, so by then the inherited disposition is gone; this is read earlier, by a
/// function the loader runs before the runtime starts (`.init_array`).
pub fn sigpipe_ignored_at_start() -> bool {
    SIGPIPE_IGNORED_AT_START.load(std::sync::atomic::Ordering::Relaxed)
}

static SIGPIPE_IGNORED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

extern "C" fn record_sigpipe_at_start() {
    SIGPIPE_IGNORED_AT_START.store(
        ignored_at_start(Signal::SIGPIPE),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Run by the dynamic loader (or the static start-up code) before `main`, as C constructors
/// are; it only reads a signal disposition into an atomic.
#[used]
#[unsafe(link_section = ".init_array")]
static RECORD_SIGPIPE_AT_START: extern "C" fn() = record_sigpipe_at_start;
