//! Acquire and wait: try until granted, the wait runs out, or a signal ends the wait; a
//! waiter that gives up leaves the queue.

use std::time::Duration;

use crate::cli::Wait;
use crate::exit::Ending;
use crate::lease::{Lease, Stamp};
use crate::lock::{
    Attempt, FailureKind, Holder, HolderInfo, Lock, ReleaseNotices, ReplicaAck, SHARED_WAITER,
    Token, Waiter,
};
use crate::process::Signals;
use crate::report::PauseFields;

use super::backoff::Backoff;
use super::messages::{busy_message, show_ms, show_secs, wait_started_message, waiting_message};
use super::shared::{Held, RENEW_RETRY, Run, beside};

/// With -v, how often a wait that goes on is logged (stderr not a terminal).
const WAIT_LOG_EVERY: Duration = Duration::from_secs(30);

/// A waiter further from the head of the queue than `--limit` places cannot take the lock
/// before those ahead of it have: it attempts about once a second, only to keep its place
/// and to learn when it has moved up (a release wakes the head alone, see
/// `ReleaseNotices::next_for`). Those at the head poll quicker (`backoff`), as a fallback
/// for a holder that expires without releasing, or a notice that never came.
pub(super) const BEHIND_POLL: Duration = Duration::from_secs(1);

/// Spread added to `BEHIND_POLL`, so that waiters that arrived together do not poll in step.
const BEHIND_POLL_SPREAD: Duration = Duration::from_millis(200);

/// A waiter's place is kept this long beyond the longest attempt (`--connect-timeout`, plus
/// the replicas' wait with `--min-replicas`): longer than the longest pause between two
/// attempts (`BEHIND_POLL` and its spread; `backoff::BACKOFF_CAP` at the head), with 800 ms
/// to spare.
const PLACE_KEPT_BEYOND_AN_ATTEMPT: Duration = Duration::from_secs(2);

/// The least time a waiter's place is kept.
const PLACE_KEPT_AT_LEAST: Duration = Duration::from_millis(2500);

/// Bound on leaving the waiters' queue when giving up: short, as the run is ending anyway
/// and the place expires by itself.
const LEAVE_QUEUE_WITHIN: Duration = Duration::from_secs(1);

/// Takes the lock for one run, waiting as `--wait` allows.
pub(super) struct Acquirer<'a, L> {
    run: Run<'a, L>,
    /// Who asks: named to the others in busy messages and `status`; with `--wait`, also the
    /// id of this run's place in the waiters' queue.
    holder: HolderInfo,
    /// `--connect-timeout` bounds the whole start, counted from here: connecting and the
    /// first attempt, the take-back of a write whose reply never came included.
    start: Stamp,
}

/// The subscription to release notices: made once, on the first busy reply while there is
/// time to wait. It wakes the next attempt as soon as the holder releases, instead of at the
/// next poll.
enum Notices {
    NotYet,
    /// Subscribed (`None`: the backend could not subscribe; the wait polls).
    Made(Option<ReleaseNotices>),
}

impl<'a, L: Lock> Acquirer<'a, L> {
    pub(super) fn new(run: Run<'a, L>, start: Stamp) -> Self {
        let cfg = run.cfg;
        let (host, pid) = (crate::process::hostname(), std::process::id());
        let waits = cfg.wait != Wait::For(Duration::ZERO);
        let holder = HolderInfo {
            waiter: waits.then(|| Waiter {
                // A shared waiter says so in its id: the scripts keep it behind an exclusive
                // waiter queued earlier, and let it in beside other shared ones.
                id: format!(
                    "{}{} {host} {pid}",
                    if cfg.target.shared { SHARED_WAITER } else { "" },
                    Token::new().as_str()
                ),
                // An attempt with --min-replicas can take the WAIT's time too (a slow
                // replica): a live waiter must not lose its place between two attempts.
                place_kept: (cfg.target.timeout
                    + ReplicaAck::wait_time(cfg.replicas)
                    + PLACE_KEPT_BEYOND_AN_ATTEMPT)
                    .max(PLACE_KEPT_AT_LEAST),
            }),
            host,
            pid,
            command: cfg.command.display.clone(),
            note: cfg.note.clone().unwrap_or_default(),
        };
        Acquirer { run, holder, start }
    }

    /// The run may wait for the lock (`--wait` is not 0).
    pub(super) fn waits(&self) -> bool {
        self.holder.waiter.is_some()
    }

