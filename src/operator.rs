//! The operator's commands on a lock: `break` (take it away from the holder named), `pause`
//! and `resume`. Each changes the lock only through the contract's atomic calls; this file
//! chooses the holder, asks at a terminal, and tells what happened.

use std::io::{self, BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use crate::cli::{BreakArgs, EXIT_NOT_THAT_HOLDER, EXIT_NOTHING, PauseArgs};
use crate::config::one_line_text;
use crate::exit;
use crate::lock::target::Target;
use crate::lock::{self, BreakOutcome, Lock, Status};
use crate::report::{Reporter, one_line};

/// One holder that `break` may take the lock from: the mutex's, one `--limit` permit, or one
/// `--shared` holder.
struct Candidate {
    token: String,
    host: Option<String>,
    pid: Option<u32>,
    command: Option<String>,
}

impl Candidate {
    fn shown(&self) -> String {
        let mut out = match (&self.host, self.pid) {
            (Some(host), Some(pid)) => format!("{host} pid {pid}"),
            (Some(host), None) => host.clone(),
            _ => "a holder with no holder info".to_owned(),
        };
        if let Some(cmd) = &self.command {
            out.push_str(&format!(" ({cmd})"));
        }
        out.push_str(&format!(", token {}", self.token));
        one_line(&out).into_owned()
    }
}

/// Every holder in `s`: the mutex's (a foreign value has none that can be named, but its
/// token), each permit, or each shared holder (chosen among as permits are).
fn candidates(s: &Status) -> Vec<Candidate> {
    let members = if s.limit.is_some() {
        Some(&s.permits)
    } else if !s.shared.is_empty() {
        Some(&s.shared)
    } else {
        None
    };
    if let Some(members) = members {
        return members
            .iter()
            .map(|p| Candidate {
                token: p.token.clone(),
                host: p.host.clone(),
                pid: p.pid,
                command: p.command.clone(),
            })
            .collect();
    }
    s.token
        .iter()
        .map(|token| Candidate {
            token: token.clone(),
            host: s.host.clone(),
            pid: s.pid,
            command: s.command.clone(),
        })
        .collect()
}

async fn open(target: &Target, report: &Reporter) -> Option<lock::topology::Backend> {
    match lock::open(target, None, target.timeout).await {
        Ok(lock) => Some(lock),
        Err(e) => {
            report.error("unavailable", &e);
            None
        }
    }
}

/// `redlock-run break`: see `cli::Sub::Break`. Returns the exit code.
pub async fn break_lock(target: &Target, args: &BreakArgs, report: &Reporter) -> u8 {
    let key = &target.key;
    let Some(lock) = open(target, report).await else {
        return exit::UNAVAILABLE;
    };
    // Read first: who holds it. The break itself names the token read here, so a holder that
    // took the lock since is left alone (exit 4).
    let status = match lock.status(None).await {
        Ok(status) => status,
        Err(e) => {
            report.error("unavailable", &e);
            return exit::UNAVAILABLE;
        }
    };
    let all = candidates(&status);
    // How the holders hold it, as `status` says it: `held shared by` for --shared holders.
    let held = if status.limit.is_none() && !status.shared.is_empty() {
        "held shared"
    } else {
        "held"
    };
    if all.is_empty() && status.held {
        report.error(
            "not-holder",
            format_args!(
                "lock {key} is held by a value that break cannot name (not a redlock-run lock); \
                 nothing changed"
            ),
        );
        return EXIT_NOT_THAT_HOLDER;
    }
    if all.is_empty() {
        report.error("free", format_args!("lock {key} is free: nothing to break"));
        return EXIT_NOTHING;
    }
    let named: Vec<&Candidate> = all
        .iter()
        .filter(|c| match (&args.holder, &args.host) {
            (Some(token), _) => &c.token == token,
            (None, Some(host)) => c.host.as_deref() == Some(host.as_str()),
            (None, None) => true,
        })
        .collect();
    let held_by = || {
        all.iter()
            .map(Candidate::shown)
            .collect::<Vec<_>>()
            .join("; ")
    };
    if named.is_empty() {
        let whom = match (&args.holder, &args.host) {
            (Some(token), _) => format!("the holder with token {token}"),
            (None, Some(host)) => format!("a holder on host {host}"),
            // Every holder matches when none is named: not reached.
            (None, None) => "the holder".to_owned(),
        };
        report.error(
            "not-holder",
            one_line(&format!(
                "lock {key} is not held by {whom}; nothing changed ({held} by {})",
                held_by()
            )),
        );
        return EXIT_NOT_THAT_HOLDER;
    }
    let chosen = if named.len() == 1 {
        named[0]
    } else {
        report.error(
            "usage",
            one_line(&format!(
                "error: {} holders of {key} match; name one with --holder TOKEN: {}",
                named.len(),
                named
                    .iter()
                    .map(|c| c.shown())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        );
        return exit::USAGE;
    };
    let by_name = args.holder.is_some() || args.host.is_some();
    if !by_name && !args.yes {
        if !io::stdin().is_terminal() {
            report.error(
                "usage",
                format_args!(
                    "error: break without --holder or --host asks for confirmation, and stdin \
                     is no terminal: name the holder, or add --yes"
                ),
            );
            return exit::USAGE;
        }
        if !confirm(&format!(
            "break lock {key} {held} by {}? [y/N] ",
            chosen.shown()
        )) {
            report.error("usage", "not confirmed: nothing changed");
            return exit::USAGE;
        }
    }
    match lock
        .break_holder(&chosen.token, &crate::process::hostname(), target.timeout)
        .await
    {
        Ok(BreakOutcome::Broken { fence }) => {
            report.done(
                "broken",
                one_line(&format!(
                    "broke lock {key} {held} by {}; fence raised to {fence} (the next \
                     holder's is above it)",
                    chosen.shown()
                )),
            );
            0
        }
        Ok(BreakOutcome::HeldByOther) => {
            report.error(
                "not-holder",
                format_args!(
                    "lock {key} changed hands before the break: nothing changed (run break \
                     again to see its holder now)"
                ),
            );
            EXIT_NOT_THAT_HOLDER
        }
        Ok(BreakOutcome::Free) => {
            report.error(
                "free",
                format_args!("lock {key} was freed before the break: nothing to break"),
            );
            EXIT_NOTHING
        }
        Err(e) => {
            report.error("unavailable", &e);
            exit::UNAVAILABLE
        }
    }
}

/// Ask `question` on the terminal; yes only for an answer starting with y.
fn confirm(question: &str) -> bool {
    let mut err = io::stderr();
    if write!(err, "{question}").and_then(|_| err.flush()).is_err() {
        return false;
    }
    let mut answer = String::new();
    if io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim_start().chars().next(), Some('y' | 'Y'))
}

/// `redlock-run pause`: see `cli::Sub::Pause`.
pub async fn pause(target: &Target, args: &PauseArgs, report: &Reporter) -> u8 {
    let key = &target.key;
    let reason = match one_line_text("--reason", &args.reason) {
        Ok(r) if !r.is_empty() => r,
        Ok(_) => {
            report.error(
                "usage",
                "error: --reason is empty: say why the lock is paused",
            );
            return exit::USAGE;
        }
        Err(e) => {
            report.error("usage", format_args!("error: {e}"));
            return exit::USAGE;
        }
    };
    if args.length.is_zero() {
        report.error("usage", "error: --for 0 would end the pause at once");
        return exit::USAGE;
    }
    if args.length > Duration::from_secs(10 * 365 * 24 * 3600) {
        report.error("usage", "error: --for is longer than 10 years");
        return exit::USAGE;
    }
    let Some(lock) = open(target, report).await else {
        return exit::UNAVAILABLE;
    };
    match lock
        .pause(
            reason,
            &crate::process::hostname(),
            args.length,
            target.timeout,
        )
        .await
    {
        Ok(until_ms) => {
            report.done(
                "paused",
                format_args!(
                    "paused {key} until {} (new runs are busy; resume ends it earlier)",
                    crate::timestamp::seconds(until_ms)
                ),
            );
            0
        }
        Err(e) => {
            report.error("unavailable", &e);
            exit::UNAVAILABLE
        }
    }
}

/// `redlock-run resume`: see `cli::Sub::Resume`.
pub async fn resume(target: &Target, report: &Reporter) -> u8 {
    let key = &target.key;
    let Some(lock) = open(target, report).await else {
        return exit::UNAVAILABLE;
    };
    match lock.resume(target.timeout).await {
        Ok(true) => {
            report.done("resumed", format_args!("resumed {key}"));
            0
        }
        Ok(false) => {
            report.error(
                "not-paused",
                format_args!("lock {key} is not paused: nothing to resume"),
            );
            EXIT_NOTHING
        }
        Err(e) => {
            report.error("unavailable", &e);
            exit::UNAVAILABLE
        }
    }
}
