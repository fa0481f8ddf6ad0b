//! The run record from the supervisor's side: what a run tells its release to record
//! ([`finished`]), and `--once-per`: with the lock held, whether the command already
//! succeeded in the current period ([`Run::done_already`]).
//!
//! The record is read after the lock is granted, from the servers that hold it, so that N
//! hosts that fire together and wait (`--wait`) run the command once: each one that gets the
//! lock after a success sees it, because the success was written by the same script that
//! released the lock to it.

use std::time::Duration;

use crate::config::{OncePer, RunConfig};
use crate::exit::ChildEnd;
use crate::lock::{Finished, Lock, RunOutcome, RunRecord};
use crate::period;

use super::outcome::Under;
use super::shared::Run;

/// The record a run that started its command writes with its release; `None` for a run
/// whose command never started (nothing ran: nothing to record), a `-c` command whose
/// shell could not find or execute the program (126/127) included, as for
/// `--hold-at-least`.
pub(super) fn finished(
    cfg: &RunConfig,
    under: &Under,
    fence: u64,
    ran: Duration,
) -> Option<Finished> {
    let Under::Ran {
        end,
        lease,
        max_runtime,
    } = under
    else {
        return None;
    };
    if never_ran(cfg, end.as_ref()) {
        return None;
    }
    let outcome = ran_outcome(end.as_ref(), lease.is_some(), *max_runtime);
    Some(Finished {
        host: crate::process::hostname(),
        pid: std::process::id(),
        program: cfg.command.display.clone(),
        fence,
        ran,
        outcome,
        exit_code: match end {
            Some(ChildEnd::Exited(code)) => Some(*code),
            _ => None,
        },
        signal: match end {
            Some(ChildEnd::Signalled(sig)) => Some(*sig),
            _ => None,
        },
        hold: None,
    })
}

/// `-c` whose shell could not find or execute the program (126/127): the command never ran.
/// (Without `-c` a program that cannot start never becomes a child at all.)
pub(super) fn never_ran(cfg: &RunConfig, end: Option<&ChildEnd>) -> bool {
    cfg.command.via_shell && matches!(end, Some(ChildEnd::Exited(126 | 127)))
}

/// How a command that ran ended, for its record, its metrics and its pings: a lease that
/// could not be kept outranks `--max-runtime`, which outranks the command's own end.
pub(super) fn ran_outcome(
    end: Option<&ChildEnd>,
    lease_lost: bool,
    max_runtime: bool,
) -> RunOutcome {
    match (end, lease_lost, max_runtime) {
        (_, true, _) => RunOutcome::Lost,
        (_, false, true) => RunOutcome::TimedOut,
        (Some(ChildEnd::Exited(0)), ..) => RunOutcome::Succeeded,
        (Some(ChildEnd::Signalled(_)), ..) => RunOutcome::Signalled,
        _ => RunOutcome::Failed,
    }
}

impl<L: Lock> Run<'_, L> {
    /// `--once-per`: the last success, if it started in the current period (on the server's
    /// clock), read with the lock held. `Err`: the record could not be read (then nothing
    /// may run: the command might run twice).
    /// Comes with the server's time of the read (ms).
    pub(super) async fn done_already(
        self,
        once: &OncePer,
    ) -> Result<Option<(RunRecord, u64)>, String> {
        let status = self
            .lock
            .status(Some(self.cfg.ttl))
            .await
            .map_err(|e| e.to_string())?;
        let records = status.records;
        let Some(now_ms) = records.now_ms else {
            return Err("the server's clock (TIME) could not be read".to_owned());
        };
        match records.last_success {
            Some(last) if period::done_in(once.period, &once.zone, now_ms, last.started_ms)? => {
                Ok(Some((last, now_ms)))
            }
            _ => Ok(None),
        }
    }
}

/// The line of a skipped run: when and where the command last succeeded.
pub(super) fn skipped_text(key: &str, once: &OncePer, last: &RunRecord, now_ms: u64) -> String {
    let ago = Duration::from_secs(now_ms.saturating_sub(last.started_ms) / 1000);
    let mut where_ = last
        .host
        .clone()
        .unwrap_or_else(|| "an unknown host".to_owned());
    if let Some(pid) = last.pid {
        where_.push_str(&format!(" pid {pid}"));
    }
    if let Some(fence) = last.fence {
        where_.push_str(&format!(", fence {fence}"));
    }
    format!(
        "skipped: {key} already succeeded {} ({} ago, on {where_}); {}",
        crate::timestamp::seconds(last.started_ms),
        humantime::format_duration(ago),
        period::shown(once.period, &once.zone)
    )
}
