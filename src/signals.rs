//! Which signals the wrapper catches, and how they reach the supervisor.
//!
//! Policy: INT, TERM, HUP, QUIT, USR1 and USR2 are caught and forwarded to the command's
//! process group (the supervisor decides what else they mean). A signal that was already
//! ignored when the wrapper started (a shell starts background jobs with INT and QUIT ignored)
//! is left ignored: the command inherits the ignored disposition through exec, exactly as if
//! it had been run without the wrapper.

use std::future::poll_fn;
use std::task::Poll;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// The signals that are forwarded to the command.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
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

    /// A signal that has already arrived, without waiting.
    pub async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            sig = self.recv() => Some(sig),
            () = std::future::ready(()) => None,
        }
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
