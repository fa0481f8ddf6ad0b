//! The text of the supervisor's messages: a busy lock, a wait, and the end of a run that
//! held the lock. What is said, not when: the supervisor decides that.

use std::time::Duration;

use crate::cli::Wait;
use crate::config::RunConfig;
use crate::exit::Ending;
use crate::lock::Holder;
use crate::report::Reporter;

use super::outcome::{LeaseEnd, Outcome, ReleaseResult, Under, exit_for};

/// The messages for a run that held the lock (a run that did not has said why already).
pub(super) fn tell(
    cfg: &RunConfig,
    key: &str,
    outcome: &Outcome,
    keep: Duration,
    report: &Reporter,
) {
    let Outcome::Held { under, release } = outcome else {
        return;
    };
    let lost_known = under.lease_lost();
    match release {
        ReleaseResult::Released if keep.is_zero() => {
            report.info("released", format_args!("released {key}"))
        }
        ReleaseResult::Released => report.info(
            "released",
            format_args!(
                "{key} stays locked for {} more (--hold-at-least)",
                show_ms(keep)
            ),
        ),
        ReleaseResult::HeldByOther if !lost_known => report.error(
            "lost",
            format_args!("lock {key} was held by someone else at release; left it alone"),
        ),
        ReleaseResult::Gone if !lost_known => report.error(
            "lost",
            format_args!("lock {key} had already expired or been deleted at release"),
        ),
        _ => {}
    }
    match under {
        Under::LateStart => report.error(
            "lost",
            format_args!(
                "lease on {key} ran out before the command could start (slow reply, replica \
                 wait or a paused process); not running it"
            ),
        ),
        Under::Ran {
            lease: Some(LeaseEnd::Lost),
            ..
        } => report.error(
            "lost",
            format_args!(
                "lock {key} was lost while the command ran (the key expired, was deleted or \
                 now holds another value); the command was stopped"
            ),
        ),
        Under::Ran {
            lease: Some(LeaseEnd::Unconfirmed(why)),
            ..
        } => report.error(
            "lost",
            format_args!(
                "lock {key} could not be renewed before its lease ran out ({why}); the command \
                 was stopped"
            ),
        ),
        Under::Ran {
            max_runtime: true, ..
        } if exit_for(outcome) == Ending::MaxRuntime => report.error(
            "max-runtime",
            format_args!(
                "the command ran longer than --max-runtime {} and was stopped",
                show(cfg.max_runtime.unwrap_or_default())
            ),
        ),
        _ => {}
    }
}

pub(super) fn waiting_message(key: &str, holder: &Holder, elapsed: Duration, wait: Wait) -> String {
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" (held by {host} pid {pid}{})", place(holder)),
        _ if holder.shared > 0 => format!(" (held {}{})", shared_by(holder), place(holder)),
        _ if holder.place > 0 => format!(" ({})", &place(holder)[2..]),
        _ => String::new(),
    };
    let left = match wait {
        Wait::Forever => "no limit".to_owned(),
        Wait::For(d) => format!("{} left", show_secs(d.saturating_sub(elapsed))),
    };
    format!(
        "waiting for {key}{who}: {} elapsed, {left}",
        show_secs(elapsed)
    )
}

/// `shared by 2 runs` (`--shared` holders keep the lock from an exclusive run).
fn shared_by(holder: &Holder) -> String {
    let n = holder.shared;
    format!("shared by {n} run{}", if n == 1 { "" } else { "s" })
}

/// `, 2nd of 3 in line` when queued.
fn place(holder: &Holder) -> String {
    if holder.place == 0 {
        return String::new();
    }
    let nth = match (holder.place % 10, holder.place % 100) {
        (1, n) if n != 11 => "st",
        (2, n) if n != 12 => "nd",
        (3, n) if n != 13 => "rd",
        _ => "th",
    };
    format!(", {}{nth} of {} in line", holder.place, holder.queued)
}

