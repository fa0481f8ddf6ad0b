//! [`LeaseKeeper`]: renews the lease on its heartbeat and says when it can no longer be
//! trusted.
//!
//! **Hedged, never abandoned.** A renewal that has not been answered after `hedge_after`
//! (a quarter of the ttl, plus the replica wait) is not given up: a second attempt starts, on
//! a connection of its own (`Server` never queues a call behind one still waiting), while the
//! first may still answer, and whichever answers counts, from its own send time. So a slow
//! link (replies that take up to a third of the ttl) keeps the lease, and a connection that
//! died silently is still replaced in time: the attempt on it is dropped once a later one
//! answers. Attempts sent after the one that answered stay under way (their replies extend
//! the lease further); older ones are dropped, with their connections. At most
//! [`MAX_ATTEMPTS`] are under way; each is bounded by the moment its own lease would have
//! to be stopped (a later reply keeps nothing), and the command is stopped `--grace` before
//! the current lease's deadline whatever is under way.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::lease::{Lease, Stamp, Standing};
use crate::lock::{Confirmed, Lock, RedisFailure, Renewal, ReplicaAck, Token};
use crate::report::Reporter;

use super::outcome::LeaseEnd;
use super::shared::{Held, RENEW_RETRY, Run, earliest};

type RenewalFuture<'a> = Pin<Box<dyn Future<Output = Result<Renewal, RedisFailure>> + 'a>>;

/// Renewal attempts under way at most: the oldest is dropped when a hedge would exceed it.
const MAX_ATTEMPTS: usize = 3;

/// Where the renewals stand: one state, so that a renewal can never be both due and under
/// way, nor start once the lease has ended.
enum Renewals<'a> {
    /// The next renewal starts at this moment (`None`: never, past the clock's range).
    Due(Option<Stamp>),
    /// Renewal attempts are on their way; their replies are read by [`LeaseKeeper::reply`].
    Sent(InFlight<'a>),
    /// The lease could not be kept; renewals have stopped, for good.
    Ended(LeaseEnd),
}

/// The renewal attempts under way, oldest first (never none), and when the next starts if
/// none has answered by then.
struct InFlight<'a> {
    attempts: Vec<(Stamp, RenewalFuture<'a>)>,
    hedge_at: Option<Stamp>,
}

