//! [`LeaseKeeper`]: renews the lease on its heartbeat and says when it can no longer be
//! trusted.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::lease::{Lease, Stamp, Standing};
use crate::lock::{Lock, RedisFailure, Renewal, ReplicaAck, Token};
use crate::report::Reporter;

use super::outcome::LeaseEnd;
use super::shared::{Held, RENEW_RETRY, Run, earliest};

type RenewalFuture<'a> = Pin<Box<dyn Future<Output = Result<Renewal, RedisFailure>> + 'a>>;

/// Where the renewals stand: one state, so that a renewal can never be both due and under
/// way, nor start once the lease has ended.
enum Renewals<'a> {
    /// The next renewal starts at this moment (`None`: never, past the clock's range).
    Due(Option<Stamp>),
    /// A renewal is on its way; its reply is read by [`LeaseKeeper::reply`].
    Sent(RenewalFuture<'a>),
    /// The lease could not be kept; renewals have stopped, for good.
    Ended(LeaseEnd),
}

/// Keeps the lease: schedules renewals, reads their replies, and says when the lease can no
/// longer be trusted. It never touches the command; the supervisor acts on what it says.
pub(super) struct LeaseKeeper<'a, L: Lock> {
    lock: &'a L,
    token: &'a Token,
    ttl: Duration,
    heartbeat: Duration,
    lease: Lease,
    /// The longest one renewal attempt may take.
    attempt: Duration,
    renewals: Renewals<'a>,
    last_error: String,
    /// When a failed renewal was last reported.
    last_said: Option<Stamp>,
}

impl<'a, L: Lock> LeaseKeeper<'a, L> {
    pub(super) fn new(run: Run<'a, L>, token: &'a Token, held: &Held) -> Self {
        let cfg = run.cfg;
        LeaseKeeper {
            lock: run.lock,
            token,
            ttl: cfg.ttl,
            heartbeat: cfg.heartbeat,
            lease: held.lease,
            attempt: (cfg.ttl / 4).max(Duration::from_millis(50))
                + ReplicaAck::wait_time(cfg.replicas),
            // Heartbeats count from the acquire's send time, like the lease they extend.
            renewals: Renewals::Due(held.counted_from.checked_add(cfg.heartbeat)),
            last_error: String::from("no renewal was answered in time"),
            last_said: None,
        }
    }

    pub(super) fn deadline(&self) -> Stamp {
        self.lease.deadline()
    }

    /// Why the lease could not be kept, once that is so.
    pub(super) fn ended(&self) -> Option<&LeaseEnd> {
        match &self.renewals {
            Renewals::Ended(end) => Some(end),
            _ => None,
        }
    }

    pub(super) fn into_ended(self) -> Option<LeaseEnd> {
        match self.renewals {
            Renewals::Ended(end) => Some(end),
            _ => None,
        }
    }

    /// The last renewal error (or that none was answered in time).
    pub(super) fn last_error(&self) -> &str {
        &self.last_error
    }

    /// Where the lease stands now, reported only the first time it is no longer safe
    /// (`None` once the lease has ended for any reason).
    pub(super) fn check(&mut self, now: Stamp) -> Option<Standing> {
        if self.ended().is_some() {
            return None;
        }
        let standing = self.lease.standing(now);
        if standing != Standing::Safe {
            self.renewals = Renewals::Ended(LeaseEnd::Unconfirmed(self.last_error.clone()));
        }
        Some(standing)
    }

    /// Continued after a suspension: whether the lease ran out meanwhile (it then ends here,
    /// unconfirmed because of the suspension).
    pub(super) fn expired_while_suspended(&mut self, now: Stamp) -> bool {
        if self.ended().is_some() || self.lease.standing(now) != Standing::Expired {
            return false;
        }
        self.last_error = "the job was suspended longer than its lease".to_owned();
        self.check(now);
        true
    }

    pub(super) fn start_renewal_if_due(&mut self, now: Stamp) {
        if let Renewals::Due(Some(at)) = self.renewals
            && now >= at
        {
            // Bounded so that it never outlives the time the lease still allows, and
            // short enough that an attempt lost on a dead connection is given up and
            // retried on a new one (the connection is dropped with it) well before that.
            let within = now
                .until(self.lease.stop_at())
                .min(self.attempt)
                .max(Duration::from_millis(10));
            let (lock, token, ttl) = (self.lock, self.token, self.ttl);
            self.renewals = Renewals::Sent(Box::pin(lock.renew(token, ttl, within)));
        }
    }

    pub(super) fn renewing(&self) -> bool {
        matches!(self.renewals, Renewals::Sent(_))
    }

    /// The reply of the renewal under way. Only polled while `renewing()`.
    pub(super) async fn reply(&mut self) -> Result<Renewal, RedisFailure> {
        match &mut self.renewals {
            Renewals::Sent(renewal) => renewal.await,
            _ => std::future::pending().await,
        }
    }

    /// Take in the reply of the renewal that was under way. Returns `Some(Lost)` when the lock
    /// turned out to be gone.
    pub(super) fn on_reply(
        &mut self,
        reply: Result<Renewal, RedisFailure>,
        report: &Reporter,
    ) -> Option<LeaseEnd> {
        match reply {
            Ok(Renewal::Renewed { counted_from }) => {
                self.lease.renewed(counted_from);
                self.renewals = Renewals::Due(counted_from.checked_add(self.heartbeat));
                report.info("renewed", format_args!("renewed {}", self.lock.name()));
                None
            }
            Ok(Renewal::Lost) => {
                if matches!(self.renewals, Renewals::Ended(LeaseEnd::Lost)) {
                    return None;
                }
                self.renewals = Renewals::Ended(LeaseEnd::Lost);
                Some(LeaseEnd::Lost)
            }
            Err(e) => {
                let why = e.to_string();
                // Retries come every RENEW_RETRY; say so once a second, or when the reason
                // changes, not ten times a second.
                let now = Stamp::now();
                let repeat = why == self.last_error
                    && self
                        .last_said
                        .is_some_and(|at| now.since(at) < Duration::from_secs(1));
                if !repeat {
                    report.info(
                        "renew-failed",
                        format_args!("renewal failed: {why}; retrying"),
                    );
                    self.last_said = Some(now);
                }
                self.last_error = why;
                self.renewals = Renewals::Due(Stamp::now().checked_add(RENEW_RETRY));
                None
            }
        }
    }

    /// The next moment the keeper must act: a renewal, or the start of the last --grace.
    pub(super) fn next_due(&self) -> Option<Stamp> {
        let renewal = match self.renewals {
            Renewals::Ended(_) => return None,
            Renewals::Due(at) => at,
            Renewals::Sent(_) => None,
        };
        earliest(renewal, Some(self.lease.stop_at()))
    }
}
