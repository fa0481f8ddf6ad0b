//! The text of the supervisor's messages: a busy lock, a wait, and the end of a run that
//! held the lock. What is said, not when: the supervisor decides that.

use std::time::Duration;

use crate::cli::Wait;
use crate::config::RunConfig;
use crate::exit::Ending;
use crate::lock::{Holder, Paused};
use crate::report::Reporter;
use crate::timestamp;

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
            lease: Some(LeaseEnd::Lost(Some(broken))),
            ..
        } => report.error(
            "lost",
            format_args!(
                "lock {key} was {}; the command was stopped",
                broken.describe()
            ),
        ),
        Under::Ran {
            lease: Some(LeaseEnd::Lost(None)),
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

/// ` by web1 pid 42`, or ` by web1 (pid 42 finished at T, kept until T' by --hold-at-least)`
/// once its command finished; ` shared by 2 runs` for `--shared` holders; empty when the
/// holder is not known.
fn by(holder: &Holder) -> String {
    if holder.shared > 0 {
        return format!(" {}", shared_by(holder));
    }
    match (&holder.host, holder.pid, &holder.kept) {
        (Some(host), pid, Some(kept)) => format!(" by {host} ({})", kept.describe(pid)),
        (Some(host), Some(pid), None) => format!(" by {host} pid {pid}"),
        _ => String::new(),
    }
}

pub(super) fn waiting_message(key: &str, holder: &Holder, elapsed: Duration, wait: Wait) -> String {
    let who = match (&holder.host, holder.pid) {
        _ if holder.paused.is_some() => format!(
            " ({}{})",
            holder
                .paused
                .as_ref()
                .map(Paused::describe)
                .unwrap_or_default(),
            place(holder)
        ),
        _ if holder.shared > 0 => format!(" (held{}{})", by(holder), place(holder)),
        (Some(_), Some(_)) => format!(" (held{}{})", by(holder), place(holder)),
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

/// `shared by 2 runs` (`--shared` holders keep the lock from an exclusive run); once the
/// command of every one finished and `--hold-at-least` keeps the shares, that too: `shared by
/// 1 run (web1 pid 42 finished at T, kept until T' by --hold-at-least)`.
fn shared_by(holder: &Holder) -> String {
    let n = holder.shared;
    let runs = format!("shared by {n} run{}", if n == 1 { "" } else { "s" });
    match (&holder.kept, &holder.host) {
        (Some(kept), Some(host)) if n == 1 => {
            format!("{runs} ({host} {})", kept.describe(holder.pid))
        }
        (Some(kept), _) => format!(
            "{runs} (their commands finished, the last at {}; kept until {} by \
             --hold-at-least)",
            timestamp::seconds(kept.finished_ms),
            timestamp::seconds(kept.until_ms)
        ),
        (None, _) => runs,
    }
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
    if let Some(p) = &holder.paused {
        return format!(
            "lock {key} is {}{}; waiting {limit}",
            p.describe(),
            place(holder)
        );
    }
    if holder.free {
        return format!(
            "lock {key} is free, but {} queued earlier{}; waiting {limit}",
            waiters(ahead(holder)),
            place(holder)
        );
    }
    let mut who = by(holder);
    if let Some(ms) = holder.acquired_ms {
        who.push_str(&format!(" since {}", timestamp::seconds(ms)));
    }
    let ttl = match holder.ttl_ms {
        // Kept by --hold-at-least: nobody renews it, the lease is when it ends.
        Some(ms) if holder.kept.is_some() => {
            format!("free in {}", show_ms(Duration::from_millis(ms)))
        }
        // Not an ETA: a live holder renews its lease for as long as its command runs. The
        // lease bounds only how long a holder that died can keep the lock.
        Some(ms) => format!(
            "it renews its lease while it runs; free within {} if it died",
            show_ms(Duration::from_millis(ms))
        ),
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
    if let Some(p) = &holder.paused {
        let waited = match wait {
            Wait::For(d) if !d.is_zero() => format!(" (after waiting {})", show(d)),
            _ => String::new(),
        };
        let held = match by(holder) {
            who if !holder.free && !who.is_empty() => format!(", and held{who}"),
            _ => String::new(),
        };
        return format!(
            "lock {key} is busy: {}{held}{waited}; new runs are busy until resume or the pause \
             ends (runs with --wait keep their place)",
            p.describe()
        );
    }
    if holder.free {
        return format!(
            "lock {key} is busy: free, but {} queued for it (--wait) ahead of this run",
            waiters(ahead(holder))
        );
    }
    let who = by(holder);
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
    fn a_paused_lock_says_why_who_and_until_when() {
        let paused = Holder {
            free: true,
            paused: Some(Paused {
                reason: "deploy freeze".into(),
                by: "ops1".into(),
                since_ms: 0,
                until_ms: 1_796_235_611_000,
            }),
            ..Holder::default()
        };
        assert_eq!(
            busy_message("k", &paused, Wait::For(Duration::ZERO)),
            "lock k is busy: paused by ops1 until 2026-12-02T18:20:11Z: deploy freeze; new runs \
             are busy until resume or the pause ends (runs with --wait keep their place)"
        );
        let held = Holder {
            free: false,
            host: Some("web1".into()),
            pid: Some(7),
            ..paused.clone()
        };
        assert!(
            busy_message("k", &held, Wait::For(Duration::ZERO))
                .contains(", and held by web1 pid 7"),
        );
    }

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
            "lock redlock:k is held by web1 pid 42 since 1970-01-01T00:00:00Z (it renews its \
             lease while it runs; free within 1s 500ms if it died); waiting up to 10m"
        );
    }

    #[test]
    fn a_holder_kept_by_hold_at_least_is_not_named_as_running() {
        let kept = Holder {
            ttl_ms: Some(20_000),
            host: Some("web1".into()),
            pid: Some(42),
            acquired_ms: Some(0),
            kept: Some(crate::lock::Kept {
                finished_ms: 1_000,
                until_ms: 60_000,
            }),
            ..Holder::default()
        };
        assert_eq!(
            busy_message("k", &kept, Wait::For(Duration::ZERO)),
            "lock k is busy: held by web1 (pid 42 finished at 1970-01-01T00:00:01Z, kept until \
             1970-01-01T00:01:00Z by --hold-at-least), 20s left"
        );
        assert_eq!(
            wait_started_message("k", &kept, Wait::Forever),
            "lock k is held by web1 (pid 42 finished at 1970-01-01T00:00:01Z, kept until \
             1970-01-01T00:01:00Z by --hold-at-least) since 1970-01-01T00:00:00Z (free in 20s); \
             waiting with no limit"
        );
    }

    #[test]
    fn shared_holders_kept_by_hold_at_least_are_not_named_as_running() {
        let kept = crate::lock::Kept {
            finished_ms: 1_000,
            until_ms: 60_000,
        };
        let one = Holder {
            ttl_ms: Some(20_000),
            host: Some("web1".into()),
            pid: Some(42),
            kept: Some(kept),
            shared: 1,
            ..Holder::default()
        };
        assert_eq!(
            busy_message("k", &one, Wait::For(Duration::ZERO)),
            "lock k is busy: held shared by 1 run (web1 pid 42 finished at \
             1970-01-01T00:00:01Z, kept until 1970-01-01T00:01:00Z by --hold-at-least), 20s left"
        );
        let two = Holder {
            host: None,
            pid: None,
            shared: 2,
            ..one.clone()
        };
        assert_eq!(
            wait_started_message("k", &two, Wait::Forever),
            "lock k is held shared by 2 runs (their commands finished, the last at \
             1970-01-01T00:00:01Z; kept until 1970-01-01T00:01:00Z by --hold-at-least) (free \
             in 20s); waiting with no limit"
        );
        // One that still runs: no end is told.
        let running = Holder {
            kept: None,
            ..one.clone()
        };
        assert_eq!(
            busy_message("k", &running, Wait::For(Duration::ZERO)),
            "lock k is busy: held shared by 1 run, 20s left"
        );
    }
}