/// Keeps the lease: schedules renewals, reads their replies, and says when the lease can no
/// longer be trusted. It never touches the command; the supervisor acts on what it says.
pub(super) struct LeaseKeeper<'a, L: Lock> {
    lock: &'a L,
    token: &'a Token,
    ttl: Duration,
    heartbeat: Duration,
    lease: Lease,
    /// How long a renewal attempt goes unanswered before another one starts beside it.
    hedge_after: Duration,
    /// The bound of each attempt: from its send time to the moment the lease it would give
    /// must be stopped (`ttl - drift - grace`); a later reply keeps nothing.
    attempt_bound: Duration,
    renewals: Renewals<'a>,
    last_error: String,
    /// When a failed renewal was last reported.
    last_said: Option<Stamp>,
    /// Redlock: the masters that do not confirm renewals, by name, as last told (those that
    /// did not grant the lock were told at the start).
    not_confirming: Vec<String>,
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
            hedge_after: (cfg.ttl / 4).max(Duration::from_millis(50))
                + ReplicaAck::wait_time(cfg.replicas),
            attempt_bound: cfg
                .ttl
                .saturating_sub(crate::lease::drift(cfg.ttl))
                .saturating_sub(cfg.grace)
                .max(Duration::from_millis(10)),
            // Heartbeats count from the acquire's send time, like the lease they extend.
            renewals: Renewals::Due(held.counted_from.checked_add(cfg.heartbeat)),
            last_error: String::from("no renewal was answered in time"),
            last_said: None,
            not_confirming: held.absent.clone(),
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
        match &mut self.renewals {
            Renewals::Due(Some(at)) if now >= *at => {
                let first = self.attempt();
                self.renewals = Renewals::Sent(InFlight {
                    attempts: vec![(now, first)],
                    hedge_at: now.checked_add(self.hedge_after),
                });
            }
            Renewals::Sent(flight) if flight.hedge_at.is_some_and(|at| now >= at) => {
                // Unanswered for hedge_after: another attempt, on a connection of its own,
                // while the others may still answer.
                if flight.attempts.len() >= MAX_ATTEMPTS {
                    // Dropped: abandoned, with its connection.
                    drop(flight.attempts.remove(0));
                }
                flight.hedge_at = now.checked_add(self.hedge_after);
                let (lock, token, ttl) = (self.lock, self.token, self.ttl);
                let within = self.attempt_bound;
                flight
                    .attempts
                    .push((now, Box::pin(lock.renew(token, ttl, within))));
            }
            _ => {}
        }
    }

    /// One renewal attempt. Its bound is its own lease's stop moment, not the current
    /// lease's: an earlier attempt that answers meanwhile moves the latter. (A hedge, not
    /// this bound, replaces a connection that went silent; the command is stopped at the
    /// current lease's stop moment whatever is under way.)
    fn attempt(&self) -> RenewalFuture<'a> {
        let (lock, token, ttl) = (self.lock, self.token, self.ttl);
        Box::pin(lock.renew(token, ttl, self.attempt_bound))
    }

    pub(super) fn renewing(&self) -> bool {
        matches!(self.renewals, Renewals::Sent(_))
    }

    /// The first reply of the renewal attempts under way. Only polled while `renewing()`.
    /// The attempt that answered is taken out here, so a reply is never read twice.
    pub(super) async fn reply(&mut self) -> Result<Renewal, RedisFailure> {
        let Renewals::Sent(flight) = &mut self.renewals else {
            return std::future::pending().await;
        };
        std::future::poll_fn(|cx| {
            let ready = flight
                .attempts
                .iter_mut()
                .enumerate()
                .find_map(|(i, (_, attempt))| match attempt.as_mut().poll(cx) {
                    Poll::Ready(reply) => Some((i, reply)),
                    Poll::Pending => None,
                });
            match ready {
                Some((i, reply)) => {
                    let (sent, _) = flight.attempts.remove(i);
                    // Attempts sent before this one are superseded: their replies would
                    // count from earlier. Later ones go on.
                    if reply.is_ok() {
                        flight.attempts.retain(|(at, _)| *at > sent);
                    }
                    Poll::Ready(reply)
                }
                None => Poll::Pending,
            }
        })
        .await
    }

    /// Take in a reply of the renewal attempts under way. Returns `Some(Lost)` when the lock
    /// turned out to be gone.
    pub(super) fn on_reply(
        &mut self,
        reply: Result<Renewal, RedisFailure>,
        report: &Reporter,
    ) -> Option<LeaseEnd> {
        match reply {
            Ok(Renewal::Renewed {
                counted_from,
                nodes,
            }) => {
                self.lease.renewed(counted_from);
                report.info("renewed", format_args!("renewed {}", self.lock.name()));
                if let Some(nodes) = nodes {
                    self.tell_nodes(&nodes, report);
                }
                // Later attempts still under way count as the next renewal.
                if !matches!(&self.renewals, Renewals::Sent(flight) if !flight.attempts.is_empty())
                {
                    self.renewals = Renewals::Due(counted_from.checked_add(self.heartbeat));
                }
                None
            }
            Ok(Renewal::Lost(broken)) => {
                if matches!(self.renewals, Renewals::Ended(LeaseEnd::Lost(_))) {
                    return None;
                }
                self.renewals = Renewals::Ended(LeaseEnd::Lost(broken.clone()));
                Some(LeaseEnd::Lost(broken))
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
                let retry = now.checked_add(RENEW_RETRY);
                match &mut self.renewals {
                    // Others are under way: the next one starts soon beside them.
                    Renewals::Sent(flight) if !flight.attempts.is_empty() => {
                        flight.hedge_at = earliest(flight.hedge_at, retry);
                    }
                    _ => self.renewals = Renewals::Due(retry),
                }
                None
            }
        }
    }

    /// Redlock: a master that stops confirming renewals while the others keep the lock is
    /// told once (one more such failure could lose it), as one that is down at the start;
    /// one that confirms them again, once too. Each change of a master is one line.
    fn tell_nodes(&mut self, nodes: &Confirmed, report: &Reporter) {
        let key = self.lock.name();
        for (name, why) in &nodes.missing {
            if !self.not_confirming.contains(name) {
                report.degraded(format_args!(
                    "a Redlock master stopped confirming renewals of {key}: {why}; the lock is \
                     renewed on {}",
                    nodes.tally
                ));
                self.not_confirming.push(name.clone());
            }
        }
        for name in &nodes.confirmed {
            if let Some(i) = self.not_confirming.iter().position(|n| n == name) {
                report.recovered(format_args!(
                    "Redlock master {name} confirms renewals of {key} again; the lock is \
                     renewed on {}",
                    nodes.tally
                ));
                self.not_confirming.remove(i);
            }
        }
    }

    /// The next moment the keeper must act: a renewal, or the start of the last --grace.
    pub(super) fn next_due(&self) -> Option<Stamp> {
        let renewal = match &self.renewals {
            Renewals::Ended(_) => return None,
            Renewals::Due(at) => *at,
            Renewals::Sent(flight) => flight.hedge_at,
        };
        earliest(renewal, Some(self.lease.stop_at()))
    }
}