    /// Take the lock, waiting as `--wait` allows. `prepare` runs once, beside the first
    /// attempt. A waiter that gives up (its --wait ran out, a signal, Redis gone) leaves the
    /// queue at once; if even that fails, its place expires by itself.
    pub(super) async fn acquire(
        &self,
        prepare: impl FnOnce(),
        signals: &mut Signals,
    ) -> Result<Held, Ending> {
        let result = self.attempts(prepare, signals).await;
        if result.is_err() && self.waits() {
            let within = self.run.cfg.target.timeout.min(LEAVE_QUEUE_WITHIN);
            self.run.lock.leave_queue(&self.holder, within).await;
        }
        result
    }

    /// The attempts, until one is granted or the run gives up.
    async fn attempts(
        &self,
        prepare: impl FnOnce(),
        signals: &mut Signals,
    ) -> Result<Held, Ending> {
        let Run { cfg, lock, report } = self.run;
        let (holder, start) = (&self.holder, self.start);
        // Taken by the first attempt: its presence says the next attempt is the first.
        let mut prepare = Some(prepare);
        let started = Stamp::now();
        // With --limit, a busy lock means every permit is taken; the holder named is the one
        // whose lease ends first.
        let shown_name = match cfg.target.limit {
            1 => lock.name().to_owned(),
            n => format!("{} (all {n} permits)", lock.name()),
        };
        // "All permits taken" is true only when the lock is not free-but-queued.
        let named = |holder: &Holder| {
            if holder.free {
                lock.name()
            } else {
                shown_name.as_str()
            }
        };
        let waiter_id = holder.waiter.as_ref().map(|w| w.id.as_str());
        let mut backoff = Backoff::new(Token::new().seed());
        let mut notices = Notices::NotYet;
        // When the last "waiting" line went to a log (stderr not a terminal).
        let mut last_logged: Option<Stamp> = None;
        // Whether a failure was already retried (and said so).
        let mut retried = false;
        let result = loop {
            // Never cancelled by a signal: the backend must see its attempt through (and take
            // back a write whose reply was lost). A signal is looked at after the reply.
            let (within, work) = match prepare.take() {
                Some(work) => (
                    cfg.target
                        .timeout
                        .saturating_sub(start.until(Stamp::now()))
                        .max(Duration::from_millis(10)),
                    Some(work),
                ),
                None => (cfg.target.timeout, None),
            };
            let attempting = lock.try_acquire(cfg.ttl, holder, within);
            let attempt = match work {
                Some(work) => beside(attempting, work).await,
                None => attempting.await,
            };
            let now = Stamp::now();
            let left = match cfg.wait {
                Wait::Forever => Some(Duration::MAX),
                Wait::For(limit) => limit
                    .checked_sub(now.since(started))
                    .filter(|d| !d.is_zero()),
            };
            match attempt {
                Ok(Attempt::Granted(grant)) => {
                    if let Some(degraded) = &grant.degraded {
                        report.degraded(degraded);
                    }
                    // A log that said the wait began says when it ended (with -v the
                    // supervisor's own `acquired` line does).
                    if last_logged.is_some() && !report.verbose() {
                        report.notice(
                            "acquired",
                            format!(
                                "acquired {} after waiting {} (fence {})",
                                lock.name(),
                                show_ms(now.since(started)),
                                grant.fence
                            ),
                        );
                    }
                    break Ok(Held {
                        token: grant.token,
                        lease: Lease::granted(grant.counted_from, cfg.ttl, cfg.grace)
                            .expect("config guarantees ttl > drift"),
                        counted_from: grant.counted_from,
                        fence: grant.fence,
                        acquired: now,
                        waited: now.since(started),
                        absent: grant.absent,
                    });
                }
                Ok(Attempt::Busy(holder)) => {
                    let Some(left) = left else {
                        let pause = holder.paused.as_ref().map(|p| PauseFields {
                            paused_reason: p.reason.clone(),
                            paused_by: p.by.clone(),
                            paused_until: crate::timestamp::seconds(p.until_ms),
                        });
                        report.busy(
                            busy_message(named(&holder), &holder, cfg.wait),
                            pause.as_ref(),
                        );
                        break Err(Ending::Busy(cfg.conflict_exit_code));
                    };
                    report.waiting(waiting_message(
                        named(&holder),
                        &holder,
                        now.since(started),
                        cfg.wait,
                    ));
                    // In a log (CI, cron mail) one line says the wait began, and with -v one
                    // every WAIT_LOG_EVERY says it goes on.
                    match last_logged {
                        None => {
                            report.notice(
                                "waiting",
                                wait_started_message(named(&holder), &holder, cfg.wait),
                            );
                            last_logged = Some(now);
                        }
                        Some(at) if now.since(at) >= WAIT_LOG_EVERY && !report.is_live() => {
                            report.info(
                                "waiting",
                                format!(
                                    "still waiting for {} after {}",
                                    lock.name(),
                                    show_secs(now.since(started))
                                ),
                            );
                            last_logged = Some(now);
                        }
                        Some(_) => {}
                    }
                    if let Notices::NotYet = notices {
                        // Bounded by the wait left, and ended by a signal like any wait.
                        tokio::select! {
                            n = lock.release_notices(cfg.target.timeout.min(left)) => {
                                notices = Notices::Made(n);
                            }
                            sig = signals.recv_ending() => {
                                break Err(Ending::Interrupted(sig as i32));
                            }
                        }
                        // The holder may have released while we subscribed: try again at once.
                        continue;
                    }
                    let nap = pause_when_busy(&holder, cfg.target.limit, &mut backoff).min(left);
                    tokio::select! {
                        () = tokio::time::sleep(nap) => {}
                        () = async {
                            match &mut notices {
                                Notices::Made(Some(n)) => n.next_for(waiter_id).await,
                                _ => std::future::pending().await,
                            }
                        } => {}
                        sig = signals.recv_ending() => break Err(Ending::Interrupted(sig as i32)),
                    }
                }
                Err(e) if e.is_transient() && left.is_some() => {
                    // A failover under way, a replica not yet back: the first such failure of
                    // a wait is said even without -v, so that a log tells why the run waits.
                    let line = format!("{e}; retrying until --wait runs out");
                    if retried {
                        report.info("retry", &line);
                    } else {
                        report.notice("retry", &line);
                        retried = true;
                    }
                    report.waiting(&line);
                    let nap = RENEW_RETRY
                        .max(backoff.pause())
                        .min(left.unwrap_or_default());
                    tokio::select! {
                        () = tokio::time::sleep(nap) => {}
                        sig = signals.recv_ending() => break Err(Ending::Interrupted(sig as i32)),
                    }
                }
                Err(e) if e.kind == FailureKind::LimitMismatch => {
                    report.error("config", &e);
                    break Err(Ending::Config);
                }
                Err(e) => {
                    report.error("unavailable", &e);
                    break Err(Ending::Unavailable);
                }
            }
        };
        report.waiting_done();
        result
    }
}

