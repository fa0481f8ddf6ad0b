//! The `release` command: release a hold by its token, and stop its keeper.
//!
//! The order keeps every path honest: the hold record goes from `held` to `releasing` first
//! (so a keeper that now finds the lock gone ends quietly instead of recording a loss), then
//! the lock is released by compare-and-delete with the hold's token (a release with another
//! token never touches it), writing the run record and ending the hold record `released` in
//! that same script. A `release` that finds the lock gone then ends a record still
//! `releasing` as lost; one that reads it `released` was beaten by another `release` of the
//! hold (two at once: Redis decided which one released it) and has nothing to release. A
//! `release` that stops before the lock's release can be run again: `releasing` is taken up
//! where it stopped.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::ReleaseConfig;
use crate::exit;
use crate::lock::{
    self, Finished, HoldChange, HoldRecord, HoldState, Lock, Released, RunOutcome, Token,
};
use crate::report::Reporter;

use super::{KEEPER_ID, when};
use crate::process::hostname;

/// Run `release`: returns the exit code.
pub async fn release(cfg: &ReleaseConfig, report: &Reporter) -> u8 {
    let Some(token) = Token::parse(&cfg.token) else {
        report.error(
            "usage",
            "error: --token (or REDLOCK_TOKEN) is not a token acquire printed",
        );
        return exit::USAGE;
    };
    let target = &cfg.target;
    let lock = match lock::open(target, None, target.timeout).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return exit::UNAVAILABLE;
        }
    };
    let name = lock.name().to_owned();
    let claim = HoldChange::End {
        to: HoldState::Releasing,
        reason: String::new(),
        from: &[HoldState::Held],
    };
    let record = match lock.hold(&token, &claim, target.timeout).await {
        Ok(record) => record,
        Err(e) => {
            report.error("unavailable", &e);
            return exit::UNAVAILABLE;
        }
    };
    let Some(record) = record else {
        return nothing_recorded(&lock, &name, &token, report).await;
    };
    match record.state {
        HoldState::Released => {
            report.error(
                "nothing",
                format_args!(
                    "nothing to release: this hold of {name} was released already, at {}",
                    when(record.ended_ms)
                ),
            );
            return crate::cli::EXIT_NOTHING;
        }
        HoldState::Lost | HoldState::MaxHold => {
            report.error("lost", lost_line(&name, &record));
            // A keeper that has not noticed yet (a `break` ended the record) stops now.
            stop_keeper(&record);
            return exit::LOST;
        }
        HoldState::Held | HoldState::Releasing => {}
    }
    // A `--limit` hold is a permit: released by the semaphore's script, as it was taken.
    if record.limit > 1 {
        let mut with_limit = target.clone();
        with_limit.limit = record.limit;
        return match lock::open(&with_limit, None, target.timeout).await {
            Ok(permits) => release_held(&permits, cfg, &token, &record, report).await,
            Err(e) => {
                report.error("unavailable", &e);
                exit::UNAVAILABLE
            }
        };
    }
    release_held(&lock, cfg, &token, &record, report).await
}

/// Release the lock of a hold claimed for release (`releasing`), then end its record.
async fn release_held<L: Lock>(
    lock: &L,
    cfg: &ReleaseConfig,
    token: &Token,
    record: &HoldRecord,
    report: &Reporter,
) -> u8 {
    let target = &cfg.target;
    let name = lock.name().to_owned();
    let released_here = format!("released from {}", hostname());
    let finished = Finished {
        host: record.host.clone(),
        pid: record.pid,
        program: "redlock-run acquire (keeper)".to_owned(),
        fence: record.fence,
        ran: held_for(record),
        outcome: RunOutcome::Succeeded,
        exit_code: Some(0),
        signal: None,
        hold: Some(released_here.clone()),
    };
    let released = lock
        .release(token, Duration::ZERO, Some(&finished), target.timeout)
        .await;
    let (to, reason) = match released {
        Ok(Released::Released) => (HoldState::Released, released_here),
        Ok(Released::Gone) => (
            HoldState::Lost,
            "the lock had expired or been deleted before the release: its keeper stopped \
             renewing (killed?) or the lock was deleted"
                .to_owned(),
        ),
        Ok(Released::HeldByOther) => (
            HoldState::Lost,
            "another holder had the lock at the release: this hold's lease had run out (its \
             keeper stopped renewing) or the lock was deleted and taken again"
                .to_owned(),
        ),
        Err(e) => {
            report.error(
                "unavailable",
                format_args!("could not release {name} ({e}); run release again"),
            );
            return exit::UNAVAILABLE;
        }
    };
    let change = HoldChange::End {
        to,
        reason,
        from: &[HoldState::Releasing],
    };
    let after = lock.hold(token, &change, target.timeout).await;
    stop_keeper(record);
    match after {
        Ok(Some(r)) if r.state == HoldState::Released && to == HoldState::Released => {
            report.done(
                "released",
                format_args!("released {name} (held since {})", when(record.since_ms)),
            );
            0
        }
        // The lock was gone because another `release` of this hold released it, in the
        // script that ended the record (a second `release` at the same time).
        Ok(Some(r)) if r.state == HoldState::Released => {
            report.error(
                "nothing",
                format_args!(
                    "nothing to release: this hold of {name} was released by another release, \
                     at {}",
                    when(r.ended_ms)
                ),
            );
            crate::cli::EXIT_NOTHING
        }
        Ok(Some(r)) => {
            report.error("lost", lost_line(&name, &r));
            exit::LOST
        }
        // The record is out of reach or gone; what the release found decides.
        _ if to == HoldState::Released => {
            report.done("released", format_args!("released {name}"));
            0
        }
        _ => {
            report.error(
                "lost",
                format_args!("the hold of {name} was lost while held: the lock was gone"),
            );
            exit::LOST
        }
    }
}