/// Where a wait begins, for a log: who holds the lock, since when, and how long we wait.
pub(super) fn wait_started_message(key: &str, holder: &Holder, wait: Wait) -> String {
    let limit = match wait {
        Wait::Forever => "with no limit".to_owned(),
        Wait::For(d) => format!("up to {}", show(d)),
    };
    if holder.free {
        return format!(
            "lock {key} is free, but {} queued earlier{}; waiting {limit}",
            waiters(ahead(holder)),
            place(holder)
        );
    }
    let mut who = String::new();
    if let (Some(host), Some(pid)) = (&holder.host, holder.pid) {
        who.push_str(&format!(" by {host} pid {pid}"));
    } else if holder.shared > 0 {
        who.push_str(&format!(" {}", shared_by(holder)));
    }
    if let Some(ms) = holder.acquired_ms {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
        who.push_str(&format!(" since {}", humantime::format_rfc3339_seconds(at)));
    }
    let ttl = match holder.ttl_ms {
        Some(ms) => format!("{} left on its lease", show_ms(Duration::from_millis(ms))),
        None => "no TTL".to_owned(),
    };
    format!(
        "lock {key} is held{who} ({ttl}{}); waiting {limit}",
        place(holder)
    )
}

/// Waiters in the queue before this run (all of them when it is not queued).
fn ahead(holder: &Holder) -> u64 {
    match holder.place {
        0 => holder.queued,
        place => place - 1,
    }
}

/// `1 waiter`, `3 waiters`.
fn waiters(n: u64) -> String {
    format!("{n} waiter{}", if n == 1 { "" } else { "s" })
}

pub(super) fn busy_message(key: &str, holder: &Holder, wait: Wait) -> String {
    if holder.free {
        return format!(
            "lock {key} is busy: free, but {} queued for it (--wait) ahead of this run",
            waiters(ahead(holder))
        );
    }
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" by {host} pid {pid}"),
        _ if holder.shared > 0 => format!(" {}", shared_by(holder)),
        _ => String::new(),
    };
    let ttl = match holder.ttl_ms {
        Some(ms) => format!(", {} left", show_ms(Duration::from_millis(ms))),
        None => ", and the key has no TTL (it will never expire by itself)".to_owned(),
    };
    let waited = match wait {
        Wait::For(d) if !d.is_zero() => format!(" after waiting {}", show(d)),
        _ => String::new(),
    };
    format!("lock {key} is busy: held{who}{ttl}{waited}")
}

pub(super) fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

pub(super) fn show_secs(d: Duration) -> String {
    show(Duration::from_secs(d.as_secs()))
}

pub(super) fn show_ms(d: Duration) -> String {
    show(Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_message_names_key_holder_and_ttl() {
        let holder = Holder {
            ttl_ms: Some(1500),
            host: Some("web1".into()),
            pid: Some(42),
            acquired_ms: Some(0),
            ..Holder::default()
        };
        assert_eq!(
            busy_message("redlock:k", &holder, Wait::For(Duration::ZERO)),
            "lock redlock:k is busy: held by web1 pid 42, 1s 500ms left"
        );
        let shared = Holder {
            ttl_ms: Some(2000),
            shared: 2,
            ..Holder::default()
        };
        assert_eq!(
            busy_message("k", &shared, Wait::For(Duration::ZERO)),
            "lock k is busy: held shared by 2 runs, 2s left"
        );
        let foreign = Holder::default();
        assert!(busy_message("k", &foreign, Wait::For(Duration::from_secs(2))).contains("no TTL"));
        let queued = Holder {
            free: true,
            queued: 3,
            place: 2,
            ..Holder::default()
        };
        assert_eq!(
            wait_started_message("k", &queued, Wait::Forever),
            "lock k is free, but 1 waiter queued earlier, 2nd of 3 in line; \
             waiting with no limit"
        );
        assert_eq!(
            busy_message("k", &queued, Wait::For(Duration::from_secs(1))),
            "lock k is busy: free, but 1 waiter queued for it (--wait) ahead of this run"
        );
        let next = Holder {
            place: 1,
            queued: 1,
            ..holder.clone()
        };
        assert!(
            waiting_message("k", &next, Duration::ZERO, Wait::Forever)
                .contains("(held by web1 pid 42, 1st of 1 in line)")
        );
        assert_eq!(
            wait_started_message("redlock:k", &holder, Wait::For(Duration::from_secs(600))),
            "lock redlock:k is held by web1 pid 42 since 1970-01-01T00:00:00Z (1s 500ms left \
             on its lease); waiting up to 10m"
        );
    }
}