/// The pause before the next attempt on a busy lock: about a second for a waiter that is more
/// than `limit` places from the head (it keeps its place and cannot go first), the backoff
/// for the others (at the head, or not queued at all: Redlock, a queue out of reach).
fn pause_when_busy(holder: &Holder, limit: u32, backoff: &mut Backoff) -> Duration {
    if holder.place > u64::from(limit.max(1)) {
        BEHIND_POLL + backoff.spread(BEHIND_POLL_SPREAD)
    } else {
        backoff.pause()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(place: u64) -> Holder {
        Holder {
            place,
            queued: 10,
            ..Holder::default()
        }
    }

    #[test]
    fn only_the_head_polls_quickly() {
        let mut backoff = Backoff::new(7);
        for _ in 0..50 {
            let behind = pause_when_busy(&at(2), 1, &mut backoff);
            assert!(behind >= BEHIND_POLL, "{behind:?}");
            assert!(behind <= BEHIND_POLL + BEHIND_POLL_SPREAD, "{behind:?}");
            assert!(pause_when_busy(&at(1), 1, &mut backoff) < BEHIND_POLL);
            // Not queued (Redlock): polls as before.
            assert!(pause_when_busy(&at(0), 1, &mut backoff) < BEHIND_POLL);
            // With --limit 3 the first three places may take a permit.
            assert!(pause_when_busy(&at(3), 3, &mut backoff) < BEHIND_POLL);
            assert!(pause_when_busy(&at(4), 3, &mut backoff) >= BEHIND_POLL);
        }
    }

    #[test]
    fn a_place_outlives_the_longest_pause() {
        let longest_pause = BEHIND_POLL + BEHIND_POLL_SPREAD;
        assert!(PLACE_KEPT_BEYOND_AN_ATTEMPT > longest_pause + Duration::from_millis(500));
        assert!(PLACE_KEPT_AT_LEAST > longest_pause + Duration::from_millis(500));
    }
}