/// No hold under this token: the lock held under this very token (a run's, or a hold whose
/// record is gone: refused, 4), another holder (4), or nothing at all (3).
async fn nothing_recorded<L: Lock>(lock: &L, name: &str, token: &Token, report: &Reporter) -> u8 {
    let token = token.as_str();
    match lock.status(None).await {
        Ok(status) if status.held && holds_token(&status, &token) => {
            // Nothing a run cannot write tells a keeper's lock from a run's here (the hold
            // record is what would), so the lock is left alone: a run releases it when its
            // command ends, and a hold that lost its record is ended by `break`.
            report.error(
                "not-yours",
                format_args!(
                    "{name} is held under this token, but no hold of it is recorded: the \
                     token is a run's (REDLOCK_TOKEN inside its command: the run releases the \
                     lock when its command ends), or the hold's record was deleted or \
                     evicted (end that hold with: redlock-run break --key <lock name> \
                     --holder <its token>); nothing was changed"
                ),
            );
            crate::cli::EXIT_NOT_YOURS
        }
        Ok(status) if status.held => {
            let by = match (&status.host, status.pid) {
                (Some(host), Some(pid)) => format!(" (by {host} pid {pid})"),
                _ => String::new(),
            };
            report.error(
                "not-yours",
                format_args!(
                    "{name} is held by another token{by}, and no hold of this token is \
                     recorded; nothing was changed"
                ),
            );
            crate::cli::EXIT_NOT_YOURS
        }
        Ok(_) => {
            report.error(
                "nothing",
                format_args!(
                    "nothing to release: no hold of {name} under this token (unknown token, \
                     or its record expired)"
                ),
            );
            crate::cli::EXIT_NOTHING
        }
        Err(e) => {
            report.error("unavailable", &e);
            exit::UNAVAILABLE
        }
    }
}

/// Whether `token` holds the lock: as the mutex's holder, a permit or a share.
fn holds_token(status: &lock::Status, token: &str) -> bool {
    status.token.as_deref() == Some(token)
        || status
            .permits
            .iter()
            .chain(&status.shared)
            .any(|p| p.token == token)
}

fn lost_line(name: &str, r: &HoldRecord) -> String {
    let holder = format!(
        "the hold of {name} (keeper pid {} on {}, since {})",
        r.pid,
        r.host,
        when(r.since_ms)
    );
    if let Some(by) = &r.broken_by {
        // As a run that lost its lock to `break` says it.
        return format!(
            "{holder} was lost while held: the lock was broken by {by} at {} (redlock-run \
             break)",
            when(r.ended_ms)
        );
    }
    let what = match r.state {
        HoldState::MaxHold => "ended at its --max-hold",
        _ => "was lost while held",
    };
    format!("{holder} {what}, at {}: {}", when(r.ended_ms), r.reason)
}

/// From the hold's start to now (the local clock against the server's: for the run record's
/// duration only).
fn held_for(r: &HoldRecord) -> Duration {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    Duration::from_millis(now_ms.saturating_sub(r.since_ms))
}

/// The keeper ends by itself at its next renewal (the lock is gone); on this host it is told
/// at once, with SIGTERM, but only if that pid is still the keeper of this hold: its
/// environment carries the hold's keeper id (a pid may have been reused since).
fn stop_keeper(r: &HoldRecord) {
    if r.host != hostname() || r.pid == 0 {
        return;
    }
    let Ok(environ) = std::fs::read(format!("/proc/{}/environ", r.pid)) else {
        return;
    };
    let wanted = format!("{KEEPER_ID}={}", r.id);
    if environ
        .split(|b| *b == 0)
        .any(|var| var == wanted.as_bytes())
        && let Ok(pid) = i32::try_from(r.pid)
    {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}
