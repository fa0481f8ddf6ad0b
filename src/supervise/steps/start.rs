//! The `acquire` command: start the keeper, wait for its handshake, hand the hold on.
//!
//! The keeper is this same program started again (`/proc/self/exe`), told by its environment
//! that it is the keeper, where its end of the handshake pipe is, and `acquire`'s arguments.
//! A fresh process rather than a fork: this one already has threads (the message writer, the
//! runtime), and a forked child of a threaded process may only call async-signal-safe
//! functions. Nothing secret appears in its argument list (anyone on the host can read
//! `/proc/PID/cmdline`, for as long as the hold lasts): its command line only names the
//! lock, `acquire`'s arguments (a `--redis` URL may hold a password) come in its environment
//! (`/proc/PID/environ` is readable by its own user only), and the token is made by the
//! keeper and sent back over the pipe.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::AcquireConfig;
use crate::exit::{self, ChildEnd};
use crate::lock::Token;
use crate::process::Signals;
use crate::report::Reporter;

use super::output::HoldOut;
use super::{KEEPER_ARGS, KEEPER_FD, KEEPER_ID, encode_args};

/// What the keeper said before it closed the pipe.
enum Told {
    /// It holds the lock.
    Held { fence: u64, token: String },
    /// It ended without a hold (busy, unreachable, interrupted: it said why on stderr).
    Nothing,
}

/// Run `acquire`: returns the exit code.
pub async fn start(cfg: &AcquireConfig, report: &Reporter) -> u8 {
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            report.error("internal", format!("cannot install signal handlers: {e}"));
            return exit::SOFTWARE;
        }
    };
    let (read_end, write_end) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(pair) => pair,
        Err(e) => {
            report.error("internal", format!("cannot start the keeper: pipe: {e}"));
            return exit::SOFTWARE;
        }
    };
    let mut child = match spawn_keeper(&write_end, &cfg.run.target.key) {
        Ok(child) => child,
        Err(e) => {
            report.error("internal", format!("cannot start the keeper: {e}"));
            return exit::SOFTWARE;
        }
    };
    drop(write_end);
    // Read on a thread of its own: the pipe ends when the keeper closes it (after it detached)
    // or exits.
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::fs::File::from(read_end).read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let keeper = Pid::from_raw(child.id() as i32);
    let text = loop {
        tokio::select! {
            text = &mut rx => break text.unwrap_or_default(),
            sig = signals.recv_ending() => {
                // The keeper has a session of its own, out of reach of the terminal: a wait
                // ended here ends its wait too (it leaves the queue, or releases a hold it
                // just got).
                let _ = kill(keeper, Signal::try_from(sig as i32).unwrap_or(Signal::SIGTERM));
            }
        }
    };
    match parse(&text) {
        Told::Held { fence, token } => {
            let out = HoldOut {
                token,
                fence,
                key: cfg.run.target.key.clone(),
            };
            match hand_on(cfg, &out) {
                Ok(()) => 0,
                Err(e) => {
                    report.error(
                        "internal",
                        format_args!("{e}; releasing the lock (the keeper was told to stop)"),
                    );
                    let _ = kill(keeper, Signal::SIGTERM);
                    exit::SOFTWARE
                }
            }
        }
        Told::Nothing => match child.wait() {
            Ok(status) => ChildEnd::from(status).code(),
            Err(e) => {
                report.error("internal", format!("the keeper's status is unknown: {e}"));
                exit::SOFTWARE
            }
        },
    }
}

/// Start the keeper: this program again, in a session of its own (no terminal, no signals
/// from one, not in the step's process group), stdin and stdout on /dev/null, stderr the
/// step's until it holds the lock, and the pipe's write end inherited. Its command line is
/// `redlock-run acquire (keeper) KEY`, for `ps`; its arguments are `acquire`'s, handed over
/// in its environment.
fn spawn_keeper(write_end: &OwnedFd, key: &str) -> std::io::Result<std::process::Child> {
    let fd = write_end.as_raw_fd();
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "redlock-run".into());
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0(arg0)
        .args(["acquire", "(keeper)", key])
        .env(KEEPER_ARGS, encode_args(args))
        .env(KEEPER_FD, fd.to_string())
        .env(KEEPER_ID, Token::new().as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: only async-signal-safe calls (setsid, fcntl, close_range) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            fcntl(
                std::os::fd::BorrowedFd::borrow_raw(fd),
                FcntlArg::F_SETFD(FdFlag::empty()),
            )?;
            // None of the step's descriptors (a pipe a CI runner or `$(...)` reads to its
            // end would otherwise wait for the keeper, up to --max-hold); marked, not
            // closed: the exec-error pipe must live until the exec.
            crate::process::cloexec_from_3_but(fd);
            Ok(())
        });
    }
    cmd.spawn()
}

fn parse(text: &str) -> Told {
    let mut words = text.lines().next().unwrap_or_default().split(' ');
    match (words.next(), words.next(), words.next()) {
        (Some("held"), Some(fence), Some(token)) => match fence.parse() {
            Ok(fence) => Told::Held {
                fence,
                token: token.to_owned(),
            },
            Err(_) => Told::Nothing,
        },
        _ => Told::Nothing,
    }
}

/// stdout, then `--github` and `--dotenv`.
fn hand_on(cfg: &AcquireConfig, out: &HoldOut) -> Result<(), String> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.shell().as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write the hold to stdout: {e}"))?;
    if let Some(gh) = &cfg.github {
        out.github(&gh.output, &gh.env).map_err(|e| {
            format!(
                "cannot append the hold to $GITHUB_OUTPUT or $GITHUB_ENV ({}, {}): {e}",
                gh.output.display(),
                gh.env.display()
            )
        })?;
    }
    if let Some(path) = &cfg.dotenv {
        out.dotenv(path)
            .map_err(|e| format!("cannot write --dotenv {}: {e}", path.display()))?;
    }
    Ok(())
}
